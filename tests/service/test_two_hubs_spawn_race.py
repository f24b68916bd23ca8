"""Two real hubs on one ledger: a student who spawns on both at once on the last minimum of a budget gets one server.

Each hub's spawn check counts the spawns that passed on the other hub and are still starting (their holds in the
ledger, docs/service.md "Spawn races"), and the check and its hold are one step for the whole ledger: so of two
spawns asked for at the same moment, one on each hub, on a group budget with room for the first minutes of one
server, exactly one starts and the other is refused with the budget's message.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.test_two_hubs import hub_config

pytestmark = [pytest.mark.hub, pytest.mark.postgres]


def settled(hub) -> str | None:
    """'ready' or 'refused' once stu1's spawn on ``hub`` is no longer pending, else None."""
    server = hub.server("stu1")
    if server is not None and server.get("pending"):
        return None
    if server is not None and server.get("ready"):
        return "ready"
    return "refused" if "Not starting stu1's server" in hub.log_text() or server is None else None


def test_a_spawn_on_each_hub_at_once_on_the_last_minimum_starts_one(make_hub, tmp_path, postgres_url):
    common = {"min_minutes": 10}
    lab = make_hub(hub_config(tmp_path, "lab", postgres_url, **common), name="lab")
    dept = make_hub(hub_config(tmp_path, "dept", postgres_url, **common), name="dept")
    ledger = Ledger(postgres_url)
    try:
        for hub in (lab, dept):
            hub.create_users("stu1")
        # the first 10 minutes of one T4 (¥0.50), not of two
        ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("0.75")), datetime.now(timezone.utc))
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda hub: hub.start_server("stu1", {"profile": "t4"}), (lab, dept)))
        assert all(r.status_code in (201, 202, 403) for r in answers), [(r.status_code, r.text) for r in answers]
        outcomes = {
            hub.workdir.name: wait_for(lambda hub=hub: settled(hub), 120, what="the spawn to settle")
            for hub in (lab, dept)
        }
        assert sorted(outcomes.values()) == ["ready", "refused"], outcomes
        (refused,) = [hub for hub in (lab, dept) if outcomes[hub.workdir.name] == "refused"]
        told = [line for line in refused.log_text().splitlines() if "Not starting stu1's server" in line]
        assert told and "Budget too low for 10 minutes" in told[0] and "held for the first 10 minutes" in told[0], told
        (session,) = ledger.sessions(user="stu1")
        assert session.hub != refused.workdir.name and session.stopped is None
        assert holds.held(ledger, utcnow()) == []  # the started one's hold ended with its record
    finally:
        ledger.close()
