"""The ledger: sessions, budgets, alerts sent and in-Lab notices, in one SQL database.

SQLAlchemy 2 models (every table in :mod:`.models`) with Alembic migrations;
sqlite by default, PostgreSQL in production; the SQL of other concerns is in
:mod:`.queries`. The spawners (in the hub process) and the service (its own process)
both write here, and every write is idempotent: recording a start twice, or a
stop twice, changes nothing the second time. Times are stored as naive UTC,
money as integer micro-units.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, delete, event, func, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from jupyterhub_gpu.billing import (
    BudgetRule,
    BudgetStatus,
    UsageRow,
    charge,
    rule_window,
    session_row,
    status_from_totals,
    window_totals,
)
from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import AlertSent, Budget, LabSetting, Notice, PriceRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.filters import sessions_overlapping, sessions_started
from jupyterhub_gpu.money import from_micros, parse_amount, to_micros
from jupyterhub_gpu.session import SessionStart, StopReason, replaced_by

log = logging.getLogger("jupyterhub_gpu.ledger")

MIGRATIONS = Path(__file__).with_name("migrations")


def _usage_row(sid, user, groups, pool, started, stopped, minutes, rate, gpu_count, naive_now) -> UsageRow:
    """A :class:`UsageRow` from a session's stored columns (naive UTC times)."""
    row = session_row(sid, user, groups, pool, started, stopped, minutes, rate, gpu_count, naive_now)
    return dataclasses.replace(row, started=aware_utc(started))


def activity_forward(session_id: str, moment: datetime):
    """The UPDATE that moves a session's last activity forward to ``moment`` (never back)."""
    moment = naive_utc(moment)
    return (
        update(SessionRecord)
        .where(
            SessionRecord.id == session_id,
            (SessionRecord.last_activity.is_(None)) | (SessionRecord.last_activity < moment),
        )
        .values(last_activity=moment)
    )


def make_engine(db_url: str) -> Engine:
    """An engine for the ledger; sqlite gets WAL and a busy timeout for two writing processes."""
    kwargs = {"pool_pre_ping": True, "future": True}
    if db_url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    engine = create_engine(db_url, **kwargs)
    if db_url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

    return engine


_SHARED: dict[str, Ledger] = {}


def shared_ledger(db_url: str) -> Ledger:
    """One Ledger per database URL per process (the hub's spawners share it)."""
    if db_url not in _SHARED:
        _SHARED[db_url] = Ledger(db_url)
    return _SHARED[db_url]


# any constant: the key of the PostgreSQL advisory lock that migrations of the ledger take
_MIGRATION_LOCK = 0x6A68677075  # "jhgpu"


def upgrade(engine: Engine) -> None:
    """Bring the ledger's schema to the latest Alembic revision (a no-op when it is there).

    The hub (its spawners) and the gpu service each open the ledger when they start, so on a fresh install
    both migrate at once. One migration at a time: the first to take the database's lock upgrades, the other
    waits, then finds the schema at its head. sqlite locks the whole file (BEGIN EXCLUSIVE, which waits out
    the busy timeout); PostgreSQL takes an advisory lock held until the migration commits.
    """
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        if engine.dialect.name == "sqlite":
            # the other's migration may rebuild a big table (batch mode): wait up to 10 minutes, not the 30 s
            connection.exec_driver_sql("PRAGMA busy_timeout = 600000")
            connection.exec_driver_sql("BEGIN EXCLUSIVE")
        elif engine.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK})")
        cfg.attributes["connection"] = connection
        try:
            command.upgrade(cfg, "head")
        finally:
            if engine.dialect.name == "sqlite":
                connection.exec_driver_sql("PRAGMA busy_timeout = 30000")  # this pooled connection's usual wait


class Ledger:
    """Reads and idempotent writes on the ledger database."""

    def __init__(self, db_url: str, migrate: bool = True):
        self.db_url = db_url
        self.engine = make_engine(db_url)
        if migrate:
            upgrade(self.engine)
        self.Session = sessionmaker(self.engine, expire_on_commit=False)
        self.queries = 0
        event.listen(self.engine, "before_cursor_execute", self._count)
        self._lock = threading.Lock()

    def _count(self, *args):
        self.queries += 1

    def close(self):
        self.engine.dispose()

    # -- sessions ------------------------------------------------------------------
    def record_start(self, start: SessionStart) -> bool:
        """Record a session start; False if it was already recorded (replays change nothing)."""
        with self.Session() as db:
            if db.get(SessionRecord, start.id) is not None:
                return False
            db.add(
                SessionRecord(
                    id=start.id,
                    user=start.user,
                    server_name=start.server_name,
                    groups=json.dumps(sorted(start.groups)),
                    pool=start.pool_name(),
                    profile=start.profile,
                    gpus=json.dumps(list(start.gpus)),
                    gpu_count=len(start.gpus),
                    simulated=start.simulated,
                    rate_micros=start.rate_micros,
                    currency=start.currency,
                    started=naive_utc(start.started),
                    language=start.language,
                    tier=start.tier,
                    resume=start.resume,
                    server_token=start.server_token,
                )
            )
            try:
                db.commit()
            except IntegrityError:  # recorded by another process in the meantime
                db.rollback()
                return False
        return True

    def record_stop(self, session_id: str, stopped: datetime, reason: str, start: SessionStart | None = None) -> bool:
        """Close a session at ``stopped`` and store its charge; False if it was already closed.

        The reason asked for beforehand (:meth:`claim_stop_reason`: a budget or idle stop by the service, a
        server's "stop when done") wins over ``reason``, which is what the recorder saw (the hub's stop, an
        exit): that stop caused it. With ``start`` given, a session whose start was never recorded is recorded
        first.
        """
        if start is not None:
            self.record_start(start)
        with self.Session() as db:
            record = db.get(SessionRecord, session_id)
            if record is None or record.stopped is not None:
                return False
            stopped_naive = max(naive_utc(stopped), record.started)
            result = charge(record.started, stopped_naive, record.rate_micros, record.gpu_count)
            changed = db.execute(
                update(SessionRecord)
                .where(SessionRecord.id == session_id, SessionRecord.stopped.is_(None))
                .values(
                    stopped=stopped_naive,
                    # in the statement: a reason asked for up to this moment is the stop's
                    stop_reason=func.coalesce(SessionRecord.pending_stop_reason, reason),
                    minutes=result.minutes,
                    cost_micros=result.cost_micros,
                )
            ).rowcount
            db.commit()
        return bool(changed)

    def claim_stop_reason(self, session_id: str, reason: str) -> str | None:
        """Ask for ``reason`` as the cause of a session's stop; the reason its stop keeps, or None once it has
        stopped (its server name may run another session now, which that stop must not reach).

        The one precedence rule (:func:`~jupyterhub_gpu.session.kept_stop_reason`) decides, in one conditional
        UPDATE: set only where nothing is pending or the pending reason is one that ``reason`` replaces. Two
        writers racing (the tick's passes, the hub's scheduler, a server's own report) cannot both win, and
        each learns which reason the stop keeps, to act on it. ValueError for a reason that is not a
        :class:`~jupyterhub_gpu.session.StopReason` (nothing changes).
        """
        replaced = [str(r) for r in replaced_by(reason)]  # a ValueError before anything is written
        claim = (
            update(SessionRecord)
            .where(
                SessionRecord.id == session_id,
                SessionRecord.stopped.is_(None),
                or_(SessionRecord.pending_stop_reason.is_(None), SessionRecord.pending_stop_reason.in_(replaced)),
            )
            .values(pending_stop_reason=str(reason))
        )
        kept = select(SessionRecord.pending_stop_reason).where(
            SessionRecord.id == session_id, SessionRecord.stopped.is_(None)
        )
        with self.Session() as db:
            for _ in range(3):  # a pending reason that this one replaces, written between the two: again
                changed = db.execute(claim).rowcount
                db.commit()
                if changed:
                    return StopReason(reason)
                row = db.execute(kept).one_or_none()
                db.commit()
                if row is None:
                    return None
                if row[0] is not None and row[0] not in replaced:
                    return row[0]
        return None

    def mark_seen(self, session_ids: Iterable[str], now: datetime) -> None:
        ids = list(session_ids)
        if not ids:
            return
        with self.Session() as db:
            db.execute(
                update(SessionRecord)
                .where(SessionRecord.id.in_(ids), SessionRecord.stopped.is_(None))
                .values(last_seen=naive_utc(now))
            )
            db.commit()

    def note_activity(self, session_id: str, moment: datetime) -> None:
        """Move a session's last activity forward (never back)."""
        with self.Session() as db:
            db.execute(activity_forward(session_id, moment))
            db.commit()

    def set_cull_warning(self, session_id: str, at: datetime | None, rule: str | None) -> None:
        """Record (or, with ``at=None``, clear) the idle warning of a running session."""
        with self.Session() as db:
            db.execute(
                update(SessionRecord)
                .where(SessionRecord.id == session_id)
                .values(cull_warned_at=naive_utc(at) if at else None, cull_rule=rule)
            )
            db.commit()

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self.Session() as db:
            return db.get(SessionRecord, session_id)

    def open_sessions(self, after: str | None = None, limit: int | None = None) -> list[SessionRecord]:
        """The sessions still running; with ``limit``, a page of them: at most ``limit``, in id order, the
        first after the id ``after`` (the tick reads a thousand this way, letting requests in between pages).
        """
        query = select(SessionRecord).where(SessionRecord.stopped.is_(None))
        if limit is not None:
            query = query.order_by(SessionRecord.id).limit(limit)
            if after is not None:
                query = query.where(SessionRecord.id > after)
        with self.Session() as db:
            return list(db.scalars(query))

    def sessions(
        self,
        user: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        group: str | None = None,
        overlapping: bool = False,
        pool: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions that started in ``[since, until)``, optionally of one user, group (at start) or pool.

        With ``overlapping``, the sessions with a billed minute in the window
        instead (started before ``until``, not stopped before ``since``), for
        reports that count each minute in the period in which it falls.
        """
        query = select(SessionRecord).order_by(SessionRecord.started, SessionRecord.id)
        if overlapping:
            query = sessions_overlapping(sessions_started(query, None, None, group, user), since, until)
        else:
            query = sessions_started(query, since, until, group, user)
        if pool is not None:
            query = query.where(SessionRecord.pool == pool)
        with self.Session() as db:
            records = list(db.scalars(query))
        if group is not None:  # the LIKE above is a pre-filter; check exactly
            records = [r for r in records if group in r.group_list]
        return records

    @staticmethod
    def usage_rows(records: Iterable[SessionRecord], now: datetime) -> list[UsageRow]:
        """Budget-relevant charges: stored for stopped sessions, computed live for running ones.

        Each row keeps its minutes, rate and GPU count, so that budgets split it
        at period boundaries (:func:`jupyterhub_gpu.billing.minutes_in_window`).
        """
        naive_now = naive_utc(now)
        return [
            _usage_row(
                r.id,
                r.user,
                tuple(r.group_list),
                r.pool,
                r.started,
                r.stopped,
                r.minutes,
                r.rate_micros,
                r.gpu_count,
                naive_now,
            )
            for r in records
        ]

    def rows_for(self, user: str, groups, now: datetime, since: datetime) -> list[UsageRow]:
        """Usage rows of a user's sessions and of their groups' pools with a minute at or after ``since``."""
        records = {r.id: r for r in self.sessions(user=user, since=since, overlapping=True)}
        for group in groups:
            records.update((r.id, r) for r in self.sessions(pool=group, since=since, overlapping=True))
        return self.usage_rows(records.values(), now)

    # -- budgets -------------------------------------------------------------------
    def budgets(self) -> list[Budget]:
        with self.Session() as db:
            return list(db.scalars(select(Budget).order_by(Budget.scope, Budget.subject)))

    def budget_rules(self) -> list[BudgetRule]:
        """Every budget as a rule; a damaged row (a limit that is no number) is logged and left out."""
        rules = []
        for b in self.budgets():
            try:
                rules.append(b.rule())
            except (ArithmeticError, ValueError, TypeError) as e:
                log.error("budget %s:%s has an unusable limit %r and is ignored: %s", b.scope, b.subject, b.limit, e)
        return rules

    def get_budget(self, scope: str, subject: str) -> Budget | None:
        with self.Session() as db:
            return db.scalar(select(Budget).where(Budget.scope == scope, Budget.subject == subject))

    def set_budget(self, rule: BudgetRule, now: datetime) -> Budget:
        """Create or replace the budget of a user or group."""
        with self.Session() as db:
            budget = db.scalar(select(Budget).where(Budget.scope == rule.scope, Budget.subject == rule.subject))
            if budget is None:
                budget = Budget(scope=rule.scope, subject=rule.subject)
                db.add(budget)
            elif (budget.period, budget.unit, budget.limit, budget.term_start, budget.term_end) == (
                rule.period,
                rule.unit,
                str(rule.limit),
                rule.term_start,
                rule.term_end,
            ):
                return budget  # the same budget again (an idempotent PUT): its alerts are not sent again
            budget.period = rule.period
            budget.unit = rule.unit
            budget.limit = str(rule.limit)
            budget.term_start = rule.term_start
            budget.term_end = rule.term_end
            # the revision of the budget's alerts: a new one with every edit, even within one clock tick
            previous = budget.updated
            budget.updated = (
                naive_utc(now) if previous is None else max(naive_utc(now), previous + timedelta(microseconds=1))
            )
            db.commit()
            return budget

    def delete_budget(self, scope: str, subject: str) -> bool:
        with self.Session() as db:
            budget = db.scalar(select(Budget).where(Budget.scope == scope, Budget.subject == subject))
            if budget is None:
                return False
            db.delete(budget)
            db.commit()
            return True

    # -- alerts and notices ----------------------------------------------------------
    def claim_alert(
        self,
        user: str,
        budget_key: str,
        period_start: datetime,
        threshold: int,
        channel: str,
        now: datetime,
        revision: str = "",
    ) -> bool:
        """Record an alert before sending it; False if it was already sent (once per period and budget revision)."""
        with self.Session() as db:
            db.add(
                AlertSent(
                    user=user,
                    budget_key=budget_key,
                    period_start=naive_utc(period_start),
                    threshold=threshold,
                    channel=channel,
                    sent=naive_utc(now),
                    revision=revision,
                )
            )
            try:
                db.commit()
            except IntegrityError:
                db.rollback()
                return False
        return True

    def alerts_since(self, since: datetime) -> list[AlertSent]:
        """Alerts of the periods that start at or after ``since`` (read once per tick)."""
        with self.Session() as db:
            return list(db.scalars(select(AlertSent).where(AlertSent.period_start >= naive_utc(since))))

    def final_notices_before(self, period_start: datetime, sent_since: datetime) -> list[AlertSent]:
        """100% Lab notices of periods before ``period_start`` sent at or after ``sent_since`` (stops still due)."""
        query = select(AlertSent).where(
            AlertSent.threshold == 100,
            AlertSent.channel == "lab",
            AlertSent.period_start < naive_utc(period_start),
            AlertSent.sent >= naive_utc(sent_since),
        )
        with self.Session() as db:
            return list(db.scalars(query))

    def window_totals(
        self,
        start: datetime,
        end: datetime,
        now: datetime,
        users: Iterable[str] | None = None,
        pools: Iterable[str] | None = None,
    ) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """Money (micro-units) and GPU-minutes of the minutes in ``[start, end)``, per user and per pool.

        Never loads every session: the stopped sessions wholly inside the window
        are summed in SQL (one row per user and pool), and only the sessions that
        run across a boundary of the window or are still running are loaded and
        split minute by minute (:func:`jupyterhub_gpu.billing.window_totals`, the same rule as
        everywhere). ``users`` and ``pools`` narrow the query to the subjects
        asked about (None: everyone).
        """
        s = SessionRecord
        a, b = naive_utc(start), naive_utc(end)
        inside = (s.stopped.is_not(None), s.started >= a, s.started < b, s.stopped <= b)
        narrow = []
        users = None if users is None else sorted(set(users))
        pools = None if pools is None else sorted(set(pools))
        if users is not None or pools is not None:
            if len(users or ()) + len(pools or ()) <= 500:  # else one unfiltered pass is cheaper than many
                narrow = [or_(s.user.in_(users or []), s.pool.in_(pools or []))]
        closed = (
            select(
                s.user,
                s.pool,
                func.coalesce(func.sum(s.cost_micros), 0),
                func.coalesce(func.sum(s.minutes * s.gpu_count), 0),
            )
            .where(*inside, *narrow)
            .group_by(s.user, s.pool)
        )
        crossing = sessions_overlapping(
            select(s.id, s.user, s.pool, s.started, s.stopped, s.minutes, s.rate_micros, s.gpu_count), start, end
        ).where(~(s.stopped.is_not(None) & (s.started >= a) & (s.stopped <= b)), *narrow)
        naive_now = naive_utc(now)
        with self.engine.connect() as db:
            summed = list(db.execute(closed))
            rows = [
                _usage_row(sid, user, (), pool, started, stopped, minutes, rate, gpus, naive_now)
                for sid, user, pool, started, stopped, minutes, rate, gpus in db.execute(crossing)
            ]
        per_user, per_pool = window_totals(rows, start, end)
        for user, pool, cost, gpu_minutes in summed:
            for total in (per_user.setdefault(user, [0, 0]), *([per_pool.setdefault(pool, [0, 0])] if pool else [])):
                total[0] += int(cost)
                total[1] += int(gpu_minutes)
        return per_user, per_pool

    def budget_statuses(self, rules: Iterable[BudgetRule], now: datetime, tz) -> dict[str, BudgetStatus]:
        """:meth:`statuses_of` by ``rule.key`` (the ledger holds one budget per user or group)."""
        return {status.rule.key: status for status in self.statuses_of(rules, now, tz)}

    def statuses_of(self, rules: Iterable[BudgetRule], now: datetime, tz) -> list[BudgetStatus]:
        """THE budget use: each rule's status, in the order of ``rules``, as every reader shows and enforces it.

        The spawn check, the tick, ``GET me``, ``GET budgets``, the pages, the
        CLI (through the API) and the metrics all read budgets here. A minute
        counts in the period in which it starts (a session across a reset counts
        its new minutes in the new period at once); a group budget counts the
        sessions its group pays for. The result equals
        :func:`jupyterhub_gpu.billing.rule_statuses` over every session. A rule whose period
        cannot be computed (a damaged row) is logged and left out, so that one
        bad budget does not hide the others.
        """
        rules = list(rules)
        windows: dict[tuple[datetime, datetime], list[int]] = {}
        for i, rule in enumerate(rules):
            try:
                window = rule_window(rule, now, tz)
            except (ValueError, TypeError) as e:
                log.error("budget %s cannot be computed and is ignored: %s", rule.key, e)
                continue
            windows.setdefault(window, []).append(i)
        statuses: dict[int, BudgetStatus] = {}
        for (start, end), indexes in windows.items():
            users = [rules[i].subject for i in indexes if rules[i].scope == "user"]
            pools = [rules[i].subject for i in indexes if rules[i].scope == "group"]
            per_user, per_pool = self.window_totals(start, end, now, users, pools)
            for i in indexes:
                rule = rules[i]
                micros, gpu_minutes = (per_user if rule.scope == "user" else per_pool).get(rule.subject, (0, 0))
                statuses[i] = status_from_totals(rule, start, end, micros, gpu_minutes, now)
        return [statuses[i] for i in sorted(statuses)]

    def alerts(self, user: str | None = None) -> list[AlertSent]:
        query = select(AlertSent).order_by(AlertSent.id)
        if user is not None:
            query = query.where(AlertSent.user == user)
        with self.Session() as db:
            return list(db.scalars(query))

    def add_notice(
        self, user: str, kind: str, message: str, now: datetime, level: str = "info", session_id: str | None = None
    ) -> Notice:
        with self.Session() as db:
            notice = Notice(
                user=user, kind=kind, level=level, message=message, created=naive_utc(now), session_id=session_id
            )
            db.add(notice)
            db.commit()
            return notice

    def notices(self, user: str, include_dismissed: bool = False) -> list[Notice]:
        query = select(Notice).where(Notice.user == user).order_by(Notice.id)
        if not include_dismissed:
            query = query.where(Notice.dismissed.is_(False))
        with self.Session() as db:
            return list(db.scalars(query))

    def dismiss_notice(self, user: str, notice_id: int) -> bool:
        with self.Session() as db:
            changed = db.execute(
                update(Notice).where(Notice.id == notice_id, Notice.user == user).values(dismissed=True)
            ).rowcount
            db.commit()
            return bool(changed)

    def release_alert(
        self, user: str, budget_key: str, period_start: datetime, threshold: int, channel: str, revision: str = ""
    ) -> bool:
        """Undo :meth:`claim_alert` after a failed send, so that the alert is tried again."""
        with self.Session() as db:
            changed = db.execute(
                delete(AlertSent).where(
                    AlertSent.user == user,
                    AlertSent.budget_key == budget_key,
                    AlertSent.period_start == naive_utc(period_start),
                    AlertSent.threshold == threshold,
                    AlertSent.channel == channel,
                    AlertSent.revision == revision,
                )
            ).rowcount
            db.commit()
            return bool(changed)

    # -- pricing (published by the hub, read by the API and metrics) -------------------
    def set_pricing(self, profiles: list[dict], currency: str, now: datetime) -> int:
        """Replace the published profiles and their prices; returns how many were stored.

        Each dict needs ``slug``, ``gpu_count`` and ``rate_per_minute`` (a Decimal,
        a decimal string or an int, never a float) and may have ``display_name``,
        ``gpu_model``, ``allowed_groups``, the rate's parts ``price_per_gpu_hour``
        and ``price_per_hour`` (so that an admin's edit of one part is priced as
        the spawner prices it) and ``gpu_memory_mib`` (one GPU's memory in the
        hub's inventory); other keys are ignored, so the fields of a spawner
        ``Profile`` can be passed as they are.
        """

        def part(profile: dict, name: str) -> str | None:
            value = profile.get(name)
            return None if value is None else f"{parse_amount(value, f'{name} of profile {slug!r}'):f}"

        rows = []
        for position, profile in enumerate(profiles):
            slug = profile["slug"]
            rate = parse_amount(profile["rate_per_minute"], f"rate_per_minute of profile {slug!r}")
            memory = profile.get("gpu_memory_mib")
            rows.append(
                PriceRecord(
                    slug=slug,
                    position=position,
                    display_name=profile.get("display_name") or slug,
                    gpu_model=profile.get("gpu_model") or "",
                    gpu_count=int(profile.get("gpu_count", 0)),
                    rate_micros=to_micros(rate),
                    currency=currency,
                    allowed_groups=json.dumps(sorted(profile.get("allowed_groups") or ())),
                    updated=naive_utc(now),
                    price_per_gpu_hour=part(profile, "price_per_gpu_hour"),
                    price_per_hour=part(profile, "price_per_hour"),
                    gpu_memory_mib=int(memory) if memory else None,
                    gpu_share=int(profile["gpu_share"]) if profile.get("gpu_share") else None,  # issue 17
                    mig=profile.get("mig") or None,
                    # a spawner Profile says ``preemptible``; a published row ``tier``
                    tier="preemptible" if profile.get("preemptible") or profile.get("tier") == "preemptible" else None,
                )
            )
        with self.Session() as db:
            db.execute(delete(PriceRecord))
            db.add_all(rows)
            db.commit()
        return len(rows)

    # -- the lab's settings (published by the hub at start, read by the service) -------------
    def set_lab_settings(self, settings: dict[str, str], now: datetime) -> None:
        """Replace the published lab settings (``currency``, ``currency_symbol``, ``timezone``...) with ``settings``."""
        for name, value in settings.items():
            if not isinstance(name, str) or not name or len(name) > 64 or not isinstance(value, str):
                raise ValueError(f"a lab setting needs a name of 1-64 characters and a string value, got {name!r}")
        with self.Session() as db:
            db.execute(delete(LabSetting))
            db.add_all(LabSetting(name=k, value=v, updated=naive_utc(now)) for k, v in settings.items())
            db.commit()

    def lab_settings(self) -> dict[str, str]:
        """The settings the hub published at its last start; empty if it never did."""
        with self.Session() as db:
            return {r.name: r.value for r in db.scalars(select(LabSetting))}

    def session_currencies(self) -> dict[str, int]:
        """How many sessions (running or stopped) were charged in each currency (one GROUP BY)."""
        query = select(SessionRecord.currency, func.count()).group_by(SessionRecord.currency)
        with self.Session() as db:
            return {code: int(n) for code, n in db.execute(query)}

    def pricing(self) -> list[dict]:
        """The published profiles in their configured order, rates as decimal strings."""
        with self.Session() as db:
            records = list(db.scalars(select(PriceRecord).order_by(PriceRecord.position, PriceRecord.slug)))
        return [
            {
                "slug": r.slug,
                "display_name": r.display_name,
                "gpu_model": r.gpu_model,
                "gpu_count": r.gpu_count,
                "rate_per_minute": f"{from_micros(r.rate_micros):f}",
                "currency": r.currency,
                "allowed_groups": json.loads(r.allowed_groups or "[]"),
                "updated": aware_utc(r.updated),
                # the rate's configured parts (None: published before they were kept) and one GPU's memory
                "price_per_gpu_hour": r.price_per_gpu_hour,
                "price_per_hour": r.price_per_hour,
                "gpu_memory_mib": r.gpu_memory_mib,
                "gpu_share": r.gpu_share,  # part of a GPU (issue 17): None for a whole GPU
                "mig": r.mig,
                "tier": r.tier,  # "preemptible", or None: full price
            }
            for r in records
        ]

    def closed_session_totals(self) -> list[dict]:
        """Counts, minutes and money of stopped sessions, summed in SQL per profile, pool, currency and reason.

        One aggregate query whose size is the number of distinct combinations
        (a handful), not the number of sessions: cheap enough for every scrape.
        Stopped sessions never change, so sums over them only grow. Each session
        is in exactly one row (its pool, the one group that paid), so sums over
        the rows are the total spend, never counted twice.
        """
        s = SessionRecord
        query = (
            select(
                s.profile,
                s.pool,
                s.currency,
                s.stop_reason,
                func.count(),
                func.coalesce(func.sum(s.minutes), 0),
                func.coalesce(func.sum(s.cost_micros), 0),
            )
            .where(s.stopped.is_not(None))
            .group_by(s.profile, s.pool, s.currency, s.stop_reason)
        )
        with self.Session() as db:
            return [
                {
                    "profile": profile,
                    "pool": pool,
                    "groups": [pool] if pool else [],
                    "currency": currency,
                    "stop_reason": reason or "",
                    "sessions": int(count),
                    "minutes": int(minutes),
                    "cost_micros": int(cost),
                }
                for profile, pool, currency, reason, count, minutes, cost in db.execute(query)
            ]

    def open_sessions_of(self, user: str) -> list[SessionRecord]:
        """One user's running sessions (without loading everyone's)."""
        query = select(SessionRecord).where(SessionRecord.user == user, SessionRecord.stopped.is_(None))
        with self.Session() as db:
            return list(db.scalars(query.order_by(SessionRecord.started, SessionRecord.id)))
