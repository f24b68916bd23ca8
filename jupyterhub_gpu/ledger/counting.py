"""The ledger's SQL statements sent by one task (and what it runs in threads), counted apart from the rest.

The service's tick shares the ledger's engine with the requests that the event loop answers between its
slices, so the engine's own count (``Ledger.queries``) mixes them. :func:`statements_of` counts only the
statements sent in the current context: the task that enters it, the tasks it starts and the functions it
runs with ``asyncio.to_thread`` (each copies the context), never another request's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlalchemy import event

from jupyterhub_gpu.ledger.store import Ledger

_COUNT: ContextVar[list[int] | None] = ContextVar("jupyterhub_gpu_statements", default=None)


def _count(*_args) -> None:
    box = _COUNT.get()
    if box is not None:
        box[0] += 1


@contextmanager
def statements_of(ledger: Ledger) -> Iterator[list[int]]:
    """``with statements_of(ledger) as n:`` ... ``n[0]`` is the statements this context sent meanwhile."""
    if not event.contains(ledger.engine, "before_cursor_execute", _count):
        event.listen(ledger.engine, "before_cursor_execute", _count)
    box = [0]
    token = _COUNT.set(box)
    try:
        yield box
    finally:
        _COUNT.reset(token)
