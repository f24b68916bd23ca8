"""A user's page: balance, spend, sessions, the daily chart; on one's own page, one's waiting requests,
preemptions and notification channels."""

from __future__ import annotations

from tornado import web
from tornado.log import app_log

from jupyterhub_gpu.billing import applies_to
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.api.queue import PREEMPTIONS_DAYS
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ
from jupyterhub_gpu.service.web.pages.base import BUDGET_COLUMNS, DAILY_COLUMNS
from jupyterhub_gpu.service.web.pages.channels import channel_block, channel_section
from jupyterhub_gpu.service.web.pages.schedule import PREEMPTION_COLUMNS, QUEUE_COLUMNS, ScheduleView
from jupyterhub_gpu.service.web.pages.series import daily_series
from jupyterhub_gpu.service.web.params import BadRequest, validate_subject
from jupyterhub_gpu.service.web.views import usage_csv


class UserPage(ScheduleView):
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
