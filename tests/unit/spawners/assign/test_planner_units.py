"""The hub's planner in the devices' units, and its orders derived again every cycle (docs/scheduling.md).

A real GPUAllocator (simulated T4s, shares split as the allocator splits them), a real sqlite ledger and the
sessions as the spawner records them: what stop orders the ledger holds after each cycle, which are withdrawn,
and what the spawn form says of the pool.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from traitlets.config.loader import PyFileConfigLoader

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.scheduler import Fifo, Policy, Preemption, Reservations
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.plan import Ask, Planner, ProfileFacts, unit_of
from jupyterhub_gpu.spawners.assign.protocol import QueueCancelled
from jupyterhub_gpu.spawners.form import describe_profile, reserved_note
from jupyterhub_gpu.spawners.profiles import parse_profiles

ZONE = ZoneInfo("Asia/Shanghai")
PROFILES = {
    "t4": ProfileFacts("T4"),
    "t4p": ProfileFacts("T4"),
    "t4s": ProfileFacts("T4", unit="share-4"),
    "t4sp": ProfileFacts("T4", unit="share-4"),
}
CONFIG = Path(__file__).resolve().parents[4] / "config"


@pytest.fixture
def ledger(tmp_path):
    return Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")


def make(ledger, t4=1, grace=120, min_runtime=600) -> tuple[GPUAllocator, Planner]:
    allocator = GPUAllocator(simulated_inventory([{"model": "T4", "count": t4, "memory_gb": 16}]))
    rule = Preemption(min_runtime=timedelta(seconds=min_runtime), grace=timedelta(seconds=grace))
    planner = Planner(ledger, Policy("test", Fifo(), rule, Reservations()), ZONE, refresh=3600)
    planner.note_profiles(PROFILES)
    allocator.use_planner(planner)
    return allocator, planner


def book(ledger, count=1, hours_from_now=1.0, group="cs231n"):
    now = utcnow()
    start = now + timedelta(hours=hours_from_now)
    draft = rows.Draft(group, "T4", count, start, start + timedelta(hours=2), note="CS231N")
    return rows.add_reservation(ledger, draft, lambda existing: None, ZONE, now, "admin")


def record(ledger, allocator, user, group, profile, minutes_ago, tier=None) -> SessionStart:
    start = SessionStart(
        id=f"s-{user}",
        user=user,
        server_name="",
        groups=(group,),
        profile=profile,
        gpus=tuple(d.uuid for d in allocator.held_by(f"{user}/")),
        rate_micros=50_000,
        currency="CNY",
        started=utcnow() - timedelta(minutes=minutes_ago),
        pool=group,
        tier=tier,
    )
    assert ledger.record_start(start)
    return start


def running(ledger, allocator, user, group="other", profile="t4", minutes_ago=30, tier=None) -> SessionStart:
    """A session as the spawner records it, holding a whole T4 or (a share profile) one of 4 shares of one."""
    share = 4 if PROFILES[profile].unit else None
    allocator._assign(f"{user}/", allocator.free("T4", share=share)[:1])
    return record(ledger, allocator, user, group, profile, minutes_ago, tier)


def stop(ledger, allocator, start: SessionStart) -> None:
    """Its user stops it: the ledger closes it and the allocator frees its GPU (a cycle runs)."""
    ledger.record_stop(start.id, utcnow(), "stopped", start)
    allocator.release(f"{start.user}/")


def ask(user, group="other", profile="t4", tier="standard"):
    return Ask(user, "", group, (group,), profile, tier, utcnow(), unit=PROFILES[profile].unit)


async def cycle(planner, allocator):
    await planner.fresh(0)
    allocator._drain()
    await planner.settled()


async def wait_in_queue(allocator, key):
    for _ in range(200):
        if allocator.position(key) is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} never queued")


def orders(ledger) -> dict:
    return {o.user: o for o in rows.stop_orders(ledger)}


# -- one unit: the physical GPU -----------------------------------------------------------------------------------


def test_four_share_students_on_one_t4_three_free_and_a_class_booking_two_get_no_stop_order(ledger):
    """The issue's example: each share counted as a whole T4 gave two of them a `reserved` stop order."""

    async def main():
        allocator, planner = make(ledger, t4=4)
        book(ledger, count=2)
        for i in range(4):
            running(ledger, allocator, f"s{i}", profile="t4s", minutes_ago=30 + i)
        assert len({d.parent_uuid for k in ("s0/", "s1/", "s2/", "s3/") for d in allocator.held_by(k)}) == 1
        await cycle(planner, allocator)
        assert rows.stop_orders(ledger) == []
        # the form's counts agree: 3 of 4 T4s free whole; 12 of 16 shares (3 free T4s, none left on the split one)
        assert (allocator.counts("T4")["free"], allocator.counts("T4")["total"]) == (3, 4)
        assert (allocator.counts("T4", share=4)["free"], allocator.counts("T4", share=4)["total"]) == (12, 16)

    asyncio.run(main())


def test_a_full_price_t4_preempts_preemptible_shares_only_when_that_empties_the_t4(ledger):
    """Shares and whole GPUs of a model are one pool: the whole request takes the T4 back from the preemptible shares
    on it; with a full-price share on it too, stopping the others frees no T4 and nobody is preempted."""

    async def main():
        allocator, planner = make(ledger, t4=1)
        cheap = [running(ledger, allocator, f"c{i}", profile="t4sp", tier="preemptible") for i in range(2)]
        await planner.fresh(0)
        allocator.expect("full/", ask("full"))
        waiting = asyncio.ensure_future(allocator.acquire("full/", "T4", 1))
        await wait_in_queue(allocator, "full/")
        await planner.settled()
        found = orders(ledger)
        assert sorted(found) == ["c0", "c1"] and {o.kind for o in found.values()} == {"preempted"}
        assert {o.for_user for o in found.values()} == {"full"}
        allocator.cancel("full/")
        with pytest.raises(QueueCancelled):
            await waiting
        await cycle(planner, allocator)
        assert all(o.withdrawn_at is not None for o in rows.stop_orders(ledger))  # nobody needs the T4 now
        # a full-price share joins them: the T4 cannot be emptied by preemption
        running(ledger, allocator, "fullshare", profile="t4s")
        await planner.fresh(0)
        allocator.expect("full2/", ask("full2"))
        again = asyncio.ensure_future(allocator.acquire("full2/", "T4", 1))
        await wait_in_queue(allocator, "full2/")
        await planner.settled()
        assert [o for o in rows.stop_orders(ledger) if o.withdrawn_at is None] == []
        allocator.cancel("full2/")
        with pytest.raises(QueueCancelled):
            await again
        assert cheap

    asyncio.run(main())


def test_a_shares_use_counts_a_quarter_gpu_hour_an_hour_under_its_model(ledger):
    now = utcnow()
    for user, profile, hours in (("q", "t4s", 4), ("w", "t4", 1)):
        start = SessionStart(f"past-{user}", user, "", (user,), profile, ("GPU-x",), 50_000, "CNY",
                             now - timedelta(hours=hours + 1), pool=user)  # fmt: skip
        ledger.record_start(start)
        ledger.record_stop(start.id, now - timedelta(hours=1), "stopped", start)

    async def main():
        _, planner = make(ledger)
        await planner.fresh(0)
        usage = planner.view.usage
        assert set(usage["q"]) == {"T4"}  # one pool with the whole T4s, not a "T4/share-4" of its own
        assert usage["q"]["T4"] == pytest.approx(usage["w"]["T4"], rel=0.02)  # 4 h of 1/4 T4: about 1 GPU-hour

    asyncio.run(main())


# -- a planned end never shields ---------------------------------------------------------------------------------


def test_a_preemptible_session_told_its_end_for_a_class_20_hours_away_is_preempted_now(ledger):
    async def main():
        allocator, planner = make(ledger, t4=1, grace=120)
        cheap = running(ledger, allocator, "cheap", tier="preemptible", profile="t4p")
        book(ledger, hours_from_now=20)
        await cycle(planner, allocator)
        (end,) = rows.stop_orders(ledger)
        assert (end.session_id, end.kind) == (cheap.id, "reserved")
        allocator.expect("full/", ask("full"))
        waiting = asyncio.ensure_future(allocator.acquire("full/", "T4", 1))
        await wait_in_queue(allocator, "full/")
        await planner.settled()
        (order,) = rows.stop_orders(ledger)
        assert (order.kind, order.for_user) == ("preempted", "full")
        assert 110 <= (order.stop_at - utcnow()).total_seconds() <= 121
        allocator.cancel("full/")
        with pytest.raises(QueueCancelled):
            await waiting

    asyncio.run(main())


# -- orders derived again -----------------------------------------------------------------------------------------


def test_a_class_end_given_while_every_t4_was_busy_is_withdrawn_once_another_student_stops(ledger):
    """The issue's example: the student was warned and would have been stopped for nothing."""

    async def main():
        allocator, planner = make(ledger, t4=2)
        book(ledger, count=1)
        early = running(ledger, allocator, "early", minutes_ago=100)
        late = running(ledger, allocator, "late", minutes_ago=10)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        assert (order.session_id, order.kind, order.withdrawn_at) == (late.id, "reserved", None)
        stop(ledger, allocator, early)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        assert order.withdrawn_at is not None and order.done_at is None  # the service tells the stop is off

    asyncio.run(main())


def test_an_end_withdrawn_and_closed_by_the_service_is_given_again_when_it_is_needed_again(ledger):
    """Derived again means given again too: a booking cancelled and made again (the service closed the withdrawn
    order meanwhile) ends the stranger's session again."""

    async def main():
        allocator, planner = make(ledger, t4=1)
        running(ledger, allocator, "sam")
        first = book(ledger)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        rows.delete_reservation(ledger, first.id)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        assert order.withdrawn_at is not None
        rows.mark_order(ledger, order.session_id, done=utcnow(), as_read=order)  # the service closes it
        again = book(ledger)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        assert (order.user, order.withdrawn_at, order.noticed_at) == ("sam", None, None)
        assert order.stop_at == again.start - timedelta(minutes=5)

    asyncio.run(main())


def test_a_preemption_no_longer_needed_is_withdrawn_though_its_request_still_waits(ledger):
    """A two-T4 request took two preemptible sessions; a full-price student stops: one preemption is enough."""

    async def main():
        allocator, planner = make(ledger, t4=3)
        for user in ("a", "b"):
            running(ledger, allocator, user, profile="t4p", tier="preemptible")
        full = running(ledger, allocator, "full", minutes_ago=60)
        await planner.fresh(0)
        allocator.expect("big/", ask("big"))
        waiting = asyncio.ensure_future(allocator.acquire("big/", "T4", 2))
        await wait_in_queue(allocator, "big/")
        await planner.settled()
        assert sorted(o.user for o in rows.stop_orders(ledger) if o.withdrawn_at is None) == ["a", "b"]
        stop(ledger, allocator, full)
        await cycle(planner, allocator)
        assert allocator.position("big/") is not None  # still waits: it needs two T4s
        assert len([o for o in rows.stop_orders(ledger) if o.withdrawn_at is None]) == 1
        allocator.cancel("big/")
        with pytest.raises(QueueCancelled):
            await waiting

    asyncio.run(main())


def test_a_grants_may_run_until_that_no_longer_holds_when_its_session_starts_is_withdrawn_in_words(ledger):
    """Granted with "may run until" (the class needs both T4s the stranger and X hold); X stops before the
    stranger's server has started: the promise no longer holds, and the student, who read it, is told it is off."""

    async def main():
        allocator, planner = make(ledger, t4=3)
        book(ledger, count=2)
        x = running(ledger, allocator, "x", minutes_ago=60)
        await planner.fresh(0)
        allocator.expect("r/", ask("r"))
        assert await allocator.acquire("r/", "T4", 1)
        grant = allocator.grants.pop("r/")
        assert grant.key == "grant.until" and grant.at is not None
        stop(ledger, allocator, x)
        await planner.settled()
        assert rows.stop_orders(ledger) == []
        record(ledger, allocator, "r", "other", "t4", 0)
        await cycle(planner, allocator)
        (order,) = rows.stop_orders(ledger)
        assert order.user == "r" and order.stop_at == grant.at
        assert order.noticed_at is not None and order.withdrawn_at is not None  # told on the spawn page: "off"

    asyncio.run(main())


# -- the demo: a 1/4-T4 profile and a CS231N T4 booking in use together ------------------------------------------------


def test_the_demos_shares_and_booking_show_correct_counts_and_orders(ledger, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_GPU_DEMO_STATE", str(tmp_path))
    c = PyFileConfigLoader("demo_config.py", path=str(CONFIG)).load_config()
    profiles = {p.slug: p for p in parse_profiles(c.GPULocalSpawner.profiles, require_image=False)}
    booking = book(ledger, count=1)  # the demo's CS231N booking (1 T4), its window an hour from now
    cny = Currency("CNY")

    async def main():
        allocator = GPUAllocator(simulated_inventory(c.GPULocalSpawner.simulated_gpus))
        rule = Preemption(min_runtime=timedelta(seconds=600), grace=timedelta(seconds=120))
        planner = Planner(ledger, Policy("demo", Fifo(), rule, Reservations()), ZONE, refresh=3600)
        facts = {s: ProfileFacts(p.gpu_model, unit_of(p.gpu_share, p.mig)) for s, p in profiles.items()}
        planner.note_profiles(facts)
        allocator.use_planner(planner)

        def quarter(user, minutes_ago):
            allocator._assign(f"{user}/", allocator.free("T4", share=4)[:1])
            return record(ledger, allocator, user, "thesis", "t4-quarter", minutes_ago)

        for i, user in enumerate(("dave", "erin", "fay")):
            quarter(user, 40 + i)
        await cycle(planner, allocator)
        assert rows.stop_orders(ledger) == []  # the other T4 is free for the class
        assert describe_profile(profiles["t4"], allocator, cny).endswith("1 of 2 free")
        assert describe_profile(profiles["t4-quarter"], allocator, cny).endswith("5 of 8 shares free")
        now = utcnow()
        reservations = planner.view.reservations
        assert reserved_note(reservations, "T4", now, ZONE).startswith("1 reserved for CS231N from")
        note = reserved_note(reservations, "T4", now, ZONE, share=4)
        assert note.startswith("1 whole GPU reserved for CS231N from"), note
        assert "整卡" in reserved_note(reservations, "T4", now, ZONE, "zh-CN", share=4)
        # a whole-T4 stranger takes the free T4: the class needs one back, from the most recent holder (no share
        # student: stopping some of the three frees nothing, and the whole T4 is newer)
        allocator._assign("gil/", allocator.free("T4")[:1])
        gil = record(ledger, allocator, "gil", "thesis", "t4", 5)
        await cycle(planner, allocator)
        assert [(o.session_id, o.kind) for o in rows.stop_orders(ledger)] == [(gil.id, "reserved")]
        assert rows.stop_orders(ledger)[0].stop_at == booking.start - timedelta(minutes=5)
        # one share student stops: nothing changes for the class (its T4 is still split)
        stop(ledger, allocator, ledger_start(ledger, "s-dave"))
        await cycle(planner, allocator)
        assert [o.withdrawn_at for o in rows.stop_orders(ledger)] == [None]
        # the other two stop: their T4 is whole and free for the class, and gil's end is withdrawn
        for sid in ("s-erin", "s-fay"):
            stop(ledger, allocator, ledger_start(ledger, sid))
        await cycle(planner, allocator)
        assert [o.withdrawn_at is not None for o in rows.stop_orders(ledger)] == [True]
        assert describe_profile(profiles["t4-quarter"], allocator, cny).endswith("4 of 8 shares free")

    asyncio.run(main())


def ledger_start(ledger, session_id) -> SessionStart:
    s = ledger.get_session(session_id)
    return SessionStart(s.id, s.user, s.server_name, tuple(s.group_list), s.profile, (), 0, "CNY", s.started)


def test_a_strangers_share_goes_where_the_scheduler_placed_it_not_on_the_class_gpu(ledger):
    """Two T4s, cs231n's booking of one in force. A member's quarter splits a T4: that GPU is the class's (every share
    on it a member's), and the scheduler grants a stranger's quarter on the free T4, not beside her. The allocator
    put it on the fuller GPU, the class's (shares go to the fullest split GPU first when nothing says otherwise)."""

    async def main():
        allocator, planner = make(ledger, t4=2)
        book(ledger, count=1, hours_from_now=-0.5)
        running(ledger, allocator, "ann", group="cs231n", profile="t4s")
        (classes,) = {d.parent_uuid for d in allocator.held_by("ann/")}
        await cycle(planner, allocator)
        allocator.expect("dan/", ask("dan", profile="t4s"))
        task = asyncio.ensure_future(allocator.acquire("dan/", "T4", 1, share=4))
        await cycle(planner, allocator)
        (unit,) = await asyncio.wait_for(task, 5)
        assert unit.is_share and unit.parent_uuid != classes

    asyncio.run(main())
