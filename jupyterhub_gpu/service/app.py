"""GPUService: the Application that wires the ledger, the tick, the REST API and the pages.

It only declares configuration and schedules the plain coroutines of
:mod:`.tick`; everything that decides anything lives in pure modules.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from datetime import timedelta
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub.services.auth import HubOAuth
from tornado.httpserver import HTTPServer
from tornado.web import Application as WebApplication
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, default, validate
from traitlets.config import Application

from jupyterhub_gpu import __version__
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency, MoneyError
from jupyterhub_gpu.service.domain.advice import WEEKDAYS, AdviceError, AdviceSettings
from jupyterhub_gpu.service.domain.alerts import parse_thresholds
from jupyterhub_gpu.service.domain.culling import parse_config
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.hubapi import HubAPIError, HubClient
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import (
    Reconciler,
    advise_sessions,
    announce_finished_runs,
    budget_notify,
    enforce_budgets,
    enforce_culling,
    enforce_jobs,
    run_announcer,
    send_digests,
)
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.params import MAX_BODY_BYTES
from jupyterhub_gpu.service.web.routes import make_handlers


class GPUService(Application):
    """The JupyterHub-managed "gpu" service: metering, budgets, alerts, API and pages."""

    name = "jupyterhub-gpu-service"
    version = __version__
    description = "The jupyterhub-gpu service: per-minute GPU billing, budgets and alerts for JupyterHub."

    aliases = {
        "config": "GPUService.config_file",
        "db-url": "GPUService.db_url",
        "currency": "GPUService.currency",
        "timezone": "GPUService.timezone",
        "tick-interval": "GPUService.tick_interval",
        "reconcile-interval": "GPUService.reconcile_interval",
        "log-level": "Application.log_level",
    }

    config_file = Unicode(
        "jupyterhub_gpu_config.py",
        help="""
        Config file to load (ignored when it does not exist).

            python -m jupyterhub_gpu.service --config=/etc/jupyterhub/gpu_config.py
            c.GPUService.config_file = "/etc/jupyterhub/gpu_config.py"
        """,
    ).tag(config=True)

    db_url = Unicode(
        "sqlite:///jupyterhub_gpu.sqlite",
        help="""
        The ledger database (SQLAlchemy URL); the spawner's ``ledger_db_url`` must name the same one.

            c.GPUService.db_url = "postgresql+psycopg://gpu:secret@db/jupyterhub_gpu"
        """,
    ).tag(config=True)

    currency = Unicode(
        "USD",
        help="""
        ISO 4217 code of the prices (as in the spawner).

            c.GPUService.currency = "CNY"
        """,
    ).tag(config=True)
    currency_symbol = Unicode(
        None,
        allow_none=True,
        help="""
        Symbol shown before amounts; None: the currency's own.

            c.GPUService.currency_symbol = "¥"
        """,
    ).tag(config=True)

    timezone = Unicode(
        "UTC",
        help="""
        The lab's time zone: budget weeks and months start at local midnight.

            c.GPUService.timezone = "Asia/Shanghai"
        """,
    ).tag(config=True)

    tick_interval = Float(
        30,
        help="""
        Seconds between metering ticks (budget alerts and stops).

            c.GPUService.tick_interval = 30
        """,
    ).tag(config=True)
    reconcile_interval = Float(
        600,
        help="""
        Seconds between reconciliations with the hub (listing its active servers).
        Listing costs the hub about 0.6 ms of CPU per active server, so keep this rare.

            c.GPUService.reconcile_interval = 600
        """,
    ).tag(config=True)

    alert_thresholds = List(
        default_value=[80, 95],
        help="""
        Budget percentages that send a warning: whole numbers from 1 to 99 (the 100%
        notice, before the stop, is always sent). Anything else stops the service at
        start-up with a message naming the value.

            c.GPUService.alert_thresholds = [50, 80, 95]
        """,
    ).tag(config=True)
    budget_grace_seconds = Float(
        300,
        help="""
        Seconds between the 100% notice and the stop of an over-budget server.

            c.GPUService.budget_grace_seconds = 300
        """,
    ).tag(config=True)

    smtp_host = Unicode(
        "",
        help="""
        SMTP server for alert mail; empty for no mail.

            c.GPUService.smtp_host = "smtp.example.edu"
        """,
    ).tag(config=True)
    smtp_port = Int(
        25,
        help="""
        SMTP port.

            c.GPUService.smtp_port = 587
        """,
    ).tag(config=True)
    smtp_starttls = Bool(
        False,
        help="""
        Upgrade the SMTP connection with STARTTLS (certificate verified) before anything else.

            c.GPUService.smtp_starttls = True
        """,
    ).tag(config=True)
    smtp_username = Unicode(
        "",
        help="""
        SMTP login (set with smtp_password, or neither).

            c.GPUService.smtp_username = "gpu-alerts"
        """,
    ).tag(config=True)
    smtp_password = Unicode(
        "",
        help="""
        SMTP password (set with smtp_username, or neither).

            c.GPUService.smtp_password = os.environ["GPU_SMTP_PASSWORD"]
        """,
    ).tag(config=True)
    mail_from = Unicode(
        "jupyterhub-gpu@localhost",
        help="""
        Sender of alert mail.

            c.GPUService.mail_from = "gpu@example.edu"
        """,
    ).tag(config=True)
    user_email_template = Unicode(
        "",
        help="""
        A user's address from their name; empty: students get no mail.

            c.GPUService.user_email_template = "{username}@mails.example.edu.cn"
        """,
    ).tag(config=True)
    instructor_emails = Dict(
        help="""
        Group name -> instructor addresses, for alerts and the weekly right-sizing digest.

            c.GPUService.instructor_emails = {"cs231n": ["ta@example.edu"]}
        """
    ).tag(config=True)
    admin_emails = List(
        Unicode(),
        help="""
        Admin addresses, for alerts.

            c.GPUService.admin_emails = ["gpu-admin@example.edu"]
        """,
    ).tag(config=True)
    webhook_url = Unicode(
        "",
        help="""
        URL that receives alerts and notices as JSON POSTs; empty for none.

            c.GPUService.webhook_url = "https://hooks.example.edu/gpu"
        """,
    ).tag(config=True)
    webhook_format = Unicode(
        "json",
        help="""
        "json" (the documented payloads) or "slack" (a {"text": ...} body, escaped).

            c.GPUService.webhook_format = "slack"
        """,
    ).tag(config=True)

    cull_rules = Dict(
        None,
        allow_none=True,
        help="""
        Idle culling rules (docs/culling.md): a default list, and lists per profile
        and per group. None: the defaults (GPU under 5% for 30 minutes, no activity
        for 15 minutes, 24 hours at most; each warned 5–30 minutes before). Use
        ``{"default": []}`` to turn culling off.

            c.GPUService.cull_rules = {
                "default": [{"kind": "gpu_idle", "minutes": 30, "warn_minutes": 5, "util_threshold": 5}],
                "profiles": {"a100": [{"kind": "gpu_idle", "minutes": 15, "warn_minutes": 5}]},
                "groups": {"thesis": [{"kind": "max_age", "minutes": 4320, "warn_minutes": 60}]},
            }
        """,
    ).tag(config=True)

    max_concurrent_jobs = Int(
        2,
        help="""
        How many notebook jobs (docs/jobs.md) one user may have starting or running at once;
        a further ``POST jobs`` is answered 429. The hub needs ``allow_named_servers``.

            c.GPUService.max_concurrent_jobs = 2
        """,
    ).tag(config=True)
    job_time_limit_minutes = Int(
        24 * 60,
        help="""
        The time limit of a notebook job that does not give one (minutes).

            c.GPUService.job_time_limit_minutes = 24 * 60
        """,
    ).tag(config=True)
    job_time_limit_max_minutes = Int(
        7 * 24 * 60,
        help="""
        The longest time limit a notebook job may ask for (minutes).

            c.GPUService.job_time_limit_max_minutes = 7 * 24 * 60
        """,
    ).tag(config=True)

    @validate("max_concurrent_jobs", "job_time_limit_minutes", "job_time_limit_max_minutes")
    def _valid_job_limits(self, proposal):
        if proposal.value < 1:
            raise ValueError(f"{proposal.trait.name} must be at least 1, got {proposal.value}")
        return proposal.value

    advice_headroom_percent = Int(
        20,
        help="""
        Right-sizing advice (docs/advice.md): the GPU memory a cheaper profile must have
        over a session's observed peak, in percent (memory use varies between runs of
        the same notebook; 20% leaves room for that).

            c.GPUService.advice_headroom_percent = 20
        """,
    ).tag(config=True)
    advice_min_minutes = Int(
        15,
        help="""
        Sessions shorter than this many billed minutes get no right-sizing advice (too short to judge).

            c.GPUService.advice_min_minutes = 15
        """,
    ).tag(config=True)
    advice_live_after_minutes = Int(
        30,
        help="""
        A running session gets live right-sizing advice (in JupyterLab) once it has run this many minutes.

            c.GPUService.advice_live_after_minutes = 30
        """,
    ).tag(config=True)
    advice_profile_memory_gb = Dict(
        help="""
        GPU memory per GPU (GB) of profiles whose model name does not say it and whose
        servers have not reported it yet (known models and MIG slices are recognised).

            c.GPUService.advice_profile_memory_gb = {"v100": 32}
        """,
    ).tag(config=True)
    advice_digest_weekday = Unicode(
        "",
        help="""
        Send each group's ``instructor_emails`` a weekly right-sizing digest on this day
        ("monday" ... "sunday", at ``advice_digest_hour`` in the lab's time zone); empty: no digest.

            c.GPUService.advice_digest_weekday = "monday"
        """,
    ).tag(config=True)
    advice_digest_hour = Int(
        8,
        help="""
        The local hour at which the weekly right-sizing digest is sent.

            c.GPUService.advice_digest_hour = 8
        """,
    ).tag(config=True)

    @validate("advice_digest_weekday")
    def _valid_weekday(self, proposal):
        value = proposal.value.strip().lower()
        if value and value not in WEEKDAYS:
            raise ValueError(f"advice_digest_weekday must be empty or one of {', '.join(WEEKDAYS)}, got {value!r}")
        return value

    @validate("advice_digest_hour")
    def _valid_hour(self, proposal):
        if not 0 <= proposal.value <= 23:
            raise ValueError(f"advice_digest_hour must be an hour from 0 to 23, got {proposal.value}")
        return proposal.value

    @validate("cull_rules")
    def _valid_cull_rules(self, proposal):
        parse_config(proposal.value, "GPUService.cull_rules")
        return proposal.value

    @validate("timezone")
    def _valid_timezone(self, proposal):
        try:
            ZoneInfo(proposal.value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone must be an IANA name such as 'Asia/Shanghai', got {proposal.value!r}") from None
        return proposal.value

    @validate("tick_interval", "reconcile_interval", "budget_grace_seconds")
    def _valid_positive(self, proposal):
        if proposal.value <= 0:
            raise ValueError(f"{proposal.trait.name} must be positive, got {proposal.value}")
        return proposal.value

    @validate("alert_thresholds")
    def _valid_thresholds(self, proposal):
        return list(parse_thresholds(proposal.value, "GPUService.alert_thresholds"))

    @default("log_level")
    def _log_level(self):
        return "INFO"

    # -- wiring --------------------------------------------------------------------
    def initialize(self, argv=None):
        try:
            super().initialize(argv)
            if os.path.exists(self.config_file):
                self.load_config_file(self.config_file)
        except (TraitError, ValueError) as e:
            # a setting's own validation names the setting and what it accepts: say that, not a traceback
            self.log.critical("jupyterhub-gpu service configuration error: %s", e)
            self.exit(1)
        try:
            self.currency_info = Currency.from_config(self.currency, self.currency_symbol)
        except MoneyError as e:
            self.log.critical("jupyterhub-gpu service configuration error: %s", e)
            self.exit(1)
        self.tz = ZoneInfo(self.timezone)
        try:
            self.alert_settings = AlertSettings(
                smtp_host=self.smtp_host,
                smtp_port=self.smtp_port,
                smtp_starttls=self.smtp_starttls,
                smtp_username=self.smtp_username,
                smtp_password=self.smtp_password,
                mail_from=self.mail_from,
                user_email_template=self.user_email_template,
                instructor_emails={g: tuple(v) for g, v in self.instructor_emails.items()},
                admin_emails=tuple(self.admin_emails),
                webhook_url=self.webhook_url,
                webhook_format=self.webhook_format,
            )
        except ValueError as e:
            self.log.critical("jupyterhub-gpu service configuration error: %s", e)
            self.exit(1)
        self.cull_config = parse_config(self.cull_rules, "GPUService.cull_rules")
        try:
            self.advice_settings = AdviceSettings(
                headroom_percent=self.advice_headroom_percent,
                min_minutes=self.advice_min_minutes,
                live_after_minutes=self.advice_live_after_minutes,
                profile_memory_gb=dict(self.advice_profile_memory_gb),
            )
        except AdviceError as e:
            self.log.critical("jupyterhub-gpu service configuration error: GPUService.%s", e)
            self.exit(1)
        self.ledger = Ledger(self.db_url)
        self.notifier = Notifier(self.ledger, self.alert_settings)
        self.alert_channels = self.notifier.channels
        self.hub = HubClient.from_env()
        self.reconciler = Reconciler(self.ledger, self.hub)
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu/")
        # the singleton: HubOAuthCallbackHandler uses HubOAuth.instance() too (PKCE state lives there)
        self.hub_auth = HubOAuth.instance(api_token=self.hub.token, cache_max_age=60)
        self.last_reconcile = None
        self.ticks = 0

    def make_web_app(self) -> WebApplication:
        return WebApplication(
            make_handlers(self.prefix, WebContext.from_service(self)),
            cookie_secret=secrets.token_bytes(32),
            xsrf_cookies=False,
        )

    async def announce_run(self, session, job, channel: str) -> None:
        """A finished job or stop-when-done run, with its cost, on one channel (raises if not delivered)."""
        await run_announcer(Notifier(self.ledger, self.alert_settings), self.currency_info)(session, job, channel)

    async def tick(self) -> None:
        """One metering tick; failures are logged and the next tick tries again."""
        now = utcnow()
        self.ticks += 1
        try:
            if self.last_reconcile is None or (now - self.last_reconcile).total_seconds() >= self.reconcile_interval:
                summary = await self.reconciler.run(now)
                self.last_reconcile = now
                if summary["closed"] or summary["recorded"]:
                    self.log.info("reconciled with the hub: %s", summary)
        except HubAPIError as e:
            self.log.warning("hub unreachable during the tick: %s", e)
        except Exception:
            self.log.exception("reconciliation failed in this tick")
        # each part on its own: budgets failing must not keep culling or job limits from running
        parts = [
            (
                "budgets",
                lambda: enforce_budgets(
                    self.ledger,
                    self.hub,
                    now,
                    self.tz,
                    budget_notify(self.notifier, self.currency_info, int(self.budget_grace_seconds), self.tz),
                    thresholds=tuple(self.alert_thresholds),
                    grace=timedelta(seconds=self.budget_grace_seconds),
                    channels=self.alert_channels,
                ),
            ),
            (
                "culling",
                lambda: enforce_culling(self.ledger, self.hub, now, self.cull_config, self.notifier, self.tz),
            ),
            ("jobs", lambda: enforce_jobs(self.ledger, self.hub, now)),
            ("run notices", lambda: announce_finished_runs(self.ledger, now, self.announce_run, self.alert_channels)),
        ]
        for name, part in parts:
            try:
                await part()
            except HubAPIError as e:
                self.log.warning("hub unreachable during the tick (%s): %s", name, e)
            except Exception:
                self.log.exception("metering tick: %s failed; the rest of the tick goes on", name)
        await self.advice_tick(now)

    async def advice_tick(self, now) -> None:
        """Right-sizing advice for closed and long-running sessions, and the weekly digest (docs/advice.md)."""
        try:
            await advise_sessions(self.ledger, now, self.advice_settings, self.currency_info)
            if self.advice_digest_weekday:
                weekday = WEEKDAYS.index(self.advice_digest_weekday)
                await send_digests(
                    self.ledger, self.alert_settings, now, self.tz, self.currency_info, weekday, self.advice_digest_hour
                )
        except Exception:
            self.log.exception("right-sizing advice failed in this tick")

    async def run(self) -> None:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        # a larger body is refused before it is read (tornado's own default is 100 MB)
        server = HTTPServer(self.make_web_app(), xheaders=True, max_body_size=MAX_BODY_BYTES)
        server.listen(url.port or 80, url.hostname or "127.0.0.1")
        self.log.info("jupyterhub-gpu service %s listening on %s%s", __version__, url.geturl(), self.prefix)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ticker = asyncio.create_task(self._tick_forever(stop))
        await stop.wait()
        self.log.info("jupyterhub-gpu service shutting down")
        ticker.cancel()
        server.stop()
        await asyncio.gather(ticker, return_exceptions=True)
        self.ledger.close()

    async def _tick_forever(self, stop: asyncio.Event) -> None:
        parent = os.getppid()
        while not stop.is_set():
            if os.environ.get("JUPYTERHUB_SERVICE_NAME") and os.getppid() != parent:
                # the hub that started us is gone (kill -9): the restarted hub starts its own service
                self.log.warning("the hub that started this service is gone; shutting down")
                stop.set()
                break
            await self.tick()
            try:
                await asyncio.wait_for(stop.wait(), self.tick_interval)
            except asyncio.TimeoutError:
                pass

    def start(self):
        asyncio.run(self.run())


main = GPUService.launch_instance
