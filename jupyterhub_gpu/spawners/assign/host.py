"""Exclusive GPU assignment over a host's devices (Docker, local processes).

One :class:`GPUAllocator` per hub process and inventory (:func:`shared_allocator`).
Every server (a key such as ``"alice/"`` or ``"alice/big"``) holds zero or more
whole devices; no device is ever held by two keys. A request that cannot be met
waits in the :class:`.queue.FairQueue` of its GPU model.

All methods run on the hub's event loop and none of them awaits between reading
and changing the assignment, so concurrent spawns cannot receive the same GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.gpus.inventory import make_inventory
from jupyterhub_gpu.gpus.names import model_matches
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, Allocator, AssignmentConflict
from jupyterhub_gpu.spawners.assign.queue import FairQueue, Waiter, wait_limit_text
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.allocator")


class GPUAllocator(FairQueue, Allocator):
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
                "This profile needs {count}× {model} but this host has {total}. Ask your administrator to fix the"
                " profile.",
                count=count,
                model=model,
                total=total,
            )
        return await self._take_turn(
            key,
            self._queue_key(model),
            model,
            count,
            timeout=timeout,
            on_position=on_position,
            timeout_message=Phrase(
                "No {model} became free within {limit}; nothing was started. Try again later or choose another"
                " profile.",
                model=model,
                limit=wait_limit_text(timeout),
            ),
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


# One allocator per inventory per hub process: every spawner of the hub shares it.
_ALLOCATORS: dict[tuple, GPUAllocator] = {}


def shared_allocator(backend: str, static_gpus: list, simulated_gpus: list) -> GPUAllocator:
    """The hub-wide allocator for this inventory configuration, created on first use."""
    key = (backend, repr(static_gpus), repr(simulated_gpus))
    if key not in _ALLOCATORS:
        _ALLOCATORS[key] = GPUAllocator(make_inventory(backend, static_gpus, simulated_gpus))
    return _ALLOCATORS[key]
