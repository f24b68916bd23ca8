"""A hub whose start fails (a managed service that does not come up) leaves no configurable-http-proxy behind."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.hub

GPU_HUB = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.profiles = [{"slug": "cpu", "display_name": "CPU only", "gpu_count": 0, "price_per_hour": "0.60"}]
c.ConfigurableHTTPProxy.pid_file = %(pid_file)r
"""

FAILING_SERVICE = """
c.JupyterHub.services.append(
    {"name": "gpu", "url": "http://127.0.0.1:%(port)d", "command": [%(python)r, "-c", "raise SystemExit(1)"]}
)
"""


def proxies_on(api_port: int) -> list[int]:
    """The pids of the configurable-http-proxy processes whose API listens on ``api_port``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if any(b"configurable-http-proxy" in a for a in args) and b"--api-port" in args:
            if args[args.index(b"--api-port") + 1] == str(api_port).encode():
                found.append(int(entry.name))
    return found


def test_a_service_failing_at_start_leaves_no_proxy_and_the_next_start_works(make_hub, tmp_path):
    first = GPU_HUB % {"pid_file": str(tmp_path / "first.pid")}
    failing = first + FAILING_SERVICE % {"port": free_port(), "python": sys.executable}
    hub = make_hub(failing, start=False)
    try:
        hub.start(wait=False)
        assert hub.proc.wait(90) == 1
        log = hub.log_text()
        assert "Service gpu exited with status 1" in log
        assert proxies_on(hub.proxy_api_port) == [], "the failed hub's proxy still runs"
        assert "the hub did not start; stopping the proxy and the services it started" in log
        assert not (tmp_path / "first.pid").exists()

        # the next start, from elsewhere (the first pid file is not where this one looks): the ports are free
        hub.write_config(GPU_HUB % {"pid_file": str(tmp_path / "second.pid")})
        hub.start()
        assert hub.api("GET", "/users").status_code == 200
        assert "api_request to proxy failed" not in hub.log_text()
        assert len(proxies_on(hub.proxy_api_port)) == 1
    finally:
        if hub.proc.poll() is not None:
            for pid in proxies_on(hub.proxy_api_port):  # only a proxy this test's hub left behind
                os.kill(pid, signal.SIGKILL)


def test_a_hub_port_in_use_leaves_no_proxy_either(make_hub, tmp_path):
    hub = make_hub(GPU_HUB % {"pid_file": str(tmp_path / "proxy.pid")}, start=False)
    taken = socket.socket()  # the hub's own port, taken after the proxy has started on its ports
    taken.bind(("127.0.0.1", hub.hub_port))
    taken.listen(1)
    try:
        hub.start(wait=False)
        assert hub.proc.wait(90) == 1
        assert "Failed to bind hub to" in hub.log_text()
        assert proxies_on(hub.proxy_api_port) == [], "the failed hub's proxy still runs"
    finally:
        taken.close()
        if hub.proc.poll() is not None:
            for pid in proxies_on(hub.proxy_api_port):
                os.kill(pid, signal.SIGKILL)
