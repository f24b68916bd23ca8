"""The scheduler's words: English templates (:data:`TEXTS`) and how it writes counts, durations and times."""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

WEEK = timedelta(days=7)

#: Every text a student or an admin reads, as English templates; a decision keeps its key and values.
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
    "wait.none": "no estimate yet",
    "wait.now": "any moment now",
    "wait.about": "about {duration}",
    "wait.day": "more than a day",
    # grants
    "grant": "{gpus} free",
    "grant.reserved": "{gpus} reserved for {label}",
    "grant.until": "may run until {until}: {label} has {gpus} reserved from {start}",
    "stopping": "a {model} frees as soon as the server told to stop has ended",
    # preemption
    "preempt": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " your training is being checkpointed",
    "preempt.save": "this server will be stopped in {grace} to free its GPU for a full-price request;"
    " save your work now",
    # reservations
    "end": "may run until {until}: {label} has {gpus} reserved from {start}",
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


def gpus_text(count: int, model: str) -> str:
    """``1 T4``, ``4 T4s``."""
    return f"{count} {model}" if count == 1 else f"{count} {model}s"


def duration_text(delta: timedelta) -> str:
    """``12 min``, ``1 h 20 min`` (whole minutes; over an hour, to 5 minutes), ``2 h``."""
    minutes = max(0, round(delta / timedelta(minutes=1)))
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    minutes = 5 * round(minutes / 5)
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def wait_text(wait: timedelta | None) -> str:
    """The estimate as a student reads it: ``about 12 min``, ``any moment now``, ``no estimate yet``."""
    if wait is None:
        return TEXTS["wait.none"]
    if wait < timedelta(minutes=1):
        return TEXTS["wait.now"]
    if wait > timedelta(days=1):
        return TEXTS["wait.day"]
    return TEXTS["wait.about"].format(duration=duration_text(wait))


def clock_text(moment: datetime, tz: tzinfo, now: datetime) -> str:
    """``13:55`` on the day of ``now`` (in ``tz``), else ``Tue 8 Sep 13:55``."""
    local, today = moment.astimezone(tz), now.astimezone(tz)
    if local.date() == today.date():
        return f"{local:%H:%M}"
    return f"{local:%a} {local.day} {local:%b %H:%M}"


def period_text(half_life: timedelta) -> str:
    """How a student reads the window of decayed use: ``this week`` for a half-life of 7 days."""
    if half_life == WEEK:
        return "this week"
    if half_life == timedelta(days=1):
        return "today"
    days = half_life / timedelta(days=1)
    if days >= 1:
        return f"in the last {round(days)} days"
    return f"in the last {max(1, round(half_life / timedelta(hours=1)))} hours"
