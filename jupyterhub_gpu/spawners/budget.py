"""The spawn's budget check: can the budgets this session draws from pay its first minutes?

A spawn is refused unless each budget it would draw from (the user's own, and the
one group that pays) can still pay ``budget_min_minutes`` of its profile. Servers
that started less than that long ago, and spawns that passed the check but are not
recorded yet (:class:`Reservation`), count with their first minutes
(:func:`minimums_held`). The check and the reservation are one step for the whole
hub (:func:`reserve_lock`), so concurrent spawns cannot all pass on the same
remaining budget (docs/service.md, "Spawn races").

The pure steps take the time as ``now``; the spawner's steps (:func:`refusal_of`, :func:`choose_pool_of`)
read the clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
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
from jupyterhub_gpu.money import from_micros, to_micros
from jupyterhub_gpu.session import default_pool
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import Profile, choose_pool

#: A refusal worded in any language: ``refusal("zh-CN")``.
Refusal = Callable[[str], str]


@dataclass(frozen=True)
class Reservation:
    """A spawn that passed the budget check and is not recorded yet: it counts with its minimum."""

    user: str
    pool: str | None
    rate_micros: int
    gpu_count: int


#: ledger URL -> server key -> the spawn's Reservation, for this hub process
_RESERVATIONS: dict[str, dict[str, Reservation]] = {}
_RESERVE_LOCKS: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}


def reserve_lock() -> asyncio.Lock:
    """The hub-wide lock around a budget check and its reservation (one per event loop).

    Recording a start takes it too: a concurrent check sees a spawn either held or recorded, never both.
    """
    loop = asyncio.get_running_loop()
    lock = _RESERVE_LOCKS.get(loop)
    if lock is None:
        for old in [lp for lp in _RESERVE_LOCKS if lp.is_closed()]:
            del _RESERVE_LOCKS[old]
        lock = _RESERVE_LOCKS[loop] = asyncio.Lock()
    return lock


def drop_reservation(spawner) -> None:
    """Forget the hold of a spawner's spawn (its start is recorded, or it failed)."""
    _RESERVATIONS.get(spawner.ledger_db_url, {}).pop(spawner._gpu_key, None)


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
    reserved: list[Reservation],
    min_minutes: int,
    now: datetime,
    tz: ZoneInfo,
    format_money: Callable[..., str],
) -> Refusal | None:
    """Why the budgets ``request`` draws from cannot pay ``min_minutes`` of it, or None (blocking: run in a thread).

    The budgets are computed by :meth:`Ledger.statuses_of` like everywhere else; ``reserved`` are the
    other spawns of this hub that passed and are not recorded yet. The refusal is worded when it is
    shown (``refusal(lang)``; ``format_money(amount, locale=lang)`` writes its amounts).
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


async def check_and_reserve(
    ledger,
    ledger_url: str,
    key: str,
    request: Reservation,
    *,
    reserve: bool,
    min_minutes: int,
    now: datetime,
    tz: ZoneInfo,
    format_money: Callable[..., str],
) -> Refusal | None:
    """:func:`budget_refusal` under the hub-wide lock; with ``reserve``, a spawn that passes holds its minimum."""
    async with reserve_lock():
        reserved = [r for k, r in _RESERVATIONS.get(ledger_url, {}).items() if k != key]
        refusal = await asyncio.to_thread(budget_refusal, ledger, request, reserved, min_minutes, now, tz, format_money)
        if refusal is None and reserve:
            _RESERVATIONS.setdefault(ledger_url, {})[key] = request
    return refusal


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
    yet, count with their first ``budget_min_minutes`` (:func:`minimums_held`). With ``reserve``, a spawn
    that passes holds its own minimum until its start is recorded; the check and the hold are one step for
    the whole hub, so concurrent spawns cannot all pass on the same remaining budget.
    """
    ledger = spawner.ledger
    if ledger is None:
        return None
    pool = spawner._gpu_pool if pool is None else pool
    request = Reservation(spawner.user.name, pool, to_micros(profile.rate_per_minute), profile.gpu_count)
    return await check_and_reserve(
        ledger,
        spawner.ledger_db_url,
        spawner._gpu_key,
        request,
        reserve=reserve,
        min_minutes=spawner.budget_min_minutes,
        now=utcnow(),
        tz=ZoneInfo(spawner.budget_timezone),
        format_money=spawner.gpu_currency.format,
    )
