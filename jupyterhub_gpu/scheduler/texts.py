"""The scheduler's messages: a key of :data:`TEXTS` (its English template) and the typed values that fill it.

A decision keeps its key and its values as they are: a time as an aware ``datetime``, a duration as a
``timedelta``, GPUs as :class:`Gpus` (a count with its model), the window of a group's decayed use as
:class:`Period`, a preemption's grace as :class:`Grace`, Kueue's reason for a stop as :class:`KueueWhy`, a
booking's window as :class:`Window`, a day as a ``date``, names (a model, a reservation's label) and numbers as
``str`` and ``int``, a list of names as a ``tuple``. Nothing here is worded: :mod:`.words` words a message in
the reader's language, once, and the ledger keeps the key and the values as JSON (:func:`values_json`,
:func:`values_from_json`), so that each reader gets their own language from the same stored decision.
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
    # the notice's subject (a mail's, a webhook's title)
    "subject.preempt": "[GPU] Your server {server} will be stopped at {stop_time} to free its GPU",
    # reservations: the reason of an end and its notice
    "end": "may run until {until}: {label} has {gpus} reserved from {start}",
    "notice.end": "This server may run until {until}: {label} has {gpus} reserved from {start}."
    " It will be stopped then; save your work.",
    "notice.reserved": "This server will be stopped at {stop_time}: its GPUs are reserved for a class from then."
    " Save your work now.",
    "subject.reserved": "[GPU] Your server {server} will be stopped at {stop_time} for a class reservation",
    "stop": "this server was stopped at {at}, as it was told",
    "stop.preempted": "this server was stopped at {at} to free its GPU for a full-price request",
    "stop.reserved": "this server was stopped at {at}: its GPUs are reserved for a class from then",
    # a stop Kueue made (it evicted the session's Workload): told after the fact, with Kueue's reason ({why}, a
    # :class:`KueueWhy`); the reason (the preemption records) and the notice, each in two variants: the session
    # checkpoints (a preemptible profile's, as ``preempt``), or its unsaved work may be lost (``.save``)
    "stop.kueue": "this server was stopped at {at} by the cluster's queue (Kueue): {why};"
    " your training was checkpointed as it stopped (CheckpointAndResume saves on the stop)",
    "stop.kueue.save": "this server was stopped at {at} by the cluster's queue (Kueue): {why};"
    " work not saved by then may be lost",
    "notice.kueue": "This server was stopped at {stop_time} by the cluster's queue (Kueue): {why}. Your training"
    " was checkpointed as it stopped (CheckpointAndResume saves on the stop).",
    "notice.kueue.save": "This server was stopped at {stop_time} by the cluster's queue (Kueue): {why}. Work not"
    " saved by then may be lost.",
    "subject.kueue": "[GPU] Your server {server} was stopped at {stop_time} by the cluster's queue (Kueue)",
    # refusals
    "refuse.model": "this pool has no {model} GPUs (it has {models})",
    "refuse.count": "{gpus} asked, but the pool has {total}",
    "refuse.bad_count": "a request needs at least one GPU, got {count}",
    "refuse.reservation": "{label} reserves {gpus} from {start} to {end},"
    " but the pool has {total} and other bookings hold {taken} then",
    # a booking that cannot be made (:func:`.bookings.booking_problems`; also ``refuse.count``)
    "booking.start": "the start must be a date and time with a time zone, got {value}",
    "booking.end": "the end must be a date and time with a time zone, got {value}",
    "booking.ends_first": "the reservation ends ({end}) before it starts ({start})",
    "booking.count": "the count must be a whole number of GPUs, at least 1, got {value}",
    "booking.model": "the pool has no {model} GPUs (it has: {models})",
    "booking.model.none": "the pool has no {model} GPUs (it has: none)",
    "booking.group": "there is no group named {group}",
    "booking.repeats": "it repeats until {until}, before its first window on {start}",
    "booking.week": "a weekly window must be shorter than a week",
    "booking.overlap": "it overlaps {label}'s reservation of {gpus} on {window}",
    "booking.full": "on {window}, {gpus} would be reserved but the pool has {total} ({peak} already reserved for"
    " {labels})",
    "booking.full.nobody": "on {window}, {gpus} would be reserved but the pool has {total} ({peak} already"
    " reserved for nobody)",
    # a booking past its group's limits (:mod:`.booking_words`); {clock} and {more} are ``limit.clock`` and
    # ``limit.more`` or nothing, {span} a window of ``span`` or ``span.days``, {week} ``limit.week``
    "limit.hold": "its window on {span} lasts {hours} hours{clock}{more}, and an instructor may book at most"
    " {allowed} hours at a time (c.Scheduling.reservation_max_hours); an administrator can book a longer one",
    "limit.hold.windows": "its windows holds {model} GPUs without a break for {hours} hours{clock}, {span}{more},"
    " and an instructor may book at most {allowed} hours at a time (c.Scheduling.reservation_max_hours; a group's"
    " bookings less than {gap} minutes apart count as one hold); an administrator can book a longer one",
    "limit.hold.others": "with {group}'s other {model} bookings ({bookings}) it holds {model} GPUs without a break"
    " for {hours} hours{clock}, {span}{more}, and an instructor may book at most {allowed} hours at a time"
    " (c.Scheduling.reservation_max_hours; a group's bookings less than {gap} minutes apart count as one hold);"
    " an administrator can book a longer one",
    "limit.week": "in {week} it has {hours} GPU-hours booked{more}, and an instructor may book at most {allowed}"
    " GPU-hours a week for a group (c.Scheduling.reservation_max_gpu_hours_per_week); an administrator can book"
    " more",
    "limit.week.others": "in {week} {group} would have {hours} GPU-hours booked ({mine} by this booking, {theirs}"
    " by {bookings}){more}, and an instructor may book at most {allowed} GPU-hours a week for a group"
    " (c.Scheduling.reservation_max_gpu_hours_per_week); an administrator can book more",
    "limit.pool": "on {span}{more}, {group} would hold {amount} of the pool's {pool} {model} GPUs at once, and an"
    " instructor may book at most {allowed} of them for a group at once ({percent}% of the pool,"
    " c.Scheduling.reservation_max_pool_fraction); an administrator can book more",
    "limit.pool.others": "on {span}{more}, {group} would hold {amount} of the pool's {pool} {model} GPUs at once"
    " (with {bookings}), and an instructor may book at most {allowed} of them for a group at once ({percent}% of"
    " the pool, c.Scheduling.reservation_max_pool_fraction); an administrator can book more",
    "limit.clock": " (the clocks change in it: {hours} hours on the clock)",
    "limit.more": " (and {more} more like it later)",
    "limit.week.of": "the week of {day} (Monday to Sunday, {zone})",
    "span": "{start}–{end}",
    "span.days": "from {start} to {end}",
}


@dataclass(frozen=True)
class Gpus:
    """``count`` GPUs of ``model`` (``1 T4``, ``4 T4s``: the count decides the form)."""

    count: int
    model: str


@dataclass(frozen=True)
class Window:
    """A window of a booking, said on its start's day: ``Tue 8 Sep 14:00–16:00`` (``9月8日 14:00–16:00``)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Period:
    """The window of a group's decayed use, by its half-life (``this week`` for 7 days)."""

    half_life: timedelta


#: Why Kueue stopped a session (:class:`KueueWhy`'s ``kind``): the clause each kind is worded by (:mod:`.words`).
KUEUE_WHY: dict[str, str] = {
    "priority": "a workload of a higher priority needed its GPU",
    "reclaim": "the GPU quota its group had borrowed was taken back by the group that lent it",
    "fair_sharing": "its group was using more than its fair share of the GPUs it shares with other groups",
    "stopped": "its queue was stopped by an administrator",
    "ready": "its server was not ready within Kueue's time limit for a start (pods-ready timeout)",
    "other": "Kueue's reason is {reason}",
}


@dataclass(frozen=True)
class KueueWhy:
    """Why Kueue evicted a session's Workload: ``kind``, a key of :data:`KUEUE_WHY`, and ``reason``, Kueue's own
    word for it (the Workload's ``Evicted`` reason: ``Preempted``, ``NodeFailures``...), which ``other`` names."""

    kind: str
    reason: str = ""


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
    if isinstance(value, KueueWhy):
        return {"kueue_why": value.kind, "kueue_reason": value.reason}
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
        if value.keys() == {"kueue_why", "kueue_reason"}:
            return KueueWhy(str(value["kueue_why"]), str(value["kueue_reason"]))
    except (TypeError, ValueError):
        pass
    return value


def values_from_json(text: str | None) -> dict:
    """The values :func:`values_json` stored, typed again; a value of no known shape (a row written by an older
    hub, whose values were English words) comes back as it was stored."""
    found = json.loads(text or "{}")
    return {k: _decoded(v) for k, v in found.items()} if isinstance(found, dict) else {}
