"""``usage``: sessions and totals in a window, as JSON or CSV."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.params import BadRequest, known_hub, parse_usage_query
from jupyterhub_gpu.service.web.views import sessions_json, usage_csv, usage_totals


class UsageHandler(BaseHandler):
    """``GET usage``: sessions and totals, one's own or (with custom:gpu-usage:read) anyone's."""

    @web.authenticated
    def get(self):
        try:
            query = parse_usage_query(self.request.query_arguments, self.ctx.tz)
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
        try:  # after the scopes: the hubs' names are told only to a caller who may read everyone's report
            hubs = self.ledger.hub_names() if query.hub is not None else []
            known_hub(query.hub, hubs, tell=self.has_scope(SCOPE_USAGE_READ))
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        now = self.now()
        currency = self.ctx.currency
        # every session with a minute in the window; totals count the minutes inside it (as budgets do)
        records = self.ledger.sessions(
            user=user,
            since=query.since,
            until=query.until,
            group=query.group,
            overlapping=True,
            pool=query.group if query.paid else None,
            hub=query.hub,  # one hub of a shared ledger (docs/admin.md, "Two hubs on one ledger"); None: every hub
        )
        sessions = sessions_json(self.ledger, records, now, currency, (query.since, query.until))
        if query.format == "csv":
            self.send_csv("usage", usage_csv(sessions))
            return
        self.write_json(
            {
                "user": user,
                "group": query.group,
                "hub": query.hub,
                "paid": query.paid,
                "all": query.everyone,
                "since": isoformat(query.since) if query.since else None,
                "until": isoformat(query.until) if query.until else None,
                "currency": currency.code,
                "timezone": self.ctx.tz.key,  # the lab's, in which clients show the times (the CLI does)
                "sessions": sessions,
                "totals": usage_totals(sessions, currency.code),
            }
        )
