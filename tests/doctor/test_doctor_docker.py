"""``jupyterhub-gpu doctor`` against the real test dockerd: the reference Docker config on this machine
(no NVIDIA), images missing or without what a server needs, a network that does not isolate.

Run with ``-m docker`` (make test starts dockerd and builds the test image).
"""

from __future__ import annotations

import textwrap
import uuid
from collections import Counter

import pytest

from tests.conftest import ROOT, free_port, wait_for
from tests.docker.test_docker_spawner import IMAGE as TEST_IMAGE  # jupyterhub, no jupyterlab, no jupyterhub-gpu
from tests.docker.test_docker_spawner import docker, engine, try_gpu_request  # noqa: F401 (engine: fails the module without dockerd)
from tests.doctor.conftest import REFERENCE

ADMIN_DOC = ROOT / "docs" / "admin.md"

pytestmark = pytest.mark.docker

MISSING = f"jupyterhub-gpu/doctor-missing-{uuid.uuid4().hex[:8]}:1"


def docker_config(profiles: str, network: str = 'c.GPUDockerSpawner.network_name = "host"') -> str:
    """The demo config's hub and service, with Docker servers, a static inventory and these profiles."""
    return (
        textwrap.dedent(
            f"""
            c.JupyterHub.spawner_class = "gpu-docker"
            c.GPUDockerSpawner.ledger_db_url = ledger_url
            c.GPUDockerSpawner.gpu_service_url = c.GPULocalSpawner.gpu_service_url
            c.GPUDockerSpawner.gpu_backend = "static"
            c.GPUDockerSpawner.static_gpus = [{{"index": 0, "uuid": "GPU-1111", "name": "Tesla T4", "memory_gb": 16}}]
            c.GPUDockerSpawner.currency = "CNY"
            c.GPUDockerSpawner.budget_timezone = "Asia/Shanghai"
            c.GPUDockerSpawner.profiles = {profiles}
            """
        )
        + network
        + "\n"
    )


def gpu_requests_work() -> bool:
    """Whether the test dockerd serves a GPU device request (a stand-in NVIDIA hook on its PATH may make it so)."""
    return try_gpu_request(image=TEST_IMAGE).returncode == 0


def test_the_reference_docker_config_on_this_machine_without_nvidia(doctor):
    """The lines docs/admin.md shows: what a host without NVIDIA and the built image gets, exactly."""
    # the public and the proxy API's ports moved to free ones: another JupyterHub on this machine (a developer's
    # demo on 8000/8001) would make the doctor skip or fail its port checks, which is not the config's doing
    bind, api = free_port(), free_port()
    moved = f'c.JupyterHub.bind_url = "http://:{bind}"\nc.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api}"\n'
    report = doctor.run(doctor.config(moved, base=REFERENCE))
    assert report.status == 1
    not_pass = [(r["check"], r["status"]) for r in report.results if r["status"] != "pass"]
    image_missing = not docker("images", "-q", "jupyterhub-gpu/tensorflow:2.15")
    gpu_ok = gpu_requests_work()
    cpus, memory = (int(n) for n in docker("info", "--format", "{{.NCPU}} {{.MemTotal}}").split())
    # the reference profiles: t4 4 CPUs 16G, a100 8 CPUs 64G, cpu 2 CPUs 4G
    over_limits = sum(
        [4 > cpus, 16 * 1024**3 > memory, 8 > cpus, 64 * 1024**3 > memory, 2 > cpus, 4 * 1024**3 > memory]
    )
    expected = [
        ("hub-files", "fail"),  # c.JupyterHub.db_url: /srv/jupyterhub does not exist here
        ("hub-files", "fail"),  # c.JupyterHub.cookie_secret_file: the same folder
        ("gpus", "fail"),  # NVML: no driver here
        *[("limits", "warn")] * over_limits,  # the profiles' cpu_limit/mem_limit above this small machine
        *([] if gpu_ok else [("nvidia-runtime", "fail")]),  # runc only (unless a stand-in hook serves GPUs)
        ("network", "fail"),  # the test dockerd runs with --iptables=false: servers would reach each other
        ("datasets", "fail"),  # /srv/datasets does not exist here
        *([("images", "fail")] if image_missing else []),  # jupyterhub-gpu/tensorflow:2.15 not built here
        ("ledger", "fail"),  # /srv/jupyterhub does not exist here
        ("alerts", "warn"),  # no channel configured
        ("ports", "warn"),  # 10.213.0.1 (hub_ip): the network's gateway, made at the hub's start
        ("ports", "warn"),  # 10.213.0.1 (the service's url)
    ]
    assert not_pass == expected, report.stdout
    assert "NVML could not start" in report.one("gpus", "fail")["message"]
    if not gpu_ok:
        assert "nvidia-ctk runtime configure" in report.one("nvidia-runtime", "fail")["fix"]
    assert "mkdir -p /srv/jupyterhub" in report.one("ledger", "fail")["fix"]
    assert "mkdir -p /srv/datasets" in report.one("datasets", "fail")["fix"]
    assert "does not exist yet: the hub creates it" in report.one("network", "pass")["message"]
    isolation = report.one("network", "fail")
    assert "--iptables=false" in isolation["message"] and "iptables enabled" in isolation["fix"]
    assert [r["message"].split()[0] for r in report.of("ports") if r["status"] == "warn"] == [
        "10.213.0.1:8081",
        "10.213.0.1:10101",
    ]
    assert [r["message"] for r in report.of("ports") if r["status"] == "pass"] == [
        f"*:{bind} free (c.JupyterHub.bind_url)",
        f"127.0.0.1:{api} free (c.ConfigurableHTTPProxy.api_url, hub-only)",
    ]
    # docs/admin.md shows this run: the same lines, check by check (its NVIDIA line is a host without the runtime)
    shown = ADMIN_DOC.read_text().split("$ jupyterhub-gpu doctor -f config/docker_host_config.py\n", 1)[1]
    shown = shown.split("```", 1)[0].splitlines()
    as_shown = ["FAIL" if r["check"] == "nvidia-runtime" else r["status"].upper() for r in report.results]
    assert [tuple(line.split()[:2]) for line in shown[:-1]] == [
        (status, r["check"]) for status, r in zip(as_shown, report.results, strict=True)
    ]
    counts = Counter(status.lower() for status in as_shown)
    assert shown[-1] == ", ".join(f"{counts[s]} {s}" for s in ("pass", "warn", "fail", "skip") if counts[s])


def test_a_missing_image_fails_naming_it_and_its_profiles(doctor):
    profiles = repr(
        [
            {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": MISSING, "price_per_gpu_hour": "3.00"},
            {"slug": "cpu", "gpu_count": 0, "image": MISSING, "price_per_hour": "0.60"},
        ]
    )
    report = doctor.run(doctor.config(docker_config(profiles)))
    assert report.status == 1
    line = report.one("images", "fail")
    assert f"image {MISSING} (profiles t4, cpu) is not on this Docker host" in line["message"]
    assert f"docker pull {MISSING}" in line["fix"] and "make image" in line["fix"]


def test_an_image_without_jupyterlab_and_jupyterhub_gpu_is_named_with_what_breaks(doctor):
    profiles = repr(
        [{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": TEST_IMAGE, "price_per_gpu_hour": "3.00"}]
    )
    report = doctor.run(doctor.config(docker_config(profiles)))
    assert report.status == 1
    lab = [r for r in report.of("images") if "has no jupyterlab" in r["message"]]
    assert len(lab) == 1 and lab[0]["status"] == "fail"  # the demo config's default_url is /lab: a 404
    assert "default_url = '/lab'" in lab[0]["message"]
    gpu = [r for r in report.of("images") if "has no jupyterhub-gpu" in r["message"]]
    assert len(gpu) == 1 and gpu[0]["status"] == "fail"
    assert "install jupyterhub-gpu in the image" in gpu[0]["fix"]
    assert not [r for r in report.of("images") if "has no jupyterhub:" in r["message"]]  # jupyterhub is there
    # the probe container is gone (removed before the doctor answers; a busy engine is given a few seconds)
    wait_for(lambda: docker("ps", "-aq", "--filter", "label=jupyterhub-gpu.doctor") == "", 10, what="no probe left")
    if not gpu_requests_work():
        assert "nvidia-ctk" in report.one("nvidia-runtime", "fail")["fix"]  # a GPU profile on a host without it


def test_a_network_that_lets_servers_reach_each_other_fails(doctor):
    name = f"jhgpu-doctor-{uuid.uuid4().hex[:6]}"
    docker("network", "create", "--driver", "bridge", "--subnet", "10.213.91.0/24", name)
    try:
        profiles = (
            '[{"slug": "cpu", "gpu_count": 0, "image": "jupyterhub-gpu/test-singleuser:latest",'
            ' "price_per_hour": "0.60"}]'
        )
        network = f'c.GPUDockerSpawner.network_name = {name!r}\nc.GPUDockerSpawner.network_subnet = "10.213.91.0/24"'
        report = doctor.run(doctor.config(docker_config(profiles, network)))
    finally:
        docker("network", "rm", name, check=False)
    [line] = [r for r in report.of("network") if "lets containers reach each other" in r["message"]]
    assert line["status"] == "fail"
    assert f"docker network rm {name}" in line["fix"]


def test_a_hub_on_loopback_with_servers_on_a_docker_network_fails(doctor):
    profiles = f'[{{"slug": "cpu", "gpu_count": 0, "image": {TEST_IMAGE!r}, "price_per_hour": "0.60"}}]'
    network = (
        'c.GPUDockerSpawner.network_name = "jhgpu-doctor-absent"\nc.GPUDockerSpawner.network_subnet = "10.213.92.0/24"'
    )
    report = doctor.run(doctor.config(docker_config(profiles, network)))  # the demo's hub_ip is 127.0.0.1
    failed = [r for r in report.of("network") if r["status"] == "fail" and "their own loopback" in r["message"]]
    assert [r["message"].split("put ")[1].split(" on ")[0] for r in failed] == [
        "c.JupyterHub.hub_ip",
        "c.GPUDockerSpawner.gpu_service_url",
    ]
    assert all("cannot reach 127.0.0.1 (their own loopback)" in r["message"] for r in failed)
    assert "does not exist yet: the hub creates it on 10.213.92.0/24" in report.one("network", "pass")["message"]
    assert docker("network", "ls", "-q", "--filter", "name=jhgpu-doctor-absent") == ""  # not made by the doctor


def test_docker_unreachable_fails_once_and_skips_the_image_check(doctor):
    profiles = f'[{{"slug": "cpu", "gpu_count": 0, "image": {TEST_IMAGE!r}, "price_per_hour": "0.60"}}]'
    doctor.env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"  # the command in a process of its own
    done = doctor.command(doctor.config(docker_config(profiles)))
    assert done.returncode == 1
    [line] = [line for line in done.stdout.splitlines() if line.startswith("FAIL  docker")]
    assert "cannot reach the Docker engine" in line and "fix: start dockerd" in line
    [images] = [line for line in done.stdout.splitlines() if " images " in line]
    assert images.startswith("SKIP") and "Docker is not reachable" in images
