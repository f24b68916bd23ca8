"""The usage pages of the gpu service: students, instructors and admins, in English and Chinese.

Server-rendered Jinja2 pages under ``/services/gpu/`` behind JupyterHub OAuth
(the same :class:`~.auth.BaseHandler` as the REST API, so the same scopes decide
who sees what), with the same query helpers as the API: ``Ledger.sessions`` and
``session_json`` for sessions, ``current_statuses`` for budgets,
``parse_budget`` for budget forms, ``load_culling_inputs`` and
``culling_report`` for utilization and culling.

- ``/services/gpu/`` and ``users/NAME``: a user's balance, spend, sessions and
  daily chart. Anyone sees their own; admins (``custom:gpu-usage:read``) anyone's;
  an instructor only the sessions a student ran while in one of their groups.
- ``groups/NAME``: a group's total against its budget, top users, idle time
  culled, sessions (instructors of the group: ``custom:gpu-usage:read!group=NAME``).
- ``admin``: everything, for any period; forms for budgets, prices and profile
  access (``custom:gpu-budgets:write``).
- the schedule (docs/scheduling.md): the group page lists the group's reservations and shares with a
  booking form (``POST groups/NAME/reservations``), the admin page every reservation, the shares with
  their form (``POST admin/shares``), the hub's queue and the preemptions; a user's own page their waiting
  requests and preemptions. The forms run the REST API's own handler code (:class:`ApiForm`), so a page
  books, cancels and sets exactly what ``POST reservations``, ``DELETE reservations/ID`` and ``PUT shares``
  would, with the same refusals.

Every table has a CSV export (``?format=csv&table=NAME``); the sessions table's
CSV is the API's ``GET usage?format=csv``. Forms are protected against
cross-site requests by JupyterHub's XSRF token (the ``_xsrf`` field): a POST
without it is not authenticated. Charts use Chart.js, served from ``static/``.
"""

from __future__ import annotations

import inspect
import re
from collections import defaultdict
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import jinja2
from babel.dates import format_skeleton
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.escape import url_escape
from tornado.log import app_log

from jupyterhub_gpu.billing import applies_to, local_midnight, minutes_in_window
from jupyterhub_gpu.i18n import COOKIE, LANGUAGE_NAMES, LANGUAGES, language_of, query_language, translator
from jupyterhub_gpu.ledger.queries.channels import channel_owners
from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.ledger.queries.overrides import Override, delete_override, load_overrides, save_override
from jupyterhub_gpu.ledger.queries.schedule import (
    StoredReservation,
    StoredShare,
    get_reservation,
    preemptions,
    queue,
    reservations,
    shares,
)
from jupyterhub_gpu.money import babel_locale, to_micros
from jupyterhub_gpu.service.domain.advice import summary as advice_summary
from jupyterhub_gpu.service.domain.notices import DEFAULT_EVENTS, EVENT_NAMES, EVENTS
from jupyterhub_gpu.service.domain.overrides import AccessError, apply_to_pricing, parse_override
from jupyterhub_gpu.service.domain.savings import DEFAULT_HORIZON, Tally, culling_report
from jupyterhub_gpu.service.domain.schedule import gpus_words, wait_words
from jupyterhub_gpu.service.domain.statuses import current_statuses
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.api.channels import ChannelAccess
from jupyterhub_gpu.service.web.api.queue import PREEMPTIONS_DAYS, preemption_json, queued_json
from jupyterhub_gpu.service.web.api.schedule import (
    ReservationHandler,
    ReservationsHandler,
    ScheduleHandler,
    SharesHandler,
    limits_words,
    reservation_json,
    share_json,
)
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, BaseHandler, http_error_text
from jupyterhub_gpu.service.web.params import BadRequest, parse_budget, query_values, query_window, validate_subject
from jupyterhub_gpu.service.web.views import money_str, sessions_json, status_json, table_csv, usage_csv, usage_totals
from jupyterhub_gpu.session import CULL_REASONS, IDLE_UTIL_PERCENT

TEMPLATES = Path(__file__).with_name("templates")
STATIC = Path(__file__).with_name("static")
#: For ``c.JupyterHub.template_paths``: the hub's home page with a link to the usage pages.
HUB_TEMPLATES = str(TEMPLATES / "hub")
PAGE_PARAMS = ("since", "until", "format", "table", "lang", "saved")
BUDGET_FORM_FIELDS = ("scope", "subject", "limit", "unit", "period", "term_start", "term_end")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)


# -- pure helpers: tables and series -----------------------------------------------------------


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


# -- handlers ------------------------------------------------------------------------------------


class PageHandler(BaseHandler):
    """A page: HTML, errors as HTML pages in the reader's language."""

    _lang: str | None = None

    @property
    def lang(self) -> str:
        if self._lang is None:
            chosen = query_language(self)
            if chosen is not None:
                # at the hub's base URL, so the hub's own pages and the spawn form follow the same choice
                proto = self.request.headers.get("X-Forwarded-Proto", self.request.protocol).split(",")[0].strip()
                secure = proto == "https" or self.request.protocol == "https"
                self.set_cookie(COOKIE, chosen, path=self.ctx.base_url, expires_days=365, samesite="Lax", secure=secure)
            else:
                chosen = language_of(self)
            self._lang = chosen
        return self._lang

    @property
    def _(self):
        return translator(self.lang)

    def page_url(self, path: str = "", **params) -> str:
        url = url_path_join(self.ctx.prefix, path) if path else self.ctx.prefix
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return f"{url}?{query}" if query else url

    def nav(self) -> dict:
        user = self.current_user or {}
        return {
            "name": user.get("name", ""),
            "is_admin": self.has_scope(SCOPE_USAGE_READ),
            "can_edit": self.has_scope(SCOPE_BUDGETS_WRITE),
            "groups": self.instructor_groups,
        }

    def render_page(self, template: str, http_status: int = 200, **context) -> None:
        # a form's answer (POST admin/budgets) links back to its page, not to the form's URL
        path = context.pop("path", self.request.path)
        args = {k: v[0].decode("utf-8", "replace") for k, v in self.request.query_arguments.items() if k != "lang"}
        switch = {code: f"{path}?{urlencode({**args, 'lang': code})}" for code in LANGUAGES}
        window = {k: v for k, v in args.items() if k in ("since", "until")}

        def csv_url(table: str) -> str:
            return f"{path}?{urlencode({**window, 'format': 'csv', 'table': table})}"

        self.set_status(http_status)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(
            _env.get_template(template).render(
                _=self._,
                lang=self.lang,
                languages=LANGUAGE_NAMES,
                switch=switch,
                prefix=self.ctx.prefix,
                hub_prefix=self.hub_auth.hub_prefix,
                static=lambda name: url_path_join(self.ctx.prefix, "static", name),
                nav=self.nav() if self.current_user else None,
                currency=self.ctx.currency,
                money=lambda amount: self.ctx.currency.format(Decimal(amount), locale=self.lang),
                reason=lambda r: self._(r) if r else "",
                local=self.local_time,
                tz=str(self.ctx.tz),
                page_url=self.page_url,
                csv_url=csv_url,
                path=path,
                xsrf=self.xsrf_token.decode() if self.current_user else "",
                **context,
            )
        )

    def local_time(self, iso: str | None) -> str:
        """An API time (ISO, UTC) in the lab's time zone and the reader's date format (:func:`moment_text`)."""
        if not iso:
            return ""
        return moment_text(datetime.fromisoformat(iso.replace("Z", "+00:00")), self.ctx.tz, self.lang)

    def write_error(self, status_code, **kwargs):
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code == 403 and self.current_user is None:
            if self.request.method == "POST" and self.get_cookie(self.hub_auth.cookie_name):
                message = self._("The form has expired or did not come from this page; reload the page and try again.")
            else:
                message = self._unauthenticated_message()
        try:
            title = self._("Bad request") if status_code == 400 else self._("Error")
            self.render_page("error.html", status_code, title=title, status=status_code, message=message)
        except Exception:  # never fail to report a failure
            app_log.exception("could not render the error page")
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(f"{status_code}: {message}")

    # -- query ---------------------------------------------------------------
    def page_query(self) -> tuple[datetime | None, datetime | None, dict]:
        """``since``/``until`` as ``GET usage`` reads them; without ``since``, the current month."""
        try:
            values = query_values(self.request.query_arguments, PAGE_PARAMS)
            since, until = query_window(values, self.ctx.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        if "since" not in values:
            since = month_start(self.now(), self.ctx.tz)
            if until is not None and until <= since:
                since = None
        return since, until, values

    def window_text(self, since, until) -> dict:
        tz = self.ctx.tz
        return {
            "since": since.astimezone(tz).date().isoformat() if since else "",
            "until": (until.astimezone(tz) - timedelta(microseconds=1)).date().isoformat() if until else "",
        }

    def sessions(self, since, until, user=None, group=None, pool=None) -> list[dict]:
        """Sessions as ``GET usage`` shows them; the group that paid for each is kept for :meth:`session_groups`."""
        # every session with a minute in the window, each counted for its minutes inside it (as budgets are)
        records = self.ledger.sessions(user=user, since=since, until=until, group=group, pool=pool, overlapping=True)
        self._groups_by_id = {r.id: r.group_list for r in records}
        self._pool_by_id = {r.id: r.pool for r in records}
        now = self.now()
        return sessions_json(self.ledger, records, now, self.ctx.currency, (since, until), self.lang)  # with advice

    def session_groups(self, session: dict) -> list[str]:
        return self._groups_by_id.get(session["id"], [])

    def session_pool(self, session: dict) -> str | None:
        """The one group that paid for a session (so that group totals add up to the total spend)."""
        return self._pool_by_id.get(session["id"])

    def export(self, values: dict, tables: dict) -> bool:
        """Answer ``?format=csv&table=NAME`` from ``tables`` (name -> (columns, rows) or CSV text)."""
        fmt = values.get("format", "html")
        if fmt == "html":
            return False
        if fmt != "csv":
            raise web.HTTPError(400, f"format must be html or csv, got {fmt!r}")
        name = values.get("table", "")
        if name not in tables:
            raise web.HTTPError(400, f"table must be one of {', '.join(tables)}, got {name!r}")
        table = tables[name]
        self.send_csv(name, table if isinstance(table, str) else table_csv(*table))
        return True

    def budget_rows(self, rules) -> list[dict]:
        rows = []
        for status in current_statuses(self.ledger, rules, self.now(), self.ctx.tz):
            row = status_json(status)
            row["limit_display"] = self.quantity(row["limit"], row["unit"])
            row["spent_display"] = self.quantity(row["spent"], row["unit"])
            row["remaining_display"] = self.quantity(row["remaining"], row["unit"])
            # a term budget outside its term binds nothing: say that it has ended (or not begun), not a reset
            tz = self.ctx.tz
            if status.state == "ended":
                last_day = day_text((status.period_end - timedelta(microseconds=1)).astimezone(tz).date(), self.lang)
                row["resets"] = self._("ended {day}", day=last_day)
            elif status.state == "upcoming":
                row["resets"] = self._(
                    "starts {day}", day=day_text(status.period_start.astimezone(tz).date(), self.lang)
                )
            else:
                row["resets"] = day_text(status.period_end.astimezone(tz).date(), self.lang)
            rows.append(row)
        return rows

    def quantity(self, value: str, unit: str) -> str:
        if unit == "money":
            return self.ctx.currency.format(Decimal(value), locale=self.lang)
        return f"{Decimal(value).quantize(Decimal('0.01'))} {self._('GPU-hours')}"

    def culling(self, since, until, group=None) -> dict:
        """Culling's savings and the billed idle share in the window (the numbers of ``GET culling``)."""
        now = self.now()
        end = now if until is None else min(until, now)
        facts, counts = load_culling_inputs(self.ledger, since, end, group)
        report = culling_report(facts, counts, since, until, now, DEFAULT_HORIZON, group)
        currency = self.ctx.currency.code
        rows = [{"name": reason, **saved_row(report.by_reason[reason], currency)} for reason in CULL_REASONS]
        billed = report.billed_gpu_minutes
        busy = billed - report.billed_idle_gpu_minutes - report.billed_unsampled_gpu_minutes
        return {
            "rows": rows,
            "total": saved_row(report.total, currency),
            "budget": saved_row(report.budget, currency),
            "utilization": {
                "billed": gpu_hours(billed),
                "busy": gpu_hours(busy),
                "idle": gpu_hours(report.billed_idle_gpu_minutes),
                "unsampled": gpu_hours(report.billed_unsampled_gpu_minutes),
                "busy_share": f"{busy * 100 / billed:.1f}%" if billed else "–",
            },
            "horizon_hours": int(DEFAULT_HORIZON / timedelta(hours=1)),
            "idle_pct": IDLE_UTIL_PERCENT,
        }

    def summary(self, sessions: list[dict], series: list[dict], since, until) -> dict:
        """What every usage page shows of its sessions: spend and GPU-hours in the window, the chart, the list."""
        totals = usage_totals(sessions, self.ctx.currency.code)
        return {
            "sessions": list(reversed(sessions)),
            "spend": totals["cost"].get(self.ctx.currency.code, "0"),
            "gpu_hours": gpu_hours(totals["gpu_minutes"]),
            "chart": self.chart(series),
            "window": self.window_text(since, until),
            "simulated": any(s["simulated"] for s in sessions),
        }

    def chart(self, series: list[dict]) -> dict:
        return {
            "labels": [d["day"] for d in series],
            "spend": [d["spend"] for d in series],
            "gpu_hours": [d["gpu_hours"] for d in series],
            "spend_label": f"{self._('Spend')} ({self.ctx.currency.symbol_in(self.lang).strip()})",
            "hours_label": self._("GPU-hours"),
        }


SESSION_COLUMNS = ["id", "user", "profile", "gpu_count", "started", "stopped", "minutes_billed", "cost", "stop_reason"]
TOTAL_COLUMNS = ["name", "sessions", "minutes", "gpu_hours", "spend"]
DAILY_COLUMNS = ["day", "spend", "gpu_hours"]
BUDGET_COLUMNS = [
    "scope",
    "subject",
    "period",
    "unit",
    "limit",
    "spent",
    "remaining",
    "period_start",
    "period_end",
    "state",
]


# -- the schedule (docs/scheduling.md): reservations, shares, the hub's queue and the preemptions -----------

#: The CSV columns of the schedule's tables: the REST API's fields (``GET reservations``, ``shares``, ``queue``,
#: ``preemptions``).
RESERVATION_COLUMNS = [
    "id",
    "group",
    "gpu_model",
    "count",
    "start",
    "end",
    "weekly_until",
    "note",
    "created_by",
    "created_at",
]
SHARE_COLUMNS = ["group", "gpu_model", "share", "updated", "updated_by"]
QUEUE_COLUMNS = [
    "user",
    "server_name",
    "profile",
    "gpu_model",
    "count",
    "tier",
    "group",
    "position",
    "length",
    "wait_seconds",
    "status",
    "reason",
]
PREEMPTION_COLUMNS = ["user", "server_name", "decided_at", "stop_at", "done_at", "reason"]
BOOKING_FIELDS = ("gpu_model", "count", "start", "end", "weekly_until", "note")
SHARE_FORM_FIELDS = ("group", "gpu_model", "share")
#: The API's refusals that a form shows on its own page, above the form as it was sent (a bad field, a
#: conflicting booking, a share to clear that is not there, a hub that cannot say whether a group exists);
#: any other (403: not theirs to change) is an error page.
FORM_REFUSALS = (400, 404, 409, 502)


def whole_or_text(text: str) -> int | str:
    """A form's number as a JSON body carries it: an ``int`` when it is one, else the text, which the API's
    parser then refuses with its own message (``count must be a whole number of GPUs from 1, got "two"``)."""
    return int(text) if re.fullmatch(r"-?\d{1,18}", text) else text


def zoned(text: str, tz) -> str:
    """A form's ``datetime-local`` value (the lab's wall-clock time, without a zone) as an ISO 8601 time with
    the lab's offset; a time with a zone, or text that is no time, as it is (the API's parser names it)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is not None:
        return text
    try:
        return moment.replace(tzinfo=tz).isoformat()
    except (OverflowError, ValueError):  # a year 1 or 9999 moved out of range by the offset
        return text


def booking_body(group: str, form: dict[str, str], tz) -> dict:
    """The JSON body of ``POST reservations`` from the booking form (an empty field is left out: "is required")."""
    body: dict = {"group": group}
    for name in BOOKING_FIELDS:
        value = form.get(name, "")
        if value == "":
            continue
        if name == "count":
            body[name] = whole_or_text(value)
        elif name in ("start", "end"):
            body[name] = zoned(value, tz)
        else:
            body[name] = value
    return body


def share_body(form: dict[str, str], clear: bool) -> dict:
    """The JSON body of ``PUT shares`` from the share form: ``share`` null clears it."""
    body: dict = {"group": form.get("group", ""), "gpu_model": form.get("gpu_model", "")}
    if clear:
        body["share"] = None
    elif form.get("share", "") != "":
        body["share"] = whole_or_text(form["share"])
    return body


class ScheduleView(PageHandler, ScheduleHandler):
    """A page that shows the schedule: rows of the REST API's serializers, worded and dated for the reader, and
    the API's own rule of who may book and cancel (:meth:`ScheduleHandler.require_booking`)."""

    def may_book(self, group: str) -> bool:
        """Whether the reader may book and cancel for ``group`` (an admin, or the group's instructor)."""
        try:
            self.require_booking(group)
        except web.HTTPError:
            return False
        return True

    def window_words(self, start: datetime, end: datetime) -> str:
        """``Dec 8, 2026 14:00–16:00`` in the lab's zone (both days when the window crosses midnight)."""
        tz = self.ctx.tz
        start, end = start.astimezone(tz), end.astimezone(tz)
        until = f"{end:%H:%M}" if end.date() == start.date() else moment_text(end, tz, self.lang)
        return f"{moment_text(start, tz, self.lang)}–{until}"

    def reservation_rows(self, found: list[StoredReservation]) -> list[dict]:
        return [
            {
                **reservation_json(r),
                "window": self.window_words(r.start, r.end),
                "weekly": day_text(r.weekly_until, self.lang) if r.weekly_until else "",
                "may_cancel": self.may_book(r.group),
            }
            for r in found
        ]

    def share_rows(self, found: list[StoredShare], group: str | None = None) -> list[dict]:
        """The shares set; for one ``group``, also the pool's models it has none of (the default applies)."""
        rows = [{**share_json(s), "set": True} for s in found]
        if group is not None:
            have = {s.gpu_model for s in found}
            rows += [
                {"group": group, "gpu_model": m, "share": None, "updated": None, "updated_by": "", "set": False}
                for m in self.ctx.gpu_pool
                if m not in have
            ]
            rows.sort(key=lambda r: r["gpu_model"])
        return rows

    def queue_rows(self, user: str | None = None) -> list[dict]:
        """The hub's published queue (``GET queue``'s entries, worded in the reader's language); of ``user``."""
        rows = []
        for e in queue(self.ledger, user):
            row = queued_json(e, self.lang)
            row["gpus"] = gpus_words(e.count, e.gpu_model, self.lang)
            row["place"] = self._("{position} of {length}", position=e.position, length=e.length)
            row["wait"] = wait_words(e.wait_seconds, self.lang)
            rows.append(row)
        return rows

    def preemption_rows(self, user: str | None = None) -> list[dict]:
        """The preemption records of the last :data:`PREEMPTIONS_DAYS` days (``GET preemptions``); of ``user``;
        whose request took the GPU only on the admin page (``user`` None)."""
        since = self.now() - timedelta(days=PREEMPTIONS_DAYS)
        return [preemption_json(o, self.lang, user is None) for o in preemptions(self.ledger, since, user)]

    def pool_words(self) -> str:
        """The lab's GPUs as the bookings are checked against them: ``4 T4s, 2 A100s``."""
        comma = "、" if self.lang == "zh-CN" else ", "
        return comma.join(gpus_words(n, m, self.lang) for m, n in sorted(self.ctx.gpu_pool.items()) if n > 0)


class ApiForm(ScheduleHandler):
    """A page's form that runs the REST handler's own method on the form's fields (:meth:`call_api`).

    ``POST reservations``, ``DELETE reservations/ID`` and ``PUT shares`` (:mod:`.api.schedule`) hold who may
    book what and in which order a booking is checked (alone, then against the others with the insert); a
    form does not repeat them: it gives the handler's method the form as its JSON body, keeps its answer
    instead of writing it, and lets its refusals (``HTTPError``, the API's status and words) through.
    """

    _api_call: dict | None = None

    async def call_api(self, method, body: dict | None, *args) -> tuple[int, dict | None]:
        """``(status, JSON or None)`` of ``method`` (``ReservationsHandler.post``, ...) run on this request with
        ``body`` as its JSON; a refusal raises its ``web.HTTPError``, having changed nothing."""
        self._api_call = {"body": body, "answer": None}
        try:
            result = method(self, *args)
            if inspect.isawaitable(result):
                await result
            return self._api_call["answer"]
        finally:
            self._api_call = None
            self.set_status(200)

    def json_body(self, allow_empty: bool = False):
        if self._api_call is None:
            return super().json_body(allow_empty)
        return self._api_call["body"]

    def write_json(self, data, status: int = 200) -> None:
        if self._api_call is None:
            return super().write_json(data, status)
        self._api_call["answer"] = (status, data)

    def finish(self, chunk=None):
        if self._api_call is None:
            return super().finish(chunk)
        self._api_call["answer"] = (self.get_status(), None)  # the API's 204: nothing to write
        return None


# -- alert channels (docs/alerts.md): the sections of the user and admin pages, and their forms ------------


def channel_block(page, owner_kind: str, owner: str, heading: str) -> dict:
    """One owner's channels for ``channels.html`` (``page`` is a page that is also a :class:`ChannelAccess`)."""
    listing = page.listing(owner_kind, owner)
    _ = page._
    rows = [
        {**c, "event_names": ", ".join(_(EVENT_NAMES[e]) for e in c["events"]) or _("nothing")}
        for c in listing["channels"]
    ]
    return {"owner": owner_kind, "name": owner, "heading": heading, "channels": rows, "may_edit": listing["may_edit"]}


def channel_section(page, title: str, blocks: list[dict], back: str, owner_kinds: str) -> dict:
    """The ``ch`` of ``channels.html``: its blocks, and the add form for ``owner_kinds`` (user | others)."""
    _ = page._
    saved = {
        "channel-added": _("Channel added."),
        "channel-removed": _("Channel removed."),
        "channel-tested": _("Test message sent."),
    }.get(page.get_query_argument("saved", ""), "")
    defaults = set(DEFAULT_EVENTS["user" if owner_kinds == "user" else "group"])
    settings = page.ctx.notifier.settings if page.ctx.notifier is not None else None
    return {
        "title": title,
        "blocks": blocks,
        "back": back,
        "action": page.page_url("channels"),
        "saved": saved,
        "owners": owner_kinds == "others",
        "may_add": owner_kinds == "user" or page.has_scope(SCOPE_BUDGETS_WRITE),
        "events": [{"value": e, "name": _(EVENT_NAMES[e]), "default": e in defaults} for e in EVENTS],
        "schemes": ", ".join(settings.user_schemes) if owner_kinds == "user" and settings else "",
    }


class ChannelFormHandler(PageHandler, ChannelAccess):
    """``POST channels``: add, remove or test a channel from the user or admin page (XSRF-checked by JupyterHub).

    The same rules as the REST API (:class:`~.api.channels.ChannelAccess`); a refusal is an error page
    with the reason (a URL Apprise cannot read: Apprise's, secrets blanked).
    """

    @web.authenticated
    async def post(self):
        action = self.get_body_argument("action", "")
        back = "admin" if self.get_body_argument("back", "") == "admin" else ""
        channel_id = self.get_body_argument("id", "").strip()
        if action == "add":
            owner = self.get_body_argument("owner", "user")
            if owner == "user":
                kind, name = "user", self.own_name("it has no channels of its own")
            elif owner == "admins":
                kind, name = "admin", ""
            elif owner == "group":
                kind, name = "group", self._name("group", self.get_body_argument("group", "").strip())
            else:
                raise web.HTTPError(400, f"owner must be user, admins or group, got {owner!r}")
            events = self.get_body_arguments("events")
            if not events:
                raise web.HTTPError(400, self._("Choose at least one event."))
            self.add(kind, name, self.get_body_argument("url", ""), events)
            saved = "channel-added"
        elif action == "remove":
            self.remove(channel_id)
            saved = "channel-removed"
        elif action == "test":
            await self.send_test(channel_id)
            saved = "channel-tested"
        else:
            raise web.HTTPError(400, f"action must be add, remove or test, got {action!r}")
        self.redirect(self.page_url(back, saved=saved) + "#channels", status=303)


class UserPage(ScheduleView, ChannelAccess):
    """A user's balance, spend in the window, sessions and daily chart; on one's own page, one's waiting requests
    and preemptions (the schedule: ``GET queue`` and ``GET preemptions`` as the user would read them)."""

    @web.authenticated
    async def get(self, name: str | None = None):
        me = self.current_user["name"] if self.is_user else None
        name = me if name is None else name
        if name is None:
            raise web.HTTPError(403, self.own_name_message())
        try:
            validate_subject("user", name)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        since, until, values = self.page_query()
        sessions = self.sessions(since, until, user=name)
        if name == me:
            groups = self.groups
        else:
            groups = await self.groups_of(name, sessions)
            if not self.has_scope(SCOPE_USAGE_READ):
                mine = set(self.instructor_groups)
                # an instructor sees a student of their groups, and only the sessions run in those groups
                if not mine & set(groups):
                    raise web.HTTPError(403, self._("You may not see this page."))
                sessions = [s for s in sessions if mine & set(self.session_groups(s))]
        rules = [r for r in self.ledger.budget_rules() if applies_to(r, name, groups)]
        budgets = sorted(self.budget_rows(rules), key=lambda b: -b["percent_used"])
        if name != me and not self.has_scope(SCOPE_USAGE_READ):
            budgets = [b for b in budgets if b["scope"] == "group" and b["subject"] in self.instructor_groups]
        series = daily_series(sessions, self.ctx.tz, since, until, self.now())
        schedule = None
        tables = {
            "sessions": usage_csv(sessions),
            "daily": (DAILY_COLUMNS, series),
            "budgets": (BUDGET_COLUMNS, budgets),
        }
        if name == me:  # one's own requests and preemptions, as GET queue and GET preemptions answer them
            schedule = {"queue": self.queue_rows(me), "preemptions": self.preemption_rows(me), "days": PREEMPTIONS_DAYS}
            tables["queue"] = (QUEUE_COLUMNS, schedule["queue"])
            tables["preemptions"] = (PREEMPTION_COLUMNS, schedule["preemptions"])
        if self.export(values, tables):
            return
        channels = None
        if name == me:
            block = channel_block(self, "user", name, self._("Notifications"))
            channels = channel_section(self, self._("Notifications"), [block], "", "user")
        self.render_page(
            "user.html",
            title=self._("My usage") if name == me else name,
            subject=name,
            own=name == me,
            budgets=budgets,
            channels=channels,
            schedule=schedule,
            **self.summary(sessions, series, since, until),
        )

    def own_name_message(self) -> str:
        return f"Service {self.current_user['name']} is not a user; open users/NAME instead."

    async def groups_of(self, name: str, sessions: list[dict]) -> tuple[str, ...]:
        """A user's groups now (from the hub), with those of their sessions in the window."""
        groups = set()
        for s in sessions:
            groups.update(self.session_groups(s))
        try:
            model = await self.ctx.hub.user(name)
        except HubAPIError as e:
            app_log.warning("could not read the groups of %s from the hub: %s", name, e)
            model = None
        if model:
            groups.update(model.get("groups") or ())
        return tuple(sorted(groups))


class GroupView(ScheduleView):
    """A group: its total against its budget, top users, idle time culled, sessions, daily chart, and its
    reservations (with the booking form for its instructors and admins) and shares."""

    def check_group(self, group: str) -> None:
        """400 for a name that is none; 403 unless the reader reads the group (admins, its instructors)."""
        try:
            validate_subject("group", group)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        self.require_group(group)

    def group_url(self, group: str, **params) -> str:
        return self.page_url("groups/" + url_escape(group, plus=False), **params)

    def show(self, group: str, status: int = 200, booking_error: str = "", booking: dict | None = None) -> None:
        self.check_group(group)
        since, until, values = self.page_query()
        sessions = self.sessions(since, until, pool=group)  # what the group paid for, as its budget counts
        budgets = self.budget_rows([r for r in self.ledger.budget_rules() if r.key == f"group:{group}"])
        users = totals_by(sessions, lambda s: [s["user"]])
        series = daily_series(sessions, self.ctx.tz, since, until, self.now())
        culled = self.culling(since, until, group)
        booked = reservations(self.ledger, self.ctx.tz, [group])
        group_shares = shares(self.ledger, [group])
        if self.export(
            values,
            {
                "sessions": usage_csv(sessions),
                "users": (TOTAL_COLUMNS, users),
                "daily": (DAILY_COLUMNS, series),
                "budgets": (BUDGET_COLUMNS, budgets),
                "culling": (CULLING_COLUMNS, culled["rows"]),
                "reservations": (RESERVATION_COLUMNS, [reservation_json(r) for r in booked]),
                "shares": (SHARE_COLUMNS, [share_json(s) for s in group_shares]),
            },
        ):
            return
        self.render_page(
            "group.html",
            status,
            path=self.group_url(group),  # a form's answer links back to the group page, not to the form's URL
            title=self._("Group {group}", group=group),
            group=group,
            budgets=budgets,
            users=users,
            culled=culled,
            saved=self.get_query_argument("saved", ""),
            schedule={
                "reservations": self.reservation_rows(booked),
                "shares": self.share_rows(group_shares, group),
                "may_book": self.may_book(group),
                "pool": self.pool_words(),
                "limits": ("" if self.lang == "zh-CN" else " ").join(limits_words(self.ctx, self.lang)),
                "models": sorted(m for m, n in self.ctx.gpu_pool.items() if n > 0),
                "error": booking_error,
                "form": {**dict.fromkeys(BOOKING_FIELDS, ""), **(booking or {})},
            },
            **self.summary(sessions, series, since, until),
        )


class GroupPage(GroupView):
    """``GET groups/NAME``: the group page (``custom:gpu-usage:read``, or ``!group=NAME``: its instructors)."""

    @web.authenticated
    def get(self, group: str):
        self.show(group)


class ReservationFormHandler(GroupView, ApiForm):
    """``POST groups/NAME/reservations``: book for the group (``action=book``), or cancel one of its bookings
    (``action=cancel``, ``id``; ``back=admin`` from the admin page). XSRF-checked by JupyterHub.

    The booking is ``POST reservations``' own code on the form's fields (times in the lab's zone): who may book
    for the group, each field, the pool, the group, the other bookings. A refusal (400, 409) is shown above the
    form, with the form as it was sent, and stores nothing; a reader who may not book gets the 403 page.
    """

    @web.authenticated
    async def post(self, group: str):
        self.check_group(group)
        action = self.get_body_argument("action", "book")
        if action == "book":
            form = {k: self.get_body_argument(k, "").strip() for k in BOOKING_FIELDS}
            try:
                await self.call_api(ReservationsHandler.post, booking_body(group, form, self.ctx.tz))
            except web.HTTPError as e:
                if e.status_code not in FORM_REFUSALS:
                    raise
                self.show(group, e.status_code, booking_error=http_error_text(e), booking=form)
                return
            self.back_to(group, "reservation", admin=False)
        elif action == "cancel":
            rid = self.get_body_argument("id", "").strip()
            found = (
                get_reservation(self.ledger, int(rid), self.ctx.tz)
                if rid.isascii() and rid.isdigit() and len(rid) < 12
                else None
            )
            if found is not None and found.group != group:
                raise web.HTTPError(404, f"There is no reservation {rid!r} of the group {group}")
            await self.call_api(ReservationHandler.delete, None, rid)  # who may cancel it: the API's rule
            self.back_to(group, "reservation-cancelled", admin=self.get_body_argument("back", "") == "admin")
        else:
            raise web.HTTPError(400, f"action must be book or cancel, got {action!r}")

    def back_to(self, group: str, saved: str, admin: bool) -> None:
        window = {k: self.get_query_argument(k, "") for k in ("since", "until")}
        if admin:
            self.redirect(self.page_url("admin", **window, saved=saved) + "#schedule", status=303)
        else:
            self.redirect(self.group_url(group, **window, saved=saved) + "#reservations", status=303)


CULLING_COLUMNS = ["name", "sessions", "gpu_hours_saved", "money_saved"]
UTILIZATION_COLUMNS = ["billed", "busy", "idle", "unsampled", "busy_share"]
PROFILE_COLUMNS = ["slug", "display_name", "gpu_count", "rate_per_minute", "allowed_groups", "edited"]


class AdminView(ScheduleView, ChannelAccess):
    """Everything: spend by group, user and profile, charts, utilization, culling, and the forms."""

    def show(
        self,
        status: int = 200,
        error: str = "",
        form: dict | None = None,
        profile_error: dict | None = None,
        share_error: str = "",
        share_form: dict | None = None,
    ):
        since, until, values = self.page_query()
        sessions = self.sessions(since, until)
        by_group = totals_by(sessions, lambda s: [self.session_pool(s) or self._("(no group)")])
        by_user = totals_by(sessions, lambda s: [s["user"]])
        by_profile = totals_by(sessions, lambda s: [s["profile"]])
        series = daily_series(sessions, self.ctx.tz, since, until, self.now())
        culled = self.culling(since, until)
        budgets = self.budget_rows(self.ledger.budget_rules())
        profiles = self.profiles()
        booked = reservations(self.ledger, self.ctx.tz)
        every_share = shares(self.ledger)
        schedule = {
            "reservations": self.reservation_rows(booked),
            "shares": self.share_rows(every_share),
            "queue": self.queue_rows(),
            "preemptions": self.preemption_rows(),
            "days": PREEMPTIONS_DAYS,
            "pool": self.pool_words(),
            "models": sorted(m for m, n in self.ctx.gpu_pool.items() if n > 0),
            "error": share_error,
            "form": {**dict.fromkeys(SHARE_FORM_FIELDS, ""), **(share_form or {})},
        }
        if self.export(
            values,
            {
                "sessions": usage_csv(sessions),
                "groups": (TOTAL_COLUMNS, by_group),
                "users": (TOTAL_COLUMNS, by_user),
                "profiles": (TOTAL_COLUMNS, by_profile),
                "daily": (DAILY_COLUMNS, series),
                "utilization": (UTILIZATION_COLUMNS, [culled["utilization"]]),
                "culling": (CULLING_COLUMNS, culled["rows"]),
                "budgets": (BUDGET_COLUMNS, budgets),
                "pricing": (PROFILE_COLUMNS, profiles),
                "reservations": (RESERVATION_COLUMNS, [reservation_json(r) for r in booked]),
                "shares": (SHARE_COLUMNS, [share_json(s) for s in every_share]),
                "queue": (QUEUE_COLUMNS, schedule["queue"]),
                "preemptions": ([*PREEMPTION_COLUMNS, "for_user"], schedule["preemptions"]),
            },
        ):
            return
        self.render_page(
            "admin.html",
            status,
            path=self.page_url("admin"),
            title=self._("Administration"),
            by_group=by_group,
            by_user=by_user,
            by_profile=by_profile,
            culled=culled,
            budgets=budgets,
            profiles=profiles,
            error=error,
            form={**dict.fromkeys(BUDGET_FORM_FIELDS, ""), **(form or {})},
            profile_error=profile_error or {"slug": "", "message": ""},
            saved=self.get_query_argument("saved", ""),
            right_sizing=advice_summary(self.ledger, since, until, None, self.ctx.currency, self.lang),  # advice.md
            channels=self.channels_section(),
            schedule=schedule,
            **self.summary(sessions, series, since, until),
        )

    def channels_section(self) -> dict:
        """The admins' channels and every group's that has one (configured or stored)."""
        blocks = [channel_block(self, "admin", "", self._("The admins' channels"))]
        configured = self.ctx.notifier.configured if self.ctx.notifier is not None else ()
        groups = {c.owner for c in configured if c.owner_kind == "group"} | set(channel_owners(self.ledger, "group"))
        for group in sorted(groups):
            blocks.append(channel_block(self, "group", group, self._("Group {group}", group=group)))
        every_user = [c for c in configured if c.owner_kind == "user"]
        if every_user:
            blocks.append(channel_block(self, "user", "{username}", self._("Every user")))
        return channel_section(self, self._("Alert channels"), blocks, "admin", "others")

    def profiles(self) -> list[dict]:
        """The published profiles with the admins' edits (``GET pricing``'s view) and the edit's fields."""
        overrides = load_overrides(self.ledger)
        published = self.ledger.pricing()
        rows = []
        for p in apply_to_pricing(published, overrides):
            o = overrides.get(p["slug"])
            rows.append(
                {
                    **p,
                    "rate_display": self.ctx.currency.format_rate(Decimal(p["rate_per_minute"]), self.lang),
                    "allowed_groups": " ".join(p["allowed_groups"]),
                    "edited": o is not None,
                    "override": o,
                    "restrict": "config"
                    if o is None or o.allowed_groups is None
                    else ("groups" if o.allowed_groups else "everyone"),
                }
            )
        return rows

    def back(self, saved: str, anchor: str) -> None:
        """After a form: back to the admin page, in the window it was sent from."""
        window = {k: self.get_query_argument(k, "") for k in ("since", "until")}
        self.redirect(self.page_url("admin", **window, saved=saved) + "#" + anchor, status=303)


class AdminPage(AdminView):
    """``GET admin``: the admin page (``custom:gpu-usage:read``)."""

    @web.authenticated
    def get(self):
        self.require_scope(SCOPE_USAGE_READ)
        self.show()


class BudgetFormHandler(AdminView):
    """``POST admin/budgets``: set or delete a budget from the admin page (XSRF-checked by JupyterHub)."""

    @web.authenticated
    async def post(self):
        self.require_scope(SCOPE_BUDGETS_WRITE)
        form = {k: self.get_body_argument(k, "").strip() for k in BUDGET_FORM_FIELDS}
        action = self.get_body_argument("action", "set")
        try:
            if action == "delete":
                validate_subject(form["scope"], form["subject"])
                if not self.ledger.delete_budget(form["scope"], form["subject"]):
                    raise BadRequest(f"The {form['scope']} {form['subject']} has no budget")
                self.back("deleted", "budgets")
                return
            if action != "set":
                raise BadRequest(f"action must be set or delete, got {action!r}")
            data = {"limit": form["limit"], "unit": form["unit"] or "money", "period": form["period"]}
            if form["period"] == "term" or form["term_start"] or form["term_end"]:
                data["term_start"] = form["term_start"] or None
                data["term_end"] = form["term_end"] or None
            if not form["limit"]:
                del data["limit"]
            if not form["period"]:
                del data["period"]
            rule = parse_budget(form["scope"], form["subject"], data)
        except BadRequest as e:
            self.show(400, error=str(e), form=form)
            return
        self.ledger.set_budget(rule, self.now())
        self.back("budget", "budgets")


class ProfileFormHandler(AdminView):
    """``POST admin/profiles/SLUG``: change a profile's prices and who may use it, or reset it."""

    @web.authenticated
    def post(self, slug: str):
        self.require_scope(SCOPE_BUDGETS_WRITE)
        published = {p["slug"]: p for p in self.ledger.pricing()}
        if slug not in published:
            raise web.HTTPError(404, self._("No such profile: {slug}", slug=slug))
        if self.get_body_argument("action", "save") == "reset":
            delete_override(self.ledger, slug)
            self.back("profile", "profiles")
            return
        values = {
            k: self.get_body_argument(k, "")
            for k in ("price_per_gpu_hour", "price_per_hour", "restrict", "allowed_groups")
        }
        try:
            override = parse_override(published[slug], values, self.ctx.currency)
        except AccessError as e:
            self.show(400, profile_error={"slug": slug, "message": str(e)})
            return
        if override == Override(slug):  # nothing changed from the configuration: no edit to keep
            delete_override(self.ledger, slug)
        else:
            save_override(self.ledger, override, self.now(), self.current_user["name"])
        self.back("profile", "profiles")


class ShareFormHandler(AdminView, ApiForm):
    """``POST admin/shares``: set (``action=set``) or clear (``action=clear``) a group's share of a GPU model.

    ``PUT shares``' own code on the form's fields (admins: ``custom:gpu-budgets:write``); a refusal is shown
    above the form on the admin page, with the form as it was sent, and changes nothing.
    """

    @web.authenticated
    async def post(self):
        form = {k: self.get_body_argument(k, "").strip() for k in SHARE_FORM_FIELDS}
        action = self.get_body_argument("action", "set")
        if action not in ("set", "clear"):
            raise web.HTTPError(400, f"action must be set or clear, got {action!r}")
        try:
            await self.call_api(SharesHandler.put, share_body(form, clear=action == "clear"))
        except web.HTTPError as e:
            if e.status_code not in FORM_REFUSALS:
                raise
            self.show(e.status_code, share_error=http_error_text(e), share_form=form)
            return
        self.back("share-cleared" if action == "clear" else "share", "schedule")


class StaticHandler(web.StaticFileHandler):
    """The vendored chart library and the pages' stylesheet (public, cached)."""

    def set_extra_headers(self, path):
        self.set_header("Cache-Control", "public, max-age=86400")

    # A path out of the folder (or to a folder) is "not found", as any other missing file, where tornado
    # says 403: the same answer whether or not the proxy in front normalised the ".." away.
    @classmethod
    def get_absolute_path(cls, root, path):
        try:
            return super().get_absolute_path(root, path)
        except web.HTTPError as e:
            raise web.HTTPError(404) if e.status_code == 403 else e from None

    def validate_absolute_path(self, root, absolute_path):
        try:
            return super().validate_absolute_path(root, absolute_path)
        except web.HTTPError as e:
            raise web.HTTPError(404) if e.status_code == 403 else e from None
