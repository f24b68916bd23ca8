"""What every pass of the tick reads (:class:`TickContext`, frozen) and what the tick keeps between passes.

The service builds one :class:`TickContext` at its start, as it builds one
:class:`~jupyterhub_gpu.service.web.context.WebContext` for the handlers; each
pass takes it and the moment it runs at (``ctx, now``), so a test drives a pass
with any clock. What changes from one tick to the next (the schedule's
follow-up, the reconciler's missing sessions, the tick's health) lives in
:class:`TickState`, apart from the context.

The service runs the tick on a thread and event loop of its own (:mod:`.thread`), apart from the requests
(samples every 30 s from each server); its writes go through the ledger's one writer
(:meth:`TickContext.write`), each a short transaction in turn with the requests' writes. A pass over a
thousand sessions takes a second of CPU, so each pass still lets its loop run what else waits there (its
notices) at least every :data:`LOOP_SLICE` (:class:`LoopSlice`), and reads the sessions' samples a chunk at
a time (:data:`CHUNK`, one query each) instead of once per session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TypeVar
from zoneinfo import ZoneInfo

from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.schedule import StopOrder
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.ledger.writer import LedgerWriter
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.notify import Notifier

#: The longest stretch a pass of the tick holds the event loop before the requests that wait get their turn
#: (a request that lands in the tick waits at most this long more).
LOOP_SLICE = 0.02
#: Sessions whose samples one query reads (culling, advice): a few hundred bound ids at most.
CHUNK = 100

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class TickContext:
    """The ledger, the hub, the gateway and the settings every pass of the tick reads; built once.

    Only ``ledger`` is required: a pass that needs the hub, the currency or a
    setting the test leaves out gets the default the service's own default
    configuration gives (no notices on other channels than the Lab's, no
    culling rules, default advice).
    """

    ledger: Ledger
    #: The one hub client (stops, starts, the active servers); None for the passes that need none (advice).
    hub: HubClient | None = None
    #: The one gateway for notices; None: one of its own on ``ledger`` with the default alert settings.
    notifier: Notifier | None = None
    #: The lab's time zone: budget periods, the times a notice names.
    tz: ZoneInfo = timezone.utc
    #: The lab's currency; None: notices name no price (and no bigger profile to move to).
    currency: Currency | None = None
    #: The budget percentages that send a warning (``c.Budgets.alert_thresholds``); 100 always does.
    alert_thresholds: tuple[int, ...] = (80, 95)
    #: Between the 100% notice and the stop of an over-budget server (``c.Budgets.grace_seconds``).
    budget_grace: timedelta = timedelta(minutes=5)
    #: The channels alerts and run notices go out on (the gateway's, in the service); a threshold sent on all
    #: of them is skipped. None: every alert goes to ``notify``.
    alert_channels: tuple[str, ...] | None = ("lab",)
    #: The parsed cull rules (:func:`~jupyterhub_gpu.rules.cullrules.parse_config`); empty: the defaults.
    cull_rules: dict = field(default_factory=dict)
    #: Right-sizing advice's settings (``c.Advice``).
    advice_settings: AdviceSettings = field(default_factory=AdviceSettings)
    #: The day of the weekly digest (0 Monday .. 6 Sunday; ``c.Advice.digest_weekday``); None: no digest.
    digest_weekday: int | None = None
    #: The local hour the weekly digest is sent at (``c.Advice.digest_hour``).
    digest_hour: int = 8
    #: Between reconciliations with the hub (``c.GPUService.reconcile_interval``): listing its servers costs it.
    reconcile_interval: timedelta = timedelta(minutes=10)
    #: Class reservations kept by Kueue: ``await kueue_quota(bookings, now)`` moves ClusterQueue quota for the
    #: windows in force (:class:`jupyterhub_gpu.service.kueue.QuotaMover`); None: no Kueue reservations.
    kueue_quota: Callable[[list, datetime], Awaitable[list[str]]] | None = None
    #: The ledger's one writer, which the passes' writes go through (:meth:`write`); None: they write at once.
    writer: LedgerWriter | None = None

    def __post_init__(self):
        if self.notifier is None:
            object.__setattr__(self, "notifier", Notifier(self.ledger))

    async def write(self, write: Callable[..., T], *args, **kwargs) -> T:
        """``write(ledger, *args, **kwargs)``'s result: run by the ledger's writer in its turn (waiting for room
        when the requests fill its queue), or at once where the context has no writer (tests, the CLI)."""
        if self.writer is None:
            return write(self.ledger, *args, **kwargs)
        return await self.writer.call_when_free(write, *args, **kwargs)


@dataclass
class TickHealth:
    """How the service's ticks went since it started, for ``/metrics``: counts by outcome and the last good one.

    A tick is ``ok`` when every part of it (reconciliation, budgets, culling, schedule, jobs, run notices, advice) ran
    without an error, else ``failed``; ``last_ok`` is the Unix time of the last ``ok`` one, ``started`` the
    service's start.
    """

    interval: float = 0.0
    started: float = field(default_factory=time.time)
    ok: int = 0
    failed: int = 0
    last_ok: float | None = None

    def record(self, ok: bool, at: float) -> None:
        if ok:
            self.ok += 1
            self.last_ok = at
        else:
            self.failed += 1


@dataclass
class ScheduleFollow:
    """What :func:`.scheduling.enforce_schedule` keeps between ticks: the preemptions it carried out whose
    sessions have not closed yet (by session id), to put them back in the queue once they have.

    A restarted service reads them again from the ledger's preemption records (``loaded``); each is resumed once
    whatever the restarts (its claim in ``gpu_alerts``).
    """

    waiting: dict[str, StopOrder] = field(default_factory=dict)
    loaded: bool = False


@dataclass
class TickState:
    """What the service's tick keeps from one tick to the next (the context holds what it only reads)."""

    #: The preemptions carried out whose sessions have not closed yet (read from the ledger at the first tick).
    follow: ScheduleFollow = field(default_factory=ScheduleFollow)
    #: The sessions missing from the hub's last listing, and since when (:class:`.reconcile.Reconciler`).
    missing: dict[str, datetime] = field(default_factory=dict)
    #: When the hub's servers were last listed; None: at the next tick.
    last_reconcile: datetime | None = None
    ticks: int = 0
    health: TickHealth = field(default_factory=TickHealth)


@dataclass
class TickResult:
    users_checked: int = 0
    alerts: list[tuple[str, str, int]] = field(default_factory=list)
    stopped: list[tuple[str, str]] = field(default_factory=list)


class LoopSlice:
    """Awaited between the steps of a pass: gives the event loop a turn once the pass has held it ``seconds``.

    The pass goes on with what it read (a session's state read before the turn is
    judged as read, as it was across the awaits of notices and stops before).
    """

    def __init__(self, seconds: float | None = None):
        self.seconds = LOOP_SLICE if seconds is None else seconds
        self.since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self.since >= self.seconds:
            await asyncio.sleep(0)
            self.since = time.perf_counter()


def chunks(items: list, size: int = CHUNK) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


async def open_session_pages(ledger: Ledger, pause: LoopSlice) -> AsyncIterator[list[SessionRecord]]:
    """The open sessions of the ledger's hub (this service's: another hub's are its service's to meter, cull
    and stop), a page of :data:`CHUNK` at a time (in id order), the loop's turn before each page.

    Each page is read when it is reached: a session that opens or closes during the pass is judged as the
    page that holds it finds it (as by a pass that began a moment earlier or later).
    """
    after = None
    while True:
        await pause()
        page = ledger.open_sessions(after=after, limit=CHUNK, hub=ledger.hub)
        if not page:
            return
        yield page
        if len(page) < CHUNK:
            return
        after = page[-1].id
