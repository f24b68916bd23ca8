"""REST API of the gpu service under ``/services/gpu/api/v1/``.

Every handler authenticates through JupyterHub (OAuth cookie in browsers,
``Authorization: token …`` for programs); a request without valid credentials
gets a 403 JSON answer, never a redirect. A user may read only their own usage;
budgets and other users' data need the custom scopes below. Money is always a
decimal string in JSON. The parsing of bodies and query parameters is done by
pure functions at the top, so that every 400 can be tested without a hub.

The endpoints are described by ``openapi.yaml`` next to this module, served at
``api/v1/openapi.yaml``.
"""

from __future__ import annotations

import io
import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote
from zoneinfo import ZoneInfo

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import url_path_join
from tornado import web

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.ledger.store import Ledger, _aware
from jupyterhub_gpu.money import MoneyError, parse_amount
from jupyterhub_gpu.service.domain.metering import (
    PERIODS,
    UNITS,
    BudgetRule,
    BudgetStatus,
    applies_to,
    billed_minutes,
    from_micros,
    minutes_in_window,
    to_micros,
)
from jupyterhub_gpu.service.domain.savings import (
    CULL_REASONS,
    DEFAULT_HORIZON,
    IDLE_UTIL_PERCENT,
    CullingReport,
    MinuteCounts,
    SessionFacts,
    Tally,
    culling_report,
)
from jupyterhub_gpu.service.hubapi import HubAPIError

SCOPE_USAGE_READ = "custom:gpu-usage:read"  # read everyone's usage
SCOPE_BUDGETS_WRITE = "custom:gpu-budgets:write"  # set and delete budgets
SCOPE_METRICS_READ = "custom:gpu-metrics:read"  # scrape /metrics

CUSTOM_SCOPES = {
    SCOPE_USAGE_READ: {"description": "Read every user's GPU usage, sessions and budgets."},
    SCOPE_BUDGETS_WRITE: {"description": "Set and delete GPU budgets of users and groups."},
    SCOPE_METRICS_READ: {"description": "Read the gpu service's Prometheus metrics."},
}

OPENAPI = Path(__file__).with_name("openapi.yaml")
BUDGET_FIELDS = ("limit", "unit", "period", "term_start", "term_end")
BUDGET_SCOPES = ("user", "group")
USAGE_PARAMS = ("user", "group", "paid", "all", "since", "until", "format")
#: Query parameters JupyterHub's own auth may use; accepted and ignored by our parsers.
AUTH_PARAMS = ("token", "_xsrf")
CSV_COLUMNS = (
    "id",
    "user",
    "server_name",
    "profile",
    "gpus",
    "gpu_count",
    "started",
    "stopped",
    "minutes_billed",
    "rate_per_minute",
    "cost",
    "currency",
    "stop_reason",
    "running",
    # the session's part inside the report's window (minutes counted where they start, as budgets count
    # them): summed, they are the page's and GET usage's totals; cost is the whole session's charge
    "minutes_in_window",
    "cost_in_window",
)
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DIGITS_RE = re.compile(r"^[0-9]{1,18}$")
_SIX_PLACES = Decimal("0.000001")


class BadRequest(ValueError):
    """A malformed body or parameter; the message is shown to the caller with a 400."""


def instructor_groups(scopes) -> tuple[str, ...]:
    """The groups named by ``custom:gpu-usage:read!group=NAME`` among a token's scopes (instructors' roles)."""
    prefix = SCOPE_USAGE_READ + "!group="
    return tuple(sorted({s[len(prefix) :] for s in scopes if s.startswith(prefix) and len(s) > len(prefix)}))


# -- pure helpers: formatting ---------------------------------------------------------------


def money_str(micros: int) -> str:
    """An amount of micro-units as an exact decimal string (``"0.05"``, ``"10"``, never ``"1E+1"``)."""
    return f"{from_micros(micros):f}"


def decimal_str(value: Decimal, unit: str = "money") -> str:
    """A budget quantity as a plain decimal string; GPU-hours (minutes / 60) shown to six places."""
    if unit == "gpu_hours" and value.as_tuple().exponent < -6:
        value = value.quantize(_SIX_PLACES)
    value = value.normalize() if value else Decimal(0)
    return f"{value:f}"


def window_minutes(started: datetime, minutes: int, since: datetime | None, until: datetime | None) -> int:
    """How many of a session's billed minutes start in ``[since, until)`` (None: unbounded)."""
    if since is None and until is None:
        return minutes
    lo = since if since is not None else started
    hi = until if until is not None else started + timedelta(minutes=minutes + 1)
    return minutes_in_window(started, minutes, lo, hi)


def session_json(record, now: datetime, currency, advice: dict | None = None, window: tuple = (None, None)) -> dict:
    """A session as the API shows it: cost so far for running ones, the final charge for stopped ones.

    ``advice`` is its right-sizing advice (:func:`.advice.advice_json`), None when it has none.
    ``minutes_in_window`` and ``cost_in_window`` are the part of it inside ``window``
    (``since``, ``until``): a minute counts in the window in which it starts, as
    budgets count it, so the reports of consecutive windows add up to the charge.
    """
    row = Ledger.usage_rows([record], now)[0]
    if record.stopped is None:
        minutes = billed_minutes(_aware(record.started), max(now, _aware(record.started)))
    else:
        minutes = record.minutes
    return {
        "id": record.id,
        "user": record.user,
        "server_name": record.server_name,
        "profile": record.profile,
        "gpus": record.gpu_list,
        "gpu_count": record.gpu_count,
        "pool": record.pool,  # the one group whose budget pays (None: the user was in no group)
        "simulated": record.simulated,
        "rate_per_minute": money_str(record.rate_micros),
        "currency": record.currency,
        "started": isoformat(_aware(record.started)),
        "stopped": isoformat(_aware(record.stopped)) if record.stopped else None,
        "stop_reason": record.stop_reason,
        "minutes_billed": minutes,
        "cost": money_str(row.cost_micros),
        "cost_display": currency.format(from_micros(row.cost_micros)),
        "running": record.stopped is None,
        "advice": advice,
        "minutes_in_window": (inside := window_minutes(_aware(record.started), minutes or 0, *window)),
        "cost_in_window": money_str(inside * record.rate_micros),
    }


def sessions_json(ledger: Ledger, records, now: datetime, currency, window: tuple = (None, None)) -> list[dict]:
    """Sessions as the API shows them, each with its right-sizing advice (one query for all of them)."""
    from jupyterhub_gpu.service.domain.advice import advice_json, advice_of

    advice = advice_of(ledger, [r.id for r in records])
    return [session_json(r, now, currency, advice_json(advice.get(r.id), currency), window) for r in records]


def status_json(status: BudgetStatus) -> dict:
    """A budget and how much of it is used in its current period."""
    rule = status.rule
    return {
        "scope": rule.scope,
        "subject": rule.subject,
        "period": rule.period,
        "unit": rule.unit,
        "limit": decimal_str(status.limit, rule.unit),
        "spent": decimal_str(status.used, rule.unit),
        "remaining": decimal_str(status.remaining, rule.unit),
        "percent_used": float(round(status.fraction * 100, 1)),
        # current: binds now; ended / upcoming: a term budget outside its term, which refuses and stops nothing
        "state": status.state,
        "period_start": isoformat(status.period_start),
        "period_end": isoformat(status.period_end),
        "term_start": rule.term_start.isoformat() if rule.term_start else None,
        "term_end": rule.term_end.isoformat() if rule.term_end else None,
    }


def current_statuses(ledger: Ledger, rules: list[BudgetRule], now: datetime, tz: ZoneInfo) -> list[BudgetStatus]:
    """Each budget's use in its period, in the order of ``rules``: :meth:`Ledger.statuses_of`.

    The one computation of a budget's use that the spawn check, the tick, the
    API, the pages and the metrics share. A rule the ledger cannot compute (a
    damaged row) is left out.
    """
    return ledger.statuses_of(rules, now, tz)


def usage_totals(sessions: list[dict], default_currency: str) -> dict:
    """Sums over the listed sessions' minutes inside the window; cost per currency (normally just one).

    A session without the window's part (``minutes_in_window``) counts whole.
    """
    cost: dict[str, int] = {}
    for s in sessions:
        cost[s["currency"]] = cost.get(s["currency"], 0) + to_micros(Decimal(s.get("cost_in_window", s["cost"])))
    minutes = [s.get("minutes_in_window", s["minutes_billed"]) for s in sessions]
    return {
        "sessions": len(sessions),
        "minutes_billed": sum(minutes),
        "gpu_minutes": sum(m * s["gpu_count"] for m, s in zip(minutes, sessions, strict=True)),
        "cost": {code: money_str(micros) for code, micros in sorted(cost.items())} or {default_currency: "0"},
    }


def _csv_writer(out):
    from jupyterhub_gpu.service.web.usage import FormulaSafeWriter

    return FormulaSafeWriter(out)


def _csv_safe(value) -> str:
    """A text cell a spreadsheet will not run as a formula (user and server names are user input)."""
    from jupyterhub_gpu.service.web.usage import csv_cell

    return str(csv_cell(value))


def usage_csv(sessions: list[dict]) -> str:
    """Sessions as CSV with a header row; one row per session, no totals row.

    The ``*_in_window`` columns add up to the window's totals (a session crossing
    the window's edge counts only its minutes inside it there).
    """
    out = io.StringIO()
    writer = _csv_writer(out)  # every cell escaped, not only the ones named here
    writer.writerow(CSV_COLUMNS)
    for s in sessions:
        writer.writerow(
            [
                s["id"],
                _csv_safe(s["user"]),
                _csv_safe(s["server_name"]),
                _csv_safe(s["profile"]),
                " ".join(s["gpus"]),
                s["gpu_count"],
                s["started"],
                s["stopped"] or "",
                s["minutes_billed"],
                s["rate_per_minute"],
                s["cost"],
                s["currency"],
                _csv_safe(s["stop_reason"]),
                "true" if s["running"] else "false",
                s.get("minutes_in_window", s["minutes_billed"]),  # without its window's part: counts whole
                s.get("cost_in_window", s["cost"]),
            ]
        )
    return out.getvalue()


# -- pure helpers: parsing ------------------------------------------------------------------


def _reject_constant(name: str):
    raise BadRequest(f"The body is not valid JSON: {name} is not a number")


#: No request body the service takes comes near this (job parameters are at most 64 KiB). A larger one is
#: refused unread: parsing 100 MB of JSON held the service's one event loop (its tick too) for 21 s.
MAX_BODY_BYTES = 1024 * 1024


def _finite_float(text: str) -> float:
    # 1e400 is no NaN or Infinity literal, yet json.loads makes it inf, which json.dumps writes back as
    # the non-JSON "Infinity" (stored job parameters would break every later GET jobs)
    value = float(text)
    if math.isinf(value):
        raise BadRequest(f"The body is not valid JSON: {text[:40]} is too large a number")
    return value


def _unique_keys(pairs):
    keys = [k for k, _ in pairs]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise BadRequest(f"The body names {', '.join(map(repr, duplicates))} more than once")
    return dict(pairs)


def parse_json_body(body: bytes, allow_empty: bool = False):
    """The request body as JSON (strict: no NaN, no duplicate keys); BadRequest otherwise."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"The body is larger than {MAX_BODY_BYTES // 1024} KiB")
    if not body.strip():
        if allow_empty:
            return None
        raise BadRequest("The body is empty; send a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("The body is not UTF-8 text") from None
    try:
        return json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except json.JSONDecodeError as e:
        raise BadRequest(f"The body is not valid JSON: {e}") from None
    except BadRequest:  # NaN, Infinity, a key given twice
        raise
    except (ValueError, RecursionError):  # an integer of more than 4300 digits, or nesting deeper than Python's stack
        raise BadRequest("The body is not valid JSON: a number is too long or the nesting too deep") from None


def validate_subject(scope: str, name: str) -> None:
    """A budget's scope must be user or group, its subject a plausible JupyterHub name."""
    if scope not in BUDGET_SCOPES:
        raise BadRequest(
            f"A budget belongs to a 'user' or a 'group' (budgets/user/NAME, budgets/group/NAME), not {scope!r}"
        )
    if not name or not name.strip():
        raise BadRequest(f"The {scope} name is empty")
    if len(name) > 255:
        raise BadRequest(f"The {scope} name is longer than 255 characters")
    if name != name.strip():
        raise BadRequest(f"The {scope} name {name!r} starts or ends with white space")
    if "/" in name or any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise BadRequest(f"The {scope} name {name!r} contains '/' or a control character")


def parse_iso_date(value, what: str) -> date:
    """A ``YYYY-MM-DD`` date and nothing else."""
    if not isinstance(value, str) or not _DATE_RE.fullmatch(value):
        raise BadRequest(f"{what} must be a date like '2026-09-01', got {json.dumps(value)}")
    try:
        return date.fromisoformat(value)
    except ValueError as e:
        raise BadRequest(f"{what} {value!r} is not a valid date: {e}") from None


def parse_limit(value) -> Decimal:
    """A budget limit: a non-negative decimal string or integer, exact to six places, never a float."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise BadRequest(f"limit must be a decimal string such as '5000' or an integer, got {json.dumps(value)}")
    try:
        amount = parse_amount(value, "limit")
        micros = to_micros(amount)
    except (MoneyError, ValueError) as e:
        raise BadRequest(str(e)) from None
    return from_micros(micros)


def parse_budget(scope: str, subject: str, data) -> BudgetRule:
    """The budget a PUT body describes; BadRequest names the first problem."""
    validate_subject(scope, subject)
    if not isinstance(data, dict):
        raise BadRequest('The body must be a JSON object such as {"limit": "5000", "period": "month"}')
    unknown = sorted(set(data) - set(BUDGET_FIELDS))
    if unknown:
        raise BadRequest(f"Unknown field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(BUDGET_FIELDS)}")
    if "limit" not in data:
        raise BadRequest("limit is required: a decimal string such as '5000'")
    limit = parse_limit(data["limit"])
    unit = data.get("unit", "money")
    if unit not in UNITS:
        raise BadRequest(f"unit must be one of {', '.join(UNITS)}, got {json.dumps(unit)}")
    if "period" not in data:
        raise BadRequest(f"period is required: one of {', '.join(PERIODS)}")
    period = data["period"]
    if period not in PERIODS:
        raise BadRequest(f"period must be one of {', '.join(PERIODS)}, got {json.dumps(period)}")
    term_start = term_end = None
    if period == "term":
        if data.get("term_start") is None or data.get("term_end") is None:
            raise BadRequest("A term budget needs both term_start and term_end (dates like '2026-09-01')")
        term_start = parse_iso_date(data["term_start"], "term_start")
        term_end = parse_iso_date(data["term_end"], "term_end")
        if term_start > term_end:
            raise BadRequest(f"term_start {term_start} is after term_end {term_end}")
        if term_start.year < 1900 or term_end.year > 9000:  # the period's UTC bounds must exist
            raise BadRequest(f"A term must lie between the years 1900 and 9000, got {term_start} to {term_end}")
    elif data.get("term_start") is not None or data.get("term_end") is not None:
        raise BadRequest(f"term_start and term_end are only for period 'term', not {period!r}")
    return BudgetRule(scope, subject, period, unit, limit, term_start, term_end)


def parse_moment(value: str, what: str, tz: ZoneInfo, end_of_day: bool = False) -> datetime:
    """An aware UTC datetime from an ISO date or date-time; dates and naive times are in the lab's zone.

    A date given as ``until`` means the end of that day (the day is included).
    """
    if _DATE_RE.fullmatch(value):
        day = parse_iso_date(value, what)
        try:
            if end_of_day:
                day += timedelta(days=1)
            return datetime.combine(day, time(0), tzinfo=tz).astimezone(timezone.utc)
        except OverflowError:  # 9999-12-31 as until, 0001-01-01 east of UTC
            raise BadRequest(f"{what} {value!r} is out of range") from None
    try:
        moment = datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    except ValueError:
        raise BadRequest(
            f"{what} must be an ISO date (2026-11-01) or date and time (2026-11-01T08:00:00+08:00), got {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    try:
        return moment.astimezone(timezone.utc)
    except OverflowError:
        raise BadRequest(f"{what} {value!r} is out of range") from None


@dataclass(frozen=True)
class UsageQuery:
    user: str | None = None
    group: str | None = None
    everyone: bool = False
    since: datetime | None = None
    until: datetime | None = None
    format: str = "json"
    #: With ``group``: only the sessions the group paid for (its pool), whose totals add up across groups.
    paid: bool = False


def query_values(arguments: dict[str, list[bytes]], params: tuple[str, ...]) -> dict[str, str]:
    """The query's parameters as text: each at most once, unknown ones refused."""
    unknown = sorted(set(arguments) - set(params) - set(AUTH_PARAMS))
    if unknown:
        raise BadRequest(
            f"Unknown parameter(s) {', '.join(map(repr, unknown))}; the parameters are {', '.join(params)}"
        )
    values = {}
    for name in params:
        given = arguments.get(name, [])
        if len(given) > 1:
            raise BadRequest(f"Give {name} at most once")
        if given:
            try:
                values[name] = given[0].decode("utf-8") if isinstance(given[0], bytes) else given[0]
            except UnicodeDecodeError:
                raise BadRequest(f"{name} is not UTF-8 text") from None
    return values


def query_format(values: dict[str, str]) -> str:
    fmt = values.get("format", "json")
    if fmt not in ("json", "csv"):
        raise BadRequest(f"format must be json or csv, got {fmt!r}")
    return fmt


def query_window(values: dict[str, str], tz: ZoneInfo) -> tuple[datetime | None, datetime | None]:
    """``since`` and ``until`` in the lab's time zone; ``until`` as a date includes that whole day."""
    since = parse_moment(values["since"], "since", tz) if "since" in values else None
    until = parse_moment(values["until"], "until", tz, end_of_day=True) if "until" in values else None
    if since is not None and until is not None and since >= until:
        raise BadRequest(f"since ({values['since']}) must be before until ({values['until']})")
    return since, until


def parse_usage_query(arguments: dict[str, list[bytes]], tz: ZoneInfo) -> UsageQuery:
    """The query of ``GET usage``; each parameter at most once, unknown ones refused."""
    values = query_values(arguments, USAGE_PARAMS)
    for name in ("user", "group"):
        if name in values:
            validate_subject(name, values[name])
    everyone = values.get("all", "false").lower()
    if everyone not in ("true", "false", "1", "0"):
        raise BadRequest(f"all must be true or false, got {values['all']!r}")
    everyone = everyone in ("true", "1")
    if everyone and ("user" in values or "group" in values):
        raise BadRequest("all=true lists every user's sessions; do not combine it with user or group")
    paid = values.get("paid", "false").lower()
    if paid not in ("true", "false", "1", "0"):
        raise BadRequest(f"paid must be true or false, got {values['paid']!r}")
    paid = paid in ("true", "1")
    if paid and "group" not in values:
        raise BadRequest("paid=true lists the sessions a group paid for: give group= too")
    fmt = query_format(values)
    since, until = query_window(values, tz)
    return UsageQuery(values.get("user"), values.get("group"), everyone, since, until, fmt, paid)


# -- pure helpers: the culling report -----------------------------------------------------------

CULLING_PARAMS = ("since", "until", "group", "horizon_hours", "format")
CULLING_CSV_COLUMNS = (
    "id",
    "user",
    "server_name",
    "profile",
    "gpu_count",
    "started",
    "stopped",
    "stop_reason",
    "counted_as",
    "estimated_until",
    "ended_by",
    "minutes_saved",
    "gpu_minutes_saved",
    "gpu_hours_saved",
    "money_saved",
    "currency",
)
#: The longest horizon a report may assume (a week): beyond it the estimate says nothing useful.
MAX_HORIZON_HOURS = 168
_HOURS_RE = re.compile(r"^[0-9]{1,3}$")


@dataclass(frozen=True)
class CullingQuery:
    since: datetime | None = None
    until: datetime | None = None
    group: str | None = None
    horizon: timedelta = DEFAULT_HORIZON
    format: str = "json"


def parse_culling_query(arguments: dict[str, list[bytes]], tz: ZoneInfo) -> CullingQuery:
    """The query of ``GET culling``: dates as ``GET usage`` reads them, each parameter at most once."""
    values = query_values(arguments, CULLING_PARAMS)
    if "group" in values:
        validate_subject("group", values["group"])
    fmt = query_format(values)
    horizon = DEFAULT_HORIZON
    if "horizon_hours" in values:
        text = values["horizon_hours"]
        if not _HOURS_RE.fullmatch(text) or not 1 <= int(text) <= MAX_HORIZON_HOURS:
            raise BadRequest(
                f"horizon_hours must be a whole number of hours from 1 to {MAX_HORIZON_HOURS}, got {text!r}"
            )
        horizon = timedelta(hours=int(text))
    since, until = query_window(values, tz)
    return CullingQuery(since, until, values.get("group"), horizon, fmt)


def gpu_hours_str(gpu_minutes: int) -> str:
    """GPU-minutes as GPU-hours, a decimal string to six places at most (``90`` -> ``"1.5"``)."""
    return decimal_str(Decimal(gpu_minutes) / 60, "gpu_hours")


def _other_currencies(micros: dict[str, int], currency: str) -> dict[str, str]:
    return {code: money_str(m) for code, m in sorted(micros.items()) if code != currency and m}


def tally_json(tally: Tally, currency: str) -> dict:
    """A tally of savings: money in ``currency``; any other currency (never, unless it was changed) apart."""
    data = {
        "sessions": tally.sessions,
        "minutes_saved": tally.minutes,
        "gpu_minutes_saved": tally.gpu_minutes,
        "gpu_hours_saved": gpu_hours_str(tally.gpu_minutes),
        "money_saved": money_str(tally.money_micros.get(currency, 0)),
    }
    other = _other_currencies(dict(tally.money_micros), currency)
    if other:
        data["money_saved_other_currencies"] = other
    return data


def _hours_number(span: timedelta) -> int | float:
    hours = span / timedelta(hours=1)
    return int(hours) if hours == int(hours) else hours


def culling_json(report: CullingReport, currency: str) -> dict:
    """The culling report as ``GET culling`` answers it."""
    share = report.idle_share
    data = {
        "window": {
            "since": isoformat(report.since) if report.since else None,
            "until": isoformat(report.until) if report.until else None,
            "counted_until": isoformat(report.counted_until),
            "horizon_hours": _hours_number(report.horizon),
            "idle_util_percent": IDLE_UTIL_PERCENT,
        },
        "group": report.group,
        "currency": currency,
        "by_reason": {reason: tally_json(report.by_reason[reason], currency) for reason in CULL_REASONS},
        "total": tally_json(report.total, currency),
        "budget_stops": tally_json(report.budget, currency),
        "billed_gpu_hours": gpu_hours_str(report.billed_gpu_minutes),
        "billed_idle_gpu_hours": gpu_hours_str(report.billed_idle_gpu_minutes),
        "billed_unsampled_gpu_hours": gpu_hours_str(report.billed_unsampled_gpu_minutes),
        "billed_money": money_str(report.billed_money_micros.get(currency, 0)),
        "idle_share": None if share is None else round(share, 4),
    }
    other = _other_currencies(dict(report.billed_money_micros), currency)
    if other:
        data["billed_money_other_currencies"] = other
    return data


def culling_csv(report: CullingReport) -> str:
    """One row per culled or budget-stopped session in the window, by stop time; no totals row."""
    out = io.StringIO()
    writer = _csv_writer(out)  # every cell escaped, not only the ones named here
    writer.writerow(CULLING_CSV_COLUMNS)
    for v in report.savings:
        s = v.session
        writer.writerow(
            [
                s.id,
                _csv_safe(s.user),
                _csv_safe(s.server_name),
                _csv_safe(s.profile),
                s.gpu_count,
                isoformat(s.started),
                isoformat(s.stopped),
                s.stop_reason,
                "budget" if s.stop_reason not in CULL_REASONS else "culling",
                isoformat(v.until),
                v.ended_by,
                v.minutes,
                v.gpu_minutes,
                gpu_hours_str(v.gpu_minutes),
                money_str(v.money_micros),
                s.currency,
            ]
        )
    return out.getvalue()


# -- handlers ------------------------------------------------------------------------------


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """JSON in, JSON out, errors as ``{"status": 4xx, "message": "..."}``.

    Requests without credentials are answered 403, not redirected to the login
    page: API clients and scrapers cannot follow a login form. Only a browser
    (one that carries the hub's session cookie, or navigates to the URL) is sent
    through JupyterHub's OAuth, which ends back here with the OAuth cookie set.
    """

    _refused_model = None

    @property
    def service(self):
        return self.settings["service"]

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    @property
    def ledger(self) -> Ledger:
        return self.service.ledger

    def check_hub_user(self, model):
        try:
            return super().check_hub_user(model)
        except UserNotAllowed:
            self._refused_model = model
            raise

    def get_login_url(self):
        if self._is_browser() and self._refused_model is None:
            return super().get_login_url()
        raise web.HTTPError(403, self._unauthenticated_message())

    def _is_browser(self) -> bool:
        """A browser's GET without a token: logged in to the hub, or navigating to this URL."""
        headers = self.request.headers
        if self.request.method not in ("GET", "HEAD") or "Authorization" in headers:
            return False
        return bool(self.get_cookie("jupyterhub-session-id")) or headers.get("Sec-Fetch-Mode") == "navigate"

    def _unauthenticated_message(self) -> str:
        if self._refused_model is not None:
            model = self._refused_model
            needs = " or ".join(sorted(self.hub_scopes or (), key=len, reverse=True)) or "access to the gpu service"
            return (
                f"{model.get('kind', 'user').title()} {model['name']} may not use the gpu service:"
                f" the token needs the scope {needs} (see the service's documentation for the role to grant)."
            )
        if self.request.method not in ("GET", "HEAD") and self.get_cookie(self.hub_auth.cookie_name):
            return (
                "A browser's request that changes something needs the X-XSRFToken header (JupyterHub's XSRF"
                " protection, from the service's page); programs send 'Authorization: token ...' instead."
            )
        return (
            "Authentication required: send 'Authorization: token <JupyterHub API token>',"
            " or log in to JupyterHub in this browser."
        )

    # -- who is asking -----------------------------------------------------------
    def has_scope(self, scope: str) -> bool:
        user = self.current_user or {}
        return scope in set(user.get("scopes", []))

    def require_scope(self, *scopes: str) -> None:
        """403 unless the caller holds one of ``scopes``."""
        if not any(self.has_scope(s) for s in scopes):
            raise web.HTTPError(403, f"This needs the {' or '.join(scopes)} scope.")

    @property
    def instructor_groups(self) -> tuple[str, ...]:
        """The groups whose usage the caller may read: a role with ``custom:gpu-usage:read!group=NAME`` per group."""
        return instructor_groups((self.current_user or {}).get("scopes", []))

    def can_read_group(self, group: str) -> bool:
        return self.has_scope(SCOPE_USAGE_READ) or group in self.instructor_groups

    def require_group(self, group: str) -> None:
        """403 unless the caller reads everyone's usage or is an instructor of ``group``."""
        if not self.can_read_group(group):
            raise web.HTTPError(403, f"This needs the {SCOPE_USAGE_READ} or {SCOPE_USAGE_READ}!group={group} scope.")

    @property
    def is_user(self) -> bool:
        return (self.current_user or {}).get("kind", "user") == "user"

    def own_name(self, what: str) -> str:
        """The calling user's name; a service has no usage of its own."""
        if not self.is_user:
            raise web.HTTPError(
                403, f"Service {self.current_user['name']} is not a user and has no GPU usage of its own; {what}."
            )
        return self.current_user["name"]

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple((self.current_user or {}).get("groups") or ())

    # -- input and output --------------------------------------------------------
    def json_body(self, allow_empty: bool = False):
        try:
            return parse_json_body(self.request.body, allow_empty=allow_empty)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    def write_error(self, status_code, **kwargs):
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code == 403 and self.current_user is None:
            # tornado's @authenticated refuses unauthenticated POST/PUT/DELETE without a message
            message = self._unauthenticated_message()
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def now(self) -> datetime:
        return utcnow()

    def statuses(self, rules: list[BudgetRule], now: datetime) -> list[BudgetStatus]:
        return current_statuses(self.ledger, rules, now, self.service.tz)


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    """The OAuth callback, with the service's one HubOAuth (which holds the OAuth states)."""

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]


class MeHandler(BaseHandler):
    """``GET me``: the caller's budgets, running sessions and pending notices."""

    @web.authenticated
    def get(self):
        name = self.own_name("use GET usage with user=, group= or all=true")
        groups = self.groups
        now = self.now()
        currency = self.service.currency_info
        rules = [r for r in self.ledger.budget_rules() if applies_to(r, name, groups)]
        statuses = sorted(self.statuses(rules, now), key=lambda s: s.fraction, reverse=True)
        active = sessions_json(self.ledger, self.ledger.open_sessions_of(name), now, currency)
        self.write_json(
            {
                "user": name,
                "groups": list(groups),
                "currency": currency.code,
                "currency_symbol": currency.symbol,
                "budgets": [status_json(s) for s in statuses],
                "active_sessions": active,
                "notices": [notice_json(n) for n in self.ledger.notices(name)],
            }
        )


def notice_json(notice) -> dict:
    return {
        "id": notice.id,
        "kind": notice.kind,
        "level": notice.level,
        "message": notice.message,
        "created": isoformat(_aware(notice.created)),
        "session_id": notice.session_id,
        "dismissed": notice.dismissed,
    }


class NoticeDismissHandler(BaseHandler):
    """``POST me/notices/{id}/dismiss``: hide one of the caller's own notices (idempotent)."""

    @web.authenticated
    def post(self, notice_id: str):
        name = self.own_name("only users have notices")
        if not _DIGITS_RE.fullmatch(notice_id):
            raise web.HTTPError(400, f"A notice id is a number, got {notice_id!r}")
        body = self.json_body(allow_empty=True)
        if body not in (None, {}):
            raise web.HTTPError(400, "Dismissing a notice takes no body (or {})")
        # another user's notice is "not found", so that ids reveal nothing
        if not self.ledger.dismiss_notice(name, int(notice_id)):
            raise web.HTTPError(404, f"You have no notice {notice_id}")
        notice = next(n for n in self.ledger.notices(name, include_dismissed=True) if n.id == int(notice_id))
        self.write_json(notice_json(notice))


class UsageHandler(BaseHandler):
    """``GET usage``: sessions and totals, one's own or (with custom:gpu-usage:read) anyone's."""

    @web.authenticated
    def get(self):
        try:
            query = parse_usage_query(self.request.query_arguments, self.service.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        user = query.user
        if query.group is not None and user is None:
            self.require_group(query.group)  # instructors read their own groups
        elif query.everyone or query.group is not None or (user is not None and user != self.current_user["name"]):
            self.require_scope(SCOPE_USAGE_READ)
        elif user is None:
            user = self.own_name("give user=, group= or all=true")
        elif not self.is_user:  # a service named like a user sees nothing of that user's
            self.require_scope(SCOPE_USAGE_READ)
        now = self.now()
        currency = self.service.currency_info
        # every session with a minute in the window; totals count the minutes inside it (as budgets do)
        records = self.ledger.sessions(
            user=user,
            since=query.since,
            until=query.until,
            group=query.group,
            overlapping=True,
            pool=query.group if query.paid else None,
        )
        sessions = sessions_json(self.ledger, records, now, currency, (query.since, query.until))
        if query.format == "csv":
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="gpu-usage.csv"')
            self.set_header("Cache-Control", "no-store")
            self.finish(usage_csv(sessions))
            return
        self.write_json(
            {
                "user": user,
                "group": query.group,
                "paid": query.paid,
                "all": query.everyone,
                "since": isoformat(query.since) if query.since else None,
                "until": isoformat(query.until) if query.until else None,
                "currency": currency.code,
                "sessions": sessions,
                "totals": usage_totals(sessions, currency.code),
            }
        )


class BudgetListHandler(BaseHandler):
    """``GET budgets``: every budget with its current period's use (admins)."""

    @web.authenticated
    def get(self):
        self.require_scope(SCOPE_USAGE_READ, SCOPE_BUDGETS_WRITE)
        budgets = {f"{b.scope}:{b.subject}": b for b in self.ledger.budgets()}
        statuses = self.statuses(self.ledger.budget_rules(), self.now())
        self.write_json(
            {
                "currency": self.service.currency_info.code,
                "budgets": [budget_json(budgets[s.rule.key], s) for s in statuses],
            }
        )


def budget_json(budget, status: BudgetStatus) -> dict:
    return {**status_json(status), "updated": isoformat(_aware(budget.updated))}


class BudgetHandler(BaseHandler):
    """``GET``, ``PUT``, ``DELETE budgets/{user|group}/{name}`` (admins)."""

    def _subject(self, scope: str, name: str) -> None:
        try:
            validate_subject(scope, name)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None

    def _one(self, scope: str, name: str, status: int = 200, **extra) -> None:
        budget = self.ledger.get_budget(scope, name)
        if budget is None:
            raise web.HTTPError(404, f"The {scope} {name} has no budget")
        rules = [r for r in self.ledger.budget_rules() if r.key == f"{scope}:{name}"]
        current = next(iter(self.statuses(rules, self.now())), None)
        if current is None:
            raise web.HTTPError(500, f"The budget of the {scope} {name} is damaged; set it again")
        self.write_json({**budget_json(budget, current), "currency": self.service.currency_info.code, **extra}, status)

    @web.authenticated
    def get(self, scope: str, name: str):
        self.require_scope(SCOPE_USAGE_READ, SCOPE_BUDGETS_WRITE)
        self._subject(scope, name)
        self._one(scope, name)

    @web.authenticated
    async def put(self, scope: str, name: str):
        self.require_scope(SCOPE_BUDGETS_WRITE)
        try:
            rule = parse_budget(scope, name, parse_json_body(self.request.body))
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        existed = self.ledger.get_budget(scope, name) is not None
        self.ledger.set_budget(rule, self.now())
        extra = {}
        warning = await self._unknown_subject_warning(scope, name)
        if warning:
            extra["warning"] = warning
        self._one(scope, name, 200 if existed else 201, **extra)

    async def _unknown_subject_warning(self, scope: str, name: str) -> str | None:
        """A hint when the hub has no such user or group (a typo, or one who has not logged in yet)."""
        path = f"/{'users' if scope == 'user' else 'groups'}/{quote(name, safe='')}"
        try:
            found = await self.service.hub.request("GET", path)
        except HubAPIError as e:
            self.log.debug("could not look up %s %s on the hub: %s", scope, name, e)
            return None
        if found is None:
            return f"The hub has no {scope} named {name!r} (yet); the budget applies once it does."
        return None

    @web.authenticated
    def delete(self, scope: str, name: str):
        self.require_scope(SCOPE_BUDGETS_WRITE)
        self._subject(scope, name)
        if not self.ledger.delete_budget(scope, name):
            raise web.HTTPError(404, f"The {scope} {name} has no budget")
        self.set_status(204)
        self.finish()


class PricingHandler(BaseHandler):
    """``GET pricing``: the profiles the caller may use and their rates (all of them with custom:gpu-usage:read)."""

    @web.authenticated
    def get(self):
        from jupyterhub_gpu.service.domain.overrides import apply_to_pricing, load_overrides

        profiles = apply_to_pricing(self.ledger.pricing(), load_overrides(self.ledger))  # admins' edits
        if not self.has_scope(SCOPE_USAGE_READ):
            groups = set(self.groups)
            profiles = [p for p in profiles if not p["allowed_groups"] or groups & set(p["allowed_groups"])]
        self.write_json(
            {
                "currency": self.service.currency_info.code,
                "profiles": [
                    {
                        # (the rate's configured parts and the inventory's GPU memory stay inside the service)
                        **{k: v for k, v in p.items() if k not in ("price_per_gpu_hour", "gpu_memory_mib")},
                        "price_per_hour": f"{(Decimal(p['rate_per_minute']) * 60).normalize():f}",
                        "updated": isoformat(p["updated"]),
                    }
                    for p in profiles
                ],
            }
        )


def load_culling_inputs(
    ledger: Ledger, since: datetime | None, until: datetime, group: str | None = None
) -> tuple[list[SessionFacts], dict[str, MinuteCounts]]:
    """The sessions that ran in ``[since, until)`` (every user's) and the minute counts of the reported ones.

    Two plain queries: the sessions that started before ``until`` and had not
    stopped before ``since``; then, per chunk of the reported GPU sessions (the
    primary key's index), their sampled and idle minutes in the window, counted
    in SQL (a minute is idle when its mean utilization is under
    ``IDLE_UTIL_PERCENT`` and no kernel was busy).
    """
    from sqlalchemy import and_, case, func, or_, select

    from jupyterhub_gpu.ledger.store import SessionRecord, UsageMinute, _naive

    s = SessionRecord
    query = select(
        s.id,
        s.user,
        s.server_name,
        s.groups,
        s.profile,
        s.gpu_count,
        s.rate_micros,
        s.currency,
        s.started,
        s.stopped,
        s.stop_reason,
        s.pool,
    ).where(s.started < _naive(until))
    if since is not None:
        query = query.where(or_(s.stopped.is_(None), s.stopped >= _naive(since)))
    facts = []
    with ledger.engine.connect() as db:
        for sid, user, server, groups, profile, gpus, rate, currency, started, stopped, reason, pool in db.execute(
            query
        ):
            facts.append(
                SessionFacts(
                    id=sid,
                    user=user,
                    started=_aware(started),
                    stopped=_aware(stopped),
                    stop_reason=reason,
                    gpu_count=gpus,
                    rate_micros=rate,
                    currency=currency,
                    groups=tuple(json.loads(groups or "[]")),
                    profile=profile,
                    server_name=server or "",
                    pool=pool,
                )
            )
    # a group's report counts the sessions it paid for (each session once, for its pool)
    ids = [f.id for f in facts if f.gpu_count and (group is None or f.pool == group)]
    u = UsageMinute
    sampled = func.sum(case((u.samples > 0, 1), else_=0))
    # mean utilization under the threshold: Σ(tenths) / 10 / samples < IDLE_UTIL_PERCENT, in integers
    quiet = and_(u.samples > 0, u.utilization_tenths_sum < 10 * IDLE_UTIL_PERCENT * u.samples, u.busy_kernels_max == 0)
    idle = func.sum(case((quiet, 1), else_=0))
    counts = {}
    with ledger.engine.connect() as db:
        for i in range(0, len(ids), 500):
            chunk = select(u.session_id, sampled, idle).where(
                u.session_id.in_(ids[i : i + 500]), u.minute < _naive(until)
            )
            if since is not None:
                chunk = chunk.where(u.minute >= _naive(since))
            for sid, n_sampled, n_idle in db.execute(chunk.group_by(u.session_id)):
                counts[sid] = MinuteCounts(sampled=int(n_sampled or 0), idle=int(n_idle or 0))
    return facts, counts


class CullingHandler(BaseHandler):
    """``GET culling``: what culling saved in a window (an estimate), and the billed idle share (admins)."""

    @web.authenticated
    def get(self):
        if not self.instructor_groups:
            self.require_scope(SCOPE_USAGE_READ)
        try:
            query = parse_culling_query(self.request.query_arguments, self.service.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        if query.group is None:
            self.require_scope(SCOPE_USAGE_READ)
        else:
            self.require_group(query.group)  # instructors: their own groups
        now = self.now()
        end = now if query.until is None else min(query.until, now)
        facts, counts = load_culling_inputs(self.ledger, query.since, end, query.group)
        report = culling_report(facts, counts, query.since, query.until, now, query.horizon, query.group)
        if query.format == "csv":
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition", 'attachment; filename="gpu-culling.csv"')
            self.set_header("Cache-Control", "no-store")
            self.finish(culling_csv(report))
            return
        self.write_json(culling_json(report, self.service.currency_info.code))


ADVICE_PARAMS = ("since", "until", "group")


class AdviceHandler(BaseHandler):
    """``GET advice``: right-sizing advice summed per group and per profile (admins; instructors for their groups)."""

    @web.authenticated
    def get(self):
        from jupyterhub_gpu.service.domain.advice import summary

        if not self.instructor_groups:
            self.require_scope(SCOPE_USAGE_READ)
        try:
            values = query_values(self.request.query_arguments, ADVICE_PARAMS)
            if "group" in values:
                validate_subject("group", values["group"])
            since, until = query_window(values, self.service.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        group = values.get("group")
        if group is None:
            self.require_scope(SCOPE_USAGE_READ)
        else:
            self.require_group(group)  # instructors: their own groups
        settings = self.service.advice_settings
        report = summary(self.ledger, since, until, group, self.service.currency_info)
        self.write_json(
            {
                "since": isoformat(since) if since else None,
                "until": isoformat(until) if until else None,
                "headroom_percent": settings.headroom_percent,
                "min_minutes": settings.min_minutes,
                **report,
            }
        )


class OpenAPIHandler(BaseHandler):
    """``GET openapi.yaml``: the API description, public like any API documentation."""

    _document: bytes | None = None

    def get(self):
        if OpenAPIHandler._document is None:
            OpenAPIHandler._document = OPENAPI.read_bytes()
        self.set_header("Content-Type", "application/yaml; charset=UTF-8")
        self.finish(OpenAPIHandler._document)


class NotFoundHandler(BaseHandler):
    """Anything else under ``api/v1/``: a JSON 404 that points at the API description."""

    def prepare(self):
        raise web.HTTPError(
            404, f"No such endpoint: {self.request.method} {self.request.path}; see api/v1/openapi.yaml"
        )


def make_handlers(prefix: str, service) -> list:
    from jupyterhub_gpu.service.domain.jobs import make_job_handlers
    from jupyterhub_gpu.service.web.metrics import MetricsHandler, make_registry
    from jupyterhub_gpu.service.web.pages import page_handlers
    from jupyterhub_gpu.service.web.usage import samples_handler

    api = url_path_join(prefix, "api/v1")
    return [
        (url_path_join(prefix, "oauth_callback"), OAuthCallbackHandler),
        (url_path_join(prefix, "metrics"), MetricsHandler, {"registry": make_registry(service.ledger, service.tz)}),
        (url_path_join(api, "openapi.yaml"), OpenAPIHandler),
        (url_path_join(api, "me"), MeHandler),
        (url_path_join(api, r"me/notices/([^/]+)/dismiss"), NoticeDismissHandler),
        (url_path_join(api, "usage"), UsageHandler),
        (url_path_join(api, "budgets"), BudgetListHandler),
        (url_path_join(api, r"budgets/([^/]+)/([^/]+)"), BudgetHandler),
        (url_path_join(api, "pricing"), PricingHandler),
        (url_path_join(api, "culling"), CullingHandler),
        (url_path_join(api, "advice"), AdviceHandler),
        (url_path_join(api, "samples"), samples_handler()),
        *make_job_handlers(api),
        *page_handlers(prefix),  # the usage pages (pages.py), outside api/v1/
        (url_path_join(api, r".*"), NotFoundHandler),
    ]
