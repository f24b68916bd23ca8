"""The admins' edits of profile prices and access in the ledger (``gpu_profile_overrides``, one row per hub and
profile: an admin of one hub edits only its own profiles).

:mod:`jupyterhub_gpu.rules.overrides` validates the edits and applies them over the configured
profiles; here they are read and written, as its :class:`~jupyterhub_gpu.rules.overrides.Override` values
(``None``: the configured value).
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import ProfileOverride
from jupyterhub_gpu.ledger.pricing import OWN_HUB
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.overrides import Override


def _override(row: ProfileOverride) -> Override:
    return Override(
        slug=row.slug,
        price_per_gpu_hour=Decimal(row.price_per_gpu_hour) if row.price_per_gpu_hour is not None else None,
        price_per_hour=Decimal(row.price_per_hour) if row.price_per_hour is not None else None,
        allowed_groups=tuple(json.loads(row.allowed_groups)) if row.allowed_groups is not None else None,
    )


def load_overrides(ledger: Ledger, hub: str = OWN_HUB) -> dict[str, Override]:
    """Every override of a hub's profiles, by slug (one small query): each hub's admins edit its own.

    ``hub``: the ledger's own hub by default, or another hub's name (a session of that hub is priced and advised
    by its own hub's profiles, as ``Ledger.pricing(hub)`` reads them)."""
    with ledger.Session() as db:
        rows = db.scalars(select(ProfileOverride).where(ProfileOverride.hub == (hub or ledger.hub)))
        return {row.slug: _override(row) for row in rows}


def _text(price: Decimal | None) -> str | None:
    return None if price is None else f"{price:f}"


def save_override(ledger: Ledger, override: Override, now: datetime, by: str) -> None:
    """Create or replace the override of one of the ledger's hub's profiles."""
    with ledger.Session() as db:
        row = db.get(ProfileOverride, (ledger.hub, override.slug))
        if row is None:
            row = ProfileOverride(hub=ledger.hub, slug=override.slug)
            db.add(row)
        row.price_per_gpu_hour = _text(override.price_per_gpu_hour)
        row.price_per_hour = _text(override.price_per_hour)
        groups = override.allowed_groups
        row.allowed_groups = json.dumps(sorted(groups)) if groups is not None else None
        row.updated = naive_utc(now)
        row.updated_by = by
        db.commit()


def delete_override(ledger: Ledger, slug: str) -> bool:
    """Back to the configured values; False if there was no override."""
    with ledger.Session() as db:
        row = db.get(ProfileOverride, (ledger.hub, slug))
        if row is None:
            return False
        db.delete(row)
        db.commit()
        return True
