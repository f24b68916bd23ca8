"""Admin edits of profile prices and access, the rule: what a valid edit is and how it applies over the profiles.

The configuration stays the source of a profile (image, GPUs, limits); an admin
may override, from the usage pages, its prices (per GPU-hour and per hour) and
which JupyterHub groups may use it. One row per edited profile; a field left
``NULL`` keeps the configured value. The spawner applies the overrides when it
builds the spawn form and checks a spawn (``spawners/profiles.py``: ``apply_overrides``), and ``GET
pricing`` shows the rates the spawner will charge (:func:`apply_to_pricing`).
Both price a profile from its parts with the one function
:func:`jupyterhub_gpu.money.profile_rate`, the published parts being the
configured ones (kept by the ledger since migration 0009). An edit whose rate
would not be exact is refused at the form; a stored edit that no longer prices
(the configuration changed under it) is ignored on both sides, with a warning,
instead of failing every spawn.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from decimal import Decimal

from jupyterhub_gpu.money import Currency, MoneyError, parse_amount, profile_rate

log = logging.getLogger("jupyterhub_gpu.access")

_GROUP_RE = re.compile(r"^[^/\x00-\x1f\x7f]{1,255}$")


@dataclass(frozen=True)
class Override:
    """A validated edit (kept by :mod:`jupyterhub_gpu.ledger.queries.overrides`); ``None`` fields keep the
    configured value."""

    slug: str
    price_per_gpu_hour: Decimal | None = None
    price_per_hour: Decimal | None = None
    allowed_groups: tuple[str, ...] | None = None


class AccessError(ValueError):
    """An admin's edit that cannot be used; the message is shown on the form."""


def effective_rate(
    gpu_count: int, price_per_gpu_hour: Decimal, price_per_hour: Decimal, currency: Currency | None = None
) -> Decimal:
    """The exact rate per minute of a profile's prices; MoneyError (naming the field, suggesting prices) otherwise."""
    return profile_rate(gpu_count, price_per_gpu_hour, price_per_hour, currency)


def apply_to_pricing(pricing: list[dict], overrides: dict[str, Override]) -> list[dict]:
    """The published profiles (``Ledger.pricing()``) as the overrides change them, as the spawner's profiles."""
    result = []
    for p in pricing:
        o = overrides.get(p["slug"])
        if o is None:
            result.append(p)
            continue
        p = dict(p)
        if o.price_per_gpu_hour is not None or o.price_per_hour is not None:
            try:
                p["rate_per_minute"] = f"{override_rate(o, p):f}"
            except MoneyError as e:
                log.warning("ignoring the price edit of profile %r, which no longer prices: %s", p["slug"], e)
        if o.allowed_groups is not None:
            p["allowed_groups"] = sorted(o.allowed_groups)
        result.append(p)
    return result


def published_parts(published: dict) -> tuple[Decimal, Decimal]:
    """(price per GPU-hour, price per hour) of a published profile: the configured parts of its rate.

    Rows published before the ledger kept the parts (migration 0009; the hub
    publishes again at every start) have only the total: a GPU profile's rate is
    then taken as all GPU price, a CPU profile's as all price per hour.
    """
    gpu, flat = published.get("price_per_gpu_hour"), published.get("price_per_hour")
    if gpu is not None and flat is not None:
        return Decimal(gpu), Decimal(flat)
    count = int(published.get("gpu_count") or 0)
    total_hour = Decimal(published["rate_per_minute"]) * 60
    return (total_hour / count, Decimal(0)) if count else (Decimal(0), total_hour)


def override_rate(override: Override, published: dict, currency: Currency | None = None) -> Decimal:
    """The rate per minute a published profile gets from an override of its prices (the spawner's rate)."""
    gpu_price, flat = published_parts(published)
    if override.price_per_gpu_hour is not None:
        gpu_price = override.price_per_gpu_hour
    if override.price_per_hour is not None:
        flat = override.price_per_hour
    return effective_rate(int(published.get("gpu_count") or 0), gpu_price, flat, currency)


def parse_groups(text: str) -> tuple[str, ...]:
    """Group names from a form field: separated by commas, spaces or new lines; empty means everyone."""
    names = [n for n in re.split(r"[,\s]+", text or "") if n]
    for n in names:
        if not _GROUP_RE.fullmatch(n):
            raise AccessError(f"{n!r} is not a group name (no '/' or control characters, at most 255 characters)")
    if len(names) > 200:
        raise AccessError("At most 200 groups per profile")
    return tuple(sorted(set(names)))


def parse_price(text: str, what: str) -> Decimal | None:
    """A price from a form field; empty keeps the configured price."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return parse_amount(text, what)
    except MoneyError as e:
        raise AccessError(str(e)) from None


def parse_override(profile, values: dict[str, str], currency: Currency | None = None) -> Override:
    """An admin's edit of ``profile`` from the form's fields; AccessError names the first problem.

    A price whose rate would not be exact names its field and the nearest exact prices
    (round ones at the ``currency``'s minor unit), as a configured profile's does.
    """
    gpu_price = parse_price(values.get("price_per_gpu_hour", ""), "price per GPU-hour")
    if gpu_price is not None and not profile["gpu_count"]:
        raise AccessError(f"The profile {profile['slug']!r} has no GPU: set its price per hour instead")
    flat = parse_price(values.get("price_per_hour", ""), "price per hour")
    groups = None
    if values.get("restrict", "") == "groups":
        groups = parse_groups(values.get("allowed_groups", ""))
        if not groups:
            raise AccessError("Name at least one group, or choose 'everyone'")
    elif values.get("restrict", "") == "everyone":
        groups = ()
    elif values.get("restrict", "") not in ("", "config"):
        raise AccessError(f"Access must be 'config', 'everyone' or 'groups', got {values['restrict']!r}")
    override = Override(profile["slug"], gpu_price, flat, groups)
    if gpu_price is not None or flat is not None:
        try:
            override_rate(override, profile, currency)
        except MoneyError as e:
            raise AccessError(str(e)) from None
    return override
