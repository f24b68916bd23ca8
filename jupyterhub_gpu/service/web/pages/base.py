"""What every usage page is: :class:`PageHandler` (HTML in the reader's language, errors as pages, the window
of a page, its CSV exports, the budget and culling rows it shows), the templates, and the static files."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlencode

import jinja2
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.log import app_log

from jupyterhub_gpu.i18n import COOKIE, LANGUAGE_NAMES, LANGUAGES, language_of, query_language, translator
from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.service.domain.savings import DEFAULT_HORIZON, culling_report
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.pages.series import (
    day_text,
    gpu_hours,
    moment_text,
    month_start,
    saved_row,
)
from jupyterhub_gpu.service.web.params import BadRequest, parse_hub, query_values, query_window
from jupyterhub_gpu.service.web.views import sessions_json, status_json, table_csv, usage_totals
from jupyterhub_gpu.session import CULL_REASONS

TEMPLATES = Path(__file__).parent.with_name("templates")
STATIC = Path(__file__).parent.with_name("static")
#: For ``c.JupyterHub.template_paths``: the hub's home page with a link to the usage pages.
HUB_TEMPLATES = str(TEMPLATES / "hub")
PAGE_PARAMS = ("since", "until", "hub", "format", "table", "lang", "saved")
BUDGET_FORM_FIELDS = ("scope", "subject", "limit", "unit", "period", "term_start", "term_end")

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)


class PageHandler(BaseHandler):
    """A page: HTML, errors as HTML pages in the reader's language."""

    _lang: str | None = None
    #: The hub the page shows (``?hub=``; None: every hub) and the hubs on the ledger, set by :meth:`page_query`.
    hub: str | None = None
    hubs: tuple[str, ...] = ()
    #: the hubs of the sessions a page read for a reader without ``custom:gpu-usage:read`` (:meth:`sessions`)
    own_hubs: tuple[str, ...] = ()

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

    def answer_language(self) -> str:
        """A refusal's words (a missing scope, say) in the reader's language."""
        return self.lang

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
        window = {k: v for k, v in args.items() if k in ("since", "until", "hub")}

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
                hub=self.hub or "",
                hubs=self.shown_hubs,
                # a hub column and the hub filter only where several hubs share the ledger
                show_hub=len(self.shown_hubs) > 1,
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
        self.hubs = tuple(self.ledger.hub_names())
        self.hub = self.page_hub(values.get("hub"))
        if "since" not in values:
            since = month_start(self.now(), self.ctx.tz)
            if until is not None and until <= since:
                since = None
        return since, until, values

    def page_hub(self, hub: str | None) -> str | None:
        """The page's hub filter, None for every hub; 400 in the reader's language for one the ledger lacks."""
        if hub is None or hub == "":  # the filter's "every hub" sends an empty value
            return None
        try:
            parse_hub(hub)
        except BadRequest:
            raise web.HTTPError(
                400,
                self._(
                    "{hub} is not a hub name: a hub's name is lowercase letters, digits, '.', '-' and '_'.",
                    hub=repr(hub),
                ),
            ) from None
        if hub not in self.hubs:
            if not self.has_scope(SCOPE_USAGE_READ):  # the hubs' names are told only to who reads every report
                raise web.HTTPError(400, self._("The ledger has no hub named {hub}.", hub=hub))
            known = ", ".join(self.hubs) if self.hubs else self._("none yet")
            raise web.HTTPError(
                400, self._("The ledger has no hub named {hub}; its hubs: {hubs}.", hub=hub, hubs=known)
            )
        return hub

    @property
    def shown_hubs(self) -> tuple[str, ...]:
        """The hubs the page names (its hub filter, its hub column): every hub of the ledger to a reader of every
        report, to anyone else those of the sessions the page shows them."""
        if not self.hubs:  # no page query (an error page before it): no hub to name
            return ()
        return self.hubs if self.has_scope(SCOPE_USAGE_READ) else self.own_hubs

    def window_text(self, since, until) -> dict:
        tz = self.ctx.tz
        return {
            "since": since.astimezone(tz).date().isoformat() if since else "",
            "until": (until.astimezone(tz) - timedelta(microseconds=1)).date().isoformat() if until else "",
        }

    def sessions(self, since, until, user=None, group=None, pool=None) -> list[dict]:
        """Sessions as ``GET usage`` shows them; the group that paid for each is kept for :meth:`session_groups`."""
        # every session with a minute in the window, each counted for its minutes inside it (as budgets are)
        # a reader of every report has the hub filtered in the query; anyone else reads their page's sessions of
        # every hub, so that its hub filter offers the hubs of those sessions, not every hub of the ledger
        reader = self.has_scope(SCOPE_USAGE_READ)
        records = self.ledger.sessions(
            user=user,
            since=since,
            until=until,
            group=group,
            pool=pool,
            overlapping=True,
            hub=self.hub if reader else None,
        )
        if not reader:
            self.own_hubs = tuple(sorted({r.hub for r in records} | ({self.hub} if self.hub else set())))
            records = [r for r in records if self.hub is None or r.hub == self.hub]
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
        for status in self.ledger.statuses_of(rules, self.now(), self.ctx.tz):
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
        facts, counts = load_culling_inputs(self.ledger, since, end, group, self.hub)
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
            "idle_pct": idle.IDLE.util_percent,
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


CULLING_COLUMNS = ["name", "sessions", "gpu_hours_saved", "money_saved"]
UTILIZATION_COLUMNS = ["billed", "busy", "idle", "unsampled", "busy_share"]
PROFILE_COLUMNS = ["slug", "display_name", "gpu_count", "rate_per_minute", "allowed_groups", "edited"]
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
