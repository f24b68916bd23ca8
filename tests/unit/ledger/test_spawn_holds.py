"""Spawn holds in the ledger: every hub's check sees them, until they end or expire (sqlite and PostgreSQL).

Each hub is a Ledger of its own (its own engine and connections, as another process has) on one database.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import select

from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.ledger.models import SpawnHold
from jupyterhub_gpu.ledger.store import Ledger

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
SPAN = timedelta(minutes=16)


@dataclass(frozen=True)
class Spawn:
    user: str
    pool: str | None = "cs231n"
    rate_micros: int = 50_000
    gpu_count: int = 1


def passes(_others):
    return None


def rows(ledger) -> list[tuple[str, str, datetime]]:
    with ledger.Session() as db:
        return [(h.hub, h.key, h.expires) for h in db.scalars(select(SpawnHold).order_by(SpawnHold.hub, SpawnHold.key))]


def hubs(db_url, *names):
    return [Ledger(db_url, hub=name) for name in names]


def test_a_hold_is_seen_by_every_hub_and_ends_with_its_release(db_url):
    lab, dept = hubs(db_url, "lab", "dept")
    try:
        assert holds.check_and_hold(lab, "ann/", Spawn("ann"), passes, T0, T0 + SPAN) is None
        (seen,) = holds.held(dept, T0)
        assert (seen.hub, seen.key, seen.user, seen.pool, seen.rate_micros, seen.gpu_count) == (
            "lab",
            "ann/",
            "ann",
            "cs231n",
            50_000,
            1,
        )
        # the same user and server name on the other hub is another spawn: it sees the lab's, and holds its own
        others = []
        assert holds.check_and_hold(dept, "ann/", Spawn("ann"), others.extend, T0, T0 + SPAN) is None
        assert [(h.hub, h.key) for h in others] == [("lab", "ann/")]
        assert [(h, k) for h, k, _ in rows(lab)] == [("dept", "ann/"), ("lab", "ann/")]
        # a hub's release ends only its own hold of the server
        assert holds.release(lab, "ann/") is True
        assert holds.release(lab, "ann/") is False
        assert [(h.hub, h.key) for h in holds.held(lab, T0)] == [("dept", "ann/")]
    finally:
        lab.close()
        dept.close()


def test_a_refused_check_holds_nothing_and_a_check_again_replaces_the_servers_own_hold(db_url):
    (lab,) = hubs(db_url, "lab")
    try:
        assert holds.check_and_hold(lab, "ann/", Spawn("ann"), lambda others: "no", T0, T0 + SPAN) == "no"
        assert rows(lab) == []
        holds.check_and_hold(lab, "ann/", Spawn("ann"), passes, T0, T0 + SPAN)
        later = T0 + timedelta(minutes=10)
        others = []
        # after a wait: the server's own hold is not counted against it, and the new one lasts a full span
        holds.check_and_hold(lab, "ann/", Spawn("ann", pool="thesis"), others.extend, later, later + SPAN)
        assert others == []
        (hold,) = holds.held(lab, later)
        assert (hold.pool, hold.expires, hold.created) == (
            "thesis",
            (later + SPAN).replace(tzinfo=None),
            T0.replace(tzinfo=None),
        )
        # a refresh moves the end on (and holds again a spawn whose hold had expired meanwhile)
        holds.refresh(lab, "ann/", Spawn("ann", pool="thesis"), later, later + 2 * SPAN)
        assert rows(lab) == [("lab", "ann/", (later + 2 * SPAN).replace(tzinfo=None))]
        assert holds.release(lab, "ann/")
        holds.refresh(lab, "ann/", Spawn("ann"), later, later + SPAN)
        assert [k for _, k, _ in rows(lab)] == ["ann/"]
    finally:
        lab.close()


def test_a_dead_hubs_holds_outlive_its_process_until_they_expire_and_are_swept(db_url):
    lab, dept = hubs(db_url, "lab", "dept")
    holds.check_and_hold(lab, "ann/", Spawn("ann"), passes, T0, T0 + SPAN)
    holds.check_and_hold(lab, "bob/", Spawn("bob"), passes, T0, T0 + 2 * SPAN)
    lab.close()  # the lab's hub process is gone (killed while both spawns were starting)
    try:
        # a hub started again reads them, and so does the other hub: they still count
        (again,) = hubs(db_url, "lab")
        assert [h.key for h in holds.held(again, T0 + SPAN - timedelta(seconds=1))] == ["ann/", "bob/"]
        again.close()
        # from its end on, a hold counts for no check (read or checked), and the next check sweeps it
        after = T0 + SPAN
        assert [h.key for h in holds.held(dept, after)] == ["bob/"]
        others = []
        holds.check_and_hold(dept, "cid/", Spawn("cid"), others.extend, after, after + SPAN)
        assert [(h.hub, h.key) for h in others] == [("lab", "bob/")]
        assert [(h, k) for h, k, _ in rows(dept)] == [("dept", "cid/"), ("lab", "bob/")]
    finally:
        dept.close()


def test_two_hubs_checking_at_once_never_both_pass_on_what_one_hold_leaves(db_url):
    """The check sees the other hub's hold or runs before it is taken, never beside it: one passes a round."""
    lab, dept = hubs(db_url, "lab", "dept")
    rounds = 25
    try:
        for r in range(rounds):
            barrier = threading.Barrier(2)
            answers = {}

            def one(ledger, answers=answers, barrier=barrier, r=r):
                def only_if_nobody_holds(others):
                    return "held" if any(h.user == "ann" for h in others) else None

                barrier.wait()
                answers[ledger.hub] = holds.check_and_hold(
                    ledger, f"ann/r{r}", Spawn("ann"), only_if_nobody_holds, T0, T0 + SPAN
                )

            threads = [threading.Thread(target=one, args=(x,)) for x in (lab, dept)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            assert sorted(answers.values(), key=str) == [None, "held"], (r, answers)
            winner = next(h for h, a in answers.items() if a is None)
            assert [(h.hub, h.key) for h in holds.held(lab, T0)] == [(winner, f"ann/r{r}")]
            holds.release(lab if winner == "lab" else dept, f"ann/r{r}")
    finally:
        lab.close()
        dept.close()
