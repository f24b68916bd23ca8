"""How the CLI shows the service's answers: tables, money or GPU-hours, times in a zone."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub_gpu.money import Currency, MoneyError


def money_of(currency: str):
    try:
        return Currency.from_config(currency)
    except MoneyError:
        return Currency(currency, currency + " ")


def amount_text(value: str, unit: str, currency) -> str:
    if unit == "gpu_hours":
        return f"{Decimal(value):.2f} GPU-hours"
    return currency.format(Decimal(value))


def describe_budget(budget: dict, currency) -> str:
    period = budget["period"]
    if period == "term":
        period = f"term {budget['term_start']} to {budget['term_end']}"
    whose = f"{budget['scope']} {budget['subject']}"
    return f"{whose}: {amount_text(budget['limit'], budget['unit'], currency)} per {period}"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def period_end_text(budget: dict, zone: ZoneInfo, short: bool = False) -> str:
    """When the period ends, in ``zone`` (named, except in the table whose header names it); a term budget
    outside its term binds nothing, and says so."""
    suffix = "" if short else f" {zone.key}"
    end = moment_in(budget["period_end"], zone, "%Y-%m-%d %H:%M") + suffix
    start = moment_in(budget["period_start"], zone, "%Y-%m-%d %H:%M") + suffix
    state = budget.get("state", "current")
    if state == "ended":
        return f"ended {end}" if short else f"the term ended {end}: it binds nothing"
    if state == "upcoming":
        return f"starts {start}" if short else f"the term starts {start}"
    return end if short else f"period ends {end}"


def zone_of(args, data: dict) -> ZoneInfo:
    """The time zone times are shown in: ``--tz``, else the lab's (the service's answer says it), else UTC."""
    try:
        return ZoneInfo(args.tz or data.get("timezone") or "UTC")
    except (ZoneInfoNotFoundError, ValueError):  # a zone this machine's tz database lacks
        return ZoneInfo("UTC")


def moment_in(iso: str, zone: ZoneInfo, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    """An API time (ISO 8601, UTC) in ``zone``."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(zone).strftime(pattern)


def listing(client, path: str, key: str, args, out, empty: str, params: dict | None = None) -> dict | None:
    """``GET path`` of a listing: printed whole with ``--json``, or ``empty`` when its ``key`` lists nothing (None
    then: nothing more to show); else the answer, for the caller's table."""
    data = client.json("GET", path, params=params)
    if args.json:
        print(json.dumps(data, indent=2), file=out)
        return None
    if not data[key]:
        print(empty, file=out)
        return None
    return data
