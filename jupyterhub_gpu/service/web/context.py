"""What the web layer's handlers get of the service: a small, frozen context, not the Application.

:func:`.routes.make_handlers` passes one :class:`WebContext` to every handler
in its route's init dict (``{"ctx": ctx}``); handlers read ``self.ctx.ledger``,
``self.ctx.hub``, ``self.ctx.tz``, ``self.ctx.currency`` and the few settings
below. The Application builds it once (:meth:`WebContext.from_service`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from zoneinfo import ZoneInfo

from jupyterhub.services.auth import HubOAuth

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.feeds.kueue import KueueStatus, status_of
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import TickHealth


@dataclass(frozen=True)
class WebContext:
    ledger: Ledger
    #: The one hub client (start, stop and remove servers; users and groups).
    hub: HubClient
    #: The service's one HubOAuth (it holds the OAuth states of the login flow).
    hub_auth: HubOAuth
    #: The lab's time zone: dates in queries and on the pages, budget periods.
    tz: ZoneInfo
    currency: Currency
    #: The service's URL prefix, ``/services/gpu/``.
    prefix: str
    advice_settings: AdviceSettings
    max_concurrent_jobs: int
    job_time_limit_minutes: int
    job_time_limit_max_minutes: int
    #: The one gateway for notices (the channels' test messages; its delivery counts in ``/metrics``).
    notifier: Notifier | None = None
    #: How the ticks went (their counts and the last good one, in ``/metrics``); None outside the service.
    tick_health: TickHealth | None = None
    #: The lab's GPUs by model (``c.Scheduling.gpu_pool``): what a reservation is checked against; empty: unknown.
    gpu_pool: Mapping[str, int] = field(default_factory=dict)
    #: The longest an instructor's group may hold a model without a break (``c.Scheduling.reservation_max_hours``);
    #: admins are not limited.
    reservation_max_hours: float = 4.0
    #: The GPU-hours an instructor's group may book in a week (``reservation_max_gpu_hours_per_week``); None: any.
    reservation_max_gpu_hours_per_week: float | None = None
    #: The part of a model's pool an instructor's group may hold at once (``reservation_max_pool_fraction``).
    reservation_max_pool_fraction: float = 1.0
    #: How far ahead an instructor must book (``c.Scheduling.reservation_notice_hours``); admins are not limited.
    reservation_notice_hours: float = 24.0
    #: Kueue's ClusterQueues as the pages show them (:class:`~jupyterhub_gpu.service.feeds.kueue.KueueStatus`,
    #: cached, failing soft); None when no group has a ClusterQueue (``c.Kueue.cluster_queues``).
    kueue: KueueStatus | None = None

    @property
    def base_url(self) -> str:
        """The hub's base URL path (``/``, or ``/jupyter/`` behind a path prefix), from the service's prefix."""
        return self.prefix.rstrip("/").rpartition("/services/")[0] + "/"  # the last one: a base may hold "services"

    @classmethod
    def from_service(cls, service) -> WebContext:
        """The context of a configured :class:`~jupyterhub_gpu.service.app.GPUService`."""
        return cls(
            ledger=service.ledger,
            hub=service.hub,
            hub_auth=service.hub_auth,
            tz=service.tz,
            currency=service.currency_info,
            prefix=service.prefix,
            advice_settings=service.advice_settings,
            max_concurrent_jobs=service.jobs.max_concurrent,
            job_time_limit_minutes=service.jobs.time_limit_minutes,
            job_time_limit_max_minutes=service.jobs.time_limit_max_minutes,
            notifier=service.notifier,
            tick_health=service.tick_health,
            gpu_pool=dict(service.scheduling.gpu_pool),
            reservation_max_hours=service.scheduling.reservation_max_hours,
            reservation_notice_hours=service.scheduling.reservation_notice_hours,
            reservation_max_gpu_hours_per_week=service.scheduling.reservation_max_gpu_hours_per_week,
            reservation_max_pool_fraction=service.scheduling.reservation_max_pool_fraction,
            kueue=status_of(getattr(service, "kueue", None)),
        )
