"""The spawn's budget check: can the budgets this session draws from pay its first minutes?

A spawn is refused unless each budget it would draw from (the user's own, and the
one group that pays) can still pay ``budget_min_minutes`` of its profile. Servers
that started less than that long ago, and spawns that passed the check but are not
recorded yet (their holds in the ledger, :mod:`jupyterhub_gpu.ledger.holds`), count
with their first minutes (:func:`minimums_held`), on every hub of the ledger. The
check and the hold are one step for the whole ledger, so concurrent spawns, on one
hub or on several, cannot all pass on the same remaining budget (docs/service.md,
"Spawn races").

The pure steps take the time as ``now``; the spawner's steps (:func:`refusal_of`, :func:`choose_pool_of`)
read the clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from zoneinfo import ZoneInfo

from jupyterhub_gpu.billing import (
    binding_groups,
    budget_amount,
    draws_from,
    minutes_so_far,
    spawn_refusal,
    whose_budget,
)
from jupyterhub_gpu.clock import aware_utc, utcnow
from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.money import from_micros, to_micros
from jupyterhub_gpu.session import default_pool
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import Profile, choose_pool

log = logging.getLogger("jupyterhub_gpu.spawners")

#: A refusal worded in any language: ``refusal("zh-CN")``.
Refusal = Callable[[str], str]

#: How much longer than the waits of its spawn a hold lasts: the steps between the waits, and the clocks of hubs
#: on other hosts (a hold's end is compared with each hub's clock)
HOLD_MARGIN = timedelta(minutes=5)


@dataclass(frozen=True)
class Reservation:
    """A spawn to check: whose, the group that pays, its rate and GPUs; once it passes, its hold in the ledger."""

    user: str
    pool: str | None
    rate_micros: int
    gpu_count: int


#: The one thread of this process that reads and writes the spawn holds: a hold dropped (a failed spawn, a
#: recorded start) is gone before the next check of this process runs, and waits are taken in the order they came
_HOLDS = ThreadPoolExecutor(1, thread_name_prefix="gpu-spawn-holds")
_RESERVE_LOCKS: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}


def reserve_lock() -> asyncio.Lock:
    """The hub process's lock around a budget check and its hold (one per event loop).

    The ledger makes the check and the hold one step for every hub (:func:`.holds.check_and_hold`); this lock
    only keeps the spawns of one hub from queueing up threads for it. Recording a start takes it too, and
    drops the hold before letting the next check of this hub in (:func:`drop_reservation`).
    """
    loop = asyncio.get_running_loop()
    lock = _RESERVE_LOCKS.get(loop)
    if lock is None:
        for old in [lp for lp in _RESERVE_LOCKS if lp.is_closed()]:
            del _RESERVE_LOCKS[old]
        lock = _RESERVE_LOCKS[loop] = asyncio.Lock()
    return lock


def hold_span(spawner) -> timedelta:
    """How long a spawn's hold lasts: its longest wait in the hub's queue (``queue_timeout``), its start
    (``start_timeout``, which a Kueue profile's gated wait lengthens) and :data:`HOLD_MARGIN`."""
    return timedelta(seconds=float(spawner.queue_timeout) + float(spawner.start_timeout)) + HOLD_MARGIN


def drop_reservation(spawner) -> None:
    """End the hold of a spawner's spawn (its start is recorded, or it failed or was cancelled).

    The delete runs on the holds' thread, ahead of any check of this process asked for after it; without an event
    loop it is done on return. A failed delete is logged: the hold then counts until it expires.
    """
    ledger = spawner.ledger
    if ledger is None:
        return
    done = _HOLDS.submit(holds.release, ledger, spawner._gpu_key)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        done.result()
        return
    done.add_done_callback(partial(_logged, spawner._gpu_key))


def _logged(key: str, done: Future) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.error("could not end the spawn hold of %s (it counts until it expires): %r", key, done.exception())


async def keep_hold(spawner, profile: Profile) -> None:
    """Hold the spawn's minimum for a full :func:`hold_span` from now: after a step with no limit of its own
    (an image pull), before the waits the span is made of. Nothing without a ledger."""
    ledger = spawner.ledger
    if ledger is None:
        return
    now = utcnow()
    refresh = partial(
        holds.refresh, ledger, spawner._gpu_key, _request(spawner, profile), now, now + hold_span(spawner)
    )
    await asyncio.get_running_loop().run_in_executor(_HOLDS, refresh)


def minimums_held(statuses: list, sessions, reservations, min_minutes: int, now: datetime) -> list:
    """Each budget status with what its servers just started and its spawns still starting will cost at least.

    A session that started less than ``min_minutes`` ago will be charged at least ``min_minutes`` (its
    server was allowed on that promise); a reserved spawn is not charged anything yet. Both are added
    to the use of every budget they draw from, so that concurrent spawns are checked against what is
    really left. Nothing is charged for it: this is only the spawn check's view.
    """
    if min_minutes <= 0:
        return list(statuses)
    holders = []  # (user, pool, rate per minute, GPUs, minutes not yet charged)
    for r in sessions:
        charged = minutes_so_far(aware_utc(r.started), now)  # as billed
        if charged < min_minutes:
            pool = r.pool if r.pool is not None else default_pool(r.group_list)
            holders.append((r.user, pool, r.rate_micros, r.gpu_count, min_minutes - charged))
    holders += [(x.user, x.pool, x.rate_micros, x.gpu_count, min_minutes) for x in reservations]
    result = []
    for s in statuses:
        extra = Decimal(0)
        for user, pool, rate, gpus, minutes in holders:
            if not draws_from(s.rule, user, pool) or not s.charges(rate, gpus):
                continue
            extra += from_micros(rate * minutes) if s.rule.unit == "money" else Decimal(gpus * minutes) / 60
        result.append(replace(s, used=s.used + extra) if extra else s)
    return result


def profile_binding_groups(rules, profile: Profile, now: datetime, tz: ZoneInfo) -> set[str]:
    """The groups whose budget binds this profile now: only they count as budgeted for the pool choice.

    A term budget that ended (or has not begun), or a GPU-hour budget under a
    CPU profile, binds nothing; counting its group as budgeted let a student
    choose it and escape the budget of their other group.
    """
    return binding_groups(rules, to_micros(profile.rate_per_minute), profile.gpu_count, now, tz)


def budget_refusal(
    ledger,
    request: Reservation,
    reserved: list,
    min_minutes: int,
    now: datetime,
    tz: ZoneInfo,
    format_money: Callable[..., str],
) -> Refusal | None:
    """Why the budgets ``request`` draws from cannot pay ``min_minutes`` of it, or None (blocking: run in a thread).

    The budgets are computed by :meth:`Ledger.statuses_of` like everywhere else; ``reserved`` are the
    other spawns that passed and are not recorded yet, of every hub (their holds, read before the sessions
    are). The refusal is worded when it is shown (``refusal(lang)``; ``format_money(amount, locale=lang)``
    writes its amounts).
    """
    rules = [r for r in ledger.budget_rules() if draws_from(r, request.user, request.pool)]
    if not rules:
        return None
    statuses = ledger.statuses_of(rules, now, tz)
    rate, gpus = request.rate_micros, request.gpu_count
    ordered = sorted(statuses, key=lambda s: s.fraction, reverse=True)
    if spawn_refusal(ordered, rate, gpus, min_minutes, tz, format_money):
        return lambda lang: spawn_refusal(ordered, rate, gpus, min_minutes, tz, format_money, lang)
    held = minimums_held(statuses, ledger.open_sessions(), reserved, min_minutes, now)
    for real, with_held in zip(statuses, held, strict=True):
        if spawn_refusal([with_held], rate, gpus, min_minutes, tz, format_money):
            amount = partial(budget_amount, real.rule.unit)  # amount(value, format_money, lang)
            return Phrase(
                "Budget too low for {minutes} minutes of this profile: {used} of {limit} ({whose}) spent, and"
                " {held} held for the first {minutes} minutes of its servers that are starting or started less"
                " than {minutes} minutes ago. Stop one of them, or try again in a few minutes.",
                minutes=min_minutes,
                used=partial(amount, real.used, format_money),
                limit=partial(amount, real.limit, format_money),
                whose=partial(whose_budget, real.rule),
                held=partial(amount, with_held.used - real.used, format_money),
            )
    return None


def budget_check(
    ledger,
    key: str,
    request: Reservation,
    *,
    reserve: bool,
    min_minutes: int,
    now: datetime,
    tz: ZoneInfo,
    format_money: Callable[..., str],
    hold_for: timedelta = HOLD_MARGIN,
) -> Refusal | None:
    """:func:`budget_refusal` against the holds of every hub but server ``key``'s own; with ``reserve``, a spawn
    that passes holds its minimum until ``now + hold_for``, in the same step for every hub of the ledger
    (:func:`.holds.check_and_hold`). Blocking: the spawner runs it on the holds' thread (:func:`check_and_reserve`).
    """

    def check(reserved) -> Refusal | None:
        return budget_refusal(ledger, request, reserved, min_minutes, now, tz, format_money)

    if reserve:
        return holds.check_and_hold(ledger, key, request, check, now, now + hold_for)
    return check(holds.held(ledger, now, besides=key))


async def check_and_reserve(ledger, key: str, request: Reservation, **how) -> Refusal | None:
    """:func:`budget_check` on the holds' thread, one spawn of this hub process at a time (``how``: its options)."""
    async with reserve_lock():
        return await asyncio.get_running_loop().run_in_executor(
            _HOLDS, partial(budget_check, ledger, key, request, **how)
        )


async def choose_pool_of(spawner, options, profile: Profile) -> str | None:
    """The one group that pays for a spawner's session (``pool`` in the options, else the default; docs/admin.md)."""
    ledger = spawner.ledger
    rules = await asyncio.to_thread(ledger.budget_rules) if ledger is not None else []
    return choose_pool(options, profile, spawner._gpu_group_names(), binding_groups_of(spawner, rules, profile))


def binding_groups_of(spawner, rules, profile: Profile) -> set[str]:
    """The groups whose budget binds this profile now, in the spawner's time zone (:func:`profile_binding_groups`)."""
    return profile_binding_groups(rules, profile, utcnow(), ZoneInfo(spawner.budget_timezone))


async def refusal_of(spawner, profile: Profile, pool: str | None = None, reserve: bool = False) -> Refusal | None:
    """Why the budgets a spawner's session would draw from cannot afford ``budget_min_minutes`` of ``profile``.

    None when they can, or without a ledger. The refusal is worded when it is shown: ``refusal(lang)``. Those
    are the user's own budget and the one group's that pays (``pool``, by default the one chosen at this
    spawn), computed by :meth:`Ledger.statuses_of` like everywhere else. Servers of those budgets that
    started less than ``budget_min_minutes`` ago, and spawns that passed this check but are not recorded
    yet, on any hub of the ledger, count with their first ``budget_min_minutes`` (:func:`minimums_held`).
    With ``reserve``, a spawn that passes holds its own minimum in the ledger until its start is recorded (or
    for :func:`hold_span`); the check and the hold are one step for every hub, so concurrent spawns cannot
    all pass on the same remaining budget. Called again for the same server (after a wait), it checks
    without the server's own hold and, if it passes, holds again for a full span.
    """
    ledger = spawner.ledger
    if ledger is None:
        return None
    return await check_and_reserve(
        ledger,
        spawner._gpu_key,
        _request(spawner, profile, pool),
        reserve=reserve,
        min_minutes=spawner.budget_min_minutes,
        now=utcnow(),
        tz=ZoneInfo(spawner.budget_timezone),
        format_money=spawner.gpu_currency.format,
        hold_for=hold_span(spawner),
    )


def _request(spawner, profile: Profile, pool: str | None = None) -> Reservation:
    """The spawn of ``profile`` a spawner asks for, paid by ``pool`` (by default the one chosen at this spawn)."""
    pool = spawner._gpu_pool if pool is None else pool
    return Reservation(spawner.user.name, pool, to_micros(profile.rate_per_minute), profile.gpu_count)
