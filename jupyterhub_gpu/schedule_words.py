"""The scheduler's words in the reader's language: shared by the hub's spawn page and the gpu service.

The scheduler (:mod:`jupyterhub_gpu.scheduler`) keeps each text as a key of its English templates
(:data:`~jupyterhub_gpu.scheduler.TEXTS`) and the values to fill in, some of them already worded in English
(``this week``, ``1 h 5 min``, ``4 T4s``, ``Tue 8 Sep 14:00``): :func:`values_in` words again those of a shape it
knows for another language, and leaves the others (a reservation's label, a model) as they are;
:func:`reason_words` and :func:`status_words` give a whole text; :func:`wait_words` the estimate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, tzinfo
from string import Formatter

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.scheduler import TEXTS

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
    """One of the scheduler's texts (a key of :data:`~jupyterhub_gpu.scheduler.TEXTS`) in ``lang``; a key it
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
