"""Ways around the Docker network isolation, tried on real containers (issue 14 section 8, adversary review).

Runs on the network isolation test's own dockerd (iptables on, no default bridge), on networks
this module creates with explicit subnets; traffic goes only to its own containers.
"""

from __future__ import annotations

import uuid

import docker as docker_py
import pytest

from jupyterhub_gpu.spawners.docker import ensure_isolated_network
from jupyterhub_gpu.spawners.objects import ICC_OPTION
from tests.docker.test_docker_spawner import IMAGE
from tests.docker.test_network_isolation import own_dockerd, unused_subnet  # noqa: F401 (the fixture)

#: server A: a listener on [::] (dual stack), as `python -m http.server` or `tensorboard --bind_all` bind
LISTEN_ANY = """
import socket
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 8888))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(b"A's data")
    c.close()
"""

CONNECT = """
import socket, sys
for host in sys.argv[1:]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family)
    s.settimeout(3)
    try:
        s.connect((host, 8888))
        print(host, "reached", s.recv(100).decode())
    except OSError as e:
        print(host, "blocked", type(e).__name__)
"""

HARDENED = ("--user", "1000:100", "--cap-drop", "ALL", "--security-opt", "no-new-privileges")


@pytest.mark.docker
def test_an_ipv6_network_is_refused_since_icc_false_does_not_isolate_ipv6(own_dockerd):  # noqa: F811
    daemon = own_dockerd
    subnet = unused_subnet()
    v6 = f"fd7a:adf0:{subnet.network_address.packed[2]:x}::/64"
    network = f"jhgpu-adv6-{uuid.uuid4().hex[:6]}"
    daemon.docker(
        "network", "create", "--internal", "--ipv6", "--subnet", str(subnet), "--subnet", v6,
        "-o", f"{ICC_OPTION}=false", "--label", "jupyterhub-gpu.managed=true", network,
    )  # fmt: skip
    try:
        a = daemon.docker("run", "-d", "--network", network, *HARDENED, IMAGE, "python3", "-c", LISTEN_ANY)
        addresses = daemon.docker(
            "inspect", a, "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}}{{end}}"
        ).split()
        assert len(addresses) == 2, addresses
        out = daemon.docker(
            "run", "--rm", "--network", network, *HARDENED, IMAGE, "python3", "-c", CONNECT, *addresses
        )  # fmt: skip
        ipv4, ipv6 = out.splitlines()
        # what the network does: IPv4 isolated by enable_icc=false, IPv6 not
        assert ipv4.endswith("blocked TimeoutError"), out
        assert ipv6.endswith("reached A's data"), out
        # so the hub's check (startup and every spawn) must refuse it
        client = docker_py.APIClient(base_url=daemon.host)
        with pytest.raises(ValueError, match="IPv6"):
            ensure_isolated_network(client, network, str(subnet))
    finally:
        for cid in daemon.docker("ps", "-aq", "--filter", f"network={network}", check=False).split():
            daemon.docker("rm", "-f", cid, check=False)
        daemon.docker("network", "rm", network, check=False)
