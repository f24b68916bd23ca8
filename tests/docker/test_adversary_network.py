"""Ways around the Docker network isolation, tried on real containers.

Runs on the network isolation test's own dockerd (iptables on, no default bridge), on networks
this module creates with explicit subnets; traffic goes only to its own containers.
"""

from __future__ import annotations

import uuid

import docker as docker_py
import pytest

from jupyterhub_gpu.spawners.docker.objects import ICC_OPTION
from jupyterhub_gpu.spawners.docker.spawner import ensure_isolated_network
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


#: server A: listens on [::] and writes its link-local IPv6 address (from /proc/net/if_inet6) to its log
LISTEN_LINK_LOCAL = """
import socket
for line in open("/proc/net/if_inet6"):
    hexaddr, index, _, scope, _, dev = line.split()
    if dev == "eth0" and hexaddr.startswith("fe80"):
        print(":".join(hexaddr[i:i + 4] for i in range(0, 32, 4)) + "%eth0", flush=True)
s = socket.socket(socket.AF_INET6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
s.bind(("::", 8888))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(b"A's data")
    c.close()
"""

CONNECT_LINK_LOCAL = """
import socket, sys, time
info = socket.getaddrinfo(sys.argv[1], 8888, socket.AF_INET6, socket.SOCK_STREAM)[0]
for attempt in range(20):  # a fresh link-local address is tentative for a moment (duplicate detection)
    s = socket.socket(socket.AF_INET6)
    s.settimeout(3)
    try:
        s.connect(info[4])
        print("reached", s.recv(100).decode())
        break
    except OSError as e:
        print("blocked", type(e).__name__, e)
        if e.errno != 99:
            break
        time.sleep(0.5)
"""


def builder_container(client, network: str, name: str, command: list[str], sysctls: dict) -> str:
    """A container made from the builder's arguments with the admin's ``sysctls`` extra (as create_object does)."""
    from jupyterhub_gpu.spawners.docker.objects import make_container_spec

    create, host = make_container_spec(
        name=name,
        image=IMAGE,
        command=command,
        env={},
        labels={"jupyterhub-gpu.managed": "true"},
        container_user="1000:100",
        port=8888,
        network_mode=network,
        binds={},
        device_uuids=[],
        pids_limit=64,
        extra_host={"sysctls": dict(sysctls)},
        publish_port=False,
    )
    create["host_config"] = client.create_host_config(**host)
    cid = client.create_container(**create)["Id"]
    client.start(cid)
    return cid


@pytest.mark.docker
def test_slash_spelled_net_sysctls_cannot_turn_ipv6_on_around_the_isolation(own_dockerd):  # noqa: F811
    """Docker (runc) takes ``net/ipv6/conf/all/disable_ipv6`` as ``net.ipv6.conf.all.disable_ipv6``.

    Before the fix the builder screened only names starting with ``net.``: with the slash spelling
    in the extras, every server had a link-local IPv6 address, and B reached A's [::] listener at
    ``fe80::...%eth0`` on a network with enable_icc=false.
    """
    import time

    daemon = own_dockerd
    subnet = unused_subnet()
    network = f"jhgpu-advsys-{uuid.uuid4().hex[:6]}"
    daemon.docker(
        "network", "create", "--internal", "--subnet", str(subnet), "-o", f"{ICC_OPTION}=false",
        "--label", "jupyterhub-gpu.managed=true", network,
    )  # fmt: skip
    client = docker_py.APIClient(base_url=daemon.host)
    sysctls = {"net/ipv6/conf/all/disable_ipv6": "0", "net/ipv6/conf/default/disable_ipv6": "0"}
    made = []
    try:
        a = builder_container(client, network, f"{network}-a", ["python3", "-c", LISTEN_LINK_LOCAL], sysctls)
        made.append(a)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = client.inspect_container(a)["State"]
            logs = client.logs(a).decode().split()
            if logs or not state["Running"]:
                break
            time.sleep(0.3)
        running = client.inspect_container(a)["State"]["Running"]
        assert running, client.logs(a).decode()
        if logs:  # only with IPv6 on; with the fix A has no IPv6 address at all
            b = builder_container(
                client, network, f"{network}-b", ["python3", "-c", CONNECT_LINK_LOCAL, logs[0]], sysctls
            )
            made.append(b)
            client.wait(b, timeout=30)
            out = client.logs(b).decode()
            assert "reached" not in out, out
        assert client.inspect_container(a)["HostConfig"].get("Sysctls") in (None, {}), "the extra reached Docker"
    finally:
        for cid in made:
            client.remove_container(cid, force=True)
        daemon.docker("network", "rm", network, check=False)


@pytest.mark.docker
def test_the_root_group_cannot_be_added_in_another_spelling(own_dockerd):  # noqa: F811
    """``group_add: ["00", "+0"]`` in the extras: before the fix the server ran with ``groups=100,0,...``."""
    daemon = own_dockerd
    client = docker_py.APIClient(base_url=daemon.host)
    from jupyterhub_gpu.spawners.docker.objects import make_container_spec

    create, host = make_container_spec(
        name=f"jhgpu-advgrp-{uuid.uuid4().hex[:6]}",
        image=IMAGE,
        command=["id", "-G"],
        env={},
        labels={"jupyterhub-gpu.managed": "true"},
        container_user="1000:100",
        port=8888,
        network_mode="none",
        binds={},
        device_uuids=[],
        extra_host={"group_add": ["00", "+0", "1001"]},
    )
    create["host_config"] = client.create_host_config(**host)
    cid = client.create_container(**create)["Id"]
    try:
        client.start(cid)
        assert client.wait(cid, timeout=30)["StatusCode"] == 0, client.logs(cid).decode()
        groups = client.logs(cid).decode().split()
        assert groups == ["100", "1001"], groups
    finally:
        client.remove_container(cid, force=True)
