"""The hubs that share one ledger: each hub process and gpu service says who it is, and keeps saying it.

:class:`HubBook` is a part of :class:`~jupyterhub_gpu.ledger.store.Ledger`. A hub's spawners (role ``hub``) and
its gpu service (role ``service``) each write a :class:`~jupyterhub_gpu.ledger.models.HubMember` row when they
open the ledger: the hub name they write and scope by, the host and process, the hub API URL they belong to; the
service refreshes its heartbeat every tick. The doctor reads them (:func:`hub_name_problems`): two hubs (two hub
API URLs) alive under one name would meter, cull and stop each other's servers, and a service whose hub records
its sessions under another name meters none of them.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.exc import SQLAlchemyError

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import HubMember, SessionRecord

log = logging.getLogger("jupyterhub_gpu.ledger")

#: A member whose heartbeat is older than this is taken for gone (a service beats every tick, 30 s by default;
#: a hub process writes its row at start, and is alive while its service beats).
ALIVE = timedelta(minutes=10)
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

    def where(self) -> str:
        return f"{self.role} pid {self.pid} on {self.host}" + (f" (hub API {self.api_url})" if self.api_url else "")


class HubBook:
    """Who shares the ledger (a part of the ``Ledger``, whose ``hub`` is the name this process writes under)."""

    member_id: str | None = None

    def announce(self, role: str, api_url: str, now: datetime, version: str = "") -> str:
        """Write this process's row (``role`` ``hub`` or ``service``) under the ledger's hub name; its id."""
        if role not in ("hub", "service"):
            raise ValueError(f"a hub member's role is 'hub' or 'service', got {role!r}")
        member = uuid.uuid4().hex
        moment = naive_utc(now)
        with self.Session() as db:
            db.execute(delete(HubMember).where(HubMember.heartbeat < naive_utc(now - FORGOTTEN)))
            db.add(
                HubMember(
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
            )
            db.commit()
        self.member_id = member
        return member

    def heartbeat(self, now: datetime) -> None:
        """Keep this process's row fresh (nothing before :meth:`announce`)."""
        if self.member_id is None:
            return
        with self.Session() as db:
            db.execute(update(HubMember).where(HubMember.id == self.member_id).values(heartbeat=naive_utc(now)))
            db.commit()

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

    def hub_members(self) -> list[Member]:
        with self.Session() as db:
            rows = db.scalars(select(HubMember).order_by(HubMember.hub, HubMember.role, HubMember.started))
            return [Member.of(r) for r in rows]

    def hub_names(self) -> list[str]:
        """Every hub name of the ledger's sessions and members, in name order."""
        with self.Session() as db:
            names = set(db.scalars(select(SessionRecord.hub).distinct()))
        return sorted(names | {m.hub for m in self.hub_members()})


def _url(url: str) -> str:
    return url.rstrip("/")


def hub_name_problems(members: list[Member], now: datetime, alive: timedelta = ALIVE) -> list[str]:
    """What is wrong with the hub names of the members alive at ``now`` (empty: nothing).

    - two hubs under one name: the members of one hub name belong to more than one hub API URL;
    - a service without its hub: a gpu service's hub name that no hub process alive writes its sessions under,
      while a hub with the service's own hub API URL writes under another name.
    """
    live = [m for m in members if now - m.heartbeat <= alive]
    problems = []
    by_hub: dict[str, dict[str, list[Member]]] = {}
    for m in live:
        if m.api_url:
            by_hub.setdefault(m.hub, {}).setdefault(_url(m.api_url), []).append(m)
    for hub, urls in sorted(by_hub.items()):
        if len(urls) > 1:
            parts = "; ".join(f"{url}: {', '.join(m.where() for m in ms)}" for url, ms in sorted(urls.items()))
            problems.append(
                f"two hubs run under the hub name {hub!r} on this ledger ({parts}): each one's gpu service would"
                f" meter, cull and stop the other's servers; give each hub its own name (c.GPUService.hub_name and"
                f" the spawner's hub_name, the same on both sides of one hub)"
            )
    hub_names = {m.hub for m in live if m.role == "hub"}
    for service in (m for m in live if m.role == "service"):
        if service.hub in hub_names:
            continue
        others = sorted(
            {m.hub for m in live if m.role == "hub" and m.api_url and _url(m.api_url) == _url(service.api_url)}
        )
        if others:
            problems.append(
                f"the gpu service of the hub at {service.api_url} ({service.where()}) has c.GPUService.hub_name"
                f" {service.hub!r}, but that hub's spawners record sessions as {', '.join(map(repr, others))}: the"
                f" service meters none of them; set the same hub_name on both sides"
            )
    return problems
