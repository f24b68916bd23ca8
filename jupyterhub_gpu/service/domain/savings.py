"""What culling saved: an estimate per stop reason, and the billed idle share, as pure functions.

Nobody can know what a stopped server would have billed had it kept running:
the user might have come back to it a minute later, stopped it themselves, or
forgotten it for a week. This module gives one estimate, the same for every
report, defined so that an admin can check each number by hand.

**A culled session's saving.** For every session stopped by a cull rule
(``gpu_idle``, ``inactive``, ``max_age``) at the moment ``cull``, the server
is assumed to have kept running, and billing, until the earliest of

(a) the same user's next session start at or after ``cull`` (they came back and
    started anew: from then on the old server would have been replaced, or at
    least not been the reason they pay);
(b) ``cull + horizon`` (default 12 hours: a server forgotten in the evening
    and found the next morning);
(c) the end of the report window (and never after ``now``).

The saving is what billing would have charged over that stretch, by the real
rule (every started minute, see :func:`.billing.billed_minutes`):
``billed_minutes(started, end) - billed_minutes(started, cull)`` minutes, times
the session's ``gpu_count`` for GPU-minutes and times its rate for money (exact
integer micro-units).

Why this definition: (a) and (b) are the only ends of an abandoned server that
the ledger can see. A user who comes back starts a new server (their old one
is gone), so their next start bounds how long they were away; a user who does
not come back would have found the server at the latest at their next visit,
and the horizon stands in for that visit when there is none in the window.
(c) keeps a report about a term inside the term.

**It is an estimate, not a measurement.** It is an upper bound whenever the
user would have stopped the server themselves before coming back or before the
horizon (had the student stopped the server an hour after leaving it, the
cull saved only that hour). It undercounts servers that would have run
longer than the horizon (a forgotten server runs until ``max_age``, 24 hours by
default) and ignores culls before the window whose savings spill into it. For a
``max_age`` stop the "saving" may be a training that was cut (see
docs/culling.md); it is money not billed, not necessarily waste. On the
simulator's sample trace, where most students stop their own servers within
the hour, the default horizon overstates the true saving about seven times and
a 3-hour horizon about twice (docs/culling.md, "How good is the estimate"):
``horizon`` is the assumption that matters, so the API lets the caller choose it.

**Budget stops** are estimated the same way but reported apart: the budget
rule stops a server because its money ran out, not because it was idle.

**The billed idle share.** Billed GPU-minutes in the window (per started minute,
counting each minute in the window where it begins; running sessions up to
``now``), and of those the idle GPU-minutes: minutes idle by the one definition
(:data:`jupyterhub_gpu.rules.idle.IDLE`: a mean GPU utilization under 5% and no busy kernel), times
``gpu_count``. Minutes without a sample are not counted as idle (they are
reported as unsampled), so the share is a lower bound when samples are missing.

Everything here is a pure function of plain values; the API loads the inputs
from the ledger (:func:`jupyterhub_gpu.ledger.queries.culling.load_culling_inputs`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jupyterhub_gpu.billing import billed_minutes, minutes_in_window, minutes_so_far
from jupyterhub_gpu.rules.idle import MinuteCounts
from jupyterhub_gpu.session import CULL_REASONS, SessionFacts, StopReason

#: How long a culled server is assumed to have kept running when its user does not come back.
DEFAULT_HORIZON = timedelta(hours=12)
#: What ended a saving's estimate, in the order ties are broken.
ENDS = ("next_start", "horizon", "now", "window_end")


@dataclass(frozen=True)
class Saving:
    """The estimated saving of one culled (or budget-stopped) session."""

    session: SessionFacts
    until: datetime  # the end of the estimate: the server is assumed to run from the stop to here
    ended_by: str  # one of ENDS
    minutes: int  # billed minutes it would have added
    gpu_minutes: int
    money_micros: int

    @property
    def reason(self) -> str:
        return self.session.stop_reason or ""


@dataclass(frozen=True)
class Tally:
    """Sessions, billed minutes, GPU-minutes and money (per currency) of a set of savings."""

    sessions: int = 0
    minutes: int = 0
    gpu_minutes: int = 0
    money_micros: Mapping[str, int] = field(default_factory=dict)

    def plus(self, saving: Saving) -> Tally:
        money = dict(self.money_micros)
        code = saving.session.currency
        money[code] = money.get(code, 0) + saving.money_micros
        return Tally(self.sessions + 1, self.minutes + saving.minutes, self.gpu_minutes + saving.gpu_minutes, money)


@dataclass(frozen=True)
class CullingReport:
    since: datetime | None
    until: datetime | None  # as asked
    counted_until: datetime  # min(until, now): nothing after it is counted
    horizon: timedelta
    group: str | None
    savings: tuple[Saving, ...]  # culls and budget stops in the window, by stop time
    by_reason: Mapping[str, Tally]  # every reason of CULL_REASONS, zeros included
    total: Tally  # the cull reasons together (budget stops not included)
    budget: Tally
    billed_gpu_minutes: int
    billed_idle_gpu_minutes: int
    billed_unsampled_gpu_minutes: int
    billed_money_micros: Mapping[str, int]

    @property
    def idle_share(self) -> float | None:
        """Billed idle GPU-minutes over billed GPU-minutes; None when nothing was billed."""
        if not self.billed_gpu_minutes:
            return None
        return self.billed_idle_gpu_minutes / self.billed_gpu_minutes


def next_starts(sessions: Iterable[SessionFacts]) -> dict[str, datetime]:
    """For each stopped session, the start of its user's next session at or after its stop (if any)."""
    sessions = list(sessions)
    starts: dict[str, list[tuple[datetime, str]]] = {}
    for s in sessions:
        starts.setdefault(s.user, []).append((s.started, s.id))
    for moments in starts.values():
        moments.sort()
    found = {}
    for s in sessions:
        if s.stopped is None:
            continue
        moments = starts[s.user]
        i = bisect.bisect_left(moments, (s.stopped, ""))
        while i < len(moments) and moments[i][1] == s.id:  # a session stopped at its own start
            i += 1
        if i < len(moments):
            found[s.id] = moments[i][0]
    return found


def estimate_saving(
    session: SessionFacts,
    next_start: datetime | None,
    window_end: datetime,
    now: datetime,
    horizon: timedelta = DEFAULT_HORIZON,
) -> Saving:
    """What ``session`` would have billed from its stop to the earliest of the ends (see the module's doc)."""
    if session.stopped is None:
        raise ValueError(f"session {session.id} has not stopped")
    cull = session.stopped
    ends = [(cull + horizon, "horizon"), (window_end, "window_end"), (now, "now")]
    if next_start is not None:
        ends.append((next_start, "next_start"))
    end, ended_by = min(ends, key=lambda e: (e[0], ENDS.index(e[1])))
    end = max(end, cull)
    started = min(session.started, cull)
    minutes = billed_minutes(started, end) - billed_minutes(started, cull)
    return Saving(
        session=session,
        until=end,
        ended_by=ended_by,
        minutes=minutes,
        gpu_minutes=minutes * session.gpu_count,
        money_micros=minutes * session.rate_micros,
    )


def culling_report(
    sessions: Iterable[SessionFacts],
    usage: Mapping[str, MinuteCounts],
    since: datetime | None,
    until: datetime | None,
    now: datetime,
    horizon: timedelta = DEFAULT_HORIZON,
    group: str | None = None,
) -> CullingReport:
    """Savings of the culls in ``[since, min(until, now))`` and the window's billed idle share.

    ``sessions``: every session that ran in the window, of every user (a user's
    next start is looked up among them, whatever ``group`` says). ``group``:
    report only the sessions the group paid for (its pool), so that a student
    in two groups counts once and the groups' reports add up to the whole.
    ``usage``: per session id, its sampled and idle minutes in the window.
    """
    if horizon < timedelta(0):
        raise ValueError("horizon must not be negative")
    sessions = list(sessions)
    end = now if until is None else min(until, now)
    upcoming = next_starts(sessions)
    reported = [s for s in sessions if group is None or s.pool == group]

    savings = []
    billed = idle = sampled = 0
    billed_money: dict[str, int] = {}
    for s in reported:
        stop = s.stopped if s.stopped is not None else max(now, s.started)
        in_window = minutes_in_window(s.started, minutes_so_far(s.started, stop), since, end)
        counts = usage.get(s.id, MinuteCounts())
        billed += in_window * s.gpu_count
        sampled += min(counts.sampled, in_window) * s.gpu_count
        idle += min(counts.idle, counts.sampled, in_window) * s.gpu_count
        if in_window:
            billed_money[s.currency] = billed_money.get(s.currency, 0) + in_window * s.rate_micros
        # the budget rule's stops are estimated like a cull, and reported apart
        culled = s.stop_reason in CULL_REASONS or s.stop_reason == StopReason.BUDGET
        if culled and s.stopped is not None and (since is None or since <= s.stopped) and s.stopped < end:
            savings.append(estimate_saving(s, upcoming.get(s.id), end, now, horizon))
    savings.sort(key=lambda v: (v.session.stopped, v.session.id))

    by_reason = {reason: Tally() for reason in CULL_REASONS}
    total = budget = Tally()
    for saving in savings:
        if saving.reason == StopReason.BUDGET:
            budget = budget.plus(saving)
        else:
            by_reason[saving.reason] = by_reason[saving.reason].plus(saving)
            total = total.plus(saving)
    return CullingReport(
        since=since,
        until=until,
        counted_until=end,
        horizon=horizon,
        group=group,
        savings=tuple(savings),
        by_reason=by_reason,
        total=total,
        budget=budget,
        billed_gpu_minutes=billed,
        billed_idle_gpu_minutes=idle,
        billed_unsampled_gpu_minutes=billed - sampled,
        billed_money_micros=billed_money,
    )
