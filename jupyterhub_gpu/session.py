"""A GPU session as every side knows it: its start and why it stopped (what idle is: :mod:`.rules.idle`).

Pure and shared by the hub side (the spawners write the start and the stop),
the gpu service (the tick, the reconciliation, reports) and the ledger; imports
nothing of ``jupyterhub``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import LANGUAGES
from jupyterhub_gpu.money import from_micros, to_micros


class StopReason(str, Enum):
    """Why a session stopped, as the ledger stores it (``gpu_sessions.stop_reason``).

    The values are the ledger's strings, unchanged: a member compares equal to
    its string and is stored, formatted and serialized as it.
    """

    #: The user (or an admin) stopped the server.
    STOPPED = "stopped"
    #: The server ended on its own.
    EXITED = "exited"
    #: The service stopped it: a budget it draws from was used up.
    BUDGET = "budget"
    #: Cull rules (``culling.CullRule.kind``).
    GPU_IDLE = "gpu_idle"
    INACTIVE = "inactive"
    MAX_AGE = "max_age"
    #: A kernel kept busy while its GPU did nothing (a hung data loader, ``input()``, a deadlock).
    BUSY_GPU_IDLE = "busy_gpu_idle"
    #: The service found it gone at a reconciliation with the hub (stopped while the service was down).
    RECONCILED = "reconciled"
    #: The restarted hub stopped a server that a hub killed in the middle of its spawn had left behind.
    ORPHANED = "orphaned"
    #: Notebook jobs and "stop when done" (docs/jobs.md).
    JOB_FINISHED = "job_finished"
    JOB_TIME_LIMIT = "job_time_limit"
    JOB_CANCELLED = "job_cancelled"
    STOP_WHEN_DONE = "stop_when_done"
    #: ``PlateauStop(stop_server=True)``: training reached a plateau, a checkpoint was saved (docs/keras.md).
    PLATEAU = "plateau"
    #: The scheduler: its GPU went to a full-price request (the preemptible tier), or a class
    #: reservation took its GPUs at the window's start (docs/scheduling.md).
    PREEMPTED = "preempted"
    RESERVED = "reserved"

    def __str__(self) -> str:
        return self.value


#: The stop reasons of cull rules, in report order.
CULL_REASONS = (StopReason.GPU_IDLE, StopReason.INACTIVE, StopReason.MAX_AGE, StopReason.BUSY_GPU_IDLE)
#: The stop reasons of notebook-job runs and "stop when done".
RUN_REASONS = (
    StopReason.JOB_FINISHED,
    StopReason.JOB_TIME_LIMIT,
    StopReason.JOB_CANCELLED,
    StopReason.STOP_WHEN_DONE,
    StopReason.PLATEAU,
)
#: The stop reasons a server may report for its own stop (``POST stop-when-done``).
SELF_STOP_REASONS = (StopReason.STOP_WHEN_DONE, StopReason.PLATEAU)
#: The reasons a user or their server gives (stop when done, a plateau, a job's end or cancel).
USER_STOP_REASONS = (*SELF_STOP_REASONS, StopReason.JOB_FINISHED, StopReason.JOB_CANCELLED)


class StopKind(Enum):
    """What a stop reason says about the stop, for :func:`kept_stop_reason`; in the order of docs/admin.md's table."""

    #: What the recorder of the stop saw: the server ended on its own, or was found gone.
    OBSERVED = "observed"
    #: Stopped by hand: the student (or an admin) with the hub's stop button.
    BY_HAND = "by_hand"
    #: The student's run or server said it is done, and stops (stop when done, a plateau, a job's end or cancel).
    SAID_DONE = "said_done"
    #: The service ended the work for good: a budget used up, a cull, a job's time limit, a reservation's start.
    SERVICE = "service"
    #: Preempted: the one stop that is followed by a start again (resume, a job's requeue).
    COMES_BACK = "comes_back"


#: The kind of every stop reason (a new reason gets its kind here, or :func:`kept_stop_reason` refuses it).
STOP_KINDS: dict[StopReason, StopKind] = {
    StopReason.EXITED: StopKind.OBSERVED,
    StopReason.RECONCILED: StopKind.OBSERVED,
    StopReason.ORPHANED: StopKind.OBSERVED,
    StopReason.STOPPED: StopKind.BY_HAND,
    **dict.fromkeys(USER_STOP_REASONS, StopKind.SAID_DONE),
    **dict.fromkeys(CULL_REASONS, StopKind.SERVICE),
    StopReason.BUDGET: StopKind.SERVICE,
    StopReason.JOB_TIME_LIMIT: StopKind.SERVICE,
    StopReason.RESERVED: StopKind.SERVICE,
    StopReason.PREEMPTED: StopKind.COMES_BACK,
}


def _stop_kind(reason: str) -> StopKind:
    try:
        return STOP_KINDS[StopReason(reason)]
    except (ValueError, KeyError):
        raise ValueError(f"unknown stop reason {reason!r}") from None


def kept_stop_reason(pending: str | None, new: str) -> str:
    """Which reason a session's stop keeps when ``new`` comes while ``pending`` is set: the one precedence rule.

    A pending reason is the cause of a stop already asked for; whatever is asked later finds that stop under
    way, so the first reason stays (a budget stop is not relabelled by a cull, a student's own stop by a later
    pass, a service's stop by the student's click on a server already stopping), except:

    - a preemption gives way to any reason that ends the work for good (a budget used up, a cull, a job's
      time limit or end, a reservation, the student's run done): only a preemption brings the server back,
      and what follows must not start again what has to stay stopped (a job requeued for a user with no
      budget);
    - a student's server that said it is done may say so again (``stop_when_done``, then ``plateau``);
    - what the recorder of the stop saw (the hub's stop, an exit, a server found gone) never replaces a
      reason asked for: that stop caused it.

    ``pending`` may be None (nothing asked for yet) or a string this version does not know (it stays). A
    ``new`` reason that is not a :class:`StopReason` is a ValueError. docs/admin.md has the table and the why.
    """
    new_kind = _stop_kind(new)
    if pending is None:
        return StopReason(new)
    try:
        pending_kind = _stop_kind(pending)
    except ValueError:
        return pending  # written by another version: a stop under way all the same
    if pending == new or new_kind in (StopKind.OBSERVED, StopKind.BY_HAND):
        return StopReason(pending)
    if pending_kind in (StopKind.OBSERVED, StopKind.COMES_BACK):
        return StopReason(new)
    if pending_kind is StopKind.SAID_DONE and new_kind is StopKind.SAID_DONE:
        return StopReason(new)
    return StopReason(pending)


def replaced_by(new: str) -> tuple[StopReason, ...]:
    """The pending reasons that ``new`` replaces (:func:`kept_stop_reason`): the ledger's compare-and-set."""
    return tuple(r for r in StopReason if r != new and kept_stop_reason(r, new) == new)


def default_pool(groups) -> str | None:
    """The documented default pool of a session: the first of its groups in sorted order (also for old rows)."""
    names = sorted(groups)
    return names[0] if names else None


@dataclass(frozen=True)
class SessionStart:
    """The one record of a session's facts, as fixed when its server started.

    Every side reads and writes a session through it, each shape in exactly one place:
    the spawner's state (:meth:`to_spawner_state`, :meth:`from_spawner_state`), the
    server's environment (:func:`jupyterhub_gpu.env.make_gpu_env`,
    :func:`jupyterhub_gpu.env.session_from_env`) and the ledger's row
    (:meth:`jupyterhub_gpu.ledger.models.SessionRecord.of`, ``SessionRecord.start``).
    The rate is exact: integer micro-units per minute (:attr:`rate_per_minute` is its Decimal).
    :class:`SessionFacts` is the reports' view of it.
    """

    id: str
    user: str
    server_name: str
    groups: tuple[str, ...]
    profile: str
    #: The units it holds: device, MIG or share uuids (``.../share-1-of-4``), so that a restarted hub splits each
    #: GPU again as it was (the allocator's restore).
    gpus: tuple[str, ...]
    rate_micros: int
    currency: str
    started: datetime
    simulated: bool = False
    #: The one group whose budget pays; None: the default, the first of ``groups`` in sorted order.
    pool: str | None = None
    #: The spawn's language (one of :data:`.i18n.LANGUAGES`; None: unknown): its user's notices and mail speak it.
    language: str | None = None
    #: The tier (``"preemptible"``; None: full price), and whether its user asked to be requeued when preempted.
    tier: str | None = None
    resume: bool = False
    #: The id of the server's own API token (``a17``), where the spawner knew it: only it reports for the session.
    server_token: str | None = None
    #: The GPUs the server sees (a share's physical GPU, once; a MIG slice's own uuid), and the units' names.
    visible_gpus: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()

    @property
    def rate_per_minute(self) -> Decimal:
        """The exact rate per minute (``Decimal("0.0333")``)."""
        return from_micros(self.rate_micros)

    @property
    def rate_text(self) -> str:
        """The rate per minute as the state and the environment write it: a plain decimal (``"0.0333"``, ``"0"``)."""
        return f"{self.rate_per_minute:f}"

    def pool_name(self) -> str | None:
        """The group that pays; ValueError for a pool that is not one of the user's groups."""
        if self.pool is None:
            return default_pool(self.groups)
        if self.pool not in self.groups:
            raise ValueError(
                f"session {self.id}: the pool {self.pool!r} is not one of the groups {sorted(self.groups)}"
            )
        return self.pool

    def to_spawner_state(self) -> dict:
        """The ``gpu`` part of the spawner's state: what a restarted hub rebuilds the assignment and the bill from."""
        return {
            "profile": self.profile,
            "devices": list(self.gpus),
            "visible_devices": list(self.visible_gpus),
            "device_names": list(self.gpu_names),
            "simulated": self.simulated,
            "session_id": self.id,
            "started": isoformat(self.started),
            "rate_per_minute": self.rate_text,
            "currency": self.currency,
            "groups": sorted(self.groups),
            "pool": self.pool,
            "language": self.language,
            # the preemptible tier, and whether to requeue the server when it is preempted
            **({"tier": self.tier, "resume": self.resume} if self.tier else {}),
            # the id of the server's own API token: only it reports for the session to the gpu service
            **({"server_token": self.server_token} if self.server_token else {}),
        }

    @classmethod
    def from_spawner_state(cls, user: str, server_name: str, groups, gpu: dict) -> SessionStart:
        """The session kept in the ``gpu`` part of a spawner's state (also states older versions saved).

        The spawner reads its own state with it, and the service's reconciliation
        records the start of a running server the ledger missed. ``groups`` count
        only where the state has none of its own. KeyError or ValueError for a
        state without a session id, profile, rate, currency or start.
        """
        return cls(
            id=gpu["session_id"],
            user=user,
            server_name=server_name,
            groups=tuple(gpu.get("groups", groups)),
            pool=gpu.get("pool"),
            profile=gpu["profile"],
            gpus=tuple(gpu.get("devices", [])),
            rate_micros=to_micros(Decimal(gpu["rate_per_minute"])),
            currency=gpu["currency"],
            started=parse_started(gpu["started"]),
            simulated=bool(gpu.get("simulated", False)),
            language=known_language(gpu.get("language")),
            tier=known_tier(gpu.get("tier")),
            resume=gpu.get("resume") is True,
            server_token=gpu.get("server_token") if isinstance(gpu.get("server_token"), str) else None,
            visible_gpus=tuple(gpu.get("visible_devices", [])),
            gpu_names=tuple(gpu.get("device_names", [])),
        )

    def facts(
        self,
        *,
        stopped: datetime | None = None,
        stop_reason: str | None = None,
        minutes: int = 0,
        gpu_model: str = "",
        final: bool = True,
    ) -> SessionFacts:
        """The reports' view of this session, with what its stop and its bill say."""
        return SessionFacts(
            id=self.id,
            user=self.user,
            started=self.started,
            stopped=stopped,
            stop_reason=stop_reason,
            gpu_count=len(self.gpus),
            rate_micros=self.rate_micros,
            currency=self.currency,
            groups=self.groups,
            profile=self.profile,
            server_name=self.server_name,
            pool=self.pool,
            tier=self.tier,
            minutes=minutes,
            gpu_model=gpu_model,
            final=final,
        )


def parse_started(text: str) -> datetime:
    """A session's start as the state and the environment write it (ISO 8601, ``Z`` or an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def known_language(value) -> str | None:
    """A spawn's language as written anywhere, or None when it is not one of :data:`.i18n.LANGUAGES`."""
    return value if value in LANGUAGES else None


def known_tier(value) -> str | None:
    """``"preemptible"``, or None (full price) for anything else written."""
    return "preemptible" if value == "preemptible" else None


@dataclass(frozen=True)
class SessionFacts:
    """What the reports know of one session (a view of :class:`SessionStart` with its stop and bill:
    :meth:`SessionStart.facts`): the culling report's savings and the right-sizing advice.

    Aware UTC datetimes, money in micro-units per minute. The culling report reads
    its start, stop and pool; the advice its minutes billed so far, its GPU model and
    whether it has ended (``final``).
    """

    id: str
    user: str
    started: datetime | None = None
    stopped: datetime | None = None
    stop_reason: str | None = None
    gpu_count: int = 1
    rate_micros: int = 0
    currency: str = ""
    groups: tuple[str, ...] = ()
    profile: str = ""
    server_name: str = ""
    pool: str | None = None  # the one group that paid (a group's report counts the sessions it paid for)
    tier: str | None = None  # "preemptible", or None: full price (the advice keeps it)
    minutes: int = 0  # billed so far
    gpu_model: str = ""
    final: bool = True
