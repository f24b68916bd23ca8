"""Spawn holds: the spawns that passed the budget check and are not recorded yet, kept where every hub sees them.

A spawn's budget check counts the first minutes of every spawn that passed before it and is still starting, on
any hub of the ledger (docs/service.md, "Spawn races"). Reading the holds, the check and the hold it takes are
one step for the whole ledger (:func:`check_and_hold`): on PostgreSQL under a transaction-scoped advisory lock,
on sqlite in one write transaction (``BEGIN IMMEDIATE``, which waits for any other writer of the file), so two
hubs, or two processes of one, cannot both pass on the same last minutes of a budget.

A hold ends when its start is recorded (:func:`release`, right after the record: a concurrent check then sees
the spawn held or recorded, both for an instant, never neither), when its spawn fails or is cancelled, or at
its ``expires``: a hub that died while it held leaves holds that count until then and are swept by the next
check. A spawn that waits longer than its hold was taken for moves ``expires`` on (:func:`refresh`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol, TypeVar

from sqlalchemy import and_, delete, not_, select, text
from sqlalchemy.dialects import postgresql, sqlite

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import SpawnHold

T = TypeVar("T")

#: The advisory lock key of the spawn check on PostgreSQL (any constant other than the ledger's other locks).
_HOLD_KEY = 0x6770_7573_686F


class Spawn(Protocol):
    """What a hold keeps of its spawn: whose, which group pays, its rate and GPUs (its first minutes' cost)."""

    user: str
    pool: str | None
    rate_micros: int
    gpu_count: int


def held(ledger, now: datetime, besides: str | None = None) -> list[SpawnHold]:
    """The holds of every hub that have not expired at ``now``, except the ledger's hub's hold of ``besides``."""
    with ledger.Session() as db:
        return _live(db, ledger.hub, besides, now)


def check_and_hold(
    ledger, key: str, spawn: Spawn, check: Callable[[list[SpawnHold]], T | None], now: datetime, expires: datetime
) -> T | None:
    """``check(the other holds)``; when it returns None, ``spawn`` holds ``key`` on the ledger's hub until
    ``expires``. One step for every hub of the ledger (blocking: run in a thread).

    ``check`` is given every live hold but this server's own (a check again after a wait replaces its own hold)
    and runs while no other check can read or write the holds; it reads the sessions itself, after the holds: a
    start recorded meanwhile dropped its hold only after its record, so it is seen one way or the other. What it
    returns (a refusal) is returned, and nothing is held. Expired holds of every hub are swept first.
    """
    with ledger.Session() as db:
        _one_at_a_time(db)
        db.execute(delete(SpawnHold).where(SpawnHold.expires <= naive_utc(now)))
        answer = check(_live(db, ledger.hub, key, now))
        if answer is None:
            db.execute(_upsert(db, ledger.hub, key, spawn, now, expires))
        db.commit()
    return answer


def refresh(ledger, key: str, spawn: Spawn, now: datetime, expires: datetime) -> None:
    """Hold ``key`` on the ledger's hub until ``expires`` (again, if it had expired meanwhile), with no check."""
    with ledger.Session() as db:
        db.execute(_upsert(db, ledger.hub, key, spawn, now, expires))
        db.commit()


def release(ledger, key: str) -> bool:
    """End the ledger's hub's hold of ``key`` (its start is recorded, or it failed); False if it held nothing."""
    with ledger.Session() as db:
        gone = db.execute(delete(SpawnHold).where(SpawnHold.hub == ledger.hub, SpawnHold.key == key)).rowcount
        db.commit()
    return bool(gone)


def release_all(ledger) -> int:
    """End every hold of the ledger's hub, at the hub's start: no spawn of it is in flight then, and a hold its
    previous process left (killed during a spawn) would otherwise refuse its users until it expires."""
    with ledger.Session() as db:
        gone = db.execute(delete(SpawnHold).where(SpawnHold.hub == ledger.hub)).rowcount
        db.commit()
    return gone


def _one_at_a_time(db) -> None:
    """Open ``db``'s transaction so that no other spawn check runs until it ends (commit or rollback)."""
    connection = db.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _HOLD_KEY})
    elif connection.dialect.name == "sqlite":
        # the file's write lock from the start, not at the first write: a read before it would see what another
        # check, committing in between, no longer holds (waits out the busy timeout for another writer)
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _live(db, hub: str, key: str | None, now: datetime) -> list[SpawnHold]:
    query = select(SpawnHold).where(SpawnHold.expires > naive_utc(now))
    if key is not None:
        query = query.where(not_(and_(SpawnHold.hub == hub, SpawnHold.key == key)))
    return list(db.scalars(query.order_by(SpawnHold.created, SpawnHold.hub, SpawnHold.key)))


def _upsert(db, hub: str, key: str, spawn: Spawn, now: datetime, expires: datetime):
    """The INSERT of a hold that replaces this hub's hold of ``key`` if there is one (keeping when it began)."""
    dialect = postgresql if db.get_bind().dialect.name == "postgresql" else sqlite
    facts = {
        "user": spawn.user,
        "pool": spawn.pool,
        "rate_micros": spawn.rate_micros,
        "gpu_count": spawn.gpu_count,
        "expires": naive_utc(expires),
    }
    insert = dialect.insert(SpawnHold).values(hub=hub, key=key, created=naive_utc(now), **facts)
    return insert.on_conflict_do_update(index_elements=[SpawnHold.hub, SpawnHold.key], set_=facts)
