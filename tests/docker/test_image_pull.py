"""Images pulled for the students: the hub's start-up pre-pull, a spawn's pull progress, a failed pull's message.

A real registry on loopback (Debian's docker-registry, `make registry-setup`) holds a small image built from the
test image (three layers of its own on top of the test image's), behind a loopback proxy that slows the
registry's answers down until the test has seen the pull under way. The registry's storage stays in
.state/test-registry, so the test image's layers are pushed once per test image build and the image of the
test is the same bytes each run; the image is removed from the engine before each run.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import ROOT, free_port, wait_for
from tests.docker.test_docker_spawner import IMAGE, docker, remove_by_prefix

# one worker for the module: two workers' registry fixtures build the same fixed layers into the one Docker
# engine at once, and a pull then finds them present (0.4 s, no progress to see)
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("image_pull")]

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
STORAGE = ROOT / ".state" / "test-registry"
LAYERS = 3
LAYER_BYTES = 2_500_000


def start_registry(workdir, port: int, storage, auth: bool = False) -> subprocess.Popen:
    """Debian's docker-registry on 127.0.0.1:port (with htpasswd auth and no user known: every pull refused)."""
    workdir.mkdir(parents=True, exist_ok=True)
    auth_block = f"auth:\n  htpasswd:\n    realm: test\n    path: {workdir / 'htpasswd'}\n" if auth else ""
    (workdir / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n{auth_block}"
    )
    log = open(workdir / "registry.log", "ab")
    proc = subprocess.Popen([REGISTRY_BIN, "serve", str(workdir / "config.yml")], stdout=log, stderr=subprocess.STDOUT)

    def up():
        assert proc.poll() is None, (workdir / "registry.log").read_text()[-2000:]
        try:
            return requests.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code in (200, 401)
        except requests.RequestException:
            return False

    wait_for(up, 30, what="the test registry")
    return proc


class SlowProxy:
    """A loopback TCP proxy to the registry whose answers flow at ``rate`` bytes a second (None: at full speed)."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.rate: float | None = 200_000
        self.server = socket.create_server(("127.0.0.1", free_port()))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            threading.Thread(target=self._copy, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._copy, args=(upstream, client, True), daemon=True).start()

    def _copy(self, source, target, slow):
        try:
            while data := source.recv(16384):
                if slow and self.rate:
                    time.sleep(len(data) / self.rate)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.server.close()


def layer_tar(i: int) -> bytes:
    """One layer of the pulled image: ``LAYER_BYTES`` of fixed pseudo-random bytes (the same digest every run)."""
    data, block = bytearray(), hashlib.sha256(f"jupyterhub-gpu-pull-test-{i}".encode()).digest()
    while len(data) < LAYER_BYTES:
        block = hashlib.sha256(block).digest()
        data += block
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for d in ("opt", "opt/jupyterhub-gpu-pull-test"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            t.addfile(info)
        info = tarfile.TarInfo(f"opt/jupyterhub-gpu-pull-test/{i}.bin")
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(bytes(data)))
    return buf.getvalue()


def load_pull_image(tag: str) -> None:
    """Load the test image plus ``LAYERS`` layers of its own as ``tag`` (docker load reuses the base's layers)."""
    info = json.loads(docker("image", "inspect", IMAGE))[0]
    base = info["RootFS"]["Layers"]
    layers = [layer_tar(i) for i in range(LAYERS)]
    config = {
        "architecture": info["Architecture"],
        "os": info["Os"],
        "config": info["Config"],
        "rootfs": {"type": "layers", "diff_ids": base + ["sha256:" + hashlib.sha256(x).hexdigest() for x in layers]},
    }
    manifest = [
        {
            "Config": "config.json",
            "RepoTags": [tag],
            "Layers": [f"base{i}/layer.tar" for i in range(len(base))] + [f"new{i}/layer.tar" for i in range(LAYERS)],
        }
    ]
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as t:
        files = {"config.json": json.dumps(config).encode(), "manifest.json": json.dumps(manifest).encode()}
        files.update({f"new{i}/layer.tar": layer for i, layer in enumerate(layers)})
        for name, content in files.items():
            entry = tarfile.TarInfo(name)
            entry.size = len(content)
            t.addfile(entry, io.BytesIO(content))
    r = subprocess.run(["docker", "load"], input=archive.getvalue(), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """The registry with the test's image in it (absent from the engine), its proxy, and its log."""
    if not Path(REGISTRY_BIN).exists():
        pytest.fail("no docker-registry: run `make registry-setup` (Debian's docker-registry package)")
    workdir = tmp_path_factory.mktemp("registry")
    port = free_port()
    proc = start_registry(workdir, port, STORAGE)
    proxy = SlowProxy(port)
    name = f"127.0.0.1:{proxy.port}/jupyterhub-gpu-test/pulled:1"  # the same registry, through the proxy
    pushed = f"127.0.0.1:{port}/jupyterhub-gpu-test/pulled:1"
    try:
        load_pull_image(pushed)
        docker("push", pushed, timeout=600)  # the first run pushes the test image's layers too (once)
        docker("image", "rm", pushed)
        assert docker("image", "ls", "-q", name) == ""
        yield {"name": name, "proxy": proxy, "port": port, "log": workdir / "registry.log", "workdir": workdir}
    finally:
        proxy.close()
        proc.terminate()
        proc.wait(10)
        docker("image", "rm", name, check=False)


def config(prefix: str, profiles: list[dict], db_url: str) -> str:
    static = [{"index": 0, "uuid": f"GPU-{uuid.UUID(int=11)}", "name": "Tesla T4", "memory_gb": 16}]
    return f"""
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.gpu_backend = "static"
c.GPUDockerSpawner.static_gpus = {static!r}
c.GPUDockerSpawner.omit_device_requests = True
c.GPUDockerSpawner.network_name = "host"
c.GPUDockerSpawner.prefix = {prefix!r}
c.GPUDockerSpawner.work_volume_template = {prefix + "-work-{username}"!r}
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.ledger_db_url = {db_url!r}
c.GPUDockerSpawner.budget_min_minutes = 0
c.GPUDockerSpawner.profiles = {profiles!r}
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
"""


def cpu_profile(slug: str, image: str, **more) -> dict:
    return {"slug": slug, "gpu_count": 0, "image": image, "price_per_hour": "0.60", **more}


class Progress:
    """A spawn's progress events read in a thread as they come (the hub's progress API)."""

    def __init__(self, hub, user: str):
        self.events: list[dict] = []
        self.thread = threading.Thread(target=self._read, args=(hub, user), daemon=True)
        self.thread.start()

    def _read(self, hub, user):
        with hub.api("GET", f"/users/{user}/server/progress", stream=True) as r:
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    self.events.append(json.loads(line[5:]))

    def messages(self) -> list[str]:
        return [e.get("message", "") for e in list(self.events)]


BLOB_GET = re.compile(r"GET /v2/jupyterhub-gpu-test/pulled/blobs/(sha256:[0-9a-f]+)")
PULL_LINE = re.compile(r"Pulling image (\S+) — (\d+) of (\d+) layers, ([\d.]+ [kMG]?B) of ([\d.]+ [kMG]?B)")


@pytest.mark.timeout(300)
def test_the_start_up_pull_is_logged_and_spawns_waiting_on_it_show_its_layers_and_bytes(make_hub, tmp_path, registry):
    prefix = f"jhgpu-pull-{uuid.uuid4().hex[:6]}"
    image, proxy = registry["name"], registry["proxy"]
    proxy.rate = 50_000  # a layer a connection: about 50 s, until the test lets it go
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    profiles = [cpu_profile("fresh", image, default=True), cpu_profile("local", IMAGE)]
    hub = make_hub(config(prefix, profiles, db_url))
    try:
        # the hub is up while its pull goes on; its log says of each image what was done
        log = wait_for(lambda: (t := hub.log_text()) and f"pulling image {image}" in t and t, 30, what="the pull")
        assert f"image {IMAGE}: present" in log
        assert f"image {image}: missing on this Docker host, pulling it in the background" in log
        assert f"image {image}: pulled" not in log

        # two students spawn the image under way: both wait on the same pull, each sees its progress
        hub.create_users("sam", "kim")
        assert hub.start_server("sam", {"profile": "fresh"}).status_code in (201, 202)
        assert hub.start_server("kim", {"profile": "fresh"}).status_code in (201, 202)
        sam, kim = Progress(hub, "sam"), Progress(hub, "kim")
        wait_for(lambda: len([m for m in sam.messages() if PULL_LINE.search(m)]) >= 3, 90, what="sam's pull events")
        wait_for(lambda: any(PULL_LINE.search(m) for m in kim.messages()), 30, what="kim's pull events")
        assert hub.gpu_state("sam") == {}  # nothing started, nothing billed while the image comes
        lines = [PULL_LINE.search(m).groups() for m in sam.messages() if PULL_LINE.search(m)]
        assert {line[0] for line in lines} == {image}
        assert {int(line[2]) for line in lines} == {
            len(json.loads(docker("image", "inspect", IMAGE))[0]["RootFS"]["Layers"]) + LAYERS
        }
        assert len({line[3] for line in lines}) >= 2, lines  # refreshed as the bytes come
        assert all(line[4] in ("7.5 MB", "5.0 MB", "2.5 MB") for line in lines), lines

        # a third one gives up while waiting: the spawn ends at once, the pull goes on for the others
        hub.create_users("ann")
        assert hub.start_server("ann", {"profile": "fresh"}).status_code in (201, 202)
        ann = Progress(hub, "ann")
        wait_for(lambda: any(PULL_LINE.search(m) for m in ann.messages()), 30, what="ann's pull events")
        assert hub.stop_server("ann").status_code in (202, 204)
        hub.wait_stopped("ann", timeout=30)
        assert f"image {image}: pulled in" not in hub.log_text()

        proxy.rate = None  # let the pull finish
        for user in ("sam", "kim"):
            hub.wait_ready(user, timeout=120)
        log = hub.log_text()
        assert re.search(rf"image {re.escape(image)}: pulled in \d+\.\d s", log), log[-3000:]
        assert log.count(f"pulling image {image}") == 1  # one pull for the hub's start and both spawns
        blobs = BLOB_GET.findall(registry["log"].read_text())
        assert len(blobs) == len(set(blobs)) >= LAYERS, blobs  # each layer fetched once
        for progress in (sam, kim):
            assert any(m == f"Pulled image {image}" for m in progress.messages()), progress.messages()
        # the pull came before the session: each is billed from after it
        ledger = Ledger(db_url, migrate=False)
        try:
            assert sorted(s.user for s in ledger.open_sessions()) == ["kim", "sam"]
            assert ledger.sessions(user="ann") == []
        finally:
            ledger.close()
    finally:
        proxy.rate = None
        hub.cleanup()
        remove_by_prefix(prefix)


@pytest.mark.timeout(240)
def test_a_failed_pull_names_the_image_and_the_registry_error_and_starts_nothing(make_hub, tmp_path, registry):
    prefix = f"jhgpu-pull-{uuid.uuid4().hex[:6]}"
    locked = free_port()
    auth = start_registry(registry["workdir"] / "locked", locked, tmp_path / "locked-storage", auth=True)
    images = {
        "typo": (f"127.0.0.1:{registry['port']}/jupyterhub-gpu-test/pulled:no-such-tag", "manifest unknown"),
        "nowhere": (f"127.0.0.1:{free_port()}/jupyterhub-gpu-test/pulled:1", "connection refused"),
        "locked": (f"127.0.0.1:{locked}/jupyterhub-gpu-test/pulled:1", "no basic auth credentials"),
    }
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    profiles = [cpu_profile(slug, image) for slug, (image, _) in images.items()]
    profiles.append({"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": IMAGE, "price_per_gpu_hour": "3.00"})
    hub = make_hub(config(prefix, profiles, db_url))
    try:
        for slug, (image, error) in images.items():
            line = wait_for(
                lambda i=image: [x for x in hub.log_text().splitlines() if f"image {i}: pull failed" in x],
                30,
                what=f"the start-up pull of {slug}",
            )
            assert line[0].startswith("[E ") and error in line[0], line
        hub.create_users("eve")
        for slug, (image, error) in images.items():
            r = hub.start_server("eve", {"profile": slug})
            if r.status_code in (201, 202):
                message = hub.progress_events("eve", lambda e: e.get("failed"), timeout=60)[-1]["message"]
            else:  # failed within the hub's slow_spawn_timeout
                assert r.status_code == 503, r.text
                message = r.json()["message"]
            assert f"Could not pull the image {image}: " in message and error in message, (slug, message)
            hub.wait_stopped("eve")
            assert hub.gpu_state("eve") == {}
        # nothing ran and nothing was billed; the host's GPU is free for an image that is there
        assert docker("ps", "-aq", "--filter", f"name={prefix}") == ""
        ledger = Ledger(db_url, migrate=False)
        try:
            assert ledger.sessions(user="eve") == []
        finally:
            ledger.close()
        assert hub.start_server("eve", {"profile": "t4"}).status_code in (201, 202)
        assert len(hub.wait_ready("eve", timeout=120)["state"]["gpu"]["devices"]) == 1
        assert "Unhandled error" not in hub.log_text()
    finally:
        hub.cleanup()
        remove_by_prefix(prefix)
        auth.terminate()
        auth.wait(10)
