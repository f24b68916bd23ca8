"""``budgets``: every budget, and one user's or group's to read, set or delete."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.params import BadRequest, parse_budget, parse_json_body, validate_subject
from jupyterhub_gpu.service.web.views import budget_json
from jupyterhub_gpu.service.web.writes import written


class BudgetListHandler(BaseHandler):
    """``GET budgets``: every budget with its current period's use (admins)."""

    @web.authenticated
    def get(self):
        self.require_scope(SCOPE_USAGE_READ, SCOPE_BUDGETS_WRITE)
        budgets = {f"{b.scope}:{b.subject}": b for b in self.ledger.budgets()}
        statuses = self.statuses(self.ledger.budget_rules(), self.now())
        self.write_json(
            {
                "currency": self.ctx.currency.code,
                "timezone": self.ctx.tz.key,  # the lab's: periods start at its midnight
                "budgets": [budget_json(budgets[s.rule.key], s) for s in statuses],
            }
        )


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
        lab = {"currency": self.ctx.currency.code, "timezone": self.ctx.tz.key}
        self.write_json({**budget_json(budget, current), **lab, **extra}, status)

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
        await written(self, Ledger.set_budget, rule, self.now())
        extra = {}
        warning = await self._unknown_subject_warning(scope, name)
        if warning:
            extra["warning"] = warning
        self._one(scope, name, 200 if existed else 201, **extra)

    async def _unknown_subject_warning(self, scope: str, name: str) -> str | None:
        """A hint when the hub has no such user or group (a typo, or one who has not logged in yet)."""
        try:
            found = await (self.ctx.hub.user(name) if scope == "user" else self.ctx.hub.group(name))
        except HubAPIError as e:
            self.log.debug("could not look up %s %s on the hub: %s", scope, name, e)
            return None
        if found is None:
            return f"The hub has no {scope} named {name!r} (yet); the budget applies once it does."
        return None

    @web.authenticated
    async def delete(self, scope: str, name: str):
        self.require_scope(SCOPE_BUDGETS_WRITE)
        self._subject(scope, name)
        if not await written(self, Ledger.delete_budget, scope, name):
            raise web.HTTPError(404, f"The {scope} {name} has no budget")
        self.set_status(204)
        self.finish()
