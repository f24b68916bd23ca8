"""Reservations and shares (docs/scheduling.md): who may read and book what, the order in which a booking is
checked, and the changes, for ``POST reservations``, ``DELETE reservations/ID``, ``PUT shares`` and the
usage pages' forms alike.

A booking keeps N GPUs of a model for a group in a window, once or weekly until a day. Admins
(``custom:gpu-budgets:write``) book for any group, any window; an instructor, for the groups of their
``custom:gpu-usage:read!group=NAME`` scopes, starting at least ``c.Scheduling.reservation_notice_hours`` from
now and within the group's booking limits (:class:`~jupyterhub_gpu.scheduler.bookings.BookingLimits`), which
bind the group's bookings together, so that an instructor cannot take the pool for long or at short notice,
nor split a booking to get past them. It is checked alone first (its fields, the pool, the group, the limits),
then against the bookings already made, in the same transaction as its insert; a refused one changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from tornado import web

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.ledger.queries.schedule import (
    Draft,
    StoredReservation,
    StoredShare,
    add_reservation,
    delete_reservation,
    get_reservation,
    set_share,
    shares,
)
from jupyterhub_gpu.scheduler import Reservation
from jupyterhub_gpu.scheduler.booking_words import BookingLimitError, limits_text, number_words
from jupyterhub_gpu.scheduler.bookings import (
    HOLD_GAP,
    BookingLimits,
    ReservationError,
    check_reservation,
    hours,
    limit_problems,
)
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, Caller
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.params import BadRequest, parse_reservation, parse_share

#: The defaults of ``c.Scheduling.reservation_max_hours`` and ``reservation_notice_hours`` (a context without them);
#: the GPU-hours a week and the part of the pool are not limited unless set.
DEFAULT_MAX_HOURS = 4.0
DEFAULT_NOTICE_HOURS = 24.0

#: A booking refused, and why (the problems worded in the caller's language: the API's English, a page's reader's).
CANNOT_BE_MADE = "The reservation cannot be made: {problems}"
CONFLICTS = "The reservation conflicts with others: {problems}"
TOO_SOON = (
    "The reservation cannot be made: it starts {start}, and an instructor must book at least {notice} hours ahead"
    " (c.Scheduling.reservation_notice_hours), so not before {earliest}; an administrator can book sooner"
)

NO_POOL = (
    "The gpu service does not know the lab's GPUs, so it cannot check a booking: set c.Scheduling.gpu_pool"
    " (for example {'T4': 4, 'A100': 4}) in the service's configuration and restart it"
)


def as_reservation(r: StoredReservation | Draft, rid: str, tz) -> Reservation:
    """The domain's booking, its times in the lab's zone (weekly windows repeat at the lab's wall-clock time)."""
    return Reservation(rid, r.group, r.gpu_model, r.count, r.start.astimezone(tz), r.end.astimezone(tz), r.weekly_until)


# -- who may read and book what ------------------------------------------------------------------------


def is_admin(caller: Caller) -> bool:
    return caller.has_scope(SCOPE_BUDGETS_WRITE)


def visible_groups(caller: Caller) -> tuple[str, ...] | None:
    """The groups whose schedule the caller reads; None: every group (admins)."""
    if caller.has_scope(SCOPE_USAGE_READ) or is_admin(caller):
        return None
    return tuple(sorted(set(caller.instructor_groups) | set(caller.groups)))


def require_booking(caller: Caller, group: str) -> None:
    """403 unless the caller is an admin or an instructor of ``group``."""
    if not (is_admin(caller) or group in caller.instructor_groups):
        scopes = (SCOPE_BUDGETS_WRITE, f"{SCOPE_USAGE_READ}!group={group}")
        raise web.HTTPError(403, caller.missing_scope_message(scopes))


def may_book(caller: Caller, group: str) -> bool:
    """Whether the caller may book and cancel for ``group`` (an admin, or the group's instructor)."""
    try:
        require_booking(caller, group)
    except web.HTTPError:
        return False
    return True


async def known_groups(ctx: WebContext, group: str) -> set[str]:
    """``{group}`` if the hub has it, else nothing; 502 when the hub cannot say."""
    try:
        found = await ctx.hub.group(group)
    except HubAPIError as e:
        raise web.HTTPError(502, f"Could not ask the hub whether the group {group!r} exists: {e}") from None
    return {group} if found is not None else set()


def _parsed(parse, body_of: Callable[[], object]):
    body = body_of()  # a malformed JSON body is the caller's 400, raised here, after the checks before it
    try:
        return parse(body)
    except BadRequest as e:
        raise web.HTTPError(400, str(e)) from None


def check_notice(ctx: WebContext, draft: Draft, now: datetime, lang: str = "en") -> None:
    """400 for an instructor's booking starting sooner than ``reservation_notice_hours`` from now: students on
    the group's GPUs are not pushed off at short notice. Worded in ``lang``."""
    notice = _hours(ctx, "reservation_notice_hours", DEFAULT_NOTICE_HOURS)
    earliest = now + timedelta(hours=notice)
    if draft.start < earliest:
        start, earliest = draft.start.astimezone(ctx.tz), earliest.astimezone(ctx.tz)
        raise web.HTTPError(
            400,
            "%s",
            translator(lang)(
                TOO_SOON, start=f"{start:%Y-%m-%d %H:%M}", notice=f"{notice:g}", earliest=f"{earliest:%Y-%m-%d %H:%M}"
            ),
        )


# -- the changes ---------------------------------------------------------------------------------------


async def book(ctx: WebContext, caller: Caller, body_of: Callable[[], object], now: datetime) -> StoredReservation:
    """Book what ``body_of()`` (``POST reservations``' JSON) asks; every refusal (403, 400, 409, 502) stores nothing.

    The order is the API's: a caller with no group to book for is refused before the body is read; then the
    body, who may book for its group, the pool, the group (the hub), the booking alone, an instructor's limits
    and notice, and last the other bookings, checked with the insert.
    """
    if not (is_admin(caller) or caller.instructor_groups):  # no group to book for: say so before reading the body
        scopes = (SCOPE_BUDGETS_WRITE, f"{SCOPE_USAGE_READ}!group=NAME")
        raise web.HTTPError(403, caller.missing_scope_message(scopes))
    draft = _parsed(parse_reservation, body_of)
    require_booking(caller, draft.group)
    pool = dict(ctx.gpu_pool)
    if not pool:
        raise web.HTTPError(409, NO_POOL)
    tz = ctx.tz
    booking = as_reservation(draft, "new", tz)
    groups = await known_groups(ctx, draft.group)
    lang = caller.language()
    _ = translator(lang)
    try:
        check_reservation(booking, [], pool, groups)  # the booking on its own: its fields, the pool, the group
    except ReservationError as e:
        raise web.HTTPError(400, "%s", _(CANNOT_BE_MADE, problems=e.words(lang))) from None  # a message with "%"
    limits = None if is_admin(caller) else booking_limits(ctx)  # admins are not limited
    if limits is not None:
        alone = limit_problems(booking, [], pool, limits)
        if alone:
            raise web.HTTPError(400, "%s", _(CANNOT_BE_MADE, problems=limits_text(alone, tz, lang)))
        check_notice(ctx, draft, now, lang)

    def against_existing(existing: list[StoredReservation]) -> None:
        others = [as_reservation(r, str(r.id), tz) for r in existing]
        check_reservation(booking, others, pool, groups)
        if limits is not None:  # the group's other bookings count: splitting a booking does not beat a limit
            together = limit_problems(booking, others, pool, limits)
            if together:
                raise BookingLimitError(together, tz)

    try:
        return add_reservation(ctx.ledger, draft, against_existing, tz, now, caller.name)
    except BookingLimitError as e:
        raise web.HTTPError(409, "%s", _(CANNOT_BE_MADE, problems=e.words(lang))) from None
    except ReservationError as e:
        raise web.HTTPError(409, "%s", _(CONFLICTS, problems=e.words(lang))) from None


def cancel(ctx: WebContext, caller: Caller, rid: str, group: str | None = None) -> StoredReservation:
    """Cancel the booking ``rid`` (admins; an instructor, their groups'); a page's form names its ``group`` too:
    a booking of another group is not found there."""
    found = get_reservation(ctx.ledger, int(rid), ctx.tz) if rid.isascii() and rid.isdigit() and len(rid) < 12 else None
    if group is not None and found is not None and found.group != group:
        raise web.HTTPError(404, f"There is no reservation {rid!r} of the group {group}")
    visible = visible_groups(caller)
    if found is None or (visible is not None and found.group not in visible):
        raise web.HTTPError(404, f"There is no reservation {rid!r} you may see")
    require_booking(caller, found.group)
    delete_reservation(ctx.ledger, found.id)
    return found


async def put_share(
    ctx: WebContext, caller: Caller, body_of: Callable[[], object], now: datetime
) -> tuple[StoredShare | None, bool]:
    """Set or clear (``share`` null) a group's share of a model (admins): ``(the share now, whether one was
    there)``; the share is None when cleared. Clearing a share that is not there is a 404."""
    caller.require_scope(SCOPE_BUDGETS_WRITE)
    group, model, share = _parsed(parse_share, body_of)
    pool = ctx.gpu_pool
    if share is not None:
        if pool and pool.get(model, 0) <= 0:
            have = ", ".join(sorted(m for m, n in pool.items() if n > 0)) or "none"
            raise web.HTTPError(400, f"gpu_model: the pool has no {model} GPUs (it has: {have})")
        if not await known_groups(ctx, group):
            raise web.HTTPError(400, f"group: there is no group named {group!r}")
    existed = set_share(ctx.ledger, group, model, share, now, caller.name)
    if share is None:
        if not existed:
            raise web.HTTPError(404, f"The group {group} has no share of {model} GPUs")
        return None, True
    (stored,) = [s for s in shares(ctx.ledger, [group]) if s.gpu_model == model]
    return stored, existed


# -- the limits and their words ------------------------------------------------------------------------


def booking_limits(ctx) -> BookingLimits:
    """The lab's limits on an instructor's bookings (``c.Scheduling.reservation_max_hours``, ...)."""
    return BookingLimits.from_settings(
        _hours(ctx, "reservation_max_hours", DEFAULT_MAX_HOURS),
        getattr(ctx, "reservation_max_gpu_hours_per_week", None),
        getattr(ctx, "reservation_max_pool_fraction", None),
    )


def limits_words(ctx, lang: str) -> list[str]:
    """What an instructor may book (docs/scheduling.md, "Booking limits"), in ``lang``: the booking form's notes."""
    _ = translator(lang)
    limits = booking_limits(ctx)
    words = [
        _(
            "An instructor books at least {notice} hours ahead, and a group holds GPUs of a model for at most"
            " {hours} hours without a break (its bookings less than {gap} minutes apart count as one).",
            notice=f"{_hours(ctx, 'reservation_notice_hours', DEFAULT_NOTICE_HOURS):g}",
            hours=number_words(hours(limits.max_hold)),
            gap=HOLD_GAP // timedelta(minutes=1),
        )
    ]
    if limits.max_gpu_hours_per_week is not None:
        words.append(
            _(
                "At most {gpu_hours} GPU-hours a week (Monday to Sunday) for the group, every model together.",
                gpu_hours=number_words(limits.max_gpu_hours_per_week),
            )
        )
    if limits.max_pool_fraction is not None and limits.max_pool_fraction < 1:
        words.append(
            _("At most {percent}% of each model's GPUs at once.", percent=number_words(100 * limits.max_pool_fraction))
        )
    words.append(
        _("These limits count every booking of the group, each week of a weekly one; administrators are not limited.")
    )
    return words


def _hours(ctx, name: str, default: float) -> float:
    return float(getattr(ctx, name, default))
