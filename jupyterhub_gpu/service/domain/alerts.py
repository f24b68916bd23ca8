"""Budget alerts: who is told, what they are told, and delivery by Lab notice, email and webhook.

Students, their instructors and the admins are warned when a budget reaches 80%
and 95%, and get a final notice at 100% before the server is stopped. Three
channels carry each alert:

- ``lab``: a notice in the ledger that the JupyterLab extension polls (always on);
- ``email``: one message over SMTP to every recipient (when ``smtp_host`` is set);
- ``webhook``: a JSON POST, plain or Slack-compatible (when ``webhook_url`` is set).

Each alert goes out once per user, budget, period, threshold and channel: the
ledger's ``AlertSent`` row is claimed *before* sending (its unique constraint
makes the claim atomic across processes). A send that fails releases its claim,
so the next metering tick tries that channel again; the other channels are not
affected. A process killed between claim and send loses that one alert (at most
once), rather than sending it twice.

Every user-visible string is a template in :data:`MESSAGES` so that it can be
translated; money is a Decimal, shown with :class:`~jupyterhub_gpu.money.Currency`
and sent in payloads as a decimal string, never a float.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import smtplib
import ssl
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.money import Currency, parse_amount
from jupyterhub_gpu.service.domain.metering import UNITS, BudgetStatus

log = logging.getLogger("jupyterhub_gpu.alerts")

#: The default thresholds; any whole percentage from 1 to 100 can be delivered (see :func:`parse_thresholds`).
THRESHOLDS = (80, 95, 100)
CHANNELS = ("lab", "email", "webhook")
WEBHOOK_FORMATS = ("json", "slack")
#: The Lab notice level of each tier of thresholds (see :func:`tier`).
LEVELS = {80: "info", 95: "warning", 100: "error"}


def tier(threshold: int) -> int:
    """The templates a threshold is worded with: 100 (used up), 95 (from 95%: almost) or 80 (below)."""
    return 100 if threshold >= 100 else 95 if threshold >= 95 else 80


def parse_thresholds(values, what: str = "alert_thresholds") -> tuple[int, ...]:
    """Warning thresholds as configured: whole percentages from 1 to 99 (100, always sent, may be listed).

    Returns them sorted without duplicates and without 100; ValueError naming
    the setting and the bad value otherwise, so that a service never starts
    with thresholds its alerts cannot deliver.
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, set, frozenset)):
        raise ValueError(f"{what} must be a list of whole percentages such as [80, 95], got {values!r}")
    for t in values:
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= 100:
            raise ValueError(
                f"{what} must be whole percentages from 1 to 99 (the 100% notice is always sent),"
                f" such as [80, 95]; {t!r} is not one"
            )
    return tuple(sorted({t for t in values if t < 100}))


#: Every string a user, instructor or admin reads. Replace the values (keeping the
#: ``{fields}``) to translate; ``budget.*`` and ``grace.*`` fill the other templates.
MESSAGES: dict[str, str] = {
    "budget.own": "your budget",
    "budget.user": "the personal budget of {user}",
    "budget.group": "the {group} group budget",
    "amount.gpu_hours": "{hours} GPU-hours",
    "period": "{start} to {end}",
    "grace.now": "now",
    "grace.second": "in 1 second",
    "grace.seconds": "in {n} seconds",
    "grace.minute": "in 1 minute",
    "grace.minutes": "in {n} minutes",
    "subject.80": "[GPU] {user} has used {threshold}% of {budget}",
    "subject.95": "[GPU] {user} has used {threshold}% of {budget}",
    "subject.100": "[GPU] Budget used up: {budget} ({user})",
    "summary": "{user} has used {used} of {limit} of {budget} for {period} (the {threshold}% alert).",
    "summary.100": "{user} has used up {budget} for {period} ({used} of {limit}).",
    "advice.80": (
        "A GPU server costs money for every minute it runs, even when idle:"
        " stop servers that are not in use (File > Hub Control Panel > Stop My Server)."
    ),
    "advice.95": (
        "The budget is almost used up. When it runs out, running GPU servers are stopped:"
        " save work and checkpoints now."
    ),
    "advice.100": (
        "Running GPU servers of {user} will be stopped {grace}, and no new GPU server can start"
        " until the budget resets or is raised. Save work now."
    ),
    "footer": (
        "You receive this message as the student, an instructor of the student's group"
        " or an administrator of the GPU service."
    ),
    "body": "Hello,\n\n{summary}\n\n{advice}\n\n-- \n{footer}\n",
    "lab.80": (
        "You have used {used} of {limit} of {budget} for {period} ({threshold}%)."
        " Stop servers you are not using: a running GPU server costs money even when idle."
    ),
    "lab.95": (
        "You have used {used} of {limit} of {budget} for {period} ({threshold}%)."
        " Save your work now: servers are stopped when the budget runs out."
    ),
    "lab.100": (
        "Budget used up: you have used {used} of {limit} of {budget} for {period}."
        " Your server will be stopped {grace}. Save your work now."
    ),
}


# -- settings --------------------------------------------------------------------------


def _valid_address(address: object) -> bool:
    """A plain ``local@domain`` address: no display name, spaces, or header-breaking characters."""
    if not isinstance(address, str) or address.count("@") != 1:
        return False
    local, domain = address.split("@")
    if not local or not domain or domain.startswith(".") or domain.endswith("."):
        return False
    return not any(c.isspace() or c in ',;<>"()[]\\' or ord(c) < 32 for c in address)


def _address_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"{name} must be a list of email addresses, got {value!r}")
    for address in value:
        if not _valid_address(address):
            raise ValueError(f"{name}: {address!r} is not an email address such as 'ta@example.edu'")
    return tuple(value)


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go. Everything off by default except the Lab notices; checked on creation.

    Raises ValueError naming the setting when a value cannot work.
    """

    #: SMTP server host name; "" turns email off.
    smtp_host: str = ""
    smtp_port: int = 25
    #: Upgrade the SMTP connection with STARTTLS (certificate verified) before anything else.
    smtp_starttls: bool = False
    smtp_username: str = ""
    smtp_password: str = field(default="", repr=False)
    mail_from: str = ""
    #: A student's address from their user name, e.g. "{username}@example.edu"; "" = students get no mail.
    user_email_template: str = ""
    #: Instructors' addresses per group: {"cs231n": ["ta@example.edu"]}.
    instructor_emails: dict[str, tuple[str, ...]] = field(default_factory=dict)
    admin_emails: tuple[str, ...] = ()
    #: URL that receives a JSON POST per alert; "" turns the webhook off.
    webhook_url: str = ""
    #: "json" (the documented payload of :func:`webhook_payload`) or "slack" ({"text": ...}).
    webhook_format: str = "json"
    #: Seconds for an SMTP conversation or a webhook request.
    timeout: float = 10.0

    def __post_init__(self):
        def check_str(name):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")

        for name in ("smtp_host", "smtp_username", "smtp_password", "mail_from", "user_email_template", "webhook_url"):
            check_str(name)
        port = self.smtp_port
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"smtp_port must be a port number from 1 to 65535, got {port!r}")
        if not isinstance(self.smtp_starttls, bool):
            raise ValueError(f"smtp_starttls must be True or False, got {self.smtp_starttls!r}")
        if self.smtp_password and not self.smtp_username:
            raise ValueError("smtp_password is set but smtp_username is not: set both to log in, or neither")
        if self.smtp_username and not self.smtp_password:
            raise ValueError("smtp_username is set but smtp_password is not: set both to log in, or neither")
        if self.smtp_host and not _valid_address(self.mail_from):
            raise ValueError(
                f"mail_from must be the sender's address such as 'gpu@example.edu' when smtp_host is set,"
                f" got {self.mail_from!r}"
            )
        if self.mail_from and not _valid_address(self.mail_from):
            raise ValueError(f"mail_from must be an address such as 'gpu@example.edu', got {self.mail_from!r}")
        if self.user_email_template:
            try:
                sample = self.user_email_template.format(username="student")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(
                    f"user_email_template may use only the field {{username}}, e.g. '{{username}}@example.edu',"
                    f" got {self.user_email_template!r} ({e!r})"
                ) from None
            if "{username}" not in self.user_email_template or not _valid_address(sample):
                raise ValueError(
                    "user_email_template must make an address from {username}, e.g. '{username}@example.edu',"
                    f" got {self.user_email_template!r}"
                )
        if not isinstance(self.instructor_emails, dict):
            raise ValueError(f"instructor_emails must map group names to address lists, got {self.instructor_emails!r}")
        instructors = {}
        for group, addresses in self.instructor_emails.items():
            if not isinstance(group, str) or not group:
                raise ValueError(f"instructor_emails: group names must be non-empty strings, got {group!r}")
            instructors[group] = _address_list(f"instructor_emails[{group!r}]", addresses)
        object.__setattr__(self, "instructor_emails", instructors)
        object.__setattr__(self, "admin_emails", _address_list("admin_emails", self.admin_emails))
        if self.webhook_url:
            parts = urlsplit(self.webhook_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"webhook_url must be an http:// or https:// URL such as 'https://hooks.example.edu/gpu',"
                    f" got {self.webhook_url!r}"
                )
        if self.webhook_format not in WEBHOOK_FORMATS:
            raise ValueError(f"webhook_format must be one of {', '.join(WEBHOOK_FORMATS)}, got {self.webhook_format!r}")
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise ValueError(f"timeout must be a number of seconds above 0 and at most 600, got {timeout!r}")

    @property
    def email_enabled(self) -> bool:
        return bool(self.smtp_host)

    @property
    def webhook_enabled(self) -> bool:
        return bool(self.webhook_url)


# -- alerts and their text -------------------------------------------------------------


@dataclass(frozen=True)
class BudgetAlert:
    """One budget of one user reaching one threshold in one period."""

    user: str
    groups: tuple[str, ...]
    budget_key: str  # "user:alice" | "group:cs231n"
    scope: str  # "user" | "group"
    subject: str
    threshold: int  # a percentage from 1 to 100 (80 | 95 | 100 by default)
    used: Decimal  # money, or GPU-hours
    limit: Decimal
    unit: str  # "money" | "gpu_hours"
    period_start: datetime
    period_end: datetime
    #: Shows money amounts; required when unit is "money".
    currency: Currency | None = None
    #: Seconds from the 100% notice to the stop of the server.
    grace_seconds: int = 0
    #: The lab's time zone, for the period's dates in messages.
    tz: tzinfo = timezone.utc
    #: The budget's revision (``BudgetRule.revision``): alerts go out once per revision and period.
    revision: str = ""

    def __post_init__(self):
        object.__setattr__(self, "groups", tuple(self.groups))
        if self.scope not in ("user", "group"):
            raise ValueError(f"scope must be 'user' or 'group', got {self.scope!r}")
        if self.budget_key != f"{self.scope}:{self.subject}":
            raise ValueError(f"budget_key {self.budget_key!r} does not match {self.scope}:{self.subject}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int) or not 1 <= self.threshold <= 100:
            raise ValueError(f"threshold must be a whole percentage from 1 to 100, got {self.threshold!r}")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        object.__setattr__(self, "used", parse_amount(self.used, "used"))
        object.__setattr__(self, "limit", parse_amount(self.limit, "limit"))
        if self.unit == "money" and self.currency is None:
            raise ValueError("a money budget alert needs a currency")
        if isinstance(self.grace_seconds, bool) or not isinstance(self.grace_seconds, int) or self.grace_seconds < 0:
            raise ValueError(f"grace_seconds must be a whole number of seconds >= 0, got {self.grace_seconds!r}")
        for name in ("period_start", "period_end"):
            moment = getattr(self, name)
            if moment.tzinfo is None:  # the ledger's convention: naive means UTC
                object.__setattr__(self, name, moment.replace(tzinfo=timezone.utc))

    @classmethod
    def from_status(
        cls,
        user: str,
        groups,
        status: BudgetStatus,
        threshold: int,
        currency: Currency | None = None,
        grace_seconds: int = 0,
        tz: tzinfo = timezone.utc,
    ) -> BudgetAlert:
        """The alert for ``user`` of a budget status from :mod:`.metering`."""
        rule = status.rule
        return cls(
            user=user,
            groups=tuple(groups),
            budget_key=rule.key,
            scope=rule.scope,
            subject=rule.subject,
            threshold=threshold,
            used=status.used,
            limit=status.limit,
            unit=rule.unit,
            period_start=status.period_start,
            period_end=status.period_end,
            currency=currency,
            grace_seconds=grace_seconds,
            tz=tz,
            revision=rule.revision,
        )


def _amount(alert: BudgetAlert, value: Decimal) -> str:
    if alert.unit == "money":
        return alert.currency.format(value)
    hours = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return MESSAGES["amount.gpu_hours"].format(hours=f"{hours:f}")


def _grace(seconds: int) -> str:
    if seconds <= 0:
        return MESSAGES["grace.now"]
    if seconds % 60:
        return MESSAGES["grace.second"] if seconds == 1 else MESSAGES["grace.seconds"].format(n=seconds)
    minutes = seconds // 60
    return MESSAGES["grace.minute"] if minutes == 1 else MESSAGES["grace.minutes"].format(n=minutes)


def _fields(alert: BudgetAlert, own: bool) -> dict[str, object]:
    """Values for the templates; ``own`` words the budget for its user ("your budget")."""
    if alert.scope == "group":
        budget = MESSAGES["budget.group"].format(group=alert.subject)
    else:
        budget = MESSAGES["budget.own" if own else "budget.user"].format(user=alert.subject)
    last_day = (alert.period_end - timedelta(microseconds=1)).astimezone(alert.tz).date()
    first_day = alert.period_start.astimezone(alert.tz).date()
    return {
        "user": alert.user,
        "budget": budget,
        "threshold": alert.threshold,
        "used": _amount(alert, alert.used),
        "limit": _amount(alert, alert.limit),
        "period": MESSAGES["period"].format(start=first_day.isoformat(), end=last_day.isoformat()),
        "grace": _grace(alert.grace_seconds),
    }


def _email_parts(alert: BudgetAlert) -> tuple[str, str, str]:
    """The subject, summary and advice of an alert, in the third person."""
    values = _fields(alert, own=False)
    return (
        MESSAGES[f"subject.{tier(alert.threshold)}"].format(**values),
        MESSAGES["summary.100" if alert.threshold == 100 else "summary"].format(**values),
        MESSAGES[f"advice.{tier(alert.threshold)}"].format(**values),
    )


def alert_text(alert: BudgetAlert) -> tuple[str, str]:
    """The email subject and body of an alert (read by the student, instructors and admins)."""
    subject, summary, advice = _email_parts(alert)
    return subject, MESSAGES["body"].format(summary=summary, advice=advice, footer=MESSAGES["footer"])


def lab_text(alert: BudgetAlert) -> str:
    """The notice the user's JupyterLab shows."""
    return MESSAGES[f"lab.{tier(alert.threshold)}"].format(**_fields(alert, own=True))


def recipients(alert: BudgetAlert, settings: AlertSettings) -> list[str]:
    """Email addresses for an alert: the student, the instructors involved and the admins.

    A group budget involves that group's instructors; a user budget those of all
    the user's groups. Deduplicated and sorted.
    """
    addresses: set[str] = set()
    if settings.user_email_template:
        own = settings.user_email_template.format(username=alert.user)
        if _valid_address(own):
            addresses.add(own)
        else:
            log.warning("No email for user %r: %r is not an address", alert.user, own)
    groups = (alert.subject,) if alert.scope == "group" else alert.groups
    for group in groups:
        addresses.update(settings.instructor_emails.get(group, ()))
    addresses.update(settings.admin_emails)
    return sorted(addresses)


def _decimal_string(value: Decimal) -> str:
    """A plain decimal string, never in exponent form ("100", not "1E+2")."""
    return f"{value:f}"


#: ``@name``, ``@channel``, ``@here``, ``@all``: a mention in Mattermost and Rocket.Chat, even without ``<>``.
_MENTION_RE = re.compile(r"@(?=[\w.-])")


def _slack_escape(text: str) -> str:
    """User-controlled text (user, group, server names, notebook paths, job errors) safe in a Slack-style message.

    ``&``, ``<`` and ``>`` as Slack asks (so ``<!channel>``, ``<@U123>`` and links
    ``<url|text>`` cannot be written), and a zero-width space after each ``@`` so
    that no name becomes a mention.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MENTION_RE.sub("@\u200b", text)


def slack_text(text: str, title: str | None = None) -> str:
    """The ``text`` of a Slack-style message: the title in bold, every part escaped."""
    body = _slack_escape(text)
    return f"*{_slack_escape(title)}*\n{body}" if title else body


def webhook_body(settings: AlertSettings, payload: dict) -> dict:
    """What every notice POSTs: the JSON ``payload`` as it is, or for ``slack`` its escaped title and text only."""
    if settings.webhook_format == "slack":
        return {"text": slack_text(str(payload.get("text") or ""), payload.get("title"))}
    return payload


def webhook_payload(alert: BudgetAlert, settings: AlertSettings) -> dict:
    """The JSON body POSTed to the webhook.

    ``webhook_format = "slack"``: ``{"text": "..."}`` (Slack, Mattermost, Rocket.Chat).
    ``webhook_format = "json"``::

        {
          "event": "budget_threshold",
          "user": "alice",
          "groups": ["cs231n"],
          "budget": "user:alice",          # scope:subject, "group:cs231n" for a group budget
          "scope": "user",                 # user | group
          "threshold": 80,                 # percent: 80 | 95 | 100
          "used": "80.50",                 # decimal strings, never floats
          "limit": "100",
          "unit": "money",                 # money | gpu_hours
          "currency": "CNY",               # null for gpu_hours
          "period_start": "2026-10-31T16:00:00Z",   # ISO 8601 UTC, [start, end)
          "period_end": "2026-11-30T16:00:00Z",
          "stop_in_seconds": 300,          # only at threshold 100, else null
          "title": "...",                  # the email subject
          "text": "..."                    # one paragraph for people
        }
    """
    title, summary, advice = _email_parts(alert)
    text = f"{summary} {advice}"
    if settings.webhook_format == "slack":
        return {"text": slack_text(text, title)}
    return {
        "event": "budget_threshold",
        "user": alert.user,
        "groups": list(alert.groups),
        "budget": alert.budget_key,
        "scope": alert.scope,
        "threshold": alert.threshold,
        "used": _decimal_string(alert.used),
        "limit": _decimal_string(alert.limit),
        "unit": alert.unit,
        "currency": alert.currency.code if alert.currency is not None else None,
        "period_start": isoformat(alert.period_start),
        "period_end": isoformat(alert.period_end),
        "stop_in_seconds": alert.grace_seconds if alert.threshold == 100 else None,
        "title": title,
        "text": text,
    }


# -- senders ---------------------------------------------------------------------------


class WebhookError(RuntimeError):
    """The webhook answered with something other than 2xx."""


def _smtp_send(settings: AlertSettings, message: EmailMessage, to: list[str]) -> None:
    with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=settings.timeout) as smtp:
        smtp.ehlo()
        if settings.smtp_starttls:
            # Raises SMTPNotSupportedError if the server does not offer it: never fall back to plain text.
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
        if settings.smtp_username:
            smtp.login(settings.smtp_username, settings.smtp_password)
        refused = smtp.send_message(message, from_addr=settings.mail_from, to_addrs=to)
    if refused:  # some recipients got it; retrying would send them a second copy
        log.warning("SMTP server refused some alert recipients: %s", refused)


async def send_email(settings: AlertSettings, to: list[str], subject: str, body: str) -> None:
    """Send one UTF-8 message to ``to`` over SMTP (in a thread: smtplib blocks)."""
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = ", ".join(to)
    message["Subject"] = subject
    message["Date"] = format_datetime(utcnow())
    message["Message-ID"] = make_msgid(domain=settings.mail_from.split("@")[-1])
    message.set_content(body, charset="utf-8")
    await asyncio.to_thread(_smtp_send, settings, message, list(to))


async def post_webhook(settings: AlertSettings, payload: dict) -> None:
    """POST ``payload`` as JSON to the webhook; WebhookError unless it answers 2xx."""
    request = HTTPRequest(
        settings.webhook_url,
        method="POST",
        body=json.dumps(payload, ensure_ascii=False).encode("utf-8"),
        headers={"Content-Type": "application/json; charset=utf-8"},
        connect_timeout=settings.timeout,
        request_timeout=settings.timeout,
        follow_redirects=False,
        user_agent="jupyterhub-gpu",
    )
    response = await AsyncHTTPClient().fetch(request, raise_error=False)
    if not 200 <= response.code < 300:
        reason = response.error or response.reason
        raise WebhookError(f"webhook {settings.webhook_url} answered HTTP {response.code}: {reason}")


# -- delivery --------------------------------------------------------------------------

#: Failures of the far end (logged in one line); anything else is logged with its traceback.
_EXPECTED_FAILURES = (OSError, smtplib.SMTPException, HTTPClientError, WebhookError)


async def deliver(alert: BudgetAlert, settings: AlertSettings, ledger, now: datetime) -> dict[str, bool]:
    """Send an alert on every configured channel that has not sent it yet; which were sent now.

    Each channel claims its ``AlertSent`` row first and sends only if the claim is
    new, so concurrent or repeated calls send once. A failed send is logged, its
    claim released so that the next call retries it, and the other channels go on.
    The ledger calls are short writes made on the event loop, as the tick makes them.
    """
    sent = dict.fromkeys(CHANNELS, False)
    key = (alert.user, alert.budget_key, alert.period_start, alert.threshold)

    async def channel(name: str, send) -> None:
        if not ledger.claim_alert(*key, name, now, alert.revision):
            return
        try:
            await send()
        except Exception as e:
            log.warning(
                "Budget alert %s %d%% for %s by %s failed, will retry: %s",
                alert.budget_key,
                alert.threshold,
                alert.user,
                name,
                e,
                exc_info=not isinstance(e, _EXPECTED_FAILURES),
            )
            try:
                ledger.release_alert(*key, name, alert.revision)
            except Exception:
                log.exception("Could not release the %s alert claim of %s; it will not be retried", name, alert.user)
        else:
            sent[name] = True

    async def lab():
        ledger.add_notice(
            alert.user, kind="budget", message=lab_text(alert), now=now, level=LEVELS[tier(alert.threshold)]
        )

    await channel("lab", lab)
    if settings.email_enabled:
        to = recipients(alert, settings)
        if to:
            await channel("email", lambda: send_email(settings, to, *alert_text(alert)))
    if settings.webhook_enabled:
        await channel("webhook", lambda: post_webhook(settings, webhook_payload(alert, settings)))
    return sent
