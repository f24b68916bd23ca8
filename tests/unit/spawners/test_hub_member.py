"""The hub and its gpu service on the ledger's members: the hub's identity from its cookie secret, given to the
services it manages (not to a service it does not start), the hub's row beating while it runs, and the service's
row under the identity its hub gave it. A real JupyterHub application and real sqlite ledgers; nothing started."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from types import SimpleNamespace

from jupyterhub.app import JupyterHub
from jupyterhub.services.service import Service

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import HUB_ID as HUB_ID_ENV
from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.ledger.hubs import hub_identity
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.spawners import startup

SECRET = bytes(range(32))


async def test_the_hub_announces_its_identity_gives_it_to_its_managed_services_and_beats(tmp_path, monkeypatch):
    app = JupyterHub()
    app.cookie_secret = SECRET
    command = ["python", "-m", "jupyterhub_gpu.service"]
    app._service_map["gpu"] = Service(name="gpu", command=command, environment={"JUPYTERHUB_GPU_DB_URL": "x"})
    app._service_map["outside"] = Service(name="outside", url="http://127.0.0.1:9999")  # not started by the hub
    monkeypatch.setattr(startup, "HUB_BEAT", timedelta(milliseconds=20))
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}", hub="lab")
    try:
        startup.join_ledger(app, ledger)
        identity = hub_identity(SECRET)
        assert app._service_map["gpu"].environment == {HUB_ID_ENV: identity, "JUPYTERHUB_GPU_DB_URL": "x"}
        assert HUB_ID_ENV not in app._service_map["outside"].environment
        (member,) = ledger.hub_members()
        assert (member.hub, member.role, member.identity) == ("lab", "hub", identity)
        for _ in range(100):
            await asyncio.sleep(0.02)
            (beaten,) = ledger.hub_members()
            if beaten.heartbeat > member.heartbeat:
                break
        assert beaten.heartbeat > member.heartbeat, "the hub's row did not beat"
    finally:
        startup._BEATS.pop(ledger).cancel()
        ledger.close()


def test_the_service_is_recorded_under_the_identity_its_hub_gave_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    monkeypatch.setenv(HUB_ID_ENV, hub_identity(SECRET))
    service = GPUService()
    service.initialize([f"--GPUService.db_url={url}", "--hub-name=lab"])
    (member,) = service.ledger.hub_members()
    assert (member.hub, member.role, member.identity) == ("lab", "service", hub_identity(SECRET))
    service.ledger.withdraw()
    monkeypatch.setenv(HUB_ID_ENV, "not-an-identity")
    service.announce_member()
    (member,) = service.ledger.hub_members()
    assert member.identity is None
    assert f"WARNING | {HUB_ID_ENV} is not a hub identity ('not-an-identity')" in capsys.readouterr().err
    service.ledger.withdraw()
    service.ledger.close()


def test_a_hubs_start_ends_the_holds_its_previous_process_left_and_no_other_hubs(tmp_path):
    """A hub killed during a spawn leaves its hold; the restarted hub ends it before it serves (no spawn of its own
    is in flight then), so its users are not refused for the dead spawn until the hold expires. The other hub's
    hold stays."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    lab, dept = Ledger(url, hub="lab"), Ledger(url, hub="dept")
    try:
        now = utcnow()
        spawn = SimpleNamespace(user="ann", pool="cs231n", rate_micros=50000, gpu_count=1)
        for ledger in (lab, dept):
            assert (
                holds.check_and_hold(ledger, "ann/", spawn, lambda others: None, now, now + timedelta(hours=1)) is None
            )
        app = JupyterHub()
        app.cookie_secret = SECRET
        startup.join_ledger(app, lab)  # the lab hub starts again
        assert [(h.hub, h.key) for h in holds.held(dept, now)] == [("dept", "ann/")]
    finally:
        lab.close()
        dept.close()
