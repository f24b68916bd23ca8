"""The scheduler's messages in the reader's language: worded once, here, from a key and its typed values.

A decision (or a stop order, or a published queue entry) keeps a key of :data:`~.texts.TEXTS` and typed values
(:mod:`.texts`); :func:`reason_words` words it in a language, each value by its type: a time as ``13:55`` on the
reader's day and ``Tue 8 Sep 13:55`` (``9月8日 13:55``) on another, a duration as ``1 h 5 min``, GPUs as ``1 T4`` or
``4 T4s``, the window of decayed use as ``this week``, a grace as ``2 min`` or ``30 s``; a name as it is. The hub's
spawn page, the gpu service's queue, its preemption records and its notices all word the scheduler's messages
through these functions, with the translator of :mod:`jupyterhub_gpu.i18n`. A preemption (and a reservation's
end, and Kueue's stop of a session) is worded here once for both the queue's reason and the student's notice
(:func:`stop_notice_words`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta, tzinfo
from string import Formatter

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.scheduler.texts import KUEUE_WHY, TEXTS, WEEK, Gpus, Grace, KueueWhy, Period, Window

#: A number of GPUs of a model: the singular and the plural the catalog chooses between by the count (``1 T4``,
#: ``4 T4s``; one form in Chinese, ``4 块 T4``).
GPUS_TEXTS = {"one": "{count} {model}", "many": "{count} {model}s"}
#: Durations in whole minutes (over an hour, to 5 minutes), and a grace under a minute in seconds.
DURATION_TEXTS = {
    "min": "{n} min",
    "h": "{hours} h",
    "h min": "{hours} h {minutes} min",
    "s": "{n} s",
}
#: The window of a group's decayed use, by its half-life.
PERIOD_TEXTS = {
    "week": "this week",
    "day": "today",
    "days": "in the last {n} days",
    "hours": "in the last {n} hours",
}
#: A time on another day than the reader's today, in a language other than English (English: ``Tue 8 Sep 13:55``).
OTHER_DAY = "{month}/{day} {time}"
#: Kueue's stop, by the reason its order keeps: the notice's text (:func:`stop_notice_words`).
KUEUE_NOTICES = {"stop.kueue": "notice.kueue", "stop.kueue.save": "notice.kueue.save"}


def gpus_words(count: int, model: str, lang: str = "en") -> str:
    """``1 T4``, ``4 T4s`` (``4 块 T4``)."""
    return translator(lang).plural(GPUS_TEXTS["one"], GPUS_TEXTS["many"], count, count=count, model=model)


def duration_words(delta: timedelta, lang: str = "en") -> str:
    """``12 min``, ``1 h 20 min`` (whole minutes, at least one; over an hour, to 5 minutes), ``2 h``."""
    _ = translator(lang)
    minutes = max(0, round(delta / timedelta(minutes=1)))
    if minutes < 60:
        return _(DURATION_TEXTS["min"], n=max(minutes, 1))
    hours, rest = divmod(5 * round(minutes / 5), 60)
    return _(DURATION_TEXTS["h min"], hours=hours, minutes=rest) if rest else _(DURATION_TEXTS["h"], hours=hours)


def grace_words(delta: timedelta, lang: str = "en") -> str:
    """A preemption's grace: a duration (:func:`duration_words`), or ``30 s`` under a minute."""
    if delta >= timedelta(minutes=1):
        return duration_words(delta, lang)
    return translator(lang)(DURATION_TEXTS["s"], n=delta.seconds)


def period_words(half_life: timedelta, lang: str = "en") -> str:
    """How a student reads the window of decayed use: ``this week`` for a half-life of 7 days, ``today`` for one
    day, else ``in the last 3 days`` or ``in the last 12 hours``."""
    _ = translator(lang)
    if half_life == WEEK:
        return _(PERIOD_TEXTS["week"])
    if half_life == timedelta(days=1):
        return _(PERIOD_TEXTS["day"])
    days = half_life / timedelta(days=1)
    if days >= 1:
        return _(PERIOD_TEXTS["days"], n=round(days))
    return _(PERIOD_TEXTS["hours"], n=max(1, round(half_life / timedelta(hours=1))))


def clock_words(moment: datetime, zone: tzinfo | None = None, now: datetime | None = None, lang: str = "en") -> str:
    """``13:55`` on the day of ``now`` in ``zone``, else ``Tue 8 Sep 13:55`` (``9月8日 13:55``).

    ``zone`` None: the moment's own; ``now`` None: the day is always said."""
    local = moment.astimezone(zone) if zone is not None else moment
    if now is not None and local.date() == now.astimezone(local.tzinfo).date():
        return f"{local:%H:%M}"
    if lang == "en":
        return f"{local:%a} {local.day} {local:%b %H:%M}"
    return translator(lang)(OTHER_DAY, month=local.month, day=local.day, time=f"{local:%H:%M}")


def wait_words(wait: timedelta | None, lang: str = "en") -> str:
    """The estimate: ``about 12 min``, ``any moment now``, ``more than a day``, ``no estimate yet`` (None)."""
    _ = translator(lang)
    if wait is None:
        return _(TEXTS["wait.none"])
    if wait < timedelta(minutes=1):
        return _(TEXTS["wait.now"])
    if wait > timedelta(days=1):
        return _(TEXTS["wait.day"])
    return _(TEXTS["wait.about"], duration=duration_words(wait, lang))


def kueue_why_words(why: KueueWhy, lang: str = "en") -> str:
    """Why Kueue stopped a session, as a clause: ``a workload of a higher priority needed its GPU``; a kind this
    hub does not know (a newer hub's) names Kueue's own reason."""
    _ = translator(lang)
    if why.kind in KUEUE_WHY and why.kind != "other":
        return _(KUEUE_WHY[why.kind])
    return _(KUEUE_WHY["other"], reason=why.reason or why.kind)


def value_words(value, lang: str = "en", zone: tzinfo | None = None, now: datetime | None = None) -> str:
    """One value of a message in ``lang``, by its type; a name or a number as it is."""
    if isinstance(value, KueueWhy):
        return kueue_why_words(value, lang)
    if isinstance(value, Gpus):
        return gpus_words(value.count, value.model, lang)
    if isinstance(value, Grace):
        return grace_words(value.delta, lang)
    if isinstance(value, Period):
        return period_words(value.half_life, lang)
    if isinstance(value, Window):
        return window_words(value, zone, lang)
    if isinstance(value, datetime):
        return clock_words(value, zone, now, lang)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return duration_words(value, lang)
    if isinstance(value, tuple):
        return translator(lang).listing(value_words(v, lang, zone, now) for v in value)
    return str(value)


def window_words(window: Window, zone: tzinfo | None = None, lang: str = "en") -> str:
    """A booking's window on its start's day: ``Tue 8 Sep 14:00–16:00`` (``9月8日 14:00–16:00``), in ``zone``."""
    end = window.end.astimezone(zone) if zone is not None else window.end
    return translator(lang)(TEXTS["span"], start=clock_words(window.start, zone, None, lang), end=f"{end:%H:%M}")


def _placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in Formatter().parse(text) if name}


def reason_words(
    key: str, values: Mapping[str, object], lang: str = "en", zone: tzinfo | None = None, now: datetime | None = None
) -> str:
    """One of the scheduler's messages in ``lang``: times are said in ``zone``, without the day on the day of
    ``now``. A key it does not know (a newer hub's), or values that do not fit the key's text, are shown as the
    key."""
    if key not in TEXTS:
        return key
    if not _placeholders(TEXTS[key]) <= set(values):
        return key
    worded = {name: value_words(value, lang, zone, now) for name, value in values.items()}
    return translator(lang)(TEXTS[key], **worded)


def status_words(model: str, count: int, position: int, length: int, wait: timedelta | None, lang: str = "en") -> str:
    """A waiting request's headline: ``Waiting for a free A100 — position 2 of 5 — about 12 min``."""
    _ = translator(lang)
    worded = wait_words(wait, lang)
    if count == 1:
        return _(TEXTS["status"], model=model, position=position, length=length, wait=worded)
    head = _(TEXTS["status.many"], count=count, model=model, position=position, length=length)
    return " — ".join((head, worded))


def stop_notice_words(
    preempted: bool,
    key: str,
    values: Mapping[str, object],
    stop_at: datetime,
    lang: str = "en",
    zone: tzinfo | None = None,
    now: datetime | None = None,
    model: str | None = None,
) -> str:
    """What a student is told of a stop the scheduler ordered, in ``lang``: a preemption (its decision's ``key``,
    ``preempt`` or ``preempt.save``) stops at ``stop_at``; Kueue's stop (``stop.kueue`` or ``stop.kueue.save``)
    was made at its eviction's time (``values["at"]``), for Kueue's reason (``values["why"]``); a reservation's end
    names the booking from ``values`` (its GPUs: ``model`` and the count when the values lack them), or says only
    that the GPUs are reserved."""
    _ = translator(lang)
    stop_time = clock_words(stop_at, zone, now, lang)
    if preempted and key in KUEUE_NOTICES:
        at = values.get("at")
        why = values.get("why")
        return _(
            TEXTS[KUEUE_NOTICES[key]],
            stop_time=clock_words(at, zone, now, lang) if isinstance(at, datetime) else stop_time,
            why=kueue_why_words(why if isinstance(why, KueueWhy) else KueueWhy("other", "?"), lang),
        )
    if preempted:
        return _(TEXTS["notice.preempt" if key == "preempt" else "notice.preempt.save"], stop_time=stop_time)
    gpus = values.get("gpus")
    if gpus is None and model:
        count = values.get("count")
        gpus = Gpus(count if isinstance(count, int) and not isinstance(count, bool) else 1, model)
    if {"label", "start"} <= set(values) and gpus:
        return _(
            TEXTS["notice.end"],
            until=stop_time,
            gpus=value_words(gpus, lang, zone, now),
            label=value_words(values["label"], lang, zone, now),
            start=value_words(values["start"], lang, zone, now),
        )
    return _(TEXTS["notice.reserved"], stop_time=stop_time)


def stop_subject_words(
    preempted: bool,
    server: str,
    stop_at: datetime,
    lang: str = "en",
    zone: tzinfo | None = None,
    now: datetime | None = None,
    key: str = "",
    values: Mapping[str, object] | None = None,
) -> str:
    """The subject of a stop's notice (a mail's, a webhook's title), in ``lang``: ``[GPU] Your server gpu1 will be
    stopped at 14:02 to free its GPU`` (a preemption), ``... was stopped at 14:02 by the cluster's queue (Kueue)``
    (Kueue's stop: the order's ``key`` and ``values``, as :func:`stop_notice_words`), or ``... for a class
    reservation`` (a reservation's end)."""
    stop_time = clock_words(stop_at, zone, now, lang)
    if preempted and key in KUEUE_NOTICES:
        at = (values or {}).get("at")
        if isinstance(at, datetime):
            stop_time = clock_words(at, zone, now, lang)
        return translator(lang)(TEXTS["subject.kueue"], server=server, stop_time=stop_time)
    return translator(lang)(
        TEXTS["subject.preempt" if preempted else "subject.reserved"], server=server, stop_time=stop_time
    )
