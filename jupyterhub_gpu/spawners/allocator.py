"""Exclusive GPU assignment and the fair wait queue.

One :class:`GPUAllocator` per hub process and inventory. Every server (a key such
as ``"alice/"`` or ``"alice/big"``) holds zero or more whole devices; no device is
ever held by two keys. A request that cannot be met waits in a first-come,
first-served queue per GPU model. A waiting request blocks later requests of the
same model even when those would fit (strict FIFO), so a two-GPU request is not
starved by a stream of one-GPU requests.

All methods run on the hub's event loop and none of them awaits between reading
and changing the assignment, so concurrent spawns cannot receive the same GPU.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .inventory import GPUDevice, model_matches

log = logging.getLogger("jupyterhub_gpu.allocator")


class AllocationError(RuntimeError):
    """A request that can never be met (more GPUs than the host has of that model)."""


class QueueTimeout(TimeoutError):
    """A request waited longer than its timeout."""


class AssignmentConflict(RuntimeError):
    """A restored assignment names a GPU already held by another server."""


@dataclass(eq=False)
class _Waiter:
    key: str
    model: str
    count: int
    seq: int
    future: asyncio.Future
    on_position: Callable[[int, int], None] | None = None
    last_reported: tuple[int, int] | None = field(default=None)


class GPUAllocator:
    """Assigns whole GPUs exclusively to server keys, with a FIFO queue per model."""

    def __init__(self, devices: list[GPUDevice]):
        self.devices = list(devices)
        self._by_uuid = {d.uuid: d for d in self.devices}
        self._holder: dict[str, str] = {}  # device uuid -> key
        self._held: dict[str, list[str]] = {}  # key -> device uuids, in assignment order
        # One queue per set of matching devices, so that two spellings of one
        # model ("T4", "Tesla T4") share a queue and strict FIFO holds across them.
        self._queues: dict[tuple[str, ...], list[_Waiter]] = {}
        self._seq = itertools.count()

    # -- reading -----------------------------------------------------------
    def matching(self, model: str) -> list[GPUDevice]:
        return [d for d in self.devices if model_matches(model, d.name)]

    def free(self, model: str) -> list[GPUDevice]:
        return [d for d in self.matching(model) if d.uuid not in self._holder]

    def waiting(self, model: str) -> int:
        return len(self._queues.get(self._queue_key(model), []))

    def _queue_key(self, model: str) -> tuple[str, ...]:
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

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a waiting key, else None."""
        for queue in self._queues.values():
            for i, w in enumerate(queue):
                if w.key == key:
                    return i + 1, len(queue)
        return None

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
            return self.held_by(key)
        total = len(self.matching(model))
        if count > total:
            raise AllocationError(
                f"This profile needs {count}× {model} but this host has {total}."
                " Ask your administrator to fix the profile."
            )
        if self.position(key) is not None:
            raise AllocationError(f"{key} is already waiting for a GPU")
        queue = self._queues.setdefault(self._queue_key(model), [])
        if not queue:
            free = self.free(model)
            if len(free) >= count:
                self._assign(key, free[:count])
                return free[:count]
        waiter = _Waiter(key, model, count, next(self._seq), asyncio.get_running_loop().create_future(), on_position)
        queue.append(waiter)
        log.info("%s waits for %d× %s (position %d)", key, count, model, len(queue))
        self._report_positions()
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
                raise QueueTimeout(
                    f"No {model} became free within {_seconds(timeout)}; nothing was started."
                    " Try again later or choose another profile."
                ) from None
            raise

    def cancel(self, key: str) -> bool:
        """Take a waiting key out of the queue (its acquire raises CancelledError)."""
        for queue in self._queues.values():
            for w in queue:
                if w.key == key:
                    w.future.cancel()
                    self._remove_waiter(w)
                    return True
        return False

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
    def _remove_waiter(self, waiter: _Waiter) -> None:
        queue = self._queues.get(self._queue_key(waiter.model), [])
        if waiter in queue:
            queue.remove(waiter)
            self._drain()
            self._report_positions()

    def _drain(self) -> None:
        """Grant queue heads that now fit, earliest arrival first."""
        while True:
            heads = [q[0] for q in self._queues.values() if q]
            granted = False
            for w in sorted(heads, key=lambda w: w.seq):
                free = self.free(w.model)
                if len(free) >= w.count:
                    self._queues[self._queue_key(w.model)].pop(0)
                    self._assign(w.key, free[: w.count])
                    w.future.set_result(free[: w.count])
                    log.info("%s leaves the queue with %s", w.key, ", ".join(d.uuid for d in free[: w.count]))
                    granted = True
                    break
            if not granted:
                break
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
                        log.exception("position callback for %s failed", w.key)


def _seconds(timeout: float | None) -> str:
    if timeout is None:
        return "the time limit"
    if timeout >= 120:
        return f"{timeout / 60:g} minutes"
    return f"{timeout:g} seconds"
