"""An adversary's review of billing, budgets, jobs and isolation: each hole a student could use, reproduced.

Each test here failed on the code before its fix (the commit that added it says how it was
found); the pure parts are tested without Docker, the real-container side of each network
case is in tests/docker/test_adversary_network.py.
"""

from __future__ import annotations

import pytest

from jupyterhub_gpu.spawners.docker.objects import (
    ICC_OPTION,
    make_container_spec,
    network_isolation_problem,
    screen_extras,
)

SPEC = dict(
    name="jupyter-alice",
    image="img",
    command=["jupyterhub-singleuser"],
    env={},
    labels={},
    container_user="1000:100",
    port=8888,
    network_mode="jupyterhub-gpu",
    binds={},
    device_uuids=[],
)


def inspected(**extra) -> dict:
    """An inspected network as the hub's own spec creates it (bridge, enable_icc=false, IPv4 subnet)."""
    info = {
        "Name": "jupyterhub-gpu",
        "Driver": "bridge",
        "Internal": True,
        "EnableIPv6": False,
        "Options": {ICC_OPTION: "false"},
        "IPAM": {"Config": [{"Subnet": "10.213.0.0/24", "Gateway": "10.213.0.1"}]},
    }
    info.update(extra)
    return info


def test_the_hubs_own_network_isolates():
    assert network_isolation_problem(inspected()) is None


def test_a_network_with_ipv6_does_not_pass_for_isolated():
    """enable_icc=false is IPv4 only: on an IPv6 network server B reached server A's [::] listener.

    Reproduced on real containers (tests/docker/test_adversary_network.py): Docker 20.10, a bridge
    ``--ipv6 --internal -o enable_icc=false``, B's TCP connection to A's IPv4 address timed out and
    to A's IPv6 address was answered. The hub's check accepted that network.
    """
    info = inspected(
        EnableIPv6=True,
        IPAM={"Config": [{"Subnet": "10.213.0.0/24", "Gateway": "10.213.0.1"}, {"Subnet": "fd7a:adf0:1::/64"}]},
    )
    problem = network_isolation_problem(info)
    assert problem is not None and "IPv6" in problem and "'jupyterhub-gpu'" in problem


@pytest.mark.parametrize(
    "key",
    [
        "net/ipv6/conf/all/disable_ipv6",  # runc reads '/' as '.'
        "net/ipv6/conf/default/disable_ipv6",
        " net.ipv6.conf.all.disable_ipv6",
        "net.ipv4.conf.all.route_localnet",
    ],
)
def test_no_spelling_of_a_net_sysctl_reaches_the_container(key):
    _create, host = make_container_spec(**SPEC, extra_host={"sysctls": {key: "0", "kernel.shmmax": "65536"}})
    assert host["sysctls"] == {"kernel.shmmax": "65536"}  # IPC sysctls of the container's own namespace stay
    dropped = screen_extras({}, {"sysctls": {key: "0"}})[2]
    assert len(dropped) == 1 and key.strip() in dropped[0]


@pytest.mark.parametrize("group", ["00", "000", "+0", "-0", " 0", 0, "root", "ROOT"])
def test_no_spelling_of_the_root_group_is_added(group):
    """``group_add: ["00"]`` or ``"+0"`` gave the server ``groups=...,0(root)`` (test_adversary_network.py)."""
    _create, host = make_container_spec(**SPEC, extra_host={"group_add": [group, "1001"]})
    assert host["group_add"] == ["1001"]
    assert "root group" in screen_extras({}, {"group_add": [group]})[2][0]


def test_a_number_too_large_for_a_float_is_a_400_not_a_stored_infinity():
    """``{"parameters": {"lr": 1e400}}`` was taken as inf; the stored job then came back as ``"lr": Infinity``.

    (Not JSON: a browser's ``JSON.parse`` of ``GET jobs`` fails, ``GET jobs?all=true`` too, for the admins.)
    """
    import json

    from jupyterhub_gpu.service.domain.jobs import parse_job_request
    from jupyterhub_gpu.service.web.params import BadRequest, parse_json_body

    for body in (b'{"notebook": "a.ipynb", "parameters": {"lr": 1e400}}', b'{"x": -1E+309}', b"[1.5e99999]"):
        with pytest.raises(BadRequest, match="too large a number"):
            parse_json_body(body)
    data = parse_json_body(b'{"notebook": "a.ipynb", "parameters": {"lr": 1e-3, "big": 1e308, "tiny": 1e-400}}')
    request = parse_job_request(data, max_minutes=60, default_minutes=30)
    assert request.parameters == {"lr": 0.001, "big": 1e308, "tiny": 0.0}
    json.loads(json.dumps(request.parameters), parse_constant=lambda name: pytest.fail(f"{name} in the output"))


def test_a_body_over_the_limit_is_refused_unparsed():
    from jupyterhub_gpu.service.web.params import MAX_BODY_BYTES, BadRequest, parse_json_body

    assert parse_json_body(b" " * (MAX_BODY_BYTES - 2) + b"{}") == {}
    with pytest.raises(BadRequest, match="larger than 1024 KiB"):
        parse_json_body(b" " * (MAX_BODY_BYTES - 1) + b"{}")


@pytest.mark.hub
def test_the_service_refuses_a_body_over_1_mib_and_stores_nothing(tmp_path):
    """Any user's token could make the gpu service parse a 100 MB body (tornado's limit): 21 s of its one
    event loop for ``[{"a": 0}, ...]``, the metering tick (budget stops, culling) and every other user's
    requests waiting behind it. A valid sample padded to 2 MiB was stored."""
    from datetime import datetime, timezone

    import requests

    from jupyterhub_gpu.clock import isoformat
    from jupyterhub_gpu.ledger.queries.samples import session_minutes
    from jupyterhub_gpu.ledger.store import Ledger
    from jupyterhub_gpu.session import SessionStart
    from tests.conftest import Hub, wait_for
    from tests.service.conftest import gpu_hub_config

    hub = Hub(tmp_path / "hub", gpu_hub_config(tmp_path))
    hub.start()
    try:
        hub.create_users("stu1")
        url = f"{hub.url}/services/gpu/api/v1/"
        wait_for(lambda: requests.get(url + "openapi.yaml", timeout=5).status_code == 200, 60, what="the service")
        ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
        now = datetime.now(timezone.utc)
        start = SessionStart("big-body", "stu1", "", (), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", now, True)
        assert ledger.record_start(start)
        scopes = ["servers!server=stu1/", "access:servers!server=stu1/", "access:services!service=gpu"]
        r = hub.api("POST", "/users/stu1/tokens", json={"note": "server", "scopes": scopes})
        headers = {"Authorization": f"token {r.json()['token']}", "Content-Type": "application/json"}
        body = f'{{"session_id": "big-body", "sampled_until": "{isoformat(now)}", "samples": 2}}'.encode()
        padded = b" " * (2 * 1024 * 1024) + body
        try:
            answer = requests.post(url + "samples", data=padded, headers=headers, timeout=30).status_code
        except requests.ConnectionError:  # the service may close the connection before the upload ends
            answer = "closed"
        # the service answers 400 unread, or hangs up mid-upload (then the proxy in front answers 502/503)
        assert answer in (400, 413, 502, 503, "closed"), answer
        assert session_minutes(ledger, "big-body") == []
        # the same sample at its own size is taken: the service is still there
        assert requests.post(url + "samples", data=body, headers=headers, timeout=30).status_code == 201
    finally:
        hub.cleanup()
