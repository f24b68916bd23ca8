"""A dockerd of a test's own, on its own socket, data root and exec root, with the test image loaded.

``own_dockerd``: with iptables. Docker enforces the isolated network with iptables rules, and the shared test
dockerd runs with ``--iptables=false`` (scripts/docker-setup.sh). Used by the network isolation tests and by
the doctor's (import the fixture into the test module).

``own_plain_dockerd``: without iptables, as the shared one. Used where a test needs an engine that serves no
GPU device requests: the shared engine runs with the stand-in ``nvidia-container-runtime-hook`` on its PATH
(scripts/nvml-sim-setup.sh), so it registers its ``nvidia`` device driver.

Neither has the stand-in hook: each starts with the stand-in driver's ``bin/`` taken off its PATH, so it
registers no ``nvidia`` device driver and a GPU device request fails as on a host without the NVIDIA
Container Toolkit (``could not select device driver "" with capabilities: [[gpu]]``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.docker.test_docker_spawner import IMAGE

#: the stand-in NVIDIA driver's bin/ (scripts/nvml-sim-setup.sh), with its nvidia-container-runtime-hook
#: (docker-setup.sh reads NVML_SIM_ROOT, default /var/lib/jupyterhub-gpu-sim)
NVML_SIM_BINS = {
    os.path.normpath(os.path.join(root, "bin"))
    for root in ("/var/lib/jupyterhub-gpu-sim", os.environ.get("NVML_SIM_ROOT") or "/var/lib/jupyterhub-gpu-sim")
}
#: dockerd registers its nvidia device driver when it finds this on its PATH at start
NVIDIA_HOOK = "nvidia-container-runtime-hook"


def path_without_the_stand_in_hook(path: str) -> str:
    """``path`` less the stand-in driver's bin/ (and empty entries, which mean the working directory)."""
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and os.path.normpath(d) not in NVML_SIM_BINS)


class OwnDockerd:
    """A dockerd of the test's own; with iptables (Docker enforces the isolation with them) unless told not.

    Its PATH lacks the stand-in driver's bin/: it serves no GPU device requests.
    """

    def __init__(self, base: Path, *, iptables: bool = True):
        self.base = base
        self.iptables = iptables
        self.path = path_without_the_stand_in_hook(os.environ.get("PATH", os.defpath))
        self.sock = base / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.log_file = base / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        args = [
            "dockerd",
            "--host", self.host,
            "--data-root", str(self.base / "data"),
            "--exec-root", str(self.base / "exec"),
            "--pidfile", str(self.base / "docker.pid"),
            "--bridge=none",  # no default bridge: only the network the hub creates
            # enable_icc=false and internal are iptables rules
            "--iptables=true" if self.iptables else "--iptables=false",
            "--ip-forward=false",  # leave the host's forwarding (and its FORWARD policy) alone
            "--userland-proxy=false",
        ]  # fmt: skip
        env = dict(os.environ, PATH=self.path)  # no stand-in hook: no nvidia device driver
        self.log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        wait_for(self._up, timeout=60, what=f"the test's own dockerd (log: {self.log_file})")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"dockerd exited: {self.log_file.read_text(errors='replace')[-3000:]}")
        return subprocess.run(["docker", "-H", self.host, "info"], capture_output=True).returncode == 0

    def docker(self, *args: str, check=True, timeout=120, **kwargs) -> str:
        r = subprocess.run(
            ["docker", "-H", self.host, *args], capture_output=True, text=True, timeout=timeout, **kwargs
        )
        if check and r.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({r.returncode}): {r.stderr[-3000:]}")
        return r.stdout.strip()

    def load_image(self, image: str) -> None:
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", self.host, "load", "-q"], stdin=save.stdout, capture_output=True)
        save.stdout.close()
        assert save.wait(300) == 0 and load.returncode == 0, load.stderr.decode(errors="replace")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def unmount_leftovers(self) -> None:
        """Unmount what the stopped daemon left mounted under its roots (its default netns: exec/netns/default)."""
        prefix = f"{self.base}/"
        points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True).returncode:
                subprocess.run(["umount", "-l", point], capture_output=True)


def unused_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 that no route of this machine touches (another run may hold one)."""
    taken = []
    for line in Path("/proc/net/route").read_text().splitlines()[1:]:
        fields = line.split()
        dest, mask = (ipaddress.IPv4Address(int(f, 16).to_bytes(4, "little")) for f in (fields[1], fields[7]))
        if int(mask):  # the default route (mask 0) touches everything
            taken.append(ipaddress.IPv4Network(f"{dest}/{mask}", strict=False))
    choices = list(range(100, 250))
    random.shuffle(choices)
    for third in choices:
        net = ipaddress.IPv4Network(f"10.213.{third}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise AssertionError("no free /24 in 10.213.0.0/16")


@contextlib.contextmanager
def running_own_dockerd(prefix: str, *, iptables: bool = True, image: str = IMAGE):
    """A dockerd of the test's own with ``image`` loaded; its containers, networks and data removed after."""
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
        pytest.fail(f"test image {image} missing: run `make test-image`")
    # short: the daemon's sockets live under the exec root
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    daemon = OwnDockerd(base, iptables=iptables)
    try:
        daemon.start()
        daemon.load_image(image)
        yield daemon
    finally:
        if daemon.proc is not None:
            for cid in daemon.docker("ps", "-aq", check=False).split():
                daemon.docker("rm", "-f", cid, check=False)
            for net in daemon.docker(
                "network", "ls", "-q", "--filter", "label=jupyterhub-gpu.managed", check=False
            ).split():
                daemon.docker("network", "rm", net, check=False)
            daemon.stop()
            daemon.unmount_leftovers()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def own_dockerd():
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("iptables"):
        pytest.fail("the network isolation test starts its own dockerd: it needs root, dockerd and iptables")
    with running_own_dockerd("jhgpu-iso-") as daemon:
        yield daemon


@pytest.fixture(scope="module")
def own_plain_dockerd():
    """A dockerd of the test's own without iptables (as the shared engine) and without the stand-in NVIDIA hook."""
    if os.geteuid() != 0 or not shutil.which("dockerd"):
        pytest.fail("this test starts a dockerd of its own: it needs root and dockerd")
    with running_own_dockerd("jhgpu-own-", iptables=False) as daemon:
        yield daemon
