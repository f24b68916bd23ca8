"""The hubs that share one ledger: each hub process and gpu service says who it is, and keeps saying it.

:class:`HubBook` is a part of :class:`~jupyterhub_gpu.ledger.store.Ledger`. A hub's spawners (role ``hub``) and
its gpu service (role ``service``) each write a :class:`~jupyterhub_gpu.ledger.models.HubMember` row when they
open the ledger: the hub name they write and scope by, the host and process, the hub API URL they belong to; the
hub process refreshes its heartbeat every :data:`HUB_BEAT`, the service every tick.

A hub API URL does not tell two hubs apart (every Zero to JupyterHub release has ``http://hub:8081/hub/api``, every
default local hub ``http://127.0.0.1:8081/hub/api``), so each hub has an identity of its own
(:func:`hub_identity`, from its cookie secret: another for each hub, the same at each of its starts), which it
passes to its managed services in :data:`jupyterhub_gpu.env.HUB_ID`. A member of a known identity has the row
``<role>:<identity>`` (a restarted hub or service takes over its row); one of no known identity (an unmanaged
service, an older version) a row of its own process. The doctor reads them (:func:`hub_name_problems`): two hubs
running at once under one name would meter, cull and stop each other's servers, and a service whose hub records
its sessions under another name meters none of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import HubMember, SessionRecord

log = logging.getLogger("jupyterhub_gpu.ledger")

#: A member whose heartbeat is older than this is taken for gone (a service beats every tick, 30 s by default;
#: a hub process every :data:`HUB_BEAT`).
ALIVE = timedelta(minutes=10)
#: How often a running hub process refreshes its row.
HUB_BEAT = timedelta(minutes=1)
_IDENTITY = re.compile(r"[0-9a-f]{24}")
_SALT = b"jupyterhub-gpu hub identity"


def hub_identity(cookie_secret: bytes | str | None) -> str | None:
    """The identity of the hub whose cookie secret this is (24 hex digits), or None without one.

    JupyterHub keeps its cookie secret, which signs its users' logins, across restarts (the
    ``jupyterhub_cookie_secret`` file, ``JPY_COOKIE_SECRET``, or Zero to JupyterHub's hub Secret), and each hub
    makes its own: the identity is the same at each start of one hub and another for each hub. It is derived
    with PBKDF2, so the ledger's readers learn nothing of the secret.
    """
    if not cookie_secret:
        return None
    secret = cookie_secret.encode() if isinstance(cookie_secret, str) else bytes(cookie_secret)
    return hashlib.pbkdf2_hmac("sha256", secret, _SALT, 100_000).hex()[:24]


def valid_identity(value) -> str | None:
    """``value`` if it is a hub identity as :func:`hub_identity` makes them, else None."""
    return value if isinstance(value, str) and _IDENTITY.fullmatch(value) else None


#: Rows of members gone this long are deleted when a new member announces itself.
FORGOTTEN = timedelta(days=7)


@dataclass(frozen=True)
class Member:
    """A hub process or gpu service on the ledger, as its row says."""

    id: str
    hub: str
    role: str
    host: str
    pid: int
    api_url: str
    version: str
    started: datetime
    heartbeat: datetime

    @classmethod
    def of(cls, row: HubMember) -> Member:
        return cls(
            id=row.id,
            hub=row.hub,
            role=row.role,
            host=row.host,
            pid=row.pid,
            api_url=row.api_url or "",
            version=row.version or "",
            started=aware_utc(row.started),
            heartbeat=aware_utc(row.heartbeat),
        )

    @property
    def identity(self) -> str | None:
        """The identity of the hub this member belongs to, where its row says it (``<role>:<identity>``)."""
        role, sep, identity = self.id.partition(":")
        return valid_identity(identity) if sep and role == self.role else None

    def where(self) -> str:
        return f"{self.role} pid {self.pid} on {self.host}" + (f" (hub API {self.api_url})" if self.api_url else "")


class HubBook:
    """Who shares the ledger (a part of the ``Ledger``, whose ``hub`` is the name this process writes under)."""

    member_id: str | None = None
    _member: dict | None = None  # this process's row, written again by a heartbeat that finds it gone

    def announce(self, role: str, api_url: str, now: datetime, version: str = "", identity: str | None = None) -> str:
        """Write this process's row (``role`` ``hub`` or ``service``) under the ledger's hub name; its id.

        ``identity`` is the identity of the hub it belongs to (:func:`hub_identity`): the row is then
        ``<role>:<identity>``, which a restart of the same hub or service takes over; without one the row is
        this process's own.
        """
        if role not in ("hub", "service"):
            raise ValueError(f"a hub member's role is 'hub' or 'service', got {role!r}")
        if identity is not None and valid_identity(identity) is None:
            raise ValueError(f"a hub's identity is 24 hexadecimal digits, got {identity!r}")
        member = f"{role}:{identity}" if identity else uuid.uuid4().hex
        moment = naive_utc(now)
        self._member = dict(
            id=member,
            hub=self.hub,
            role=role,
            host=socket.gethostname()[:255],
            pid=os.getpid(),
            api_url=(api_url or "")[:1024],
            version=(version or "")[:64],
            started=moment,
            heartbeat=moment,
        )
        with self.Session() as db:
            db.execute(delete(HubMember).where(HubMember.heartbeat < naive_utc(now - FORGOTTEN)))
            db.commit()
        self._write_member()
        self.member_id = member
        return member

    def _write_member(self, **changes) -> None:
        """Write this process's row over the one of its id (a previous start's, or one withdrawn meanwhile)."""
        row = {**self._member, **changes}
        for attempt in (1, 2):
            try:
                with self.Session() as db:
                    db.merge(HubMember(**row))
                    db.commit()
                return
            except IntegrityError:  # written at once by another process of the same id: the second try updates
                if attempt == 2:
                    raise

    def heartbeat(self, now: datetime) -> None:
        """Keep this process's row fresh (nothing before :meth:`announce`); write it again if it was removed."""
        if self.member_id is None:
            return
        with self.Session() as db:
            result = db.execute(
                update(HubMember).where(HubMember.id == self.member_id).values(heartbeat=naive_utc(now))
            )
            db.commit()
        if result.rowcount == 0 and self._member is not None:
            # a previous instance of this hub or service withdrew the row they share on its way out
            self._write_member(heartbeat=naive_utc(now))

    def withdraw(self) -> None:
        """Remove this process's row (a clean stop: the doctor no longer counts it)."""
        if self.member_id is None:
            return
        try:
            with self.Session() as db:
                db.execute(delete(HubMember).where(HubMember.id == self.member_id))
                db.commit()
        except SQLAlchemyError as e:  # stopping all the same: the row ages out (ALIVE)
            log.warning("could not remove this process from the ledger's hub members: %s", e)
        self.member_id = None
        self._member = None

    def hub_members(self) -> list[Member]:
        with self.Session() as db:
            rows = db.scalars(select(HubMember).order_by(HubMember.hub, HubMember.role, HubMember.started))
            return [Member.of(r) for r in rows]

    def hub_names(self) -> list[str]:
        """Every hub name of the ledger's sessions and members, in name order."""
        with self.Session() as db:
            names = set(db.scalars(select(SessionRecord.hub).distinct()))
        return sorted(names | {m.hub for m in self.hub_members()})

    async def keep_beating(self, every: timedelta, clock: Callable[[], datetime]) -> None:
        """Refresh this process's row every ``every`` until cancelled, off the event loop's thread.

        The hub process runs it on its loop. A failed write is logged and tried at the next beat; a problem of the
        hub names that concerns this hub (another hub running under its name) is logged once.
        """
        told: set[str] = set()
        while True:
            await asyncio.sleep(every.total_seconds())
            try:
                now = clock()
                members = await asyncio.to_thread(self._beat_and_read, now)
            except Exception as e:
                log.warning("could not note this hub's heartbeat in the ledger: %s", e)
                continue
            for problem in hub_name_problems(members, now, hub=self.hub):
                if problem not in told:
                    told.add(problem)
                    log.error("jupyterhub-gpu: %s", problem)

    def _beat_and_read(self, now: datetime) -> list[Member]:
        self.heartbeat(now)
        return self.hub_members()


def _url(url: str) -> str:
    return url.rstrip("/")


def _at_once(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> bool:
    """Whether two spans (started, last heartbeat) overlap: a restart's new process starts after the old one's
    last heartbeat, two hubs running at once beat after each other's starts."""
    return max(a[0], b[0]) <= min(a[1], b[1])


def _span(members: list[Member]) -> tuple[datetime, datetime]:
    return min(m.started for m in members), max(m.heartbeat for m in members)


def _short(identity: str) -> str:
    return identity[:8]


_FIX = (
    "give each hub its own name (c.GPUService.hub_name and the spawner's hub_name, the same on both sides of one hub)"
)


def hub_name_problems(
    members: list[Member], now: datetime, alive: timedelta = ALIVE, hub: str | None = None
) -> list[str]:
    """What is wrong with the hub names of the members alive at ``now`` (empty: nothing); ``hub``: only what
    concerns that hub name.

    - two hubs under one name: members of one hub name that belong to two hubs (two identities, or, for members of
      no known identity, two hub API URLs) and ran at once (a restarted hub is not two: its new process started
      after its old one's last heartbeat);
    - a service without its hub: a gpu service's hub name that no hub process alive writes its sessions under,
      while its own hub (by identity, or else by hub API URL) writes under another name.
    """
    live = [m for m in members if now - m.heartbeat <= alive]
    problems = []
    for name in sorted({m.hub for m in live}):
        if hub is not None and name != hub:
            continue
        problems += _two_hubs(name, [m for m in live if m.hub == name])
    hub_names = {m.hub for m in live if m.role == "hub"}
    for service in (m for m in live if m.role == "service"):
        if hub is not None and service.hub != hub:
            continue
        if service.identity:  # its own hub is known: wherever it runs
            own = [m for m in live if m.role == "hub" and m.identity == service.identity]
        elif service.hub not in hub_names:  # else the hub of its hub API URL, when none runs under its name
            own = [m for m in live if m.role == "hub" and m.api_url and _url(m.api_url) == _url(service.api_url)]
        else:
            continue
        if any(m.hub == service.hub for m in own):
            continue
        others = sorted({m.hub for m in own})
        if others:
            problems.append(
                f"the gpu service of the hub at {service.api_url} ({service.where()}) has c.GPUService.hub_name"
                f" {service.hub!r}, but that hub's spawners record sessions as {', '.join(map(repr, others))}: the"
                f" service meters none of them; set the same hub_name on both sides"
            )
    return problems


def _one_hub(identity: str, members: list[Member]) -> str:
    """``hub 1f0c9a3e: hub pid 7 on hub-5d8f, service pid 31 on hub-5d8f (hub API http://hub:8081/hub/api)``"""
    urls = sorted({_url(m.api_url) for m in members if m.api_url})
    where = ", ".join(f"{m.role} pid {m.pid} on {m.host}" for m in members)
    alone = [] if any(m.role == "hub" for m in members) else ["its hub process is not running under this name"]
    notes = ([f"hub API {', '.join(urls)}"] if urls else []) + alone
    return f"hub {_short(identity)}: {where}" + (f" ({'; '.join(notes)})" if notes else "")


def _two_hubs(name: str, members: list[Member]) -> list[str]:
    """Two hubs running at once under the hub name ``name`` (its live members): the problem, or nothing."""
    by_identity: dict[str, list[Member]] = {}
    for m in members:
        if m.identity:
            by_identity.setdefault(m.identity, []).append(m)
    identities = sorted(by_identity)
    together = {
        i for i in identities for j in identities if i != j and _at_once(_span(by_identity[i]), _span(by_identity[j]))
    }
    if together:
        parts = "; ".join(_one_hub(i, by_identity[i]) for i in identities if i in together)
        return [
            f"two hubs run under the hub name {name!r} on this ledger ({parts}): each one's gpu service would meter,"
            f" cull and stop the other's servers; {_FIX}"
        ]
    # members of no known identity (an unmanaged service, an older version): told apart by their hub API URLs
    unknown = [m for m in members if m.api_url and not m.identity]
    urled = [m for m in members if m.api_url]
    clash = [
        (a, b)
        for a in unknown
        for b in urled
        if _url(a.api_url) != _url(b.api_url) and _at_once((a.started, a.heartbeat), (b.started, b.heartbeat))
    ]
    if not clash:
        return []
    urls: dict[str, list[Member]] = {}
    for m in {id(m): m for pair in clash for m in pair}.values():
        urls.setdefault(_url(m.api_url), []).append(m)
    parts = "; ".join(f"{url}: {', '.join(m.where() for m in ms)}" for url, ms in sorted(urls.items()))
    return [
        f"two hubs run under the hub name {name!r} on this ledger ({parts}): each one's gpu service would meter,"
        f" cull and stop the other's servers; {_FIX}"
    ]
