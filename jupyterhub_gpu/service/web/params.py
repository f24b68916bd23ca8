"""Request parsers: a body or a query string to values, or :class:`BadRequest` with the caller's 400 message.

Pure functions, so that every 400 can be tested without a hub. Each query
parameter is taken at most once and unknown ones are refused; dates and naive
times are in the lab's time zone; money is a decimal string, never a float.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from jupyterhub_gpu.billing import PERIODS, UNITS, BudgetRule
from jupyterhub_gpu.ledger.hubnames import check_hub_name
from jupyterhub_gpu.ledger.queries.schedule import Draft
from jupyterhub_gpu.money import MoneyError, from_micros, parse_amount, to_micros
from jupyterhub_gpu.service.domain.savings import DEFAULT_HORIZON

BUDGET_FIELDS = ("limit", "unit", "period", "term_start", "term_end")
BUDGET_SCOPES = ("user", "group")
USAGE_PARAMS = ("user", "group", "hub", "paid", "all", "since", "until", "format")
CULLING_PARAMS = ("since", "until", "group", "hub", "horizon_hours", "format")
ADVICE_PARAMS = ("since", "until", "group")
#: Query parameters JupyterHub's own auth may use; accepted and ignored by our parsers.
AUTH_PARAMS = ("token", "_xsrf")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HOURS_RE = re.compile(r"^[0-9]{1,3}$")
#: The longest horizon a report may assume (a week): beyond it the estimate says nothing useful.
MAX_HORIZON_HOURS = 168


class BadRequest(ValueError):
    """A malformed body or parameter; the message is shown to the caller with a 400."""


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
    #: Only the sessions of this hub (``c.GPUService.hub_name``); None: every hub on the ledger.
    hub: str | None = None


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


def query_flag(values: dict[str, str], name: str) -> bool:
    """A ``true``/``false`` (or ``1``/``0``) parameter; false when it is not given."""
    text = values.get(name, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise BadRequest(f"{name} must be true or false, got {values[name]!r}")
    return text in ("true", "1")


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


def parse_hub(value: str) -> str:
    """A hub filter's name (``?hub=``) by the rule of ``c.GPUService.hub_name``, or BadRequest; whether the ledger
    has it: :func:`known_hub`."""
    try:
        return check_hub_name(value, "hub")
    except ValueError as e:
        raise BadRequest(str(e)) from None


def known_hub(hub: str | None, hubs: list[str], tell: bool = True) -> str | None:
    """``hub`` when the ledger knows it (``hubs``: its sessions' and its members' hubs), else BadRequest naming them
    (``tell`` False: without them, for a caller who may read only their own usage)."""
    if hub is None or hub in hubs:
        return hub
    if not tell:
        raise BadRequest(f"The ledger has no hub named {hub!r}")
    have = ", ".join(map(repr, hubs)) if hubs else "none yet"
    raise BadRequest(f"The ledger has no hub named {hub!r}; its hubs: {have}")


def parse_usage_query(arguments: dict[str, list[bytes]], tz: ZoneInfo) -> UsageQuery:
    """The query of ``GET usage``; each parameter at most once, unknown ones refused."""
    values = query_values(arguments, USAGE_PARAMS)
    for name in ("user", "group"):
        if name in values:
            validate_subject(name, values[name])
    everyone = query_flag(values, "all")
    if everyone and ("user" in values or "group" in values):
        raise BadRequest("all=true lists every user's sessions; do not combine it with user or group")
    paid = query_flag(values, "paid")
    if paid and "group" not in values:
        raise BadRequest("paid=true lists the sessions a group paid for: give group= too")
    hub = parse_hub(values["hub"]) if "hub" in values else None
    fmt = query_format(values)
    since, until = query_window(values, tz)
    return UsageQuery(values.get("user"), values.get("group"), everyone, since, until, fmt, paid, hub)


@dataclass(frozen=True)
class CullingQuery:
    since: datetime | None = None
    until: datetime | None = None
    group: str | None = None
    horizon: timedelta = DEFAULT_HORIZON
    format: str = "json"
    hub: str | None = None


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
    hub = parse_hub(values["hub"]) if "hub" in values else None
    return CullingQuery(since, until, values.get("group"), horizon, fmt, hub)


# -- the schedule: reservations and group shares ----------------------------------------------------------------

RESERVATION_FIELDS = ("group", "gpu_model", "count", "start", "end", "weekly_until", "note")
SHARE_FIELDS = ("group", "gpu_model", "share")
MAX_SHARE = 1_000_000
#: A weekly reservation repeats for a year at most (a term is shorter): book again for the next.
MAX_WEEKLY_DAYS = 366


def _fields(data, allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
    if not isinstance(data, dict):
        raise BadRequest("The body must be a JSON object")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise BadRequest(f"Unknown field(s) {', '.join(map(repr, unknown))}; known: {', '.join(allowed)}")
    for name in required:
        if name not in data:
            raise BadRequest(f"{name} is required")


def _name(data: dict, field: str, longest: int) -> str:
    value = data[field]
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{field} must be a non-empty string, got {json.dumps(value)}")
    odd = value in (".", "..") or "/" in value or any(ord(c) < 32 or ord(c) == 127 for c in value)
    if len(value) > longest or value != value.strip() or odd:
        raise BadRequest(
            f"{field} {value!r} is not a plausible name (white space at an end, '/', a control character,"
            f" or longer than {longest} characters)"
        )
    return value


def parse_zoned(value, field: str) -> datetime:
    """An ISO 8601 date and time with its zone (``2026-12-08T14:00+08:00``, ``...Z``); BadRequest naming ``field``."""
    if not isinstance(value, str):
        raise BadRequest(f"{field} must be an ISO 8601 date and time with a zone, got {json.dumps(value)}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(
            f"{field} must be an ISO 8601 date and time such as 2026-12-08T14:00+08:00, got {value!r}"
        ) from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise BadRequest(f"{field} {value!r} has no time zone: add one, such as +08:00 or Z")
    try:
        year = moment.astimezone(timezone.utc).year
    except OverflowError:
        year = 0
    if not 2000 <= year <= 2999:
        raise BadRequest(f"{field} {value!r} is not a time between the years 2000 and 2999")
    return moment


def parse_reservation(data) -> Draft:
    """A booking's fields from a JSON body; what the pool and other bookings allow is checked by the domain."""
    _fields(data, RESERVATION_FIELDS, ("group", "gpu_model", "count", "start", "end"))
    count = data["count"]
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 10_000:
        raise BadRequest(f"count must be a whole number of GPUs from 1, got {json.dumps(count)}")
    weekly = data.get("weekly_until")
    note = data.get("note", "")
    if not isinstance(note, str) or len(note) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in note):
        raise BadRequest("note must be a string of at most 255 characters without control characters")
    draft = Draft(
        group=_name(data, "group", 255),
        gpu_model=_name(data, "gpu_model", 64),
        count=count,
        start=parse_zoned(data["start"], "start"),
        end=parse_zoned(data["end"], "end"),
        weekly_until=None if weekly is None else parse_iso_date(weekly, "weekly_until"),
        note=note,
    )
    if draft.weekly_until is not None and (draft.weekly_until - draft.start.date()).days > MAX_WEEKLY_DAYS:
        raise BadRequest(
            f"weekly_until must be at most {MAX_WEEKLY_DAYS} days after the start (a reservation per year)"
        )
    return draft


def parse_share(data) -> tuple[str, str, int | None]:
    """``(group, gpu_model, share)`` from a JSON body; ``share`` null removes the group's share (the default again)."""
    _fields(data, SHARE_FIELDS, SHARE_FIELDS)
    share = data["share"]
    if share is not None and (not isinstance(share, int) or isinstance(share, bool) or not 0 <= share <= MAX_SHARE):
        raise BadRequest(f"share must be a whole number from 0 to {MAX_SHARE}, or null, got {json.dumps(share)}")
    return _name(data, "group", 255), _name(data, "gpu_model", 64), share
