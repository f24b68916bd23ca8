"""Class reservations kept by Kueue: a booked window moves ClusterQueue quota, and moves it back after.

- :mod:`.plan`: which quotas a window moves (pure: the ClusterQueues, the settings and the bookings in force in,
  each ClusterQueue's target out);
- :mod:`.cluster`: the ClusterQueues read and written, with the record of the admin's values on each one moved;
- :mod:`.settings`: ``c.Kueue``.

The tick's scheduling pass calls :class:`QuotaMover` with the bookings (docs/kubernetes.md, "Class reservations
through Kueue").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.service.kueue.cluster import sync_quotas
from jupyterhub_gpu.service.kueue.plan import QuotaConfig, in_force

log = logging.getLogger("jupyterhub_gpu.service")


class QuotaMover:
    """Each tick: the bookings in force (their window, from its start less the lead) given their ClusterQueue's
    quota, the others' given back. ``client`` is an async context manager factory of a kubernetes_asyncio
    ApiClient."""

    def __init__(self, config: QuotaConfig, client: Callable):
        self.config = config
        self.client = client

    async def __call__(self, reservations: Sequence[Reservation], now: datetime) -> list[str]:
        bookings = in_force(reservations, now, self.config.lead)
        async with await self.client() as api:
            return await sync_quotas(api, self.config, bookings)
