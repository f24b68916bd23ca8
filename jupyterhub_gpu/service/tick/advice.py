"""Right-sizing advice in the tick: final advice for closed sessions, live advice for long-running ones, and the
weekly digest for each group's instructors (docs/advice.md).
"""

from __future__ import annotations

from datetime import datetime

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.channels import channel_owners
from jupyterhub_gpu.ledger.queries.samples import sessions_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.advice import NOTICE_WITHIN, Advice, advise, summarize
from jupyterhub_gpu.service.domain.advice import advice_message, digest_message, digest_window
from jupyterhub_gpu.service.feeds.advice import facts_of, profile_options, sessions_to_judge, store_all, summary
from jupyterhub_gpu.service.notify import Notifier, lab_notice
from jupyterhub_gpu.service.tick.context import LoopSlice, TickContext, chunks
from jupyterhub_gpu.session import SessionFacts


def judge(
    ctx: TickContext, record: SessionRecord, now: datetime, options, minutes: list
) -> tuple[SessionFacts, Advice]:
    """A session's facts and its advice, from its minutes (nothing written)."""
    facts = facts_of(record, now, options)
    return facts, advise(facts, summarize(minutes), options, ctx.advice_settings, ctx.currency)


def update_advice(ctx: TickContext, now: datetime) -> dict:
    """One pass of the tick: final advice for newly closed sessions, live advice for long-running ones.

    A closed session is judged once, ``CLOSE_DELAY`` after its stop (its last
    samples arrive late), and its user gets a Lab notice when it was advised. A
    running session is judged once it has run ``live_after_minutes`` and again
    every ``LIVE_REFRESH`` (:func:`.advice.sessions_to_judge`). Each chunk of
    sessions is stored in one transaction. The service runs the same pass
    through :func:`advise_sessions`, whose writes go through the ledger's writer.
    """
    result = {"final": 0, "live": 0, "advised": 0}
    for step in _advice_steps(ctx, now, result):
        if step is not None:
            step[0](ctx.ledger, *step[1:])
    return result


async def advise_sessions(ctx: TickContext, now: datetime) -> dict:
    """:func:`update_advice` in the tick: its loop gets a turn every :data:`LOOP_SLICE`, each chunk's writes
    are one call of the ledger's writer (:meth:`.context.TickContext.write`)."""
    result = {"final": 0, "live": 0, "advised": 0}
    pause = LoopSlice()
    for step in _advice_steps(ctx, now, result):
        if step is not None:
            await ctx.write(*step)
        await pause()
    return result


def _write_chunk(ledger: Ledger, judged: list, notices: list, now: datetime) -> None:
    """A chunk's advice in one transaction, then the Lab notices of its newly advised closed sessions."""
    store_all(ledger, judged, now)
    for message in notices:
        lab_notice(ledger, message, now)


def _advice_steps(ctx: TickContext, now: datetime, result: dict):
    """The advice pass, a step at a time: ``None`` after a session judged or a chunk's minutes read, and each
    chunk's write as ``(function, *args)`` to run on the ledger; counts in ``result``."""
    ledger, settings, currency = ctx.ledger, ctx.advice_settings, ctx.currency
    closed, live = sessions_to_judge(ledger, now, settings)
    if not closed and not live:
        return
    # the rates and groups the spawner charges and allows: the admins' edits applied, as for GET pricing
    options = profile_options(ledger, settings)
    for final, records in ((True, closed), (False, live)):
        for chunk in chunks(records):
            minutes = sessions_minutes(ledger, dict.fromkeys(r.id for r in chunk))
            yield None
            judged, notices = [], []
            for record in chunk:
                facts, advice = judge(ctx, record, now, options, minutes[record.id])
                judged.append((facts, advice))
                if final:
                    result["final"] += 1
                    if advice.advised:
                        result["advised"] += 1
                        if aware_utc(record.stopped) >= now - NOTICE_WITHIN:
                            notices.append(advice_message(record, advice, currency))
                else:
                    result["live"] += 1
                yield None
            yield (_write_chunk, judged, notices, now)


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
