"""The schedule at work on the service's side (issue 16): what people read of it, in their language.

The hub's scheduler (:mod:`jupyterhub_gpu.scheduling`, run by the hub's wait queue) decides; the ledger keeps
what it decided (:mod:`jupyterhub_gpu.ledger.queries.schedule`: the stop orders and the queue it publishes);
the tick carries the orders out (:func:`..tick.enforce_schedule`) and the REST API shows the queue
(:mod:`..web.api.queue`). Here are the words:

- :func:`order_message`: the notice of a stop order, sent at once through the gateway: a ``preempted`` server
  ("This server will be stopped at 14:02 to free its GPU for a full-price request; ...", event ``preemption``)
  or a ``reserved`` one ("This server may run until 13:55: 4 T4s are reserved for CS231N from 14:00. ...",
  event ``cull``), with what happens after (put back in the queue, a job run again);
- :func:`status_words` and :func:`reason_words`: a waiting request's headline ("Waiting for a free A100 —
  position 2 of 5 — about 12 min") and why it stands there, from the scheduler's templates
  (:data:`~jupyterhub_gpu.scheduling.TEXTS`) and the values the hub stored with them;
- :func:`resume_refused_message`: a preempted server that the hub would not put back in the queue.

The scheduler words some values in English before they are stored (``this week``, ``1 h 5 min``, ``4 T4s``,
``Tue 8 Sep 14:00``): :func:`values_in` words again those of a shape it knows for another language, and leaves
the others (a reservation's label, a model) as they are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, tzinfo
from string import Formatter

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.scheduling import TEXTS
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, user_address

#: The stop orders' kinds (the sessions' stop reasons), as :mod:`jupyterhub_gpu.ledger.queries.schedule` names them.
PREEMPTED = "preempted"
RESERVED = "reserved"
#: The channel name of a resume's claim in ``gpu_alerts``: a preempted session is put back in the queue once.
RESUME_CLAIM = "resume"

#: A number of GPUs of a model, as the scheduler's ``gpus_text`` writes it in English.
GPUS_TEXTS = {"one": "1 {model}", "many": "{count} {model}s"}
#: Durations as the scheduler's ``duration_text`` writes them (and the grace of a preemption under a minute).
DURATION_TEXTS = {
    "min": "{n} min",
    "h": "{hours} h",
    "h min": "{hours} h {minutes} min",
    "s": "{n} s",
}
#: The window of a group's decayed use (the scheduler's ``period_text``).
PERIOD_TEXTS = {
    "week": "this week",
    "day": "today",
    "days": "in the last {n} days",
    "hours": "in the last {n} hours",
}
#: A time on another day than today (``clock_text``'s ``Tue 8 Sep 13:55``), in Chinese.
OTHER_DAY = "{month}/{day} {time}"

#: The notice of a stop order by the reason the hub gave (its ``reason_key``); ``stop_time`` and ``until`` are
#: the order's time in the lab's zone.
NOTICE_TEXTS = {
    "preempt": "This server will be stopped at {stop_time} to free its GPU for a full-price request; your training"
    " is being checkpointed (CheckpointAndResume saves on the stop).",
    "preempt.save": "This server will be stopped at {stop_time} to free its GPU for a full-price request;"
    " save your work now.",
    "end": "This server may run until {until}: {gpus} are reserved for {label} from {start}."
    " It will be stopped then; save your work.",
    "reserved": "This server will be stopped at {stop_time}: its GPUs are reserved for a class from then."
    " Save your work now.",
}
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
SUBJECTS = {
    PREEMPTED: "[GPU] Your server {server} will be stopped at {stop_time} to free its GPU",
    RESERVED: "[GPU] Your server {server} will be stopped at {stop_time} for a class reservation",
    "refused": "[GPU] Your server {server} was not put back in the queue",
}
REFUSED_TEXT = "Your server {server} was stopped to free its GPU and could not be put back in the queue: {reason}"

_CLOCK = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (\d{1,2}) ([A-Z][a-z]{2}) (\d{2}:\d{2})$")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DURATION = re.compile(r"^(?:(\d+) h)?(?: ?(\d+) min)?$|^(\d+) s$")


def an_before(model: str) -> bool:
    """English says "an A100", "an H100", "an L4", "a T4": a model is read out letter by letter."""
    return model[:1].upper() in "AEFHILMNORSX"


def gpus_words(count: int, model: str, lang: str = "en") -> str:
    """``1 T4``, ``4 T4s`` (``4 块 T4``)."""
    _ = translator(lang)
    return _(GPUS_TEXTS["one"], model=model) if count == 1 else _(GPUS_TEXTS["many"], count=count, model=model)


def duration_words(delta: timedelta, lang: str = "en") -> str:
    """``12 min``, ``1 h 20 min`` (over an hour, to 5 minutes), ``2 h``: the scheduler's ``duration_text``."""
    _ = translator(lang)
    minutes = max(0, round(delta / timedelta(minutes=1)))
    if minutes < 60:
        return _(DURATION_TEXTS["min"], n=max(minutes, 1))
    hours, rest = divmod(5 * round(minutes / 5), 60)
    return _(DURATION_TEXTS["h min"], hours=hours, minutes=rest) if rest else _(DURATION_TEXTS["h"], hours=hours)


def wait_words(wait_seconds: int | None, lang: str = "en") -> str:
    """The estimate: ``about 12 min``, ``any moment now``, ``more than a day``, ``no estimate yet``."""
    _ = translator(lang)
    if wait_seconds is None:
        return _(TEXTS["wait.none"])
    wait = timedelta(seconds=wait_seconds)
    if wait < timedelta(minutes=1):
        return _(TEXTS["wait.now"])
    if wait > timedelta(days=1):
        return _(TEXTS["wait.day"])
    return _(TEXTS["wait.about"], duration=duration_words(wait, lang))


def clock_words(moment: datetime, tz: tzinfo, now: datetime, lang: str = "en") -> str:
    """``13:55`` on the day of ``now`` in ``tz``, else ``Tue 8 Sep 13:55`` (``9/8 13:55``)."""
    local, today = moment.astimezone(tz), now.astimezone(tz)
    if local.date() == today.date():
        return f"{local:%H:%M}"
    if lang == "en":
        return f"{local:%a} {local.day} {local:%b %H:%M}"
    return translator(lang)(OTHER_DAY, month=local.month, day=local.day, time=f"{local:%H:%M}")


def _duration_in(text: str, lang: str) -> str:
    found = _DURATION.fullmatch(text)
    if not found or not any(found.groups()):
        return text
    hours, minutes, seconds = found.groups()
    _ = translator(lang)
    if seconds is not None:
        return _(DURATION_TEXTS["s"], n=int(seconds))
    if hours is None:
        return _(DURATION_TEXTS["min"], n=int(minutes))
    if minutes is None:
        return _(DURATION_TEXTS["h"], hours=int(hours))
    return _(DURATION_TEXTS["h min"], hours=int(hours), minutes=int(minutes))


def _period_in(text: str, lang: str) -> str:
    _ = translator(lang)
    if text == PERIOD_TEXTS["week"]:
        return _(PERIOD_TEXTS["week"])
    if text == PERIOD_TEXTS["day"]:
        return _(PERIOD_TEXTS["day"])
    found = re.fullmatch(r"in the last (\d+) (days|hours)", text)
    if found:
        return _(PERIOD_TEXTS[found.group(2)], n=int(found.group(1)))
    return text


def _gpus_in(text: str, model: str | None, lang: str) -> str:
    found = re.fullmatch(r"(\d+) (.+)", text)
    if not found:
        return text
    count, rest = int(found.group(1)), found.group(2)
    model = model or (rest[:-1] if count != 1 and rest.endswith("s") else rest)
    if rest not in (model, f"{model}s"):
        return text
    return gpus_words(count, model, lang)


def _clock_in(text: str, lang: str) -> str:
    found = _CLOCK.fullmatch(text)
    if not found or found.group(3) not in _MONTHS:
        return text
    month = _MONTHS.index(found.group(3)) + 1
    return translator(lang)(OTHER_DAY, month=month, day=int(found.group(2)), time=found.group(4))


def values_in(values: Mapping[str, object], lang: str = "en") -> dict[str, str]:
    """The values the scheduler stored with a text, worded again in ``lang`` where their shape is known.

    English: as they are. Another language: durations (``waited``, ``grace``, ``duration``), the window of use
    (``period``), GPU counts (``gpus``) and times on another day (``start``, ``end``, ``until``, ``at``); the
    others (labels, models, numbers) stay as they are.
    """
    out = {k: str(v) for k, v in values.items()}
    if lang == "en":
        return out
    model = out.get("model")
    for key, text in out.items():
        if key in ("waited", "grace", "duration"):
            out[key] = _duration_in(text, lang)
        elif key == "period":
            out[key] = _period_in(text, lang)
        elif key == "gpus":
            out[key] = _gpus_in(text, model, lang)
        elif key in ("start", "end", "until", "at"):
            out[key] = _clock_in(text, lang)
    return out


def reason_words(key: str, values: Mapping[str, object], lang: str = "en") -> str:
    """One of the scheduler's texts (a key of :data:`~jupyterhub_gpu.scheduling.TEXTS`) in ``lang``; a key it
    does not know (a newer hub's) is shown as the key."""
    if key not in TEXTS:
        return key
    worded = values_in(values, lang)
    if not {name for _, name, _, _ in Formatter().parse(TEXTS[key]) if name} <= set(worded):
        return key  # values that do not fit the template (a newer hub's)
    return translator(lang)(TEXTS[key], **worded)


def status_words(model: str, count: int, position: int, length: int, wait_seconds: int | None, lang="en") -> str:
    """A waiting request's headline: ``Waiting for a free A100 — position 2 of 5 — about 12 min``."""
    _ = translator(lang)
    wait = wait_words(wait_seconds, lang)
    if count == 1:
        return _(TEXTS["status"], model=model, position=position, length=length, wait=wait)
    head = _(
        "Waiting for {count} free {model} GPUs — position {position} of {length}",
        count=count,
        model=model,
        position=position,
        length=length,
    )
    return " — ".join((head, wait))


# -- the notices -------------------------------------------------------------------------------------------


def _after(kind: str, model: str | None, lang: str) -> str:
    """What happens after a preemption, for ``kind`` ``resume`` (a server) or ``job``."""
    _ = translator(lang)
    if not model:
        return _(AFTER_TEXTS[f"{kind}.gpu"])
    return _(AFTER_TEXTS[f"{kind}.an" if an_before(model) else f"{kind}.a"], model=model)


def order_text(order, tz: tzinfo, now: datetime, model: str | None, resume: bool, job: bool, lang: str = "en") -> str:
    """The words of a stop order's notice in ``lang`` (see :func:`order_message`)."""
    _ = translator(lang)
    stop_time = clock_words(order.stop_at, tz, now, lang)
    values = values_in(order.values, lang)
    if order.kind == PREEMPTED:
        key = "preempt" if order.reason_key == "preempt" else "preempt.save"
        parts = [_(NOTICE_TEXTS[key], stop_time=stop_time)]
        if job:
            parts.append(_after("job", model, lang))
        elif resume:
            parts.append(_after("resume", model, lang))
        return ("" if lang == "zh-CN" else " ").join(parts)
    if {"label", "start"} <= set(values) and (values.get("gpus") or model):
        count = values.get("count")
        gpus = values.get("gpus") or gpus_words(int(count) if count and count.isdigit() else 1, model or "", lang)
        return _(NOTICE_TEXTS["end"], until=stop_time, gpus=gpus, label=values["label"], start=values["start"])
    return _(NOTICE_TEXTS["reserved"], stop_time=stop_time)


def order_once(order) -> Once:
    """A stop order's notice goes out once per channel for its time: an order moved earlier is told again."""
    return Once(order.user, f"order:{order.session_id}", order.stop_at, 0, order.kind)


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
    stop_time = clock_words(order.stop_at, tz, now, lang)
    server = order.server_name or _("(default)")
    address = user_address(settings, order.user)
    return Message(
        user=order.user,
        kind="preemption" if preempted else "reservation",
        text=text,
        level="warning",
        session_id=order.session_id,
        subject=_(SUBJECTS[PREEMPTED if preempted else RESERVED], server=server, stop_time=stop_time),
        to=(address,) if address else (),
        payload={
            "event": "preemption" if preempted else "reservation_end",
            "user": order.user,
            "server_name": order.server_name,
            "session_id": order.session_id,
            "stop_at": isoformat(order.stop_at),
            "reason_key": order.reason_key,
            "reason": reason_words(order.reason_key, order.values, lang),
            "resume": resume and job_id is None,
            "job_id": job_id,
            "text": text,
            "title": _(SUBJECTS[PREEMPTED if preempted else RESERVED], server=server, stop_time=stop_time),
        },
        what=f"stop notice for {order.user}",
        source="jupyterhub_gpu.service",
        event="preemption" if preempted else "cull",
        lang=lang,
        words=lambda other: order_message(order, session, tz, now, settings, model, job_id, other),
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
    be put back again should it be preempted again."""
    options: dict = {"profile": session.profile}
    if session.pool:
        options["pool"] = session.pool
    if session.tier == "preemptible" and session.resume:
        options["resume"] = True
    return options
