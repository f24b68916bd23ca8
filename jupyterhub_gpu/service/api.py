"""REST API of the gpu service under ``/services/gpu/api/v1/``.

Every handler authenticates through JupyterHub (OAuth cookie in browsers,
``Authorization: token …`` for programs). A user may read only their own
usage; budgets, prices and other users' data need the custom scopes below.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web

from ..clock import isoformat, utcnow
from .ledger import Ledger, _aware
from .metering import billed_minutes, from_micros, user_statuses

SCOPE_USAGE_READ = "custom:gpu-usage:read"  # read everyone's usage
SCOPE_BUDGETS_WRITE = "custom:gpu-budgets:write"  # set and delete budgets
SCOPE_METRICS_READ = "custom:gpu-metrics:read"  # scrape /metrics

CUSTOM_SCOPES = {
    SCOPE_USAGE_READ: {"description": "Read every user's GPU usage, sessions and budgets."},
    SCOPE_BUDGETS_WRITE: {"description": "Set and delete GPU budgets of users and groups."},
    SCOPE_METRICS_READ: {"description": "Read the gpu service's Prometheus metrics."},
}


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """JSON in, JSON out, errors as ``{"status": 4xx, "message": "..."}``."""

    @property
    def service(self):
        return self.settings["service"]

    @property
    def hub_auth(self):
        return self.settings["hub_auth"]

    @property
    def ledger(self) -> Ledger:
        return self.service.ledger

    def has_scope(self, scope: str) -> bool:
        user = self.current_user or {}
        return scope in set(user.get("scopes", []))

    def require_scope(self, scope: str) -> None:
        if not self.has_scope(scope):
            raise web.HTTPError(403, f"This needs the {scope} scope.")

    def write_json(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(data))

    def write_error(self, status_code, **kwargs):
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"status": status_code, "message": message}))


def session_json(record, now: datetime, currency) -> dict:
    """A session as the API shows it: cost so far for running ones, the final charge for stopped ones."""
    rows = Ledger.usage_rows([record], now)[0]
    if record.stopped is None:
        minutes = billed_minutes(_aware(record.started), max(now, _aware(record.started)))
    else:
        minutes = record.minutes
    return {
        "id": record.id,
        "user": record.user,
        "server_name": record.server_name,
        "profile": record.profile,
        "gpus": record.gpu_list,
        "gpu_count": record.gpu_count,
        "simulated": record.simulated,
        "rate_per_minute": str(from_micros(record.rate_micros)),
        "currency": record.currency,
        "started": isoformat(_aware(record.started)),
        "stopped": isoformat(_aware(record.stopped)) if record.stopped else None,
        "stop_reason": record.stop_reason,
        "minutes_billed": minutes,
        "cost": str(from_micros(rows.cost_micros)),
        "cost_display": currency.format(from_micros(rows.cost_micros)),
        "running": record.stopped is None,
    }


class MeHandler(BaseHandler):
    @web.authenticated
    def get(self):
        user = self.current_user
        name = user["name"]
        groups = tuple(user.get("groups", []))
        now = utcnow()
        currency = self.service.currency_info
        rows = self.ledger.rows_for(name, groups, now, since=now - timedelta(days=400))
        statuses = user_statuses(name, groups, self.ledger.budget_rules(), rows, now, self.service.tz)
        active = [session_json(r, now, currency) for r in self.ledger.open_sessions() if r.user == name]
        self.write_json(
            {
                "user": name,
                "groups": list(groups),
                "currency": currency.code,
                "currency_symbol": currency.symbol,
                "budgets": [
                    {
                        "scope": s.rule.scope,
                        "subject": s.rule.subject,
                        "period": s.rule.period,
                        "unit": s.rule.unit,
                        "limit": str(s.limit),
                        "spent": str(s.used),
                        "remaining": str(s.remaining),
                        "percent_used": float(round(s.fraction * 100, 1)),
                        "period_start": isoformat(s.period_start),
                        "period_end": isoformat(s.period_end),
                    }
                    for s in statuses
                ],
                "active_sessions": active,
                "notices": [
                    {
                        "id": n.id,
                        "kind": n.kind,
                        "level": n.level,
                        "message": n.message,
                        "created": isoformat(_aware(n.created)),
                    }
                    for n in self.ledger.notices(name)
                ],
            }
        )


def make_handlers(prefix: str, service) -> list:
    api = url_path_join(prefix, "api/v1")
    return [
        (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
        (url_path_join(api, "me"), MeHandler),
    ]
