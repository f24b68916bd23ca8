"""The ledger's published profiles and prices, and the lab's settings: written by the hub, read by the service.

Each hub publishes its own profiles and prices (its rows carry its name, ``Ledger.hub``); the lab's settings are
one for the whole ledger (docs/admin.md, "Two hubs on one ledger").

:class:`PricingBook` is a part of :class:`~jupyterhub_gpu.ledger.store.Ledger` (its ``Session``).
"""

from __future__ import annotations

import json
from datetime import datetime

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError

from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import LabSetting, PriceRecord, SessionRecord
from jupyterhub_gpu.money import from_micros, parse_amount, to_micros

OWN_HUB = ""  # ``pricing(hub=OWN_HUB)``: the ledger's own hub (no hub has an empty name)


class PricingBook:
    """The published profiles and prices, the lab's settings, the currencies charged (part of a ``Ledger``)."""

    def set_pricing(self, profiles: list[dict], currency: str, now: datetime) -> int:
        """Replace this ledger's hub's published profiles and their prices; returns how many were stored.

        Another hub's profiles on the same ledger are left as they are.

        Each dict needs ``slug``, ``gpu_count`` and ``rate_per_minute`` (a Decimal,
        a decimal string or an int, never a float) and may have ``display_name``,
        ``gpu_model``, ``allowed_groups``, the rate's parts ``price_per_gpu_hour``
        and ``price_per_hour`` (so that an admin's edit of one part is priced as
        the spawner prices it) and ``gpu_memory_mib`` (one GPU's memory in the
        hub's inventory); other keys are ignored, so the fields of a spawner
        ``Profile`` can be passed as they are.
        """

        def part(profile: dict, name: str) -> str | None:
            value = profile.get(name)
            return None if value is None else f"{parse_amount(value, f'{name} of profile {slug!r}'):f}"

        rows = []
        for position, profile in enumerate(profiles):
            slug = profile["slug"]
            rate = parse_amount(profile["rate_per_minute"], f"rate_per_minute of profile {slug!r}")
            memory = profile.get("gpu_memory_mib")
            rows.append(
                PriceRecord(
                    hub=self.hub,
                    slug=slug,
                    position=position,
                    display_name=profile.get("display_name") or slug,
                    gpu_model=profile.get("gpu_model") or "",
                    gpu_count=int(profile.get("gpu_count", 0)),
                    rate_micros=to_micros(rate),
                    currency=currency,
                    allowed_groups=json.dumps(sorted(profile.get("allowed_groups") or ())),
                    updated=naive_utc(now),
                    price_per_gpu_hour=part(profile, "price_per_gpu_hour"),
                    price_per_hour=part(profile, "price_per_hour"),
                    gpu_memory_mib=int(memory) if memory else None,
                    # how many servers share one GPU (docs/admin.md, "Shared GPUs"); None: a whole GPU
                    gpu_share=int(profile["gpu_share"]) if profile.get("gpu_share") else None,
                    mig=profile.get("mig") or None,
                    # a spawner Profile says ``preemptible``; a published row ``tier``
                    tier="preemptible" if profile.get("preemptible") or profile.get("tier") == "preemptible" else None,
                )
            )
        with self.Session() as db:
            db.execute(delete(PriceRecord).where(PriceRecord.hub == self.hub))
            db.add_all(rows)
            db.commit()
        return len(rows)

    def set_lab_settings(self, settings: dict[str, str], now: datetime) -> None:
        """Replace the published lab settings (``currency``, ``currency_symbol``, ``timezone``...) with ``settings``.

        They are one for the whole ledger: settings equal to the published ones write nothing, so that the hubs of
        one lab that start at the same time do not collide.
        """
        for name, value in settings.items():
            if not isinstance(name, str) or not name or len(name) > 64 or not isinstance(value, str):
                raise ValueError(f"a lab setting needs a name of 1-64 characters and a string value, got {name!r}")
        for attempt in range(2):
            with self.Session() as db:
                if {r.name: r.value for r in db.scalars(select(LabSetting))} == settings:
                    return  # already published (another hub of the lab's): nothing changes
                db.execute(delete(LabSetting))
                db.add_all(LabSetting(name=k, value=v, updated=naive_utc(now)) for k, v in settings.items())
                try:
                    db.commit()
                    return
                except IntegrityError:  # another hub published at the same moment: read what it wrote, once
                    if attempt:
                        raise

    def lab_settings(self) -> dict[str, str]:
        """The settings the hub published at its last start; empty if it never did."""
        with self.Session() as db:
            return {r.name: r.value for r in db.scalars(select(LabSetting))}

    def session_currencies(self) -> dict[str, int]:
        """How many sessions (running or stopped) were charged in each currency (one GROUP BY)."""
        query = select(SessionRecord.currency, func.count()).group_by(SessionRecord.currency)
        with self.Session() as db:
            return {code: int(n) for code, n in db.execute(query)}

    def pricing(self, hub: str | None = OWN_HUB) -> list[dict]:
        """The profiles a hub published, in their configured order, rates as decimal strings.

        ``hub``: the ledger's own hub by default, another hub's name, or None for every hub's (by hub, then in
        each hub's order), each profile then saying its ``hub``.
        """
        query = select(PriceRecord).order_by(PriceRecord.hub, PriceRecord.position, PriceRecord.slug)
        if hub is not None:
            query = query.where(PriceRecord.hub == (hub or self.hub))
        with self.Session() as db:
            records = list(db.scalars(query))
        return [
            {
                **({"hub": r.hub} if hub is None else {}),
                "slug": r.slug,
                "display_name": r.display_name,
                "gpu_model": r.gpu_model,
                "gpu_count": r.gpu_count,
                "rate_per_minute": f"{from_micros(r.rate_micros):f}",
                "currency": r.currency,
                "allowed_groups": json.loads(r.allowed_groups or "[]"),
                "updated": aware_utc(r.updated),
                # the rate's configured parts (None: published before they were kept) and one GPU's memory
                "price_per_gpu_hour": r.price_per_gpu_hour,
                "price_per_hour": r.price_per_hour,
                "gpu_memory_mib": r.gpu_memory_mib,
                "gpu_share": r.gpu_share,  # part of a GPU (docs/admin.md, "Shared GPUs"): None for a whole GPU
                "mig": r.mig,
                "tier": r.tier,  # "preemptible", or None: full price
            }
            for r in records
        ]
