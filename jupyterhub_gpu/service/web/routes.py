"""The routes of the gpu service: every URL, its handler class, and the context each handler gets.

One list, read top to bottom as tornado matches it: the OAuth callback, the
Prometheus metrics, the REST API under ``api/v1/`` (:mod:`.api`, one module per
resource, described by ``openapi.yaml``), the usage pages (:mod:`.pages`), and
last a JSON 404 for any other path under ``api/v1/``. Every handler gets the same
:class:`~.context.WebContext` in its init dict, never the Application.
"""

from __future__ import annotations

from jupyterhub.utils import url_path_join

from jupyterhub_gpu.service.web.api.advice import AdviceHandler
from jupyterhub_gpu.service.web.api.budgets import BudgetHandler, BudgetListHandler
from jupyterhub_gpu.service.web.api.channels import ChannelHandler, ChannelsHandler, ChannelTestHandler
from jupyterhub_gpu.service.web.api.culling import CullingHandler
from jupyterhub_gpu.service.web.api.jobs import (
    JobCancelHandler,
    JobFinishedHandler,
    JobHandler,
    JobsHandler,
    JobStartedHandler,
    RestartBiggerHandler,
    StopWhenDoneHandler,
)
from jupyterhub_gpu.service.web.api.me import MeHandler, NoticeDismissHandler
from jupyterhub_gpu.service.web.api.openapi import NotFoundHandler, OpenAPIHandler
from jupyterhub_gpu.service.web.api.pricing import PricingHandler
from jupyterhub_gpu.service.web.api.queue import PreemptionsHandler, QueueHandler
from jupyterhub_gpu.service.web.api.samples import SamplesHandler
from jupyterhub_gpu.service.web.api.schedule import ReservationHandler, ReservationsHandler, SharesHandler
from jupyterhub_gpu.service.web.api.usage import UsageHandler
from jupyterhub_gpu.service.web.auth import OAuthCallbackHandler
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.metrics import MetricsHandler, make_registry
from jupyterhub_gpu.service.web.pages import (
    STATIC,
    AdminPage,
    BudgetFormHandler,
    ChannelFormHandler,
    GroupPage,
    ProfileFormHandler,
    ReservationFormHandler,
    ShareFormHandler,
    StaticHandler,
    UserPage,
)


def make_handlers(prefix: str, ctx: WebContext) -> list:
    """``(pattern, handler class, init dict)`` for every URL under the service's ``prefix``."""
    api = url_path_join(prefix, "api/v1")
    c = {"ctx": ctx}
    return [
        (url_path_join(prefix, "oauth_callback"), OAuthCallbackHandler, c),
        (
            url_path_join(prefix, "metrics"),
            MetricsHandler,
            {**c, "registry": make_registry(ctx.ledger, ctx.tz, notifier=ctx.notifier, tick_health=ctx.tick_health)},
        ),
        # the REST API (api/), described by openapi.yaml
        (url_path_join(api, "openapi.yaml"), OpenAPIHandler, c),
        (url_path_join(api, "me"), MeHandler, c),
        (url_path_join(api, r"me/notices/([^/]+)/dismiss"), NoticeDismissHandler, c),
        (url_path_join(api, "usage"), UsageHandler, c),
        (url_path_join(api, "budgets"), BudgetListHandler, c),
        (url_path_join(api, r"budgets/([^/]+)/([^/]+)"), BudgetHandler, c),
        (url_path_join(api, "pricing"), PricingHandler, c),
        (url_path_join(api, "channels"), ChannelsHandler, c),
        (url_path_join(api, r"channels/([^/]+)"), ChannelHandler, c),
        (url_path_join(api, r"channels/([^/]+)/test"), ChannelTestHandler, c),
        (url_path_join(api, "culling"), CullingHandler, c),
        (url_path_join(api, "advice"), AdviceHandler, c),
        (url_path_join(api, "samples"), SamplesHandler, c),
        (url_path_join(api, "jobs"), JobsHandler, c),
        (url_path_join(api, r"jobs/([^/]+)"), JobHandler, c),
        (url_path_join(api, r"jobs/([^/]+)/cancel"), JobCancelHandler, c),
        (url_path_join(api, r"jobs/([^/]+)/started"), JobStartedHandler, c),
        (url_path_join(api, r"jobs/([^/]+)/finished"), JobFinishedHandler, c),
        (url_path_join(api, "stop-when-done"), StopWhenDoneHandler, c),
        (url_path_join(api, "restart-bigger"), RestartBiggerHandler, c),
        (url_path_join(api, "reservations"), ReservationsHandler, c),
        (url_path_join(api, r"reservations/([^/]+)"), ReservationHandler, c),
        (url_path_join(api, "shares"), SharesHandler, c),
        (url_path_join(api, "queue"), QueueHandler, c),
        (url_path_join(api, "preemptions"), PreemptionsHandler, c),
        # the usage pages (pages.py), outside api/v1/
        (url_path_join(prefix, r"static/(.*)"), StaticHandler, {"path": str(STATIC)}),
        (prefix.rstrip("/") + "/?", UserPage, c),
        (url_path_join(prefix, r"users/([^/]+)"), UserPage, c),
        (url_path_join(prefix, r"groups/([^/]+)"), GroupPage, c),
        (url_path_join(prefix, r"groups/([^/]+)/reservations"), ReservationFormHandler, c),
        (url_path_join(prefix, "admin"), AdminPage, c),
        (url_path_join(prefix, "admin/budgets"), BudgetFormHandler, c),
        (url_path_join(prefix, r"admin/profiles/([^/]+)"), ProfileFormHandler, c),
        (url_path_join(prefix, "admin/shares"), ShareFormHandler, c),
        (url_path_join(prefix, "channels"), ChannelFormHandler, c),
        (url_path_join(api, r".*"), NotFoundHandler, c),
    ]
