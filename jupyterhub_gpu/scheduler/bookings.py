"""Bookings: whether a reservation can be made next to the others, the pool and the groups."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.scheduler.texts import WEEK, gpus_text


class ReservationError(ValueError):
    """A booking that cannot be made; the message says why, in words an instructor reads."""


def _window_text(start: datetime, end: datetime) -> str:
    return f"{start:%a} {start.day} {start:%b %H:%M}–{end:%H:%M}"


def reservation_problems(
    booking: Reservation,
    existing: Sequence[Reservation],
    pool: Mapping[str, int],
    groups: Collection[str],
) -> list[str]:
    """What is wrong with ``booking`` next to the ``existing`` reservations, the ``pool`` and the known ``groups``.

    An empty list: it can be made. Checked: aware times, the end after the start, a whole count of at least one,
    a model the pool has and no more GPUs than it has, a known group, a weekly repetition that ends after its
    first window and windows shorter than a week, no overlap with the same group's reservation of the model, and
    at no moment more GPUs reserved than the pool has.
    """
    problems = []
    times_ok = True
    for name in ("start", "end"):
        moment = getattr(booking, name)
        if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
            problems.append(f"the {name} must be a date and time with a time zone, got {moment!r}")
            times_ok = False
    if times_ok and booking.end <= booking.start:
        problems.append(
            f"the reservation ends ({booking.end:%Y-%m-%d %H:%M}) before it starts ({booking.start:%Y-%m-%d %H:%M})"
        )
        times_ok = False
    count_ok = isinstance(booking.count, int) and not isinstance(booking.count, bool) and booking.count >= 1
    if not count_ok:
        problems.append(f"the count must be a whole number of GPUs, at least 1, got {booking.count!r}")
    total = pool.get(booking.model, 0)
    if total <= 0:
        models = ", ".join(sorted(m for m, n in pool.items() if n > 0)) or "none"
        problems.append(f"the pool has no {booking.model} GPUs (it has: {models})")
    elif count_ok and booking.count > total:
        problems.append(f"{gpus_text(booking.count, booking.model)} asked, but the pool has {total}")
    if booking.group not in groups:
        problems.append(f"there is no group named {booking.group!r}")
    if times_ok and booking.weekly_until is not None:
        if booking.weekly_until < booking.start.date():
            problems.append(
                f"it repeats until {booking.weekly_until:%Y-%m-%d}, before its first window on {booking.start:%Y-%m-%d}"
            )
            times_ok = False
        elif booking.end - booking.start >= WEEK:
            problems.append("a weekly window must be shorter than a week")
            times_ok = False
    if problems or not times_ok:
        return problems
    # overlaps: the same group's reservation of the model, and the pool's size at each moment
    last = _last_end(booking)
    mine = booking.windows(booking.start, last)
    others = [r for r in existing if r.model == booking.model and r.id != booking.id]
    for start, end in mine:
        overlapping = [(s, e, r) for r in others for s, e in r.windows(start, end)]
        same = next(((s, e, r) for s, e, r in overlapping if r.group == booking.group), None)
        if same is not None:
            s, e, r = same
            problems.append(
                f"it overlaps {r.name}'s reservation of {gpus_text(r.count, r.model)} on {_window_text(s, e)}"
            )
            break
        peak, names = _peak(start, end, overlapping)
        if peak + booking.count > total:
            problems.append(
                f"on {_window_text(start, end)}, {gpus_text(peak + booking.count, booking.model)} would be reserved"
                f" but the pool has {total} ({peak} already reserved for {names})"
            )
            break
    return problems


def check_reservation(
    booking: Reservation, existing: Sequence[Reservation], pool: Mapping[str, int], groups: Collection[str]
) -> Reservation:
    """``booking`` if it can be made, else :class:`ReservationError` with every problem."""
    problems = reservation_problems(booking, existing, pool, groups)
    if problems:
        raise ReservationError("; ".join(problems))
    return booking


def _last_end(booking: Reservation) -> datetime:
    if booking.weekly_until is None:
        return booking.end
    weeks = max(0, (booking.weekly_until - booking.start.date()).days // 7)
    return booking.start + weeks * WEEK + (booking.end - booking.start)


def _peak(start: datetime, end: datetime, overlapping: Sequence[tuple[datetime, datetime, Reservation]]):
    """The most GPUs the ``overlapping`` windows reserve at one moment of ``[start, end)``, and their names."""
    events = []
    for s, e, r in overlapping:
        events.append((max(s, start), 1, r.count))
        events.append((min(e, end), 0, -r.count))
    events.sort(key=lambda x: (x[0], x[1]))
    level = peak = 0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    names = ", ".join(sorted({r.name for _, _, r in overlapping})) or "nobody"
    return peak, names
