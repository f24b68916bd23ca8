"""The image pull's arithmetic and its messages (pure); the pull itself runs in tests/docker/test_image_pull.py."""

from __future__ import annotations

import asyncio
import threading

import docker as docker_py
import pytest
import requests
from traitlets.config import Config

from jupyterhub_gpu.spawners.docker.pull import (
    PullProgress,
    format_bytes,
    in_thread,
    prepull_order,
    pull_phrase,
    registry_error,
    split_image,
)
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner, prepulls
from jupyterhub_gpu.spawners.profiles import parse_profiles
from jupyterhub_gpu.spawners.startup import check_config, config_probe

IMAGE = "127.0.0.1:9050/h2pull:1"

#: The events of a real ``docker pull`` of a six-layer image whose first three layers were on the host
#: (docker-py's ``pull(stream=True, decode=True)`` against Debian's docker-registry; repeated lines left out).
EVENTS = [
    {"status": "Pulling from h2pull", "id": "1"},
    {"status": "Already exists", "progressDetail": {}, "id": "7335cf7d97aa"},
    {"status": "Already exists", "progressDetail": {}, "id": "60bd74dbe0db"},
    {"status": "Already exists", "progressDetail": {}, "id": "631800beae11"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "54fea0045eb9"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "ad897a84f168"},
    {"status": "Waiting", "progressDetail": {}, "id": "dcc2d12ba959"},
    {"status": "Downloading", "progressDetail": {"current": 36445, "total": 3001195}, "id": "54fea0045eb9"},
    {"status": "Downloading", "progressDetail": {"current": 1536445, "total": 3001195}, "id": "54fea0045eb9"},
    {"status": "Downloading", "progressDetail": {"current": 36445, "total": 3001192}, "id": "ad897a84f168"},
    {"status": "Verifying Checksum", "progressDetail": {}, "id": "ad897a84f168"},
    {"status": "Download complete", "progressDetail": {}, "id": "ad897a84f168"},
    {"status": "Extracting", "progressDetail": {"current": 32768, "total": 3001192}, "id": "ad897a84f168"},
    {"status": "Pull complete", "progressDetail": {}, "id": "ad897a84f168"},
    {"status": "Downloading", "progressDetail": {"current": 32768, "total": 3001197}, "id": "dcc2d12ba959"},
    {"status": "Download complete", "progressDetail": {}, "id": "54fea0045eb9"},
    {"status": "Download complete", "progressDetail": {}, "id": "dcc2d12ba959"},
    {"status": "Pull complete", "progressDetail": {}, "id": "54fea0045eb9"},
    {"status": "Pull complete", "progressDetail": {}, "id": "dcc2d12ba959"},
    {"status": "Digest: sha256:f970e62075ff92de5402b0687a90829c2dd40a46af5aa04b8440c5802ee2b241"},
    {"status": "Status: Downloaded newer image for 127.0.0.1:9050/h2pull:1"},
]


def progress_after(n: int) -> PullProgress:
    progress = PullProgress()
    for event in EVENTS[:n]:
        progress.update(event)
    return progress


def test_layers_and_bytes_follow_the_pull_stream():
    assert (progress_after(1).layers_total, progress_after(1).bytes_total) == (0, 0)  # the tag's line is no layer
    p = progress_after(7)  # three layers there already, three announced: nothing downloading yet
    assert (p.layers_done, p.layers_total, p.bytes_done, p.bytes_total) == (3, 6, 0, 0)
    p = progress_after(9)  # the first download's size is known, half of it is here
    assert (p.layers_done, p.layers_total, p.bytes_done, p.bytes_total) == (3, 6, 1536445, 3001195)
    p = progress_after(12)  # the second layer downloaded whole: its full size counts, not its last report
    assert (p.layers_done, p.bytes_done, p.bytes_total) == (3, 1536445 + 3001192, 3001195 + 3001192)
    p = progress_after(14)  # extracted: done
    assert p.layers_done == 4
    p = progress_after(len(EVENTS))
    assert (p.layers_done, p.layers_total) == (6, 6)
    assert p.bytes_done == p.bytes_total == 3001195 + 3001192 + 3001197
    assert p.error is None


def test_odd_events_change_nothing_and_a_report_never_exceeds_the_layer_size():
    p = progress_after(9)
    before = (p.layers_done, p.layers_total, p.bytes_done, p.bytes_total)
    for odd in (None, "text", [], {}, {"status": "Downloading"}, {"id": "54fea0045eb9", "status": "Waiting"}):
        p.update(odd)
    assert (p.layers_done, p.layers_total, p.bytes_done, p.bytes_total) == before
    p.update({"status": "Downloading", "progressDetail": {"current": 10**12, "total": 3001195}, "id": "54fea0045eb9"})
    assert p.bytes_done == 3001195 and p.bytes_done <= p.bytes_total


def test_an_error_event_is_kept_in_the_registry_words():
    p = progress_after(9)
    p.update({"errorDetail": {"message": "unauthorized: authentication required"}, "error": "unauthorized"})
    assert p.error == "unauthorized: authentication required"


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (412_000_000, "412 MB"),
        (1_900_000_000, "1.9 GB"),
        (9_999_999, "10.0 MB"),
    ],
)
def test_sizes_are_shown_in_decimal_units_as_docker_shows_them(n, text):
    assert format_bytes(n) == text


def test_the_spawn_page_line_in_both_languages():
    assert str(pull_phrase(IMAGE, PullProgress())) == f"Pulling image {IMAGE}"
    assert str(pull_phrase(IMAGE, progress_after(7))) == f"Pulling image {IMAGE} — 3 of 6 layers"
    line = pull_phrase(IMAGE, progress_after(12))
    assert str(line) == f"Pulling image {IMAGE} — 3 of 6 layers, 4.5 MB of 6.0 MB"
    assert line("zh-CN") == f"正在拉取镜像 {IMAGE} — 已完成 3/6 层，已下载 4.5 MB/6.0 MB"
    # an image name with markup or braces is a value, never the text looked up
    odd = "evil/{done}<b>:1"
    assert str(pull_phrase(odd, progress_after(7))) == "Pulling image evil/{done}<b>:1 — 3 of 6 layers"


def test_registry_errors_are_taken_from_the_stream_and_from_docker_py():
    assert registry_error({"error": "boom"}) == "boom"
    response = requests.Response()
    response.status_code = 404
    error = docker_py.errors.NotFound(
        "404 Client Error", response=response, explanation="manifest for x:nope not found: manifest unknown"
    )
    assert registry_error(error) == "manifest for x:nope not found: manifest unknown"
    assert registry_error(ConnectionError("Connection aborted.")) == "Connection aborted."


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("jupyterhub-gpu/tensorflow:2.15", ("jupyterhub-gpu/tensorflow", "2.15")),
        ("registry:5000/tf", ("registry:5000/tf", "latest")),
        ("registry:5000/tf:2.15", ("registry:5000/tf", "2.15")),
        ("tf@sha256:abc", ("tf", "sha256:abc")),
    ],
)
def test_image_names_split_into_repository_and_tag(image, parts):
    assert split_image(image) == parts


def test_the_default_profile_image_is_pulled_first_and_each_image_once():
    profiles = parse_profiles(
        [
            {"slug": "cpu", "gpu_count": 0, "image": "a:1", "price_per_hour": "0.60"},
            {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": "b:1", "price_per_gpu_hour": "3.00"},
            {"slug": "t4b", "gpu_model": "T4", "gpu_count": 1, "image": "a:1", "price_per_gpu_hour": "3.00"},
            {
                "slug": "big",
                "gpu_model": "T4",
                "gpu_count": 1,
                "image": "c:1",
                "price_per_gpu_hour": "3.00",
                "default": True,
            },
        ]
    )
    assert prepull_order(profiles) == ["c:1", "a:1", "b:1"]


def docker_config(**spawner) -> Config:
    c = Config()
    c.GPUDockerSpawner.gpu_backend = "simulated"
    c.GPUDockerSpawner.profiles = [{"slug": "cpu", "gpu_count": 0, "image": "a:1", "price_per_hour": "0.60"}]
    for name, value in spawner.items():
        setattr(c.GPUDockerSpawner, name, value)
    return c


def test_the_pre_pull_is_on_by_default_and_follows_the_pull_policy():
    assert prepulls(config_probe(docker_config(), GPUDockerSpawner))
    assert not prepulls(config_probe(docker_config(prepull_images=False), GPUDockerSpawner))
    for policy in ("never", "skip", "NEVER"):
        assert not prepulls(config_probe(docker_config(pull_policy=policy), GPUDockerSpawner))
    assert prepulls(config_probe(docker_config(pull_policy="always"), GPUDockerSpawner))
    assert not prepulls(config_probe(docker_config(profiles=lambda spawner: []), GPUDockerSpawner))


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("prepull_images", "no", "prepull_images"),
        ("image_pull_timeout", 0, "image_pull_timeout must be between 0 and one day"),
        ("image_pull_timeout", -5, "image_pull_timeout must be between 0 and one day"),
        ("image_pull_timeout", 10**9, "image_pull_timeout must be between 0 and one day"),
    ],
)
def test_bad_pull_options_stop_the_hub_naming_the_option(option, value, named):
    (problem,) = check_config(docker_config(**{option: value}), GPUDockerSpawner)
    assert problem.startswith("GPUDockerSpawner: ") and named in problem


def test_a_pull_thread_hands_back_its_result_or_its_error_and_never_holds_the_hub_at_exit():
    seen = {}

    def blocking(x):
        seen["thread"] = threading.current_thread()
        return x * 2

    def failing():
        raise ValueError("registry gone")

    async def main():
        assert await in_thread(blocking, 21) == 42
        with pytest.raises(ValueError, match="registry gone"):
            await in_thread(failing)

    asyncio.run(main())
    assert seen["thread"] is not threading.main_thread() and seen["thread"].daemon
