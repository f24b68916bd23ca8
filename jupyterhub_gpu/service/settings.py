"""The gpu service's settings, grouped by concern: one Configurable each, written ``c.<Group>.<option>``.

The service's own options (its database, the lab's currency and time zone, the tick's pace) stay on
``c.GPUService``; the rest live here: budget alerts (:class:`Budgets`), alert channels (:class:`Notify`),
the deprecated mail and webhook settings (:class:`LegacyMail`), culling (:class:`Culling`), notebook jobs
(:class:`Jobs`), the schedule (:class:`Scheduling`) and right-sizing advice (:class:`Advice`). Each option's
help shows a ``c.Group.option = ...`` example; docs/reference/configuration.md is generated from them.

The flat names of earlier releases (``c.GPUService.cull_rules``) still work: :func:`move_deprecated` moves
each to its new place (:data:`DEPRECATED`) before the settings are read, and says where, as JupyterHub does
for its renamed options. Setting both the old and the new name of one option is refused.
"""

from __future__ import annotations

import math

from traitlets import Bool, Dict, Float, Int, List, Unicode, Union, validate
from traitlets.config import Config, Configurable

from jupyterhub_gpu.rules.advice import WEEKDAYS
from jupyterhub_gpu.rules.cullrules import parse_config
from jupyterhub_gpu.service.channels import DEFAULT_USER_SCHEMES
from jupyterhub_gpu.service.domain.alerts import parse_thresholds


class Budgets(Configurable):
    """Budget alerts and stops (docs/admin.md, Budgets): when a user is warned, and how long after the 100% notice an
    over-budget server is stopped.
    """

    alert_thresholds = List(
        default_value=[80, 95],
        help="""
        Budget percentages that send a warning: whole numbers from 1 to 99 (the 100%
        notice, before the stop, is always sent). Anything else stops the service at
        start-up with a message naming the value.

            c.Budgets.alert_thresholds = [50, 80, 95]
        """,
    ).tag(config=True)

    grace_seconds = Float(
        300,
        help="""
        Seconds between the 100% notice and the stop of an over-budget server.

            c.Budgets.grace_seconds = 300
        """,
    ).tag(config=True)

    @validate("alert_thresholds")
    def _valid_thresholds(self, proposal):
        return list(parse_thresholds(proposal.value, "Budgets.alert_thresholds"))

    @validate("grace_seconds")
    def _valid_grace(self, proposal):
        if proposal.value <= 0:
            raise ValueError(f"Budgets.grace_seconds must be positive, got {proposal.value}")
        return proposal.value


class Notify(Configurable):
    """Where alerts and notices go besides JupyterLab (docs/alerts.md): the admins', each group's and each user's
    Apprise channels, which channels users may add themselves, and how long a delivery may take.
    """

    admin_urls = List(
        help="""
        The admins' alert channels: Apprise URLs (https://appriseit.com/services/), each a string or
        ``{"url": ..., "events": [...]}``; events from budget.80, budget.95, budget.100, cull,
        preemption, job, digest (default: budget.95, budget.100, preemption). See docs/alerts.md.

            c.Notify.admin_urls = [
                "mailtos://gpu:secret@smtp.example.edu?from=gpu@example.edu&to=gpu-admin@example.edu",
                {"url": "dingtalk://TOKEN/", "events": ["budget.100", "preemption"]},
            ]
        """,
    ).tag(config=True)

    group_urls = Dict(
        help="""
        Each group's alert channels (a course's chat for its instructors and students, its
        instructors' mail): group name -> a list of Apprise URLs or ``{"url": ..., "events": [...]}``
        (default events: budget.80, budget.95, budget.100, digest). Admins add more on the admin page.

            c.Notify.group_urls = {"cs231n": ["wecombot://BOT_KEY"]}
        """,
    ).tag(config=True)

    user_url_template = Union(
        [Unicode(), Dict()],
        default_value="",
        help="""
        A channel for every user: an Apprise URL with ``{username}`` (or ``{"url": ..., "events": [...]}``;
        default events: budget.80, budget.95, budget.100, cull, preemption, job); empty for none.
        Users add their own channels on their usage page besides.

            c.Notify.user_url_template = (
                "mailtos://gpu:secret@smtp.example.edu?from=gpu@example.edu&to={username}@example.edu"
            )
        """,
    ).tag(config=True)

    user_schemes = List(
        Unicode(),
        default_value=list(DEFAULT_USER_SCHEMES),
        help="""
        The Apprise schemes users may add for themselves on their usage page (empty: none).
        The default holds only services whose host is fixed by the service (Telegram, DingTalk,
        WeCom, Feishu, Lark, Slack, Discord, PushPlus, ServerChan, WxPusher, Pushover): a URL names
        a token, never a host. A scheme that names a host (json, ntfys, mmost, matrix, mailto...)
        added here gets its hosts checked: resolved, and refused when loopback, private, link-local,
        multicast or otherwise not public (again at each send); see c.Notify.user_hosts.

            c.Notify.user_schemes = ["tgram", "dingtalk", "wecombot", "ntfys"]
        """,
    ).tag(config=True)

    user_hosts = List(
        Unicode(),
        help="""
        Host names (as written in a URL) users' channels may reach although they are inside the
        lab's network, e.g. the lab's own ntfy or Mattermost server; every other host of a user's
        URL must resolve to public addresses only.

            c.Notify.user_hosts = ["ntfy.lab.example.edu"]
        """,
    ).tag(config=True)

    user_mail_url = Unicode(
        "",
        help="""
        The lab's mail server for users' own addresses: a mailto:// or mailtos:// URL with its login
        and sender and no recipient. When set, a user adds "an e-mail address" (alice@example.edu) as
        a channel, sent through this server (never a server of the user's choosing); empty for none.

            c.Notify.user_mail_url = "mailtos://gpu:PASSWORD@smtp.example.edu?from=gpu@example.edu"
        """,
    ).tag(config=True)

    timeout = Float(
        10,
        help="""
        Seconds one delivery to one channel may take (channels are sent to at once; a slow one
        delays no other, and after a failure it waits before it is tried again).

            c.Notify.timeout = 10
        """,
    ).tag(config=True)


class LegacyMail(Configurable):
    """Deprecated mail and webhook settings (docs/alerts.md): still sent, through Apprise; write them as c.Notify
    channels instead. instructor_emails also names who gets the weekly right-sizing digest by mail.
    """

    smtp_host = Unicode(
        "",
        help="""
        Deprecated (docs/alerts.md): use c.Notify.admin_urls, group_urls and
        user_url_template. SMTP server for alert mail (sent through Apprise); empty for no mail.

            c.LegacyMail.smtp_host = "smtp.example.edu"
        """,
    ).tag(config=True)

    smtp_port = Int(
        25,
        help="""
        SMTP port.

            c.LegacyMail.smtp_port = 587
        """,
    ).tag(config=True)

    smtp_starttls = Bool(
        False,
        help="""
        Upgrade the SMTP connection with STARTTLS (certificate verified) before anything else.

            c.LegacyMail.smtp_starttls = True
        """,
    ).tag(config=True)

    smtp_username = Unicode(
        "",
        help="""
        SMTP login (set with smtp_password, or neither).

            c.LegacyMail.smtp_username = "gpu-alerts"
        """,
    ).tag(config=True)

    smtp_password = Unicode(
        "",
        help="""
        SMTP password (set with smtp_username, or neither).

            c.LegacyMail.smtp_password = os.environ["GPU_SMTP_PASSWORD"]
        """,
    ).tag(config=True)

    mail_from = Unicode(
        "jupyterhub-gpu@localhost",
        help="""
        Sender of alert mail.

            c.LegacyMail.mail_from = "gpu@example.edu"
        """,
    ).tag(config=True)

    user_email_template = Unicode(
        "",
        help="""
        A user's address from their name; empty: students get no mail.

            c.LegacyMail.user_email_template = "{username}@mails.example.edu.cn"
        """,
    ).tag(config=True)

    instructor_emails = Dict(
        help="""
        Group name -> instructor addresses, for alerts and the weekly right-sizing digest.

            c.LegacyMail.instructor_emails = {"cs231n": ["ta@example.edu"]}
        """
    ).tag(config=True)

    admin_emails = List(
        Unicode(),
        help="""
        Admin addresses, for alerts.

            c.LegacyMail.admin_emails = ["gpu-admin@example.edu"]
        """,
    ).tag(config=True)

    webhook_url = Unicode(
        "",
        help="""
        Deprecated (docs/alerts.md): use c.Notify.admin_urls. URL that receives alerts and notices as
        Apprise JSON POSTs with the documented fields; empty for none.

            c.LegacyMail.webhook_url = "https://hooks.example.edu/gpu"
        """,
    ).tag(config=True)

    webhook_format = Unicode(
        "json",
        help="""
        Deprecated (docs/alerts.md): "json" (Apprise's JSON with the documented fields) or "slack"
        (webhook_url is a Slack or Mattermost webhook, sent through Apprise's plugin for it).

            c.LegacyMail.webhook_format = "slack"
        """,
    ).tag(config=True)


class Culling(Configurable):
    """Idle culling (docs/culling.md): which servers are warned, then stopped, for idleness or age."""

    rules = Dict(
        None,
        allow_none=True,
        help="""
        Idle culling rules (docs/culling.md): a default list, and lists per profile
        and per group. None: the defaults (GPU under 5% for 30 minutes, no activity
        for 15 minutes, 24 hours at most; each warned 5–30 minutes before). Use
        ``{"default": []}`` to turn culling off.

            c.Culling.rules = {
                "default": [{"kind": "gpu_idle", "minutes": 30, "warn_minutes": 5, "util_threshold": 5}],
                "profiles": {"a100": [{"kind": "gpu_idle", "minutes": 15, "warn_minutes": 5}]},
                "groups": {"thesis": [{"kind": "max_age", "minutes": 4320, "warn_minutes": 60}]},
            }
        """,
    ).tag(config=True)

    @validate("rules")
    def _valid_rules(self, proposal):
        parse_config(proposal.value, "Culling.rules")
        return proposal.value


class Jobs(Configurable):
    """Notebook jobs (docs/jobs.md): how many a user may run at once and their time limits."""

    max_concurrent = Int(
        2,
        help="""
        How many notebook jobs (docs/jobs.md) one user may have starting or running at once;
        a further ``POST jobs`` is answered 429. The hub needs ``allow_named_servers``.

            c.Jobs.max_concurrent = 2
        """,
    ).tag(config=True)

    time_limit_minutes = Int(
        24 * 60,
        help="""
        The time limit of a notebook job that does not give one (minutes).

            c.Jobs.time_limit_minutes = 24 * 60
        """,
    ).tag(config=True)

    time_limit_max_minutes = Int(
        7 * 24 * 60,
        help="""
        The longest time limit a notebook job may ask for (minutes).

            c.Jobs.time_limit_max_minutes = 7 * 24 * 60
        """,
    ).tag(config=True)

    @validate("max_concurrent", "time_limit_minutes", "time_limit_max_minutes")
    def _valid_job_limits(self, proposal):
        if proposal.value < 1:
            raise ValueError(f"Jobs.{proposal.trait.name} must be at least 1, got {proposal.value}")
        return proposal.value


class Scheduling(Configurable):
    """The schedule (docs/scheduling.md): the lab's GPU pool and the limits of instructors' class reservations."""

    gpu_pool = Dict(
        value_trait=Int(),  # so that the command line's --Scheduling.gpu_pool=T4=4 gives a number
        help="""
        The lab's GPUs by model, for the schedule (docs/scheduling.md): a class
        reservation is refused when it would need more GPUs of a model than this at
        any moment. Empty: the service does not know the pool and refuses bookings.

            c.Scheduling.gpu_pool = {"T4": 4, "A100": 4}
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

            c.Scheduling.reservation_max_hours = 4
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

            c.Scheduling.reservation_max_gpu_hours_per_week = 40  # e.g. 4 GPUs for 10 hours a week
        """,
    ).tag(config=True)

    reservation_max_pool_fraction = Float(
        1.0,
        help="""
        The part of each model's GPUs (c.Scheduling.gpu_pool) an instructor's
        group may hold at one moment, above 0 and at most 1: with 0.5 and 4 T4s
        a group may book at most 2 T4s at once (rounded down). Admins are not
        limited, but their bookings count. 1 (the default): the whole pool.

            c.Scheduling.reservation_max_pool_fraction = 0.5
        """,
    ).tag(config=True)

    reservation_notice_hours = Float(
        24,
        help="""
        How far ahead an instructor must book (hours from now to the window's
        start), so that students on the group's GPUs are not pushed off at short
        notice. Admins are not limited. A sooner start is refused with a 400.

            c.Scheduling.reservation_notice_hours = 24
        """,
    ).tag(config=True)

    @validate("reservation_max_hours", "reservation_notice_hours")
    def _valid_reservation_limits(self, proposal):
        value = proposal.value
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"Scheduling.{proposal.trait.name} must be a positive number of hours, got {value!r}")
        return value

    @validate("reservation_max_gpu_hours_per_week")
    def _valid_weekly_gpu_hours(self, proposal):
        value = proposal.value
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValueError(
                f"Scheduling.reservation_max_gpu_hours_per_week must be a positive number of GPU-hours, or None"
                f" for no limit, got {value!r}"
            )
        return value

    @validate("reservation_max_pool_fraction")
    def _valid_pool_fraction(self, proposal):
        value = proposal.value
        if not math.isfinite(value) or not 0 < value <= 1:
            raise ValueError(
                "Scheduling.reservation_max_pool_fraction must be a part of the pool above 0 and at most 1"
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


class Advice(Configurable):
    """Right-sizing advice (docs/advice.md): how sessions are judged, and the weekly digest for instructors."""

    headroom_percent = Int(
        20,
        help="""
        Right-sizing advice (docs/advice.md): the GPU memory a cheaper profile must have
        over a session's observed peak, in percent (memory use varies between runs of
        the same notebook; 20% leaves room for that).

            c.Advice.headroom_percent = 20
        """,
    ).tag(config=True)

    min_minutes = Int(
        15,
        help="""
        Sessions shorter than this many billed minutes get no right-sizing advice (too short to judge).

            c.Advice.min_minutes = 15
        """,
    ).tag(config=True)

    live_after_minutes = Int(
        30,
        help="""
        A running session gets live right-sizing advice (in JupyterLab) once it has run this many minutes.

            c.Advice.live_after_minutes = 30
        """,
    ).tag(config=True)

    profile_memory_gb = Dict(
        help="""
        GPU memory per GPU (GB) of profiles whose model name does not say it and whose
        servers have not reported it yet (known models and MIG slices are recognised).

            c.Advice.profile_memory_gb = {"v100": 32}
        """,
    ).tag(config=True)

    digest_weekday = Unicode(
        "",
        help="""
        Send each group's instructors (``c.LegacyMail.instructor_emails``, and the group's channels that want
        ``digest``) a weekly right-sizing digest on this day ("monday" ... "sunday", at ``digest_hour`` in
        the lab's time zone); empty: no digest.

            c.Advice.digest_weekday = "monday"
        """,
    ).tag(config=True)

    digest_hour = Int(
        8,
        help="""
        The local hour at which the weekly right-sizing digest is sent.

            c.Advice.digest_hour = 8
        """,
    ).tag(config=True)

    @validate("digest_weekday")
    def _valid_weekday(self, proposal):
        value = proposal.value.strip().lower()
        if value and value not in WEEKDAYS:
            raise ValueError(f"Advice.digest_weekday must be empty or one of {', '.join(WEEKDAYS)}, got {value!r}")
        return value

    @validate("digest_hour")
    def _valid_hour(self, proposal):
        if not 0 <= proposal.value <= 23:
            raise ValueError(f"Advice.digest_hour must be an hour from 0 to 23, got {proposal.value}")
        return proposal.value


#: Every group of settings, in the order the reference lists them.
SETTINGS_CLASSES: tuple[type[Configurable], ...] = (Budgets, Notify, LegacyMail, Culling, Jobs, Scheduling, Advice)

#: The flat ``c.GPUService.<option>`` names of earlier releases -> (the group, its option there).
DEPRECATED: dict[str, tuple[str, str]] = {
    "alert_thresholds": ("Budgets", "alert_thresholds"),
    "budget_grace_seconds": ("Budgets", "grace_seconds"),
    "notify_admin_urls": ("Notify", "admin_urls"),
    "notify_group_urls": ("Notify", "group_urls"),
    "notify_user_url_template": ("Notify", "user_url_template"),
    "notify_user_schemes": ("Notify", "user_schemes"),
    "notify_user_hosts": ("Notify", "user_hosts"),
    "notify_user_mail_url": ("Notify", "user_mail_url"),
    "notify_timeout": ("Notify", "timeout"),
    "smtp_host": ("LegacyMail", "smtp_host"),
    "smtp_port": ("LegacyMail", "smtp_port"),
    "smtp_starttls": ("LegacyMail", "smtp_starttls"),
    "smtp_username": ("LegacyMail", "smtp_username"),
    "smtp_password": ("LegacyMail", "smtp_password"),
    "mail_from": ("LegacyMail", "mail_from"),
    "user_email_template": ("LegacyMail", "user_email_template"),
    "instructor_emails": ("LegacyMail", "instructor_emails"),
    "admin_emails": ("LegacyMail", "admin_emails"),
    "webhook_url": ("LegacyMail", "webhook_url"),
    "webhook_format": ("LegacyMail", "webhook_format"),
    "cull_rules": ("Culling", "rules"),
    "max_concurrent_jobs": ("Jobs", "max_concurrent"),
    "job_time_limit_minutes": ("Jobs", "time_limit_minutes"),
    "job_time_limit_max_minutes": ("Jobs", "time_limit_max_minutes"),
    "gpu_pool": ("Scheduling", "gpu_pool"),
    "reservation_max_hours": ("Scheduling", "reservation_max_hours"),
    "reservation_max_gpu_hours_per_week": ("Scheduling", "reservation_max_gpu_hours_per_week"),
    "reservation_max_pool_fraction": ("Scheduling", "reservation_max_pool_fraction"),
    "reservation_notice_hours": ("Scheduling", "reservation_notice_hours"),
    "advice_headroom_percent": ("Advice", "headroom_percent"),
    "advice_min_minutes": ("Advice", "min_minutes"),
    "advice_live_after_minutes": ("Advice", "live_after_minutes"),
    "advice_profile_memory_gb": ("Advice", "profile_memory_gb"),
    "advice_digest_weekday": ("Advice", "digest_weekday"),
    "advice_digest_hour": ("Advice", "digest_hour"),
}


def move_deprecated(config: Config) -> list[str]:
    """Move the deprecated ``GPUService.<option>`` values of ``config`` to their groups; a warning for each.

    ValueError when one option is set under both names (which one was meant cannot be told).
    """
    warnings = []
    flat = config.get("GPUService", {})
    for old in [name for name in DEPRECATED if name in flat]:
        group, new = DEPRECATED[old]
        if new in config.get(group, {}):
            raise ValueError(
                f"GPUService.{old} and {group}.{new} are both set: they are one option, keep only {group}.{new}"
            )
        config[group][new] = flat.pop(old)
        warnings.append(
            f"GPUService.{old} is deprecated: write it as c.{group}.{new} (docs/reference/configuration.md)"
        )
    return warnings
