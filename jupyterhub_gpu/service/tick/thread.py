"""The tick's own thread: every pass of the tick runs on an event loop of its own, never on the requests' loop.

The service answers its requests on one event loop. A tick over a thousand sessions reads the ledger, judges
each session (about a second of CPU) and waits on its writes, its notices and the hub. On the requests' loop
every step of it, however short (:class:`.context.LoopSlice`), was a wait for each request that came during
it, and on sqlite its writes waited on the writer's transactions and the writer on theirs. So the service
runs each tick on :class:`TickThread`'s loop (:func:`logged_tick`): its reads and judging there, its writes
through the ledger's one writer (:meth:`.context.TickContext.write`: each a short transaction, in turn with
the requests' writes), its notices and hub requests on its own loop. The requests' loop only awaits its end.

:class:`LoopLag` watches the requests' loop: how late its timers run (what a request that comes in waits
before the loop gets to it), logged with each tick beside the tick's time, statements and writes.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Coroutine
from datetime import datetime
from typing import Any, TypeVar

from jupyterhub_gpu.ledger.counting import statements_of, writes_of
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.tick.context import TickContext, TickState
from jupyterhub_gpu.service.tick.metering import run_tick

T = TypeVar("T")

#: Seconds between the looks of :class:`LoopLag` at the requests' loop.
LAG_EVERY = 0.05
#: The longest the requests' loop waits for the interpreter's lock while the tick's thread computes (seconds).
SWITCH_INTERVAL = 0.001


class TickThread:
    """A thread with an event loop of its own, on which :meth:`run` runs the tick's coroutines.

    The two threads share the interpreter's lock: while the tick computes, the requests' loop waits for it
    each time it comes back from the network. Python hands it over after :data:`SWITCH_INTERVAL` (its default
    is 5 ms, several times in a request); the service sets the shorter interval when it starts this thread.
    """

    def __init__(self, name: str = "jupyterhub-gpu-tick"):
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Await ``coroutine`` run on the tick's loop; cancelling this await cancels it there."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def close(self, timeout: float = 60) -> None:
        """Cancel what still runs on the tick's loop, wait for it to unwind (a write under way ends first), stop."""
        if not self._thread.is_alive():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self.loop.close()


class LoopLag:
    """How late the timers of the loop it runs on fire (looked at every :data:`LAG_EVERY` s), since the last take."""

    def __init__(self, every: float = LAG_EVERY):
        self.every = every
        self.lags: list[float] = []
        self._task: asyncio.Task | None = None

    def start(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.every
            await asyncio.sleep(self.every)
            self.lags.append(max(0.0, loop.time() - due))

    def take(self) -> tuple[float, float]:
        """(p99, max) of the lags in seconds since the last take (0 when none)."""
        lags, self.lags = sorted(self.lags), []
        if not lags:
            return 0.0, 0.0
        return lags[min(len(lags) - 1, int(0.99 * len(lags)))], lags[-1]

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def logged_tick(
    ctx: TickContext, state: TickState, now: datetime, log: logging.Logger, lag: LoopLag | None = None
) -> bool:
    """One tick (:func:`.metering.run_tick`), on the tick's thread, after this service's heartbeat; logs
    ``tick: S s, N ledger statements`` with the tick's writes (how many, their time on the writer and the
    longest) and the requests' loop lag since the last tick."""
    try:
        # this service alive on the shared ledger (the doctor's check of hub names)
        await ctx.write(Ledger.heartbeat, now)
    except Exception:
        log.warning("could not note this service's heartbeat in the ledger", exc_info=True)
    began = time.monotonic()
    # the tick's own statements and writes: not the requests' (the writer runs a call in its caller's context)
    with statements_of(ctx.ledger) as statements, writes_of() as writes:
        ok = await run_tick(ctx, state, now, log)
    lag_p99, lag_max = lag.take() if lag is not None else (0.0, 0.0)
    log.info(
        "tick: %.3f s, %d ledger statements; %d writes, %.3f s on the writer (longest %.3f s);"
        " the requests' loop lag p99 %.1f ms, max %.1f ms",
        time.monotonic() - began,
        statements[0],
        writes.count,
        writes.seconds,
        writes.longest,
        lag_p99 * 1000,
        lag_max * 1000,
    )
    return ok
