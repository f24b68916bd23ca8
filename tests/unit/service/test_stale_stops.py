"""A pass of the tick stops sessions it read before its awaits; a server name may run a new session by then.

The real tick steps (culling, budgets) against a real sqlite ledger and a stand-in hub that records the stops and,
while it answers one, lets a user stop their session and start a new one on the same server name (as a student
does in the seconds the service spends on notices and other stops). The hub's stop names a server, not a session:
the new session must not be stopped for the old one's idleness or budget.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.domain.alerts import BudgetAlert
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.tick import deliver
from jupyterhub_gpu.session import SessionStart

UTC = timezone.utc
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
CNY = Currency.from_config("CNY")
MAX_AGE = {"default": [{"kind": "max_age", "minutes": 60, "warn_minutes": 5}]}


def start(ledger: Ledger, sid: str, user: str, at: datetime, group: str = "cs101") -> None:
    ledger.record_start(SessionStart(sid, user, "", (group,), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", at))


def restart_when_another_is_stopped(ledger: Ledger, hub, user: str, old: str, new: str, at: datetime):
    """While the hub stops the first server it is asked to stop (not ``user``'s), ``user`` stops ``old`` and
    starts ``new`` on the same server name: the spawner records both, as it does."""

    def act(path: str) -> None:
        if f"/users/{user}/" not in path and ledger.get_session(old).stopped is None:
            ledger.record_stop(old, at, "stopped")
            start(ledger, new, user, at)

    hub.on_stop = act


def test_a_cull_judged_before_its_user_started_a_new_session_does_not_stop_the_new_one(tmp_path, hub):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    for sid, user in (("a-1", "ann"), ("b-1", "bob")):  # both over their 60 minutes, both warned
        start(ledger, sid, user, T0)
        ledger.set_cull_warning(sid, T0 + timedelta(minutes=55), "max_age")
    now = T0 + timedelta(minutes=61)
    restart_when_another_is_stopped(ledger, hub, "ann", "a-1", "a-2", now)
    restart_when_another_is_stopped(ledger, hub, "bob", "b-1", "b-2", now)  # whichever the pass stops first
    result = asyncio.run(tick.enforce_culling(tick.TickContext(ledger=ledger, hub=hub.client, cull_rules=MAX_AGE), now))
    (stopped,) = result.stopped
    assert hub.stops == [f"/hub/api/users/{stopped[0]}/server"]
    other = "bob" if stopped[0] == "ann" else "ann"
    new = ledger.get_session(f"{other[0]}-2")
    assert new.stopped is None and new.pending_stop_reason is None
    assert ledger.get_session(f"{other[0]}-1").stop_reason == "stopped"  # the user's own stop, not the cull's
    ledger.close()


def test_a_budget_stop_judged_before_its_user_started_anew_does_not_stop_the_new_session(tmp_path, hub):
    """Both servers of the group are stopped for its budget, a grace after the final notice; one of the two users
    stopped and started a new session while the service stopped the other's server."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_budget(BudgetRule("group", "cs101", "month", "money", Decimal("1")), T0 - timedelta(days=1))
    for sid, user in (("a-1", "ann"), ("b-1", "bob")):
        start(ledger, sid, user, T0)  # ¥0.05 a minute each: the group's ¥1 is used up after 10 minutes

    def run(now):
        async def notify(user, groups, status, threshold):
            alert = BudgetAlert.from_status(user, groups, status, threshold, CNY, 60, UTC)
            await deliver(alert, AlertSettings(), ledger, now)

        ctx = tick.TickContext(ledger=ledger, hub=hub.client, budget_grace=timedelta(minutes=1))
        return asyncio.run(tick.enforce_budgets(ctx, now, notify))

    assert run(T0 + timedelta(minutes=11)).stopped == []  # the final notice; the stop comes a grace later
    now = T0 + timedelta(minutes=13)
    restart_when_another_is_stopped(ledger, hub, "ann", "a-1", "a-2", now)
    restart_when_another_is_stopped(ledger, hub, "bob", "b-1", "b-2", now)
    (stopped,) = run(now).stopped
    assert hub.stops == [f"/hub/api/users/{stopped[0]}/server"]
    other = "bob" if stopped[0] == "ann" else "ann"
    assert ledger.get_session(f"{other[0]}-2").pending_stop_reason is None
    ledger.close()
