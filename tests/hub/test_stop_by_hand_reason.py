"""A stop by hand is the cause of its stop from its first moment (real hub, gpu-local).

docs/admin.md, "Why a server stopped: one reason per stop": the hub's stop of a running server claims ``stopped``
in the ledger as it begins, so a service pass that asks for a stop (a budget used up) while the hub is still
stopping the server finds that stop under way and does not relabel it; a reason the service claimed first
stays. The stop is made slow at the backend (LocalProcessSpawner.stop waits while a marker file exists, and
says it has begun by writing another); everything else is real: the hub, its servers (processes), the ledger.
"""

from __future__ import annotations

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import StopReason
from tests.conftest import wait_for
from tests.hub.test_local_spawner import config

pytestmark = pytest.mark.hub

INJECT = """
import asyncio
import pathlib
from jupyterhub.spawner import LocalProcessSpawner

GATE = pathlib.Path({gate!r})
BEGUN = pathlib.Path({begun!r})
_stop = LocalProcessSpawner.stop


async def stop(self, now=False):
    BEGUN.touch()
    while GATE.exists():  # the engine takes its time
        await asyncio.sleep(0.05)
    return await _stop(self, now=now)


LocalProcessSpawner.stop = stop
c.JupyterHub.slow_stop_timeout = 0.5
c.GPULocalSpawner.ledger_db_url = {db_url!r}
"""


def test_a_stop_by_hand_under_way_keeps_its_reason_and_a_service_reason_claimed_first_stays(make_hub, tmp_path):
    gate, begun = tmp_path / "gate", tmp_path / "begun"
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub = make_hub(config(tmp_path, t4=2) + INJECT.format(gate=str(gate), begun=str(begun), db_url=db_url))
    hub.create_users("ann", "bob")
    ledger = Ledger(db_url)
    try:
        for name in ("ann", "bob"):
            assert hub.start_server(name, {"profile": "t4"}).status_code in (201, 202)
        ann = hub.wait_ready("ann")["state"]["gpu"]["session_id"]
        bob = hub.wait_ready("bob")["state"]["gpu"]["session_id"]

        # ann's server is stopped by hand; while the hub stops it, the service's budget pass asks for its stop
        gate.touch()
        assert hub.stop_server("ann").status_code in (202, 204)
        wait_for(begun.exists, 30, what="ann's stop under way")
        assert ledger.get_session(ann).stopped is None
        assert ledger.claim_stop_reason(ann, StopReason.BUDGET) == StopReason.STOPPED
        gate.unlink()
        hub.wait_stopped("ann")
        recorded = wait_for(lambda: (s := ledger.get_session(ann)).stopped and s, 30, what="ann's stop recorded")
        assert recorded.stop_reason == StopReason.STOPPED

        # bob's budget is used up first: the service's reason stays when the hub stops the server
        assert ledger.claim_stop_reason(bob, StopReason.BUDGET) == StopReason.BUDGET
        assert hub.stop_server("bob").status_code in (202, 204)
        hub.wait_stopped("bob")
        recorded = wait_for(lambda: (s := ledger.get_session(bob)).stopped and s, 30, what="bob's stop recorded")
        assert recorded.stop_reason == StopReason.BUDGET
    finally:
        gate.unlink(missing_ok=True)
        ledger.close()
