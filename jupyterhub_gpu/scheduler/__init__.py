"""The lab's GPU scheduler: a snapshot of the pool in, decisions out (docs/scheduling.md).

Pure: no database, no hub, no clock of its own. Each scheduling cycle, the caller (the hub's wait queue, the
service's tick, or the pool simulator :mod:`jupyterhub_gpu.sim.pool`) describes the pool in a :class:`Snapshot`
(free units per GPU model, the waiting requests, the running sessions with their start, tier, last GPU use and
known end, the groups' shares and decayed usage, the reservations, ``now``) and :func:`schedule` returns what
to do, as :class:`Decision` objects, each with its reason in words a student reads:

- ``grant``: start a waiting request now (``at``: the time it may run until, when a reservation follows);
- ``preempt``: stop a preemptible session at ``at`` (``now`` + the grace) to free its GPU for ``for_request``;
- ``end``: tell a running session it may run only until ``at`` (a reservation starts after it);
- ``stop``: a session told to stop at ``at`` has reached it;
- ``refuse``: a request no pool can serve (an unknown model, more GPUs than the pool has), or a reservation
  the pool cannot hold at that time;
- ``queue``: a request that waits, with its place (``position`` of ``length`` for its model), why it stands
  there, and an estimate of the wait (``wait``).

A :class:`Policy` is made of small named plugins over the snapshot, each tested on its own table of cases:

- the order (:class:`Fifo`: today's first come, first served; :class:`FairShare`: the groups' decayed use
  against their shares, first come within a group, ageing so that nothing starves);
- :class:`Preemption` (optional): the preemptible tier: a full-price request that finds no free GPU takes one
  from a preemptible session: an idle one first, then the most recently started, never one younger than
  ``min_runtime``; the victim is stopped after ``grace``;
- :class:`Reservations` (optional): a group's members get its reserved GPUs first during a window; a session of
  anyone else that would still hold one of them at the window's start is told when it must end.

Without the preemption plugin the tier is ignored (a preemptible request waits and runs like any other); without
the reservation plugin reservations are ignored (FIFO today). The same :func:`schedule` runs in the service
and in the simulator, so what the simulator measures is what the scheduler does.

Within a GPU model the queue is strict: a request that cannot be served blocks the ones behind it (so that a
two-GPU request is not starved by a stream of one-GPU requests), except that a reservation's members still
get the GPUs reserved for them. GPU usage is in GPU-hours (floats: a measure of time, never money). A decision's
reason is a key of :data:`TEXTS` (its English template) and typed values (times, durations, :class:`Gpus`,
:class:`Period`, :class:`Grace`, names): every reader words it in their own language through :mod:`.words`.

The parts: ``texts`` (the messages and their typed values), ``words`` (the messages in a language), ``snapshot``
(what a cycle knows and decides), ``policies`` (the named parts of a policy), ``state`` (holders and reservation
windows in a cycle), ``cycle`` (:func:`schedule`), ``preempt`` (the preemptible tier), ``estimate`` (the queue and
the wait), ``bookings`` (whether a booking can be made).
"""

from jupyterhub_gpu.scheduler.bookings import ReservationError, check_reservation, reservation_problems
from jupyterhub_gpu.scheduler.cycle import estimate, schedule
from jupyterhub_gpu.scheduler.estimate import expected_end
from jupyterhub_gpu.scheduler.policies import (
    NO_SHARE_RATIO,
    POLICIES,
    FairShare,
    Fifo,
    Policy,
    Preemption,
    Rank,
    Reservations,
    policy_named,
)
from jupyterhub_gpu.scheduler.snapshot import (
    END,
    GRANT,
    KINDS,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    REFUSE,
    STANDARD,
    STOP,
    TIERS,
    Decision,
    Request,
    Reservation,
    Running,
    SessionLengths,
    SharedGPU,
    Snapshot,
    decayed_usage,
)
from jupyterhub_gpu.scheduler.texts import TEXTS, WEEK, Gpus, Grace, Period, values_from_json, values_json

__all__ = [
    "END", "GRANT", "KINDS", "NO_SHARE_RATIO", "POLICIES", "PREEMPT", "PREEMPTIBLE", "QUEUE", "REFUSE", "STANDARD",
    "STOP", "TEXTS", "TIERS", "WEEK", "Decision", "FairShare", "Fifo", "Gpus", "Grace", "Period", "Policy",
    "Preemption", "Rank", "Request", "Reservation", "ReservationError", "Reservations", "Running", "SessionLengths",
    "SharedGPU", "Snapshot", "check_reservation", "decayed_usage", "estimate", "expected_end", "policy_named",
    "reservation_problems", "schedule", "values_from_json", "values_json",
]  # fmt: skip
