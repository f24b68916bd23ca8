"""Servers on one Docker host cannot reach each other, on real containers.

Docker enforces the isolated network (``com.docker.network.bridge.enable_icc=false``)
with iptables rules, and the shared test dockerd runs with ``--iptables=false``
(scripts/docker-setup.sh). So this module starts a dockerd of its own, with
iptables, no default bridge and no IP forwarding, on its own socket, data root
and exec root, and loads the test image into it. The hub (GPUDockerSpawner, the
real startup check and spawn path) creates the isolated network with an explicit
subnet from 10.213.0.0/16 that no route of this machine uses, and listens on its
gateway together with the gpu service. All test traffic goes to that network.

Server A runs a kernel started through the Jupyter REST API (the test image has no
ipykernel: a minimal kernel binds the ports of the connection file Jupyter wrote,
on 127.0.0.1 as a real kernel does) and a TensorBoard-like listener on
0.0.0.0:6006. Server B must not open a TCP connection to any of them, at A's
address or at 127.0.0.1 (the hole of host networking: one shared loopback), nor to
A's Jupyter port; the hub reaches both; both reach the hub API and the gpu service.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import textwrap
import uuid
from pathlib import Path

import pytest
import requests
from traitlets.config.loader import PyFileConfigLoader

from tests.conftest import free_port, wait_for
from tests.docker import own_dockerd as own
from tests.docker.test_docker_spawner import GPUS, IMAGE

OwnDockerd, unused_subnet = own.OwnDockerd, own.unused_subnet
own_dockerd = own.own_dockerd  # the fixture: a dockerd of the module's own, with iptables

ROOT = Path(__file__).resolve().parents[2]


def isolated_config(daemon: OwnDockerd, network: str, subnet: ipaddress.IPv4Network, tmp_path: Path) -> str:
    gateway = str(next(subnet.hosts()))
    static = [{"index": i, "uuid": u, "name": "Tesla T4", "memory_gb": 16} for i, u in enumerate(GPUS)]
    service_port = free_port()
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    # the networking of config/docker_host_config.py, on the test's own dockerd and subnet
    return f"""
import sys
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
c.JupyterHub.spawner_class = "gpu-docker"
c.GPUDockerSpawner.client_kwargs = {{"base_url": {daemon.host!r}}}
c.GPUDockerSpawner.network_name = {network!r}
c.GPUDockerSpawner.network_subnet = {str(subnet)!r}
c.JupyterHub.hub_ip = {gateway!r}
c.GPUDockerSpawner.gpu_service_url = "http://{gateway}:{service_port}/services/gpu/"
c.GPUDockerSpawner.gpu_backend = "static"
c.GPUDockerSpawner.static_gpus = {static!r}
c.GPUDockerSpawner.omit_device_requests = True
c.GPUDockerSpawner.prefix = "jhgpu-iso"
c.GPUDockerSpawner.pids_limit = 512
c.GPUDockerSpawner.currency = "CNY"
c.GPUDockerSpawner.ledger_db_url = {ledger!r}
c.GPUDockerSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "1G"}},
]
c.Spawner.args = []
c.GPUDockerSpawner.cmd = ["jupyterhub-singleuser"]
c.JupyterHub.custom_scopes = CUSTOM_SCOPES
c.JupyterHub.services.append({{
    "name": "gpu",
    "url": "http://{gateway}:{service_port}",
    "command": [sys.executable, "-m", "jupyterhub_gpu.service", "--db-url={ledger}", "--currency=CNY"],
    "oauth_no_confirm": True,
    "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
}})
c.JupyterHub.load_roles.append({{
    "name": "gpu-service", "services": ["gpu"],
    "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
}})
c.JupyterHub.load_roles.append({{"name": "user", "scopes": ["self", "access:services!service=gpu"]}})
"""


#: a minimal kernel: binds the five ports of the connection file Jupyter wrote for it, and waits
PORT_KERNEL = textwrap.dedent(
    """
    import json, socket, sys, time
    conn = json.load(open(sys.argv[1]))
    held = []
    for key in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((conn["ip"], conn[key]))
        s.listen()
        held.append(s)
    while True:
        time.sleep(60)
    """
)

#: run inside a container: which of the (host, port) targets accept a TCP connection
PROBE = textwrap.dedent(
    """
    import json, socket, sys
    from concurrent.futures import ThreadPoolExecutor
    def probe(target):
        host, port = target
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((host, port))
            return "open"
        except OSError as e:
            return type(e).__name__
        finally:
            s.close()
    targets = [tuple(t) for t in json.loads(sys.argv[1])]
    with ThreadPoolExecutor(len(targets) or 1) as pool:
        print(json.dumps([[h, p, r] for (h, p), r in zip(targets, pool.map(probe, targets))]))
    """
)

#: run inside a container: the HTTP status of each URL (any status means the server was reached)
HTTP_STATUS = textwrap.dedent(
    """
    import json, os, sys, urllib.error, urllib.request
    out = {}
    for url in sys.argv[1:]:
        req = urllib.request.Request(url, headers={"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]})
        try:
            out[url] = urllib.request.urlopen(req, timeout=10).status
        except urllib.error.HTTPError as e:
            out[url] = e.code
        except OSError as e:
            out[url] = repr(e)
    print(json.dumps(out))
    """
)


def host_can_connect(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.mark.docker
def test_servers_cannot_reach_each_other_but_reach_the_hub_and_the_service(own_dockerd, make_hub, tmp_path):
    daemon = own_dockerd
    subnet = unused_subnet()
    gateway = str(next(subnet.hosts()))
    network = f"jhgpu-iso-{uuid.uuid4().hex[:6]}"
    hub = make_hub(isolated_config(daemon, network, subnet, tmp_path))
    try:
        # the hub's startup check created the network, isolated, with the explicit subnet
        info = json.loads(daemon.docker("network", "inspect", network))[0]
        assert info["Driver"] == "bridge" and info["Internal"] is True
        assert info["Options"]["com.docker.network.bridge.enable_icc"] == "false"
        assert info["IPAM"]["Config"] == [{"Subnet": str(subnet), "Gateway": gateway}]

        hub.create_users("alice", "bob")
        for user in ("alice", "bob"):
            assert hub.start_server(user, {"profile": "t4"}).status_code in (201, 202)
        containers = {}
        for user in ("alice", "bob"):
            hub.wait_ready(user, timeout=120)  # the hub reached the server (its readiness check)
            cid = hub.server(user)["state"]["object_id"]
            inspected = json.loads(daemon.docker("inspect", cid))[0]
            assert inspected["HostConfig"]["NetworkMode"] == network
            assert not inspected["HostConfig"].get("PortBindings")  # nothing published on the host
            (ip,) = [n["IPAddress"] for n in inspected["NetworkSettings"]["Networks"].values()]
            assert ipaddress.IPv4Address(ip) in subnet
            containers[user] = (cid, ip)
        (a_id, a_ip), (b_id, b_ip) = containers["alice"], containers["bob"]

        # a kernel in A, started through the proxy and the hub's routing to A's address on the network
        kernels = Path("/home/jovyan/.local/share/jupyter/kernels/ports")
        spec = {
            "argv": ["python3", "-c", PORT_KERNEL, "{connection_file}"],
            "display_name": "ports",
            "language": "python",
        }
        daemon.docker("exec", a_id, "mkdir", "-p", str(kernels))
        daemon.docker("exec", "-i", a_id, "sh", "-c", f"cat > {kernels}/kernel.json", input=json.dumps(spec))
        r = hub.api("POST", "/users/alice/tokens", json={"scopes": ["access:servers!user=alice"], "expires_in": 600})
        assert r.status_code == 201, r.text
        token = r.json()["token"]
        r = requests.post(
            f"{hub.url}/user/alice/api/kernels",
            json={"name": "ports"},
            headers={"Authorization": f"token {token}"},
            timeout=60,
        )
        assert r.status_code == 201, r.text
        kernel_id = r.json()["id"]
        runtime = daemon.docker(
            "exec", a_id, "sh", "-c", "jupyter --runtime-dir 2>/dev/null || echo ~/.local/share/jupyter/runtime"
        )
        conn = json.loads(daemon.docker("exec", a_id, "cat", f"{runtime}/kernel-{kernel_id}.json"))
        kernel_ports = [conn[k] for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
        assert conn["ip"] == "127.0.0.1"
        # a TensorBoard in A, bound to every address of A (TensorBoard --bind_all)
        tensorboard = "import http.server as h; h.ThreadingHTTPServer(('0.0.0.0', 6006), h.BaseHTTPRequestHandler)"
        daemon.docker("exec", "-d", a_id, "python3", "-c", f"{tensorboard}.serve_forever()")

        def probe(cid: str, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
            out = daemon.docker("exec", cid, "python3", "-c", PROBE, json.dumps(targets))
            return {(h, p): r for h, p, r in json.loads(out)}

        # the listeners are there: inside A they answer, and A's own address answers from the host
        inside_a = wait_for(
            lambda: (
                (seen := probe(a_id, [("127.0.0.1", p) for p in [*kernel_ports, 6006]]))
                and all(v == "open" for v in seen.values())
                and seen
            ),
            timeout=30,
            what="the kernel and TensorBoard listening in A",
        )
        assert set(inside_a.values()) == {"open"}
        assert host_can_connect(a_ip, 6006) and host_can_connect(a_ip, 8888) and host_can_connect(b_ip, 8888)

        # B reaches none of A's ports, at A's address or on a loopback it does not share
        targets = [(a_ip, 8888), (a_ip, 6006), *[(a_ip, p) for p in kernel_ports]]
        targets += [("127.0.0.1", 6006), *[("127.0.0.1", p) for p in kernel_ports]]
        from_b = probe(b_id, targets)
        assert not [t for t, result in from_b.items() if result == "open"], from_b
        from_a = probe(a_id, [(b_ip, 8888)])
        assert from_a[(b_ip, 8888)] != "open", from_a
        # no IPv6 path around the IPv4 rules: no IPv6 address on the network's interface
        for cid in (a_id, b_id):
            inet6 = daemon.docker("exec", cid, "cat", "/proc/net/if_inet6").splitlines()
            assert not [line for line in inet6 if line.split()[-1] != "lo"], inet6

        # both reach the hub API and the gpu service, on the gateway
        for cid in (a_id, b_id):
            env = dict(
                e.split("=", 1) for e in json.loads(daemon.docker("inspect", cid))[0]["Config"]["Env"] if "=" in e
            )
            api_url, service_url = env["JUPYTERHUB_API_URL"], env["JUPYTERHUB_GPU_SERVICE_URL"]
            assert api_url.startswith(f"http://{gateway}:") and service_url.startswith(f"http://{gateway}:")
            status = json.loads(
                daemon.docker("exec", cid, "python3", "-c", HTTP_STATUS, f"{api_url}/", f"{service_url}api/v1/me")
            )
            assert status[f"{api_url}/"] == 200, status
            assert isinstance(status[f"{service_url}api/v1/me"], int) and status[f"{service_url}api/v1/me"] < 500, (
                status
            )
    finally:
        hub.cleanup()
        for cid in daemon.docker("ps", "-aq", "--filter", "name=jhgpu-iso", check=False).split():
            daemon.docker("rm", "-f", cid, check=False)
        daemon.docker("network", "rm", network, check=False)


def test_the_reference_config_isolates_servers():
    """config/docker_host_config.py: an isolated network, the hub and the service on its gateway."""
    c = PyFileConfigLoader("docker_host_config.py", path=str(ROOT / "config")).load_config()
    spawner = c.GPUDockerSpawner
    assert spawner.network_name not in ("host", "bridge")
    subnet = ipaddress.IPv4Network(spawner.network_subnet)
    gateway = str(next(subnet.hosts()))
    assert c.JupyterHub.hub_ip == gateway
    assert spawner.gpu_service_url.startswith(f"http://{gateway}:")
    (gpu,) = [s for s in c.JupyterHub.services if s["name"] == "gpu"]
    assert gpu["url"].startswith(f"http://{gateway}:")
    assert spawner.get("allow_shared_network", False) is False


@pytest.mark.docker
def test_a_network_that_does_not_isolate_is_refused(own_dockerd, make_hub, tmp_path):
    """A bridge with inter-container communication (Docker's default) stops the hub with a clear message."""
    daemon = own_dockerd
    subnet = unused_subnet()
    network = f"jhgpu-iso-open-{uuid.uuid4().hex[:6]}"
    daemon.docker(
        "network", "create", "--internal", "--subnet", str(subnet), "--label", "jupyterhub-gpu.managed=true", network
    )
    try:
        config = isolated_config(daemon, network, subnet, tmp_path).replace(
            f"c.JupyterHub.hub_ip = {str(next(subnet.hosts()))!r}", 'c.JupyterHub.hub_ip = "127.0.0.1"'
        )
        hub = make_hub(config, start=False)
        hub.start(wait=False)
        assert hub.proc.wait(60) != 0
        log = hub.log_text()
        assert f"Docker network {network!r} lets containers reach each other" in log, log[-3000:]
        assert "com.docker.network.bridge.enable_icc=false" in log
        # another subnet than the configured one is refused too
        other = ipaddress.IPv4Network(f"{subnet.network_address + 256}/24")
        hub.write_config(
            isolated_config(daemon, network, other, tmp_path).replace(
                f"c.JupyterHub.hub_ip = {str(next(other.hosts()))!r}", 'c.JupyterHub.hub_ip = "127.0.0.1"'
            )
        )
        daemon.docker("network", "rm", network)
        daemon.docker(
            "network", "create", "--internal", "--subnet", str(subnet), "--label", "jupyterhub-gpu.managed=true",
            "-o", "com.docker.network.bridge.enable_icc=false", network,
        )  # fmt: skip
        hub.start(wait=False)
        assert hub.proc.wait(60) != 0
        assert f"has subnet {subnet}, not {other}" in hub.log_text()

        # the hub on 127.0.0.1: a server's loopback is its own, so the hub does not start
        hub.write_config(config)
        hub.start(wait=False)
        assert hub.proc.wait(60) != 0
        assert "cannot reach 127.0.0.1 (their own loopback): put c.JupyterHub.hub_ip on" in hub.log_text()

        # a network that stops isolating while the hub runs: the spawn is refused, no container made
        hub.write_config(isolated_config(daemon, network, subnet, tmp_path))
        hub.start()
        daemon.docker("network", "rm", network)
        daemon.docker("network", "create", "--internal", "--subnet", str(subnet), network)
        hub.create_users("carol")
        hub.start_server("carol", {"profile": "t4"})
        wait_for(lambda: hub.server("carol") is None, 60, what="the refused spawn to end")
        log = hub.log_text()
        assert "refusing to start carol" in log and "lets containers reach each other" in log, log[-3000:]
        assert daemon.docker("ps", "-aq", "--filter", "name=jhgpu-iso") == ""
        hub.cleanup()
    finally:
        daemon.docker("network", "rm", network, check=False)
