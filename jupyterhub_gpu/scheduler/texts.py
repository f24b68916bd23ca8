"""The scheduler's messages: a key of :data:`TEXTS` (its English template) and the typed values that fill it.

A decision keeps its key and its values as they are: a time as an aware ``datetime``, a duration as a
``timedelta``, GPUs as :class:`Gpus` (a count with its model), the window of a group's decayed use as
:class:`Period`, a preemption's grace as :class:`Grace`, names (a model, a reservation's label) and numbers as
``str`` and ``int``. Nothing here is worded: :mod:`.words` words a message in the reader's language, once, and
the ledger keeps the key and the values as JSON (:func:`values_json`, :func:`values_from_json`), so that each
reader gets their own language from the same stored decision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

WEEK = timedelta(days=7)

#: Every text a student or an admin reads of the scheduler, as English templates (the catalog's msgids).
TEXTS: dict[str, str] = {
    # why a request stands where it does
    "fifo": "requests are served in the order they came",
    "share": "your group has used {percent}% of its share of {model} GPUs {period}",
    "share.aged": "your group has used {percent}% of its share of {model} GPUs {period};"
    " your {waited} of waiting moves you up",
    "share.none": "your group has no share of {model} GPUs: it is served when no group with a share waits,"
    " and your {waited} of waiting moves you up",
    "tier": "preemptible requests wait until no full-price request needs a {model}",
    "reserved": "{label} has {gpus} reserved until {end}",
    "reserved.soon": "the free {model} GPUs are reserved for {label} from {start}",
    # the headline of a waiting request
    "status": "Waiting for a free {model} — position {position} of {length} — {wait}",
    "status.many": "Waiting for {count} free {model} GPUs — position {position} of {length}",
    "wait.none": "no estimate yet",
    "wait.now": "any moment now",
    "wait.about": "about {duration}",
    "wait.day": "more than a day",
    # grants
    "grant": "{gpus} free",
    "grant.reserved": "{gpus} reserved for {label}",
    "grant.until": "may run until {until}: {label} has {gpus} reserved from {start}",
    "stopping": "a {model} frees as soon as the server told to stop has ended",
    # a preemption: its reason (the queue, the preemption records), and its notice to the student (notice.*)
    "preempt": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " your training is being checkpointed",
    "preempt.save": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " save your work now",
    "notice.preempt": "This server will be stopped at {stop_time} to free its GPU for a full-price request; your"
    " training is being checkpointed (CheckpointAndResume saves on the stop).",
    "notice.preempt.save": "This server will be stopped at {stop_time} to free its GPU for a full-price request;"
    " save your work now.",
    # reservations: the reason of an end and its notice
    "end": "may run until {until}: {label} has {gpus} reserved from {start}",
    "notice.end": "This server may run until {until}: {label} has {gpus} reserved from {start}."
    " It will be stopped then; save your work.",
    "notice.reserved": "This server will be stopped at {stop_time}: its GPUs are reserved for a class from then."
    " Save your work now.",
    "stop": "this server was stopped at {at}, as it was told",
    "stop.preempted": "this server was stopped at {at} to free its GPU for a full-price request",
    "stop.reserved": "this server was stopped at {at}: its GPUs are reserved for a class from then",
    # refusals
    "refuse.model": "this pool has no {model} GPUs (it has {models})",
    "refuse.count": "{gpus} asked, but the pool has {total}",
    "refuse.bad_count": "a request needs at least one GPU, got {count}",
    "refuse.reservation": "{label} reserves {gpus} from {start} to {end},"
    " but the pool has {total} and other bookings hold {taken} then",
}


@dataclass(frozen=True)
class Gpus:
    """``count`` GPUs of ``model`` (``1 T4``, ``4 T4s``: the count decides the form)."""

    count: int
    model: str


@dataclass(frozen=True)
class Period:
    """The window of a group's decayed use, by its half-life (``this week`` for 7 days)."""

    half_life: timedelta


@dataclass(frozen=True)
class Grace:
    """The time a preempted session is given before its stop: said to the second under a minute (``30 s``)."""

    delta: timedelta


# -- the values as the ledger keeps them ------------------------------------------------------------------------

UTC = timezone.utc


def _encoded(name: str, value):
    if isinstance(value, bool) or value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"the value {name!r} must be a timezone-aware datetime, got {value!r}")
        return {"time": value.astimezone(UTC).isoformat()}
    if isinstance(value, timedelta):
        return {"seconds": value.total_seconds()}
    if isinstance(value, Gpus):
        return {"gpus": value.count, "model": value.model}
    if isinstance(value, Period):
        return {"half_life_seconds": value.half_life.total_seconds()}
    if isinstance(value, Grace):
        return {"grace_seconds": value.delta.total_seconds()}
    raise TypeError(f"the value {name!r} of a scheduler message cannot be stored: {value!r}")


def values_json(values: Mapping[str, object]) -> str:
    """A message's values as JSON (each typed value an object that names its type); ValueError or TypeError for a
    value that has no stored form (a naive time, an object of another type)."""
    return json.dumps({k: _encoded(k, v) for k, v in values.items()}, sort_keys=True)


def _decoded(value):
    if not isinstance(value, dict):
        return value
    try:
        if value.keys() == {"time"}:
            return datetime.fromisoformat(value["time"])
        if value.keys() == {"seconds"}:
            return timedelta(seconds=value["seconds"])
        if value.keys() == {"gpus", "model"}:
            return Gpus(int(value["gpus"]), str(value["model"]))
        if value.keys() == {"half_life_seconds"}:
            return Period(timedelta(seconds=value["half_life_seconds"]))
        if value.keys() == {"grace_seconds"}:
            return Grace(timedelta(seconds=value["grace_seconds"]))
    except (TypeError, ValueError):
        pass
    return value


def values_from_json(text: str | None) -> dict:
    """The values :func:`values_json` stored, typed again; a value of no known shape (a row written by an older
    hub, whose values were English words) comes back as it was stored."""
    found = json.loads(text or "{}")
    return {k: _decoded(v) for k, v in found.items()} if isinstance(found, dict) else {}
