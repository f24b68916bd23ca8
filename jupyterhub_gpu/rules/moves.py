"""Which profiles are a valid move from a session: the one rule every automatic choice of a profile follows.

A student who starts a server chooses more than its size. With the profile come the tier (full price, or
the cheaper preemptible tier that may be stopped for a full-price request), the group that pays (the pool,
and with it which profiles that group may use and whose budget binds), and the unit (a whole GPU, a
time-sliced share of one, a MIG slice). A choice the service makes for the student (the bigger profile a
GPU-memory notice offers and ``POST restart-bigger`` takes, the smaller one the right-sizing advice names)
changes the size only, and keeps every other choice:

- the tier: a full-price session is never moved to the preemptible tier, nor a preemptible one to full price
  (:func:`keeps_choices`);
- the group that pays: the same group, and only profiles that group may use (a user in no group: only
  profiles open to everyone);
- the unit, when growing (:func:`grows`): a share grows to a whole GPU of its model or a bigger one; a MIG
  slice to a bigger slice of its GPU or a whole GPU; whole GPUs to more memory per GPU or more GPUs, never to
  part of a GPU;
- the budget: a bigger profile the budgets cannot pay for (:class:`Purse`, as the spawner's check words it)
  is not offered, and a restart onto it is refused before anything is stopped.

docs/user.md ("A bigger instance") and docs/advice.md say the same to students and instructors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from jupyterhub_gpu import lab
from jupyterhub_gpu.billing import binding_groups, draws_from, spawn_refusal
from jupyterhub_gpu.gpus.names import gpu_family
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.session import default_pool

PREEMPTIBLE = "preemptible"


@dataclass(frozen=True)
class Chosen:
    """What a student chose with a session besides its size: its profile, tier, the group that pays, their groups."""

    profile: str
    tier: str | None = None  # "preemptible", or None: full price
    pool: str | None = None  # the group that pays; None: the default (the first of ``groups``), or no group
    groups: tuple[str, ...] = ()

    @classmethod
    def of(cls, session, groups: Iterable[str] | None = None) -> Chosen:
        """From a ledger session (or :class:`~.session.SessionFacts`); ``groups`` are the user's groups now,
        where known (a restart asks the hub), else those recorded at its start."""
        if isinstance(session, Chosen):
            return session
        recorded = session.group_list if hasattr(session, "group_list") else session.groups
        return cls(
            profile=session.profile,
            tier=PREEMPTIBLE if getattr(session, "tier", None) == PREEMPTIBLE else None,
            pool=session.pool,
            groups=tuple(sorted(recorded if groups is None else groups)),
        )

    @property
    def preemptible(self) -> bool:
        return self.tier == PREEMPTIBLE

    @property
    def payer(self) -> str | None:
        """The group that pays: the session's pool, else the documented default (docs/admin.md)."""
        return self.pool if self.pool is not None else default_pool(self.groups)


def keeps_choices(chosen: Chosen, option) -> str | None:
    """Why moving ``chosen`` to ``option`` would change what the student chose (``"tier"``, ``"group"``), or None."""
    if bool(getattr(option, "preemptible", False)) != chosen.preemptible:
        return "tier"
    payer = chosen.payer
    if payer is None:
        return None if not option.allowed_groups else "group"
    if payer not in chosen.groups or not option.allows((payer,)):
        return "group"
    return None


def grows(current, option) -> bool:
    """Whether ``option`` is bigger than ``current`` in the unit the student chose (see the module's rule).

    Both are :class:`~.advice.ProfileOption`; one whose memory is unknown is never bigger.
    """
    if not option.gpu_count or not option.memory_mib or not current.gpu_count or not current.memory_mib:
        return False
    whole = not option.gpu_share and not option.mig
    if current.gpu_share:
        # a share grows to a whole GPU of its model or a bigger one: at least its whole GPU's memory
        return whole and option.memory_mib >= current.memory_mib * current.gpu_share
    if current.mig:
        if option.gpu_share:
            return False
        if option.mig and gpu_family(option.gpu_model)[0] != gpu_family(current.gpu_model)[0]:
            return False  # a bigger slice of its own GPU model, or a whole GPU
        return option.memory_mib > current.memory_mib
    if not whole:
        return False  # whole GPUs never grow into part of one
    return (
        option.memory_mib >= current.memory_mib
        and option.gpu_count >= current.gpu_count
        and (option.memory_mib > current.memory_mib or option.gpu_count > current.gpu_count)
    )


def bigger_moves(options: Sequence, chosen: Chosen) -> list:
    """The profiles a session may grow to, keeping every other choice: the cheapest per minute first, then the
    smallest. Budgets are not looked at here (:class:`Purse`)."""
    mine = next((o for o in options if o.slug == chosen.profile), None)
    if mine is None:
        return []
    found = [o for o in options if o.slug != mine.slug and grows(mine, o) and keeps_choices(chosen, o) is None]
    return sorted(found, key=lambda o: (o.rate_micros, o.memory_mib * o.gpu_count, o.slug))


def next_bigger(options: Sequence, chosen: Chosen, affordable: Callable[[object], bool] | None = None):
    """The next bigger profile (:func:`bigger_moves`) the budgets can pay for (``affordable``), or None."""
    return next((o for o in bigger_moves(options, chosen) if affordable is None or affordable(o)), None)


# -- the budget ---------------------------------------------------------------------------------


@dataclass
class Purse:
    """What the budgets a session draws from can pay, as the spawner's budget check sees a new spawn.

    ``statuses`` are the budgets of the user and of the group that pays (``Ledger.statuses_of``), ``rules``
    every budget rule (a group whose budget binds a profile must pay for it: :func:`.billing.binding_groups`).
    """

    chosen: Chosen
    rules: list
    statuses: list
    min_minutes: int
    now: datetime
    tz: ZoneInfo

    def refusal(self, option, format_money, lang: str = "en") -> str | None:
        """Why a spawn of ``option`` paid by the same group would be refused, in ``lang``; None if it would pass."""
        payer = self.chosen.payer
        if payer is not None:
            # the spawner's pool choice: where some of the user's groups have a budget that binds the profile,
            # only they may pay (spawners/profiles.py pool_choices)
            mine = [g for g in self.chosen.groups if option.allows((g,))]
            binding = binding_groups(self.rules, option.rate_micros, option.gpu_count, self.now, self.tz)
            choices = [g for g in mine if g in binding] or mine
            if payer not in choices:
                return translator(lang)(
                    "The group {group}, which pays for this session, cannot pay for {profile}.",
                    group=payer,
                    profile=option.display_name,
                )
        ordered = sorted(self.statuses, key=lambda s: s.fraction, reverse=True)
        return spawn_refusal(
            ordered, option.rate_micros, option.gpu_count, self.min_minutes, self.tz, format_money, lang
        )


def published_min_minutes(ledger) -> int:
    """The spawner's ``budget_min_minutes`` as the hub published it (0 where it has not)."""
    value = ledger.lab_settings().get(lab.MIN_MINUTES, "")
    return int(value) if value.isdigit() else 0


def purse_of(ledger, chosen: Chosen, user: str, now: datetime, tz: ZoneInfo) -> Purse:
    """The :class:`Purse` of ``user``'s session paid by ``chosen.payer`` (reads the ledger: blocking)."""
    rules = list(ledger.budget_rules())
    mine = [r for r in rules if draws_from(r, user, chosen.payer)]
    statuses = ledger.statuses_of(mine, now, tz) if mine else []
    return Purse(chosen, rules, statuses, published_min_minutes(ledger), now, tz)


def affordable_for(ledger, session, now: datetime, tz: ZoneInfo, format_money) -> Callable[[object], bool]:
    """``affordable(option)`` for a session's notices: the budgets are read at the first question only."""
    purse: list[Purse] = []

    def affordable(option) -> bool:
        if not purse:
            purse.append(purse_of(ledger, Chosen.of(session), session.user, now, tz))
        return purse[0].refusal(option, format_money) is None

    return affordable


def restart_options(session, slug: str) -> dict:
    """The spawn options that start ``session``'s server again on ``slug`` with every other choice kept: the
    group that pays, and (preemptible tier) whether to be put back in the queue when preempted."""
    chosen = Chosen.of(session)
    options: dict = {"profile": slug}
    if chosen.payer is not None:
        options["pool"] = chosen.payer
    if chosen.preemptible and getattr(session, "resume", False):
        options["resume"] = True
    return options
