"""The pages' pure helpers: GPU-hours, spend and minutes per day and per name, dates in the reader's format."""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from babel.dates import format_skeleton

from jupyterhub_gpu.billing import local_midnight, minutes_in_window
from jupyterhub_gpu.money import babel_locale, to_micros
from jupyterhub_gpu.service.domain.savings import Tally
from jupyterhub_gpu.service.web.views import money_str


def gpu_hours(gpu_minutes: int) -> str:
    """GPU-minutes as GPU-hours with two decimals, for display and CSV."""
    return f"{(Decimal(gpu_minutes) / 60).quantize(Decimal('0.01'))}"


def sessions_gpu_minutes(session: dict) -> int:
    """GPU-minutes of a session inside the page's window (a minute counts where it starts, as budgets count it)."""
    return session["minutes_in_window"] * session["gpu_count"]


def session_days(session: dict, tz, since: datetime | None, until: datetime | None) -> dict[date, int]:
    """A session's billed minutes per local day, inside ``[since, until)``: a minute counts on the day it starts."""
    started = datetime.fromisoformat(session["started"].replace("Z", "+00:00"))
    n = session["minutes_billed"]
    last = started + timedelta(minutes=max(n - 1, 0))
    days = {}
    day = started.astimezone(tz).date()
    while day <= last.astimezone(tz).date():
        lo, hi = local_midnight(day, tz), local_midnight(day + timedelta(days=1), tz)
        lo, hi = max(lo, since) if since else lo, min(hi, until) if until else hi
        if lo < hi:
            count = minutes_in_window(started, n, lo, hi)
            if count:
                days[day] = count
        day += timedelta(days=1)
    return days


def daily_series(sessions: list[dict], tz, since: datetime | None, until: datetime | None, now: datetime) -> list[dict]:
    """Spend and GPU-hours per local day of the minutes in the window, every day of the window included."""
    spend: dict[date, int] = defaultdict(int)
    minutes: dict[date, int] = defaultdict(int)
    for s in sessions:
        rate = to_micros(Decimal(s["rate_per_minute"]))
        for day, count in session_days(s, tz, since, until).items():
            spend[day] += count * rate
            minutes[day] += count * s["gpu_count"]
    if not spend and since is None:
        return []
    first = since.astimezone(tz).date() if since is not None else min(spend)
    end = (until if until is not None else now).astimezone(tz)
    last = (end - timedelta(microseconds=1)).date() if until is not None else end.date()
    if spend:
        first, last = min(first, min(spend)), max(last, max(spend))
    if (last - first).days > 1000:  # a chart of years would be unreadable; keep the days that have usage
        days = sorted(spend)
    else:
        days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    return [{"day": d.isoformat(), "spend": money_str(spend[d]), "gpu_hours": gpu_hours(minutes[d])} for d in days]


def totals_by(sessions: list[dict], key) -> list[dict]:
    """Sessions, minutes, GPU-hours and spend per key (``key(session)`` gives a list of names), by spend."""
    rows: dict[str, dict] = {}
    for s in sessions:
        for name in key(s):
            row = rows.setdefault(name, {"name": name, "sessions": 0, "minutes": 0, "gpu_minutes": 0, "micros": 0})
            row["sessions"] += 1
            row["minutes"] += s["minutes_in_window"]
            row["gpu_minutes"] += sessions_gpu_minutes(s)
            row["micros"] += to_micros(Decimal(s["cost_in_window"]))
    ordered = sorted(rows.values(), key=lambda r: (-r["micros"], -r["gpu_minutes"], r["name"]))
    return [
        {
            "name": r["name"],
            "sessions": r["sessions"],
            "minutes": r["minutes"],
            "gpu_hours": gpu_hours(r["gpu_minutes"]),
            "spend": money_str(r["micros"]),
        }
        for r in ordered
    ]


def saved_row(tally: Tally, currency: str) -> dict:
    """A row of the pages' culling table: sessions, GPU-hours and money saved (in ``currency``)."""
    return {
        "sessions": tally.sessions,
        "gpu_hours_saved": gpu_hours(tally.gpu_minutes),
        "money_saved": money_str(tally.money_micros.get(currency, 0)),
    }


def day_text(day: date, lang: str) -> str:
    """A day in the reader's date format: ``Nov 1, 2026`` in English, ``2026年11月1日`` in Chinese."""
    return format_skeleton("yMMMd", day, locale=babel_locale(lang))


def moment_text(moment: datetime, tz, lang: str) -> str:
    """A moment in the lab's time zone, in the reader's date format and a 24-hour clock: ``Nov 1, 2026 08:05``."""
    local = moment.astimezone(tz)
    return f"{day_text(local.date(), lang)} {local:%H:%M}"


def month_start(now: datetime, tz) -> datetime:
    local = now.astimezone(tz)
    return datetime.combine(local.date().replace(day=1), time(0), tzinfo=tz)
