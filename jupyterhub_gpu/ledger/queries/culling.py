"""The culling report's inputs: the sessions that ran in a window, and their sampled and idle minutes.

:func:`load_culling_inputs` reads them in two plain queries (minutes counted in SQL), as the values
:mod:`jupyterhub_gpu.service.domain.savings` estimates from (:class:`SessionFacts`,
:class:`~jupyterhub_gpu.rules.idle.MinuteCounts`), the idle minutes by the one definition of them
(:meth:`~jupyterhub_gpu.rules.idle.IdleRule.idle_in_tenths`, turned into SQL).
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import case, func, or_, select

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import SessionRecord, UsageMinute
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.idle import MinuteCounts
from jupyterhub_gpu.session import SessionFacts


def load_culling_inputs(
    ledger: Ledger, since: datetime | None, until: datetime, group: str | None = None, hub: str | None = None
) -> tuple[list[SessionFacts], dict[str, MinuteCounts]]:
    """The sessions that ran in ``[since, until)`` (every user's; of one hub with ``hub``) and the minute counts of
    the reported ones.

    Two plain queries: the sessions that started before ``until`` and had not
    stopped before ``since``; then, per chunk of the reported GPU sessions (the
    primary key's index), their sampled and idle minutes in the window, counted
    in SQL (a minute is idle as :data:`.idle.IDLE` defines it: its mean utilization under the threshold
    and, where kernels count, no kernel busy).
    """

    s = SessionRecord
    query = select(
        s.id,
        s.user,
        s.server_name,
        s.groups,
        s.profile,
        s.gpu_count,
        s.rate_micros,
        s.currency,
        s.started,
        s.stopped,
        s.stop_reason,
        s.pool,
    ).where(s.started < naive_utc(until))
    if since is not None:
        query = query.where(or_(s.stopped.is_(None), s.stopped >= naive_utc(since)))
    if hub is not None:
        query = query.where(s.hub == hub)
    facts = []
    with ledger.engine.connect() as db:
        for sid, user, server, groups, profile, gpus, rate, currency, started, stopped, reason, pool in db.execute(
            query
        ):
            facts.append(
                SessionFacts(
                    id=sid,
                    user=user,
                    started=aware_utc(started),
                    stopped=aware_utc(stopped),
                    stop_reason=reason,
                    gpu_count=gpus,
                    rate_micros=rate,
                    currency=currency,
                    groups=tuple(json.loads(groups or "[]")),
                    profile=profile,
                    server_name=server or "",
                    pool=pool,
                )
            )
    # a group's report counts the sessions it paid for (each session once, for its pool)
    ids = [f.id for f in facts if f.gpu_count and (group is None or f.pool == group)]
    u = UsageMinute
    sampled = func.sum(case((u.samples > 0, 1), else_=0))
    # the idle definition's own test of a minute's sums, given the columns: its SQL
    quiet = idle.IDLE.idle_in_tenths(u.utilization_tenths_sum, u.samples, u.busy_kernels_max)
    idle_minutes = func.sum(case((quiet, 1), else_=0))
    counts = {}
    with ledger.engine.connect() as db:
        for i in range(0, len(ids), 500):
            chunk = select(u.session_id, sampled, idle_minutes).where(
                u.session_id.in_(ids[i : i + 500]), u.minute < naive_utc(until)
            )
            if since is not None:
                chunk = chunk.where(u.minute >= naive_utc(since))
            for sid, n_sampled, n_idle in db.execute(chunk.group_by(u.session_id)):
                counts[sid] = MinuteCounts(sampled=int(n_sampled or 0), idle=int(n_idle or 0))
    return facts, counts
