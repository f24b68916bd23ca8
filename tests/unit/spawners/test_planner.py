"""The hub's queue run by the scheduler (spawners/assign/plan.py): a real allocator, a real sqlite ledger.

What the queue grants, in which order the rest waits and why, and which stop orders it writes for the gpu
service (preemptions, reservation ends), with the sessions as the spawner records them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler import FairShare, Fifo, Policy, Preemption, Reservations
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.plan import Ask, Planner, ProfileFacts
from jupyterhub_gpu.spawners.assign.protocol import QueueCancelled

ZONE = ZoneInfo("Asia/Shanghai")
PROFILES = {"t4": ProfileFacts("T4"), "t4p": ProfileFacts("T4")}


def policy(fair=False, grace=120, min_runtime=600):
    return Policy(
        "test",
        FairShare() if fair else Fifo(),
        Preemption(min_runtime=timedelta(seconds=min_runtime), grace=timedelta(seconds=grace)),
        Reservations(),
    )


@pytest.fixture
def ledger(tmp_path):
    return Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")


def make(ledger, t4=1, **kwargs) -> tuple[GPUAllocator, Planner]:
    allocator = GPUAllocator(simulated_inventory([{"model": "T4", "count": t4, "memory_gb": 16}]))
    planner = Planner(ledger, policy(**kwargs), ZONE, refresh=3600)
    planner.note_profiles(PROFILES)
    allocator.use_planner(planner)
    return allocator, planner


def ask(user, group, profile="t4", tier="standard", ago=0):
    return Ask(user, "", group, (group,), profile, tier, utcnow() - timedelta(seconds=ago))


def running(ledger, allocator, user, group, profile="t4", minutes_ago=30, tier=None):
    """A session as the spawner records it, holding its GPU in the allocator."""
    devices = allocator.free("T4")[:1]
    allocator._assign(f"{user}/", devices)
    start = SessionStart(
        id=f"s-{user}",
        user=user,
        server_name="",
        groups=(group,),
        profile=profile,
        gpus=tuple(d.uuid for d in devices),
        rate_micros=50_000,
        currency="CNY",
        started=utcnow() - timedelta(minutes=minutes_ago),
        pool=group,
        tier=tier,
    )
    assert ledger.record_start(start)
    return start


async def wait_in_queue(allocator, key, model="T4"):
    for _ in range(200):
        if allocator.position(key) is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{key} never queued")


def test_fifo_policy_keeps_the_order_of_arrival_and_grants_on_release(ledger):
    async def main():
        allocator, planner = make(ledger)
        holder = await allocator.acquire("h/", "T4", 1)
        assert holder
        seen = {}
        allocator.expect("a/", ask("a", "g1"), lambda d: seen.setdefault("a", []).append(d))
        first = asyncio.ensure_future(allocator.acquire("a/", "T4", 1))
        await wait_in_queue(allocator, "a/")
        allocator.expect("b/", ask("b", "g2"))
        second = asyncio.ensure_future(allocator.acquire("b/", "T4", 1))
        await wait_in_queue(allocator, "b/")
        assert allocator.position("a/") == (1, 2) and allocator.position("b/") == (2, 2)
        assert seen["a"][-1].key == "fifo" and (seen["a"][-1].position, seen["a"][-1].length) == (1, 2)
        allocator.release("h/")
        assert (await first) and not second.done()
        assert allocator.position("b/") == (1, 1)
        allocator.cancel("b/")
        with pytest.raises(QueueCancelled):
            await second
        await planner.settled()

    asyncio.run(main())


def test_fair_share_puts_the_group_under_its_share_first_and_publishes_the_queue(ledger):
    now = utcnow()
    for user, group, hours in (("t", "thesis", 3), ("c", "course", 1)):
        start = SessionStart(
            f"past-{user}",
            user,
            "",
            (group,),
            "t4",
            ("GPU-x",),
            50_000,
            "CNY",
            now - timedelta(hours=hours + 1),
            pool=group,
        )
        ledger.record_start(start)
        ledger.record_stop(start.id, now - timedelta(hours=1), "stopped", start)

    async def main():
        allocator, planner = make(ledger, fair=True)
        await allocator.acquire("h/", "T4", 1)
        told = {}
        allocator.expect("theo/", ask("theo", "thesis", ago=60), lambda d: told.__setitem__("theo", d))
        theo = asyncio.ensure_future(allocator.acquire("theo/", "T4", 1))
        await wait_in_queue(allocator, "theo/")
        allocator.expect("ava/", ask("ava", "course"), lambda d: told.__setitem__("ava", d))
        ava = asyncio.ensure_future(allocator.acquire("ava/", "T4", 1))
        await wait_in_queue(allocator, "ava/")
        assert allocator.position("ava/") == (1, 2) and allocator.position("theo/") == (2, 2)
        assert told["theo"].key == "share" and told["theo"].values["percent"] == 150
        assert told["ava"].values["percent"] == 50
        await planner.settled()
        published = {q.user: q for q in rows.queue(ledger)}
        assert (published["ava"].position, published["theo"].position) == (1, 2)
        assert published["theo"].reason_key == "share" and published["theo"].group == "thesis"
        allocator.release("h/")
        assert await ava
        assert not theo.done()
        allocator.cancel("theo/")
        with pytest.raises(QueueCancelled):
            await theo
        await planner.settled()
        assert rows.queue(ledger) == []

    asyncio.run(main())


def test_a_full_price_request_preempts_the_preemptible_session_never_a_young_one(ledger):
    async def main():
        allocator, planner = make(ledger, t4=2, grace=120, min_runtime=600)
        old = running(ledger, allocator, "old", "g", "t4p", minutes_ago=30, tier="preemptible")
        running(ledger, allocator, "young", "g", "t4p", minutes_ago=2, tier="preemptible")
        await planner.fresh(0)
        allocator.expect("full/", ask("full", "g2"))
        waiting = asyncio.ensure_future(allocator.acquire("full/", "T4", 1))
        await wait_in_queue(allocator, "full/")
        await planner.settled()
        orders = rows.stop_orders(ledger)
        assert [(o.session_id, o.kind, o.for_user) for o in orders] == [(old.id, "preempted", "full")]
        stop_in = (orders[0].stop_at - orders[0].decided_at).total_seconds()
        assert 119 <= stop_in <= 121, stop_in
        assert orders[0].reason_key == "preempt"  # a preemptible session is told its training is checkpointed
        # the next cycle does not preempt again (nor the young one): one order stays
        allocator._drain()
        await planner.settled()
        assert len(rows.stop_orders(ledger)) == 1
        # the victim's server stops (the service does it at stop_at): its GPU goes to the full-price request
        allocator.release("old/")
        assert await waiting

    asyncio.run(main())


def test_a_reserved_gpu_is_kept_for_the_class_and_a_strangers_session_is_told_its_end(ledger):
    now = utcnow()

    def book(start, end, count=1):
        draft = rows.Draft("cs231n", "T4", count, start, end, note="CS231N")
        return rows.add_reservation(ledger, draft, lambda existing: None, ZONE, now, "admin")

    async def main():
        allocator, planner = make(ledger, t4=2)
        # one T4 is reserved for CS231N now; the other is held by a stranger whose session would still run when a
        # second window starts in an hour
        book(now - timedelta(minutes=10), now + timedelta(hours=2))
        stranger = running(ledger, allocator, "sam", "other", minutes_ago=20)
        book(now + timedelta(hours=1), now + timedelta(hours=3))
        await planner.fresh(0)
        told = {}
        allocator.expect("eve/", ask("eve", "other"), lambda d: told.__setitem__("eve", d))
        eve = asyncio.ensure_future(allocator.acquire("eve/", "T4", 1))
        await wait_in_queue(allocator, "eve/")
        assert told["eve"].key == "reserved" and told["eve"].values["label"] == "CS231N"
        allocator.expect("cara/", Ask("cara", "", "cs231n", ("cs231n",), "t4", "standard", utcnow()))
        assert await allocator.acquire("cara/", "T4", 1)  # a member gets the reserved GPU at once
        await planner.settled()
        orders = {o.session_id: o for o in rows.stop_orders(ledger)}
        assert orders[stranger.id].kind == "reserved" and orders[stranger.id].reason_key == "end"
        assert orders[stranger.id].stop_at == now + timedelta(hours=1) - timedelta(minutes=5)
        allocator.cancel("eve/")
        with pytest.raises(QueueCancelled):
            await eve

    asyncio.run(main())


def test_the_spawn_page_words_the_schedulers_decisions_in_the_readers_language():
    from datetime import datetime

    from jupyterhub_gpu.scheduler import QUEUE, WEEK, Decision, Period, Reservation
    from jupyterhub_gpu.spawners.form import queue_status, reserved_note

    decision = Decision(
        QUEUE,
        "share.aged",
        {"model": "T4", "percent": 140, "period": Period(WEEK), "waited": timedelta(hours=1, minutes=5)},
        position=2,
        length=5,
        wait=timedelta(minutes=12),
    )
    assert queue_status(decision, "T4", 1, True, "en") == (
        "Waiting for a free Simulated T4 — position 2 of 5 — about 12 min — your group has used 140% of its share"
        " of T4 GPUs this week; your 1 h 5 min of waiting moves you up"
    )
    zh = queue_status(decision, "T4", 1, True, "zh-CN")
    assert "140%" in zh and "12 分钟" in zh and "this week" not in zh and "waiting" not in zh, zh
    fifo = Decision(QUEUE, "fifo", {}, position=1, length=1, wait=None)
    assert queue_status(fifo, "A100", 1, False, "en") == "Waiting for a free A100 — position 1 of 1"

    now = datetime(2026, 12, 8, 13, 0, tzinfo=ZONE)
    weekly = Reservation("1", "cs231n", "T4", 2, now.replace(hour=14), now.replace(hour=16), now.date(), "CS231N")
    assert reserved_note([weekly], "T4", now, ZONE) == "2 reserved for CS231N from 14:00"
    assert reserved_note([weekly], "T4", now.replace(hour=15), ZONE) == "2 reserved for CS231N until 16:00"
    assert reserved_note([weekly], "A100", now, ZONE) is None
    assert reserved_note([weekly], "T4", now.replace(hour=17), ZONE) is None  # over, and no later window
    assert "CS231N" in reserved_note([weekly], "T4", now, ZONE, "zh-CN") and "预留" in reserved_note(
        [weekly], "T4", now, ZONE, "zh-CN"
    )


def test_a_share_of_a_reserved_model_counts_as_its_gpu_so_a_stranger_cannot_take_the_class_s(ledger):
    now = utcnow()
    draft = rows.Draft("cs231n", "T4", 1, now - timedelta(minutes=10), now + timedelta(hours=2), note="CS231N")
    rows.add_reservation(ledger, draft, lambda existing: None, ZONE, now, "admin")

    async def main():
        allocator, planner = make(ledger, t4=1)
        planner.note_profiles({"t4s": ProfileFacts("T4", unit="share-4")})
        await planner.fresh(0)
        told = {}
        stranger = Ask("eve", "s", "other", ("other",), "t4s", "standard", utcnow(), unit="share-4")
        allocator.expect("eve/s", stranger, lambda d: told.__setitem__("eve", d))
        eve = asyncio.ensure_future(allocator.acquire("eve/s", "T4", 1, share=4))
        await wait_in_queue(allocator, "eve/s")
        assert told["eve"].key == "reserved"
        member = Ask("cara", "", "cs231n", ("cs231n",), "t4", "standard", utcnow())
        allocator.expect("cara/", member)
        assert await asyncio.wait_for(allocator.acquire("cara/", "T4", 1), 5)
        allocator.cancel("eve/s")
        with pytest.raises(QueueCancelled):
            await eve

    asyncio.run(main())


def test_an_order_whose_request_left_the_queue_is_withdrawn_before_its_time(ledger):
    async def main():
        allocator, planner = make(ledger, t4=1, grace=120, min_runtime=0)
        victim = running(ledger, allocator, "vic", "g", "t4p", minutes_ago=30, tier="preemptible")
        await planner.fresh(0)
        allocator.expect("mal/", ask("mal", "g2"))
        waiting = asyncio.ensure_future(allocator.acquire("mal/", "T4", 1))
        await wait_in_queue(allocator, "mal/")
        await planner.settled()
        (order,) = rows.stop_orders(ledger)
        assert (order.session_id, order.cause, order.withdrawn_at) == (victim.id, "request:mal/", None)
        allocator.cancel("mal/")  # asked and left at once: the victim must not be stopped for nothing
        with pytest.raises(QueueCancelled):
            await waiting
        await planner.settled()
        (order,) = rows.stop_orders(ledger)
        assert order.withdrawn_at is not None and order.done_at is None
        # a later full-price request preempts again, with an order of its own
        allocator.expect("next/", ask("next", "g2"))
        again = asyncio.ensure_future(allocator.acquire("next/", "T4", 1))
        await wait_in_queue(allocator, "next/")
        await planner.settled()
        (order,) = rows.stop_orders(ledger)
        assert (order.cause, order.withdrawn_at) == ("request:next/", None)
        allocator.cancel("next/")
        with pytest.raises(QueueCancelled):
            await again

    asyncio.run(main())


def test_a_grant_whose_gpu_is_still_held_by_a_session_told_to_stop_waits_and_is_told_why(ledger):
    async def main():
        allocator, planner = make(ledger, t4=1)
        held = running(ledger, allocator, "old", "g", minutes_ago=30)
        past = utcnow() - timedelta(seconds=30)  # due, but the service has not stopped it yet
        rows.order_stop(ledger, ledger.get_session(held.id), "reserved", past, "end", {}, past - timedelta(hours=1))
        await planner.fresh(0)
        told = []
        allocator.expect("new/", ask("new", "g2"), told.append)
        waiting = asyncio.ensure_future(allocator.acquire("new/", "T4", 1))
        await wait_in_queue(allocator, "new/")
        assert told[-1].key == "stopping" and (told[-1].position, told[-1].length) == (1, 1)
        await planner.settled()
        assert [(q.user, q.reason_key) for q in rows.queue(ledger)] == [("new", "stopping")]
        allocator.release("old/")  # the server ended: its GPU goes to the waiting request
        assert await asyncio.wait_for(waiting, 5)

    asyncio.run(main())
