"""The schedule kept in the ledger: class reservations (``gpu_reservations``), group shares (``gpu_group_shares``),
the stop orders of the hub's scheduler (``gpu_schedule_orders``: preemptions and reservation ends), the queue the
hub publishes (``gpu_queue``), and what a scheduling cycle reads of past sessions (usage and lengths).

What may be booked is :func:`jupyterhub_gpu.scheduler.check_reservation`; here rows are read and
written. :func:`add_reservation` runs the caller's check on the bookings as they are inside the same step as the
insert, so two concurrent bookings cannot together pass the pool's size. Times are stored as naive UTC and come
back aware, in the zone the caller names (the lab's: weekly windows repeat at its wall-clock time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from sqlalchemy import delete, or_, select, text, update

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB
from jupyterhub_gpu.ledger.models import (
    GroupShare,
    QueueEntry,
    ReservationRecord,
    ScheduleOrder,
    SessionRecord,
    UsageMinute,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler.texts import values_from_json, values_json

#: Serializes check-then-insert of :func:`add_reservation` in this process.
_BOOK_LOCK = threading.Lock()
#: The advisory lock key of bookings on PostgreSQL (other processes).
_BOOK_KEY = 0x6770_7573_6368


@dataclass(frozen=True)
class StoredReservation:
    """One booking; ``start`` and ``end`` aware, ``weekly_until`` the last day a weekly window may start on."""

    id: int
    group: str
    gpu_model: str
    count: int
    start: datetime
    end: datetime
    weekly_until: date | None
    created_by: str
    created_at: datetime
    note: str


@dataclass(frozen=True)
class Draft:
    """A booking to store (aware times)."""

    group: str
    gpu_model: str
    count: int
    start: datetime
    end: datetime
    weekly_until: date | None = None
    note: str = ""


def _stored(row: ReservationRecord, zone: tzinfo) -> StoredReservation:
    return StoredReservation(
        id=row.id,
        group=row.group,
        gpu_model=row.gpu_model,
        count=row.count,
        start=aware_utc(row.start).astimezone(zone),
        end=aware_utc(row.end).astimezone(zone),
        weekly_until=row.weekly_until,
        created_by=row.created_by,
        created_at=aware_utc(row.created_at),
        note=row.note,
    )


def _rows(db, hub: str, zone: tzinfo, groups: Sequence[str] | None = None) -> list[StoredReservation]:
    query = (
        select(ReservationRecord)
        .where(ReservationRecord.hub == hub)
        .order_by(ReservationRecord.start, ReservationRecord.id)
    )
    if groups is not None:
        query = query.where(ReservationRecord.group.in_(list(groups)))
    return [_stored(row, zone) for row in db.scalars(query)]


def reservations(ledger: Ledger, zone: tzinfo, groups: Sequence[str] | None = None) -> list[StoredReservation]:
    """Every booking of the ledger's hub (or those of ``groups``), by start: each hub books its own GPUs."""
    with ledger.Session() as db:
        return _rows(db, ledger.hub, zone, groups)


def get_reservation(ledger: Ledger, reservation_id: int, zone: tzinfo) -> StoredReservation | None:
    with ledger.Session() as db:
        row = db.get(ReservationRecord, reservation_id)
        return None if row is None or row.hub != ledger.hub else _stored(row, zone)


def add_reservation(
    ledger: Ledger,
    draft: Draft,
    check: Callable[[list[StoredReservation]], None],
    zone: tzinfo,
    now: datetime,
    by: str,
) -> StoredReservation:
    """Store ``draft`` for the ledger's hub once ``check`` (given every booking of that hub as it is) returns;
    whatever it raises stores nothing."""
    with _BOOK_LOCK, ledger.Session() as db:
        if db.get_bind().dialect.name == "postgresql":
            db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _BOOK_KEY})
        check(_rows(db, ledger.hub, zone))
        row = ReservationRecord(
            hub=ledger.hub,
            group=draft.group,
            gpu_model=draft.gpu_model,
            count=draft.count,
            start=naive_utc(draft.start),
            end=naive_utc(draft.end),
            weekly_until=draft.weekly_until,
            created_by=by,
            created_at=naive_utc(now),
            note=draft.note,
        )
        db.add(row)
        db.commit()
        return _stored(row, zone)


def delete_reservation(ledger: Ledger, reservation_id: int) -> bool:
    """False if the ledger's hub has no such booking."""
    with ledger.Session() as db:
        mine = (ReservationRecord.id == reservation_id) & (ReservationRecord.hub == ledger.hub)
        done = db.execute(delete(ReservationRecord).where(mine)).rowcount
        db.commit()
        return bool(done)


# -- group shares ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredShare:
    group: str
    gpu_model: str
    share: int
    updated: datetime
    updated_by: str


def shares(ledger: Ledger, groups: Sequence[str] | None = None) -> list[StoredShare]:
    """Every configured share of the ledger's hub's GPUs (or those of ``groups``), by group and model."""
    query = select(GroupShare).where(GroupShare.hub == ledger.hub).order_by(GroupShare.group, GroupShare.gpu_model)
    if groups is not None:
        query = query.where(GroupShare.group.in_(list(groups)))
    with ledger.Session() as db:
        return [
            StoredShare(r.group, r.gpu_model, r.share, aware_utc(r.updated), r.updated_by) for r in db.scalars(query)
        ]


def share_table(ledger: Ledger) -> dict[str, dict[str, int]]:
    """group -> model -> share, the shape of :attr:`~jupyterhub_gpu.scheduler.Snapshot.shares`."""
    table: dict[str, dict[str, int]] = {}
    for s in shares(ledger):
        table.setdefault(s.group, {})[s.gpu_model] = s.share
    return table


def set_share(ledger: Ledger, group: str, gpu_model: str, share: int | None, now: datetime, by: str) -> bool:
    """Set a group's share of a model of the ledger's hub; ``None`` removes it (back to the default). Whether a row
    existed before."""
    with ledger.Session() as db:
        row = db.get(GroupShare, (ledger.hub, group, gpu_model))
        existed = row is not None
        if share is None:
            if row is not None:
                db.delete(row)
        else:
            if row is None:
                row = GroupShare(hub=ledger.hub, group=group, gpu_model=gpu_model)
                db.add(row)
            row.share = share
            row.updated = naive_utc(now)
            row.updated_by = by
        db.commit()
        return existed


# -- stop orders: preemptions and reservation ends (the hub decides, the gpu service notices and stops) -----------

#: The kinds of stop order, which are also the sessions' stop reasons.
PREEMPTED = "preempted"
RESERVED = "reserved"
ORDER_KINDS = (PREEMPTED, RESERVED)


@dataclass(frozen=True)
class StopOrder:
    """A session told to stop at ``stop_at`` (aware UTC), why (``reason_key`` of ``scheduler.TEXTS``, its typed
    ``values``)."""

    session_id: str
    user: str
    server_name: str
    kind: str
    stop_at: datetime
    decided_at: datetime
    reason_key: str
    values: dict
    for_user: str | None
    noticed_at: datetime | None
    done_at: datetime | None
    cause: str | None = None
    withdrawn_at: datetime | None = None
    #: the hub of the session (its scheduler gave the order; its gpu service carries it out)
    hub: str = DEFAULT_HUB


def _order(row: ScheduleOrder) -> StopOrder:
    return StopOrder(
        session_id=row.session_id,
        user=row.user,
        server_name=row.server_name,
        kind=row.kind,
        stop_at=aware_utc(row.stop_at),
        decided_at=aware_utc(row.decided_at),
        reason_key=row.reason_key,
        values=values_from_json(row.reason_values),
        for_user=row.for_user,
        noticed_at=aware_utc(row.noticed_at) if row.noticed_at else None,
        done_at=aware_utc(row.done_at) if row.done_at else None,
        cause=row.cause,
        withdrawn_at=aware_utc(row.withdrawn_at) if row.withdrawn_at else None,
        hub=row.hub,
    )


def order_stop(
    ledger: Ledger,
    session: SessionRecord,
    kind: str,
    stop_at: datetime,
    reason_key: str,
    values: dict,
    now: datetime,
    for_user: str | None = None,
    cause: str | None = None,
    later: bool = False,
    noticed: datetime | None = None,
) -> bool:
    """Tell an open session to stop at ``stop_at``. An order already there stays unless this one is earlier (or the
    one there was withdrawn, even if the service has closed it since, or ``later``: the scheduler no longer needs the
    stop as early): then it moves (time, kind, reason, cause) and its notice goes out again. ``noticed``: its user
    was already told (a grant's "may run until" on the spawn page), so that withdrawing it tells them the stop is
    off. Whether anything changed."""
    if kind not in ORDER_KINDS:
        raise ValueError(f"unknown stop order {kind!r}")
    with ledger.Session() as db:
        row = db.get(ScheduleOrder, session.id)
        if row is not None and row.done_at is not None and row.withdrawn_at is None:
            return False  # carried out: the session is stopping or stopped
        if row is not None and row.withdrawn_at is None:
            known = aware_utc(row.stop_at)
            if known == stop_at or (known < stop_at and not later):
                return False
        if row is None:
            row = ScheduleOrder(
                session_id=session.id, hub=session.hub, user=session.user, server_name=session.server_name
            )
            db.add(row)
        row.kind = kind
        row.stop_at = naive_utc(stop_at)
        row.decided_at = naive_utc(now)
        row.reason_key = reason_key
        row.reason_values = values_json(values)
        row.for_user = for_user
        row.cause = cause
        row.withdrawn_at = None
        row.done_at = None  # a withdrawn order, closed by the service, is given again
        row.noticed_at = naive_utc(noticed) if noticed is not None else None
        db.commit()
        return True


def withdraw_order(ledger: Ledger, session_id: str, now: datetime, not_before: datetime) -> bool:
    """Withdraw a pending order whose cause is gone, if its time is still after ``not_before`` (a stop that is due
    may be under way). The gpu service tells the user the stop is off and closes it. Whether it was withdrawn."""
    with ledger.Session() as db:
        row = db.get(ScheduleOrder, session_id)
        if row is None or row.done_at is not None or row.withdrawn_at is not None:
            return False
        if aware_utc(row.stop_at) <= not_before:
            return False
        row.withdrawn_at = naive_utc(now)
        db.commit()
        return True


def stop_orders(
    ledger: Ledger, session_ids: Sequence[str] | None = None, *, pending: bool = True, hub: str | None = None
) -> list[StopOrder]:
    """The orders not done yet (``pending``), or every one; of ``session_ids`` when given, of the sessions of
    ``hub`` when given; by stop time."""
    query = select(ScheduleOrder).order_by(ScheduleOrder.stop_at, ScheduleOrder.session_id)
    if hub is not None:
        query = query.where(ScheduleOrder.hub == hub)
    if pending:
        query = query.where(ScheduleOrder.done_at.is_(None))
    if session_ids is not None:
        query = query.where(ScheduleOrder.session_id.in_(list(session_ids)))
    with ledger.Session() as db:
        return [_order(row) for row in db.scalars(query)]


def preemptions(ledger: Ledger, since: datetime, user: str | None = None, hub: str | None = None) -> list[StopOrder]:
    """The preemption records decided since ``since`` (of ``user``, of the sessions of ``hub``), newest first."""
    query = (
        select(ScheduleOrder)
        .where(ScheduleOrder.kind == PREEMPTED, ScheduleOrder.decided_at >= naive_utc(since))
        .order_by(ScheduleOrder.decided_at.desc())
    )
    if user is not None:
        query = query.where(ScheduleOrder.user == user)
    if hub is not None:
        query = query.where(ScheduleOrder.hub == hub)
    with ledger.Session() as db:
        return [_order(row) for row in db.scalars(query)]


def mark_order(
    ledger: Ledger,
    session_id: str,
    *,
    noticed: datetime | None = None,
    done: datetime | None = None,
    as_read: StopOrder | None = None,
) -> bool:
    """Note that an order's notice went out, or that it was carried out (or its session ended before).

    ``as_read``: only if the order is still the one read then, in one conditional UPDATE. The hub's scheduler
    moves, withdraws or gives again orders in its own process while the service awaits a notice: the notice of
    the old time must not mark a moved order told (it would never be told), nor the "stop is off" of a
    withdrawal mark an order given again done (it would never be carried out). A move or a new order sets a
    new ``decided_at``; a withdrawal sets only ``withdrawn_at``, which a notice does not compare: a notice that
    went out is told, and the withdrawal then tells that the stop is off. Whether the order was marked."""
    values = {}
    if noticed is not None:
        values["noticed_at"] = naive_utc(noticed)
    if done is not None:
        values["done_at"] = naive_utc(done)
    query = update(ScheduleOrder).where(ScheduleOrder.session_id == session_id)
    if done is not None or as_read is not None:
        query = query.where(ScheduleOrder.done_at.is_(None))
    if as_read is not None:
        query = query.where(
            ScheduleOrder.decided_at == naive_utc(as_read.decided_at),
            ScheduleOrder.stop_at == naive_utc(as_read.stop_at),
            ScheduleOrder.kind == as_read.kind,
        )
        if done is not None:
            withdrawn = as_read.withdrawn_at
            query = query.where(
                ScheduleOrder.withdrawn_at.is_(None)
                if withdrawn is None
                else ScheduleOrder.withdrawn_at == naive_utc(withdrawn)
            )
    with ledger.Session() as db:
        result = db.execute(query.values(**values))
        db.commit()
        return result.rowcount > 0


# -- the queue the hub publishes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Queued:
    """One waiting request as the hub published it: where it stands, why (key and values), the estimate."""

    key: str
    user: str
    server_name: str
    profile: str
    gpu_model: str
    count: int
    tier: str
    group: str | None
    arrived: datetime
    position: int
    length: int
    wait_seconds: int | None
    reason_key: str
    values: dict
    updated: datetime
    #: the hub whose queue it waits in (each hub publishes its own; :meth:`publish_queue` sets the ledger's)
    hub: str = DEFAULT_HUB


def publish_queue(ledger: Ledger, entries: Sequence[Queued]) -> None:
    """Replace the queue the ledger's hub published with ``entries`` (one step: a reader sees the old queue or the
    new); the other hubs' queues stay."""
    with ledger.Session() as db:
        db.execute(delete(QueueEntry).where(QueueEntry.hub == ledger.hub))
        for e in entries:
            db.add(
                QueueEntry(
                    hub=ledger.hub,
                    key=e.key,
                    user=e.user,
                    server_name=e.server_name,
                    profile=e.profile,
                    gpu_model=e.gpu_model,
                    count=e.count,
                    tier=e.tier,
                    group=e.group,
                    arrived=naive_utc(e.arrived),
                    position=e.position,
                    length=e.length,
                    wait_seconds=e.wait_seconds,
                    reason_key=e.reason_key,
                    reason_values=values_json(e.values),
                    updated=naive_utc(e.updated),
                )
            )
        db.commit()


def queue(ledger: Ledger, user: str | None = None, hub: str | None = None) -> list[Queued]:
    """The queues every hub published (or ``hub``'s; of ``user``), by model, position and hub."""
    query = select(QueueEntry).order_by(QueueEntry.gpu_model, QueueEntry.position, QueueEntry.key, QueueEntry.hub)
    if user is not None:
        query = query.where(QueueEntry.user == user)
    if hub is not None:
        query = query.where(QueueEntry.hub == hub)
    with ledger.Session() as db:
        return [
            Queued(
                key=r.key,
                user=r.user,
                server_name=r.server_name,
                profile=r.profile,
                gpu_model=r.gpu_model,
                count=r.count,
                tier=r.tier,
                group=r.group,
                arrived=aware_utc(r.arrived),
                position=r.position,
                length=r.length,
                wait_seconds=r.wait_seconds,
                reason_key=r.reason_key,
                values=values_from_json(r.reason_values),
                updated=aware_utc(r.updated),
                hub=r.hub,
            )
            for r in db.scalars(query)
        ]


# -- what a scheduling cycle reads of past sessions ---------------------------------------------------------------


def sessions_since(
    ledger: Ledger, since: datetime, hub: str | None = None
) -> list[tuple[str | None, str, int, datetime, datetime | None]]:
    """``(pool, profile, gpu_count, started, stopped or None)`` of the GPU sessions open at or after ``since`` (of
    ``hub`` when given: a hub's fair shares and wait estimates are of its own GPUs and profiles)."""
    query = select(
        SessionRecord.pool, SessionRecord.profile, SessionRecord.gpu_count, SessionRecord.started, SessionRecord.stopped
    ).where(
        SessionRecord.gpu_count > 0,
        or_(SessionRecord.stopped.is_(None), SessionRecord.stopped >= naive_utc(since)),
    )
    if hub is not None:
        query = query.where(SessionRecord.hub == hub)
    with ledger.Session() as db:
        return [
            (pool, profile, count, aware_utc(started), aware_utc(stopped) if stopped else None)
            for pool, profile, count, started, stopped in db.execute(query)
        ]


def last_gpu_use(ledger: Ledger, session_ids: Sequence[str], since: datetime, busy_percent: float = 5.0) -> dict:
    """session id -> the end of its last minute since ``since`` whose mean GPU use reached ``busy_percent``."""
    if not session_ids:
        return {}
    query = select(
        UsageMinute.session_id, UsageMinute.minute, UsageMinute.utilization_tenths_sum, UsageMinute.samples
    ).where(UsageMinute.session_id.in_(list(session_ids)), UsageMinute.minute >= naive_utc(since))
    found: dict[str, datetime] = {}
    with ledger.Session() as db:
        for sid, minute, tenths, samples in db.execute(query):
            if samples and tenths / samples / 10 >= busy_percent:
                moment = aware_utc(minute) + timedelta(minutes=1)
                if sid not in found or found[sid] < moment:
                    found[sid] = moment
    return found
