"""Budget alerts: who is told, and what they are told (pure: :mod:`..notify` delivers them).

Students, their instructors and the admins are warned when a budget reaches 80%
and 95%, and get a final notice at 100% before the server is stopped. Each alert
is a Lab notice and goes to every Apprise channel that wants its event
(``budget.80``, ``budget.95`` or ``budget.100``, by :func:`tier`): the user's own,
those of the groups involved, the admins'; with the deprecated mail settings, one
mail to each of :func:`recipients`. JSON webhooks get :func:`budget_payload`'s
fields. :func:`budget_message` is the alert as the gateway sends it.

Each alert goes out once per user, budget, period, threshold, budget revision
and channel (:func:`budget_once`): the gateway claims the ledger's ``AlertSent``
row *before* sending, and a send that fails releases its claim, so a later
metering tick tries that channel again; the other channels are not affected.

Every user-visible string is a template in :data:`MESSAGES`, worded through the
message catalogue (:mod:`jupyterhub_gpu.i18n`) in the reader's language (``lang``;
the gateway words each channel's copy: :meth:`.notices.Message.worded`); money is
a Decimal, shown with :class:`~jupyterhub_gpu.money.Currency` in that language's
format and sent in payloads as a decimal string, never a float.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from decimal import ROUND_HALF_UP, Decimal

from jupyterhub_gpu.billing import UNITS, BudgetStatus
from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import Currency, parse_amount
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, day_in, valid_address

log = logging.getLogger("jupyterhub_gpu.alerts")

#: The default thresholds; any whole percentage from 1 to 100 can be delivered (see :func:`parse_thresholds`).
THRESHOLDS = (80, 95, 100)
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


#: Every string a user, instructor or admin reads, in English: the message catalogs' ids (their Chinese is in
#: jupyterhub_gpu/locale/zh_CN/); ``budget.*`` and ``grace.*`` fill the other templates.
MESSAGES: dict[str, str] = {
    "budget.own": "your budget",
    "budget.user": "the personal budget of {user}",
    "budget.group": "the {group} group budget",
    "amount.gpu_hours": "{hours} GPU-hours",
    "period": "{start} to {end}",
    "grace.now": "now",
    "grace.second": "in {n} second",  # the plural catalog entries of these pairs: translator's .plural
    "grace.seconds": "in {n} seconds",
    "grace.minute": "in {n} minute",
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
        """The alert for ``user`` of a budget status from :mod:`.billing`."""
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


def _amount(alert: BudgetAlert, value: Decimal, lang: str = "en") -> str:
    if alert.unit == "money":
        return alert.currency.format(value, locale=lang)
    hours = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return translator(lang)(MESSAGES["amount.gpu_hours"], hours=f"{hours:f}")


def _grace(seconds: int, lang: str = "en") -> str:
    _ = translator(lang)
    if seconds <= 0:
        return _(MESSAGES["grace.now"])
    if seconds % 60:
        return _.plural(MESSAGES["grace.second"], MESSAGES["grace.seconds"], seconds, n=seconds)
    minutes = seconds // 60
    return _.plural(MESSAGES["grace.minute"], MESSAGES["grace.minutes"], minutes, n=minutes)


def _fields(alert: BudgetAlert, own: bool, lang: str = "en") -> dict[str, object]:
    """Values for the templates in ``lang``; ``own`` words the budget for its user ("your budget")."""
    _ = translator(lang)
    if alert.scope == "group":
        budget = _(MESSAGES["budget.group"], group=alert.subject)
    else:
        budget = _(MESSAGES["budget.own"]) if own else _(MESSAGES["budget.user"], user=alert.subject)
    last_day = (alert.period_end - timedelta(microseconds=1)).astimezone(alert.tz).date()
    first_day = alert.period_start.astimezone(alert.tz).date()
    return {
        "user": alert.user,
        "budget": budget,
        "threshold": alert.threshold,
        "used": _amount(alert, alert.used, lang),
        "limit": _amount(alert, alert.limit, lang),
        "period": _(MESSAGES["period"], start=day_in(first_day, lang), end=day_in(last_day, lang)),
        "grace": _grace(alert.grace_seconds, lang),
    }


def _email_parts(alert: BudgetAlert, lang: str = "en") -> tuple[str, str, str]:
    """The subject, summary and advice of an alert, in the third person."""
    _ = translator(lang)
    values = _fields(alert, own=False, lang=lang)
    return (
        _(MESSAGES[f"subject.{tier(alert.threshold)}"], **values),
        _(MESSAGES["summary.100" if alert.threshold == 100 else "summary"], **values),
        _(MESSAGES[f"advice.{tier(alert.threshold)}"], **values),
    )


def alert_text(alert: BudgetAlert, lang: str = "en") -> tuple[str, str]:
    """The email subject and body of an alert (read by the student, instructors and admins)."""
    _ = translator(lang)
    subject, summary, advice = _email_parts(alert, lang)
    return subject, _(MESSAGES["body"], summary=summary, advice=advice, footer=_(MESSAGES["footer"]))


def lab_text(alert: BudgetAlert, lang: str = "en") -> str:
    """The notice the user's JupyterLab shows."""
    return translator(lang)(MESSAGES[f"lab.{tier(alert.threshold)}"], **_fields(alert, own=True, lang=lang))


def recipients(alert: BudgetAlert, settings: AlertSettings) -> list[str]:
    """Email addresses for an alert: the student, the instructors involved and the admins.

    A group budget involves that group's instructors; a user budget those of all
    the user's groups. Deduplicated and sorted.
    """
    addresses: set[str] = set()
    if settings.user_email_template:
        own = settings.user_email_template.format(username=alert.user)
        if valid_address(own):
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


def budget_payload(alert: BudgetAlert, lang: str = "en") -> dict:
    """The alert's fields for structured channels: added to Apprise's body by ``json://`` channels.

    Apprise's JSON body has ``version``, ``title``, ``message`` (the text, as chats show it), ``attachments``
    and ``type``; the fields below come with them (``title`` is the same). Chats show the title and text::

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
          "text": "..."                    # one paragraph for people (both in the reader's language)
        }
    """
    title, summary, advice = _email_parts(alert, lang)
    text = translator(lang).sentences((summary, advice))
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


def budget_once(alert: BudgetAlert) -> Once:
    """An alert goes out once per user, budget, period, threshold, budget revision and channel."""
    return Once(alert.user, alert.budget_key, alert.period_start, alert.threshold, alert.revision)


def budget_message(alert: BudgetAlert, settings: AlertSettings, lang: str = "en") -> Message:
    """The alert as the gateway delivers it: the Lab notice, the mail to :func:`recipients`, the webhook payload;
    worded in ``lang``, and in any other language on the gateway's demand."""
    subject, body = alert_text(alert, lang)
    return Message(
        user=alert.user,
        kind="budget",
        text=lab_text(alert, lang),
        level=LEVELS[tier(alert.threshold)],
        subject=subject,
        body=body,
        to=tuple(recipients(alert, settings)) if settings.email_enabled else (),
        payload=budget_payload(alert, lang),
        what=f"Budget alert {alert.budget_key} {alert.threshold}% for {alert.user}",
        source=log.name,
        event=f"budget.{tier(alert.threshold)}",
        # a user's own budget goes to their channels and the admins', never a group's (a course chat would
        # show one student's usage to classmates: a user reads only their own usage); a group pool's to that group's
        # channels
        groups=(alert.subject,) if alert.scope == "group" else (),
        lang=lang,
        words=lambda other: budget_message(alert, settings, other),
    )
