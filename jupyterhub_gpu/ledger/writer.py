"""The ledger's one writer: a thread with its own connection that writes what the service's requests ask for.

The service answers every request on one event loop. A write on that loop waits for its commit (an fsync on
sqlite, a round trip on PostgreSQL), and every other request waits with it: with a thousand servers pushing
their GPU samples every 30 s, those commits set the requests' p99. So the requests' writes go to one thread,
the :class:`LedgerWriter`, through a bounded queue, in the order they came:

- GPU samples (:meth:`LedgerWriter.push`): the pushes waiting together are written in one transaction
  (:func:`.queries.samples.record_samples`, at most ``max_batch`` at once), with exactly the rows that
  writing them one by one leaves; each push gets its own minute's row or its own error (a full minute
  refuses that push alone). While one batch commits, the next gathers, so the batches grow with the load.
- any other write (:meth:`LedgerWriter.call`): a function of the ledger, run alone, in its turn.

A request's answer waits for its write's commit, so a 2xx always names a row that is in the ledger. When
``limit`` writes are already waiting (the database is slow, or locked by another process), a new one is
refused at once with :class:`WriterBusy`, which the service answers with a 503 and ``Retry-After``: the
queue never grows without bound, and nothing acknowledged is lost. :meth:`LedgerWriter.close` takes no
new write and writes every waiting one before it returns; a closed writer stays this ledger's writer
(:meth:`LedgerWriter.of`), refusing every write with ``WriterBusy(closed=True)``, so a request that comes
late in a shutdown is answered 503 and its server sends it again to the next service.

The tick's writes come here too (:meth:`LedgerWriter.call_when_free`, which waits for room rather than
being refused): on sqlite one write transaction at a time is all the file allows, and with every write
of the process in one queue none of them waits on another's lock. A call runs in the context of its
caller (``contextvars``), so :func:`.counting.statements_of` counts a tick's writes as the tick's.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import logging
import math
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from jupyterhub_gpu.ledger.counting import note_write
from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.ledger.store import Ledger

log = logging.getLogger("jupyterhub_gpu.ledger")

T = TypeVar("T")

#: Writes that may wait for the writer before a new one is refused (``c.GPUService.write_queue_limit``).
DEFAULT_LIMIT = 2000
#: Pushes written in one transaction at most.
MAX_BATCH = 500
#: Seconds between a waiting tick write's tries for room in a full queue.
FREE_POLL = 0.05

_WRITERS: weakref.WeakKeyDictionary[Ledger, LedgerWriter] = weakref.WeakKeyDictionary()
_STOP = object()


def _counted(write: Callable[[Ledger], Any], ledger: Ledger) -> Any:
    """``write(ledger)``, its time counted for its caller's :func:`.counting.writes_of`."""
    began = time.monotonic()
    try:
        return write(ledger)
    finally:
        note_write(time.monotonic() - began)


class WriterBusy(Exception):
    """The writer has ``limit`` writes waiting (or is closed): this one was not taken; try again in
    ``retry_after`` seconds."""

    def __init__(self, waiting: int, retry_after: int, closed: bool = False):
        self.waiting = waiting
        self.retry_after = retry_after
        self.closed = closed
        what = "is shutting down" if closed else f"has {waiting} writes waiting"
        super().__init__(f"The ledger's writer {what}; nothing was written. Try again in {retry_after} s.")


class LedgerWriter:
    """One thread that writes to ``ledger`` what it is given, in order: pushes in batches, other writes alone.

    ``limit`` bounds the writes waiting (:class:`WriterBusy` past it); ``max_batch`` bounds one transaction
    of pushes; ``window`` (seconds, default none) is how long a batch waits for more pushes after its first.
    """

    def __init__(self, ledger: Ledger, limit: int = DEFAULT_LIMIT, max_batch: int = MAX_BATCH, window: float = 0.0):
        if limit < 1 or max_batch < 1:
            raise ValueError(f"a writer's limit and max_batch must be at least 1, got {limit} and {max_batch}")
        self.ledger = ledger
        self.limit = limit
        self.max_batch = max_batch
        self.window = window
        self.batches = 0  # transactions of pushes written (for tests and benchmarks)
        self.written = 0  # writes done, pushes and calls
        self.refused = 0  # writes refused as busy
        self._queue: queue.Queue = queue.Queue(maxsize=limit)
        self._closed = False
        self._close_lock = threading.Lock()
        self._recent: collections.deque[tuple[float, int]] = collections.deque(maxlen=20)  # (seconds, writes)
        self._thread = threading.Thread(target=self._run, name="jupyterhub-gpu-ledger-writer", daemon=True)
        self._thread.start()

    @classmethod
    def of(cls, ledger: Ledger, limit: int | None = None) -> LedgerWriter:
        """The one writer of ``ledger`` in this process (made at its first use; ``limit`` for a new one).

        Once closed it stays the one: it refuses every write (``WriterBusy(closed=True)``, a 503), so nothing
        is written after :meth:`close` has drained it (the service closes the ledger next).
        """
        writer = _WRITERS.get(ledger)
        if writer is None:
            writer = _WRITERS[ledger] = cls(ledger, limit=limit or DEFAULT_LIMIT)
        return writer

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def retry_after(self) -> int:
        """Seconds after which the writes now waiting should be written, from the recent pace (1 to 60)."""
        seconds = sum(s for s, _ in self._recent)
        writes = sum(n for _, n in self._recent)
        pace = writes / seconds if seconds > 0 and writes else 100.0  # writes a second
        return max(1, min(60, math.ceil(self.waiting / pace)))

    # -- what the service's handlers call ---------------------------------------------
    def submit(self, item: Push | Callable[[Ledger], Any]) -> Future:
        """Queue a push or a write; its Future has the row (or the call's result) once committed.

        WriterBusy, at once and with nothing queued, when ``limit`` writes are waiting or the writer is closed.
        """
        future: Future = Future()
        if not isinstance(item, Push):  # run in the caller's context: what it counts (see the module's doc)
            item = functools.partial(contextvars.copy_context().run, _counted, item)
        with self._close_lock:  # no write slips in behind close()'s stop mark
            if self._closed:
                raise WriterBusy(self.waiting, 5, closed=True)
            try:
                self._queue.put_nowait((item, future))
            except queue.Full:
                self.refused += 1
                raise WriterBusy(self.limit, self.retry_after()) from None
        return future

    async def push(self, push: Push) -> UsageMinute:
        """Write a push with the others waiting: its minute's row once committed, or the SampleError that
        refused it (WriterBusy: not taken)."""
        return await asyncio.wrap_future(self.submit(push))

    async def call(self, write: Callable[..., T], *args, **kwargs) -> T:
        """Run ``write(ledger, *args, **kwargs)`` on the writer, in its turn: its result once it returns."""
        return await asyncio.wrap_future(self.submit(lambda ledger: write(ledger, *args, **kwargs)))

    async def call_when_free(self, write: Callable[..., T], *args, **kwargs) -> T:
        """:meth:`call`, but while ``limit`` writes wait, wait for room instead of being refused (the tick's
        writes: a tick goes on once its write is done; the requests keep the queue's room first).

        WriterBusy only once the writer is closed.
        """
        while True:
            try:
                future = self.submit(lambda ledger: write(ledger, *args, **kwargs))
            except WriterBusy as e:
                if e.closed:
                    raise
                await asyncio.sleep(FREE_POLL)
                continue
            return await asyncio.wrap_future(future)

    def close(self, timeout: float | None = 60) -> None:
        """Take no new write, write every waiting one, and stop the thread."""
        with self._close_lock:
            if not self._closed:
                self._closed = True
                try:  # behind every write already taken (waits while the queue is full)
                    self._queue.put(_STOP, timeout=timeout)
                except queue.Full:
                    log.error("the ledger's writer did not drain in %s s; %d write(s) left", timeout, self.waiting)
        self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        carried = None
        while True:
            entry = carried if carried is not None else self._queue.get()
            carried = None
            if entry is _STOP:
                return
            item, future = entry
            if not isinstance(item, Push):
                self._call(item, future)
                continue
            batch = [entry]
            deadline = time.monotonic() + self.window
            while len(batch) < self.max_batch:
                try:
                    left = deadline - time.monotonic()
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP or not isinstance(nxt[0], Push):
                    carried = nxt  # a call or the stop comes after this batch, in its turn
                    break
                batch.append(nxt)
            self._write(batch)

    def _call(self, write: Callable[[Ledger], Any], future: Future) -> None:
        if not future.set_running_or_notify_cancel():
            return
        began = time.monotonic()
        try:
            result = write(self.ledger)
        except BaseException as e:  # the caller's to report, as if it had written on its own
            future.set_exception(e)
        else:
            future.set_result(result)
        self._done(began, 1)

    def _write(self, batch: list[tuple[Push, Future]]) -> None:
        began = time.monotonic()
        try:
            results = record_samples(self.ledger, [push for push, _ in batch])
        except Exception as e:  # the database failed: every push of the batch gets the error, as it would alone
            log.error("could not write %d sample(s): %s", len(batch), e)
            results = [e] * len(batch)
        self.batches += 1
        for (_, future), result in zip(batch, results, strict=True):
            if not future.set_running_or_notify_cancel():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)
        self._done(began, len(batch))

    def _done(self, began: float, writes: int) -> None:
        self.written += writes
        self._recent.append((time.monotonic() - began, writes))
