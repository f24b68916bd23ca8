"""The admin page: spend by group, user and profile, utilization and culling, the schedule, the channels, and
the forms for budgets, prices and profile access, and shares."""

from __future__ import annotations

from decimal import Decimal

from tornado import web

from jupyterhub_gpu.ledger.queries.channels import channel_owners
from jupyterhub_gpu.ledger.queries.overrides import delete_override, load_overrides, save_override
from jupyterhub_gpu.ledger.queries.schedule import (
    reservations,
    shares,
)
from jupyterhub_gpu.rules.overrides import AccessError, Override, apply_to_pricing, parse_override
from jupyterhub_gpu.service.feeds.advice import summary as advice_summary
from jupyterhub_gpu.service.web.actions.schedule import put_share
from jupyterhub_gpu.service.web.api.queue import PREEMPTIONS_DAYS
from jupyterhub_gpu.service.web.api.schedule import reservation_json, share_json
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, http_error_text
from jupyterhub_gpu.service.web.pages.base import (
    BUDGET_COLUMNS,
    BUDGET_FORM_FIELDS,
    CULLING_COLUMNS,
    DAILY_COLUMNS,
    PROFILE_COLUMNS,
    TOTAL_COLUMNS,
    UTILIZATION_COLUMNS,
)
from jupyterhub_gpu.service.web.pages.channels import channel_block, channel_section
from jupyterhub_gpu.service.web.pages.kueue import kueue_section
from jupyterhub_gpu.service.web.pages.schedule import (
    FORM_REFUSALS,
    PREEMPTION_COLUMNS,
    QUEUE_COLUMNS,
    RESERVATION_COLUMNS,
    SHARE_COLUMNS,
    SHARE_FORM_FIELDS,
    ScheduleView,
    share_body,
)
from jupyterhub_gpu.service.web.pages.series import daily_series, totals_by
from jupyterhub_gpu.service.web.params import BadRequest, parse_budget, validate_subject
from jupyterhub_gpu.service.web.views import usage_csv


class AdminView(ScheduleView):
    """Everything: spend by group, user and profile, charts, utilization, culling, and the forms."""

    def show(
        self,
        status: int = 200,
        error: str = "",
        form: dict | None = None,
        profile_error: dict | None = None,
        share_error: str = "",
        share_form: dict | None = None,
        kueue: dict | None = None,
    ):
        since, until, values = self.page_query()
        sessions = self.sessions(since, until)
        by_group = totals_by(sessions, lambda s: [self.session_pool(s) or self._("(no group)")])
        by_user = totals_by(sessions, lambda s: [s["user"]])
        by_profile = totals_by(sessions, lambda s: [s["profile"]])
        by_hub = totals_by(sessions, lambda s: [s["hub"]])
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
                "hubs": (TOTAL_COLUMNS, by_hub),
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
            by_hub=by_hub,
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
            kueue=kueue,
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
    async def get(self):
        self.require_scope(SCOPE_USAGE_READ)
        self.show(kueue=await kueue_section(self.ctx.kueue, None, self._))


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


class ShareFormHandler(AdminView):
    """``POST admin/shares``: set (``action=set``) or clear (``action=clear``) a group's share of a GPU model.

    The same function as ``PUT shares`` (:func:`~..actions.schedule.put_share`) on the form's fields (admins:
    ``custom:gpu-budgets:write``); a refusal is shown above the form on the admin page, with the form as it was
    sent, and changes nothing.
    """

    @web.authenticated
    async def post(self):
        form = {k: self.get_body_argument(k, "").strip() for k in SHARE_FORM_FIELDS}
        action = self.get_body_argument("action", "set")
        if action not in ("set", "clear"):
            raise web.HTTPError(400, f"action must be set or clear, got {action!r}")
        try:
            await put_share(self.ctx, self.caller, lambda: share_body(form, clear=action == "clear"), self.now())
        except web.HTTPError as e:
            if e.status_code not in FORM_REFUSALS:
                raise
            self.show(e.status_code, share_error=http_error_text(e), share_form=form)
            return
        self.back("share-cleared" if action == "clear" else "share", "schedule")
