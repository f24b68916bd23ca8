"""Samples written in batches: one transaction for the pushes that arrive while the previous one is written.

With a thousand running servers, each pushing its GPU samples every 30 s, writing every push in a
transaction of its own made the service's one event loop wait on a commit (an fsync on sqlite) about
33 times a second, and every request queued behind them (p99 413 ms for ``POST samples`` in
``benchmarks/load.py``). The :class:`SampleBatcher` takes the validated pushes of the handlers,
writes all that are pending in one transaction (:func:`.queries.samples.record_samples`) in a
worker thread, so that the event loop serves other requests meanwhile, and answers each push with
its own row or its own error: a push that its full minute refuses is a 400 for that request only,
and the others of the same batch are stored. The rows are exactly those of writing the pushes one
by one in the order they arrived (a test compares them).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from concurrent.futures import ThreadPoolExecutor

from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.ledger.store import Ledger

log = logging.getLogger("jupyterhub_gpu.ledger")

_BATCHERS: weakref.WeakKeyDictionary[Ledger, SampleBatcher] = weakref.WeakKeyDictionary()


class SampleBatcher:
    """Collects pushes and writes them in one transaction per batch, in arrival order.

    ``window`` is how long (seconds) a batch waits for more pushes after the first one arrives
    (0: none beyond the time the previous batch took to write, which already gathers the pushes
    that came meanwhile); ``max_batch`` caps one transaction.
    """

    def __init__(self, ledger: Ledger, window: float = 0.0, max_batch: int = 500):
        self.ledger = ledger
        self.window = window
        self.max_batch = max_batch
        self.batches = 0  # transactions written (for tests and benchmarks)
        self._pending: list[tuple[Push, asyncio.Future]] = []
        self._flusher: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-samples")

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
        future = loop.create_future()
        self._pending.append((push, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            if self.window:
                await asyncio.sleep(self.window)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            try:
                results = await loop.run_in_executor(self._executor, record_samples, self.ledger, [p for p, _ in batch])
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

    def close(self) -> None:
        self._executor.shutdown(wait=True)
