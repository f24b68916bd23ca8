"""The doctor's port check: what the hub, its proxy and the gpu service listen on is free (before the hub runs)."""

from __future__ import annotations

import errno
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlparse

from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, SKIP, WARN, Result
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _hub_answers(bind_url: str, timeout: float) -> str | None:
    """The running hub's version at its public URL, or None when no hub answers there."""
    url = urlparse(bind_url)
    host = url.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    base = f"{url.scheme}://{host}:{url.port or 80}{url.path.rstrip('/')}"
    try:
        with urllib.request.urlopen(f"{base}/hub/api/", timeout=min(timeout, 3)) as answer:
            return str(json.loads(answer.read()).get("version"))
    except (OSError, ValueError, urllib.error.URLError, AttributeError):
        return None


def _listen_addresses(setup: Setup) -> list[tuple[str, str, int]]:
    """(setting, host, port) of what the hub, its proxy and the gpu service listen on."""
    hub = setup.hub
    bind = urlparse(hub.bind_url)
    found = [("c.JupyterHub.bind_url", bind.hostname or "", bind.port or 80)]
    found.append(("c.JupyterHub.hub_ip and hub_port, hub-only", hub.hub_ip or "", hub.hub_port))
    proxy = hub.config.get("ConfigurableHTTPProxy", {})
    if proxy.get("should_start", True) and hub.proxy_class.__name__ == "ConfigurableHTTPProxy":
        api = urlparse(proxy.get("api_url") or "http://127.0.0.1:8001")  # JupyterHub's default
        found.append(("c.ConfigurableHTTPProxy.api_url, hub-only", api.hostname or "127.0.0.1", api.port or 8001))
    service_url = (setup.service_spec or {}).get("url")
    if service_url and (setup.service_spec or {}).get("command"):
        url = urlparse(service_url)
        found.append(("the gpu service's url in c.JupyterHub.services", url.hostname or "", url.port or 80))
    return found


def port_problem(host: str, port: int) -> tuple[str, int] | None:
    """Why ``host:port`` cannot be bound now (what, errno), or None when it is free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT does not count
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror or str(e), e.errno
    return None


def check_ports(setup: Setup) -> Iterator[Result]:
    """The hub's, the proxy API's and the service's ports are free (checked only while the hub is stopped)."""
    hub = setup.need_hub()
    running = _hub_answers(hub.bind_url, setup.timeout)
    if running:
        yield Result(
            "ports", SKIP, f"a JupyterHub {running} answers at {hub.bind_url}: ports are checked before it starts"
        )
        return
    for setting, host, port in _listen_addresses(setup):
        where = f"{host or '*'}:{port}"
        problem = port_problem(host, port)
        if problem is None:
            yield Result("ports", PASS, f"{where} free ({setting})")
        elif problem[1] == errno.EADDRNOTAVAIL:
            gateway = isinstance(setup.probe, GPUDockerSpawner) and host not in LOOPBACK
            yield Result(
                "ports",
                WARN,
                f"{where} ({setting}): {host} is not an address of this machine"
                + (" yet: the Docker network's gateway appears when the hub creates the network" if gateway else ""),
                "nothing to do if it is the Docker network's gateway; otherwise use an address of this host",
            )
        else:
            yield Result(
                "ports",
                FAIL,
                f"{where} ({setting}) is in use: {problem[0]}",
                f"stop what listens there (ss -ltnp 'sport = :{port}'), or move {setting} to a free port",
            )
