"""What an idle GPU-minute is: the one definition that culling, its report, the advice, ``/metrics`` and the
simulators read.

A session's minute is *sampled* when its server pushed at least one sample in it. Its GPUs *worked* in it when
their mean utilization over the minute's samples was at or above the threshold (:data:`IDLE_UTIL_PERCENT`, 5%
unless a cull rule sets its own ``util_threshold``). A sampled minute in which the GPUs did not work is *idle*
unless a kernel was busy in it (:attr:`IdleRule.busy_kernel_counts`): a notebook that computes on the CPU
between GPU steps is working. On a shared GPU or a MIG slice a server is judged on its own work
(:func:`own_gpu_utilization`), so a neighbour's work never keeps it from being idle. docs/culling.md explains
the choice.

The definition is :data:`IDLE` (read it as ``idle.IDLE`` at the moment of judging, never copied at import:
the idle test replaces it and sees every consumer follow). Each question comes in two forms that give the
same answer: on a minute's mean utilization (the cull rules' :class:`~.signals.MinuteSignal`, the simulator's
traces), and on the ledger's integer sums (``Σ(utilization × 10)`` over ``samples``), where the very same
method, given SQLAlchemy columns instead of integers, builds the ledger query's expression.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The lab's idle threshold: a minute's mean GPU utilization (percent) under this is no GPU work.
IDLE_UTIL_PERCENT = 5


@dataclass(frozen=True)
class IdleRule:
    """The definition of an idle GPU-minute: a utilization threshold, and whether a busy kernel is work."""

    #: a minute's mean GPU utilization (percent) at or above this is GPU work
    util_percent: float = IDLE_UTIL_PERCENT
    #: a busy kernel in a minute makes it not idle, whatever its GPUs did
    busy_kernel_counts: bool = True

    def __post_init__(self):
        percent = self.util_percent
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 < percent <= 100:
            raise ValueError(f"util_percent must be a percentage above 0 and at most 100, got {percent!r}")
        if not isinstance(self.busy_kernel_counts, bool):
            raise ValueError(f"busy_kernel_counts must be true or false, got {self.busy_kernel_counts!r}")

    def gpu_worked(self, utilization: float | None, threshold: float | None = None) -> bool:
        """Whether the GPUs worked in a minute of this mean utilization (None: no sample, no known work).

        ``threshold``: a cull rule's own ``util_threshold`` in place of :attr:`util_percent`.
        """
        limit = self.util_percent if threshold is None else threshold
        return utilization is not None and utilization >= limit

    def gpu_idle(self, utilization: float | None, threshold: float | None = None) -> bool:
        """Whether a minute was sampled and its GPUs did no work (whatever its kernels did)."""
        return utilization is not None and not self.gpu_worked(utilization, threshold)

    def busy(self, utilization: float | None, kernel_busy: bool, threshold: float | None = None) -> bool:
        """Whether a minute was work: its GPUs worked, or (where kernels count) a kernel was busy in it."""
        return self.gpu_worked(utilization, threshold) or (self.busy_kernel_counts and bool(kernel_busy))

    def idle(self, utilization: float | None, kernel_busy: bool, threshold: float | None = None) -> bool:
        """Whether a minute was an idle GPU-minute: sampled, and no work (:meth:`busy`) in it."""
        return utilization is not None and not self.busy(utilization, kernel_busy, threshold)

    # -- the same questions on the ledger's sums: integers, or SQLAlchemy columns for the query --

    def worked_in_tenths(self, tenths_sum, samples):
        """:meth:`gpu_worked` on a minute's sums: ``Σ(utilization × 10) >= threshold × 10 × samples``.

        Exact in integers (no division); given columns, the SQL expression of it.
        """
        return tenths_sum >= self._tenths * samples

    def idle_in_tenths(self, tenths_sum, samples, busy_kernels):
        """:meth:`idle` on a minute's sums (``busy_kernels``: the most kernels busy at once in it).

        Built with ``&`` so that the same code judges integers (a bool) and columns (an SQL ``AND``).
        """
        quiet = (samples > 0) & (tenths_sum < self._tenths * samples)
        if self.busy_kernel_counts:
            quiet = quiet & (busy_kernels == 0)
        return quiet

    @property
    def _tenths(self):
        tenths = self.util_percent * 10
        return int(tenths) if float(tenths).is_integer() else tenths


#: The definition in force.
IDLE = IdleRule()


def own_gpu_utilization(utilization: float, scope: str | None, processes: int | None) -> float:
    """The utilization of a GPU that counts as this server's own, from what its server reported of it.

    On a shared GPU or a MIG slice the rules judge a server on its own figures. A server whose driver gives
    per-process utilization reports its own (``scope`` "own"): taken as it is. Without it the server reports
    the whole GPU's (``scope`` "gpu"), which its neighbours' work moves: a server with no process of its own on
    the GPU (``processes`` 0) did none of that work, so its utilization is 0 and ``gpu_idle`` judges it idle
    whatever its neighbours do. With processes of its own the whole GPU's figure is all there is
    (docs/culling.md says what that means). A whole GPU (no ``scope``) or an unknown process count is taken
    as reported. Applied once, when a sample is read (:mod:`.samples`): every minute the ledger keeps is
    already the server's own.
    """
    if scope == "gpu" and processes == 0:
        return 0.0
    return utilization


@dataclass(frozen=True)
class MinuteCounts:
    """A session's sampled minutes in a window, and of those the idle ones (:meth:`IdleRule.idle_in_tenths`)."""

    sampled: int = 0
    idle: int = 0
