"""The schedule at work on the service's side: what people read of it, in their language.

The hub's scheduler (:mod:`jupyterhub_gpu.scheduler`, run by the hub's wait queue) decides; the ledger keeps
what it decided (:mod:`jupyterhub_gpu.ledger.queries.schedule`: the stop orders and the queue it publishes);
the tick carries the orders out (:func:`..tick.scheduling.enforce_schedule`) and the REST API shows the queue
(:mod:`..web.api.queue`). Here are the words:

- :func:`order_message`: the notice of a stop order, sent at once through the gateway: a ``preempted`` server
  ("This server will be stopped at 14:02 to free its GPU for a full-price request; ...", event ``preemption``;
  Kueue's eviction: "This server was stopped at 14:02 by the cluster's queue (Kueue): ...") or a ``reserved``
  one ("This server may run until 13:55: CS231N has 4 T4s reserved from 14:00. ...", event ``cull``), with
  what happens after (put back in the queue, a job run again); the stop itself is worded where the scheduler's
  reasons are (:func:`jupyterhub_gpu.scheduler.words.stop_notice_words`), from the key and
  the typed values the hub stored with the order;
- :func:`withdrawn_message`: a stop order the hub withdrew after its notice went out (the GPU is not needed after
  all, the booking was cancelled): "The stop of this server at 14:02 is off: the GPU is no longer needed.";
- :func:`resume_refused_message`: a preempted server that the hub would not put back in the queue.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import english_an, translator
from jupyterhub_gpu.rules.moves import restart_options
from jupyterhub_gpu.scheduler.words import clock_words, reason_words, stop_notice_words, stop_subject_words
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, user_address

#: The stop orders' kinds (the sessions' stop reasons), as :mod:`jupyterhub_gpu.ledger.queries.schedule` names them.
PREEMPTED = "preempted"
RESERVED = "reserved"
#: The channel name of a resume's claim in ``gpu_alerts``: a preempted session is put back in the queue once.
RESUME_CLAIM = "resume"

#: What happens after a preemption: a server whose user asked for it is put back in the queue; a job too.
AFTER_TEXTS = {
    "resume.a": "It will be put back in the queue and start again when a {model} is free.",
    "resume.an": "It will be put back in the queue and start again when an {model} is free.",
    "resume.gpu": "It will be put back in the queue and start again when a GPU is free.",
    "job.a": "The job will be put back in the queue and run again when a {model} is free; with"
    " CheckpointAndResume it goes on from its last checkpoint.",
    "job.an": "The job will be put back in the queue and run again when an {model} is free; with"
    " CheckpointAndResume it goes on from its last checkpoint.",
    "job.gpu": "The job will be put back in the queue and run again when a GPU is free; with"
    " CheckpointAndResume it goes on from its last checkpoint.",
}
#: The follow-up of a withdrawn order whose notice went out, by the order's kind; ``cancelled``: a reservation's
#: end whose booking is gone. The hub withdraws an order the current need no longer gives (docs/scheduling.md,
#: "Orders: derived again every cycle"): mostly because the GPU is not needed after all (another student stopped,
#: a GPU freed, the request was served elsewhere or left), sometimes because the booking was cancelled; the words
#: of a kind are true in every one of its cases.
WITHDRAWN_TEXTS = {
    PREEMPTED: "The stop of this server at {stop_time} is off: the GPU is no longer needed.",
    RESERVED: "The stop of this server at {stop_time} is off: the class reservation no longer needs its GPU.",
    "cancelled": "The stop of this server at {stop_time} is off: the class booking was cancelled.",
}
#: The subjects of the other messages (a stop order's notice's is the scheduler's: :func:`stop_subject_words`).
SUBJECTS = {
    "refused": "[GPU] Your server {server} was not put back in the queue",
    "withdrawn": "[GPU] The stop of your server {server} at {stop_time} is off",
}
REFUSED_TEXT = "Your server {server} was stopped to free its GPU and could not be put back in the queue: {reason}"

# -- the notices -------------------------------------------------------------------------------------------


def _after(kind: str, model: str | None, lang: str) -> str:
    """What happens after a preemption, for ``kind`` ``resume`` (a server) or ``job``."""
    _ = translator(lang)
    if not model:
        return _(AFTER_TEXTS[f"{kind}.gpu"])
    return _(AFTER_TEXTS[f"{kind}.an" if english_an(model) else f"{kind}.a"], model=model)


def order_text(order, tz: tzinfo, now: datetime, model: str | None, resume: bool, job: bool, lang: str = "en") -> str:
    """The words of a stop order's notice in ``lang`` (see :func:`order_message`)."""
    preempted = order.kind == PREEMPTED
    text = stop_notice_words(preempted, order.reason_key, order.values, order.stop_at, lang, tz, now, model)
    if not preempted:
        return text
    parts = [text]
    if job:
        parts.append(_after("job", model, lang))
    elif resume:
        parts.append(_after("resume", model, lang))
    return translator(lang).sentences(parts)


def _given(order) -> str:
    """The order as the hub gave it: the microsecond it decided it (a move, or an order given again after a
    withdrawal, is decided anew, even for the same stop time)."""
    return str(round(order.decided_at.timestamp() * 1_000_000))


def order_once(order) -> Once:
    """A stop order's notice goes out once per channel for the order as given (its time, kind and decision): an
    order moved, or withdrawn and given again for the same time, is told again; a restarted service that reads an
    order it told but did not mark does not tell it twice."""
    return Once(order.user, f"order:{order.session_id}", order.stop_at, 0, f"{order.kind}@{_given(order)}")


def order_message(
    order,
    session,
    tz: tzinfo,
    now: datetime,
    settings: AlertSettings,
    model: str | None = None,
    job_id: str | None = None,
    lang: str = "en",
) -> Message:
    """The notice of a stop order (a ``StopOrder`` of the ledger) for its session's user: in JupyterLab, by mail
    and webhook where configured. ``session`` is the ledger's record (its ``resume`` choice); ``model`` the GPU
    model of its profile (None: unknown); ``job_id`` the notebook job its server runs. Worded in ``lang``, and in
    another language on the gateway's demand."""
    _ = translator(lang)
    preempted = order.kind == PREEMPTED
    resume = bool(getattr(session, "resume", False))
    text = order_text(order, tz, now, model, resume, job_id is not None, lang)
    server = order.server_name or _("(default)")
    subject = stop_subject_words(preempted, server, order.stop_at, lang, tz, now, order.reason_key, order.values)
    address = user_address(settings, order.user)
    return Message(
        user=order.user,
        kind="preemption" if preempted else "reservation",
        text=text,
        level="warning",
        session_id=order.session_id,
        subject=subject,
        to=(address,) if address else (),
        payload={
            "event": "preemption" if preempted else "reservation_end",
            "user": order.user,
            "server_name": order.server_name,
            "session_id": order.session_id,
            "stop_at": isoformat(order.stop_at),
            "reason_key": order.reason_key,
            "reason": reason_words(order.reason_key, order.values, lang, tz, now),
            "resume": resume and job_id is None,
            "job_id": job_id,
            "text": text,
            "title": subject,
        },
        what=f"stop notice for {order.user}",
        source="jupyterhub_gpu.service",
        event="preemption" if preempted else "cull",
        lang=lang,
        words=lambda other: order_message(order, session, tz, now, settings, model, job_id, other),
    )


def withdrawn_once(order) -> Once:
    """A withdrawn order's follow-up goes out once per channel for each withdrawal: that of the order as given
    (its decision) at its withdrawal's time, whatever the restarts before the order is done; an order withdrawn,
    given again for the same time and withdrawn again is told it is off again."""
    withdrawn = "" if order.withdrawn_at is None else str(round(order.withdrawn_at.timestamp() * 1_000_000))
    return Once(order.user, f"order-off:{order.session_id}", order.stop_at, 0, f"{_given(order)}-{withdrawn}")


def booking_cancelled(order, booking_exists) -> bool:
    """Whether a reservation's end was given for a booking (its ``cause``, ``reservation:<id>``, as the hub's
    planner writes it) that ``booking_exists(id)`` no longer finds: its withdrawal then says so."""
    cause = getattr(order, "cause", None) or ""
    if order.kind != RESERVED or not cause.startswith("reservation:"):
        return False
    booking = cause.removeprefix("reservation:")
    return booking.isdigit() and not booking_exists(int(booking))


def withdrawn_message(
    order, tz: tzinfo, now: datetime, settings: AlertSettings, lang: str = "en", cancelled: bool = False
) -> Message:
    """The follow-up of a stop order (a ``StopOrder``) withdrawn after its notice went out: the stop is off, and
    why (``cancelled``: a reservation's end whose booking was cancelled, :func:`booking_cancelled`). The same
    event as the notice (``preemption`` or ``cull``), so the channels that carried the one carry the other."""
    _ = translator(lang)
    preempted = order.kind == PREEMPTED
    stop_time = clock_words(order.stop_at, tz, now, lang)
    server = order.server_name or _("(default)")
    key = PREEMPTED if preempted else ("cancelled" if cancelled else RESERVED)
    text = _(WITHDRAWN_TEXTS[key], stop_time=stop_time)
    subject = _(SUBJECTS["withdrawn"], server=server, stop_time=stop_time)
    address = user_address(settings, order.user)
    return Message(
        user=order.user,
        kind="preemption" if preempted else "reservation",
        text=text,
        level="info",
        session_id=order.session_id,
        subject=subject,
        to=(address,) if address else (),
        payload={
            "event": "preemption_withdrawn" if preempted else "reservation_end_withdrawn",
            "user": order.user,
            "server_name": order.server_name,
            "session_id": order.session_id,
            "stop_at": isoformat(order.stop_at),
            "text": text,
            "title": subject,
        },
        what=f"withdrawn stop notice for {order.user}",
        source="jupyterhub_gpu.service",
        event="preemption" if preempted else "cull",
        lang=lang,
        words=lambda other: withdrawn_message(order, tz, now, settings, other, cancelled),
    )


def resume_refused_message(session, reason: str, settings: AlertSettings, lang: str = "en") -> Message:
    """A preempted server the hub would not put back in the queue (its budget, its profile gone): why, as the hub
    said it (in the user's language: the request carried it)."""
    _ = translator(lang)
    server = session.server_name or _("(default)")
    text = _(REFUSED_TEXT, server=server, reason=reason)
    subject = _(SUBJECTS["refused"], server=server)
    address = user_address(settings, session.user)
    return Message(
        user=session.user,
        kind="preemption",
        text=text,
        level="error",
        session_id=session.id,
        subject=subject,
        to=(address,) if address else (),
        payload={
            "event": "resume_refused",
            "user": session.user,
            "server_name": session.server_name,
            "session_id": session.id,
            "reason": reason,
            "text": text,
            "title": subject,
        },
        what=f"resume notice for {session.user}",
        source="jupyterhub_gpu.service",
        event="preemption",
        lang=lang,
        words=lambda other: resume_refused_message(session, reason, settings, other),
    )


def resume_once(session) -> Once:
    """A preempted session is put back in the queue once (its claim in ``gpu_alerts``, channel ``resume``)."""
    return Once(session.user, f"resume:{session.id}", session.started, 0)


def resume_options(session) -> dict:
    """The spawn options that put a preempted server back in the queue: its profile, its pool, and the choice to
    be put back again should it be preempted again (the one rule of a move: :func:`.moves.restart_options`)."""
    return restart_options(session, session.profile)
