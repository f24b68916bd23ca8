"""The one clock: every part of jupyterhub-gpu asks this module for the time.

Tests move time by patching :func:`utcnow` instead of sleeping.
"""

from datetime import datetime, timezone


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def naive_utc(moment: datetime) -> datetime:
    """``moment`` as the ledger stores times: naive UTC (an aware time is converted, a naive one is taken as UTC)."""
    return moment.astimezone(timezone.utc).replace(tzinfo=None) if moment.tzinfo else moment


def aware_utc(moment: datetime | None) -> datetime | None:
    """A time read from the ledger (naive UTC) as an aware UTC datetime; None and aware times pass as they are."""
    return moment.replace(tzinfo=timezone.utc) if moment is not None and moment.tzinfo is None else moment


def isoformat(moment: datetime) -> str:
    """ISO 8601 in UTC with a trailing ``Z`` (``2026-11-29T19:46:04.123456Z``)."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
