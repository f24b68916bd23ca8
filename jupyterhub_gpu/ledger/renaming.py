"""Renaming a hub on the ledger: its rows follow it to the new name, in one transaction, while the hubs are stopped.

Each hub reads only the class bookings, group shares and admins' profile edits of its own name
(:mod:`jupyterhub_gpu.ledger.queries.schedule`, :mod:`~jupyterhub_gpu.ledger.queries.overrides`), and the rows
written before hubs had names are :data:`~jupyterhub_gpu.ledger.hubnames.DEFAULT_HUB`'s. A hub given a new
``hub_name`` would lose them (a profile restricted to some groups would open again): :func:`rename_hub` moves the
hub column of its sessions, jobs, stop orders, bookings, shares and profile edits to the new name, and drops what
the hub publishes again at its start (its published profiles and prices, its wait queue) and its spawn holds.
:func:`kept_rows` tells the doctor which hub names hold bookings, shares or edits.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, func, select, text, update

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.hubnames import check_hub_name
from jupyterhub_gpu.ledger.hubs import ALIVE, Member
from jupyterhub_gpu.ledger.models import (
    GroupShare,
    HubMember,
    JobRecord,
    PriceRecord,
    ProfileOverride,
    QueueEntry,
    ReservationRecord,
    ScheduleOrder,
    SessionRecord,
    SpawnHold,
)

#: The tables whose rows move to the new name (what the hub keeps: the reason a rename must not lose them).
MOVED = (
    ReservationRecord,
    GroupShare,
    ProfileOverride,
    SessionRecord,
    JobRecord,
    ScheduleOrder,
)
#: The tables whose rows of the old name are deleted: the hub publishes its profiles and its queue again at its
#: start, and no spawn of a stopped hub is in flight.
DROPPED = (PriceRecord, QueueEntry, SpawnHold)
#: What an admin made for one hub (the doctor's concern when no hub runs under their name).
KEPT = (ReservationRecord, GroupShare, ProfileOverride)


class RenameRefused(ValueError):
    """A rename that was not done (nothing changed), and why."""


def rename_hub(ledger, old: str, new: str, now: datetime, dry_run: bool = False, merge: bool = False) -> dict[str, int]:
    """Move hub ``old``'s rows to ``new`` in one transaction; the rows per table (moved, or deleted for
    :data:`DROPPED`). ``dry_run``: the same counts, nothing changed.

    Refused with :class:`RenameRefused` (nothing changed) when ``new`` is not a valid hub name or is ``old``,
    when ``old`` has no rows, when ``new`` already has rows in a table that moves (a merge is not a rename), or
    when a hub process or gpu service whose heartbeat is fresh (:data:`ALIVE`) runs under either name.
    ``merge``: ``new`` may have rows (the same hub, started under its new name before the rename), unless one of
    its group shares or profile edits is of the same group and model, or profile, as one of ``old``'s.
    """
    try:
        check_hub_name(new, "the new hub name")
    except ValueError as e:
        raise RenameRefused(str(e)) from None
    if old == new:
        raise RenameRefused(f"the hub is already named {new!r}")
    with ledger.Session() as db:
        _lock(db)
        live = db.scalars(
            select(HubMember).where(HubMember.hub.in_((old, new)), HubMember.heartbeat >= naive_utc(now - ALIVE))
        ).all()
        if live:
            where = ", ".join(f"{Member.of(m).where()} (hub {m.hub!r})" for m in live)
            raise RenameRefused(
                f"stop the hubs first: {where} ran on the ledger in the last {int(ALIVE.total_seconds() // 60)}"
                " minutes; a hub or gpu service running under either name would keep writing under it"
            )
        counts = {t.__tablename__: _count(db, t, old) for t in (*MOVED, *DROPPED)}
        if not any(counts.values()):
            raise RenameRefused(f"the ledger has no rows of a hub named {old!r}")
        taken = {t.__tablename__: n for t in MOVED if (n := _count(db, t, new))}
        if taken and not merge:
            raise RenameRefused(
                f"the hub name {new!r} already has rows ({_listed(taken)}): a rename does not merge two hubs;"
                f" choose a name the ledger does not have, or, where {new!r} is this same hub started under its new"
                " name before the rename, merge them (--merge)"
            )
        clashes = _clashes(db, old, new)
        if clashes:
            raise RenameRefused(
                f"both {old!r} and {new!r} have {', '.join(clashes)}: keep one (delete the other on its hub's admin"
                " page or with `jupyterhub-gpu shares delete`), then merge"
            )
        if dry_run:
            db.rollback()
            return counts
        for table in MOVED:
            db.execute(update(table).where(table.hub == old).values(hub=new))
        for table in DROPPED:
            db.execute(delete(table).where(table.hub == old))
        db.commit()
    return counts


def kept_rows(ledger) -> dict[str, dict[str, int]]:
    """Per hub name, its class bookings, group shares and profile edits (table name: rows), where it has any."""
    found: dict[str, dict[str, int]] = {}
    with ledger.Session() as db:
        for table in KEPT:
            for hub, n in db.execute(select(table.hub, func.count()).group_by(table.hub)):
                found.setdefault(hub, {})[table.__tablename__] = n
    return found


def _clashes(db, old: str, new: str) -> list[str]:
    """The group shares and profile edits of ``new`` with the same key as one of ``old``'s (they cannot both be)."""
    found = []
    for table, key, what in (
        (GroupShare, (GroupShare.group, GroupShare.gpu_model), "the share of {} on {}"),
        (ProfileOverride, (ProfileOverride.slug,), "an edit of the profile {}"),
    ):
        keys = [set(db.execute(select(*key).where(table.hub == hub)).all()) for hub in (old, new)]
        found += [what.format(*(repr(k) for k in row)) for row in sorted(keys[0] & keys[1])]
    return found


def _count(db, table, hub: str) -> int:
    return db.scalar(select(func.count()).select_from(table).where(table.hub == hub)) or 0


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{table} {n}" for table, n in counts.items())


def _lock(db) -> None:
    """Open the transaction so that no other process writes these tables until it ends."""
    connection = db.connection()
    if connection.dialect.name == "postgresql":
        names = ", ".join(t.__tablename__ for t in (*MOVED, *DROPPED, HubMember))
        connection.execute(text(f"LOCK TABLE {names} IN SHARE ROW EXCLUSIVE MODE"))
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")  # the file's write lock from the start
