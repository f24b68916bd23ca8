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
from jupyterhub_gpu.service.feeds.kueue import KueueReadError
from jupyterhub_gpu.service.kueue.cluster import QuotaError, sync_quotas
from jupyterhub_gpu.service.kueue.plan import QuotaConfig, in_force

log = logging.getLogger("jupyterhub_gpu.service")


class QuotaMover:
    """Each tick: the bookings in force (their window, from its start less the lead) given their ClusterQueue's
    quota, the others' given back. ``client`` makes a kubernetes_asyncio ApiClient (a coroutine function), one
    kept for every tick (made again after a failed pass); ``hub``: the hub whose quotas this service moves.

    With no ClusterQueue configured (``c.Kueue.cluster_queues`` emptied, say in the middle of a window) it only
    gives back what this hub's service moved before, once: its first pass that reads the cluster restores them,
    and later ticks do nothing (without Kubernetes credentials or Kueue there is nothing to give back)."""

    def __init__(self, config: QuotaConfig, client: Callable, hub: str | None = None):
        self.config = config
        self.client = client
        self.hub = hub
        self._api = None
        self.restored = False  # restore-only mode: done

    @property
    def idle(self) -> bool:
        """Whether it has nothing more to do: no ClusterQueue configured, and what was moved given back."""
        return not self.config.enabled and self.restored

    async def __call__(self, reservations: Sequence[Reservation], now: datetime) -> list[str]:
        if not self.config.enabled:
            return await self._restore_once()
        bookings = in_force(reservations, now, self.config.lead)
        return await self._pass(bookings)

    async def _pass(self, bookings: Sequence[Reservation]) -> list[str]:
        if self._api is None:
            self._api = await self.client()
        try:
            return await sync_quotas(self._api, self.config, bookings, self.hub)
        except BaseException:
            await self.close()  # a client whose credentials or connection failed is not kept
            raise

    async def _restore_once(self) -> list[str]:
        if self.restored:
            return []
        try:
            written = await self._pass([])
        except QuotaError as e:
            if e.status not in (403, 404):
                raise  # the cluster could not answer now: again next tick
            written = []  # no Kueue on this cluster, or no right to its ClusterQueues: nothing was moved
        except KueueReadError as e:
            log.debug("Kueue reservations: no cluster to give quotas back on (%s)", e)
            written = []
        self.restored = True
        await self.close()
        return written

    async def close(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.close()
