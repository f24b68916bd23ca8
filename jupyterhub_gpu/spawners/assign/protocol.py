"""What the spawner mixin needs from an allocator, and the errors an allocator raises.

Two allocators implement :class:`Allocator`: :class:`.host.GPUAllocator` hands out a host's
devices by UUID (Docker, local processes); :class:`.cluster.ClusterAllocator` counts a
Kubernetes cluster's GPUs and hands out placeholders (the device plugin picks the real ones).
Both queue a request that cannot be met in a :class:`.queue.FairQueue`.

Every method runs on the hub's event loop; none awaits between reading and changing the
assignment, so concurrent spawns cannot receive the same GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.spawners.messages import UserError


class AllocationError(UserError, RuntimeError):
    """A request that can never be met (more GPUs than the host has of that model); the student reads it."""


class QueueTimeout(UserError, TimeoutError):
    """A request waited longer than its timeout; the student reads it."""


class QueueCancelled(AllocationError):
    """A waiting request was taken out of the queue by :meth:`Allocator.cancel` (its server was stopped).

    Distinct from :class:`asyncio.CancelledError`, which means the waiting task itself was cancelled: a
    spawner turns this into a spawn failure, so that JupyterHub runs its failure clean-up.
    """


class AssignmentConflict(RuntimeError):
    """A restored assignment names a GPU already held by another server."""


@runtime_checkable
class Allocator(Protocol):
    """The hub-wide GPU assignment of one inventory, as the spawner mixin uses it.

    A key is one server (``"alice/"``, ``"alice/big"``); ``model`` is a profile's ``gpu_model``.
    """

    #: The devices the form and the startup check name (empty on a cluster: none is picked by the hub).
    devices: list[GPUDevice]

    def matching(self, model: str, *, share: int | None = None, mig: str | None = None) -> list[GPUDevice]:
        """The devices of ``model`` this allocator knows by name (empty on a cluster).

        A share request matches physical GPUs only; a ``mig`` request the MIG instances of that slice whose GPU
        is of ``model``; a whole request what the model names (never a MIG instance unless it names MIG).
        """
        ...

    def simulated(self, model: str | None = None, *, share: int | None = None, mig: str | None = None) -> bool:
        """Whether the GPUs a profile of ``model`` (None: any profile) would get are simulated: the form and the
        queue say so."""
        ...

    def counts(self, model: str, *, share: int | None = None, mig: str | None = None) -> dict:
        """``{"free", "total", "waiting", "unit", ...}`` units of ``model`` for the spawn form.

        ``unit`` is "gpu", "share" or "mig"; for ``share`` k, total is physical GPUs × k.
        """
        ...

    def waiting(self, model: str, *, share: int | None = None, mig: str | None = None) -> int:
        """How many requests wait in the queue of ``model`` (whole and share requests of a model wait in one)."""
        ...

    def position(self, key: str) -> tuple[int, int] | None:
        """(1-based position, queue length) of a waiting key, else None."""
        ...

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
        """``count`` units of ``model`` for ``key``, waiting in the queue for them.

        A unit is a whole GPU, one of ``share`` time-sliced shares of one GPU (count 1), or a MIG
        instance of the slice ``mig`` (count 1).

        ``on_position(position, length)`` is called whenever the key's place in the queue changes.
        Raises :class:`AllocationError` at once for a request that can never be met,
        :class:`QueueTimeout` after ``timeout`` seconds and :class:`QueueCancelled` after :meth:`cancel`.
        """
        ...

    def release(self, key: str) -> list[str]:
        """Give back what ``key`` holds and start waiters that now fit; the UUIDs freed."""
        ...

    def park(self, key: str, as_key: str) -> list[str]:
        """Move what ``key`` holds to ``as_key`` without freeing any of it (a server whose stop failed and that may
        still run: its units stay taken, its server name free for a new start); the UUIDs moved."""
        ...

    def cancel(self, key: str) -> bool:
        """Take a waiting key out of the queue (its acquire raises QueueCancelled); False if it did not wait."""
        ...

    def restore(self, key: str, uuids: list[str]) -> list[str]:
        """Record an assignment saved in a spawner's state (after a hub restart); may raise AssignmentConflict."""
        ...
