"""A booking past its group's limits, in the reader's language: an instructor reads why it cannot be made.

:func:`.bookings.limit_problems` says which limit a booking passes, where, and the figures (a
:class:`~.bookings.LimitProblem`); here it is worded from the keys ``limit.*`` of :data:`~.texts.TEXTS`, each
figure by its type: hours and GPU-hours as numbers (``4``, ``1.5``), a window or a hold as ``Tue 8 Dec 2026
14:00–18:00``, a week by its Monday, the group's other bookings by their labels. A day is said as the catalog's
pattern for it (``msgctxt "day"``, a CLDR date pattern: ``EEE d MMM y``, ``y年M月d日 EEE``), so a new language
words it by its catalog alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from fractions import Fraction

from babel.dates import format_datetime

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import babel_locale
from jupyterhub_gpu.scheduler.bookings import HOLD, HOLD_GAP, WEEKLY, LimitProblem, clauses
from jupyterhub_gpu.scheduler.texts import TEXTS

#: A day, and a moment of it, as CLDR date patterns (the catalog's for each language): ``Tue 8 Dec 2026``.
DAY_CONTEXT = "day"
DAY_PATTERN = "EEE d MMM y"
MOMENT_CONTEXT = "day and time"
MOMENT_PATTERN = "EEE d MMM y HH:mm"


def number_words(value: Fraction) -> str:
    """Hours, GPU-hours, a percentage: ``4``, ``1.5``, ``12.5``."""
    return f"{float(value):g}"


def day_words(moment: datetime, tz, lang: str = "en") -> str:
    """``Tue 8 Dec 2026`` (``2026年12月8日 周二``): the day of ``moment`` in ``tz``."""
    pattern = translator(lang).context(DAY_CONTEXT, DAY_PATTERN)
    return format_datetime(moment.astimezone(tz), pattern, locale=babel_locale(lang))


def moment_words(moment: datetime, tz, lang: str = "en") -> str:
    """``Tue 8 Dec 2026 14:00``: a moment with its day, in ``tz``."""
    pattern = translator(lang).context(MOMENT_CONTEXT, MOMENT_PATTERN)
    return format_datetime(moment.astimezone(tz), pattern, locale=babel_locale(lang))


def span_words(start: datetime, end: datetime, tz, lang: str = "en") -> str:
    """``Tue 8 Dec 2026 14:00–18:00``, or ``from Tue 8 Dec 2026 00:00 to Wed 9 Dec 2026 00:00``."""
    _ = translator(lang)
    a, b = start.astimezone(tz), end.astimezone(tz)
    if a.date() == b.date():
        return _(TEXTS["span"], start=moment_words(a, tz, lang), end=f"{b:%H:%M}")
    return _(TEXTS["span.days"], start=moment_words(a, tz, lang), end=moment_words(b, tz, lang))


def bookings_words(labels: Sequence[str], lang: str = "en") -> str:
    """The group's other bookings that count: ``its reservation Lab 1``, ``its reservations Lab 1, Lab 2``."""
    _ = translator(lang)
    return _.plural("its reservation {labels}", "its reservations {labels}", len(labels), labels=_.listing(labels))


def limit_text(p: LimitProblem, tz, lang: str = "en") -> str:
    """A limit problem in words an instructor reads, in ``lang``: the limit (its setting), the window, hold or
    week, the figures, and the other bookings of the group that count."""
    _ = translator(lang)
    more = _(TEXTS["limit.more"], more=p.more) if p.more else ""
    if p.limit == HOLD:
        clock = _(TEXTS["limit.clock"], hours=number_words(p.wall_hours)) if p.wall_hours else ""
        values = dict(
            span=span_words(p.start, p.end, tz, lang),
            hours=number_words(p.amount),
            allowed=number_words(p.allowed),
            clock=clock,
            more=more,
        )
        if p.alone and p.single_window:
            return _(TEXTS["limit.hold"], **values)
        values.update(model=p.model, gap=HOLD_GAP // timedelta(minutes=1))
        if p.alone:
            return _(TEXTS["limit.hold.windows"], **values)
        return _(TEXTS["limit.hold.others"], group=p.group, bookings=bookings_words(p.others, lang), **values)
    if p.limit == WEEKLY:
        week = _(TEXTS["limit.week.of"], day=day_words(p.start, tz, lang), zone=getattr(tz, "key", tz))
        values = dict(week=week, hours=number_words(p.amount), allowed=number_words(p.allowed), more=more)
        if p.alone:
            return _(TEXTS["limit.week"], **values)
        return _(
            TEXTS["limit.week.others"],
            group=p.group,
            mine=number_words(p.mine),
            theirs=number_words(p.amount - p.mine),
            bookings=bookings_words(p.others, lang),
            **values,
        )
    values = dict(
        span=span_words(p.start, p.end, tz, lang),
        more=more,
        group=p.group,
        amount=number_words(p.amount),
        pool=p.pool,
        model=p.model,
        allowed=number_words(p.allowed),
        percent=number_words(100 * p.share),
    )
    if p.alone:
        return _(TEXTS["limit.pool"], **values)
    return _(TEXTS["limit.pool.others"], bookings=bookings_words(p.others, lang), **values)


def limits_text(problems: Sequence[LimitProblem], tz, lang: str = "en") -> str:
    """Every limit a booking passes, one clause after the other, in ``lang``."""
    return clauses([limit_text(p, tz, lang) for p in problems], lang)


class BookingLimitError(ValueError):
    """A booking past its group's limits (with the group's other bookings: a 409): worded in the reader's
    language by :meth:`words`; as a ``str``, in English."""

    def __init__(self, problems: Sequence[LimitProblem], tz):
        self.problems, self.tz = list(problems), tz
        super().__init__(self.words("en"))

    def words(self, lang: str = "en") -> str:
        return limits_text(self.problems, self.tz, lang)
