"""Exclusive GPU assignment and the fair wait queue.

One :class:`GPUAllocator` per hub process and inventory. Every server (a key such
as ``"alice/"`` or ``"alice/big"``) holds zero or more whole devices; no device is
ever held by two keys. A request that cannot be met waits in a first-come,
first-served queue per GPU model. A waiting request blocks later requests of the
same model even when those would fit (strict FIFO), so a two-GPU request is not
starved by a stream of one-GPU requests.

The queueing itself (order, positions, timeout, cancel) is :class:`FairQueue`,
which the Kubernetes :class:`.kube_inventory.ClusterAllocator` shares; each
allocator says only what a request waits in, when it fits and how it is granted.

All methods run on the hub's event loop and none of them awaits between reading
and changing the assignment, so concurrent spawns cannot receive the same GPU.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from jupyterhub_gpu.gpus.inventory import GPUDevice, model_matches

log = logging.getLogger("jupyterhub_gpu.allocator")


class AllocationError(RuntimeError):
    """A request that can never be met (more GPUs than the host has of that model)."""


class QueueTimeout(TimeoutError):
    """A request waited longer than its timeout."""


class QueueCancelled(AllocationError):
    """A waiting request was taken out of the queue by :meth:`FairQueue.cancel` (its server was stopped).

    Distinct from :class:`asyncio.CancelledError`, which means the waiting task itself was cancelled: a
    spawner turns this into a spawn failure, so that JupyterHub runs its failure clean-up.
    """


class AssignmentConflict(RuntimeError):
    """A restored assignment names a GPU already held by another server."""


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


class FairQueue:
    """Strict first-come, first-served wait queues, one per kind of request.

    A subclass says whether a request fits now (:meth:`_fits`) and how it is
    granted (:meth:`_grant`: record it and return its devices); this class keeps
    the order, reports positions, times out and cancels. A waiting request blocks
    later ones in its queue even when those would fit.
    """

    log = log

    def __init__(self):
        self._queues: dict[Hashable, list[Waiter]] = {}
        self._seq = itertools.count()

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
        timeout_message: str,
    ) -> list[GPUDevice]:
        """Grant at once if ``queue`` is empty and the request fits, else wait in it for a turn.

        Raises QueueTimeout with ``timeout_message`` after ``timeout`` seconds, and QueueCancelled
        when :meth:`cancel` takes the key out of the queue.
        """
        if self.position(key) is not None:
            raise AllocationError(f"{key} is already waiting for a GPU")
        waiters = self._queues.setdefault(queue, [])
        future = asyncio.get_running_loop().create_future()
        waiter = Waiter(key, queue, model, count, next(self._seq), future, on_position, claim)
        if not waiters and self._fits(waiter):
            return self._grant(waiter)
        waiters.append(waiter)
        self.log.info("%s waits for %d× %s (position %d)", key, count, model, len(waiters))
        self._report_positions()
        self._on_wait()
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
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
                raise QueueCancelled(f"{key} was stopped while it waited for a GPU; nothing was started.") from None
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
        """Grant queue heads that now fit, earliest arrival first."""
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

    def _report_positions(self) -> None:
        for queue in self._queues.values():
            for i, w in enumerate(queue):
                place = (i + 1, len(queue))
                if w.on_position and w.last_reported != place:
                    w.last_reported = place
                    try:
                        w.on_position(*place)
                    except Exception:  # a reporting bug must not break the queue
                        self.log.exception("position callback for %s failed", w.key)


class GPUAllocator(FairQueue):
    """Assigns whole GPUs exclusively to server keys, with a FIFO queue per model."""

    def __init__(self, devices: list[GPUDevice]):
        super().__init__()
        self.devices = list(devices)
        self._by_uuid = {d.uuid: d for d in self.devices}
        self._holder: dict[str, str] = {}  # device uuid -> key
        self._held: dict[str, list[str]] = {}  # key -> device uuids, in assignment order

    # -- reading -----------------------------------------------------------
    def matching(self, model: str) -> list[GPUDevice]:
        return [d for d in self.devices if model_matches(model, d.name)]

    def free(self, model: str) -> list[GPUDevice]:
        return [d for d in self.matching(model) if d.uuid not in self._holder]

    def waiting(self, model: str) -> int:
        return len(self._queues.get(self._queue_key(model), []))

    def _queue_key(self, model: str) -> tuple[str, ...]:
        # One queue per set of matching devices, so that two spellings of one
        # model ("T4", "Tesla T4") share a queue and strict FIFO holds across them.
        return tuple(sorted(d.uuid for d in self.matching(model)))

    def counts(self, model: str) -> dict:
        """Free, total and waiting counts for the spawn form."""
        return {
            "free": len(self.free(model)),
            "total": len(self.matching(model)),
            "waiting": self.waiting(model),
        }

    def held_by(self, key: str) -> list[GPUDevice]:
        return [self._by_uuid[u] for u in self._held.get(key, []) if u in self._by_uuid]

    def holder(self, uuid: str) -> str | None:
        return self._holder.get(uuid)

    def assignments(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._held.items()}

    # -- changing ----------------------------------------------------------
    def _assign(self, key: str, devices: list[GPUDevice]) -> None:
        if not devices:  # holding nothing is not an assignment
            return
        for d in devices:
            assert d.uuid not in self._holder, f"{d.uuid} already held"
            self._holder[d.uuid] = key
        self._held.setdefault(key, []).extend(d.uuid for d in devices)

    async def acquire(
        self,
        key: str,
        model: str,
        count: int,
        timeout: float | None = None,
        on_position: Callable[[int, int], None] | None = None,
    ) -> list[GPUDevice]:
        """Assign ``count`` GPUs of ``model`` to ``key``, waiting in the queue if none are free.

        ``on_position(position, length)`` is called whenever the key's place in the
        queue changes. Raises QueueTimeout after ``timeout`` seconds, and
        AllocationError at once if the host does not have that many such GPUs.
        """
        if count <= 0:
            return []
        if key in self._held:
            held = self.held_by(key)
            if len(held) == count and all(model_matches(model, d.name) for d in held):
                return held
            # a key still holding other GPUs (an earlier start of this server with another profile) must not
            # run the new profile, priced by its own model and count, on them: give them back and take a turn
            self.release(key)
        total = len(self.matching(model))
        if count > total:
            raise AllocationError(
                f"This profile needs {count}× {model} but this host has {total}."
                " Ask your administrator to fix the profile."
            )
        return await self._take_turn(
            key,
            self._queue_key(model),
            model,
            count,
            timeout=timeout,
            on_position=on_position,
            timeout_message=f"No {model} became free within {_seconds(timeout)}; nothing was started."
            " Try again later or choose another profile.",
        )

    def release(self, key: str) -> list[str]:
        """Free every GPU the key holds and start waiters that now fit; returns the UUIDs freed."""
        uuids = self._held.pop(key, [])
        for u in uuids:
            if self._holder.get(u) == key:
                del self._holder[u]
        if uuids:
            log.info("%s released %s", key, ", ".join(uuids))
            self._drain()
        return uuids

    def restore(self, key: str, uuids: list[str]) -> list[str]:
        """Record an assignment saved in a spawner's state (after a hub restart).

        Unknown UUIDs (a GPU removed from the host) are skipped with a warning; a
        UUID already held by another key raises AssignmentConflict and nothing
        is recorded.
        """
        if self._held.get(key) == list(uuids):
            return list(uuids)
        for u in uuids:
            other = self._holder.get(u)
            if other is not None and other != key:
                raise AssignmentConflict(f"{key} claims {u}, which {other} already holds")
        known = [u for u in dict.fromkeys(uuids) if u in self._by_uuid]
        for u in set(uuids) - set(known):
            log.warning("%s held %s, which is not in the inventory any more", key, u)
        # Replace the key's assignment in one step: draining the queue in between
        # could hand a GPU of ``known`` to a waiter before it is recorded here.
        previous = self._held.pop(key, [])
        for u in previous:
            if self._holder.get(u) == key:
                del self._holder[u]
        self._assign(key, [self._by_uuid[u] for u in known])
        if set(previous) - set(known):
            self._drain()
        return known

    # -- queue -------------------------------------------------------------
    def _fits(self, waiter: Waiter) -> bool:
        return len(self.free(waiter.model)) >= waiter.count

    def _grant(self, waiter: Waiter) -> list[GPUDevice]:
        devices = self.free(waiter.model)[: waiter.count]
        self._assign(waiter.key, devices)
        return devices


def _seconds(timeout: float | None) -> str:
    if timeout is None:
        return "the time limit"
    if timeout >= 120:
        return f"{timeout / 60:g} minutes"
    return f"{timeout:g} seconds"
