"""What the cull rules know of a session's minutes: :class:`MinuteSignal`, and the one way to make them.

The service's tick reads the ledger's usage-minute rows (:meth:`MinuteReading.of_row`), the simulators read
their traces; both turn what they read into signals with :func:`minute_signals`, so the rules see the same
thing whichever side feeds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from jupyterhub_gpu.clock import aware_utc
from jupyterhub_gpu.rules.samples import memory_unknown

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class MinuteSignal:
    """What is known of one minute of a session, ``[at, at + 1 minute)``.

    ``at`` is an aware datetime (UTC minute boundaries in the service, minutes
    from the session start in the simulator: any alignment works).
    ``gpu_util`` (percent, the session's GPUs averaged over the minute) and
    ``gpu_mem_frac`` (0-1, the highest fraction of GPU memory in use) are
    ``None`` when no sample arrived for the minute. ``kernel_busy``: a kernel
    was busy at some point in the minute. ``user_active``: the user did
    something in the minute (a request to the server that was not the Lab's own
    polling).
    """

    at: datetime
    gpu_util: float | None = None
    gpu_mem_frac: float | None = None
    kernel_busy: bool = False
    user_active: bool = False


@dataclass(frozen=True)
class MinuteReading:
    """A minute's figures before it is placed in time: what :func:`minute_signals` reads of each minute.

    The simulators' trace minutes have these fields themselves; a ledger row is read by :meth:`of_row`.
    """

    gpu_util: float | None
    gpu_mem_frac: float | None
    kernel_busy: bool
    user_active: bool = False
    at: datetime | None = None

    @classmethod
    def of_row(cls, row) -> MinuteReading:
        """The figures of one of the ledger's usage-minute rows (``minute``, ``samples``,
        ``utilization_tenths_sum``, ``memory_used_max_mib``, ``memory_total_mib``, ``busy_kernels_max``,
        ``gpus``): no utilization without a sample, no memory fraction where the total is unknown or the
        server could not measure its own (a share in a container: unknown, not 0). User actions come as the
        session's last activity, not per minute."""
        total = row.memory_total_mib or 0
        total = 0 if memory_unknown(row) else total
        return cls(
            at=aware_utc(row.minute),
            gpu_util=row.utilization_tenths_sum / 10 / row.samples if row.samples else None,
            gpu_mem_frac=(row.memory_used_max_mib / total) if total else None,
            kernel_busy=row.busy_kernels_max > 0,
        )


def minute_signals(minutes: Iterable, started: datetime | None = None) -> list[MinuteSignal]:
    """The cull rules' signals of a run of minutes, oldest first.

    Each minute gives ``gpu_util``, ``gpu_mem_frac``, ``kernel_busy`` and ``user_active`` (a
    :class:`MinuteReading`, or a simulator's trace minute). With ``started`` the minutes are consecutive from
    it (a trace); without, each gives its own ``at`` (the ledger's rows, which may have gaps).
    """
    return [
        MinuteSignal(
            at=m.at if started is None else started + i * MINUTE,
            gpu_util=m.gpu_util,
            gpu_mem_frac=m.gpu_mem_frac,
            kernel_busy=m.kernel_busy,
            user_active=m.user_active,
        )
        for i, m in enumerate(minutes)
    ]


def gpu_memory_high(signals: Sequence[MinuteSignal], threshold: float = 0.9, minutes: int = 10) -> bool:
    """True when GPU memory was above ``threshold`` (a fraction) in each of the last ``minutes`` minutes.

    The minutes are the ``minutes`` latest signals, which must be consecutive
    and all sampled: a gap or a minute without a sample means "not known to be
    high".
    """
    if minutes < 1 or len(signals) < minutes:
        return False
    recent = signals[-minutes:]
    for previous, current in pairwise(recent):
        if current.at - previous.at != MINUTE:
            return False
    return all(s.gpu_mem_frac is not None and s.gpu_mem_frac > threshold for s in recent)
