"""The hub's wait queue run by the lab's scheduler (docs/scheduling.md).

A :class:`Planner` sits beside a :class:`.queue.FairQueue`. Each cycle it describes the pool in a
:class:`jupyterhub_gpu.scheduler.Snapshot`: the waiting requests (from the queue), the free and total units of
each model (from the allocator), the running sessions (the ledger's open sessions the allocator holds GPUs for),
the groups' shares and decayed use, the reservations, the stop orders already given and the profiles' past session
lengths (the ledger, read in the background at most every ``refresh`` seconds, and at each arrival when older).
:func:`~jupyterhub_gpu.scheduler.schedule` says what to do, and the queue does it:

- ``grant``: the queue grants exactly those requests, in that order, when the allocator has their units;
- ``queue``: each waiting request gets its place (the queue is reordered), why, and the estimate; the spawn page
  shows them, and the queue is published to the ledger for ``GET queue``;
- ``preempt`` and ``end``: a stop order in the ledger (``gpu_schedule_orders``); the gpu service sends the notice
  (JupyterLab, mail, webhook) and stops the server at its time with the reason ``preempted`` or ``reserved``.
  Orders are derived again every cycle: one the cycle no longer gives (nor one as early) is withdrawn while it is
  not due, and the service tells its user the stop is off; a grant's "may run until" becomes an order when its
  session is recorded, or, no longer needed by then, an order withdrawn at once (its user is told it is off).

Units are the devices' own (docs/scheduling.md#units): on a host a share is one of k shares of a physical GPU of
the profile's model, in one pool with the model's whole GPUs; a MIG slice is a model of its own
(``"A100/mig-1g.10gb"``); on a cluster, whose shares are replicas of time-sliced nodes' GPUs, a share is a model of
its own too (``"T4/share-4"``). A share's use counts 1/k GPU-hour an hour.

The cycle itself is pure and runs on the hub's event loop without waiting: nothing can change between reading the
allocator and granting. The ledger is written by one thread in order, so a later write never loses to an
earlier one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo

from jupyterhub_gpu import scheduler
from jupyterhub_gpu.clock import aware_utc, utcnow
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.scheduler import (
    END,
    PREEMPT,
    PREEMPTIBLE,
    STANDARD,
    Decision,
    Policy,
    Request,
    Reservation,
    Running,
    SessionLengths,
    SharedGPU,
    Snapshot,
)

log = logging.getLogger("jupyterhub_gpu.scheduler")

#: How far back the history of session lengths reaches, and how many lengths per profile are kept.
HISTORY = timedelta(days=30)
HISTORY_LENGTHS = 500
#: How far back a session's last GPU use is looked for.
GPU_USE_SINCE = timedelta(hours=2)
#: How old the decayed use and the session lengths may be (they change slowly; reading 30 days of sessions at
#: every cycle would load a big ledger for nothing).
SLOW_REFRESH = timedelta(seconds=60)
#: An order due within this is never withdrawn: the service may be stopping its server already.
WITHDRAW_MARGIN = timedelta(seconds=5)


@dataclass(frozen=True)
class Ask:
    """What the scheduler knows of one waiting spawn: who, for which group's share, which profile and tier."""

    user: str
    server_name: str
    group: str
    groups: tuple[str, ...]
    profile: str
    tier: str
    arrived: datetime
    unit: str = ""  # "" for whole GPUs; "share-4" or "mig-1g.10gb" for a share or a MIG slice of the model


@dataclass(frozen=True)
class ProfileFacts:
    """A profile as the planner needs it: its model and unit (a session's tier is its own, in the ledger)."""

    model: str
    unit: str = ""


@dataclass
class LedgerView:
    """What the planner last read of the ledger."""

    read_at: datetime | None = None
    slow_at: datetime | None = None  # when the decayed use and the session lengths were read
    shares: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    reservations: list[Reservation] = field(default_factory=list)
    history: dict[str, SessionLengths] = field(default_factory=dict)
    open: dict = field(default_factory=dict)  # "user/server" -> the ledger's open SessionRecord
    orders: dict = field(default_factory=dict)  # session id -> (stop_at, kind)
    last_use: dict = field(default_factory=dict)  # session id -> datetime


def unit_of(share: int | None, mig: str | None) -> str:
    return f"share-{share}" if share else f"mig-{mig}" if mig else ""


def waiter_unit(waiter, ask: Ask) -> str:
    """The unit a waiting request asks for: its Ask's, else the host allocator's claim (share or MIG slice)."""
    claim = waiter.claim
    return ask.unit or unit_of(getattr(claim, "share", None), getattr(claim, "mig", None))


def share_of(unit: str) -> int:
    """k of a unit "share-k"; 1 for anything else."""
    return int(unit.split("-", 1)[1]) if unit.startswith("share-") else 1


def model_key(model: str, unit: str, shares_pooled: bool = True) -> tuple[str, int]:
    """The model the scheduler counts a unit in, and the share of one of its GPUs the unit is (k; 1: whole).

    A share on a host is one of k shares of a GPU of the model itself ("T4", 4): whole GPUs and shares are one
    pool. A MIG slice is a GPU of its own ("A100/mig-1g.10gb", 1); so is a cluster's share, a replica of a
    time-sliced node's GPU ("T4/share-4", 1), whose nodes hold no whole GPU.
    """
    k = share_of(unit)
    if not unit or (k > 1 and shares_pooled):
        return model, k
    return f"{model}/{unit}", 1


@dataclass
class Granted:
    """A request granted by this planner whose session the ledger does not have yet (its server is starting)."""

    key: str
    ask: Ask
    model: str
    count: int
    share: int
    at: datetime
    decision: Decision


class Planner:
    """Runs the scheduler over one queue (see the module's doc)."""

    def __init__(
        self,
        ledger,
        policy: Policy,
        tz: tzinfo,
        *,
        refresh: float = 5.0,
        counts: Callable[[str, str], tuple[int, int]] | None = None,
    ):
        self.ledger = ledger
        self.policy = policy
        self.tz = tz
        self.refresh = refresh
        self.view = LedgerView()
        self.profiles: dict[str, ProfileFacts] = {}
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jhgpu-schedule")
        self._reading: asyncio.Task | None = None
        self._loop_task: asyncio.Task | None = None
        self._published: list | None = None
        self._pending: set = set()
        self.counts = counts
        # set by the queue (use_planner): the GPUs split into shares, where a key's share is, how shares count
        self.split_gpus: Callable[[str], list[tuple[str, int, int]]] = lambda model: []
        self.placement: Callable[[str], tuple[str, int] | None] = lambda key: None
        self.shares_pooled = True
        self._read_all = False
        self._withdrawn: set[str] = set()  # withdrawn here, perhaps not yet in the ledger
        self._granted: dict[str, Granted] = {}  # key -> a grant whose session is not recorded yet

    def key_of(self, model: str, unit: str) -> tuple[str, int]:
        """The scheduler's model and share for a profile's model and unit (:func:`model_key`)."""
        return model_key(model, unit, self.shares_pooled)

    # -- what the spawners tell it ------------------------------------------------------------------------------
    def note_profiles(self, profiles: Mapping[str, ProfileFacts]) -> None:
        """The profiles of the hub (slug -> facts), as a spawner read them; sessions are counted by them."""
        self.profiles.update(profiles)

    def default_ask(self, key: str, model: str) -> Ask:
        """What the planner assumes of a request no spawner described: its own user, no group, full price."""
        user, _, server = key.partition("/")
        return Ask(user, server, "", (), "", STANDARD, utcnow())

    # -- reading the ledger -------------------------------------------------------------------------------------
    def _read(self, now: datetime) -> LedgerView:
        """Blocking: one read of everything a cycle needs (run in a thread).

        The open sessions, stop orders, GPU use, shares and reservations are read each time; the decayed use and
        the session lengths (the past 30 days of sessions) at most every :data:`SLOW_REFRESH` (:meth:`fresh` with
        ``max_age=0`` reads them too).
        """
        view = LedgerView(read_at=now)
        old = self.view
        if old.slow_at is not None and (now - old.slow_at) < SLOW_REFRESH and not self._read_all:
            view.slow_at, view.usage, view.history = old.slow_at, old.usage, old.history
        else:
            self._read_slow(view, now)
        view.shares = rows.share_table(self.ledger)
        view.reservations = [
            Reservation(
                id=str(r.id),
                group=r.group,
                model=r.gpu_model,
                count=r.count,
                start=r.start,
                end=r.end,
                weekly_until=r.weekly_until,
                label=r.note,
            )
            for r in rows.reservations(self.ledger, self.tz)
        ]
        opened = self.ledger.open_sessions(hub=self.ledger.hub)  # this hub's GPUs: its own sessions
        view.open = {f"{s.user}/{s.server_name}": s for s in opened}
        view.orders = {
            o.session_id: o for o in rows.stop_orders(self.ledger, hub=self.ledger.hub) if o.withdrawn_at is None
        }
        view.last_use = rows.last_gpu_use(self.ledger, [s.id for s in opened], now - GPU_USE_SINCE)
        return view

    def _read_slow(self, view: LedgerView, now: datetime) -> None:
        view.slow_at = now
        order = self.policy.order
        half_life = getattr(order, "half_life", timedelta(days=7))
        since = now - max(HISTORY, 4 * half_life)
        past = rows.sessions_since(self.ledger, since, hub=self.ledger.hub)  # its own GPUs' use
        usage_rows = []
        lengths: dict[str, list[float]] = {}
        for pool, profile, count, started, stopped in past:
            facts = self.profiles.get(profile)
            if facts is not None and pool:
                model, _ = self.key_of(facts.model, facts.unit)
                # a share of one of k is 1/k of a GPU, whatever pool it is counted in
                gpus = count / share_of(facts.unit) if share_of(facts.unit) > 1 else count
                usage_rows.append((pool, model, gpus, started, stopped))
            if stopped is not None and stopped >= now - HISTORY:
                lengths.setdefault(profile, []).append((stopped - started) / timedelta(minutes=1))
        view.usage = scheduler.decayed_usage(usage_rows, now, half_life)
        view.history = {p: SessionLengths(v[-HISTORY_LENGTHS:]) for p, v in lengths.items()}

    async def fresh(self, max_age: float | None = None) -> None:
        """Read the ledger again when the last read is older than ``max_age`` (default: ``refresh``) seconds."""
        age = self.refresh if max_age is None else max_age
        self._read_all = self._read_all or age == 0
        read_at = self.view.read_at
        if read_at is not None and (utcnow() - read_at).total_seconds() < age:
            return
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_now())
        await asyncio.shield(self._reading)

    async def _read_now(self) -> None:
        now = utcnow()
        try:
            view = await asyncio.get_running_loop().run_in_executor(self._writer, self._read, now)
            self._read_all = False
        except Exception:
            log.exception("the scheduler could not read the ledger; it keeps what it read before")
            return
        # orders given since the read began are kept: the ledger may not have had them yet
        for session_id, order in self.view.orders.items():
            if session_id not in view.orders and order.stop_at >= now and session_id not in self._withdrawn:
                view.orders[session_id] = order
        self.view = view

    def start(self, queue) -> None:
        """Run a cycle every ``refresh`` seconds while the hub runs (reservation windows, ageing, preemption)."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.ensure_future(self._loop(queue))

    async def _loop(self, queue) -> None:
        idle_reads = 0
        while True:
            await asyncio.sleep(self.refresh)
            try:
                busy = any(True for _ in queue.waiters()) or self.view.reservations or self.view.orders
                idle_reads += 1
                if not busy and idle_reads * self.refresh < SLOW_REFRESH.total_seconds():
                    continue  # nothing waits, nothing is booked or ordered: read the ledger once a minute only
                idle_reads = 0
                await self.fresh(self.refresh / 2)
                queue._drain()
            except Exception:
                log.exception("scheduling cycle failed")

    # -- one cycle ---------------------------------------------------------------------------------------------
    def granted(self, waiter, decision: Decision) -> None:
        """The queue granted ``waiter`` on ``decision``: it counts as running until its session is recorded."""
        ask: Ask | None = waiter.ask
        if ask is None:
            return
        model, share = self.key_of(waiter.model, waiter_unit(waiter, ask))
        count = 1 if share > 1 else waiter.count
        self._granted[waiter.key] = Granted(waiter.key, ask, model, count, share, utcnow(), decision)

    def _running(self, s, facts: ProfileFacts, key: str, now: datetime) -> Running:
        model, share = self.key_of(facts.model, facts.unit)
        where = self.placement(key) if share > 1 else None
        order = self.view.orders.get(s.id)
        ends = None
        if order is not None and order.stop_at <= now + WITHDRAW_MARGIN:
            ends = order.stop_at  # due, or so nearly that the service may be stopping it: it binds
        groups = tuple(s.group_list)
        return Running(
            id=s.id,
            user=s.user,
            group=s.pool or (groups[0] if groups else ""),
            model=model,
            started=aware_utc(s.started),
            count=1 if share > 1 else s.gpu_count,
            profile=s.profile,
            tier=PREEMPTIBLE if s.tier == PREEMPTIBLE else STANDARD,
            last_gpu_use=self.view.last_use.get(s.id),
            ends=ends,
            checkpoints=s.tier == PREEMPTIBLE,
            groups=groups,
            stop_at=order.stop_at if order else None,
            stop_key=order.kind if order else None,
            share=share,
            device=where[0] if where else None,
        )

    def snapshot(self, waiters, held: Callable[[str], bool], now: datetime) -> Snapshot:
        view = self.view
        waiting = []
        models: set[str] = set()
        for w in waiters:
            ask: Ask | None = w.ask
            if ask is None:
                continue
            model, share = self.key_of(w.model, waiter_unit(w, ask))
            models.add(model)
            waiting.append(
                Request(
                    id=w.key,
                    user=ask.user,
                    group=ask.group,
                    model=model,
                    arrived=ask.arrived,
                    count=1 if share > 1 else w.count,
                    profile=ask.profile,
                    tier=ask.tier,
                    groups=ask.groups,
                    share=share,
                )
            )
        running = []
        for key, s in view.open.items():
            facts = self.profiles.get(s.profile)
            if facts is None or not s.gpu_count or not held(key):
                continue
            session = self._running(s, facts, key, now)
            models.add(session.model)
            running.append(session)
        for key, g in list(self._granted.items()):
            if not held(key):
                del self._granted[key]  # its start failed, or it stopped: nothing was promised to a session
            elif key not in view.open:  # starting: it holds its GPUs, and may be told to end like any session
                where = self.placement(key) if g.share > 1 else None
                models.add(g.model)
                running.append(
                    Running(
                        id=f"grant:{key}", user=g.ask.user, group=g.ask.group, model=g.model, started=g.at,
                        count=g.count, profile=g.ask.profile, tier=g.ask.tier, groups=g.ask.groups, share=g.share,
                        device=where[0] if where else None,
                    )
                )  # fmt: skip
        models |= {r.model for r in view.reservations}
        free, pool, shared = {}, {}, []
        for model in models:
            base, _, unit = model.partition("/")
            free[model], pool[model] = self.counts(base, unit) if self.counts else (0, 0)
            if not unit:
                shared += [SharedGPU(uuid, model, k, taken) for uuid, k, taken in self.split_gpus(base)]
        return Snapshot(
            now=now,
            free=free,
            waiting=waiting,
            running=running,
            pool=pool,
            shares=view.shares,
            usage=view.usage,
            reservations=view.reservations,
            history=view.history,
            tz=self.tz,
            shared=shared,
        )

    def cycle(self, waiters, held: Callable[[str], bool]) -> list[Decision]:
        """The decisions for the queue as it is; stop orders and the published queue are written behind.

        The stop orders are derived again: each session the cycle gives a stop gets it (an earlier one moves the
        order earlier, a later end moves it later); an order not due whose session the cycle gives none is
        withdrawn."""
        now = utcnow()
        waiters = list(waiters)
        snapshot = self.snapshot(waiters, held, now)
        try:
            decisions = scheduler.schedule(snapshot, self.policy)
        except Exception:
            log.exception("the scheduler failed: the queue keeps its order this cycle")
            return []
        given: dict[str, Decision] = {}
        for d in decisions:
            if d.kind in (PREEMPT, END) and d.session and d.at is not None:
                if d.session not in given or d.at < given[d.session].at:
                    given[d.session] = d
        for d in given.values():
            self._order(d, now, snapshot)
        self._promises(given, now, snapshot)
        self._withdraw(given, {s.id for s in snapshot.running}, now)
        return decisions

    def _order(self, decision: Decision, now: datetime, snapshot: Snapshot, told: datetime | None = None) -> None:
        session = next((s for s in self.view.open.values() if s.id == decision.session), None)
        if session is None:
            return
        kind = rows.PREEMPTED if decision.kind == PREEMPT else rows.RESERVED
        known = self.view.orders.get(session.id)
        later = known is not None and known.stop_at < decision.at
        if later and (decision.kind == PREEMPT or known.stop_at <= now + WITHDRAW_MARGIN):
            return  # the earlier stop wins; one that is due stays
        if known is not None and known.stop_at == decision.at and known.kind == kind:
            return
        for_user = None
        if decision.for_request:
            for_user = next((r.user for r in snapshot.waiting if r.id == decision.for_request), None)
            cause = f"request:{decision.for_request}"
        else:
            cause = f"reservation:{decision.reservation}" if decision.reservation else None
        values = dict(decision.values)
        self.view.orders[session.id] = rows.StopOrder(
            session.id, session.user, session.server_name, kind, decision.at, now, decision.key, values, for_user,
            told, None, cause,
        )  # fmt: skip
        self._withdrawn.discard(session.id)
        verb = "moved later to" if later else "at"
        log.info("%s/%s: %s %s %s (%s)", session.user, session.server_name, kind, verb, decision.at, decision.reason)
        self._write(
            rows.order_stop, self.ledger, session, kind, decision.at, decision.key, values, now, for_user, cause,
            later, told,
        )  # fmt: skip

    def _promises(self, given: Mapping[str, Decision], now: datetime, snapshot: Snapshot) -> None:
        """A grant's "may run until", once its session is recorded: an order if the cycle still gives one (done by
        :meth:`_order`); else the promise no longer holds, and its user, who read it, is told the stop is off (an
        order told at the grant and withdrawn at once)."""
        for key, g in list(self._granted.items()):
            session = self.view.open.get(key)
            if session is None:
                continue
            del self._granted[key]
            if g.decision.at is None or session.id in given or g.decision.at <= now + WITHDRAW_MARGIN:
                continue
            promise = replace(g.decision, kind=END, key="end", session=session.id)
            self._order(promise, now, snapshot, told=g.at)
            self._withdraw_one(session.id, now, "no longer needed")

    def _withdraw(self, given: Mapping[str, Decision], seen: set[str], now: datetime) -> None:
        """Withdraw the orders the cycle no longer gives, before their time: the request they served was served
        otherwise or left, the reservation has its GPUs without them or was cancelled. Only sessions the cycle
        saw; a stop that is due (or nearly: it may be under way in the service) stays."""
        for session_id, order in list(self.view.orders.items()):
            if session_id in given or session_id not in seen or order.stop_at <= now + WITHDRAW_MARGIN:
                continue
            self._withdraw_one(session_id, now, "no longer needed")

    def _withdraw_one(self, session_id: str, now: datetime, why: str) -> None:
        order = self.view.orders.pop(session_id, None)
        if order is None:
            return
        self._withdrawn.add(session_id)
        log.info("%s/%s: the %s stop at %s is withdrawn (%s)", order.user, order.server_name, order.kind,
                 order.stop_at, why)  # fmt: skip
        self._write(rows.withdraw_order, self.ledger, session_id, now, now + WITHDRAW_MARGIN)

    def publish(self, queued: list[Decision], waiters) -> None:
        """Publish the queue as the spawn pages see it (``GET queue`` reads it), when it changed."""
        now = utcnow()
        by_key = {w.key: w for w in waiters}
        queued = [d for d in queued if d.request in by_key]
        entries = []
        for d in queued:
            w = by_key[d.request]
            ask: Ask = w.ask
            entries.append(
                rows.Queued(
                    key=w.key,
                    user=ask.user,
                    server_name=ask.server_name,
                    profile=ask.profile,
                    gpu_model=w.model,
                    count=w.count,
                    tier=ask.tier,
                    group=ask.group or None,
                    arrived=ask.arrived,
                    position=d.position or 0,
                    length=d.length or 0,
                    wait_seconds=None if d.wait is None else int(d.wait.total_seconds()),
                    reason_key=d.key,
                    values=dict(d.values),
                    updated=now,
                )
            )
        shape = [(e.key, e.position, e.length, e.wait_seconds, e.reason_key, sorted(e.values.items())) for e in entries]
        if shape == self._published:
            return
        self._published = shape
        self._write(rows.publish_queue, self.ledger, entries)

    def _write(self, fn, *args) -> None:
        """Write to the ledger behind the cycle, in order; a failure is logged (the next cycle decides again)."""

        def run():
            try:
                fn(*args)
            except Exception:
                log.exception("the scheduler could not write to the ledger (%s)", fn.__name__)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            run()
            return
        future = loop.run_in_executor(self._writer, run)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    async def settled(self) -> None:
        """Wait until every write so far is in the ledger (tests, and a hub shutting down)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
