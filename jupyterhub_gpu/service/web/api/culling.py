"""``culling``: what culling saved in a window (an estimate) and the billed idle share."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs
from jupyterhub_gpu.service.domain.savings import culling_report
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.params import BadRequest, known_hub, parse_culling_query
from jupyterhub_gpu.service.web.views import culling_csv, culling_json


class CullingHandler(BaseHandler):
    """``GET culling``: what culling saved in a window (an estimate), and the billed idle share (admins)."""

    @web.authenticated
    def get(self):
        if not self.instructor_groups:
            self.require_scope(SCOPE_USAGE_READ)
        try:
            query = parse_culling_query(self.request.query_arguments, self.ctx.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        if query.group is None:
            self.require_scope(SCOPE_USAGE_READ)
        else:
            self.require_group(query.group)  # instructors: their own groups
        try:
            hubs = self.ledger.hub_names() if query.hub is not None else []
            known_hub(query.hub, hubs, tell=self.has_scope(SCOPE_USAGE_READ))  # names: for every report's reader
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        now = self.now()
        end = now if query.until is None else min(query.until, now)
        facts, counts = load_culling_inputs(self.ledger, query.since, end, query.group, query.hub)
        report = culling_report(facts, counts, query.since, query.until, now, query.horizon, query.group)
        if query.format == "csv":
            self.send_csv("culling", culling_csv(report))
            return
        self.write_json({**culling_json(report, self.ctx.currency.code), "hub": query.hub})
