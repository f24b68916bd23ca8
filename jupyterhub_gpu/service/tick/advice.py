"""Right-sizing advice in the tick: final advice for closed sessions, live advice for long-running ones, and the
weekly digest for each group's instructors (docs/advice.md).
"""

from __future__ import annotations

from datetime import datetime

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.channels import channel_owners
from jupyterhub_gpu.ledger.queries.samples import session_minutes, sessions_minutes
from jupyterhub_gpu.rules.advice import NOTICE_WITHIN, Advice, advise, summarize
from jupyterhub_gpu.service.domain.advice import advice_message, digest_message, digest_window
from jupyterhub_gpu.service.feeds.advice import facts_of, profile_options, sessions_to_judge, store, summary
from jupyterhub_gpu.service.notify import Notifier, lab_notice
from jupyterhub_gpu.service.tick.context import LoopSlice, TickContext, chunks


def judge(ctx: TickContext, record: SessionRecord, now: datetime, options, minutes: list | None = None) -> Advice:
    """Advise a session from its minutes (read here unless given) and store the advice."""
    ledger = ctx.ledger
    facts = facts_of(record, now, options)
    if minutes is None:
        minutes = session_minutes(ledger, record.id)
    advice = advise(facts, summarize(minutes), options, ctx.advice_settings, ctx.currency)
    store(ledger, facts, advice, now)
    return advice


def update_advice(ctx: TickContext, now: datetime) -> dict:
    """One pass of the tick: final advice for newly closed sessions, live advice for long-running ones.

    A closed session is judged once, ``CLOSE_DELAY`` after its stop (its last
    samples arrive late), and its user gets a Lab notice when it was advised. A
    running session is judged once it has run ``live_after_minutes`` and again
    every ``LIVE_REFRESH`` (:func:`.advice.sessions_to_judge`). The service runs
    the same pass through :func:`advise_sessions`, which lets the event loop in
    between sessions.
    """
    result = {"final": 0, "live": 0, "advised": 0}
    for _ in _advice_steps(ctx, now, result):
        pass
    return result


async def advise_sessions(ctx: TickContext, now: datetime) -> dict:
    """:func:`update_advice` on the event loop: the loop gets a turn every :data:`LOOP_SLICE`."""
    result = {"final": 0, "live": 0, "advised": 0}
    pause = LoopSlice()
    for _ in _advice_steps(ctx, now, result):
        await pause()
    return result


def _advice_steps(ctx: TickContext, now: datetime, result: dict):
    """The advice pass, one step (a session judged, or a chunk's minutes read) per ``yield``; counts in ``result``."""
    ledger, settings, currency = ctx.ledger, ctx.advice_settings, ctx.currency
    closed, live = sessions_to_judge(ledger, now, settings)
    if not closed and not live:
        return
    # the rates and groups the spawner charges and allows: the admins' edits applied, as for GET pricing
    options = profile_options(ledger, settings)
    for final, records in ((True, closed), (False, live)):
        for chunk in chunks(records):
            minutes = sessions_minutes(ledger, dict.fromkeys(r.id for r in chunk))
            yield
            for record in chunk:
                advice = judge(ctx, record, now, options, minutes[record.id])
                if final:
                    result["final"] += 1
                    if advice.advised:
                        result["advised"] += 1
                        if aware_utc(record.stopped) >= now - NOTICE_WITHIN:
                            lab_notice(ledger, advice_message(record, advice, currency), now)
                else:
                    result["live"] += 1
                yield


async def send_digests(ctx: TickContext, now: datetime) -> list[str]:
    """Send each group's instructors the last week's digest, once per week, at or after ``ctx.digest_weekday``
    ``ctx.digest_hour`` local (none when ``ctx.digest_weekday`` is None).

    The gateway's :class:`~.notices.AlertSettings` say where: a group gets
    its digest on its channels that want ``digest`` (configured or stored) and, with
    the deprecated mail settings, by mail to its ``instructor_emails``. A digest is
    claimed in the ledger before it is sent (once per group, week and channel,
    across restarts) and released when sending fails. Groups with nothing advised
    get nothing. Returns the groups that some channel got it for now.
    """
    if ctx.digest_weekday is None:
        return []
    ledger, notifier, tz, currency = ctx.ledger, ctx.notifier, ctx.tz, ctx.currency
    settings = notifier.settings
    groups = digest_groups(notifier)
    if not groups:
        return []
    since, due = digest_window(now, tz, ctx.digest_weekday, ctx.digest_hour)
    sent = []
    for group in groups:
        # a group's digest speaks the lab's default language (its channels and instructors have none of their own)
        lang = notifier.default_language
        report = summary(ledger, since, due, group, currency, lang)
        if not report["total"]["sessions_advised"]:
            continue
        to = settings.instructor_emails.get(group, ()) if settings.email_enabled else ()
        message, key = digest_message(group, to, report, since, due, tz, lang)
        if any((await notifier.send(message, ("apprise",), once=key, now=now)).values()):
            sent.append(group)
    return sent


def digest_groups(notifier: Notifier) -> list[str]:
    """The groups some channel wants the digest of: mail to ``instructor_emails``, configured or stored channels."""
    settings = notifier.settings
    groups = {g for g, to in settings.instructor_emails.items() if to} if settings.email_enabled else set()
    groups |= {c.owner for c in settings.channels if c.owner_kind == "group" and "digest" in c.events}
    if notifier.stored:
        groups |= set(channel_owners(notifier.ledger, "group", "digest"))
    return sorted(groups)
