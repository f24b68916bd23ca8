"""The schedule kept in the ledger: class reservations (``gpu_reservations``) and group shares (``gpu_group_shares``).

What may be booked is :func:`jupyterhub_gpu.service.domain.scheduling.check_reservation`; here rows are read and
written. :func:`add_reservation` runs the caller's check on the bookings as they are inside the same step as the
insert, so two concurrent bookings cannot together pass the pool's size. Times are stored as naive UTC and come
back aware, in the zone the caller names (the lab's: weekly windows repeat at its wall-clock time).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, tzinfo

from sqlalchemy import delete, select, text

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import GroupShare, ReservationRecord
from jupyterhub_gpu.ledger.store import Ledger

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


def _rows(db, zone: tzinfo, groups: Sequence[str] | None = None) -> list[StoredReservation]:
    query = select(ReservationRecord).order_by(ReservationRecord.start, ReservationRecord.id)
    if groups is not None:
        query = query.where(ReservationRecord.group.in_(list(groups)))
    return [_stored(row, zone) for row in db.scalars(query)]


def reservations(ledger: Ledger, zone: tzinfo, groups: Sequence[str] | None = None) -> list[StoredReservation]:
    """Every booking (or those of ``groups``), by start."""
    with ledger.Session() as db:
        return _rows(db, zone, groups)


def get_reservation(ledger: Ledger, reservation_id: int, zone: tzinfo) -> StoredReservation | None:
    with ledger.Session() as db:
        row = db.get(ReservationRecord, reservation_id)
        return None if row is None else _stored(row, zone)


def add_reservation(
    ledger: Ledger,
    draft: Draft,
    check: Callable[[list[StoredReservation]], None],
    zone: tzinfo,
    now: datetime,
    by: str,
) -> StoredReservation:
    """Store ``draft`` once ``check`` (given every booking as it is) returns; whatever it raises stores nothing."""
    with _BOOK_LOCK, ledger.Session() as db:
        if db.get_bind().dialect.name == "postgresql":
            db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _BOOK_KEY})
        check(_rows(db, zone))
        row = ReservationRecord(
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
    """False if there was no such booking."""
    with ledger.Session() as db:
        done = db.execute(delete(ReservationRecord).where(ReservationRecord.id == reservation_id)).rowcount
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
    """Every configured share (or those of ``groups``), by group and model."""
    query = select(GroupShare).order_by(GroupShare.group, GroupShare.gpu_model)
    if groups is not None:
        query = query.where(GroupShare.group.in_(list(groups)))
    with ledger.Session() as db:
        return [
            StoredShare(r.group, r.gpu_model, r.share, aware_utc(r.updated), r.updated_by) for r in db.scalars(query)
        ]


def share_table(ledger: Ledger) -> dict[str, dict[str, int]]:
    """group -> model -> share, the shape of :attr:`~jupyterhub_gpu.service.domain.scheduling.Snapshot.shares`."""
    table: dict[str, dict[str, int]] = {}
    for s in shares(ledger):
        table.setdefault(s.group, {})[s.gpu_model] = s.share
    return table


def set_share(ledger: Ledger, group: str, gpu_model: str, share: int | None, now: datetime, by: str) -> bool:
    """Set a group's share of a model; ``None`` removes it (back to the default). Whether a row existed before."""
    with ledger.Session() as db:
        row = db.get(GroupShare, (group, gpu_model))
        existed = row is not None
        if share is None:
            if row is not None:
                db.delete(row)
        else:
            if row is None:
                row = GroupShare(group=group, gpu_model=gpu_model)
                db.add(row)
            row.share = share
            row.updated = naive_utc(now)
            row.updated_by = by
        db.commit()
        return existed
