"""GPUService: the Application that wires the ledger, the tick, the REST API and the pages.

It only declares configuration and schedules the plain coroutines of
:mod:`.tick`; everything that decides anything lives in pure modules.
"""

from __future__ import annotations

import asyncio
import difflib
import math
import os
import secrets
import signal
import traceback
from datetime import timedelta
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub.services.auth import HubOAuth
from tornado.httpserver import HTTPServer
from tornado.web import Application as WebApplication
from traitlets import Bool, Dict, Float, Int, List, TraitError, Unicode, Union, default, validate
from traitlets.config import Application
from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

from jupyterhub_gpu import __version__, lab
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import check_currency_code, check_currency_symbol
from jupyterhub_gpu.rules.advice import WEEKDAYS, AdviceError, AdviceSettings
from jupyterhub_gpu.rules.cullrules import parse_config
from jupyterhub_gpu.service.channels import DEFAULT_USER_SCHEMES, check_mail_url, configured_channel
from jupyterhub_gpu.service.domain.alerts import parse_thresholds
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.notify import Notifier, check_language
from jupyterhub_gpu.service.tick import TickContext, TickHealth, TickState, run_announcer, run_tick
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


def _unknown_options(config, options, path: str) -> list[str]:
    """What ``config`` sets that the service does not read: a misspelt option or section is not ignored."""
    problems = []
    for section in config:
        if section not in ("GPUService", "Application"):
            problems.append(
                f"c.{section} in {path} is not read by the gpu service: its options are c.GPUService.<option>"
            )
    for name in sorted(config.get("GPUService", {})):
        if name not in options:
            near = difflib.get_close_matches(name, list(options), n=1)
            hint = f"did you mean GPUService.{near[0]}?" if near else "--help-all lists them"
            problems.append(f"GPUService.{name} (in {path}) is not an option of the gpu service; {hint}")
    return problems


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

    notify_admin_urls = List(
        help="""
        The admins' alert channels: Apprise URLs (https://appriseit.com/services/), each a string or
        ``{"url": ..., "events": [...]}``; events from budget.80, budget.95, budget.100, cull,
        preemption, job, digest (default: budget.95, budget.100, preemption). See docs/alerts.md.

            c.GPUService.notify_admin_urls = [
                "mailtos://gpu:secret@smtp.example.edu?from=gpu@example.edu&to=gpu-admin@example.edu",
                {"url": "dingtalk://TOKEN/", "events": ["budget.100", "preemption"]},
            ]
        """,
    ).tag(config=True)
    notify_group_urls = Dict(
        help="""
        Each group's alert channels (a course's chat for its instructors and students, its
        instructors' mail): group name -> a list of Apprise URLs or ``{"url": ..., "events": [...]}``
        (default events: budget.80, budget.95, budget.100, digest). Admins add more on the admin page.

            c.GPUService.notify_group_urls = {"cs231n": ["wecombot://BOT_KEY"]}
        """,
    ).tag(config=True)
    notify_user_url_template = Union(
        [Unicode(), Dict()],
        default_value="",
        help="""
        A channel for every user: an Apprise URL with ``{username}`` (or ``{"url": ..., "events": [...]}``;
        default events: budget.80, budget.95, budget.100, cull, preemption, job); empty for none.
        Users add their own channels on their usage page besides.

            c.GPUService.notify_user_url_template = (
                "mailtos://gpu:secret@smtp.example.edu?from=gpu@example.edu&to={username}@example.edu"
            )
        """,
    ).tag(config=True)
    notify_user_schemes = List(
        Unicode(),
        default_value=list(DEFAULT_USER_SCHEMES),
        help="""
        The Apprise schemes users may add for themselves on their usage page (empty: none).
        The default holds only services whose host is fixed by the service (Telegram, DingTalk,
        WeCom, Feishu, Lark, Slack, Discord, PushPlus, ServerChan, WxPusher, Pushover): a URL names
        a token, never a host. A scheme that names a host (json, ntfys, mmost, matrix, mailto...)
        added here gets its hosts checked: resolved, and refused when loopback, private, link-local,
        multicast or otherwise not public (again at each send); see notify_user_hosts.

            c.GPUService.notify_user_schemes = ["tgram", "dingtalk", "wecombot", "ntfys"]
        """,
    ).tag(config=True)
    notify_user_hosts = List(
        Unicode(),
        help="""
        Host names (as written in a URL) users' channels may reach although they are inside the
        lab's network, e.g. the lab's own ntfy or Mattermost server; every other host of a user's
        URL must resolve to public addresses only.

            c.GPUService.notify_user_hosts = ["ntfy.lab.example.edu"]
        """,
    ).tag(config=True)
    notify_user_mail_url = Unicode(
        "",
        help="""
        The lab's mail server for users' own addresses: a mailto:// or mailtos:// URL with its login
        and sender and no recipient. When set, a user adds "an e-mail address" (alice@example.edu) as
        a channel, sent through this server (never a server of the user's choosing); empty for none.

            c.GPUService.notify_user_mail_url = "mailtos://gpu:PASSWORD@smtp.example.edu?from=gpu@example.edu"
        """,
    ).tag(config=True)
    notify_timeout = Float(
        10,
        help="""
        Seconds one delivery to one channel may take (channels are sent to at once; a slow one
        delays no other, and after a failure it waits before it is tried again).

            c.GPUService.notify_timeout = 10
        """,
    ).tag(config=True)

    smtp_host = Unicode(
        "",
        help="""
        Deprecated (docs/alerts.md): use notify_admin_urls, notify_group_urls and
        notify_user_url_template. SMTP server for alert mail (sent through Apprise); empty for no mail.

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
        Deprecated (docs/alerts.md): use notify_admin_urls. URL that receives alerts and notices as
        Apprise JSON POSTs with the documented fields; empty for none.

            c.GPUService.webhook_url = "https://hooks.example.edu/gpu"
        """,
    ).tag(config=True)
    webhook_format = Unicode(
        "json",
        help="""
        Deprecated (docs/alerts.md): "json" (Apprise's JSON with the documented fields) or "slack"
        (webhook_url is a Slack or Mattermost webhook, sent through Apprise's plugin for it).

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

    gpu_pool = Dict(
        value_trait=Int(),  # so that the command line's --GPUService.gpu_pool=T4=4 gives a number
        help="""
        The lab's GPUs by model, for the schedule (docs/scheduling.md): a class
        reservation is refused when it would need more GPUs of a model than this at
        any moment. Empty: the service does not know the pool and refuses bookings.

            c.GPUService.gpu_pool = {"T4": 4, "A100": 4}
        """,
    ).tag(config=True)

    reservation_max_hours = Float(
        4,
        help="""
        The longest an instructor's group may hold GPUs of one model without a
        break (hours). The group's bookings of the model that overlap, touch or
        lie less than an hour apart count as one hold, so six adjacent 4-hour
        bookings are a 24-hour hold; every window of a weekly booking is measured
        as it really is in the lab's time zone (an hour longer on the night the
        clocks go back). Admins are not limited, but their bookings count in the
        group's holds. A booking past it is refused (400; 409 when the group's
        other bookings make it so) naming this setting (docs/scheduling.md).

            c.GPUService.reservation_max_hours = 4
        """,
    ).tag(config=True)
    reservation_max_gpu_hours_per_week = Float(
        None,
        allow_none=True,
        help="""
        The GPU-hours (GPUs x hours, every model together) an instructor's group
        may have booked in one week of the lab's calendar (Monday 00:00 to Monday
        00:00 in c.GPUService.timezone, as weekly budgets count), in every week a
        weekly booking repeats in; a window across Monday midnight counts in each
        week for its part. Admins are not limited, but their bookings count.
        None (the default): no limit.

            c.GPUService.reservation_max_gpu_hours_per_week = 40  # e.g. 4 GPUs for 10 hours a week
        """,
    ).tag(config=True)
    reservation_max_pool_fraction = Float(
        1.0,
        help="""
        The part of each model's GPUs (c.GPUService.gpu_pool) an instructor's
        group may hold at one moment, above 0 and at most 1: with 0.5 and 4 T4s
        a group may book at most 2 T4s at once (rounded down). Admins are not
        limited, but their bookings count. 1 (the default): the whole pool.

            c.GPUService.reservation_max_pool_fraction = 0.5
        """,
    ).tag(config=True)
    reservation_notice_hours = Float(
        24,
        help="""
        How far ahead an instructor must book (hours from now to the window's
        start), so that students on the group's GPUs are not pushed off at short
        notice. Admins are not limited. A sooner start is refused with a 400.

            c.GPUService.reservation_notice_hours = 24
        """,
    ).tag(config=True)

    @validate("reservation_max_hours", "reservation_notice_hours")
    def _valid_reservation_limits(self, proposal):
        value = proposal.value
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"GPUService.{proposal.trait.name} must be a positive number of hours, got {value!r}")
        return value

    @validate("reservation_max_gpu_hours_per_week")
    def _valid_weekly_gpu_hours(self, proposal):
        value = proposal.value
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValueError(
                f"GPUService.reservation_max_gpu_hours_per_week must be a positive number of GPU-hours, or None"
                f" for no limit, got {value!r}"
            )
        return value

    @validate("reservation_max_pool_fraction")
    def _valid_pool_fraction(self, proposal):
        value = proposal.value
        if not math.isfinite(value) or not 0 < value <= 1:
            raise ValueError(
                "GPUService.reservation_max_pool_fraction must be a part of the pool above 0 and at most 1"
                f" (0.5: half of each model's GPUs), got {value!r}"
            )
        return value

    @validate("gpu_pool")
    def _valid_gpu_pool(self, proposal):
        for model, count in proposal.value.items():
            if not isinstance(model, str) or not model.strip() or len(model) > 64:
                raise ValueError(f"gpu_pool: a GPU model must be a name of at most 64 characters, got {model!r}")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ValueError(f"gpu_pool: the count of {model} GPUs must be a whole number, got {count!r}")
        return proposal.value

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
        unknown = _unknown_options(config, self.class_traits(config=True), path)
        if unknown:
            raise ValueError("; ".join(unknown))
        self.update_config(config)
        self._loaded_config_files.append(path)

    def initialize(self, argv=None):
        try:
            super().initialize(argv)
            self.load_service_config()
        except (TraitError, ValueError) as e:
            # a setting's own validation names the setting and what it accepts: say that, not a traceback
            self.log.critical("jupyterhub-gpu service configuration error: %s", e)
            self.exit(1)
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
                timeout=self.notify_timeout,
                channels=self._configured_channels(),
                user_schemes=tuple(self.notify_user_schemes),
                user_hosts=tuple(self.notify_user_hosts),
                user_mail_url=check_mail_url(self.notify_user_mail_url) if self.notify_user_mail_url else "",
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
        self.take_lab_settings()
        try:
            self.notifier = Notifier(self.ledger, self.alert_settings, default_language=self.default_language)
        except ValueError as e:
            self.log.critical("jupyterhub-gpu service configuration error: %s", e)
            self.exit(1)
        self._warn_deprecated_alert_settings()
        self.hub = HubClient.from_env()
        self.prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX", "/services/gpu/")
        # the singleton: HubOAuthCallbackHandler uses HubOAuth.instance() too (PKCE state lives there)
        self.hub_auth = HubOAuth.instance(api_token=self.hub.token, cache_max_age=60)
        self.tick_context = self.make_tick_context()
        self.tick_state = TickState(health=TickHealth(interval=self.tick_interval))

    @property
    def tick_health(self) -> TickHealth:
        return self.tick_state.health

    def make_tick_context(self) -> TickContext:
        """The one context of the tick's passes, from the configured settings (as :meth:`make_web_app`'s)."""
        weekday = self.advice_digest_weekday
        return TickContext(
            ledger=self.ledger,
            hub=self.hub,
            notifier=self.notifier,
            tz=self.tz,
            currency=self.currency_info,
            alert_thresholds=tuple(self.alert_thresholds),
            budget_grace=timedelta(seconds=self.budget_grace_seconds),
            alert_channels=self.notifier.channels,
            cull_rules=self.cull_config,
            advice_settings=self.advice_settings,
            digest_weekday=WEEKDAYS.index(weekday) if weekday else None,
            digest_hour=self.advice_digest_hour,
            reconcile_interval=timedelta(seconds=self.reconcile_interval),
        )

    def _configured_channels(self) -> tuple:
        """The ``notify_*`` channels, each checked by Apprise (ValueError naming the setting otherwise)."""
        channels = [
            configured_channel(spec, "admin", "", f"GPUService.notify_admin_urls[{i}]")
            for i, spec in enumerate(self.notify_admin_urls)
        ]
        for group, specs in self.notify_group_urls.items():
            if not isinstance(group, str) or not group:
                raise ValueError(f"GPUService.notify_group_urls: group names must be non-empty strings, got {group!r}")
            for i, spec in enumerate([specs] if isinstance(specs, (str, dict)) else specs):
                what = f"GPUService.notify_group_urls[{group!r}][{i}]"
                channels.append(configured_channel(spec, "group", group, what))
        if self.notify_user_url_template:
            spec = self.notify_user_url_template
            url = spec if isinstance(spec, str) else spec.get("url", "")
            if "{username}" not in str(url):
                raise ValueError(
                    "GPUService.notify_user_url_template must hold {username}, e.g."
                    " 'mailtos://smtp.example.edu?from=gpu@example.edu&to={username}@example.edu'"
                )
            channels.append(configured_channel(spec, "user", "{username}", "GPUService.notify_user_url_template"))
        return tuple(channels)

    def _warn_deprecated_alert_settings(self) -> None:
        for channel in self.alert_settings.legacy_channels():
            names = "smtp_host, mail_from" if channel.claim == "email" else "webhook_url, webhook_format"
            self.log.warning(
                "GPUService.%s are deprecated: they are sent through Apprise as %s %s; write them as"
                " notify_admin_urls / notify_group_urls / notify_user_url_template (docs/alerts.md)",
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

    async def tick(self) -> None:
        """One metering tick (:func:`.tick.run_tick`); failures are logged and the next tick tries again."""
        await run_tick(self.tick_context, self.tick_state, utcnow(), self.log)

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
        self.notifier.close()
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
            changes = self.lab_settings_changed()
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
