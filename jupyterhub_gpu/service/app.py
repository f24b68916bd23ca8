"""GPUService: the Application that wires the ledger, the tick, the REST API and the pages.

It only declares configuration and schedules the plain coroutines of
:mod:`.tick`; everything that decides anything lives in pure modules.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import secrets
import signal
import traceback
from copy import deepcopy
from datetime import timedelta
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub.services.auth import HubOAuth
from tornado.httpserver import HTTPServer
from tornado.web import Application as WebApplication
from traitlets import Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Application
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

from jupyterhub_gpu import __version__, lab
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import HUB_ID as HUB_ID_ENV
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB, check_hub_name
from jupyterhub_gpu.ledger.hubs import valid_identity
from jupyterhub_gpu.ledger.store import Ledger, LedgerSchemaError
from jupyterhub_gpu.ledger.writer import DEFAULT_LIMIT, LedgerWriter
from jupyterhub_gpu.money import check_currency_code, check_currency_symbol
from jupyterhub_gpu.rules.advice import WEEKDAYS, AdviceError, AdviceSettings
from jupyterhub_gpu.rules.cullrules import parse_config
from jupyterhub_gpu.service.channels import check_mail_url, configured_channel
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.feeds.kueue import kueue_api_client
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.kueue import QuotaMover
from jupyterhub_gpu.service.kueue.settings import Kueue
from jupyterhub_gpu.service.notify import Notifier, check_language
from jupyterhub_gpu.service.settings import (
    DEPRECATED,
    SETTINGS_CLASSES,
    Advice,
    Budgets,
    Culling,
    Jobs,
    LegacyMail,
    Notify,
    Scheduling,
    move_deprecated,
)
from jupyterhub_gpu.service.tick import TickContext, TickHealth, TickState, run_announcer
from jupyterhub_gpu.service.tick.thread import LoopLag, TickThread, logged_tick
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.params import MAX_BODY_BYTES
from jupyterhub_gpu.service.web.routes import make_handlers

#: the service's config file when --config names none (skipped when it does not exist)
CONFIG_FILE = "gpu_service_config.py"


def _line_in(error: BaseException, path: str) -> str:
    """``", line N"`` of ``path`` where ``error`` was raised while running it, or ``""``."""
    if isinstance(error, SyntaxError) and error.lineno:
        return f", line {error.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == path]
    return f", line {lines[-1]}" if lines else ""


def _unknown_options(config, path: str) -> list[str]:
    """What ``config`` sets that the service does not read: a misspelt option or section is not ignored."""
    groups = {cls.__name__: cls.class_traits(config=True) for cls in (*SETTINGS_CLASSES, Kueue)}
    groups["GPUService"] = {**GPUService.class_traits(config=True), **dict.fromkeys(DEPRECATED)}
    problems = []
    for section in config:
        if section != "Application" and section not in groups:
            problems.append(
                f"c.{section} in {path} is not read by the gpu service: its options are c.GPUService.<option>"
                f" and c.<group>.<option> for the groups {', '.join(sorted(g for g in groups if g != 'GPUService'))}"
            )
    for section, options in groups.items():
        for name in sorted(config.get(section, {})):
            if name not in options:
                near = difflib.get_close_matches(name, list(options), n=1)
                hint = f"did you mean {section}.{near[0]}?" if near else "--help-all lists them"
                problems.append(f"{section}.{name} (in {path}) is not an option of the gpu service; {hint}")
    return problems


class GPUService(Application):
    """The JupyterHub-managed "gpu" service: metering, budgets, alerts, API and pages."""

    name = "jupyterhub-gpu-service"
    version = __version__
    description = "The jupyterhub-gpu service: per-minute GPU billing, budgets and alerts for JupyterHub."

    aliases = {
        "config": "GPUService.config_file",
        "db-url": "GPUService.db_url",
        "hub-name": "GPUService.hub_name",
        "currency": "GPUService.currency",
        "timezone": "GPUService.timezone",
        "tick-interval": "GPUService.tick_interval",
        "reconcile-interval": "GPUService.reconcile_interval",
        "log-level": "Application.log_level",
    }

    config_file = Unicode(
        CONFIG_FILE,
        help="""
        The service's config file (Python, or JSON when it ends in .json), named on the command line.

        The default, gpu_service_config.py in the working directory (the hub's, for a hub-managed service), is
        skipped when it does not exist; a file named with --config must exist, and an error in it stops the
        service with the file and the line.

            python -m jupyterhub_gpu.service --config=/etc/jupyterhub/gpu_service_config.py
        """,
    ).tag(config=True)

    db_url = Unicode(
        "sqlite:///jupyterhub_gpu.sqlite",
        help="""
        The ledger database (SQLAlchemy URL); the spawner's ``ledger_db_url`` must name the same one.

            c.GPUService.db_url = "postgresql+psycopg://gpu:secret@db/jupyterhub_gpu"
        """,
    ).tag(config=True)

    hub_name = Unicode(
        DEFAULT_HUB,
        help="""
        This hub's name on the ledger: the service meters, culls, reconciles and stops only the sessions its
        hub's spawners record under this name (the spawner's ``hub_name``, the same), and reads budgets, alerts
        and use across every hub of the ledger. Several hubs on one ledger each have their own (docs/admin.md).

            c.GPUService.hub_name = "lab-docker"
        """,
    ).tag(config=True)

    @validate("hub_name")
    def _valid_hub_name(self, proposal):
        return check_hub_name(proposal.value, "GPUService.hub_name")

    currency = Unicode(
        "USD",
        help="""
        ISO 4217 code of the prices. Leave it unset: the service takes the currency
        the hub's spawner publishes to the ledger at its start
        (``c.GPUDockerSpawner.currency``); set, it must be the same, or the service
        refuses to start and says which is which. Only a service whose hub never
        published (no ``ledger_db_url`` on the spawner) runs on this value alone.

            c.GPUService.currency = "CNY"
        """,
    ).tag(config=True)
    currency_symbol = Unicode(
        None,
        allow_none=True,
        help="""
        Symbol shown for amounts in every language; None: each language's own
        (``CN¥`` in English, ``¥`` in Chinese). Taken from the spawner's
        ``currency_symbol`` like ``currency``.

            c.GPUService.currency_symbol = "¥"
        """,
    ).tag(config=True)

    timezone = Unicode(
        "UTC",
        help="""
        The lab's time zone: budget weeks and months start at local midnight, and
        pages show times in it. Taken from the spawner's ``budget_timezone``
        like ``currency``.

            c.GPUService.timezone = "Asia/Shanghai"
        """,
    ).tag(config=True)

    default_language = Unicode(
        "en",
        help="""
        The language of notices, mails and digests for readers with none of their own:
        a group's channels (a course chat, its instructors' digest), the admins' channels,
        and a user who has not started a server since the upgrade. A user reads the
        language of their latest spawn (docs/admin.md, Languages). "en" or "zh-CN".

            c.GPUService.default_language = "zh-CN"
        """,
    ).tag(config=True)

    @validate("default_language")
    def _valid_default_language(self, proposal):
        return check_language(proposal.value)

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

    write_queue_limit = Int(
        DEFAULT_LIMIT,
        help="""
        Ledger writes (GPU samples) that may wait for the service's one writer; past it a new push is
        answered 503 with Retry-After, and the server sends it again (docs/service.md, The ledger's writer).

            c.GPUService.write_queue_limit = 2000
        """,
    ).tag(config=True)

    @validate("tick_interval", "reconcile_interval", "write_queue_limit")
    def _valid_positive(self, proposal):
        if proposal.value <= 0:
            raise ValueError(f"{proposal.trait.name} must be positive, got {proposal.value}")
        return proposal.value

    @validate("currency")
    def _valid_currency(self, proposal):
        return check_currency_code(proposal.value, "GPUService.currency")

    @validate("currency_symbol")
    def _valid_currency_symbol(self, proposal):
        return check_currency_symbol(proposal.value, "GPUService.currency_symbol")

    @validate("timezone")
    def _valid_timezone(self, proposal):
        try:
            ZoneInfo(proposal.value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone must be an IANA name such as 'Asia/Shanghai', got {proposal.value!r}") from None
        return proposal.value

    @default("log_level")
    def _log_level(self):
        return "INFO"

    # -- wiring --------------------------------------------------------------------
    def load_service_config(self) -> None:
        """Load ``config_file``: the default may be absent, a file named with ``--config`` must exist and run.

        traitlets' own ``load_config_file`` skips a missing file and only logs an error raised inside one, so a
        typo in the path or the file would leave the service running on its defaults without a word.
        """
        path = os.path.abspath(self.config_file)
        if not os.path.isfile(path):
            if "config_file" in self.cli_config.get("GPUService", {}):
                raise ValueError(
                    f"--config={self.config_file}: no such file ({path}); give the path of the service's config"
                    f" file, or leave --config out to read {CONFIG_FILE} in the working directory if it exists"
                )
            return
        loader_class = JSONFileConfigLoader if path.endswith(".json") else PyFileConfigLoader
        loader = loader_class(os.path.basename(path), path=os.path.dirname(path), log=self.log)
        try:
            config = loader.load_config()
        except Exception as e:
            raise ValueError(f"the config file {path}{_line_in(e, path)} failed: {type(e).__name__}: {e}") from None
        config.merge(self.cli_config)  # the command line wins over the file, as in traitlets
        unknown = _unknown_options(config, path)
        if unknown:
            raise ValueError("; ".join(unknown))
        self.update_config(config)
        self._loaded_config_files.append(path)

    def initialize(self, argv=None):
        try:
            super().initialize(argv)
            self.load_service_config()
            self.load_settings()
            self.alert_settings = self.make_alert_settings()
            self.cull_config = parse_config(self.culling.rules, "Culling.rules")
            self.advice_settings = self.make_advice_settings()
        except (TraitError, ValueError) as e:
            # a setting's own validation names the setting and what it accepts: say that, not a traceback
            self.log.critical("jupyterhub-gpu service configuration error: %s", self._as_written(str(e)))
            self.exit(1)
        try:
            self.ledger = Ledger(self.db_url, hub=self.hub_name)
        except LedgerSchemaError as e:
            self.log.critical("jupyterhub-gpu service cannot start: %s", e)
            self.exit(1)
        self.writer = LedgerWriter.of(self.ledger, limit=self.write_queue_limit)
        self.take_lab_settings()
        try:
            self.notifier = Notifier(self.ledger, self.alert_settings, default_language=self.default_language)
            self.notifier.writer = self.writer  # its Lab notices written off the loops, in turn with the rest
        except ValueError as e:
            self.log.critical("jupyterhub-gpu service configuration error: %s", self._as_written(str(e)))
            self.exit(1)
        self._warn_deprecated_alert_settings()
        self.hub = HubClient.from_env()
        self.announce_member()
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu/")
        # the singleton: HubOAuthCallbackHandler uses HubOAuth.instance() too (PKCE state lives there)
        self.hub_auth = HubOAuth.instance(api_token=self.hub.token, cache_max_age=60)
        self.tick_context = self.make_tick_context()
        self.tick_state = TickState(health=TickHealth(interval=self.tick_interval))

    def announce_member(self) -> None:
        """This service among the ledger's hub members, under the identity its hub gave it (the doctor's check of
        the hubs' names: docs/admin.md, two hubs on one ledger)."""
        given = os.environ.get(HUB_ID_ENV) or None
        identity = valid_identity(given)
        if given and identity is None:
            self.log.warning("%s is not a hub identity (%r): this service is recorded without it", HUB_ID_ENV, given)
        self.ledger.announce("service", self.hub.api_url, utcnow(), __version__, identity)

    def load_settings(self) -> None:
        """Read the groups of settings (:mod:`.settings`) from the loaded config, the deprecated names moved first.

        A refused value raises (TraitError or ValueError naming the option) before anything is started.
        """
        self._move_deprecated(self.config)
        try:
            self.budgets = Budgets(parent=self)
            self.notify = Notify(parent=self)
            self.legacy_mail = LegacyMail(parent=self)
            self.culling = Culling(parent=self)
            self.jobs = Jobs(parent=self)
            self.scheduling = Scheduling(parent=self)
            self.advice = Advice(parent=self)
            self.kueue = Kueue(parent=self)
            self.kueue_quotas = self.kueue.quota_config()
        except (TraitError, ValueError) as e:
            raise type(e)(self._as_written(str(e))) from None

    _deprecated_used: set[str] = set()

    def _as_written(self, message: str) -> str:
        """``message`` with each option set under its deprecated name named so: refused in the words it always had."""
        for old in self._deprecated_used:
            group, new = DEPRECATED[old]
            message = message.replace(f"{group}.{new}", f"GPUService.{old}")
        return message

    def _move_deprecated(self, config) -> None:
        """Move the deprecated ``GPUService.<option>`` names of ``config`` to their groups, each warned once."""
        flat = set(config.get("GPUService", {}))
        for warning in move_deprecated(config):
            if warning not in self._deprecated_warned:
                self._deprecated_warned = self._deprecated_warned | {warning}
                self.log.warning("jupyterhub-gpu service: %s", warning)
        self._deprecated_used = self._deprecated_used | (flat & set(DEPRECATED))

    _deprecated_warned: set[str] = set()

    def update_config(self, config) -> None:
        """traitlets' ``update_config``, with the deprecated names moved first (so none is "not recognized")."""
        if any(name in DEPRECATED for name in config.get("GPUService", {})):
            config = deepcopy(config)
            self._move_deprecated(config)
        super().update_config(config)

    def make_alert_settings(self) -> AlertSettings:
        """The gateway's settings from ``c.Notify`` and ``c.LegacyMail`` (ValueError naming a refused one)."""
        mail, notify = self.legacy_mail, self.notify
        return AlertSettings(
            smtp_host=mail.smtp_host,
            smtp_port=mail.smtp_port,
            smtp_starttls=mail.smtp_starttls,
            smtp_username=mail.smtp_username,
            smtp_password=mail.smtp_password,
            mail_from=mail.mail_from,
            user_email_template=mail.user_email_template,
            instructor_emails={g: tuple(v) for g, v in mail.instructor_emails.items()},
            admin_emails=tuple(mail.admin_emails),
            webhook_url=mail.webhook_url,
            webhook_format=mail.webhook_format,
            timeout=notify.timeout,
            channels=self._configured_channels(),
            user_schemes=tuple(notify.user_schemes),
            user_hosts=tuple(notify.user_hosts),
            user_mail_url=check_mail_url(notify.user_mail_url) if notify.user_mail_url else "",
        )

    def make_advice_settings(self) -> AdviceSettings:
        """Right-sizing advice's settings from ``c.Advice`` (ValueError naming a refused one)."""
        advice = self.advice
        try:
            return AdviceSettings(
                headroom_percent=advice.headroom_percent,
                min_minutes=advice.min_minutes,
                live_after_minutes=advice.live_after_minutes,
                profile_memory_gb=dict(advice.profile_memory_gb),
            )
        except AdviceError as e:
            raise ValueError(f"Advice.{e}") from None

    @property
    def tick_health(self) -> TickHealth:
        return self.tick_state.health

    def make_tick_context(self) -> TickContext:
        """The one context of the tick's passes, from the configured settings (as :meth:`make_web_app`'s)."""
        weekday = self.advice.digest_weekday
        return TickContext(
            ledger=self.ledger,
            hub=self.hub,
            notifier=self.notifier,
            tz=self.tz,
            currency=self.currency_info,
            alert_thresholds=tuple(self.budgets.alert_thresholds),
            budget_grace=timedelta(seconds=self.budgets.grace_seconds),
            alert_channels=self.notifier.channels,
            cull_rules=self.cull_config,
            advice_settings=self.advice_settings,
            digest_weekday=WEEKDAYS.index(weekday) if weekday else None,
            digest_hour=self.advice.digest_hour,
            reconcile_interval=timedelta(seconds=self.reconcile_interval),
            kueue_quota=self.kueue_mover(),
            writer=self.writer,
        )

    def kueue_mover(self) -> QuotaMover | None:
        """The quota mover of class reservations kept by Kueue (``c.Kueue``); with no group given a ClusterQueue,
        it only gives back, once, what this hub's service moved before (the setting emptied mid-window)."""
        quotas = getattr(self, "kueue_quotas", None)
        if quotas is None:
            return None
        kubeconfig = self.kueue.kubeconfig
        if not quotas.enabled and not (kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST")):
            return None  # and no cluster of its own (its kubeconfig, or the pod it runs in) to give quotas back on
        return QuotaMover(quotas, lambda: kueue_api_client(kubeconfig), hub=self.ledger.hub)

    def _configured_channels(self) -> tuple:
        """The ``c.Notify`` channels, each checked by Apprise (ValueError naming the setting otherwise)."""
        notify = self.notify
        channels = [
            configured_channel(spec, "admin", "", f"Notify.admin_urls[{i}]") for i, spec in enumerate(notify.admin_urls)
        ]
        for group, specs in notify.group_urls.items():
            if not isinstance(group, str) or not group:
                raise ValueError(f"Notify.group_urls: group names must be non-empty strings, got {group!r}")
            for i, spec in enumerate([specs] if isinstance(specs, (str, dict)) else specs):
                what = f"Notify.group_urls[{group!r}][{i}]"
                channels.append(configured_channel(spec, "group", group, what))
        if notify.user_url_template:
            spec = notify.user_url_template
            url = spec if isinstance(spec, str) else spec.get("url", "")
            if "{username}" not in str(url):
                raise ValueError(
                    "Notify.user_url_template must hold {username}, e.g."
                    " 'mailtos://smtp.example.edu?from=gpu@example.edu&to={username}@example.edu'"
                )
            channels.append(configured_channel(spec, "user", "{username}", "Notify.user_url_template"))
        return tuple(channels)

    def _warn_deprecated_alert_settings(self) -> None:
        for channel in self.alert_settings.legacy_channels():
            names = "smtp_host, mail_from" if channel.claim == "email" else "webhook_url, webhook_format"
            self.log.warning(
                "LegacyMail.%s are deprecated: they are sent through Apprise as %s %s; write them as"
                " c.Notify.admin_urls / group_urls / user_url_template (docs/alerts.md)",
                names,
                channel.service,
                channel.masked,
            )

    def make_web_app(self) -> WebApplication:
        return WebApplication(
            make_handlers(self.prefix, WebContext.from_service(self)),
            cookie_secret=secrets.token_bytes(32),
            xsrf_cookies=False,
        )

    async def announce_run(self, session, job, channel: str) -> None:
        """A finished job or stop-when-done run, with its cost, on one channel (raises if not delivered)."""
        await run_announcer(self.tick_context)(session, job, channel)

    tick_thread: TickThread | None = None
    loop_lag: LoopLag | None = None

    async def tick(self) -> None:
        """One metering tick (:func:`.tick.metering.run_tick`) on the tick's own thread and loop, never on the
        requests' (:mod:`.tick.thread`); failures are logged and the next tick tries again."""
        if self.tick_thread is None:
            self.tick_thread = TickThread()
        ticking = logged_tick(self.tick_context, self.tick_state, utcnow(), self.log, self.loop_lag)
        await self.tick_thread.run(ticking)

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
        self.loop_lag = LoopLag().start()
        ticker = asyncio.create_task(self._tick_forever(stop))
        await stop.wait()
        self.log.info("jupyterhub-gpu service shutting down")
        ticker.cancel()
        server.stop()
        await asyncio.gather(ticker, return_exceptions=True)
        quota, tick = self.tick_context.kueue_quota, self.tick_thread
        steps = {  # each in turn, whatever the one before did; Kueue's client closed on its own (the tick's) loop
            "Kueue's client": (lambda: tick.run(quota.close()) if tick else quota.close()) if quota else None,
            "the tick": (lambda: asyncio.to_thread(tick.close)) if tick else None,  # its writes end first
            "the writer": lambda: asyncio.to_thread(self.writer.close),  # every write taken committed first
        }
        for name, step in steps.items():
            try:
                await step() if step else None
            except Exception as e:
                self.log.error("jupyterhub-gpu service: stopping %s failed: %r", name, e)
        self.notifier.close()
        self.ledger.withdraw()
        self.ledger.close()

    def own_lab_settings(self) -> dict[str, str | None]:
        """The currency, symbol and time zone this service's configuration sets (None where it does not)."""
        sections = [self.config.get(cls.__name__) for cls in type(self).__mro__ if cls.__name__ in self.config]
        return {
            name: getattr(self, option) if any(option in (sec or {}) for sec in sections) else None
            for name, option in lab.SERVICE_OPTIONS.items()
        }

    def take_lab_settings(self) -> None:
        """Take the currency and time zone the hub published (one source of truth; :func:`..lab.agree`).

        Exits when the service's own options say otherwise than the hub, naming both.
        """
        agreement = lab.agree(self.own_lab_settings(), self.ledger.lab_settings())
        for warning in agreement.warnings:
            self.log.warning("jupyterhub-gpu service: %s", warning)
        if agreement.conflicts:
            for conflict in agreement.conflicts:
                self.log.critical("jupyterhub-gpu service configuration error: %s", conflict)
            self.exit(1)
        self.lab_settings = agreement.settings
        self.currency_info = agreement.currency
        self.tz = agreement.timezone
        warning = lab.other_currencies_warning(
            self.currency_info.code, self.ledger.session_currencies(), "the lab's currency"
        )
        if warning:
            self.log.warning("jupyterhub-gpu service: %s", warning)
        self.log.info("jupyterhub-gpu service: currency %s, time zone %s", self.currency_info.code, self.tz)

    def lab_settings_changed(self) -> list[str]:
        """What the hub now publishes otherwise than this service took at its start (empty: nothing)."""
        try:
            return lab.changed(self.lab_settings, self.ledger.lab_settings())
        except Exception:  # the ledger's own failures are the tick's to report
            return []

    async def _tick_forever(self, stop: asyncio.Event) -> None:
        parent = os.getppid()
        while not stop.is_set():
            if os.environ.get("JUPYTERHUB_SERVICE_NAME") and os.getppid() != parent:
                # the hub that started us is gone (kill -9): the restarted hub starts its own service
                self.log.warning("the hub that started this service is gone; shutting down")
                stop.set()
                break
            changes = await asyncio.to_thread(self.lab_settings_changed)
            if changes:
                # a hub (re)started with other settings: stop rather than show one currency and charge another
                self.log.critical(
                    "the hub now publishes other lab settings than this service started with (%s); stopping so"
                    " that a restart takes them",
                    ", ".join(changes),
                )
                self.exit_status = 1
                stop.set()
                break
            await self.tick()
            try:
                await asyncio.wait_for(stop.wait(), self.tick_interval)
            except asyncio.TimeoutError:
                pass

    exit_status = 0

    def start(self):
        asyncio.run(self.run())
        if self.exit_status:
            self.exit(self.exit_status)


main = GPUService.launch_instance
