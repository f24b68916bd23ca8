"""``advice``: right-sizing advice summed per group and per profile."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.service.feeds.advice import summary
from jupyterhub_gpu.service.web.auth import SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.params import ADVICE_PARAMS, BadRequest, query_values, query_window, validate_subject


class AdviceHandler(BaseHandler):
    """``GET advice``: right-sizing advice summed per group and per profile (admins; instructors for their groups)."""

    @web.authenticated
    def get(self):
        if not self.instructor_groups:
            self.require_scope(SCOPE_USAGE_READ)
        try:
            values = query_values(self.request.query_arguments, ADVICE_PARAMS)
            if "group" in values:
                validate_subject("group", values["group"])
            since, until = query_window(values, self.ctx.tz)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        group = values.get("group")
        if group is None:
            self.require_scope(SCOPE_USAGE_READ)
        else:
            self.require_group(group)  # instructors: their own groups
        settings = self.ctx.advice_settings
        report = summary(self.ledger, since, until, group, self.ctx.currency)
        self.write_json(
            {
                "since": isoformat(since) if since else None,
                "until": isoformat(until) if until else None,
                "headroom_percent": settings.headroom_percent,
                "min_minutes": settings.min_minutes,
                **report,
            }
        )
