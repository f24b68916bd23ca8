"""Spawns wait until a starting hub has restored its GPU assignments and stopped what it does not know.

JupyterHub serves requests once ``init_spawners`` has run for ``init_spawners_timeout``
seconds (10 by default), and loads the remaining spawners in the background: a hub
with many servers, or a slow start, would otherwise hand a GPU to a new spawn before
the spawner that holds it was loaded (its saved state restores the assignment), or
while a server an interrupted spawn left behind still runs on it. The start-up
wrapper (:mod:`jupyterhub_gpu.spawners.startup`) marks the restore's beginning and
end; a spawn asks for GPUs only after it. Outside a hub's start (tests, the
JupyterHub spawner contract) nothing is restoring and nothing waits.

A flag polled by the waiters rather than an :class:`asyncio.Event`, so that it
belongs to no event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

_restoring = False

#: How often a waiting spawn looks again (seconds).
POLL = 0.2


def begin_restore() -> None:
    """The hub starts restoring: spawns that ask for GPUs from now on wait."""
    global _restoring
    _restoring = True


def end_restore() -> None:
    """The hub's assignments are complete: waiting spawns go on."""
    global _restoring
    _restoring = False


def restoring() -> bool:
    return _restoring


async def wait_restored(on_wait: Callable[[], None] | None = None) -> None:
    """Return once the hub's restore is over; ``on_wait`` is called once if this had to wait."""
    if _restoring and on_wait is not None:
        on_wait()
    while _restoring:  # noqa: ASYNC110 (a flag of no event loop: see the module docstring)
        await asyncio.sleep(POLL)
