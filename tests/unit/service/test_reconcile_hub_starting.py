"""The reconciliation with a hub whose start is not over: a user it lists as active with no server shown.

JupyterHub lists a user as active (``GET /users?state=active``) when a server of theirs is in its database,
and shows the servers of the spawners it has loaded; while a hub starts (JupyterHub serves once
``init_spawners`` has run ``init_spawners_timeout`` seconds), a user's spawners may not be loaded yet: the
user is listed with ``"servers": {}``. The stand-in hub answers as JupyterHub does then, paginated. The
service's own reconciliation on a real ledger: such a user's sessions are neither seen nor missing, however
many listings, nor is a server listed pending the restarted hub's check; a server really gone (its user no
longer listed) is still closed after two listings.
tests/service/test_reconcile_hub_start.py drives a real restarting hub.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.session import SessionStart
from tests.unit.service.conftest import StopHub

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


class StartingHub(StopHub):
    """A stand-in hub whose paginated listing of active users is ``self.users`` (name -> its servers' models)."""

    def __init__(self):
        super().__init__()
        self.users: dict[str, dict] = {}
        owner = self

        def do_GET(self):
            items = [{"name": u, "groups": [], "servers": servers} for u, servers in owner.users.items()]
            page = {"items": items, "_pagination": {"offset": 0, "limit": 200, "total": len(items), "next": None}}
            body = json.dumps(page).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/jupyterhub-pagination+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        self.httpd.RequestHandlerClass.do_GET = do_GET


@pytest.fixture
def ledger(tmp_path):
    store = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield store
    store.close()


@pytest.fixture
def hub():
    server = StartingHub()
    yield server
    server.close()


def start(ledger: Ledger, sid: str, user: str) -> None:
    ledger.record_start(SessionStart(sid, user, "", (), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", T0))


def test_a_user_listed_without_servers_by_a_starting_hub_keeps_their_sessions_open(ledger, hub):
    start(ledger, "ann-1", "ann")
    start(ledger, "bob-1", "bob")
    ctx = tick.TickContext(ledger=ledger, hub=hub.client)
    missing: dict = {}
    # the hub is starting: both users have a server in its database, neither spawner is loaded yet
    hub.users = {"ann": {}, "bob": {}}
    for minute in (1, 2, 3):
        summary = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=minute), missing))
        assert summary == {"alive": 0, "closed": [], "recorded": []}
    assert missing == {}
    assert ledger.get_session("ann-1").stopped is None and ledger.get_session("bob-1").stopped is None
    assert ledger.get_session("ann-1").last_seen is None  # not seen either
    # ann's spawner is loaded, pending the hub's check that it still runs; bob's is not
    hub.users = {"ann": {"": {"pending": "check", "ready": False, "state": {}}}, "bob": {}}
    for minute in (4, 5):
        summary = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=minute), missing))
        assert summary == {"alive": 0, "closed": [], "recorded": []}
    assert missing == {} and ledger.get_session("ann-1").last_seen is None
    # started: ann's server runs, bob's is gone
    hub.users = {"ann": {"": {"pending": None, "ready": True, "state": {}}}}
    first = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=6), missing))
    assert first == {"alive": 1, "closed": [], "recorded": []}
    assert ledger.get_session("ann-1").last_seen is not None
    second = asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=7), missing))
    assert second == {"alive": 1, "closed": ["bob-1"], "recorded": []}
    assert ledger.get_session("bob-1").stop_reason == "reconciled"
    assert ledger.get_session("ann-1").stopped is None


def test_a_session_missing_once_is_not_closed_by_a_listing_that_does_not_show_its_user(ledger, hub):
    start(ledger, "ann-1", "ann")
    ctx = tick.TickContext(ledger=ledger, hub=hub.client)
    missing: dict = {}
    hub.users = {}  # ann's server is not listed: missing once
    asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=1), missing))
    assert set(missing) == {"ann-1"}
    hub.users = {"ann": {}}  # the hub restarted and has not loaded ann's spawner yet: says nothing of it
    assert asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=2), missing))["closed"] == []
    hub.users = {"ann": {"": {"pending": None, "ready": True, "state": {}}}}  # it runs after all
    assert asyncio.run(tick.reconcile(ctx, T0 + timedelta(minutes=3), missing))["alive"] == 1
    assert missing == {} and ledger.get_session("ann-1").stopped is None
