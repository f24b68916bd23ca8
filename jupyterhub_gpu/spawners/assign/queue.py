"""The strict first-come, first-served wait queue that both allocators share.

A request that cannot be met waits in a queue per kind of request (a host's GPU
model, a cluster's GPU kind). A waiting request blocks later requests of the
same queue even when those would fit (strict FIFO), so a two-GPU request is not
starved by a stream of one-GPU requests.

:class:`FairQueue` keeps the order, reports positions, times out and cancels; each
allocator (:class:`.host.GPUAllocator`, :class:`.cluster.ClusterAllocator`) says only
what a request waits in, when it fits and how it is granted.

With a :class:`.plan.Planner` attached (the spawners attach one when the ledger is configured), the lab's
scheduler decides instead of arrival alone: who is granted, in which order the rest waits (fair share, the
preemptible tier behind full-price requests, reservations), why, and how long the wait will be
(docs/scheduling.md). A request then always takes a turn through the planner, even into an empty queue, so that
GPUs reserved for a class are not handed to someone else.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.scheduler import GRANT, QUEUE, Decision
from jupyterhub_gpu.spawners import metrics
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, QueueCancelled, QueueTimeout
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.allocator")

#: Seconds a request waits for the scheduler's view of the ledger before it is decided on the view it has.
FRESH_TIMEOUT = 10


@dataclass(eq=False)
class Waiter:
    """One request in a :class:`FairQueue`."""

    key: str
    queue: Hashable  # the queue it stands in
    model: str
    count: int
    seq: int
    future: asyncio.Future
    on_position: Callable[[int, int], None] | None = None
    claim: object = None  # what a subclass needs to grant it (the cluster's Claim)
    last_reported: tuple[int, int] | None = None
    cancelled: bool = False  # taken out by cancel(), not by a cancellation of the waiting task
    timeout: float | None = None
    since: float = field(default_factory=time.monotonic)  # when it began to wait (for /hub/metrics)
    ask: object = None  # what the planner knows of it (plan.Ask)
    on_decision: Callable[[object], None] | None = None  # the planner's queue decision, whenever it changes
    last_decision: tuple | None = None
    where: str | None = None  # the planner's grant: the GPU its share goes on (Decision.device)


class FairQueue:
    """Strict first-come, first-served wait queues, one per kind of request.

    A subclass says whether a request fits now (:meth:`_fits`) and how it is
    granted (:meth:`_grant`: record it and return its devices); this class keeps
    the order, reports positions, times out and cancels. A waiting request blocks
    later ones in its queue even when those would fit.
    """

    log = log

    #: the lab's scheduler (:class:`.plan.Planner`), when one is attached
    planner = None
    #: whether a model's time-sliced shares split its GPUs (a host), or are units of GPUs of their own (a cluster's
    #: time-sliced nodes)
    shares_pooled = True

    def __init__(self):
        self._queues: dict[Hashable, list[Waiter]] = {}
        self._seq = itertools.count()
        self._models: set[str] = set()
        self._expected: dict[str, tuple] = {}
        self.grants: dict[str, object] = {}  # key -> the planner's grant decision (a limit before a reservation)
        metrics.watch(self)

    def use_planner(self, planner) -> None:
        """Let ``planner`` decide this queue from now on (docs/scheduling.md)."""
        self.planner = planner
        planner.counts = self._unit_counts
        planner.split_gpus = self._split_gpus
        planner.placement = self._placement
        planner.shares_pooled = self.shares_pooled
        planner.start(self)

    def expect(self, key: str, ask, on_decision: Callable[[object], None] | None = None) -> None:
        """What the planner should know of ``key``'s next request (the spawner calls it right before acquire)."""
        self._expected[key] = (ask, on_decision)

    def _unit_counts(self, model: str, unit: str) -> tuple[int, int]:
        """(free, total) units of ``model`` in the planner's unit ("", "share-K", "mig-SLICE")."""
        share = int(unit.split("-", 1)[1]) if unit.startswith("share-") else None
        mig = unit.split("-", 1)[1] if unit.startswith("mig-") else None
        counts = self.counts(model, share=share, mig=mig)
        return counts["free"], counts["total"]

    def _split_gpus(self, model: str) -> list[tuple[str, int, int]]:
        """``(GPU, k, shares held)`` of each GPU of ``model`` split into k shares now (none where the hub names no
        GPU)."""
        return []

    def _placement(self, key: str) -> tuple[str, int] | None:
        """``(GPU, k)`` when ``key`` holds one of k shares of that GPU, else None."""
        return None

    def _holds(self, key: str) -> bool:
        return bool(self.held_by(key))

    def models(self) -> set[str]:
        """The GPU models requested of this queue so far (each shows in /hub/metrics, 0 while none waits)."""
        return set(self._models)

    def waiters(self) -> Iterator[Waiter]:
        """Every request waiting now, in every queue."""
        for queue in list(self._queues.values()):
            yield from list(queue)

    def _fits(self, waiter: Waiter) -> bool:
        raise NotImplementedError

    def _grant(self, waiter: Waiter) -> list[GPUDevice]:
        raise NotImplementedError

    def release(self, key: str) -> list[str]:
        raise NotImplementedError

    def _on_wait(self) -> None:
        """Called when a request starts waiting."""

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a waiting key, else None."""
        for queue in self._queues.values():
            for i, w in enumerate(queue):
                if w.key == key:
                    return i + 1, len(queue)
        return None

    async def _take_turn(
        self,
        key: str,
        queue: Hashable,
        model: str,
        count: int,
        *,
        claim: object = None,
        timeout: float | None,
        on_position: Callable[[int, int], None] | None,
        timeout_message: Phrase,
    ) -> list[GPUDevice]:
        """Grant at once if ``queue`` is empty and the request fits, else wait in it for a turn.

        Raises QueueTimeout with ``timeout_message`` after ``timeout`` seconds, and QueueCancelled
        when :meth:`cancel` takes the key out of the queue.
        """
        if self.position(key) is not None:
            raise AllocationError("{key} is already waiting for a GPU", key=key)
        ask, on_decision = self._expected.pop(key, (None, None))
        planner = self.planner
        if planner is not None:
            try:  # the shares, use and reservations as they are now (at most `refresh` s old)
                await asyncio.wait_for(planner.fresh(), FRESH_TIMEOUT)
            except asyncio.TimeoutError:
                self.log.warning("the ledger did not answer the scheduler in %s s: it decides on what it read before",
                                 FRESH_TIMEOUT)  # fmt: skip
            if ask is None:
                ask = planner.default_ask(key, model)
            if self.position(key) is not None:
                raise AllocationError("{key} is already waiting for a GPU", key=key)
        waiters = self._queues.setdefault(queue, [])
        future = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, queue, model, count, next(self._seq), future, on_position, claim, timeout=timeout)
        waiter.ask, waiter.on_decision = ask, on_decision
        if model not in self._models:
            self._models.add(model)
            metrics.requested(model)
        if planner is None and not waiters and self._fits(waiter):
            return self._grant(waiter)
        waiters.append(waiter)
        if planner is not None:
            self._drain()
            if future.done():
                return future.result()
        self.log.info("%s waits for %d× %s (position %d)", key, count, model, len(waiters))
        self._report_positions()
        self._on_wait()
        try:
            devices = await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
            metrics.observe_wait(model, "granted", time.monotonic() - waiter.since)
            return devices
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            self.grants.pop(key, None)
            outcome = "timeout" if isinstance(e, asyncio.TimeoutError) else "cancelled"
            metrics.observe_wait(model, outcome, time.monotonic() - waiter.since)
            if waiter.future.done() and not waiter.future.cancelled():
                # granted in the same instant the wait ended: give the GPUs back
                self.release(key)
            else:
                waiter.future.cancel()
                self._remove_waiter(waiter)
            if isinstance(e, asyncio.TimeoutError):
                raise QueueTimeout(timeout_message) from None
            task = asyncio.current_task()
            if waiter.cancelled and not (task is not None and task.cancelling()):
                raise QueueCancelled(
                    "{key} was stopped while it waited for a GPU; nothing was started.", key=key
                ) from None
            raise

    def cancel(self, key: str) -> bool:
        """Take a waiting key out of the queue (its acquire raises QueueCancelled)."""
        for queue in self._queues.values():
            for w in queue:
                if w.key == key:
                    w.cancelled = True
                    w.future.cancel()
                    self._remove_waiter(w)
                    return True
        return False

    def _remove_waiter(self, waiter: Waiter) -> None:
        queue = self._queues.get(waiter.queue, [])
        if waiter in queue:
            queue.remove(waiter)
            self._drain()

    def _drain(self) -> None:
        """Grant queue heads that now fit, earliest arrival first (with a planner: what it grants, in its order)."""
        if self.planner is not None and self._plan():
            return
        while True:
            heads = sorted((q[0] for q in self._queues.values() if q), key=lambda w: w.seq)
            head = next((w for w in heads if self._fits(w)), None)
            if head is None:
                break
            self._queues[head.queue].pop(0)
            devices = self._grant(head)
            head.future.set_result(devices)
            self.log.info("%s leaves the queue with %s", head.key, ", ".join(d.uuid for d in devices))
        self._report_positions()

    def _plan(self) -> bool:
        """One cycle of the planner: grant what it grants (when the units are there), order the rest as it says.

        False when the planner could not decide (the plain order then serves this time).
        """
        waiting = list(self.waiters())
        decisions = self.planner.cycle(waiting, self._holds)
        if not decisions and waiting:
            return False
        by_key = {w.key: w for w in waiting}
        place = {d.request: d for d in decisions if d.kind == QUEUE and d.request}
        held_back = []
        for d in decisions:
            if d.kind != GRANT or d.request not in by_key:
                continue
            w = by_key[d.request]
            if w.future.done():
                continue
            w.where = d.device
            if not self._fits(w):
                # the scheduler counts the units of sessions whose stop is due; the allocator frees them when the
                # servers have ended: it waits for that, first of its model, and is told so
                held_back.append((w, d))
                continue
            self._queues[w.queue].remove(w)
            devices = self._grant(w)
            self.grants[w.key] = d
            self.planner.granted(w, d)
            w.future.set_result(devices)
            self.log.info("%s leaves the queue with %s", w.key, ", ".join(d.uuid for d in devices))
        for i, (w, d) in enumerate(held_back):
            same = [x for x in place.values() if x.model == d.model]
            for x in same:
                place[x.request] = replace(x, position=x.position + len(held_back), length=x.length + len(held_back))
            place[w.key] = Decision(
                QUEUE,
                "stopping",
                {"model": d.model.partition("/")[0]},
                request=w.key,
                model=d.model,
                position=i + 1,
                length=len(same) + len(held_back),
                wait=timedelta(0),
            )
        for queue in self._queues.values():
            queue.sort(key=lambda w: (w.key not in place, place[w.key].position if w.key in place else 0, w.seq))
        self._report_positions(place)
        self.planner.publish(list(place.values()), self.waiters())
        return True

    def _report_positions(self, decisions: dict | None = None) -> None:
        for queue in self._queues.values():
            for i, w in enumerate(queue):
                place = (i + 1, len(queue))
                d = (decisions or {}).get(w.key)
                if d is not None:
                    place = (d.position, d.length)
                if w.on_position and w.last_reported != place:
                    w.last_reported = place
                    try:
                        w.on_position(*place)
                    except Exception:  # a reporting bug must not break the queue
                        self.log.exception("position callback for %s failed", w.key)
                if d is not None and w.on_decision:
                    wait = None if d.wait is None else round(d.wait.total_seconds() / 60)
                    shape = (d.position, d.length, d.key, tuple(sorted(d.values.items())), wait)
                    if shape != w.last_decision:
                        w.last_decision = shape
                        try:
                            w.on_decision(d)
                        except Exception:
                            self.log.exception("decision callback for %s failed", w.key)


def wait_limit_text(timeout: float | None) -> Phrase:
    """A queue timeout as the spawn page says it: ``5 seconds``, ``10 minutes``."""
    if timeout is None:
        return Phrase("the time limit")
    if timeout >= 120:
        return Phrase("{n} minutes", n=f"{timeout / 60:g}")
    return Phrase("{n} seconds", n=f"{timeout:g}")
