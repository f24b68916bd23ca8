"""Right-sizing advice as notices: a closed session's Lab notice and the instructors' weekly digest.

What to advise is the rule of :mod:`jupyterhub_gpu.rules.advice` (its words :mod:`jupyterhub_gpu.rules.advice_text`);
reading the sessions, storing the advice and summing it (:func:`~jupyterhub_gpu.service.feeds.advice.summary`,
the digest's report) is :mod:`jupyterhub_gpu.service.feeds.advice`. Here are the messages the gateway sends.
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import Protocol

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import Advice, figures
from jupyterhub_gpu.rules.advice_text import advice_text
from jupyterhub_gpu.service.domain.notices import Message, Once, day_in

log = logging.getLogger("jupyterhub_gpu.advice")


class AdvisedSession(Protocol):
    """The session an advice notice is about (the ledger's session rows have these)."""

    id: str
    user: str
    gpu_count: int
    rate_micros: int
    stopped: datetime | None


def advice_message(record: AdvisedSession, advice: Advice, currency: Currency, lang: str = "en") -> Message:
    """The Lab notice of a closed session's advice (its user's own; no mail, no webhook), worded in ``lang``
    (and in another language on the gateway's demand)."""
    words = figures(advice, record.gpu_count, record.rate_micros, record.stopped is not None)
    return Message(
        user=record.user,
        kind="advice",
        text=advice_text(words, currency, lang),
        level="info",
        session_id=record.id,
        what=f"advice notice for {record.user}",
        source=log.name,
        lang=lang,
        words=lambda other: advice_message(record, advice, currency, other),
    )


# -- the weekly digest ------------------------------------------------------------------------


def digest_text(group: str, report: dict, since: datetime, until: datetime, tz, lang: str = "en") -> tuple[str, str]:
    """The subject and body of an instructor's weekly right-sizing digest for one group, in ``lang``."""
    _ = translator(lang)
    t = report["total"]
    first = day_in(aware_utc(since).astimezone(tz).date(), lang)
    last = day_in((aware_utc(until).astimezone(tz) - timedelta(seconds=1)).date(), lang)
    saved = t["potential_saving_display"]
    subject = _(
        "GPU right-sizing for {group}: {amount} could have been saved ({first} to {last})",
        group=group,
        amount=saved,
        first=first,
        last=last,
    )
    lines = [
        _("GPU sessions of the {group} group from {first} to {last}:", group=group, first=first, last=last),
        _(
            "{judged} sessions judged, {advised} of them on a larger profile than their work needed;"
            " following the advice would have saved {amount}.",
            judged=t["sessions_judged"],
            advised=t["sessions_advised"],
            amount=saved,
        ),
        "",
    ]
    for p in report["by_profile"]:
        if p["sessions_advised"]:
            values = dict(
                profile=p["display_name"],
                advised=p["sessions_advised"],
                judged=p["sessions_judged"],
                amount=p["potential_saving_display"],
            )
            lines.append(
                _("- {profile}: {advised} of {judged} sessions, {amount} (chronically larger than needed)", **values)
                if p["oversized"]
                else _("- {profile}: {advised} of {judged} sessions, {amount}", **values)
            )
    lines += ["", _("Per session:")]
    for s in report["sessions"][:50]:
        started = s["started"][:16].replace("T", " ")
        lines.append(_("- {user}, {started} UTC: {advice}", user=s["user"], started=started, advice=s["message"]))
    if len(report["sessions"]) > 50:
        more = len(report["sessions"]) - 50
        lines.append(_("... and {count} more (GET /services/gpu/api/v1/advice).", count=more))
    return subject, "\n".join(lines) + "\n"


def digest_window(now: datetime, tz, weekday: int, hour: int = 8) -> tuple[datetime, datetime]:
    """``(since, due)``: the seven whole local days a digest due at or before ``now`` covers, and when it was due.

    A digest is due on ``weekday`` (0 = Monday) at ``hour`` in the lab's time zone.
    """
    local = aware_utc(now).astimezone(tz)
    day = local.date() - timedelta(days=(local.weekday() - weekday) % 7)
    if datetime.combine(day, time(hour), tzinfo=tz) > local:
        day -= timedelta(days=7)
    # the seven whole local days before the digest's day
    due = datetime.combine(day, time(0), tzinfo=tz)
    since = datetime.combine(day - timedelta(days=7), time(0), tzinfo=tz)
    return since, due


def digest_message(
    group: str, to, report: dict, since: datetime, due: datetime, tz, lang: str = "en"
) -> tuple[Message, Once]:
    """An instructor's weekly digest for one group, by mail only, and its once-per-group-and-week key.

    Worded in ``lang``, as ``report`` (:func:`~jupyterhub_gpu.service.feeds.advice.summary`) is: the lab's
    default language, a group's."""
    subject, body = digest_text(group, report, since, due, tz, lang)
    message = Message(
        user=f"group:{group}",
        kind="advice",
        subject=subject,
        body=body,
        to=tuple(to),
        what=f"advice digest for {group}",
        source=log.name,
        event="digest",
        groups=(group,),
        lang=lang,
    )
    return message, Once(f"group:{group}", f"advice-digest:{group}", due, 0)
