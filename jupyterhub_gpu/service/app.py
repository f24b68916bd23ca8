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
from traitlets import Bool, Dict, Float, Int, List, Unicode, default, validate
from traitlets.config import Application

from .. import __version__
from ..clock import isoformat, utcnow
from ..money import Currency, MoneyError
from .alerts import AlertSettings, BudgetAlert, deliver, post_webhook, send_email
from .hubapi import HubAPIError, HubClient
from .ledger import Ledger
from .metering import BudgetStatus
from .tick import Reconciler, enforce_budgets, enforce_culling


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
        """,
    ).tag(config=True)

    db_url = Unicode(
        "sqlite:///jupyterhub_gpu.sqlite",
        help="""
        The ledger database (SQLAlchemy URL); the spawner's ``ledger_db_url`` must name the same one.

            c.GPUService.db_url = "postgresql+psycopg://gpu:secret@db/jupyterhub_gpu"
        """,
    ).tag(config=True)

    currency = Unicode("USD", help="ISO 4217 code of the prices (as in the spawner).").tag(config=True)
    currency_symbol = Unicode(None, allow_none=True, help="Symbol shown before amounts.").tag(config=True)

    timezone = Unicode(
        "UTC",
        help="""
        The lab's time zone: budget weeks and months start at local midnight.

            c.GPUService.timezone = "Asia/Shanghai"
        """,
    ).tag(config=True)

    tick_interval = Float(30, help="Seconds between metering ticks (budget alerts and stops).").tag(config=True)
    reconcile_interval = Float(
        600,
        help="""
        Seconds between reconciliations with the hub (listing its active servers).
        Listing costs the hub about 0.6 ms of CPU per active server, so keep this rare.
        """,
    ).tag(config=True)

    alert_thresholds = List(Int(), default_value=[80, 95], help="Budget percentages that send a warning.").tag(
        config=True
    )
    budget_grace_seconds = Float(
        300, help="Seconds between the 100% notice and the stop of an over-budget server."
    ).tag(config=True)

    smtp_host = Unicode("", help="SMTP server for alert mail; empty for no mail.").tag(config=True)
    smtp_port = Int(25, help="SMTP port.").tag(config=True)
    smtp_starttls = Bool(False, help="Use STARTTLS.").tag(config=True)
    smtp_username = Unicode("", help="SMTP login.").tag(config=True)
    smtp_password = Unicode("", help="SMTP password.").tag(config=True)
    mail_from = Unicode("jupyterhub-gpu@localhost", help="Sender of alert mail.").tag(config=True)
    user_email_template = Unicode(
        "",
        help="""
        A user's address from their name; empty: students get no mail.

            c.GPUService.user_email_template = "{username}@mails.example.edu.cn"
        """,
    ).tag(config=True)
    instructor_emails = Dict(help="Group name -> instructor addresses, for alerts.").tag(config=True)
    admin_emails = List(Unicode(), help="Admin addresses, for alerts.").tag(config=True)
    webhook_url = Unicode("", help="URL that receives alerts as JSON POSTs; empty for none.").tag(config=True)
    webhook_format = Unicode("json", help='"json" or "slack" (a {"text": ...} body).').tag(config=True)

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

    @validate("cull_rules")
    def _valid_cull_rules(self, proposal):
        from .culling import parse_config

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
        if any(not 0 < t < 100 for t in proposal.value):
            raise ValueError(f"alert_thresholds must be percentages between 0 and 100, got {proposal.value}")
        return sorted(set(proposal.value))

    @default("log_level")
    def _log_level(self):
        return "INFO"

    # -- wiring --------------------------------------------------------------------
    def initialize(self, argv=None):
        super().initialize(argv)
        if os.path.exists(self.config_file):
            self.load_config_file(self.config_file)
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
        self.alert_channels = ("lab",)
        if self.alert_settings.email_enabled:
            self.alert_channels += ("email",)
        if self.alert_settings.webhook_enabled:
            self.alert_channels += ("webhook",)
        from .culling import parse_config

        self.cull_config = parse_config(self.cull_rules, "GPUService.cull_rules")
        self.ledger = Ledger(self.db_url)
        self.hub = HubClient(
            os.environ.get("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api"),
            os.environ.get("JUPYTERHUB_API_TOKEN", ""),
        )
        self.reconciler = Reconciler(self.ledger, self.hub)
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu/")
        # the singleton: HubOAuthCallbackHandler uses HubOAuth.instance() too (PKCE state lives there)
        self.hub_auth = HubOAuth.instance(api_token=self.hub.token, cache_max_age=60)
        self.last_reconcile = None
        self.ticks = 0

    def make_web_app(self) -> WebApplication:
        from .api import make_handlers

        return WebApplication(
            make_handlers(self.prefix, self),
            cookie_secret=secrets.token_bytes(32),
            hub_auth=self.hub_auth,
            service=self,
            xsrf_cookies=False,
        )

    async def notify(self, user: str, groups: tuple[str, ...], status: BudgetStatus, threshold: int) -> None:
        """Deliver a budget alert on every configured channel (once per threshold and period)."""
        alert = BudgetAlert.from_status(
            user,
            groups,
            status,
            threshold,
            currency=self.currency_info,
            grace_seconds=int(self.budget_grace_seconds),
            tz=self.tz,
        )
        await deliver(alert, self.alert_settings, self.ledger, utcnow())

    async def notify_cull(self, session, decision) -> None:
        """An idle warning (or its cancellation): in JupyterLab, and by email and webhook where set up."""
        level = "warning" if decision.action == "warn" else "info"
        self.ledger.add_notice(session.user, "cull", decision.message, utcnow(), level, session_id=session.id)
        settings = self.alert_settings
        try:
            if settings.email_enabled and settings.user_email_template:
                to = settings.user_email_template.format(username=session.user)
                subject = "Your GPU server will be stopped" if decision.action == "warn" else "Idle stop cancelled"
                await send_email(settings, [to], subject, decision.message)
            if settings.webhook_enabled:
                payload = {
                    "event": "idle_warning" if decision.action == "warn" else "idle_warning_cancelled",
                    "user": session.user,
                    "server_name": session.server_name,
                    "session_id": session.id,
                    "rule": decision.rule.kind if decision.rule else None,
                    "stop_at": isoformat(decision.stop_at) if decision.stop_at else None,
                    "text": decision.message,
                }
                await post_webhook(
                    settings, {"text": decision.message} if settings.webhook_format == "slack" else payload
                )
        except Exception as e:  # the Lab notice is there; mail and webhook are best effort here
            self.log.warning("idle notice for %s not delivered by mail/webhook: %s", session.user, e)

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
            await enforce_budgets(
                self.ledger,
                self.hub,
                now,
                self.tz,
                self.notify,
                thresholds=tuple(self.alert_thresholds),
                grace=timedelta(seconds=self.budget_grace_seconds),
                channels=self.alert_channels,
            )
            await enforce_culling(self.ledger, self.hub, now, self.cull_config, self.notify_cull, self.tz)
        except HubAPIError as e:
            self.log.warning("hub unreachable during the tick: %s", e)
        except Exception:
            self.log.exception("metering tick failed")

    async def run(self) -> None:
        url = urlparse(os.environ.get("JUPYTERHUB_SERVICE_URL", "http://127.0.0.1:10101"))
        server = HTTPServer(self.make_web_app(), xheaders=True)
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
