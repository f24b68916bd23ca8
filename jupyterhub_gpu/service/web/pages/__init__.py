"""The usage pages of the gpu service: students, instructors and admins, in English and Chinese.

Server-rendered Jinja2 pages under ``/services/gpu/`` behind JupyterHub OAuth
(the same :class:`~.auth.BaseHandler` as the REST API, so the same scopes decide
who sees what), with the same query helpers as the API: ``Ledger.sessions`` and
``session_json`` for sessions, ``Ledger.statuses_of`` for budgets,
``parse_budget`` for budget forms, ``load_culling_inputs`` and
``culling_report`` for utilization and culling.

- ``/services/gpu/`` and ``users/NAME``: a user's balance, spend, sessions and
  daily chart. Anyone sees their own; admins (``custom:gpu-usage:read``) anyone's;
  an instructor only the sessions a student ran while in one of their groups.
- ``groups/NAME``: a group's total against its budget, top users, idle time
  culled, sessions (instructors of the group: ``custom:gpu-usage:read!group=NAME``).
- ``admin``: everything, for any period; forms for budgets, prices and profile
  access (``custom:gpu-budgets:write``).
- the schedule (docs/scheduling.md): the group page lists the group's reservations and shares with a
  booking form (``POST groups/NAME/reservations``), the admin page every reservation, the shares with
  their form (``POST admin/shares``), the hub's queue and the preemptions; a user's own page their waiting
  requests and preemptions. The forms call the same functions as the REST API
  (:mod:`~jupyterhub_gpu.service.web.actions.schedule`), so a page books, cancels and sets exactly what
  ``POST reservations``, ``DELETE reservations/ID`` and ``PUT shares`` would, with the same refusals.

Every table has a CSV export (``?format=csv&table=NAME``); the sessions table's
CSV is the API's ``GET usage?format=csv``. Forms are protected against
cross-site requests by JupyterHub's XSRF token (the ``_xsrf`` field): a POST
without it is not authenticated. Charts use Chart.js, served from ``static/``.

The modules: what every page is (:mod:`.base`: ``PageHandler``, templates, exports, static files), the pure
helpers of tables and series (:mod:`.series`), the schedule's rows and forms' bodies (:mod:`.schedule`), the
alert channels' sections and form (:mod:`.channels`), and one module per page: :mod:`.user`, :mod:`.group`,
:mod:`.admin`.
"""

from jupyterhub_gpu.service.web.pages.admin import AdminPage, BudgetFormHandler, ProfileFormHandler, ShareFormHandler
from jupyterhub_gpu.service.web.pages.base import HUB_TEMPLATES, STATIC, StaticHandler
from jupyterhub_gpu.service.web.pages.channels import ChannelFormHandler
from jupyterhub_gpu.service.web.pages.group import GroupPage, ReservationFormHandler
from jupyterhub_gpu.service.web.pages.user import UserPage

__all__ = [
    "HUB_TEMPLATES",
    "STATIC",
    "AdminPage",
    "BudgetFormHandler",
    "ChannelFormHandler",
    "GroupPage",
    "ProfileFormHandler",
    "ReservationFormHandler",
    "ShareFormHandler",
    "StaticHandler",
    "UserPage",
]
