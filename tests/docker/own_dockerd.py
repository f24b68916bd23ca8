"""A dockerd of a test's own, with iptables: Docker enforces the isolated network with iptables rules, and the
shared test dockerd runs with ``--iptables=false`` (scripts/docker-setup.sh). Used by the network isolation
tests and by the doctor's (``own_dockerd``: import the fixture into the test module).
"""

from __future__ import annotations

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


class OwnDockerd:
    """A dockerd of the test's own, with iptables (Docker enforces the isolation with them)."""

    def __init__(self, base: Path):
        self.base = base
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
            "--iptables=true",  # enable_icc=false and internal are iptables rules
            "--ip-forward=false",  # leave the host's forwarding (and its FORWARD policy) alone
            "--userland-proxy=false",
        ]  # fmt: skip
        self.log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
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


@pytest.fixture(scope="module")
def own_dockerd():
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("iptables"):
        pytest.fail("the network isolation test starts its own dockerd: it needs root, dockerd and iptables")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"test image {IMAGE} missing: run `make test-image`")
    # short: the daemon's sockets live under the exec root
    base = Path(tempfile.mkdtemp(prefix="jhgpu-iso-", dir="/tmp"))
    daemon = OwnDockerd(base)
    try:
        daemon.start()
        daemon.load_image(IMAGE)
        yield daemon
    finally:
        for cid in daemon.docker("ps", "-aq", check=False).split():
            daemon.docker("rm", "-f", cid, check=False)
        for net in daemon.docker(
            "network", "ls", "-q", "--filter", "label=jupyterhub-gpu.managed", check=False
        ).split():
            daemon.docker("network", "rm", net, check=False)
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)
