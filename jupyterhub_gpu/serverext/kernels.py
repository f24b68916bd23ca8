"""The server's kernels as the extension sees them: how many run, how many are busy, and their latest activity."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass(frozen=True)
class KernelCount:
    """Running and busy kernels, and the latest activity of any of them (aware UTC), None when none had any."""

    running: int = 0
    busy: int = 0
    last_activity: datetime | None = None


def count_kernels(kernel_manager) -> KernelCount:
    """Count the kernels of ``kernel_manager`` (on the event loop, where the kernel manager lives)."""
    running = busy = 0
    last = None
    for kid in list(kernel_manager.list_kernel_ids()):
        try:
            kernel = kernel_manager.get_kernel(kid)
        except KeyError:
            continue  # it ended meanwhile
        running += 1
        if getattr(kernel, "execution_state", "idle") == "busy":
            busy += 1
        activity = getattr(kernel, "last_activity", None)
        if activity is not None:
            activity = activity if activity.tzinfo else activity.replace(tzinfo=timezone.utc)
            last = activity if last is None or activity > last else last
    return KernelCount(running, busy, last)
