"""Narrowings of a ``select`` over sessions that the store and the queries share (time windows, group, user)."""

from __future__ import annotations

import json
from datetime import datetime

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import SessionRecord


def sessions_overlapping(query, start: datetime | None, end: datetime | None):
    """``query`` narrowed to sessions with a billed minute that may start in ``[start, end)``.

    A session's minutes start in ``[started, stopped)`` (a zero-length one: at
    ``started``), so it overlaps when it started before ``end`` and had not
    stopped by ``start``.
    """
    s = SessionRecord
    if end is not None:
        query = query.where(s.started < naive_utc(end))
    if start is not None:
        query = query.where(s.stopped.is_(None) | (s.stopped > naive_utc(start)) | (s.started >= naive_utc(start)))
    return query


def sessions_started(
    query,
    since: datetime | None = None,
    until: datetime | None = None,
    group: str | None = None,
    user: str | None = None,
):
    """``query`` narrowed to sessions that started in ``[since, until)``, of one group and user (None: any)."""
    if user is not None:
        query = query.where(SessionRecord.user == user)
    if since is not None:
        query = query.where(SessionRecord.started >= naive_utc(since))
    if until is not None:
        query = query.where(SessionRecord.started < naive_utc(until))
    if group is not None:
        query = query.where(SessionRecord.groups.contains(json.dumps(group), autoescape=True))
    return query
