"""The alert channels kept in the ledger (``gpu_notify_channels``): users' own, groups' and the admins'.

What a channel is and which notices it gets is :mod:`jupyterhub_gpu.service.domain.notices`; here
rows are read and written. :class:`StoredChannel` carries the URL (the secrets the far end needs) for
the gateway that sends; every reader that answers a person uses ``service`` and ``masked`` only.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, delete, func, or_, select, text

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import NotifyChannel
from jupyterhub_gpu.ledger.store import Ledger

OWNER_KINDS = ("user", "group", "admin")
#: Serializes count-then-insert of :func:`add_channel` in this process.
_ADD_LOCK = threading.Lock()


@dataclass(frozen=True)
class StoredChannel:
    """One row: ``owner_kind`` (user | group | admin), ``owner`` ("" for admin), its events, its URL."""

    id: int
    owner_kind: str
    owner: str
    service: str
    masked: str
    events: tuple[str, ...]
    created: datetime
    created_by: str
    url: str = field(repr=False, default="")


def _stored(row: NotifyChannel) -> StoredChannel:
    return StoredChannel(
        id=row.id,
        owner_kind=row.owner_kind,
        owner=row.owner,
        service=row.service,
        masked=row.masked,
        events=tuple(e for e in row.events.split(",") if e),
        created=row.created,
        created_by=row.created_by,
        url=row.url,
    )


def add_channel(
    ledger: Ledger,
    owner_kind: str,
    owner: str,
    url: str,
    service: str,
    masked: str,
    events,
    now: datetime,
    by: str,
    limit: int | None = None,
) -> StoredChannel | None:
    """Store a checked channel; None (and nothing stored) when its owner has ``limit`` channels already.

    The count and the insert are one step for each owner: under a lock in this process and, on PostgreSQL,
    a transaction-scoped advisory lock on the owner (other processes), so concurrent adds never pass the limit.
    """
    if owner_kind not in OWNER_KINDS:
        raise ValueError(f"owner_kind must be one of {', '.join(OWNER_KINDS)}, got {owner_kind!r}")
    owner = owner if owner_kind != "admin" else ""
    with _ADD_LOCK, ledger.Session() as db:
        if limit is not None:
            if db.get_bind().dialect.name == "postgresql":
                db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _lock_key(owner_kind, owner)})
            mine = (NotifyChannel.owner_kind == owner_kind, NotifyChannel.owner == owner)
            if db.scalar(select(func.count()).select_from(NotifyChannel).where(*mine)) >= limit:
                return None
        row = NotifyChannel(
            owner_kind=owner_kind,
            owner=owner,
            url=url,
            service=service,
            masked=masked,
            events=",".join(events),
            created=naive_utc(now),
            created_by=by,
        )
        db.add(row)
        db.commit()
        return _stored(row)


def _lock_key(owner_kind: str, owner: str) -> int:
    """A signed 64-bit advisory lock key for one owner's channels."""
    digest = hashlib.sha256(f"gpu_notify_channels:{owner_kind}:{owner}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def get_channel(ledger: Ledger, channel_id: int) -> StoredChannel | None:
    with ledger.Session() as db:
        row = db.get(NotifyChannel, channel_id)
        return _stored(row) if row is not None else None


def channels_of(ledger: Ledger, owner_kind: str, owner: str = "") -> list[StoredChannel]:
    """One owner's channels, oldest first."""
    query = (
        select(NotifyChannel)
        .where(NotifyChannel.owner_kind == owner_kind, NotifyChannel.owner == (owner if owner_kind != "admin" else ""))
        .order_by(NotifyChannel.id)
    )
    with ledger.Session() as db:
        return [_stored(r) for r in db.scalars(query)]


def channels_for(ledger: Ledger, users=(), groups=(), admins: bool = False) -> list[StoredChannel]:
    """The channels of these users, these groups and (``admins``) the admins, in one query, oldest first."""
    clauses = []
    if users:
        clauses.append(and_(NotifyChannel.owner_kind == "user", NotifyChannel.owner.in_(list(users))))
    if groups:
        clauses.append(and_(NotifyChannel.owner_kind == "group", NotifyChannel.owner.in_(list(groups))))
    if admins:
        clauses.append(NotifyChannel.owner_kind == "admin")
    if not clauses:
        return []
    with ledger.Session() as db:
        return [_stored(r) for r in db.scalars(select(NotifyChannel).where(or_(*clauses)).order_by(NotifyChannel.id))]


def channel_owners(ledger: Ledger, owner_kind: str, event: str | None = None) -> list[str]:
    """The owners of ``owner_kind`` with a channel (that wants ``event``, when given: the groups that get a digest)."""
    query = select(NotifyChannel.owner, NotifyChannel.events).where(NotifyChannel.owner_kind == owner_kind)
    with ledger.Session() as db:
        return sorted({owner for owner, events in db.execute(query) if event is None or event in events.split(",")})


def set_channel_events(ledger: Ledger, channel_id: int, events) -> StoredChannel | None:
    """Replace a channel's events; None when there is no such channel."""
    with ledger.Session() as db:
        row = db.get(NotifyChannel, channel_id)
        if row is None:
            return None
        row.events = ",".join(events)
        db.commit()
        return _stored(row)


def delete_channel(ledger: Ledger, channel_id: int) -> bool:
    with ledger.Session() as db:
        changed = db.execute(delete(NotifyChannel).where(NotifyChannel.id == channel_id)).rowcount
        db.commit()
        return bool(changed)
