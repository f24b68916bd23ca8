"""GPUSpawnerMixin: the Spawner contract of jupyterhub-gpu, over any JupyterHub spawner.

Mixed in front of a concrete spawner (``GPUDockerSpawner``, ``GPUKubeSpawner``, ``GPULocalSpawner``): profiles
the user's groups allow, with prices and free GPUs; an exclusive GPU assignment kept in the spawner state; a
wait queue reported through the spawn's progress events; the server's environment. This module holds the traits
(each with a ``c.GPUDockerSpawner.x = ...`` example), JupyterHub's hooks and the ``gpu_*`` hooks a backend
overrides; the work is done by modules named for it: :mod:`.choosing` (the form's hooks), :mod:`.launch` (the
pre-spawn hook and the start), :mod:`.queueing` (policy, planner, the wait for GPUs), :mod:`.stopping` (polls,
stops, stuck servers), :mod:`.progress` (events, refusals), :mod:`.records` (the session's ledger writes),
:mod:`.budget`, :mod:`.singleuser`, :mod:`.profiles`, :mod:`.form`, :mod:`.assign` and :mod:`.startup`. A
session's facts are one record, :class:`jupyterhub_gpu.session.SessionStart`: the state and the server's
environment are written from it and read back into it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from traitlets import Bool, Callable, Dict, Float, Int, List, Unicode, Union, default, validate
from traitlets.config import Configurable

from jupyterhub_gpu.env import JOB_ID
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB
from jupyterhub_gpu.ledger.store import shared_ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners import choosing, launch, progress, queueing, stopping
from jupyterhub_gpu.spawners.assign.host import BackendName, shared_allocator
from jupyterhub_gpu.spawners.assign.plan import Planner
from jupyterhub_gpu.spawners.assign.protocol import Allocator, AssignmentConflict
from jupyterhub_gpu.spawners.budget import drop_reservation
from jupyterhub_gpu.spawners.form import describe_profile
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import Profile
from jupyterhub_gpu.spawners.singleuser import kernel_cull_args, server_token_scopes

DEFAULT_SIMULATED_GPUS = [
    {"model": "T4", "count": 2, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]


class GPUSpawnerMixin(Configurable):
    """Profiles, exclusive GPU assignment and a fair wait queue for any JupyterHub spawner."""

    #: Docker and Kubernetes need an image per profile; local processes do not.
    _require_image = True

    profiles = Union(
        [List(Dict()), Callable()],
        default_value=[],
        help="""
        The GPU profiles users may choose from: a list of dicts, or a callable
        ``f(spawner)`` (may be async) that returns one.

        Fields: ``slug`` (required), ``display_name`` and ``description`` (a string, or one
        per language: ``{"en": "1× T4", "zh-CN": "1 块 T4"}``, "en" required), ``gpu_model``
        (matched against the GPU names, e.g. "T4" or "A100-SXM4-40GB"), ``gpu_count``
        (0 for CPU-only), ``image``, ``price_per_gpu_hour`` (a decimal string),
        ``price_per_hour`` (a flat price per server, default "0"),
        ``allowed_groups`` (JupyterHub groups; empty means everyone),
        ``cpu_limit``, ``mem_limit`` ("8G") and ``default`` (true for one profile).

            c.GPUDockerSpawner.profiles = [
                {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1,
                 "image": "jupyterhub-gpu/tensorflow:2.15", "price_per_gpu_hour": "3.00",
                 "mem_limit": "16G", "cpu_limit": 4, "default": True},
                {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1,
                 "image": "jupyterhub-gpu/tensorflow:2.15", "price_per_gpu_hour": "15.00",
                 "allowed_groups": ["thesis"]},
            ]

        A bad profile stops the hub at startup with a message naming it.
        """,
    ).tag(config=True)

    currency = Unicode(
        "USD",
        help="""
        ISO 4217 code of the currency prices are given in, in capitals (a code in
        use today: "RMB" is refused with "did you mean 'CNY'?"). The lab's one
        currency: the hub publishes it to the ledger at start, and the gpu service
        takes it from there (``GPUService.currency`` need not be set; set otherwise,
        the service refuses to start).

            c.GPUDockerSpawner.currency = "CNY"
        """,
    ).tag(config=True)

    currency_symbol = Unicode(
        None,
        allow_none=True,
        help="""
        Symbol shown for amounts in every language; None (the default): each
        language's own, from the Unicode CLDR data (CNY: "CN¥" in English, "¥" in
        Chinese). Published to the service with ``currency``.

            c.GPUDockerSpawner.currency_symbol = "¥"
        """,
    ).tag(config=True)

    gpu_backend = BackendName(
        default_value="nvml",
        help="""
        Where the GPU inventory comes from: "nvml" (read the host's GPUs with
        nvidia-ml-py; MIG instances by their own UUIDs), "static" (declared in
        ``static_gpus``), or "simulated" (demo and tests; every GPU is named "Simulated ...").
        Any GPU backend of ``jupyterhub_gpu.gpus`` (docs/architecture.md, "Adding a GPU backend").

            c.GPUDockerSpawner.gpu_backend = "static"
        """,
    ).tag(config=True)

    static_gpus = List(
        Dict(),
        help="""
        The GPUs of this host when ``gpu_backend = "static"``.

            c.GPUDockerSpawner.static_gpus = [
                {"index": 0, "uuid": "GPU-5d4f6c2a-...", "name": "Tesla T4", "memory_gb": 16},
            ]
        """,
    ).tag(config=True)

    simulated_gpus = List(
        Dict(),
        default_value=DEFAULT_SIMULATED_GPUS,
        help="""
        The simulated GPUs when ``gpu_backend = "simulated"``.

            c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
        """,
    ).tag(config=True)

    queue_timeout = Float(
        600,
        help="""
        Seconds a spawn may wait in the queue for a free GPU before it fails with
        a message. The wait comes before the hub's ``start_timeout`` starts
        counting (the pre-spawn hook), so only the time really spent in the
        queue is added to a spawn, and ``start_timeout`` stays what is set.

            c.GPUDockerSpawner.queue_timeout = 1800
        """,
    ).tag(config=True)

    stuck_server_retry = Float(
        30,
        help="""
        Seconds between attempts to remove a server whose stop failed and that still runs (a container engine
        that timed out, even on a forced removal). Its GPUs stay taken until it has ended, so that they are
        never handed to a second server; its bill ends at the stop. A hub restart removes it too.
        """,
    ).tag(config=True)

    @validate("stuck_server_retry")
    def _valid_stuck_server_retry(self, proposal):
        if not 0 < proposal.value <= 3600:
            raise ValueError(f"stuck_server_retry must be between 0 and 3600 seconds, got {proposal.value}")
        return proposal.value

    fair_share = Bool(
        False,
        help="""
        Serve the wait queue by fair share between groups (docs/scheduling.md): a waiting request is served by
        its group's recent GPU use against its share (``jupyterhub-gpu shares``; 1 each by default), with use
        decayed by ``fair_share_half_life``, first come within a group, and each ``fair_share_ageing`` of
        waiting moving a request up so that nothing starves. False: first come, first served. Needs
        ``ledger_db_url``. Reservations and the preemptible tier work either way.

            c.GPUDockerSpawner.fair_share = True
        """,
    ).tag(config=True)

    fair_share_half_life = Float(
        7 * 24 * 3600, help="Seconds after which a GPU-hour counts half in a group's fair-share use (7 days)."
    ).tag(config=True)

    fair_share_ageing = Float(
        3600, help="Seconds of waiting that lift a request's rank by one share's worth of use (1 hour)."
    ).tag(config=True)

    preempt_min_runtime = Float(
        600,
        help="""
        Seconds a preemptible session runs before it may be preempted (10 minutes): it gets past its start-up
        first. A profile is preemptible with ``"preemptible": True`` (and a ``"price_factor"``).
        """,
    ).tag(config=True)

    preempt_grace = Float(
        120,
        help="""
        Seconds between a preemption's notice and the stop (2 minutes; Slurm's GraceTime): the kernels get the
        interrupt that ``CheckpointAndResume`` answers by saving, when the server is stopped.
        """,
    ).tag(config=True)

    reservation_lead = Float(
        300, help="Seconds before a class reservation's window that other sessions on its GPUs stop (5 minutes)."
    ).tag(config=True)

    schedule_interval = Float(
        5,
        help="""
        Seconds between the scheduler's cycles while requests wait, reservations exist or stops are ordered (and
        the most its view of the ledger's shares, use and reservations may be behind).
        """,
    ).tag(config=True)

    @validate(
        "fair_share_half_life",
        "fair_share_ageing",
        "preempt_min_runtime",
        "preempt_grace",
        "reservation_lead",
        "schedule_interval",
    )
    def _valid_schedule_seconds(self, proposal):
        value, name = proposal.value, proposal.trait.name
        low = 0 if name in ("preempt_min_runtime", "preempt_grace", "reservation_lead") else 1
        if not low <= value <= 366 * 24 * 3600:
            raise ValueError(f"{name} must be between {low} seconds and a year, got {value}")
        return value

    ledger_db_url = Unicode(
        "",
        help="""
        The gpu service's ledger database (the same URL as ``GPUService.db_url``).
        When set, the spawner records each session's start and stop there (so
        nothing is lost while the service is down) and refuses a spawn the
        user's budgets cannot afford. Empty: no billing.

            c.GPUDockerSpawner.ledger_db_url = "sqlite:////srv/jupyterhub/jupyterhub_gpu.sqlite"
        """,
    ).tag(config=True)

    hub_name = Unicode(
        DEFAULT_HUB, help="This hub's name on a shared ledger, recorded with its sessions: c.GPUService.hub_name's"
    ).tag(config=True)

    kernel_cull_idle_timeout = Int(
        1800,
        help="""
        Seconds after which an idle kernel is shut down inside the user's server,
        so that an idle TensorFlow kernel lets go of the GPU memory it holds
        (jupyter_server's ``MappingKernelManager.cull_idle_timeout``); 0 turns it off.
        Busy kernels are never culled.

            c.GPUDockerSpawner.kernel_cull_idle_timeout = 1800
        """,
    ).tag(config=True)

    kernel_cull_interval = Int(
        60, help="Seconds between the server's checks for idle kernels (``MappingKernelManager.cull_interval``)."
    ).tag(config=True)

    kernel_cull_connected = Bool(
        True,
        help="""
        Cull idle kernels even while a browser tab is connected to them: an open
        but forgotten notebook must not hold a GPU's memory overnight.
        """,
    ).tag(config=True)

    @validate("kernel_cull_idle_timeout", "kernel_cull_interval")
    def _valid_cull_seconds(self, proposal):
        if proposal.value < 0:
            raise ValueError(f"{proposal.trait.name} must not be negative, got {proposal.value}")
        return proposal.value

    def get_args(self):
        return super().get_args() + kernel_cull_args(
            self.kernel_cull_idle_timeout, self.kernel_cull_interval, self.kernel_cull_connected
        )

    gpu_service_url = Unicode(
        "",
        help="""
        The gpu service as the single-user servers reach it, for their server
        extension (samples, budget, notices); empty when there is no service.

            c.GPUDockerSpawner.gpu_service_url = "http://127.0.0.1:10101/services/gpu/"
        """,
    ).tag(config=True)

    @default("server_token_scopes")
    def _gpu_server_token_scopes(self):
        return server_token_scopes(bool(self.gpu_service_url))

    budget_timezone = Unicode(
        "UTC",
        help="""
        The lab's time zone: budget weeks and months start at its midnight, and
        the pages show times in it. Published to the gpu service with ``currency``
        (``GPUService.timezone`` need not be set).

            c.GPUDockerSpawner.budget_timezone = "Asia/Shanghai"
        """,
    ).tag(config=True)

    budget_min_minutes = Int(
        10,
        help="""
        A spawn is refused unless every budget of the user can still pay this many
        minutes of the chosen profile.

            c.GPUDockerSpawner.budget_min_minutes = 10
        """,
    ).tag(config=True)

    @validate("budget_timezone")
    def _valid_budget_timezone(self, proposal):
        try:
            ZoneInfo(proposal.value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"budget_timezone must be an IANA name such as 'Asia/Shanghai', got {proposal.value!r}"
            ) from None
        return proposal.value

    @validate("budget_min_minutes")
    def _valid_min_minutes(self, proposal):
        if not 0 <= proposal.value <= 24 * 60:
            raise ValueError(f"budget_min_minutes must be between 0 and 1440, got {proposal.value}")
        return proposal.value

    @validate("queue_timeout")
    def _valid_queue_timeout(self, proposal):
        if not 0 < proposal.value <= 7 * 24 * 3600:
            raise ValueError(f"queue_timeout must be between 0 and one week in seconds, got {proposal.value}")
        return proposal.value

    sample_push_interval = Float(
        30,
        help="""
        Seconds between the servers' pushes of GPU samples to the gpu service (the
        server extension's ``push_interval``). A server found ended whose real end
        is unknown is billed to its last pushed sample plus this (docs/service.md).
        """,
    ).tag(config=True)

    @validate("sample_push_interval")
    def _valid_push_interval(self, proposal):
        if not 0 < proposal.value <= 3600:
            raise ValueError(f"sample_push_interval must be between 0 and 3600 seconds, got {proposal.value}")
        return proposal.value

    allow_spawn_from_link = Bool(
        False,
        help="""
        Whether a link may start a server (``GET /hub/spawn?profile=a100``, JupyterHub's spawn from query
        arguments). Off by default: a server starts only from the form (a POST with its XSRF token) or the
        REST API, so a link another student sends cannot start a billed server on your budget. A link with
        only ``lang`` (the language switch) shows the form.
        """,
    ).tag(config=True)

    # -- shared pieces -----------------------------------------------------
    @property
    def gpu_currency(self) -> Currency:
        return Currency.from_config(self.currency, self.currency_symbol)

    @property
    def allocator(self) -> Allocator:
        """The hub-wide allocator this spawner takes its GPUs from (a host's devices; Kubernetes: the cluster's)."""
        return shared_allocator(self.gpu_backend, self.static_gpus, self.simulated_gpus)

    async def gpu_attach_planner(self) -> Planner | None:
        """The hub's scheduler, told the GPU profiles (:func:`.queueing.attach_planner`); None without a ledger."""
        return await queueing.attach_planner(self)

    @property
    def ledger(self):
        """The shared ledger of this hub, or None when billing is off."""
        if not self.ledger_db_url:
            return None
        return shared_ledger(self.ledger_db_url, self.hub_name)

    _gpu_pool: str | None = None
    _gpu_resume = False  # put back in the queue when preempted (a preemptible profile's choice)

    @property
    def _gpu_key(self) -> str:
        return f"{self.user.name}/{self.name}"

    def _gpu_group_names(self) -> list[str]:
        return [g.name for g in getattr(self.user, "groups", [])]

    async def gpu_profiles(self) -> list[Profile]:
        """Every configured profile, validated, with the admins' edits (:func:`.choosing.profiles_of`)."""
        return await choosing.profiles_of(self)

    async def allowed_profiles(self) -> tuple[list[Profile], list[Profile]]:
        """(profiles this user may use, all profiles)."""
        return await choosing.allowed_of(self)

    # -- the form (:mod:`.choosing`) ----------------------------------------
    @default("options_form")
    def _gpu_options_form_default(self):
        return self._render_gpu_options_form

    def gpu_profile_summary(self, profile: Profile, currency: Currency, lang: str = "en") -> str:
        """The form's line for a profile in ``lang``: price, free GPUs, waiting servers."""
        return describe_profile(profile, self.allocator, currency, lang)

    def gpu_language(self) -> str:
        """The language of the request JupyterHub is serving for this spawner (:func:`.choosing.request_language`)."""
        return choosing.request_language(self)

    async def _render_gpu_options_form(self, spawner=None):
        return await choosing.render_form(self)

    @default("options_from_form")
    def _gpu_options_from_form_default(self):
        return self._gpu_options_from_form

    async def _gpu_options_from_form(self, formdata, spawner=None):
        return await choosing.options_of_form(self, formdata)

    async def options_from_query(self, query_data):
        return await choosing.options_of_query(self, query_data)

    @default("apply_user_options")
    def _gpu_apply_user_options_default(self):
        return choosing.take_user_options

    # -- spawning (:mod:`.launch`, :mod:`.queueing`, :mod:`.progress`) -------
    _gpu_spawn_task: asyncio.Task | None = None
    _gpu_job_id: str | None = None
    _gpu_alive_noted: datetime | None = None  # when a poll's "running" was last written to the ledger
    _gpu_in_stop = False

    def _gpu_reset(self):
        self._gpu_stopping = False
        self._gpu_profile: Profile | None = None
        self._gpu_session: SessionStart | None = None  # the running session's one record
        self._gpu_env: dict = {}
        self._gpu_events: list[dict] = []
        self._gpu_events_changed: asyncio.Future | None = None
        self._gpu_devices: list[GPUDevice] = []  # granted by the queue at the pre-spawn hook
        self._gpu_granted_at: datetime | None = None
        self._gpu_in_start = False  # between the pre-spawn hook and the end of start()
        self._gpu_launching = False  # inside start(), which then owns the session and the GPUs
        self._gpu_abort = False  # stopped (or its state cleared) while starting
        self._gpu_recorded = False
        self._gpu_last_alive: datetime | None = None  # the last poll that found the server running
        self._gpu_lang = "en"  # the spawn's language: its messages, refusals and the server's env

    def __init__(self, *args, **kwargs):
        self._gpu_reset()
        super().__init__(*args, **kwargs)

    def gpu_refusal(self, worded, *, reason: str, status_code: int = 400, lang: str | None = None, log_message=""):
        """A refusal the student reads in the spawn's language (:func:`.progress.refusal`)."""
        return progress.refusal(
            self, worded, reason=reason, status_code=status_code, lang=lang, log_message=log_message
        )

    def _gpu_say(self, progress_percent: int, worded) -> None:
        progress.say(self, progress_percent, worded)

    def _gpu_emit(self, event: dict) -> None:
        progress.emit(self, event)

    def _gpu_progress(self, done=lambda: False):
        return progress.events(self, done)

    async def progress(self):
        """Spawn progress: queue position while waiting, then the assignment."""
        async for event in progress.events(self):
            yield event

    async def run_pre_spawn_hook(self):
        """Validate the chosen profile, then wait for its GPUs (:func:`.launch.pre_spawn`)."""
        return await launch.pre_spawn(self, super().run_pre_spawn_hook)

    def _gpu_stopped_while_starting(self):
        return progress.stopped_while_starting(self)

    async def start(self):
        return await launch.start(self, super().start, super().stop)

    def get_env(self):
        env = super().get_env()
        env.update(self._gpu_env)
        if self._gpu_job_id:
            env[JOB_ID] = self._gpu_job_id  # the server runs this job (serverext/jobs.py)
        return env

    # -- hooks a backend overrides ------------------------------------------
    def gpu_launch_began(self) -> bool:
        """Whether the backend's failed ``start()`` may have launched a server that outlives it (the default: no;
        Kubernetes: a pod asked for stays, holding its GPUs, when KubeSpawner's start times out)."""
        return False

    async def gpu_confirm_start(self) -> None:
        """Hook run when the server is up, before its start is recorded: set when billing really began (the default
        keeps the GPUs' assignment; Kubernetes moves it to the pod's binding: a wait unscheduled is not billed)."""

    async def gpu_stopped_at(self) -> datetime | None:
        """When the server really stopped, if the spawner knows (Docker does); None means now."""
        return None

    @classmethod
    def gpu_orphans(cls, probe, api_url: str) -> list[tuple[str, str, object, dict[str, str]]]:
        """The servers of this hub (``api_url``) running now, as ``(session id, description, handle, env)``, with the
        environment the spawner gave them (a restarted hub bills an orphan from it); the default knows none."""
        return []

    @classmethod
    def gpu_reap(cls, probe, handle) -> None:
        """Stop one server found by :meth:`gpu_orphans` (blocking; run in a thread)."""

    async def gpu_prepare(self, profile: Profile, devices: list[GPUDevice]) -> None:
        """Hook for the concrete spawner: apply the profile (image, limits) before start."""

    async def gpu_before_queue(self, profile: Profile) -> None:
        """Hook run in the pre-spawn hook before the queue: no GPU is held, nothing is billed, and the hub's
        ``start_timeout`` does not count yet (Docker pulls a missing image here: docs/images.md)."""

    async def gpu_check_image(self, profile: Profile) -> None:
        """Refuse an image that no profile names: only images named by profiles may run."""
        images = {p.image for p in await self.gpu_profiles()}
        if profile.image not in images:
            raise self.gpu_refusal(Phrase("Image {image} is not allowed", image=repr(profile.image)), reason="image")

    async def _gpu_remove_session(self, session_id: str) -> tuple[bool, bool]:
        """Remove the servers of this hub running ``session_id``: (any found, one still there after); by default
        :func:`.stopping.remove_session`; Kubernetes deletes the server's pod by its session label and uid."""
        return await stopping.remove_session(self, session_id)

    # -- polls and stops (:mod:`.stopping`) ----------------------------------
    async def poll(self):
        """The server's status; a server found stopped has its stop recorded in the ledger here."""
        session = self._gpu_session
        return await stopping.after_poll(self, session, await super().poll())

    async def stop(self, now=False):
        if self._gpu_in_stop:
            # re-entered from the backend's own poll (KubeSpawner's poll stops a pod that ended)
            return await super().stop(now=now)
        self._gpu_in_stop = True
        try:
            return await stopping.stop(self, now, super().stop)
        finally:
            self._gpu_in_stop = False

    async def _gpu_record_stop(self, session: SessionStart, stopped: datetime, reason: str) -> None:
        await stopping.record(self, session, stopped, reason)

    def _gpu_release(self, park_as: str | None = None) -> list[str]:
        return stopping.release(self, park_as)

    # -- state -------------------------------------------------------------
    def get_state(self):
        state = super().get_state()
        if self._gpu_session is not None:
            state["gpu"] = self._gpu_session.to_spawner_state()
        return state

    def load_state(self, state):
        super().load_state(state)
        gpu = state.get("gpu") if isinstance(state, dict) else None
        if not gpu:
            return
        try:
            self._gpu_session = SessionStart.from_spawner_state(self.user.name, self.name, (), gpu)
        except (KeyError, TypeError, ValueError, ArithmeticError) as e:
            self.log.error("GPU session of %s not readable from its state (%r); its GPUs stay taken", self._gpu_key, e)
        try:
            self.allocator.restore(self._gpu_key, list(gpu.get("devices", [])))
        except AssignmentConflict as e:
            self.log.error("GPU assignment of %s not restored: %s", self._gpu_key, e)
        except InventoryError as e:
            self.log.error("GPU inventory unavailable while restoring %s: %s", self._gpu_key, e)

    def clear_state(self):
        # JupyterHub's User.stop() calls stop() only for a server that runs; one still waiting in the
        # queue or launching only has its state cleared: take it out of the queue, and let start() give up
        self.allocator.cancel(self._gpu_key)
        if self._gpu_in_start:
            self._gpu_abort = True
        if self._gpu_launching:
            # start() stops what it launched and releases the GPUs as it unwinds: the backend keeps its
            # handle (pid, container id) until then, and no GPU is handed on while the server may run
            return
        super().clear_state()
        drop_reservation(self)
        self._gpu_devices = []
        self._gpu_release()

    @property
    def gpu_session(self) -> dict:
        """The running session as the spawner's state keeps it (empty when not running)."""
        return self._gpu_session.to_spawner_state() if self._gpu_session is not None else {}
