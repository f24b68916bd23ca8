"""The allocator: exclusive GPU assignment and the strict-FIFO wait queue, on a real event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.spawners.assign import queue as allocator_module
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, AssignmentConflict, QueueCancelled, QueueTimeout
from jupyterhub_gpu.spawners.assign.queue import wait_limit_text as _seconds


def make_allocator(t4: int = 4, a100: int = 1) -> GPUAllocator:
    spec = []
    if t4:
        spec.append({"model": "T4", "count": t4, "memory_gb": 16})
    if a100:
        spec.append({"model": "A100", "count": a100, "memory_gb": 40})
    return GPUAllocator(simulated_inventory(spec))


def uuids_of(alloc: GPUAllocator, model: str) -> list[str]:
    return [d.uuid for d in alloc.matching(model)]


def check_invariants(alloc: GPUAllocator) -> dict[str, list[str]]:
    """No GPU is held twice, and the holder map and the assignments agree."""
    assignments = alloc.assignments()
    held = [u for uuids in assignments.values() for u in uuids]
    assert len(held) == len(set(held)), f"a GPU is held twice: {assignments}"
    known = {d.uuid for d in alloc.devices}
    for key, uuids in assignments.items():
        assert uuids, f"{key} has an empty assignment"
        assert [d.uuid for d in alloc.held_by(key)] == uuids
        for u in uuids:
            assert u in known
            assert alloc.holder(u) == key
    for d in alloc.devices:
        holder = alloc.holder(d.uuid)
        if holder is not None:
            assert d.uuid in assignments[holder]
    return assignments


async def settle(rounds: int = 5) -> None:
    """Let granted waiters' tasks finish (a grant reaches its task a few loop turns later)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Positions:
    """Records on_position reports per key."""

    def __init__(self):
        self.reports: dict[str, list[tuple[int, int]]] = {}

    def callback(self, key: str):
        self.reports.setdefault(key, [])
        return lambda position, length: self.reports[key].append((position, length))

    def last(self, key: str) -> tuple[int, int] | None:
        reports = self.reports.get(key) or [None]
        return reports[-1]


# -- reading -------------------------------------------------------------------------


def test_reading_an_idle_allocator():
    alloc = make_allocator(t4=2, a100=1)
    assert [d.name for d in alloc.matching("T4")] == ["Simulated T4", "Simulated T4"]
    assert alloc.matching("V100") == []
    assert alloc.counts("T4") == {"free": 2, "total": 2, "waiting": 0, "unit": "gpu"}
    assert alloc.counts("a100") == {"free": 1, "total": 1, "waiting": 0, "unit": "gpu"}
    assert alloc.held_by("alice/") == []
    assert alloc.assignments() == {}
    assert alloc.position("alice/") is None
    assert all(alloc.holder(d.uuid) is None for d in alloc.devices)


async def test_immediate_acquire_and_release():
    alloc = make_allocator(t4=2)
    devices = await alloc.acquire("alice/", "T4", 1)
    assert [d.uuid for d in devices] == uuids_of(alloc, "T4")[:1]
    assert alloc.holder(devices[0].uuid) == "alice/"
    assert alloc.counts("T4") == {"free": 1, "total": 2, "waiting": 0, "unit": "gpu"}
    assert check_invariants(alloc) == {"alice/": [devices[0].uuid]}
    assert alloc.release("alice/") == [devices[0].uuid]
    assert alloc.assignments() == {}
    assert alloc.release("alice/") == []  # releasing twice is harmless


async def test_assignments_returns_a_copy():
    alloc = make_allocator()
    await alloc.acquire("alice/", "T4", 1)
    alloc.assignments()["alice/"].append("GPU-fake")
    alloc.assignments().clear()
    check_invariants(alloc)
    assert len(alloc.held_by("alice/")) == 1


async def test_a_key_holding_other_gpus_gets_what_it_now_asks_for():
    alloc = make_allocator(t4=4, a100=1)
    t4 = await alloc.acquire("alice/", "T4", 1)
    assert await alloc.acquire("alice/", "T4", 1) == t4  # the same request again: the same GPU
    a100 = await alloc.acquire("alice/", "A100", 1)
    assert [d.uuid for d in a100] == uuids_of(alloc, "A100")
    two = await alloc.acquire("alice/", "T4", 2)
    assert len(two) == 2 and all("T4" in d.name for d in two)
    check_invariants(alloc)
    assert alloc.free("A100") and len(alloc.free("T4")) == 2


async def test_zero_gpus_is_a_no_op():
    alloc = make_allocator()
    assert await alloc.acquire("cpu/", "", 0) == []
    assert await alloc.acquire("cpu/", "T4", -1) == []
    assert alloc.assignments() == {}


# -- ten at once over four ------------------------------------------------------------


async def test_ten_acquires_over_four_gpus_queue_in_arrival_order_and_drain_fifo():
    alloc = make_allocator(t4=4)
    positions = Positions()
    keys = [f"user{i}/" for i in range(10)]
    tasks = {key: asyncio.create_task(alloc.acquire(key, "T4", 1, on_position=positions.callback(key))) for key in keys}
    await asyncio.sleep(0)  # every acquire has run to its assignment or its wait

    # four distinct GPUs assigned at once, without waiting
    first = keys[:4]
    assert all(tasks[k].done() for k in first)
    granted = {k: [d.uuid for d in tasks[k].result()] for k in first}
    assert sorted(u for us in granted.values() for u in us) == sorted(uuids_of(alloc, "T4"))
    assert check_invariants(alloc) == granted
    assert all(positions.reports[k] == [] for k in first)

    # six queued in arrival order, each told its place among six
    waiting = keys[4:]
    assert not any(tasks[k].done() for k in waiting)
    assert [alloc.position(k) for k in waiting] == [(i, 6) for i in range(1, 7)]
    assert [positions.last(k) for k in waiting] == [(i, 6) for i in range(1, 7)]
    # the first waiter heard the queue grow behind it; the last heard only its own place
    assert positions.reports["user4/"] == [(1, n) for n in range(1, 7)]
    assert positions.reports["user9/"] == [(6, 6)]
    assert alloc.counts("T4") == {"free": 0, "total": 4, "waiting": 6, "unit": "gpu"}

    # each release hands the freed GPU to exactly the next waiter
    holders = list(first)
    for step, nxt in enumerate(waiting):
        leaving = holders.pop(0)
        freed = alloc.release(leaving)
        assert freed == granted[leaving]
        # the grant is recorded in the same call, before any await
        assert alloc.holder(freed[0]) == nxt
        check_invariants(alloc)
        await settle()
        assert tasks[nxt].done()
        assert [d.uuid for d in tasks[nxt].result()] == freed
        granted[nxt] = freed
        holders.append(nxt)
        still = waiting[step + 1 :]
        assert not any(tasks[k].done() for k in still)
        assert [alloc.position(k) for k in still] == [(i, len(still)) for i in range(1, len(still) + 1)]
        assert [positions.last(k) for k in still] == [(i, len(still)) for i in range(1, len(still) + 1)]
        assert alloc.counts("T4") == {"free": 0, "total": 4, "waiting": len(still), "unit": "gpu"}

    # the queue is empty: releases now just free GPUs
    for key in holders:
        alloc.release(key)
        check_invariants(alloc)
    assert alloc.counts("T4") == {"free": 4, "total": 4, "waiting": 0, "unit": "gpu"}
    assert alloc.assignments() == {}


async def test_release_of_two_gpus_grants_two_waiters_in_order():
    alloc = make_allocator(t4=2)
    await alloc.acquire("big/", "T4", 2)
    a = asyncio.create_task(alloc.acquire("a/", "T4", 1))
    b = asyncio.create_task(alloc.acquire("b/", "T4", 1))
    c = asyncio.create_task(alloc.acquire("c/", "T4", 1))
    await asyncio.sleep(0)
    freed = alloc.release("big/")
    await settle()
    assert [d.uuid for d in a.result()] == freed[:1]
    assert [d.uuid for d in b.result()] == freed[1:]
    assert not c.done()
    assert alloc.position("c/") == (1, 1)
    check_invariants(alloc)
    c.cancel()
    with pytest.raises(asyncio.CancelledError):
        await c
    assert alloc.position("c/") is None


async def test_a_parked_assignment_stays_taken_until_released_and_frees_the_server_name():
    """A server whose stop failed may still run: its GPUs move to a key of their own, no waiter gets them, and its
    server name can start again (on other GPUs) without taking them back."""
    alloc = make_allocator(t4=2, a100=0)
    held = await alloc.acquire("ann/", "T4", 2)
    bob = asyncio.create_task(alloc.acquire("bob/", "T4", 1))
    await settle()
    assert alloc.park("ann/", "ann/#stuck:s1") == [d.uuid for d in held]
    await settle()
    assert not bob.done() and alloc.position("bob/") == (1, 1)
    assert alloc.held_by("ann/") == [] and [d.uuid for d in alloc.held_by("ann/#stuck:s1")] == [d.uuid for d in held]
    check_invariants(alloc)
    assert alloc.park("nobody/", "nobody/#stuck:s2") == []  # nothing held: nothing moves, nothing is freed
    assert alloc.release("ann/#stuck:s1") == [d.uuid for d in held]  # the server has ended
    await settle()
    assert [d.uuid for d in bob.result()] == [held[0].uuid]
    check_invariants(alloc)


# -- timeouts and cancellation ---------------------------------------------------------


async def test_timeout_raises_and_leaves_the_queue():
    alloc = make_allocator(t4=0, a100=1)
    await alloc.acquire("holder/", "A100", 1)
    positions = Positions()
    first = asyncio.create_task(alloc.acquire("first/", "A100", 1, on_position=positions.callback("first/")))
    quick = asyncio.create_task(alloc.acquire("quick/", "A100", 1, timeout=0.05))
    last = asyncio.create_task(alloc.acquire("last/", "A100", 1, on_position=positions.callback("last/")))
    await asyncio.sleep(0)
    assert alloc.position("last/") == (3, 3)

    with pytest.raises(QueueTimeout) as info:
        await quick
    assert str(info.value) == (
        "No A100 became free within 0.05 seconds; nothing was started. Try again later or choose another profile."
    )
    assert isinstance(info.value, TimeoutError)
    assert alloc.position("quick/") is None
    assert alloc.position("first/") == (1, 2)
    assert alloc.position("last/") == (2, 2)
    assert positions.last("first/") == (1, 2)
    assert positions.last("last/") == (2, 2)
    assert alloc.counts("A100")["waiting"] == 2
    check_invariants(alloc)

    # the timed-out request is not granted later
    alloc.release("holder/")
    await settle()
    assert first.done() and alloc.held_by("first/") == first.result()
    alloc.release("first/")
    await settle()
    assert last.done() and alloc.held_by("last/") == last.result()
    assert alloc.held_by("quick/") == []
    check_invariants(alloc)


async def test_a_timeout_is_not_charged_when_gpus_are_free():
    alloc = make_allocator()
    devices = await alloc.acquire("alice/", "A100", 1, timeout=0.001)
    assert alloc.held_by("alice/") == devices


@pytest.mark.parametrize(
    ("timeout", "shown"),
    [(None, "the time limit"), (0.05, "0.05 seconds"), (30, "30 seconds"), (119, "119 seconds"), (120, "2 minutes"),
     (600, "10 minutes"), (90 * 60, "90 minutes")],
)  # fmt: skip
def test_timeout_wording(timeout, shown):
    assert str(_seconds(timeout)) == shown
    chinese = _seconds(timeout)("zh-CN")
    assert chinese == "时限" if timeout is None else chinese.endswith(("秒", "分钟")) and chinese.split()[0] in shown


async def test_cancel_a_waiting_key():
    alloc = make_allocator(t4=1, a100=0)
    await alloc.acquire("holder/", "T4", 1)
    positions = Positions()
    tasks = {
        key: asyncio.create_task(alloc.acquire(key, "T4", 1, timeout=timeout, on_position=positions.callback(key)))
        for key, timeout in (("a/", None), ("b/", 60), ("c/", None))
    }
    await asyncio.sleep(0)
    assert alloc.cancel("b/") is True
    with pytest.raises(QueueCancelled, match="stopped while it waited"):  # not CancelledError: see QueueCancelled
        await tasks["b/"]
    assert alloc.position("b/") is None
    assert alloc.position("c/") == (2, 2)
    assert positions.last("c/") == (2, 2)
    assert alloc.cancel("b/") is False
    assert alloc.cancel("nobody/") is False
    assert alloc.cancel("holder/") is False  # holding is not waiting

    assert alloc.cancel("a/") is True
    with pytest.raises(QueueCancelled):
        await tasks["a/"]
    assert alloc.position("c/") == (1, 1)
    assert positions.last("c/") == (1, 1)

    alloc.release("holder/")
    await settle()
    assert alloc.held_by("c/") == tasks["c/"].result()
    check_invariants(alloc)


async def test_cancelling_the_task_leaves_the_queue():
    alloc = make_allocator(t4=1, a100=0)
    await alloc.acquire("holder/", "T4", 1)
    a = asyncio.create_task(alloc.acquire("a/", "T4", 1, timeout=60))
    b = asyncio.create_task(alloc.acquire("b/", "T4", 1))
    await asyncio.sleep(0)
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    assert alloc.position("a/") is None
    assert alloc.position("b/") == (1, 1)
    alloc.release("holder/")
    await settle()
    assert b.done()
    assert alloc.held_by("a/") == []
    check_invariants(alloc)


async def test_cancelling_the_head_lets_a_smaller_request_through():
    alloc = make_allocator(t4=2, a100=0)
    await alloc.acquire("one/", "T4", 1)
    big = asyncio.create_task(alloc.acquire("big/", "T4", 2))
    small = asyncio.create_task(alloc.acquire("small/", "T4", 1))
    await asyncio.sleep(0)
    assert not small.done()  # blocked behind big although one GPU is free
    alloc.cancel("big/")
    await settle()
    assert small.done()
    assert alloc.held_by("small/") == small.result()
    with pytest.raises(QueueCancelled):
        await big
    check_invariants(alloc)


async def test_a_failing_position_callback_does_not_break_the_queue(caplog):
    alloc = make_allocator(t4=1, a100=0)
    await alloc.acquire("holder/", "T4", 1)

    def broken(position, length):
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="jupyterhub_gpu.allocator"):
        task = asyncio.create_task(alloc.acquire("a/", "T4", 1, on_position=broken))
        await asyncio.sleep(0)
    assert "position callback for a/ failed" in caplog.text
    assert alloc.position("a/") == (1, 1)
    alloc.release("holder/")
    await settle()
    assert alloc.held_by("a/") == task.result()


# -- strict FIFO -----------------------------------------------------------------------


async def test_two_gpu_request_at_the_head_blocks_a_later_one_gpu_request():
    alloc = make_allocator(t4=4, a100=1)
    for key in ("h1/", "h2/", "h3/"):
        await alloc.acquire(key, "T4", 1)
    assert alloc.counts("T4")["free"] == 1
    big = asyncio.create_task(alloc.acquire("big/", "T4", 2))
    await asyncio.sleep(0)
    small = asyncio.create_task(alloc.acquire("small/", "T4", 1))
    await asyncio.sleep(0)
    # one GPU is free and would fit the small request, but the big one came first
    assert not big.done() and not small.done()
    assert alloc.counts("T4") == {"free": 1, "total": 4, "waiting": 2, "unit": "gpu"}
    assert alloc.position("big/") == (1, 2)
    assert alloc.position("small/") == (2, 2)

    # another model's queue is independent
    other = await alloc.acquire("a100/", "A100", 1)
    assert alloc.held_by("a100/") == other

    alloc.release("h1/")  # now two are free: both go to the head
    await settle()
    assert big.done() and len(big.result()) == 2
    assert not small.done()
    assert alloc.counts("T4") == {"free": 0, "total": 4, "waiting": 1, "unit": "gpu"}
    check_invariants(alloc)

    alloc.release("h2/")
    await settle()
    assert small.done() and alloc.held_by("small/") == small.result()
    check_invariants(alloc)


async def test_a_release_of_another_model_grants_nothing():
    alloc = make_allocator(t4=1, a100=1)
    await alloc.acquire("t4/", "T4", 1)
    await alloc.acquire("a100/", "A100", 1)
    waiter = asyncio.create_task(alloc.acquire("w/", "A100", 1))
    await asyncio.sleep(0)
    alloc.release("t4/")
    await settle()
    assert not waiter.done()
    assert alloc.position("w/") == (1, 1)
    alloc.release("a100/")
    await settle()
    assert waiter.done()
    check_invariants(alloc)


@pytest.mark.parametrize(("model", "count", "total"), [("T4", 5, 4), ("A100", 2, 1), ("V100", 1, 0)])
async def test_more_than_the_host_has_fails_at_once(model, count, total):
    alloc = make_allocator(t4=4, a100=1)
    with pytest.raises(AllocationError) as info:
        await alloc.acquire("greedy/", model, count, timeout=None)
    assert str(info.value) == (
        f"This profile needs {count}× {model} but this host has {total}. Ask your administrator to fix the profile."
    )
    assert alloc.position("greedy/") is None
    assert alloc.assignments() == {}


# -- a key that already holds ------------------------------------------------------------


async def test_acquire_by_a_key_that_already_holds_returns_its_devices():
    alloc = make_allocator(t4=4)
    first = await alloc.acquire("alice/", "T4", 2)
    again = await alloc.acquire("alice/", "T4", 2)
    assert again == first
    assert alloc.counts("T4")["free"] == 2
    assert check_invariants(alloc) == {"alice/": [d.uuid for d in first]}


# -- restore -----------------------------------------------------------------------------


def test_restore_a_saved_assignment():
    alloc = make_allocator(t4=4)
    t4 = uuids_of(alloc, "T4")
    assert alloc.restore("alice/", [t4[2], t4[0]]) == [t4[2], t4[0]]
    assert [d.uuid for d in alloc.held_by("alice/")] == [t4[2], t4[0]]
    assert alloc.holder(t4[2]) == "alice/"
    assert alloc.counts("T4")["free"] == 2
    # restoring the same assignment again changes nothing
    assert alloc.restore("alice/", [t4[2], t4[0]]) == [t4[2], t4[0]]
    assert check_invariants(alloc) == {"alice/": [t4[2], t4[0]]}


async def test_restored_key_gets_its_devices_from_acquire():
    alloc = make_allocator(t4=4)
    t4 = uuids_of(alloc, "T4")
    alloc.restore("alice/", [t4[3]])
    assert [d.uuid for d in await alloc.acquire("alice/", "T4", 1)] == [t4[3]]
    other = await alloc.acquire("bob/", "T4", 1)
    assert other[0].uuid != t4[3]
    check_invariants(alloc)


def test_restore_conflict_records_nothing():
    alloc = make_allocator(t4=4)
    t4 = uuids_of(alloc, "T4")
    alloc.restore("bob/", [t4[1]])
    with pytest.raises(AssignmentConflict) as info:
        alloc.restore("alice/", [t4[0], t4[1]])
    assert str(info.value) == f"alice/ claims {t4[1]}, which bob/ already holds"
    assert alloc.holder(t4[0]) is None
    assert alloc.held_by("alice/") == []
    assert check_invariants(alloc) == {"bob/": [t4[1]]}


def test_restore_skips_unknown_uuids(caplog):
    alloc = make_allocator(t4=2)
    t4 = uuids_of(alloc, "T4")
    with caplog.at_level(logging.WARNING, logger="jupyterhub_gpu.allocator"):
        assert alloc.restore("alice/", ["GPU-removed-from-host", t4[1]]) == [t4[1]]
    assert "alice/ held GPU-removed-from-host, which is not in the inventory any more" in caplog.text
    assert check_invariants(alloc) == {"alice/": [t4[1]]}


async def test_restore_of_only_unknown_uuids_holds_nothing():
    alloc = make_allocator(t4=2)
    assert alloc.restore("alice/", ["GPU-gone"]) == []
    assert alloc.assignments() == {}
    # a later spawn of the same server must get a real GPU, not the empty restored list
    devices = await alloc.acquire("alice/", "T4", 1)
    assert len(devices) == 1
    assert check_invariants(alloc) == {"alice/": [devices[0].uuid]}


def test_restore_ignores_a_repeated_uuid():
    alloc = make_allocator(t4=2)
    t4 = uuids_of(alloc, "T4")
    assert alloc.restore("alice/", [t4[0], t4[0]]) == [t4[0]]
    assert check_invariants(alloc) == {"alice/": [t4[0]]}


async def test_restore_replacing_an_assignment_with_waiters_queued():
    alloc = make_allocator(t4=3, a100=0)
    a, b, c = uuids_of(alloc, "T4")
    alloc.restore("k/", [a])
    alloc.restore("x/", [b])
    pair = asyncio.create_task(alloc.acquire("pair/", "T4", 2))  # one free: waits
    await asyncio.sleep(0)
    assert not pair.done()

    # k's saved state names a and c: neither may go to the waiter in between
    assert alloc.restore("k/", [a, c]) == [a, c]
    await settle()
    assert not pair.done()
    assert check_invariants(alloc) == {"k/": [a, c], "x/": [b]}

    # shrinking k's assignment frees a GPU for the queue
    alloc.restore("k/", [c])
    await settle()
    assert not pair.done()  # only a is free
    alloc.release("x/")
    await settle()
    assert sorted(d.uuid for d in pair.result()) == sorted([a, b])
    assert check_invariants(alloc) == {"k/": [c], "pair/": [d.uuid for d in pair.result()]}


async def test_restore_that_frees_a_gpu_grants_the_next_waiter():
    alloc = make_allocator(t4=2, a100=0)
    a, b = uuids_of(alloc, "T4")
    alloc.restore("k/", [a, b])
    waiter = asyncio.create_task(alloc.acquire("w/", "T4", 1))
    await asyncio.sleep(0)
    alloc.restore("k/", [b])
    await settle()
    assert [d.uuid for d in waiter.result()] == [a]
    assert check_invariants(alloc) == {"k/": [b], "w/": [a]}


# -- grants racing with the end of a wait -------------------------------------------------------


async def test_grant_racing_with_a_real_timeout_does_not_leak():
    """The timeout fires and, in the same loop turn, a release grants the waiter."""
    alloc = make_allocator(t4=1, a100=0)
    (gpu,) = uuids_of(alloc, "T4")
    await alloc.acquire("holder/", "T4", 1)
    racer = asyncio.create_task(alloc.acquire("racer/", "T4", 1, timeout=0.01))
    nxt = asyncio.create_task(alloc.acquire("next/", "T4", 1))
    await asyncio.sleep(0)  # both wait; the racer's timeout is armed
    asyncio.get_running_loop().call_later(0.02, alloc.release, "holder/")
    # block the loop on purpose: both timers are then due and run in one loop turn, timeout first
    time.sleep(0.05)  # noqa: ASYNC251
    with pytest.raises(QueueTimeout):
        await racer
    await settle()
    # the racer gave its GPU back, and it went on to the next waiter
    assert alloc.held_by("racer/") == []
    assert nxt.done() and [d.uuid for d in nxt.result()] == [gpu]
    assert check_invariants(alloc) == {"next/": [gpu]}


async def test_grant_at_the_instant_the_wait_times_out_is_given_back(monkeypatch):
    """Force the race: the grant lands while wait_for is already raising TimeoutError."""
    alloc = make_allocator(t4=1, a100=0)
    (gpu,) = uuids_of(alloc, "T4")
    await alloc.acquire("holder/", "T4", 1)
    seen = []

    async def racing_wait_for(awaitable, timeout):
        await asyncio.sleep(0)
        alloc.release("holder/")  # grants the waiter in this very instant ...
        seen.append(alloc.holder(gpu))
        awaitable.cancel()
        raise asyncio.TimeoutError  # ... as the wait ends

    fake_asyncio = SimpleNamespace(**{n: getattr(asyncio, n) for n in dir(asyncio) if not n.startswith("__")})
    fake_asyncio.wait_for = racing_wait_for
    monkeypatch.setattr(allocator_module, "asyncio", fake_asyncio)

    with pytest.raises(QueueTimeout, match="No T4 became free within 5 seconds"):
        await alloc.acquire("racer/", "T4", 1, timeout=5)
    assert seen == ["racer/"]  # it really was granted
    assert alloc.holder(gpu) is None  # and given back
    assert alloc.position("racer/") is None
    assert check_invariants(alloc) == {}


async def test_grant_then_task_cancel_does_not_leak():
    alloc = make_allocator(t4=1, a100=0)
    (gpu,) = uuids_of(alloc, "T4")
    await alloc.acquire("holder/", "T4", 1)
    task = asyncio.create_task(alloc.acquire("racer/", "T4", 1))
    await asyncio.sleep(0)
    alloc.release("holder/")  # granted ...
    assert alloc.holder(gpu) == "racer/"
    task.cancel()  # ... and cancelled before the task could see the grant
    with pytest.raises(asyncio.CancelledError):
        await task
    assert alloc.holder(gpu) is None
    assert check_invariants(alloc) == {}


async def test_grant_then_task_cancel_with_a_timeout_is_consistent():
    # Python 3.11's wait_for returns a result that is ready when it is cancelled;
    # 3.12's raises CancelledError. Either way, the key holds GPUs exactly when it got them.
    alloc = make_allocator(t4=1, a100=0)
    (gpu,) = uuids_of(alloc, "T4")
    await alloc.acquire("holder/", "T4", 1)
    task = asyncio.create_task(alloc.acquire("racer/", "T4", 1, timeout=60))
    await asyncio.sleep(0)
    alloc.release("holder/")
    task.cancel()
    try:
        devices = await task
    except asyncio.CancelledError:
        assert alloc.holder(gpu) is None
        assert check_invariants(alloc) == {}
    else:
        assert [d.uuid for d in devices] == [gpu]
        assert check_invariants(alloc) == {"racer/": [gpu]}


async def test_many_concurrent_spawns_never_share_a_gpu():
    alloc = make_allocator(t4=3, a100=2)
    keys = [f"u{i}/" for i in range(30)]

    async def session(i, key):
        model, count = ("T4", 1 + i % 2) if i % 3 else ("A100", 1)
        devices = await alloc.acquire(key, model, count, timeout=10)
        check_invariants(alloc)
        assert len(devices) == count
        await asyncio.sleep(0.001 * (i % 4))
        alloc.release(key)
        check_invariants(alloc)
        return key

    done = await asyncio.gather(*(session(i, k) for i, k in enumerate(keys)))
    assert done == keys
    assert alloc.assignments() == {}
    assert alloc.counts("T4") == {"free": 3, "total": 3, "waiting": 0, "unit": "gpu"}


async def test_two_spellings_of_one_model_share_one_strict_fifo_queue():
    alloc = make_allocator(t4=2, a100=0)
    await alloc.acquire("holder", "T4", 1)
    big = asyncio.create_task(alloc.acquire("big", "T4", 2))
    await settle()
    small = asyncio.create_task(alloc.acquire("small", "Simulated T4", 1))
    await settle()
    # one free T4 would fit "small", but "big" came first on the same GPUs
    assert alloc.position("big") == (1, 2) and alloc.position("small") == (2, 2)
    assert alloc.waiting("Simulated T4") == alloc.waiting("T4") == 2
    alloc.release("holder")
    await settle()
    assert big.done() and len(big.result()) == 2 and not small.done()
    alloc.release("big")
    await settle()
    assert small.done()
    check_invariants(alloc)


async def test_a_key_cannot_wait_twice():
    alloc = make_allocator(t4=0, a100=1)
    await alloc.acquire("holder", "A100", 1)
    first = asyncio.create_task(alloc.acquire("twice", "A100", 1))
    await settle()
    with pytest.raises(AllocationError, match="already waiting"):
        await alloc.acquire("twice", "A100", 1)
    assert alloc.position("twice") == (1, 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert alloc.position("twice") is None
