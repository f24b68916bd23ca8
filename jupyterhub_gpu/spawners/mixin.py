"""GPUSpawnerMixin: the Spawner contract of jupyterhub-gpu, over any JupyterHub spawner.

Mixed in front of a concrete spawner (``GPUDockerSpawner``, ``GPUKubeSpawner``,
``GPULocalSpawner``) it adds, whatever the spawner:

- a profile form showing only the profiles the user's groups allow, with the
  price per minute and the free/total GPUs of each model right now;
- validation of the user's choice on the server (form and REST API alike);
- an exclusive GPU assignment from the shared allocator, kept in the spawner
  state so that a restarted hub rebuilds it;
- a first-come, first-served queue when no GPU is free, reported through
  JupyterHub's spawn progress events;
- the environment that tells the server its GPUs, profile, rate and session.

This module holds the traits (every option, with a ``c.GPUDockerSpawner.x = ...``
example) and JupyterHub's hooks (``options_form``, ``options_from_form``,
``run_pre_spawn_hook``, ``start``, ``poll``, ``stop``, ``get_state``/``load_state``,
``clear_state``, ``get_env``, ``get_args``, ``progress``), and the ``gpu_*`` hooks a
backend overrides. The work is done by modules with one concern each:
:mod:`.form` (the form's text and HTML), :mod:`.budget` (the spawn's budget check
and its holds), :mod:`.records` (the session's state and its ledger records),
:mod:`.singleuser` (kernel culling, the server's token scopes), :mod:`.profiles`
(parsing and choosing profiles), :mod:`.assign` (the allocators and their queue)
and :mod:`.startup` (the hub's startup check, prices, orphans).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from functools import partial
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub import orm
from jupyterhub.orm import Service
from jupyterhub.spawner import SpawnException
from jupyterhub.utils import maybe_future
from traitlets import (
    Bool,
    Callable,
    Dict,
    Float,
    Int,
    List,
    Unicode,
    Union,
    default,
    validate,
)
from traitlets.config import Configurable

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import JOB_ID, make_gpu_env, memory_limit_of, share_label
from jupyterhub_gpu.gpus.backends import reader_name
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError
from jupyterhub_gpu.i18n import language_of, translator
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.ledger.store import shared_ledger
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.scheduler import FairShare, Fifo, Policy, Preemption, Reservations
from jupyterhub_gpu.session import SessionStart, StopReason, default_pool
from jupyterhub_gpu.spawners.assign.host import BackendName, shared_allocator
from jupyterhub_gpu.spawners.assign.plan import Ask, Planner, ProfileFacts, unit_of
from jupyterhub_gpu.spawners.assign.protocol import (
    AllocationError,
    Allocator,
    AssignmentConflict,
    QueueCancelled,
    QueueTimeout,
)
from jupyterhub_gpu.spawners.assign.restore import wait_restored
from jupyterhub_gpu.spawners.budget import Reservation, check_and_reserve, drop_reservation, profile_binding_groups
from jupyterhub_gpu.spawners.cancel import raise_if_cancelled
from jupyterhub_gpu.spawners.form import (
    assignment_message,
    describe_profile,
    queue_message,
    queue_status,
    render_options_form,
    reserved_note,
)
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import (
    OptionsError,
    Profile,
    ProfileError,
    apply_overrides,
    choose_pool,
    choose_profile,
    form_language,
    job_server_option,
    options_from_form,
    parse_profiles,
    pool_choices,
    resume_choice,
)
from jupyterhub_gpu.spawners.records import (
    evidence_of_life,
    new_session_state,
    note_alive,
    record_start,
    record_stop,
    server_token_id,
    session_choices,
)
from jupyterhub_gpu.spawners.singleuser import kernel_cull_args, server_token_scopes

#: The language of the form that starts a server, and of the form shown again after a refusal, by server
#: (``user/name``). JupyterHub asks one spawner object for the options and may spawn with another (it replaces
#: a failed spawner by one it does not keep, and the next lookup makes a third), so they cannot live on one.
_SPAWN_LANGUAGES: dict[str, str] = {}
_FORM_LANGUAGES: dict[str, str] = {}

#: Query arguments of ``/hub/spawn`` that ask for no spawn: the language switch, a reload after a refused form.
_NOT_SPAWN_ARGUMENTS = frozenset({"lang", "_xsrf"})


class _ShowTheForm(Exception):
    """Raised by ``options_from_query`` for a query that asks for no spawn: JupyterHub then shows the form,
    with no error above it (its message is empty)."""

    def __init__(self):
        super().__init__("")
        self.jupyterhub_message = ""


DEFAULT_SIMULATED_GPUS = [
    {"model": "T4", "count": 2, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]


def _gpu_take_user_options(spawner, user_options) -> None:
    """JupyterHub's ``apply_user_options`` hook: the GPU spawners handle ``profile``, ``pool`` and ``job_id``.

    Without a hook JupyterHub (5.3 and later) logs "Received unhandled user_options" at every spawn. The
    options are checked and applied by ``run_pre_spawn_hook``, which JupyterHub calls right after this
    hook and which also serves a ``start()`` outside the hub's spawn sequence, so nothing is done here
    twice. An ``apply_user_options`` set in the config replaces this one (and then sees these options).
    """


#: seconds the immediate stop after a failed one may take before the server is removed by its session id
FORCED_STOP_TIMEOUT = 30

#: the tasks that remove servers whose stop failed (:meth:`GPUSpawnerMixin._gpu_park`), kept from the collector
_STUCK: set[asyncio.Task] = set()


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

    # -- shared pieces -----------------------------------------------------
    @property
    def gpu_currency(self) -> Currency:
        return Currency.from_config(self.currency, self.currency_symbol)

    @property
    def allocator(self) -> Allocator:
        """The hub-wide allocator this spawner takes its GPUs from (a host's devices; Kubernetes: the cluster's)."""
        return shared_allocator(self.gpu_backend, self.static_gpus, self.simulated_gpus)

    def gpu_policy(self):
        """The scheduling policy these settings make (docs/scheduling.md)."""
        order = (
            FairShare(
                half_life=timedelta(seconds=self.fair_share_half_life), ageing=timedelta(seconds=self.fair_share_ageing)
            )
            if self.fair_share
            else Fifo()
        )
        return Policy(
            "fair-share" if self.fair_share else "fifo",
            order,
            Preemption(
                min_runtime=timedelta(seconds=self.preempt_min_runtime), grace=timedelta(seconds=self.preempt_grace)
            ),
            Reservations(lead=timedelta(seconds=self.reservation_lead)),
        )

    def gpu_planner(self) -> Planner | None:
        """The hub's scheduler of this allocator's queue, attached on first use (None without a ledger)."""
        ledger = self.ledger
        if ledger is None:
            return None
        allocator = self.allocator
        planner = getattr(allocator, "planner", None)
        policy = self.gpu_policy()
        if planner is None or planner.ledger is not ledger:
            planner = Planner(ledger, policy, ZoneInfo(self.budget_timezone), refresh=self.schedule_interval)
            allocator.use_planner(planner)
        else:
            planner.policy = policy
        return planner

    async def gpu_attach_planner(self) -> Planner | None:
        """:meth:`gpu_planner`, told the hub's GPU profiles (the running sessions are counted by them).

        At a spawn, at the form, and at the hub's start for the servers it restored: a hub restarted while servers
        run schedules at once, so a reservation booked meanwhile tells them their end before anyone spawns.
        """
        planner = self.gpu_planner()
        if planner is not None:
            planner.note_profiles(
                {
                    p.slug: ProfileFacts(p.gpu_model, unit_of(p.gpu_share, p.mig))
                    for p in await self.gpu_profiles()
                    if p.gpu_count
                }
            )
        return planner

    @property
    def ledger(self):
        """The shared ledger of this hub, or None when billing is off."""
        if not self.ledger_db_url:
            return None
        return shared_ledger(self.ledger_db_url)

    _gpu_pool: str | None = None
    _gpu_resume = False  # put back in the queue when preempted (a preemptible profile's choice)

    async def gpu_choose_pool(self, options, profile: Profile) -> str | None:
        """The one group that pays for this session (``pool`` in the options, else the default; docs/admin.md)."""
        ledger = self.ledger
        rules = await asyncio.to_thread(ledger.budget_rules) if ledger is not None else []
        return choose_pool(options, profile, self._gpu_group_names(), self._gpu_binding_groups(rules, profile))

    def _gpu_binding_groups(self, rules, profile: Profile) -> set[str]:
        """The groups whose budget binds this profile now (:func:`.budget.profile_binding_groups`)."""
        return profile_binding_groups(rules, profile, utcnow(), ZoneInfo(self.budget_timezone))

    async def gpu_budget_refusal(self, profile: Profile, pool: str | None = None, reserve: bool = False):
        """Why the budgets this session would draw from cannot afford ``budget_min_minutes`` of ``profile``, or None.

        The refusal is worded when it is shown: ``refusal(lang)`` (:data:`.budget.Refusal`).

        Those are the user's own budget and the budget of the one group that pays
        (``pool``, by default the one chosen at this spawn), computed by
        :meth:`Ledger.statuses_of` like everywhere else. Servers of those budgets
        that started less than ``budget_min_minutes`` ago, and spawns that passed
        this check but are not recorded yet, count with their first
        ``budget_min_minutes`` (:func:`.budget.minimums_held`). With ``reserve``, a spawn
        that passes holds its own minimum until its start is recorded; the check
        and the hold are one step for the whole hub, so concurrent spawns cannot
        all pass on the same remaining budget.
        """
        ledger = self.ledger
        if ledger is None:
            return None
        pool = self._gpu_pool if pool is None else pool
        request = Reservation(self.user.name, pool, to_micros(profile.rate_per_minute), profile.gpu_count)
        return await check_and_reserve(
            ledger,
            self.ledger_db_url,
            self._gpu_key,
            request,
            reserve=reserve,
            min_minutes=self.budget_min_minutes,
            now=utcnow(),
            tz=ZoneInfo(self.budget_timezone),
            format_money=self.gpu_currency.format,
        )

    @property
    def _gpu_key(self) -> str:
        return f"{self.user.name}/{self.name}"

    def _gpu_group_names(self) -> list[str]:
        return [g.name for g in getattr(self.user, "groups", [])]

    async def gpu_profiles(self) -> list[Profile]:
        """Every configured profile, validated (a callable ``profiles`` is evaluated)."""
        raw = self.profiles
        if callable(raw):
            raw = await maybe_future(raw(self))
        try:
            profiles = parse_profiles(raw, require_image=self._require_image)
        except ProfileError as e:
            raise self.gpu_refusal(
                Phrase("The GPU profiles are misconfigured; please tell your administrator."),
                reason="profiles",
                log_message=f"Invalid profiles: {e}",
                status_code=500,
                lang=self.gpu_language(),
            ) from e
        ledger = self.ledger
        if ledger is None:
            return profiles
        # prices and allowed groups edited by admins on the usage pages (docs/admin.md)
        return apply_overrides(profiles, await asyncio.to_thread(load_overrides, ledger))

    async def allowed_profiles(self) -> tuple[list[Profile], list[Profile]]:
        """(profiles this user may use, all profiles)."""
        profiles = await self.gpu_profiles()
        groups = self._gpu_group_names()
        return [p for p in profiles if p.allows(groups)], profiles

    # -- the form ----------------------------------------------------------
    @default("options_form")
    def _gpu_options_form_default(self):
        return self._render_gpu_options_form

    def gpu_profile_summary(self, profile: Profile, currency: Currency, lang: str = "en") -> str:
        """The form's line for a profile in ``lang``: price, free GPUs, waiting servers."""
        return describe_profile(profile, self.allocator, currency, lang)

    def gpu_language(self) -> str:
        """The language of the request JupyterHub is serving for this spawner (``spawner.handler``).

        The switch's cookie, then ``Accept-Language`` (:func:`.i18n.language_of`); English without a
        request (a spawn outside a request, a hub restart) or for a request that cannot be read.
        """
        handler = getattr(self, "handler", None)
        if handler is None or getattr(handler, "request", None) is None:
            return "en"
        try:
            return language_of(handler)
        except Exception:  # a malformed header must not break the form or the spawn
            self.log.debug("language of %s not read", self._log_name, exc_info=True)
            return "en"

    async def _render_gpu_options_form(self, spawner=None):
        # re-shown after a refusal of the same request: in the language of the refused form or spawn
        lang = _FORM_LANGUAGES.pop(self._gpu_key, None) or self.gpu_language()
        allowed, _ = await self.allowed_profiles()
        currency = self.gpu_currency
        previous = (self.orm_spawner.user_options or {}).get("profile") if self.orm_spawner else None
        planner = await self.gpu_attach_planner()
        if planner is not None:
            await planner.fresh()
        zone, now = ZoneInfo(self.budget_timezone), utcnow()

        def summary(p: Profile) -> str:
            line = self.gpu_profile_summary(p, currency, lang)
            note = (
                reserved_note(planner.view.reservations, p.gpu_model, now, zone, lang, share=p.gpu_share, mig=p.mig)
                if planner
                else None
            )
            return f"{line} · {note}" if note and p.gpu_count else line

        return render_options_form(
            allowed,
            previous,
            summary,
            simulated=self.allocator.simulated(),
            pools=await self._gpu_pool_options(allowed),
            lang=lang,
        )

    async def _gpu_pool_options(self, allowed: list[Profile]) -> list[str]:
        """The groups the form offers to pay (any profile's choices); shown only when there is a choice."""
        ledger = self.ledger
        rules = await asyncio.to_thread(ledger.budget_rules) if ledger is not None else []
        groups = self._gpu_group_names()
        choices = (pool_choices(p, groups, self._gpu_binding_groups(rules, p)) for p in allowed)
        return list(dict.fromkeys(g for some in choices for g in some))

    @default("options_from_form")
    def _gpu_options_from_form_default(self):
        return self._gpu_options_from_form

    async def _gpu_options_from_form(self, formdata, spawner=None):
        # JupyterHub's POST does not set spawner.handler: the form says the language it was shown in
        lang = form_language(formdata) or self.gpu_language()
        allowed, everything = await self.allowed_profiles()
        try:
            options = options_from_form(formdata, allowed, everything)
        except OptionsError as e:
            # shown on the spawn page, above the form shown again; nothing is started
            raise self.gpu_refusal(e.phrase, reason="options", lang=lang) from None
        _SPAWN_LANGUAGES[self._gpu_key] = lang  # the spawn this form starts speaks it
        return options

    allow_spawn_from_link = Bool(
        False,
        help="""
        Whether a link may start a server (``GET /hub/spawn?profile=a100``, JupyterHub's spawn from query
        arguments). Off by default: a server starts only from the form (a POST with its XSRF token) or the
        REST API, so a link another student sends cannot start a billed server on your budget. A link with
        only ``lang`` (the language switch) shows the form.
        """,
    ).tag(config=True)

    async def options_from_query(self, query_data):
        if not set(query_data) - _NOT_SPAWN_ARGUMENTS:
            raise _ShowTheForm()  # the language switch without scripts, a reload after a refused form
        if not self.allow_spawn_from_link:
            raise self.gpu_refusal(
                Phrase("A link cannot start a server: choose a profile and press Start."),
                reason="options",
                lang=self.gpu_language(),
            )
        return await self._gpu_options_from_form(query_data)

    @default("apply_user_options")
    def _gpu_apply_user_options_default(self):
        return _gpu_take_user_options

    # -- spawning ----------------------------------------------------------
    def _gpu_reset(self):
        self._gpu_stopping = False
        self._gpu_profile: Profile | None = None
        self._gpu_session: dict = {}
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

    def gpu_refusal(
        self, worded, *, reason: str, status_code: int = 400, lang: str | None = None, log_message: str = ""
    ) -> SpawnException:
        """A refusal the student reads in the spawn's language (``worded(lang)``); the hub's log has its English.

        JupyterHub shows a SpawnException's ``jupyterhub_message`` where it is set (the spawn page, the
        progress events, the REST API's answer), and its log message (``str()``) elsewhere.
        """
        lang = lang or self._gpu_lang
        _FORM_LANGUAGES[self._gpu_key] = lang  # the form shown again under this refusal speaks the same
        shown = worded(lang)
        e = SpawnException(shown, reason=reason, log_message=log_message or worded("en"), status_code=status_code)
        e.jupyterhub_message = shown
        return e

    def _gpu_say(self, progress: int, worded) -> None:
        """A progress event in the spawn's language (``worded(lang)``); the hub's log has its English."""
        self.log.info("%s: %s", self._gpu_key, worded("en"))
        self._gpu_emit({"progress": progress, "message": worded(self._gpu_lang)})

    def _gpu_emit(self, event: dict) -> None:
        self._gpu_events.append(event)
        waiting, self._gpu_events_changed = self._gpu_events_changed, None
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    _gpu_spawn_task: asyncio.Task | None = None

    async def run_pre_spawn_hook(self):
        """Validate the chosen profile, then wait for its GPUs (form and REST API alike).

        The queue wait happens here, before JupyterHub calls ``start()`` and starts
        counting ``start_timeout``: a spawn that waits gets exactly its wait on top,
        and one that does not wait keeps the configured ``start_timeout``.
        """
        # the spawn's language: the form's that started it, else the request's (the REST API's), else English
        lang = _SPAWN_LANGUAGES.pop(self._gpu_key, None) or self.gpu_language()
        previous, current = self._gpu_spawn_task, asyncio.current_task()
        if previous is not None and previous is not current and not previous.done():
            # JupyterHub let a new spawn begin while the last one still runs on this spawner (a stop cleared its
            # pending flags: the hub's start-up check "appears to have stopped while the Hub was down" stops a
            # spawn that waits for the GPU restore). One at a time, or both launch a server, on the same GPU;
            # the last one gives up at its next step, and the student asks again once it has
            self._gpu_abort = True
            raise self.gpu_refusal(
                Phrase("The previous start of this server is still being cancelled; try again in a moment."),
                reason="busy",
                status_code=409,
                lang=lang,  # the running spawn keeps its own language (its session records it)
            )
        self._gpu_lang = lang
        self._gpu_spawn_task = current  # JupyterHub's spawn (User.spawn): it runs until the start ends or fails
        # JupyterHub's own first event: a spawn that fails before its GPUs are assigned still shows one
        self._gpu_events = [{"progress": 50, "message": translator(self._gpu_lang)("Spawning server...")}]
        self._gpu_abort = False
        self._gpu_in_start = True
        try:
            return await self._gpu_pre_spawn()
        except BaseException:
            self._gpu_in_start = False
            raise

    async def _gpu_pre_spawn(self):
        allowed, everything = await self.allowed_profiles()
        options = dict(self.user_options or {}) if isinstance(self.user_options, dict) else self.user_options
        try:
            self._gpu_job_id = self._gpu_job_option(options)
            profile = choose_profile(options, allowed, everything)
            self._gpu_pool = await self.gpu_choose_pool(options, profile)
            self._gpu_resume = resume_choice(options, profile)
        except OptionsError as e:
            raise self.gpu_refusal(e.phrase, reason="options") from None
        # the check and the hold of this spawn's minimum are one step for the whole hub (section "Spawn races")
        refusal = await self.gpu_budget_refusal(profile, reserve=True)
        if refusal:
            raise self.gpu_refusal(refusal, reason="budget", status_code=403)
        self._gpu_profile = profile
        try:
            result = await maybe_future(super().run_pre_spawn_hook())
            await self.gpu_before_queue(profile)
            await self._gpu_take_gpus(profile)
        except BaseException:
            drop_reservation(self)
            raise
        return result

    def _gpu_stopped_while_starting(self) -> SpawnException:
        return self.gpu_refusal(
            Phrase("The server was stopped while it was starting; nothing was started."),
            reason="stopped",
            status_code=409,
        )

    async def _gpu_take_gpus(self, profile: Profile) -> None:
        """Wait in the queue for the profile's GPUs, then check the budget again before anything runs."""
        key = self._gpu_key
        unit = {"share": profile.gpu_share, "mig": profile.mig}  # a time-sliced share or a MIG slice (issue 17)
        simulated = self.allocator.simulated(profile.gpu_model, **unit) if profile.gpu_count else False

        waited = False

        planned = False

        def on_position(position, length):
            nonlocal waited
            waited = True  # called only for a request that stands in the queue
            if planned:
                return  # the scheduler's decision says it, with the estimate and the reason
            self._gpu_say(
                50,
                lambda lang: queue_message(
                    profile.gpu_model, profile.gpu_count, simulated, position, length, lang, **unit
                ),
            )

        def on_decision(decision):
            # the scheduler's place, why, and the estimate (docs/scheduling.md)
            self._gpu_say(
                50,
                lambda lang: queue_status(decision, profile.gpu_model, profile.gpu_count, simulated, lang, **unit),
            )

        devices: list[GPUDevice] = []
        if profile.gpu_count:
            planner = await self.gpu_attach_planner()
            if planner is not None:
                planned = True
                groups = tuple(sorted(self._gpu_group_names()))
                self.allocator.expect(
                    key,
                    Ask(
                        user=self.user.name,
                        server_name=self.name,
                        group=self._gpu_pool or default_pool(groups) or "",
                        groups=groups,
                        profile=profile.slug,
                        tier=profile.tier,
                        arrived=utcnow(),
                        unit=unit_of(profile.gpu_share, profile.mig),
                    ),
                    on_decision,
                )

            def on_restore():
                self._gpu_say(
                    45,
                    Phrase("The hub has just started and is restoring its GPU assignments; your request waits for it"),
                )

            # a hub that has just started hands out no GPU before it knows every one its servers hold
            await wait_restored(on_restore)
            try:
                devices = await self.allocator.acquire(
                    key,
                    profile.gpu_model,
                    profile.gpu_count,
                    timeout=self.queue_timeout,
                    on_position=on_position,
                    **unit,
                )
            except QueueTimeout as e:
                raise self.gpu_refusal(e.phrase, reason="gpu_queue_timeout", status_code=503) from None
            except QueueCancelled:
                # stopped while waiting (JupyterHub's User.stop clears the state of a server that does not run
                # yet): a spawn failure, so that JupyterHub cleans up instead of waiting for a server
                raise self._gpu_stopped_while_starting() from None
            except AllocationError as e:
                raise self.gpu_refusal(e.phrase, reason="gpu_unavailable", status_code=503) from None
        grant = getattr(self.allocator, "grants", {}).pop(key, None)  # the scheduler's word on it (a time limit)
        try:
            raise_if_cancelled()  # the hub's stop came as the GPUs were granted
            if self._gpu_abort:
                raise self._gpu_stopped_while_starting()
            if waited:
                # The budget again after the wait: other servers of the same budgets ran meanwhile. The first
                # check holds this spawn's minimum until its start is recorded, so concurrent spawns that
                # did not wait cannot all pass on the same remaining budget either.
                refusal = await self.gpu_budget_refusal(profile, reserve=True)
                if refusal:
                    raise self.gpu_refusal(refusal, reason="budget", status_code=403)
        except BaseException:
            if devices:
                self.allocator.release(key)
            raise
        self._gpu_devices = devices
        self._gpu_granted_at = utcnow()  # the GPUs are held (and billed) from now
        if grant is not None and grant.at is not None:
            # "may run until 13:55: CS231N has 4 T4s reserved from 14:00"
            self._gpu_say(55, grant.reason_in)

    _gpu_job_id: str | None = None

    def _gpu_job_option(self, options) -> str | None:
        """Take ``job_id`` out of the options: ``job-`` servers are the gpu service's job servers (docs/jobs.md)."""
        # who asked the hub for this spawn: only a service (the gpu service's POST jobs) starts a job's server
        requester = getattr(getattr(self, "handler", None), "current_user", None)
        return job_server_option(self.name, options, isinstance(requester, Service))

    async def start(self):
        if self._gpu_profile is None or not self._gpu_in_start:  # start() without the hub's spawn sequence
            await self.run_pre_spawn_hook()
        profile = self._gpu_profile
        devices = list(self._gpu_devices)
        self._gpu_devices = []
        self._gpu_launching = True
        self._gpu_recorded = False
        self._gpu_last_alive = None
        launched = False
        try:
            if self._gpu_abort:
                raise self._gpu_stopped_while_starting()
            started = self._gpu_granted_at or utcnow()
            # what the container sees: a share's physical GPU (its siblings see the same one), a MIG slice's uuid
            uuids = [d.visible_uuid for d in devices]
            self._gpu_session = new_session_state(
                profile,
                devices,
                started,
                self.gpu_currency.code,
                groups=self._gpu_group_names(),
                pool=self._gpu_pool,
                language=self._gpu_lang,
                resume=self._gpu_resume,
                server_token=server_token_id(self),
            )
            self._gpu_env = make_gpu_env(
                profile_slug=profile.slug,
                device_uuids=uuids,
                rate_per_minute=profile.rate_per_minute,
                currency=self.gpu_currency.code,
                session_id=self._gpu_session["session_id"],
                started=started,
                simulated=self._gpu_session["simulated"],
                devices=[d.to_dict() for d in devices],
                memory_limit_mib=memory_limit_of(devices),
                share=share_label(devices),
                reader=reader_name(self.gpu_backend),
                gpu_model=profile.gpu_model,
                profile_name=profile.name_in(self._gpu_lang),  # the Lab shows it to the student who chose it
                currency_symbol=self.gpu_currency.symbol or "",  # "": the Lab writes its language's symbol
                service_url=self.gpu_service_url,
                language=self._gpu_lang,
                **session_choices(self._gpu_session),
            )
            self._gpu_say(60, partial(assignment_message, profile, devices, self.gpu_currency))
            await self.gpu_prepare(profile, devices)
            if self._gpu_abort:
                raise self._gpu_stopped_while_starting()
            result = await super().start()
            launched = True
            await self.gpu_confirm_start()
            await self._gpu_record_start()
            if self._gpu_abort:
                # stopped while it was launching: JupyterHub's stop found nothing running and left it
                raise self._gpu_stopped_while_starting()
            return result
        except BaseException:
            session = dict(self._gpu_session)
            if launched or self.gpu_launch_began():
                # stopped while launching, its start could not be recorded, or the backend's start failed
                # after it asked for the server (a pod KubeSpawner timed out on): what was launched must not
                # run on once its GPUs are released (JupyterHub's own stop may have found nothing running)
                try:
                    self._gpu_stopping = True
                    await super().stop(now=True)
                except Exception:
                    self.log.exception("could not stop %s, stopped while starting", self._log_name)
                finally:
                    self._gpu_stopping = False
            if self._gpu_recorded and session:
                await self._gpu_record_stop(session, utcnow(), StopReason.STOPPED)
            self._gpu_release()
            raise
        finally:
            self._gpu_launching = False
            self._gpu_in_start = False
            drop_reservation(self)

    def gpu_launch_began(self) -> bool:
        """Whether the backend's ``start()`` may have launched a server that outlives its failure.

        The default: a start that did not return launched nothing. Kubernetes: a pod asked for stays on the
        cluster, holding its GPUs, when KubeSpawner's start times out or the reflector never shows it.
        """
        return False

    async def gpu_confirm_start(self) -> None:
        """Hook run when the server is up, before its start is recorded: set when billing really began.

        The default keeps the moment the GPUs were assigned. Kubernetes moves it to the moment the pod
        was bound to a node: time spent unscheduled waiting for a GPU is not billed.
        """

    def _gpu_session_start(self, gpu: dict):
        """The ledger's SessionStart of a session kept in this spawner's state."""
        return SessionStart.from_spawner_state(self.user.name, self.name, (), gpu)

    async def _gpu_record_start(self) -> None:
        """Record the session start in the ledger; a spawn that cannot be billed does not run."""
        ledger = self.ledger
        if ledger is None or not self._gpu_session:
            return

        def recorded():
            self._gpu_recorded = True
            drop_reservation(self)  # the recorded session counts from now on

        await record_start(ledger, lambda: self._gpu_session_start(self._gpu_session), recorded)

    async def _gpu_record_stop(self, session: dict, stopped: datetime, reason: str) -> None:
        ledger = self.ledger
        if ledger is None or not session:
            return
        await record_stop(ledger, self._gpu_session_start(session), stopped, reason, self.log)

    _gpu_alive_noted: datetime | None = None  # when a poll's "running" was last written to the ledger

    async def _gpu_note_alive(self, session: dict, now: datetime) -> None:
        """Write that the server runs now (at most once a push interval from polls, and as a stop begins)."""
        ledger = self.ledger
        if ledger is not None and session.get("session_id"):
            self._gpu_alive_noted = now
            await note_alive(ledger, session["session_id"], now, self.log)

    async def gpu_stopped_at(self) -> datetime | None:
        """When the server really stopped, if the spawner knows (Docker does); None means now."""
        return None

    @classmethod
    def gpu_orphans(cls, probe, api_url: str) -> list[tuple[str, str, object, dict[str, str]]]:
        """The servers of this hub (``api_url``) running now, as ``(session id, description, handle, env)``.

        Backends that launch processes or containers list them here (from their environment or
        labels), for :meth:`gpu_reap`, with the environment the spawner gave them (the session's
        facts, from which a restarted hub bills an orphan the killed one had not recorded); the
        default knows none.
        """
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

    async def _gpu_progress(self, done=lambda: False):
        """Our spawn events as they come (queue position, assignment), until ``done()`` after the last one."""
        seen = 0
        while True:
            while seen < len(self._gpu_events):
                yield self._gpu_events[seen]
                seen += 1
            if done():
                return
            if self._gpu_events_changed is None:
                self._gpu_events_changed = asyncio.get_running_loop().create_future()
            await self._gpu_events_changed

    async def progress(self):
        """Spawn progress: queue position while waiting, then the assignment."""
        async for event in self._gpu_progress():
            yield event

    async def poll(self):
        """The server's status; a server found stopped has its stop recorded in the ledger here.

        JupyterHub calls ``stop()`` only for servers that still run: one that
        ended on its own (or while the hub was down) is only ever polled.
        """
        session = dict(self._gpu_session)
        status = await super().poll()
        if self._gpu_launching:
            return status  # start() owns the session until it returns
        if status is None:
            if session:
                self._gpu_last_alive = now = utcnow()
                noted = self._gpu_alive_noted
                if noted is None or (now - noted).total_seconds() >= self.sample_push_interval:
                    await self._gpu_note_alive(session, now)
        elif session and not self._gpu_stopping:
            end = await self._gpu_end_of(session)
            self.log.info(
                "%s found ended (status %s): session %s billed to %s",
                self._log_name,
                status,
                session.get("session_id"),
                end,
            )
            await self._gpu_record_stop(session, end, StopReason.EXITED)
        return status

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

    async def _gpu_end_of(self, session: dict) -> datetime:
        """When the server of ``session``, found ended, really ended (docs/service.md, billing rule).

        The end the backend knows (:meth:`gpu_stopped_at`) where it falls inside the session, so a stale
        exit time of an earlier server never closes a later session; otherwise the last evidence that it
        was alive: the last poll of this hub process that found it running, its last pushed sample plus
        one push interval, or the service's last listing of it before this hub process started; never
        later than now, and never the moment a restarted hub found it gone.
        """
        now = utcnow()
        started = datetime.fromisoformat(session["started"].replace("Z", "+00:00"))
        try:
            known = await self.gpu_stopped_at()
        except Exception:
            self.log.exception("could not read when %s ended", self._log_name)
            known = None
        if known is not None:
            if started <= known <= now:
                return known
            self.log.warning(
                "%s: end time %s is outside its session (started %s); not used", self._log_name, known, started
            )
        evidence = [started]
        if self._gpu_last_alive is not None:
            evidence.append(self._gpu_last_alive)
        ledger = self.ledger
        if ledger is not None:
            try:
                evidence += await asyncio.to_thread(
                    evidence_of_life, ledger, session.get("session_id", ""), self.sample_push_interval
                )
            except Exception:
                self.log.exception("could not read the last samples of %s", self._log_name)
        return min(max(evidence), now)

    def get_env(self):
        env = super().get_env()
        env.update(self._gpu_env)
        if self._gpu_job_id:
            env[JOB_ID] = self._gpu_job_id  # the server runs this job (serverext/jobs.py)
        return env

    _gpu_in_stop = False

    async def stop(self, now=False):
        if self._gpu_in_stop:
            # re-entered from the backend's own poll (KubeSpawner's poll stops a pod that ended)
            return await super().stop(now=now)
        self._gpu_in_stop = True
        try:
            return await self._gpu_stop(now)
        finally:
            self._gpu_in_stop = False

    async def _gpu_stop(self, now):
        self.allocator.cancel(self._gpu_key)  # still waiting in the queue
        if self._gpu_in_start:
            self._gpu_abort = True  # start() gives up at its next step
        session = dict(self._gpu_session)
        reason = StopReason.STOPPED
        stopped_at = None
        if session:
            try:
                if await self.poll() is not None:
                    reason = StopReason.EXITED  # the server ended on its own
                    stopped_at = await self._gpu_end_of(session)
                else:
                    # it runs as the stop begins: a hub killed during the stop must not bill it to earlier
                    await self._gpu_note_alive(session, self._gpu_last_alive or utcnow())
            except Exception:
                self.log.debug("poll before stop failed", exc_info=True)
        if reason == StopReason.STOPPED and session.get("session_id") and self.ledger_db_url:
            # a running server: its stop is the cause from now on, so that a service pass during the seconds the
            # stop takes does not relabel it; a reason claimed before stays (the one precedence rule, in the
            # ledger's claim; docs/admin.md, "Why a server stopped"). A failure never holds up the stop.
            try:
                await asyncio.to_thread(self.ledger.claim_stop_reason, session["session_id"], StopReason.STOPPED)
            except Exception as e:
                self.log.warning("jupyterhub-gpu: cannot note the stop of %s in the ledger: %s", self._log_name, e)
        self._gpu_stopping = True  # the spawner's own polls while stopping are not an exit
        ended = True
        try:
            return await super().stop(now=now)
        except Exception as e:
            if not session:
                raise
            ended = await self._gpu_end_by_force(session, e)
            if not ended:
                raise
            # the backend's stop failed, but its server has ended: the stop is done
        finally:
            self._gpu_stopping = False
            if ended:
                self._gpu_release()
            else:
                self._gpu_park(session)
            if session:
                await self._gpu_record_stop(session, stopped_at or utcnow(), reason)

    async def _gpu_end_by_force(self, session: dict, error: Exception) -> bool:
        """The backend's stop failed (an engine that timed out, an API error), and JupyterHub forgets the server
        all the same: its GPUs would go to the next request while it may still run on them. Whether it has
        ended now: polled, stopped again at once, then removed by its session id the way a restarted hub
        removes an orphan (:meth:`gpu_orphans`, :meth:`gpu_reap`)."""
        self.log.error("jupyterhub-gpu: the stop of %s failed (%s); making sure it has ended", self._log_name, error)
        try:
            if await self.poll() is not None:
                return True
        except Exception as e:
            self.log.warning("jupyterhub-gpu: cannot poll %s after its failed stop: %s", self._log_name, e)
        try:
            # bounded: the first stop may have failed by waiting out a timeout of its own
            await asyncio.wait_for(super().stop(now=True), FORCED_STOP_TIMEOUT)
            if await self.poll() is not None:
                return True
        except Exception as e:  # asyncio.TimeoutError included (it is TimeoutError)
            self.log.warning("jupyterhub-gpu: the immediate stop of %s failed too: %r", self._log_name, e)
        try:
            return await self._gpu_reap_session(session.get("session_id", ""))
        except Exception as e:
            self.log.error("jupyterhub-gpu: cannot remove the server of %s: %s", self._log_name, e)
            return False

    async def _gpu_reap_session(self, session_id: str) -> bool:
        """Remove the servers of this hub that run ``session_id``; whether it has ended (found and removed, or
        found by nothing and ended by its poll)."""
        found, left = await self._gpu_remove_session(session_id)
        if left:
            return False
        return found or await self.poll() is not None

    async def _gpu_remove_session(self, session_id: str) -> tuple[bool, bool]:
        """Remove (force) the servers of this hub running ``session_id``: whether any was found, and whether one
        is still there after. By default through :meth:`gpu_orphans` and :meth:`gpu_reap` (blocking calls, in a
        thread); Kubernetes deletes the server's pod by its session label and uid."""
        cls, api_url = type(self), self.hub.api_url
        found = [o for o in await asyncio.to_thread(cls.gpu_orphans, self, api_url) if o[0] == session_id]
        for _sid, what, handle, _env in found:
            self.log.warning("jupyterhub-gpu: removing %s of session %s: its stop failed", what, session_id)
            await asyncio.to_thread(cls.gpu_reap, self, handle)
        if not found:
            return False, False
        left = await asyncio.to_thread(cls.gpu_orphans, self, api_url)
        return True, any(o[0] == session_id for o in left)

    def _gpu_park(self, session: dict) -> None:
        """Keep the GPUs of a server that may still run taken (under a key of their own: the server's name is free
        for a new start), and try to remove it every ``stuck_server_retry`` seconds; free them once it is gone."""
        session_id = session.get("session_id", "")
        key = f"{self._gpu_key}#stuck:{session_id}"
        uuids = self._gpu_release(park_as=key)
        self._gpu_revoke_token()
        self.log.error(
            "jupyterhub-gpu: the server of %s (session %s) may still run: its GPUs %s stay taken until it has"
            " ended (tried again every %g s; a hub restart removes it too)",
            self._log_name,
            session_id,
            ", ".join(uuids) or "(none)",
            self.stuck_server_retry,
        )
        task = asyncio.ensure_future(self._gpu_free_when_gone(key, session_id))
        _STUCK.add(task)
        task.add_done_callback(_STUCK.discard)

    def _gpu_revoke_token(self) -> None:
        """The server's API token goes now: JupyterHub deletes it only after a stop that succeeded, and a server
        that may still run must not report activity or samples, nor act for its user, after its stop."""
        db, token = getattr(self, "db", None), getattr(self, "api_token", "")
        if db is None or not token:
            return
        try:
            found = orm.APIToken.find(db, token)
            if found is not None:
                db.delete(found)
                db.commit()
        except Exception as e:
            self.log.error("jupyterhub-gpu: cannot revoke the API token of %s: %s", self._log_name, e)

    async def _gpu_free_when_gone(self, key: str, session_id: str) -> None:
        while True:
            await asyncio.sleep(self.stuck_server_retry)
            try:
                _found, left = await self._gpu_remove_session(session_id)
            except Exception as e:
                self.log.warning("jupyterhub-gpu: session %s still cannot be removed: %s", session_id, e)
                continue
            if left:
                continue
            freed = self.allocator.release(key)
            self.log.warning("jupyterhub-gpu: the server of session %s has ended: %s free", session_id, freed)
            return

    def _gpu_release(self, park_as: str | None = None) -> list[str]:
        """Give back the GPUs this server holds, or keep them taken under the key ``park_as`` (a server that may
        still run); either way the spawner forgets its session. The units given back, or kept."""
        if park_as:
            uuids = self.allocator.park(self._gpu_key, park_as)
        else:
            uuids = self.allocator.release(self._gpu_key)
        self._gpu_session = {}
        self._gpu_env = {}
        return uuids

    # -- state -------------------------------------------------------------
    def get_state(self):
        state = super().get_state()
        if self._gpu_session:
            state["gpu"] = dict(self._gpu_session)
        return state

    def load_state(self, state):
        super().load_state(state)
        gpu = state.get("gpu") if isinstance(state, dict) else None
        if not gpu:
            return
        self._gpu_session = dict(gpu)
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
        """The running session's profile, GPUs, rate and start (empty when not running)."""
        return dict(self._gpu_session)
