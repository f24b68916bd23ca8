"""A real hub and its managed gpu service on the ledger's members: both rows carry the hub's identity (from the
cookie secret the hub keeps in its file), the hub's restart takes over its rows rather than adding a second hub,
and the doctor's check finds nothing wrong."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.hubs import hub_identity, hub_name_problems
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub


def test_a_hub_and_its_service_carry_its_identity_and_its_restart_is_the_same_hub(make_hub, tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub = make_hub(gpu_hub_config(tmp_path, db_url=url))
    identity = hub_identity(bytes.fromhex((hub.workdir / "cookie_secret").read_text().strip()))
    ledger = Ledger(url)
    try:

        def members():
            return sorted((m.role, m.identity, m.pid) for m in ledger.hub_members())

        wait_for(lambda: [r[:2] for r in members()] == [("hub", identity), ("service", identity)], timeout=30)
        before = members()
        hub.stop()
        hub.start()
        # the restarted hub and its new service, in the rows of the first ones (new processes, same identity)
        wait_for(
            lambda: [r[:2] for r in members()] == [("hub", identity), ("service", identity)] and members() != before,
            timeout=30,
        )
        assert hub_name_problems(ledger.hub_members(), utcnow()) == []
    finally:
        ledger.close()
