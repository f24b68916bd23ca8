"""The one clock: every part of jupyterhub-gpu asks this module for the time.

Tests move time by patching :func:`utcnow` instead of sleeping.
"""

from datetime import datetime, timezone


def utcnow() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def isoformat(moment: datetime) -> str:
    """ISO 8601 in UTC with a trailing ``Z`` (``2026-11-29T19:46:04.123456Z``)."""
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
