"""Every table of the ledger, on one ``Base``: sessions, budgets, alerts, notices, usage minutes, pricing,
advice, jobs, the admins' profile overrides, and the schedule (reservations, group shares).

Alembic's environment (``migrations/env.py``) takes :data:`metadata` from here, so that ``alembic
revision --autogenerate`` compares the database with every table, whatever else was imported (it once
proposed dropping the jobs and price-override tables, declared in modules env.py did not load). The
modules that read and write these tables are :mod:`.store` (the :class:`~.store.Ledger`) and
:mod:`.queries`; times are stored as naive UTC (:func:`jupyterhub_gpu.clock.naive_utc`), money as
integer micro-units.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import BigInteger, Boolean, Date, DateTime, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB
from jupyterhub_gpu.session import SessionStart, known_language, known_tier


class Base(DeclarativeBase):
    pass


class SessionRecord(Base):
    """One server session: from the moment its server started to the moment it stopped."""

    __tablename__ = "gpu_sessions"
    __table_args__ = (Index("ix_gpu_sessions_hub_stopped", "hub", "stopped"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # the hub whose spawner started it (migration 0017): only that hub's gpu service meters, culls and stops it
    hub: Mapped[str] = mapped_column(String(63), default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    user: Mapped[str] = mapped_column(String(255), index=True)
    server_name: Mapped[str] = mapped_column(String(255), default="")
    groups: Mapped[str] = mapped_column(Text, default="[]")  # JSON list, the user's groups at start
    # the one group whose budget pays for the session (None: the user was in no group)
    pool: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    profile: Mapped[str] = mapped_column(String(64))
    gpus: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of device UUIDs
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    simulated: Mapped[bool] = mapped_column(Boolean, default=False)
    rate_micros: Mapped[int] = mapped_column(BigInteger)  # per minute
    currency: Mapped[str] = mapped_column(String(3))
    started: Mapped[datetime] = mapped_column(DateTime, index=True)
    stopped: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, index=True)
    stop_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pending_stop_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    minutes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_seen: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # culling: the user's last activity as reported by the server or the hub, and a pending warning
    last_activity: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cull_warned_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    cull_rule: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # the language of the spawn ("en" | "zh-CN"; None: recorded before spawns had one): its user's notices speak it
    language: Mapped[str | None] = mapped_column(String(8), nullable=True)
    # "preemptible" for the cheaper tier (None: full price); resume: put back in the queue when preempted
    tier: Mapped[str | None] = mapped_column(String(16), nullable=True)
    resume: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # the id of the server's own API token (migration 0016; NULL: unknown): only it reports for the session
    server_token: Mapped[str | None] = mapped_column(String(64), nullable=True)

    @property
    def group_list(self) -> list[str]:
        return json.loads(self.groups or "[]")

    @property
    def gpu_list(self) -> list[str]:
        return json.loads(self.gpus or "[]")

    @classmethod
    def of(cls, start: SessionStart) -> SessionRecord:
        """The row of a session's start (open: no stop yet); ValueError for a pool not among its groups."""
        return cls(
            id=start.id,
            user=start.user,
            server_name=start.server_name,
            groups=json.dumps(sorted(start.groups)),
            pool=start.pool_name(),
            profile=start.profile,
            gpus=json.dumps(list(start.gpus)),
            gpu_count=len(start.gpus),
            simulated=start.simulated,
            rate_micros=start.rate_micros,
            currency=start.currency,
            started=naive_utc(start.started),
            language=start.language,
            tier=start.tier,
            resume=start.resume,
            server_token=start.server_token,
        )

    def start(self) -> SessionStart:
        """The session's facts as this row keeps them (the row keeps neither what the server sees nor names)."""
        return SessionStart(
            id=self.id,
            user=self.user,
            server_name=self.server_name or "",
            groups=tuple(self.group_list),
            profile=self.profile,
            gpus=tuple(self.gpu_list),
            rate_micros=self.rate_micros,
            currency=self.currency,
            started=aware_utc(self.started),
            simulated=bool(self.simulated),
            pool=self.pool,
            language=known_language(self.language),
            tier=known_tier(self.tier),
            resume=bool(self.resume),
            server_token=self.server_token,
        )


class Budget(Base):
    """A budget for a user or a group, per week, month or term, in money or GPU-hours."""

    __tablename__ = "gpu_budgets"
    __table_args__ = (UniqueConstraint("scope", "subject", name="uq_budget_subject"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(8))  # user | group
    subject: Mapped[str] = mapped_column(String(255))
    period: Mapped[str] = mapped_column(String(8))  # week | month | term
    unit: Mapped[str] = mapped_column(String(12))  # money | gpu_hours
    limit: Mapped[str] = mapped_column(String(40))  # a decimal string: exact, never a float
    term_start: Mapped[date | None] = mapped_column(Date, nullable=True)
    term_end: Mapped[date | None] = mapped_column(Date, nullable=True)
    updated: Mapped[datetime] = mapped_column(DateTime)

    @property
    def revision(self) -> str:
        """Changes with every edit: alerts are sent once per revision of a budget and period."""
        return naive_utc(self.updated).isoformat() if self.updated else ""

    def rule(self) -> BudgetRule:
        return BudgetRule(
            scope=self.scope,
            subject=self.subject,
            period=self.period,
            unit=self.unit,
            limit=Decimal(self.limit),
            term_start=self.term_start,
            term_end=self.term_end,
            revision=self.revision,
        )


class AlertSent(Base):
    """An alert sent once per user, budget revision, period, threshold and channel."""

    __tablename__ = "gpu_alerts"
    __table_args__ = (
        UniqueConstraint(
            "user", "budget_key", "period_start", "threshold", "channel", "revision", name="uq_alert_once"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    budget_key: Mapped[str] = mapped_column(String(270))
    period_start: Mapped[datetime] = mapped_column(DateTime)
    threshold: Mapped[int] = mapped_column(Integer)
    channel: Mapped[str] = mapped_column(String(16))  # email | webhook | lab
    sent: Mapped[datetime] = mapped_column(DateTime)
    # the budget's revision (Budget.revision) when sent: an edited budget alerts afresh
    revision: Mapped[str] = mapped_column(String(40), default="", server_default="")


class Notice(Base):
    """A message for a user's JupyterLab (budget thresholds, stop countdowns, advice)."""

    __tablename__ = "gpu_notices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    kind: Mapped[str] = mapped_column(String(32))
    level: Mapped[str] = mapped_column(String(16), default="info")  # info | warning | error
    message: Mapped[str] = mapped_column(Text)
    created: Mapped[datetime] = mapped_column(DateTime)
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    dismissed: Mapped[bool] = mapped_column(Boolean, default=False)


class UsageMinute(Base):
    """One session's GPU usage in one minute (UTC), merged from the pushes that fell in it."""

    __tablename__ = "gpu_usage_minutes"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    minute: Mapped[datetime] = mapped_column(DateTime, primary_key=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    pushes: Mapped[int] = mapped_column(Integer, default=0)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    utilization_tenths_sum: Mapped[int] = mapped_column(Integer, default=0)  # Σ(avg × 10 × samples)
    memory_used_max_mib: Mapped[int] = mapped_column(Integer, default=0)
    memory_total_mib: Mapped[int] = mapped_column(Integer, default=0)
    kernels_max: Mapped[int] = mapped_column(Integer, default=0)
    busy_kernels_max: Mapped[int] = mapped_column(Integer, default=0)
    last_kernel_activity: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # uuid -> {"utilization_max", "memory_used_max_mib"}, and on a shared GPU or MIG slice "scope"
    # ("own" | "gpu"), "processes_max" (the server's own processes on it) and "shared_by_max", as the server said, and
    # "memory_unknown" (true) where the server could not measure its own memory (a share in a container)
    gpus: Mapped[str] = mapped_column(Text, default="{}")

    @property
    def utilization_avg(self) -> float:
        return self.utilization_tenths_sum / 10 / self.samples if self.samples else 0.0


class PriceRecord(Base):
    """A profile as its hub published it: who may use it and its rate per minute."""

    __tablename__ = "gpu_pricing"

    # the hub that published it (migration 0017): each hub's spawner publishes its own profiles and prices
    hub: Mapped[str] = mapped_column(String(63), primary_key=True, default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    display_name: Mapped[str] = mapped_column(String(255))
    gpu_model: Mapped[str] = mapped_column(String(64), default="")
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    rate_micros: Mapped[int] = mapped_column(BigInteger)  # per minute
    currency: Mapped[str] = mapped_column(String(3))
    allowed_groups: Mapped[str] = mapped_column(Text, default="[]")  # JSON list; empty: everyone
    updated: Mapped[datetime] = mapped_column(DateTime)
    # the configured parts of the rate (decimal strings) and one GPU's memory in the inventory (migration 0009)
    price_per_gpu_hour: Mapped[str | None] = mapped_column(String(40), nullable=True)
    price_per_hour: Mapped[str | None] = mapped_column(String(40), nullable=True)
    gpu_memory_mib: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # a profile of part of a GPU (migration 0013): how many servers share one GPU, or its MIG slice ("1g.10gb")
    gpu_share: Mapped[int | None] = mapped_column(Integer, nullable=True)
    mig: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # the tier (migration 0016): "preemptible" for the cheaper tier, NULL for full price
    tier: Mapped[str | None] = mapped_column(String(16), nullable=True)


# -- right-sizing advice (rules: rules/advice.py; rows: queries/advice.py) --------------------------


class SessionAdvice(Base):
    """The advice of one session: live while it runs (past ``live_after_minutes``), final once it stopped."""

    __tablename__ = "gpu_session_advice"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    profile: Mapped[str] = mapped_column(String(64), index=True)
    computed: Mapped[datetime] = mapped_column(DateTime)
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    reason: Mapped[str] = mapped_column(String(32))  # advised | too_short | no_samples | ...
    minutes: Mapped[int] = mapped_column(Integer, default=0)
    sampled_minutes: Mapped[int] = mapped_column(Integer, default=0)
    peak_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    p95_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    memory_total_mib: Mapped[int] = mapped_column(Integer, default=0)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)  # per GPU, from the catalogue (not the server)
    util_p50_tenths: Mapped[int] = mapped_column(Integer, default=0)
    util_p95_tenths: Mapped[int] = mapped_column(Integer, default=0)
    busy_permille: Mapped[int] = mapped_column(Integer, default=0)
    gpu_count: Mapped[int] = mapped_column(Integer, default=0)
    gpus_used: Mapped[int] = mapped_column(Integer, default=0)
    suggested_profile: Mapped[str | None] = mapped_column(String(64), nullable=True)
    suggested_display_name: Mapped[str | None] = mapped_column(String(255), nullable=True)
    suggested_gpu_count: Mapped[int | None] = mapped_column(Integer, nullable=True)
    suggested_rate_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # a suggested share of a GPU (migration 0013): its share count and model, for "a quarter of a T4 would have served"
    suggested_gpu_share: Mapped[int | None] = mapped_column(Integer, nullable=True)
    suggested_gpu_model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    confidence: Mapped[str | None] = mapped_column(String(8), nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    rate_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    counterfactual_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    saving_micros: Mapped[int] = mapped_column(BigInteger, default=0)
    message: Mapped[str] = mapped_column(Text, default="")


# -- notebook jobs (rules: service/domain/jobs.py; rows: queries/jobs.py) --------------------------


class JobRecord(Base):
    """One notebook job: what to run, in which profile, and how it ended."""

    __tablename__ = "gpu_jobs"

    id: Mapped[str] = mapped_column(String(12), primary_key=True)
    # the hub whose gpu service runs it (migration 0017)
    hub: Mapped[str] = mapped_column(String(63), default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    user: Mapped[str] = mapped_column(String(255), index=True)
    server_name: Mapped[str] = mapped_column(String(255))
    notebook: Mapped[str] = mapped_column(String(1024))  # relative to the user's home (the server's root)
    profile: Mapped[str] = mapped_column(String(64))
    parameters: Mapped[str] = mapped_column(Text, default="{}")  # a JSON object, papermill-style
    time_limit_seconds: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    created: Mapped[datetime] = mapped_column(DateTime)
    started: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)

    @property
    def parameter_dict(self) -> dict:
        return json.loads(self.parameters or "{}")

    @property
    def output_dir(self) -> str:
        return f"work/jobs/{self.id}"

    @property
    def output_notebook(self) -> str:
        return f"{self.output_dir}/{self.notebook.rsplit('/', 1)[-1]}"

    @property
    def log_file(self) -> str:
        return f"{self.output_dir}/job.log"


# -- admins' edits of profile prices and access (rules: rules/overrides.py; rows: queries/overrides.py)


class ProfileOverride(Base):
    """An admin's edit of one profile's prices and allowed groups (NULL: the configured value)."""

    __tablename__ = "gpu_profile_overrides"

    # the hub whose profile it edits (migration 0018): an admin of one hub does not change another's
    hub: Mapped[str] = mapped_column(String(63), primary_key=True, default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    slug: Mapped[str] = mapped_column(String(64), primary_key=True)
    price_per_gpu_hour: Mapped[str | None] = mapped_column(String(40), nullable=True)  # decimal string
    price_per_hour: Mapped[str | None] = mapped_column(String(40), nullable=True)  # decimal string
    allowed_groups: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON list; [] means everyone
    updated: Mapped[datetime] = mapped_column(DateTime)
    updated_by: Mapped[str] = mapped_column(String(255))


# -- the lab's settings as the hub published them (migration 0010; rows: Ledger.lab_settings) -------


class LabSetting(Base):
    """One setting the hub published at start (``currency``, ``currency_symbol``, ``timezone``)."""

    __tablename__ = "gpu_lab_settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated: Mapped[datetime] = mapped_column(DateTime)


# -- alert channels: Apprise URLs of users and groups (migration 0011; rows: queries/channels.py) ----------


class NotifyChannel(Base):
    """One Apprise URL that notices go to: a user's own, a group's (its course chat), or the admins'.

    ``url`` holds the secrets the far end needs (tokens, passwords); it is read only to send and never
    returned by any API: readers get ``service`` and ``masked`` (Apprise's privacy form of the URL).
    ``events`` is a comma-separated list of :data:`~jupyterhub_gpu.service.domain.notices.EVENTS`.
    """

    __tablename__ = "gpu_notify_channels"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    owner_kind: Mapped[str] = mapped_column(String(8), index=True)  # user | group | admin
    owner: Mapped[str] = mapped_column(String(255), index=True)  # the user or group name; "" for admin
    url: Mapped[str] = mapped_column(Text)
    service: Mapped[str] = mapped_column(String(64))
    masked: Mapped[str] = mapped_column(Text)
    events: Mapped[str] = mapped_column(String(255))
    created: Mapped[datetime] = mapped_column(DateTime)
    created_by: Mapped[str] = mapped_column(String(255))


# -- the schedule: class reservations and group shares (migration 0014; rows: queries/schedule.py) ---------


class ReservationRecord(Base):
    """``count`` GPUs of ``gpu_model`` kept for ``group`` from ``start`` to ``end``, once or weekly until a day.

    ``weekly_until`` is the last day (in the lab's time zone) a weekly window may start on; None: once.
    The rules (what may be booked) are :func:`jupyterhub_gpu.scheduler.check_reservation`.
    """

    __tablename__ = "gpu_reservations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # the hub whose GPUs it keeps (migration 0018): only that hub's planner and quota mover act on it
    hub: Mapped[str] = mapped_column(String(63), index=True, default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    group: Mapped[str] = mapped_column(String(255), index=True)
    gpu_model: Mapped[str] = mapped_column(String(64))
    count: Mapped[int] = mapped_column(Integer)
    start: Mapped[datetime] = mapped_column(DateTime, index=True)
    end: Mapped[datetime] = mapped_column(DateTime)
    weekly_until: Mapped[date | None] = mapped_column(Date, nullable=True)
    created_by: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime)
    note: Mapped[str] = mapped_column(String(255), default="")


class GroupShare(Base):
    """A group's fair share of one GPU model: a whole-number weight (a group without a row has the default)."""

    __tablename__ = "gpu_group_shares"

    # the hub whose GPUs it shares (migration 0018)
    hub: Mapped[str] = mapped_column(String(63), primary_key=True, default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    group: Mapped[str] = mapped_column(String(255), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64), primary_key=True)
    share: Mapped[int] = mapped_column(Integer)
    updated: Mapped[datetime] = mapped_column(DateTime)
    updated_by: Mapped[str] = mapped_column(String(255))


# -- the schedule at work (migration 0015; rows: queries/schedule.py) ------------------------------------------


class ScheduleOrder(Base):
    """A session the hub's scheduler told to stop at ``stop_at``: ``kind`` ``preempted`` or ``reserved``.

    Why, in words: ``reason_key`` (a key of :data:`jupyterhub_gpu.scheduler.TEXTS`) and ``reason_values`` (JSON),
    so that each reader's language words it. The gpu service sends the notice (``noticed_at``) and stops the
    server at ``stop_at`` (``done_at``). The ``preempted`` rows are the ledger's preemption records.
    """

    __tablename__ = "gpu_schedule_orders"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # the hub of the session (migration 0017): its scheduler gave the order, its gpu service carries it out
    hub: Mapped[str] = mapped_column(String(63), default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    user: Mapped[str] = mapped_column(String(255))
    server_name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(16))
    stop_at: Mapped[datetime] = mapped_column(DateTime)
    decided_at: Mapped[datetime] = mapped_column(DateTime)
    reason_key: Mapped[str] = mapped_column(String(32))
    reason_values: Mapped[str] = mapped_column(Text)
    for_user: Mapped[str | None] = mapped_column(String(255), nullable=True)
    noticed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    done_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, index=True)
    # what the stop serves ("request:<user/server>", "reservation:<id>"); withdrawn when it is gone before the time
    cause: Mapped[str | None] = mapped_column(String(255), nullable=True)
    withdrawn_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class QueueEntry(Base):
    """One waiting request of a hub's queue, as that hub last published it (``key``: ``user/server``)."""

    __tablename__ = "gpu_queue"

    # each hub publishes its own queue (migration 0017): equal user and server names on two hubs are two entries
    hub: Mapped[str] = mapped_column(String(63), primary_key=True, default=DEFAULT_HUB, server_default=DEFAULT_HUB)
    key: Mapped[str] = mapped_column(String(512), primary_key=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    server_name: Mapped[str] = mapped_column(String(255))
    profile: Mapped[str] = mapped_column(String(64))
    gpu_model: Mapped[str] = mapped_column(String(64))
    count: Mapped[int] = mapped_column(Integer)
    tier: Mapped[str] = mapped_column(String(16))
    group: Mapped[str | None] = mapped_column(String(255), nullable=True)
    arrived: Mapped[datetime] = mapped_column(DateTime)
    position: Mapped[int] = mapped_column(Integer)
    length: Mapped[int] = mapped_column(Integer)
    wait_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason_key: Mapped[str] = mapped_column(String(32))
    reason_values: Mapped[str] = mapped_column(Text)
    updated: Mapped[datetime] = mapped_column(DateTime)


# -- the hubs that share the ledger (migration 0017; rows: ledger/hubs.py) ------------------------------------------


class HubMember(Base):
    """A hub process (``role`` ``hub``: its spawners) or a gpu service (``service``) that opened the ledger.

    Written at its start and kept fresh (``heartbeat``) while it runs, so that the doctor sees which hubs share
    the ledger under which names, and finds two hubs that run under one name. ``id`` is ``<role>:<identity>``
    for a member that knows its hub's identity (one row per hub and role, which a restart takes over), else a
    random id of the process (:mod:`jupyterhub_gpu.ledger.hubs`).
    """

    __tablename__ = "gpu_hub_members"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    hub: Mapped[str] = mapped_column(String(63), index=True)
    role: Mapped[str] = mapped_column(String(8))  # hub | service
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    api_url: Mapped[str] = mapped_column(String(1024), default="", server_default="")
    version: Mapped[str] = mapped_column(String(64), default="", server_default="")
    started: Mapped[datetime] = mapped_column(DateTime)
    heartbeat: Mapped[datetime] = mapped_column(DateTime)


metadata = Base.metadata


# -- spawns that passed the budget check on any hub (migration 0018; rows: ledger/holds.py) ----------------------


class SpawnHold(Base):
    """A spawn that passed the budget check and is not recorded yet: every hub's check counts its first minutes.

    ``key`` is the server's ``user/server`` on its ``hub``; the hold ends when the start is recorded or fails,
    or at ``expires`` (its hub died while it held).
    """

    __tablename__ = "gpu_spawn_holds"

    hub: Mapped[str] = mapped_column(String(63), primary_key=True)
    key: Mapped[str] = mapped_column(String(512), primary_key=True)
    user: Mapped[str] = mapped_column(String(255))
    pool: Mapped[str | None] = mapped_column(String(255), nullable=True)
    rate_micros: Mapped[int] = mapped_column(BigInteger)
    gpu_count: Mapped[int] = mapped_column(Integer)
    created: Mapped[datetime] = mapped_column(DateTime)
    expires: Mapped[datetime] = mapped_column(DateTime, index=True)
