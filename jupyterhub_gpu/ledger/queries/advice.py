"""Right-sizing advice in the ledger (``gpu_session_advice``, one row per session): writes and reads.

What the advice is, when a session is judged and how advice is summed are the rules of
:mod:`jupyterhub_gpu.rules.advice` and :mod:`jupyterhub_gpu.service.feeds.advice`; here are the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, or_, select

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import SessionAdvice, SessionRecord
from jupyterhub_gpu.ledger.queries.filters import sessions_started
from jupyterhub_gpu.ledger.store import Ledger


def save_advice(ledger: Ledger, session_id: str, final: bool, values: dict) -> SessionAdvice:
    """Write (or replace) a session's advice row; a final one is never replaced by a live one."""
    (row,) = save_advices(ledger, [(session_id, final, values)])
    return row


def save_advices(ledger: Ledger, advices: Sequence[tuple[str, bool, dict]]) -> list[SessionAdvice]:
    """:func:`save_advice` for each ``(session_id, final, values)``, in one transaction (the tick's chunk of
    sessions: one commit, not one per session)."""
    rows = []
    with ledger.Session() as db:
        found = {r.session_id: r for r in db.scalars(select(SessionAdvice).where(SessionAdvice.session_id.in_(
            [session_id for session_id, _, _ in advices]
        )))}  # fmt: skip
        for session_id, final, values in advices:
            row = found.get(session_id)
            if row is None:
                row = found[session_id] = SessionAdvice(session_id=session_id, **values)
                db.add(row)
            elif not row.final or final:
                for key, value in values.items():
                    setattr(row, key, value)
            rows.append(row)
        db.commit()
    return rows


def sessions_without_final_advice(
    ledger: Ledger, stopped_from: datetime, stopped_until: datetime, limit: int
) -> list[SessionRecord]:
    """GPU sessions of the ledger's hub (its service advises them) that stopped in ``[stopped_from, stopped_until]``
    and have no final advice, oldest stop first."""
    s, a = SessionRecord, SessionAdvice
    query = (
        select(s)
        .outerjoin(a, a.session_id == s.id)
        .where(
            s.stopped.is_not(None),
            s.stopped <= naive_utc(stopped_until),
            s.stopped >= naive_utc(stopped_from),
            s.hub == ledger.hub,
            s.gpu_count > 0,
            or_(a.session_id.is_(None), a.final.is_(False)),
        )
        .order_by(s.stopped)
        .limit(limit)
    )
    with ledger.Session() as db:
        return list(db.scalars(query))


def running_sessions_due_for_advice(
    ledger: Ledger,
    started_until: datetime,
    computed_until: datetime,
    unjudged: Sequence[str],
    unjudged_computed_until: datetime,
    limit: int,
) -> list[SessionRecord]:
    """Running GPU sessions of the ledger's hub started by ``started_until`` whose live advice is missing or was
    computed by ``computed_until`` (by ``unjudged_computed_until`` when its reason is one of ``unjudged``)."""
    s, a = SessionRecord, SessionAdvice
    query = (
        select(s)
        .outerjoin(a, a.session_id == s.id)
        .where(
            s.stopped.is_(None),
            s.hub == ledger.hub,
            s.gpu_count > 0,
            s.started <= naive_utc(started_until),
            or_(
                a.session_id.is_(None),
                a.computed <= naive_utc(computed_until),
                and_(a.reason.in_(unjudged), a.computed <= naive_utc(unjudged_computed_until)),
            ),
        )
        .limit(limit)
    )
    with ledger.Session() as db:
        return list(db.scalars(query))


def advice_of(ledger: Ledger, session_ids: Sequence[str]) -> dict[str, SessionAdvice]:
    """The stored advice of these sessions (only those that have one), in chunks of the primary key."""
    found: dict[str, SessionAdvice] = {}
    ids = list(session_ids)
    with ledger.Session() as db:
        for i in range(0, len(ids), 500):
            for row in db.scalars(select(SessionAdvice).where(SessionAdvice.session_id.in_(ids[i : i + 500]))):
                found[row.session_id] = row
    return found


def final_advice_rows(
    ledger: Ledger, since: datetime | None, until: datetime | None, group: str | None, reasons: Sequence[str]
) -> list[tuple]:
    """``(advice, user, groups JSON, started, pool)`` of the final advice with one of ``reasons`` of the
    sessions that started in ``[since, until)`` (and were paid by ``group``), in start order."""
    s, a = SessionRecord, SessionAdvice
    query = (
        select(a, s.user, s.groups, s.started, s.pool)
        .join(s, s.id == a.session_id)
        .where(a.final.is_(True), a.reason.in_(reasons))
        .order_by(s.started, s.id)
    )
    query = sessions_started(query, since, until)
    if group is not None:
        query = query.where(s.pool == group)
    with ledger.Session() as db:
        return [tuple(row) for row in db.execute(query)]
