"""Exclusive GPU assignment over a host's devices (Docker, local processes).

One :class:`GPUAllocator` per hub process and inventory (:func:`shared_allocator`).
Every server (a key such as ``"alice/"`` or ``"alice/big"``) holds zero or more
units: whole devices, MIG instances, or time-sliced shares of a GPU;
no unit is ever held by two keys, and a GPU with a share held is never held whole. A request that cannot be met
waits in the :class:`.queue.FairQueue` of its GPU model.

All methods run on the hub's event loop and none of them awaits between reading
and changing the assignment, so concurrent spawns cannot receive the same GPU.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from traitlets import CaselessStrEnum

from jupyterhub_gpu.gpus.backends import backend_names, get_backend
from jupyterhub_gpu.gpus.device import GPUDevice, parse_share_uuid, share_uuid
from jupyterhub_gpu.gpus.names import model_matches
from jupyterhub_gpu.scheduler.snapshot import FREE_GPU
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, Allocator, AssignmentConflict
from jupyterhub_gpu.spawners.assign.queue import FairQueue, Waiter, wait_limit_text
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.allocator")

MIG_SUFFIX = re.compile(r"\s+MIG\b.*$")


@dataclass(frozen=True)
class Request:
    """What a host request asks for besides model and count: a time-sliced share of ``share``, or a MIG slice."""

    share: int | None = None
    mig: str | None = None


def parent_name(device: GPUDevice) -> str:
    """A MIG instance's name without its slice ("NVIDIA A100-SXM4-40GB MIG 1g.10gb" -> "NVIDIA A100-SXM4-40GB")."""
    return MIG_SUFFIX.sub("", device.name)


class GPUAllocator(FairQueue, Allocator):
    """Assigns units (whole GPUs, time-sliced shares, MIG instances) exclusively to server keys, FIFO per model.

    A physical GPU is free, held whole by one key, or split into ``k`` shares (``k``
    fixed while any share is held: the first share taken splits it, the last one
    released makes it whole again). Whole and share requests of one model stand in
    one queue; MIG requests of one slice in theirs.
    """

    def __init__(self, devices: list[GPUDevice]):
        super().__init__()
        self.devices = list(devices)
        self._by_uuid = {d.uuid: d for d in self.devices}
        self._holder: dict[str, str] = {}  # whole device or MIG uuid -> key
        self._shares: dict[str, dict[int, str]] = {}  # physical uuid -> {share index: key} (only while split)
        self._split: dict[str, int] = {}  # physical uuid -> k while any share of it is held
        self._held: dict[str, list[str]] = {}  # key -> unit uuids (share uuids for shares), in assignment order

    # -- reading -----------------------------------------------------------
    def simulated(self, model: str | None = None, *, share: int | None = None, mig: str | None = None) -> bool:
        devices = self.devices if model is None else self.matching(model, share=share, mig=mig)
        return any(d.simulated for d in devices)

    def matching(self, model: str, *, share: int | None = None, mig: str | None = None) -> list[GPUDevice]:
        """The devices a request of ``model`` may get: physical GPUs (whole or share), or MIG instances of ``mig``."""
        if mig:
            return [
                d for d in self.devices if d.is_mig and d.mig_profile == mig and model_matches(model, parent_name(d))
            ]
        if share:  # only a physical GPU is time-sliced
            return [d for d in self.devices if d.parent_uuid is None and model_matches(model, d.name)]
        # a whole request: the physical GPUs of the model (model_matches leaves MIG instances out unless the
        # model itself names MIG, "A100 MIG 1g.10gb", as before the mig field); the same set a share request
        # matches for a plain model, so that whole and share requests stand in one queue
        return [d for d in self.devices if model_matches(model, d.name)]

    def _whole_free(self, d: GPUDevice) -> bool:
        return d.uuid not in self._holder and d.uuid not in self._split

    def free(
        self, model: str, *, share: int | None = None, mig: str | None = None, where: str | None = None
    ) -> list[GPUDevice]:
        """Free units: whole GPUs (or MIG instances) no one holds; for ``share``, the shares that could be taken
        (those of ``where`` first: the GPU the planner placed the share on, or :data:`FREE_GPU`)."""
        if share:
            units = self._free_shares(model, share)
            if where is not None:  # stable: the planner's GPU first, the usual order after it
                units.sort(
                    key=lambda d: (
                        not (d.parent_uuid not in self._split if where == FREE_GPU else d.parent_uuid == where)
                    )
                )
            return units
        return [d for d in self.matching(model, mig=mig) if self._whole_free(d)]

    def _free_shares(self, model: str, k: int) -> list[GPUDevice]:
        """Shares of ``k`` a request may take, best first: GPUs already split in k (fullest first), then free GPUs."""
        split, whole = [], []
        for d in self.matching(model, share=k):
            if self._split.get(d.uuid) == k:
                taken = self._shares.get(d.uuid, {})
                free = [i for i in range(k) if i not in taken]
                if free:
                    split.append((-len(taken), d, free))
            elif self._whole_free(d):
                whole.append(d)
        split.sort(key=lambda t: t[0])  # stable: device order among equally full GPUs
        units = [make_share(d, i, k) for _, d, free in split for i in free]
        units += [make_share(d, i, k) for d in whole for i in range(k)]
        return units

    def waiting(self, model: str, *, share: int | None = None, mig: str | None = None) -> int:
        return len(self._queues.get(self._queue_key(model, mig), []))

    def _queue_key(self, model: str, mig: str | None = None) -> tuple[str, ...]:
        # One queue per set of matching devices, so that two spellings of one
        # model ("T4", "Tesla T4") share a queue and strict FIFO holds across them;
        # whole and share requests of a model match the same physical GPUs: one queue.
        return tuple(sorted(d.uuid for d in self.matching(model, mig=mig)))

    def counts(self, model: str, *, share: int | None = None, mig: str | None = None) -> dict:
        """Free, total and waiting units for the spawn form; ``unit`` says which ("gpu", "share", "mig")."""
        matching = self.matching(model, share=share, mig=mig)
        if share:
            free = sum(1 for d in matching if self._whole_free(d)) * share + sum(
                share - len(self._shares.get(d.uuid, {})) for d in matching if self._split.get(d.uuid) == share
            )
            total = len(matching) * share
        else:
            free = sum(1 for d in matching if self._whole_free(d))
            total = len(matching)
        return {
            "free": free,
            "total": total,
            "waiting": self.waiting(model, mig=mig),
            "unit": "share" if share else "mig" if mig else "gpu",
        }

    def _device(self, uuid: str) -> GPUDevice | None:
        if uuid in self._by_uuid:
            return self._by_uuid[uuid]
        parsed = parse_share_uuid(uuid)
        if parsed and parsed[0] in self._by_uuid:
            return make_share(self._by_uuid[parsed[0]], parsed[1], parsed[2])
        return None

    def held_by(self, key: str) -> list[GPUDevice]:
        return [d for u in self._held.get(key, []) if (d := self._device(u)) is not None]

    def holder(self, uuid: str) -> str | None:
        """The key that holds a unit (a device uuid or a share uuid), else None."""
        if uuid in self._holder:
            return self._holder[uuid]
        parsed = parse_share_uuid(uuid)
        if parsed and self._split.get(parsed[0]) == parsed[2]:
            return self._shares.get(parsed[0], {}).get(parsed[1])
        return None

    def holders(self, uuid: str) -> list[str]:
        """Every key on a physical GPU: its whole holder, or the holders of its shares."""
        if uuid in self._holder:
            return [self._holder[uuid]]
        return list(dict.fromkeys(self._shares.get(uuid, {}).values()))

    def _split_gpus(self, model: str) -> list[tuple[str, int, int]]:
        return [
            (d.uuid, self._split[d.uuid], len(self._shares.get(d.uuid, {})))
            for d in self.matching(model)
            if d.uuid in self._split
        ]

    def _placement(self, key: str) -> tuple[str, int] | None:
        held = self.held_by(key)
        if len(held) == 1 and held[0].is_share:
            return held[0].parent_uuid, held[0].share_count
        return None

    def assignments(self) -> dict[str, list[str]]:
        return {k: list(v) for k, v in self._held.items()}

    # -- changing ----------------------------------------------------------
    def _assign(self, key: str, devices: list[GPUDevice]) -> None:
        """Record ``devices`` as held by ``key``: all of them, or none (AssignmentConflict, nothing changed)."""
        if not devices:  # holding nothing is not an assignment
            return
        shares: dict[str, set[int]] = {}
        wholes: set[str] = set()
        for d in devices:  # every check first: a refusal half-way would leave units held by nobody
            if d.is_share:
                parent, taken = d.parent_uuid, self._shares.get(d.parent_uuid, {})
                mine = shares.setdefault(parent, set())
                if parent in self._holder or parent in wholes:
                    raise AssignmentConflict(f"{d.uuid}: {parent} is held whole")
                if self._split.get(parent, d.share_count) != d.share_count:
                    raise AssignmentConflict(f"{d.uuid}: {parent} is split in {self._split[parent]}")
                if d.share_index in taken or d.share_index in mine:
                    raise AssignmentConflict(f"{d.uuid} is already held")
                mine.add(d.share_index)
            elif d.uuid in self._holder or d.uuid in self._split or d.uuid in shares or d.uuid in wholes:
                raise AssignmentConflict(f"{d.uuid} is already held")
            else:
                wholes.add(d.uuid)
        for d in devices:
            if d.is_share:
                self._split[d.parent_uuid] = d.share_count
                self._shares.setdefault(d.parent_uuid, {})[d.share_index] = key
            else:
                self._holder[d.uuid] = key
        self._held.setdefault(key, []).extend(d.uuid for d in devices)

    def _unassign(self, key: str, uuids: list[str]) -> None:
        for u in uuids:
            if self._holder.get(u) == key:
                del self._holder[u]
                continue
            parsed = parse_share_uuid(u)
            if parsed is None:
                continue
            parent, i, k = parsed
            taken = self._shares.get(parent, {})
            if self._split.get(parent) == k and taken.get(i) == key:
                del taken[i]
                if not taken:  # the last share went: the GPU is whole again
                    del self._shares[parent]
                    del self._split[parent]

    def _held_matches(self, held: list[GPUDevice], model: str, count: int, request: Request) -> bool:
        if len(held) != count:
            return False
        if request.share:
            return all(d.share_count == request.share and model_matches(model, d.name) for d in held)
        if request.mig:
            return all(d.is_mig and d.mig_profile == request.mig and model_matches(model, parent_name(d)) for d in held)
        return all(not d.is_share and model_matches(model, d.name) for d in held)

    async def acquire(
        self,
        key: str,
        model: str,
        count: int,
        timeout: float | None = None,
        on_position: Callable[[int, int], None] | None = None,
        *,
        share: int | None = None,
        mig: str | None = None,
    ) -> list[GPUDevice]:
        """Assign ``count`` units of ``model`` to ``key``, waiting in the queue if none are free.

        A unit is a whole GPU, one of ``share`` time-sliced shares of a GPU, or a
        MIG instance of the slice ``mig``. ``on_position(position, length)`` is
        called whenever the key's place in the queue changes. Raises QueueTimeout
        after ``timeout`` seconds, and AllocationError at once if the host does
        not have that many such units.
        """
        if count <= 0:
            return []
        share = share if share and share > 1 else None
        request = Request(share=share, mig=mig or None)
        if key in self._held:
            held = self.held_by(key)
            if self._held_matches(held, model, count, request):
                return held
            # a key still holding other GPUs (an earlier start of this server with another profile) must not
            # run the new profile, priced by its own model and count, on them: give them back and take a turn
            self.release(key)
        total = len(self.matching(model, share=share, mig=request.mig))
        if request.mig and count > total:
            raise AllocationError(
                "This profile needs a MIG {slice} slice of {model} but this host has {total}. Ask your administrator"
                " to fix the profile.",
                slice=request.mig,
                model=model,
                total=total,
            )
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
            self._queue_key(model, request.mig),
            model,
            count,
            claim=request,
            timeout=timeout,
            on_position=on_position,
            timeout_message=Phrase(
                "No {model} became free within {limit}; nothing was started. Try again later or choose another"
                " profile.",
                model=f"{model} MIG {request.mig}" if request.mig else model,
                limit=wait_limit_text(timeout),
            ),
        )

    def release(self, key: str) -> list[str]:
        """Free every unit the key holds and start waiters that now fit; returns the UUIDs freed."""
        uuids = self._held.pop(key, [])
        self._unassign(key, uuids)
        if uuids:
            log.info("%s released %s", key, ", ".join(uuids))
            self._drain()
        return uuids

    def park(self, key: str, as_key: str) -> list[str]:
        """Move what ``key`` holds to ``as_key`` in one step: no waiter is started, nothing is freed."""
        uuids = self._held.pop(key, [])
        self._unassign(key, uuids)
        self._assign(as_key, [d for d in map(self._device, uuids) if d is not None])
        if uuids:
            log.warning("%s: %s stay taken as %s", key, ", ".join(uuids), as_key)
        return uuids

    def _conflict(self, key: str, uuid: str, pending: dict[str, int]) -> str | None:
        """Why ``key`` cannot hold ``uuid`` (another key holds it, or its GPU is held otherwise), else None.

        ``pending``: the split of GPUs by the shares of this same restore so far.
        """
        parsed = parse_share_uuid(uuid)
        if parsed is None or uuid in self._by_uuid:
            other = self._holder.get(uuid)
            if other is not None and other != key:
                return f"{key} claims {uuid}, which {other} already holds"
            others = [k for k in self._shares.get(uuid, {}).values() if k != key]
            if others or uuid in pending:
                return f"{key} claims {uuid} whole, but it is split into shares held by {', '.join(others) or key}"
            return None
        parent, i, k = parsed
        other = self._holder.get(parent)
        if other is not None and other != key:
            return f"{key} claims {uuid}, but {other} holds {parent} whole"
        others = {j: h for j, h in self._shares.get(parent, {}).items() if h != key}
        if others and self._split.get(parent) != k:
            by = ", ".join(others.values())
            return f"{key} claims {uuid}, but {parent} is split in {self._split.get(parent)} by {by}"
        if i in others:
            return f"{key} claims {uuid}, which {others[i]} already holds"
        if pending.get(parent, k) != k:
            return f"{key} claims {uuid}, but also a share of {parent} in {pending[parent]}"
        return None

    def restore(self, key: str, uuids: list[str]) -> list[str]:
        """Record an assignment saved in a spawner's state (after a hub restart).

        ``uuids`` are units: device uuids, MIG uuids, or share uuids
        (:func:`share_uuid`) whose GPU is split again as it was. Unknown UUIDs (a
        GPU removed from the host) are skipped with a warning; a UUID already held
        by another key, or a share of a GPU held whole or split in another count,
        raises AssignmentConflict and nothing is recorded.
        """
        if self._held.get(key) == list(uuids):
            return list(uuids)
        pending: dict[str, int] = {}
        whole: set[str] = set()
        for u in dict.fromkeys(uuids):
            reason = self._conflict(key, u, pending)
            parsed = parse_share_uuid(u)
            if reason is None and parsed and u not in self._by_uuid and parsed[0] in whole:
                reason = f"{key} claims {u}, but also {parsed[0]} whole"
            if reason:
                raise AssignmentConflict(reason)
            if parsed and u not in self._by_uuid:
                pending[parsed[0]] = parsed[2]
            else:
                whole.add(u)
        known = [u for u in dict.fromkeys(uuids) if self._device(u) is not None]
        for u in set(uuids) - set(known):
            log.warning("%s held %s, which is not in the inventory any more", key, u)
        # Replace the key's assignment in one step: draining the queue in between
        # could hand a GPU of ``known`` to a waiter before it is recorded here.
        previous = self._held.pop(key, [])
        self._unassign(key, previous)
        self._assign(key, [self._device(u) for u in known])
        if set(previous) - set(known):
            self._drain()
        return known

    # -- queue -------------------------------------------------------------
    @staticmethod
    def _request(waiter: Waiter) -> Request:
        return waiter.claim if isinstance(waiter.claim, Request) else Request()

    def _fits(self, waiter: Waiter) -> bool:
        request = self._request(waiter)
        return len(self.free(waiter.model, share=request.share, mig=request.mig)) >= waiter.count

    def _grant(self, waiter: Waiter) -> list[GPUDevice]:
        """Its units; a share where the planner placed it (a class's GPU it kept a stranger off stays the class's)."""
        request = self._request(waiter)
        devices = self.free(waiter.model, share=request.share, mig=request.mig, where=waiter.where)[: waiter.count]
        self._assign(waiter.key, devices)
        return devices


def make_share(device: GPUDevice, index: int, count: int) -> GPUDevice:
    """Share ``index`` (from 0) of ``count`` of the physical GPU ``device``: its memory // count is the cap."""
    return GPUDevice(
        index=device.index,
        uuid=share_uuid(device.uuid, index, count),
        name=device.name,
        memory_mib=device.memory_mib // count,
        simulated=device.simulated,
        parent_uuid=device.uuid,
        share_index=index,
        share_count=count,
    )


# One allocator per inventory per hub process: every spawner of the hub shares it.
_ALLOCATORS: dict[tuple, GPUAllocator] = {}


def shared_allocator(backend: str, static_gpus: list, simulated_gpus: list) -> GPUAllocator:
    """The hub-wide allocator for this inventory configuration, created on first use.

    The backend (:mod:`jupyterhub_gpu.gpus.backends`) lists the GPUs from the option it names, if any."""
    chosen = get_backend(backend)
    key = (chosen.name, repr(static_gpus), repr(simulated_gpus))
    if key not in _ALLOCATORS:
        options = {"static_gpus": static_gpus, "simulated_gpus": simulated_gpus}
        _ALLOCATORS[key] = GPUAllocator(chosen.inventory(options.get(chosen.option) if chosen.option else None))
    return _ALLOCATORS[key]


class BackendName(CaselessStrEnum):
    """A spawner option naming a GPU backend: any registered one (:mod:`jupyterhub_gpu.gpus.backends`), in any
    case; an unknown name is refused when the configuration is loaded, with the known names."""

    def __init__(self, default_value="nvml", **kwargs):
        super().__init__(backend_names(), default_value=default_value, **kwargs)

    @property
    def values(self) -> tuple[str, ...]:
        """The registered backends' names, asked when a value is checked: a backend registered later counts."""
        return backend_names()

    @values.setter
    def values(self, _names) -> None:
        pass  # the registry is the one list of backends
