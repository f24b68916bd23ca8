"""Reads of one session that the spawners need beyond the :class:`~jupyterhub_gpu.ledger.store.Ledger`'s own."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import SessionRecord, UsageMinute
from jupyterhub_gpu.ledger.store import Ledger


def last_signs_of_life(ledger: Ledger, session_id: str) -> tuple[datetime | None, datetime | None]:
    """``(last push, last listing)`` of a session, aware UTC (None where the ledger has none).

    The last push is the later of its last sample's minute (the start of the minute a push fell in)
    and the last kernel activity a push reported; the last listing is the service's ``last_seen``.
    """
    with ledger.Session() as db:
        minute, kernel = db.execute(
            select(func.max(UsageMinute.minute), func.max(UsageMinute.last_kernel_activity)).where(
                UsageMinute.session_id == session_id
            )
        ).one()
        record = db.get(SessionRecord, session_id)
    pushed = max((aware_utc(t) for t in (minute, kernel) if t is not None), default=None)
    seen = aware_utc(record.last_seen) if record is not None and record.last_seen is not None else None
    return pushed, seen


def last_language(ledger: Ledger, user: str) -> str | None:
    """The language of ``user``'s latest spawn that recorded one (None: no session says; the lab's default applies)."""
    with ledger.Session() as db:
        return db.execute(
            select(SessionRecord.language)
            .where(SessionRecord.user == user, SessionRecord.language.is_not(None))
            .order_by(SessionRecord.started.desc())
            .limit(1)
        ).scalar()
