"""The alert channels' rows (migration 0011, ledger/queries/channels.py) on sqlite and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.ledger.queries.channels import (
    add_channel,
    channel_owners,
    channels_for,
    channels_of,
    delete_channel,
    get_channel,
    set_channel_events,
)

NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def add(ledger, kind, owner, url, events=("budget.100",)):
    return add_channel(ledger, kind, owner, url, "JSON", "json://masked", events, NOW, "tester")


def test_channels_are_stored_read_by_owner_and_removed(ledger):
    own = add(ledger, "user", "alice", "tgram://123:SECRET/42", ("budget.95", "cull"))
    course = add(ledger, "group", "cs231n", "dingtalk://S@T/", ("digest",))
    admins = add(ledger, "admin", "ignored", "json://h/x")
    add(ledger, "user", "bob", "json://h/bob")
    assert get_channel(ledger, own.id).url == "tgram://123:SECRET/42"
    assert "SECRET" not in repr(get_channel(ledger, own.id))  # the URL never shows in a repr (a log, a traceback)
    assert get_channel(ledger, own.id).events == ("budget.95", "cull")
    assert admins.owner == ""  # the admins' channels have no owner name
    assert [c.id for c in channels_of(ledger, "user", "alice")] == [own.id]
    assert [c.id for c in channels_of(ledger, "admin")] == [admins.id]
    found = channels_for(ledger, users=["alice"], groups=["cs231n", "nlp"], admins=True)
    assert [c.id for c in found] == [own.id, course.id, admins.id]
    assert channels_for(ledger) == []
    assert channel_owners(ledger, "group") == ["cs231n"]
    assert channel_owners(ledger, "group", "digest") == ["cs231n"]
    assert channel_owners(ledger, "group", "budget.100") == []
    assert set_channel_events(ledger, own.id, ("job",)).events == ("job",)
    assert set_channel_events(ledger, 10_000, ("job",)) is None
    assert delete_channel(ledger, own.id) and not delete_channel(ledger, own.id)
    assert get_channel(ledger, own.id) is None


def test_an_unknown_owner_kind_is_refused(ledger):
    with pytest.raises(ValueError, match="owner_kind"):
        add(ledger, "everyone", "", "json://h/x")
    assert channels_for(ledger, users=["alice"], groups=["cs231n"], admins=True) == []


def test_an_owners_limit_holds_under_concurrent_adds(ledger):
    """Twenty adds at once for one owner with room for ten: ten rows, the first ten ids; no count-then-insert race."""
    start = threading.Barrier(20)

    def one(i):
        start.wait()
        return add_channel(ledger, "user", "alice", f"json://h/{i}", "JSON", "json://m", ("cull",), NOW, "t", limit=10)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(one, range(20)))
    kept = [r.id for r in results if r is not None]
    assert len(kept) == 10 and sorted(c.id for c in channels_of(ledger, "user", "alice")) == sorted(kept)
    assert add_channel(ledger, "user", "bob", "json://h/b", "JSON", "json://m", ("cull",), NOW, "t", limit=10)
