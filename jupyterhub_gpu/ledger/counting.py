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
from dataclasses import dataclass

from sqlalchemy import event

from jupyterhub_gpu.ledger.store import Ledger

_COUNT: ContextVar[list[int] | None] = ContextVar("jupyterhub_gpu_statements", default=None)


def _count(*_args) -> None:
    box = _COUNT.get()
    if box is not None:
        box[0] += 1


@dataclass
class Writes:
    """The writes the ledger's writer ran for one context (:func:`writes_of`): how many, their seconds in all and
    the longest one's."""

    count: int = 0
    seconds: float = 0.0
    longest: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.seconds += seconds
        self.longest = max(self.longest, seconds)


_WRITES: ContextVar[Writes | None] = ContextVar("jupyterhub_gpu_writes", default=None)


@contextmanager
def writes_of() -> Iterator[Writes]:
    """``with writes_of() as w:`` ... ``w`` counts the calls the ledger's writer ran meanwhile for this context
    (the writer runs each call in its caller's context: :mod:`.writer`)."""
    box = Writes()
    token = _WRITES.set(box)
    try:
        yield box
    finally:
        _WRITES.reset(token)


def note_write(seconds: float) -> None:
    """Count a write of ``seconds`` for the current context's :func:`writes_of`, if any."""
    box = _WRITES.get()
    if box is not None:
        box.add(seconds)


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
