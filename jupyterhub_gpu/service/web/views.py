"""What the API and the pages answer: sessions, budgets, reports and jobs as JSON, and every CSV.

Money is always an exact decimal string (never a float); times are ISO 8601 in
UTC with a ``Z``. Every CSV the service serves goes through
:class:`FormulaSafeWriter`, so that no cell a user wrote runs as a spreadsheet
formula.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from decimal import Decimal
from urllib.parse import quote

from jupyterhub_gpu.billing import BudgetStatus, minutes_in_window, minutes_so_far
from jupyterhub_gpu.clock import aware_utc, isoformat
from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import DEFAULT_LOCALE, Currency, MoneyError, from_micros, to_micros
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.service.domain.savings import CullingReport, Tally
from jupyterhub_gpu.service.feeds.advice import advice_json
from jupyterhub_gpu.session import CULL_REASONS

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
    # the hub the session ran on (c.GPUService.hub_name): last, so that readers of the older columns keep them
    "hub",
)

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
_SIX_PLACES = Decimal("0.000001")


def money_str(micros: int) -> str:
    """An amount of micro-units as an exact decimal string (``"0.05"``, ``"10"``, never ``"1E+1"``)."""
    return f"{from_micros(micros):f}"


def decimal_str(value: Decimal, unit: str = "money") -> str:
    """A budget quantity as a plain decimal string; GPU-hours (minutes / 60) shown to six places."""
    if unit == "gpu_hours" and value.as_tuple().exponent < -6:
        value = value.quantize(_SIX_PLACES)
    value = value.normalize() if value else Decimal(0)
    return f"{value:f}"


def currency_of(code: str, lab: Currency) -> Currency:
    """The currency an amount was charged in: the lab's (with its symbol), or the code's own (charged before a change).

    A session keeps the currency it was charged in; it is shown in that one, never
    relabelled with the lab's current currency.
    """
    if code == lab.code:
        return lab
    try:
        return Currency.from_config(code)
    except MoneyError:  # a code written before codes were checked: shown as it was stored
        return Currency(code, f"{code} ")


def session_json(
    record,
    now: datetime,
    currency: Currency,
    advice: dict | None = None,
    window: tuple = (None, None),
    locale: str = DEFAULT_LOCALE,
) -> dict:
    """A session as the API shows it: cost so far for running ones, the final charge for stopped ones.

    ``cost_display`` is written for ``locale`` (the API's is English; the pages pass
    their reader's language) in the session's own currency.

    ``advice`` is its right-sizing advice
    (:func:`~jupyterhub_gpu.service.feeds.advice.advice_json`), None when it has none.
    ``minutes_in_window`` and ``cost_in_window`` are the part of it inside ``window``
    (``since``, ``until``): a minute counts in the window in which it starts, as
    budgets count it, so the reports of consecutive windows add up to the charge.
    """
    row = Ledger.usage_rows([record], now)[0]
    if record.stopped is None:
        minutes = minutes_so_far(aware_utc(record.started), now)
    else:
        minutes = record.minutes
    return {
        "id": record.id,
        "hub": record.hub,  # the hub it ran on, one of several on a shared ledger
        "user": record.user,
        "server_name": record.server_name,
        "profile": record.profile,
        "gpus": record.gpu_list,
        "gpu_count": record.gpu_count,
        "pool": record.pool,  # the one group whose budget pays (None: the user was in no group)
        "simulated": record.simulated,
        "rate_per_minute": money_str(record.rate_micros),
        "currency": record.currency,
        "started": isoformat(aware_utc(record.started)),
        "stopped": isoformat(aware_utc(record.stopped)) if record.stopped else None,
        "stop_reason": record.stop_reason,
        "minutes_billed": minutes,
        "cost": money_str(row.cost_micros),
        "cost_display": currency_of(record.currency, currency).format(from_micros(row.cost_micros), locale=locale),
        "running": record.stopped is None,
        "advice": advice,
        "minutes_in_window": (inside := minutes_in_window(aware_utc(record.started), minutes or 0, *window)),
        "cost_in_window": money_str(inside * record.rate_micros),
    }


def sessions_json(
    ledger: Ledger,
    records,
    now: datetime,
    currency: Currency,
    window: tuple = (None, None),
    locale: str = DEFAULT_LOCALE,
) -> list[dict]:
    """Sessions as the API shows them, each with its right-sizing advice (one query for all of them)."""
    advice = advice_of(ledger, [r.id for r in records])
    worded = [advice_json(advice.get(r.id), currency, locale) for r in records]  # the pages' in the reader's language
    return [session_json(r, now, currency, a, window, locale) for r, a in zip(records, worded, strict=True)]


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


def budget_json(budget, status: BudgetStatus) -> dict:
    return {**status_json(status), "updated": isoformat(aware_utc(budget.updated))}


def notice_json(notice) -> dict:
    return {
        "id": notice.id,
        "kind": notice.kind,
        "level": notice.level,
        "message": notice.message,
        "created": isoformat(aware_utc(notice.created)),
        "session_id": notice.session_id,
        "dismissed": notice.dismissed,
    }


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


def job_json(job: JobRecord, session: SessionRecord | None, now: datetime, currency, prefix: str = "/") -> dict:
    """A job as the API shows it: state, times, duration, the billed minutes and cost, and its output."""
    billing = session_json(session, now, currency) if session is not None else None
    started = aware_utc(job.started)
    end = aware_utc(job.finished) or (now if job.state == "running" else None)
    user = quote(job.user, safe="")
    return {
        "id": job.id,
        "user": job.user,
        "server_name": job.server_name,
        "notebook": job.notebook,
        "profile": job.profile,
        "parameters": job.parameter_dict,
        "time_limit_minutes": job.time_limit_seconds / 60
        if job.time_limit_seconds % 60
        else job.time_limit_seconds // 60,
        "state": job.state,
        "error": job.error,
        "created": isoformat(aware_utc(job.created)),
        "started": isoformat(started) if started else None,
        "finished": isoformat(aware_utc(job.finished)) if job.finished else None,
        "duration_seconds": round((end - started).total_seconds()) if started and end else None,
        "output_notebook": job.output_notebook,
        "log_file": job.log_file,
        "output_url": f"{prefix}user/{user}/lab/tree/{quote(job.output_notebook)}",
        "session_id": session.id if session is not None else job.session_id,
        "minutes_billed": billing["minutes_billed"] if billing else 0,
        "cost": billing["cost"] if billing else "0",
        "cost_display": billing["cost_display"] if billing else currency.format(0),
        "currency": billing["currency"] if billing else currency.code,
        # the admin's symbol, "" when each language writes its own (the Lab formats ``cost`` with it)
        "currency_symbol": (currency_of(billing["currency"], currency) if billing else currency).symbol or "",
        "stop_reason": billing["stop_reason"] if billing else None,
        "running": bool(billing and billing["running"]),
    }


# -- CSV ------------------------------------------------------------------------------------------

#: A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER_RE = re.compile(r"^-?[0-9]+(?:\.[0-9]+)?$")


def csv_cell(value) -> object:
    """A CSV cell a spreadsheet shows as text: text that could start a formula gets a leading ``'``.

    Plain numbers (``-3``, ``0.05``: a budget's negative remainder) stay numbers;
    anything else that starts with ``= + - @``, a tab or a carriage return is
    quoted, whoever wrote it (user, server, group and profile names, budget
    subjects, stop reasons, notebook paths).
    """
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value)
    if text[:1] in FORMULA_START and not _PLAIN_NUMBER_RE.fullmatch(text):
        return "'" + text
    return text


class FormulaSafeWriter:
    """``csv.writer`` (CRLF lines) that passes every cell through :func:`csv_cell`: every CSV the service serves."""

    def __init__(self, out):
        self._writer = csv.writer(out, lineterminator="\r\n")

    def writerow(self, row) -> None:
        self._writer.writerow([csv_cell(cell) for cell in row])


def table_csv(columns: list[str], rows: list[dict]) -> str:
    """A table as CSV: a header row, then one row per dict (text a spreadsheet would run is quoted away)."""
    out = io.StringIO()
    writer = FormulaSafeWriter(out)  # every text cell, whichever column: a budget's subject is a name too
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row.get(c) for c in columns])
    return out.getvalue()


def usage_csv(sessions: list[dict]) -> str:
    """Sessions as CSV with a header row; one row per session, no totals row.

    The ``*_in_window`` columns add up to the window's totals (a session crossing
    the window's edge counts only its minutes inside it there).
    """
    out = io.StringIO()
    writer = FormulaSafeWriter(out)  # every cell escaped, not only the ones named here
    writer.writerow(CSV_COLUMNS)
    for s in sessions:
        writer.writerow(
            [
                s["id"],
                s["user"],
                s["server_name"],
                s["profile"],
                " ".join(s["gpus"]),
                s["gpu_count"],
                s["started"],
                s["stopped"] or "",
                s["minutes_billed"],
                s["rate_per_minute"],
                s["cost"],
                s["currency"],
                s["stop_reason"],
                "true" if s["running"] else "false",
                s.get("minutes_in_window", s["minutes_billed"]),  # without its window's part: counts whole
                s.get("cost_in_window", s["cost"]),
                s.get("hub", ""),
            ]
        )
    return out.getvalue()


# -- the culling report ---------------------------------------------------------------------------


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
            "idle_util_percent": idle.IDLE.util_percent,
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
    writer = FormulaSafeWriter(out)  # every cell escaped, not only the ones named here
    writer.writerow(CULLING_CSV_COLUMNS)
    for v in report.savings:
        s = v.session
        writer.writerow(
            [
                s.id,
                s.user,
                s.server_name,
                s.profile,
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
