"""A request's writes to the ledger, done by the service's one writer (:mod:`jupyterhub_gpu.ledger.writer`).

A handler awaits ``written(self, write, *args)``: ``write(ledger, *args)`` runs on the writer's thread, in its
turn after the writes already waiting, and the handler goes on with its result once it is committed; the
event loop answers other requests meanwhile. When the writer has too many writes waiting, nothing is written
and the request is answered 503 with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tornado import web

from jupyterhub_gpu.ledger.writer import LedgerWriter, WriterBusy

T = TypeVar("T")

WRITES_BEHIND = (
    "The gpu service's database is behind with its writes; nothing was changed. Try again in {seconds} s (Retry-After)."
)


async def written(handler, write: Callable[..., T], *args, **kwargs) -> T:
    """``write(ledger, *args, **kwargs)``'s result, once the service's writer has run it (503 when it is behind)."""
    try:
        return await LedgerWriter.of(handler.ledger).call(write, *args, **kwargs)
    except WriterBusy as e:
        handler.set_header("Retry-After", str(e.retry_after))
        raise web.HTTPError(503, handler._(WRITES_BEHIND, seconds=e.retry_after)) from None
