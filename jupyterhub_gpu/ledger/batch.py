"""Samples written in batches: one transaction for the pushes that arrive within a short window.

With a thousand running servers, each pushing its GPU samples every 30 s, writing every push in
transactions of its own (the minute's row, then the session's last activity) made the service's
one event loop wait on two commits (an fsync each on sqlite) per push, about 60 times a second,
and every request queued behind them. The :class:`SampleBatcher` takes the validated pushes of the
handlers and, ``window`` seconds after the first of them (at once when ``max_batch`` are waiting),
writes all that are pending in one transaction (:func:`.queries.samples.record_samples`), then
answers each push with its own row or its own error: a push that its full minute refuses is a 400
for that request only, and the others of the same batch are stored. The rows are exactly those of
writing the pushes one by one in the order they arrived (a test compares them).

The batch is written on the event loop's own thread, like every other write of the service: a
writer thread of its own would wait on sqlite's lock while the loop's writes (the tick's) keep
taking it, sleeping in sqlite's busy handler for up to 100 ms at a time.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.ledger.store import Ledger

log = logging.getLogger("jupyterhub_gpu.ledger")

_BATCHERS: weakref.WeakKeyDictionary[Ledger, SampleBatcher] = weakref.WeakKeyDictionary()


class SampleBatcher:
    """Collects pushes and writes them in one transaction per batch, in arrival order.

    ``window`` is how long (seconds) a batch waits for more pushes after its first one arrives;
    ``max_batch`` caps one transaction (a full batch is written without waiting).
    """

    def __init__(self, ledger: Ledger, window: float = 0.02, max_batch: int = 500):
        self.ledger = ledger
        self.window = window
        self.max_batch = max_batch
        self.batches = 0  # transactions written (for tests and benchmarks)
        self._pending: list[tuple[Push, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None

    @classmethod
    def of(cls, ledger: Ledger) -> SampleBatcher:
        """The one batcher of ``ledger`` in this process (made at its first push)."""
        batcher = _BATCHERS.get(ledger)
        if batcher is None:
            batcher = _BATCHERS[ledger] = cls(ledger)
        return batcher

    async def submit(self, push: Push) -> UsageMinute:
        """Queue a push and wait for its batch: its minute's row, or the SampleError that refused it."""
        loop = asyncio.get_running_loop()
        if self._flusher is not None and not self._flusher.done() and self._flusher.get_loop() is not loop:
            # an earlier event loop went away with its flusher (tests run one loop each): its pushes went with it
            self._pending = [(p, f) for p, f in self._pending if f.get_loop() is loop]
            self._flusher = None
        future = loop.create_future()
        self._pending.append((push, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._pending:
            if self.window and len(self._pending) < self.max_batch:
                await asyncio.sleep(self.window)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                results = record_samples(self.ledger, [p for p, _ in batch])
            except Exception as e:  # the database failed: every push of the batch gets the error, as it would alone
                log.error("could not write %d sample(s): %s", len(batch), e)
                results = [e] * len(batch)
            self.batches += 1
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # the request went away
                    continue
                if isinstance(result, Exception):
                    future.set_exception(result)
                else:
                    future.set_result(result)
