"""``me``: the caller's budgets, running sessions and notices; dismissing a notice."""

from __future__ import annotations

import re

from tornado import web

from jupyterhub_gpu.billing import applies_to
from jupyterhub_gpu.service.web.auth import BaseHandler
from jupyterhub_gpu.service.web.views import notice_json, sessions_json, status_json

_DIGITS_RE = re.compile(r"^[0-9]{1,18}$")


class MeHandler(BaseHandler):
    """``GET me``: the caller's budgets, running sessions and pending notices."""

    @web.authenticated
    def get(self):
        name = self.own_name("use GET usage with user=, group= or all=true")
        groups = self.groups
        now = self.now()
        currency = self.ctx.currency
        rules = [r for r in self.ledger.budget_rules() if applies_to(r, name, groups)]
        statuses = sorted(self.statuses(rules, now), key=lambda s: s.fraction, reverse=True)
        active = sessions_json(self.ledger, self.ledger.open_sessions_of(name), now, currency)
        self.write_json(
            {
                "user": name,
                "groups": list(groups),
                "currency": currency.code,
                "currency_symbol": currency.symbol_in(),  # English, as every *_display of the API
                "budgets": [status_json(s) for s in statuses],
                "active_sessions": active,
                "notices": [notice_json(n) for n in self.ledger.notices(name)],
            }
        )


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
