"""The ledger: sessions, budgets, alerts sent and in-Lab notices, in one SQL database.

The :class:`Ledger` opens the database (migrating it) and keeps the sessions; its other parts are mixins
named for their concerns: budgets and their use (:mod:`.budgets`), alerts and notices (:mod:`.notices`),
published prices and the lab's settings (:mod:`.pricing`).
SQLAlchemy 2 models (every table in :mod:`.models`) with Alembic migrations;
sqlite by default, PostgreSQL in production; the SQL of other concerns is in
:mod:`.queries`. The spawners (in the hub process) and the service (its own process)
both write here, and every write is idempotent: recording a start twice, or a
stop twice, changes nothing the second time. Times are stored as naive UTC,
money as integer micro-units.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, event, func, or_, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import sessionmaker

from jupyterhub_gpu.billing import UsageRow, charge
from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.budgets import BudgetBook, stored_usage_row
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB, check_hub_name
from jupyterhub_gpu.ledger.hubs import HubBook
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.notices import NoticeBook
from jupyterhub_gpu.ledger.pricing import PricingBook
from jupyterhub_gpu.ledger.queries.filters import sessions_overlapping, sessions_started
from jupyterhub_gpu.session import SessionStart, StopReason, replaced_by

log = logging.getLogger("jupyterhub_gpu.ledger")

MIGRATIONS = Path(__file__).with_name("migrations")


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


_SHARED: dict[tuple[str, str], Ledger] = {}


def shared_ledger(db_url: str, hub: str = DEFAULT_HUB) -> Ledger:
    """One Ledger per database URL and hub name per process (the hub's spawners share it)."""
    if (db_url, hub) not in _SHARED:
        _SHARED[(db_url, hub)] = Ledger(db_url, hub=hub)
    return _SHARED[(db_url, hub)]


class LedgerSchemaError(RuntimeError):
    """The ledger's schema is at a revision this code does not know: a newer version migrated it."""


def _check_schema(connection, script: ScriptDirectory) -> None:
    """Raise :class:`LedgerSchemaError` when the database's revision is none of this code's migrations."""
    current = MigrationContext.configure(connection).get_current_heads()
    known = {r.revision for r in script.walk_revisions()}
    unknown = sorted(r for r in current if r not in known)
    if unknown:
        url = connection.engine.url.render_as_string(hide_password=True)
        raise LedgerSchemaError(
            f"the ledger {url} has schema revision {', '.join(unknown)}, newer than this jupyterhub-gpu knows"
            f" (its newest is {script.get_current_head()}): a hub or gpu service of a newer version shares this"
            f" ledger; install that version here too (a ledger is never migrated back)"
        )


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
            _check_schema(connection, ScriptDirectory.from_config(cfg))
            command.upgrade(cfg, "head")
        finally:
            if engine.dialect.name == "sqlite":
                connection.exec_driver_sql("PRAGMA busy_timeout = 30000")  # this pooled connection's usual wait


class Ledger(BudgetBook, NoticeBook, PricingBook, HubBook):
    """Reads and idempotent writes on the ledger database: sessions here; budgets, alerts and notices, prices and
    the lab's settings, the hubs that share it, in the parts it is made of (:mod:`.budgets`, :mod:`.notices`,
    :mod:`.pricing`, :mod:`.hubs`).

    ``hub`` is the name of the hub this process writes for (:mod:`.hubnames`): the sessions it records carry it.
    Reads are of every hub unless they are given one (``hub=``): budgets, alerts and use count across hubs.
    """

    def __init__(self, db_url: str, migrate: bool = True, hub: str = DEFAULT_HUB):
        self.hub = check_hub_name(hub)
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
            record = SessionRecord.of(start)
            record.hub = self.hub
            db.add(record)
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
        self.set_cull_warnings([(session_id, at, rule)])

    def set_cull_warnings(self, warnings: Iterable[tuple[str, datetime | None, str | None]]) -> None:
        """:meth:`set_cull_warning` for each ``(session_id, at, rule)``, in one transaction."""
        with self.Session() as db:
            for session_id, at, rule in warnings:
                db.execute(
                    update(SessionRecord)
                    .where(SessionRecord.id == session_id)
                    .values(cull_warned_at=naive_utc(at) if at else None, cull_rule=rule)
                )
            db.commit()

    def get_session(self, session_id: str) -> SessionRecord | None:
        with self.Session() as db:
            return db.get(SessionRecord, session_id)

    def open_sessions(
        self, after: str | None = None, limit: int | None = None, hub: str | None = None
    ) -> list[SessionRecord]:
        """The sessions still running, of every hub or of ``hub``; with ``limit``, a page of them: at most
        ``limit``, in id order, the first after the id ``after`` (the tick reads a thousand this way, letting
        requests in between pages).
        """
        query = select(SessionRecord).where(SessionRecord.stopped.is_(None))
        if hub is not None:
            query = query.where(SessionRecord.hub == hub)
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
        hub: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions that started in ``[since, until)``, optionally of one user, group (at start), pool or hub.

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
        if hub is not None:
            query = query.where(SessionRecord.hub == hub)
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
            stored_usage_row(
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

    def closed_session_totals(self) -> list[dict]:
        """Counts, minutes and money of stopped sessions, summed in SQL per hub, profile, pool, currency and reason.

        One aggregate query whose size is the number of distinct combinations
        (a handful), not the number of sessions: cheap enough for every scrape.
        Stopped sessions never change, so sums over them only grow. Each session
        is in exactly one row (its pool, the one group that paid), so sums over
        the rows are the total spend, never counted twice.
        """
        s = SessionRecord
        query = (
            select(
                s.hub,
                s.profile,
                s.pool,
                s.currency,
                s.stop_reason,
                func.count(),
                func.coalesce(func.sum(s.minutes), 0),
                func.coalesce(func.sum(s.cost_micros), 0),
            )
            .where(s.stopped.is_not(None))
            .group_by(s.hub, s.profile, s.pool, s.currency, s.stop_reason)
        )
        with self.Session() as db:
            return [
                {
                    "hub": hub,
                    "profile": profile,
                    "pool": pool,
                    "groups": [pool] if pool else [],
                    "currency": currency,
                    "stop_reason": reason or "",
                    "sessions": int(count),
                    "minutes": int(minutes),
                    "cost_micros": int(cost),
                }
                for hub, profile, pool, currency, reason, count, minutes, cost in db.execute(query)
            ]

    def open_sessions_of(self, user: str, hub: str | None = None) -> list[SessionRecord]:
        """One user's running sessions (without loading everyone's), on every hub or on ``hub``."""
        query = select(SessionRecord).where(SessionRecord.user == user, SessionRecord.stopped.is_(None))
        if hub is not None:
            query = query.where(SessionRecord.hub == hub)
        with self.Session() as db:
            return list(db.scalars(query.order_by(SessionRecord.started, SessionRecord.id)))
