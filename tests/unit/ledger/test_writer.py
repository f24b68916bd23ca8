"""The ledger's one writer: order, batches, each waiting request's own error, a bound that refuses, a drain at close.

Real databases (sqlite and the test PostgreSQL server); the writer is made to fall behind for real, by a write
that holds it or by another connection holding the database's lock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from jupyterhub_gpu.ledger.counting import statements_of, writes_of
from jupyterhub_gpu.ledger.queries.samples import Push, session_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.ledger.writer import LedgerWriter, WriterBusy
from jupyterhub_gpu.rules.samples import Sample, SampleError
from jupyterhub_gpu.session import SessionStart

T0 = datetime(2026, 11, 29, 19, 46, 4, tzinfo=timezone.utc)


def start(ledger: Ledger, sid: str = "a") -> None:
    ledger.record_start(
        SessionStart(
            id=sid,
            user="ann",
            server_name="",
            groups=("cs231n",),
            profile="t4",
            gpus=(f"GPU-{sid}-0",),
            rate_micros=50_000,
            currency="CNY",
            started=T0 - timedelta(hours=2),
            simulated=True,
        )
    )


def push(sid: str = "a", minute: int = 0, samples: int = 1) -> Push:
    sample = Sample(sid, T0 - timedelta(minutes=minute), samples, 50.0, 100, 16_384, 1, 1, None, None, ())
    return Push("ann", sample, 1, None)


def pushes_of(ledger: Ledger, sid: str = "a") -> int:
    return sum(row.pushes for row in session_minutes(ledger, sid))


class Gate:
    """A write that holds the writer until opened: what waits behind it piles up, as behind a slow commit."""

    def __init__(self):
        self.entered = threading.Event()
        self.opened = threading.Event()

    def __call__(self, ledger):
        self.entered.set()
        assert self.opened.wait(30), "the gate was never opened"
        return "gate"

    def hold(self, writer: LedgerWriter):
        future = writer.submit(self)
        assert self.entered.wait(10)
        return future


@pytest.fixture
def writer(ledger):
    start(ledger)
    w = LedgerWriter(ledger, limit=50)
    yield w
    w.close()


def test_writes_are_done_in_the_order_they_came(writer, ledger):
    seen: list[str] = []
    gate = Gate()
    gate.hold(writer)
    futures = []
    for i in range(6):
        futures.append(writer.submit(push(minute=i)))
        futures.append(writer.submit(lambda ledger, i=i: seen.append(f"call {i}: {pushes_of(ledger)} pushes")))
    gate.opened.set()
    for f in futures:
        f.result(10)
    # each call ran after every push queued before it, and before those after it
    assert seen == [f"call {i}: {i + 1} pushes" for i in range(6)]


def test_pushes_that_wait_together_are_one_transaction(writer, ledger):
    gate = Gate()
    gate.hold(writer)
    futures = [writer.submit(push(minute=i % 3)) for i in range(30)]
    gate.opened.set()
    rows = [f.result(10) for f in futures]
    assert writer.batches == 1
    assert {row.minute.minute for row in rows} == {(T0 - timedelta(minutes=m)).minute for m in range(3)}
    assert pushes_of(ledger) == 30


def test_a_batch_is_at_most_max_batch_pushes(ledger):
    start(ledger)
    writer = LedgerWriter(ledger, max_batch=4)
    try:
        gate = Gate()
        gate.hold(writer)
        futures = [writer.submit(push(minute=i)) for i in range(10)]
        gate.opened.set()
        for f in futures:
            f.result(10)
        assert writer.batches == 3  # 4 + 4 + 2
        assert pushes_of(ledger) == 10
    finally:
        writer.close()


def test_each_waiting_request_gets_its_own_error(writer, ledger):
    gate = Gate()
    gate.hold(writer)
    good = writer.submit(push())
    unknown_gpu = Sample("a", T0, 1, 50.0, 100, 16_384, 1, 1, None, None, (("GPU-a-0", 1.0, 1), ("GPU-x", 1.0, 1)))
    refused = writer.submit(Push("ann", unknown_gpu, 1, None))

    def broken(ledger):
        raise ZeroDivisionError("a write that fails")

    failing = writer.submit(broken)
    after = writer.submit(push(minute=1))
    gate.opened.set()
    assert good.result(10).pushes == 1
    with pytest.raises(SampleError, match="would be one more"):
        refused.result(10)
    with pytest.raises(ZeroDivisionError):
        failing.result(10)
    assert after.result(10).pushes == 1  # the writer goes on after a failed write
    assert pushes_of(ledger) == 2


def test_a_database_that_fails_fails_every_push_of_its_batch(writer, ledger):
    gate = Gate()
    gate.hold(writer)
    futures = [writer.submit(push(minute=i)) for i in range(3)]
    with ledger.engine.begin() as conn:
        conn.execute(text("DROP TABLE gpu_usage_minutes"))
    gate.opened.set()
    for f in futures:
        with pytest.raises(Exception) as raised:
            f.result(10)
        assert not isinstance(raised.value, SampleError)


def test_a_writer_that_falls_behind_refuses_then_recovers(writer, ledger):
    gate = Gate()
    gate.hold(writer)
    taken = [writer.submit(push(minute=i % 50)) for i in range(writer.limit)]
    with pytest.raises(WriterBusy) as busy:
        writer.submit(push())
    assert busy.value.retry_after >= 1 and "nothing was written" in str(busy.value)
    assert writer.waiting == writer.limit  # the refused one was not queued
    gate.opened.set()
    for f in taken:
        f.result(10)
    assert writer.submit(push(minute=59)).result(10).pushes == 1  # taken again once it caught up
    assert pushes_of(ledger) == writer.limit + 1
    assert writer.refused == 1


def test_a_held_database_lock_makes_the_writer_refuse_not_grow(tmp_path):
    """Another process's transaction holds sqlite's write lock: pushes wait, then are refused, then all land."""
    url = f"sqlite:///{tmp_path / 'locked.sqlite'}"
    ledger = Ledger(url)
    start(ledger)
    writer = LedgerWriter(ledger, limit=5)
    other = Ledger(url, migrate=False)
    holder = other.engine.raw_connection()
    try:
        holder.driver_connection.execute("BEGIN IMMEDIATE")  # the write lock, as a long write of the hub would hold it
        taken, refused = [], 0
        for i in range(20):
            try:
                taken.append(writer.submit(push(minute=i)))
            except WriterBusy:
                refused += 1
            time.sleep(0.01)
        assert len(taken) <= writer.limit + 1 and refused >= 20 - writer.limit - 1
        assert not any(f.done() for f in taken)  # nothing answered while nothing is committed
        holder.driver_connection.rollback()
        rows = [f.result(40) for f in taken]
        assert all(r.pushes == 1 for r in rows)
        assert pushes_of(ledger) == len(taken)
    finally:
        holder.close()
        writer.close()
        other.close()
        ledger.close()


def test_close_writes_every_waiting_write_then_takes_none(ledger):
    start(ledger)
    writer = LedgerWriter(ledger)
    gate = Gate()
    gate.hold(writer)
    futures = [writer.submit(push(minute=i)) for i in range(10)]
    closing = threading.Thread(target=writer.close)
    closing.start()
    time.sleep(0.1)
    with pytest.raises(WriterBusy) as busy:
        writer.submit(push())
    assert busy.value.closed
    gate.opened.set()
    closing.join(10)
    assert not closing.is_alive()
    assert all(f.done() and f.result().pushes == 1 for f in futures)
    assert pushes_of(ledger) == 10


async def test_the_event_loop_answers_while_the_writer_waits(writer, ledger):
    """A push awaits its commit without holding the loop: other coroutines run meanwhile."""
    gate = Gate()
    gate.hold(writer)
    pending = asyncio.ensure_future(writer.push(push()))
    ticks = 0
    for _ in range(5):
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 5 and not pending.done()
    gate.opened.set()
    assert (await asyncio.wait_for(pending, 10)).pushes == 1
    assert await writer.call(lambda ledger, sid: pushes_of(ledger, sid), "a") == 1


async def test_statements_of_counts_only_its_own_task(ledger):
    """The tick's count of statements leaves out the requests the loop answers between its slices."""
    start(ledger)

    async def other_requests():
        for _ in range(5):
            ledger.get_session("a")
            await asyncio.sleep(0)

    async def tick():
        with statements_of(ledger) as counted:
            for _ in range(3):
                ledger.get_session("a")
                await asyncio.sleep(0)
            await asyncio.to_thread(ledger.get_session, "a")  # a part run in a thread is the tick's too
        return counted[0]

    before = ledger.queries
    mine, _ = await asyncio.gather(tick(), other_requests())
    assert mine == 4 and ledger.queries - before == 9


def test_a_closed_writer_stays_the_ledgers_and_takes_nothing(ledger):
    """A request that comes late in a shutdown (a keep-alive connection) gets the closed writer, not a new one."""
    start(ledger)
    writer = LedgerWriter.of(ledger, limit=7)
    writer.close()
    threads = {t.ident for t in threading.enumerate()}
    again = LedgerWriter.of(ledger)
    assert again is writer and again.limit == 7
    with pytest.raises(WriterBusy) as busy:
        again.submit(push())
    assert busy.value.closed and busy.value.retry_after == 5
    assert {t.ident for t in threading.enumerate()} <= threads  # no writer thread started for it
    assert pushes_of(ledger) == 0


async def test_a_waiting_call_waits_for_room_and_counts_in_its_callers_context(writer, ledger):
    """The tick's writes: never refused while requests fill the queue, done in their turn, counted as the tick's."""
    gate = Gate()
    gate.hold(writer)
    futures = [writer.submit(push(minute=i)) for i in range(writer.limit)]  # the queue is full
    with pytest.raises(WriterBusy):
        writer.submit(push())
    with statements_of(ledger) as counted, writes_of() as writes:
        waiting = asyncio.ensure_future(writer.call_when_free(lambda ledger, sid: ledger.get_session(sid).id, "a"))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        gate.opened.set()
        assert await asyncio.wait_for(waiting, 10) == "a"
    assert counted[0] == 1  # its one statement, run on the writer's thread, is counted here; the pushes' are not
    assert writes.count == 1 and 0 < writes.longest == writes.seconds  # and its time on the writer
    assert all(f.result().pushes for f in futures)
    writer.close()
    with pytest.raises(WriterBusy):
        await writer.call_when_free(lambda ledger: None)
