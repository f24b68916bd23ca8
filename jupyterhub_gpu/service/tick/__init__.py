"""The metering tick: what runs every ``c.GPUService.tick_interval`` seconds, as plain coroutines.

Each pass reads the ledger (:mod:`jupyterhub_gpu.ledger`), applies the rules (:mod:`..domain`) and acts
through the one gateway for notices (:mod:`..notify`) and the one hub client (:mod:`..hubapi`). Every pass
takes one frozen :class:`TickContext` (the ledger, the hub, the gateway, the lab's currency and time zone, the
settings) and the moment it runs at, so that tests can drive a pass with any clock. The modules, one per
concern:

- :mod:`.context`: the context, what the tick keeps between ticks (:class:`TickState`), its health for
  ``/metrics``, and the event loop's turns during a pass;
- :mod:`.metering`: one tick (:func:`run_tick`), each pass on its own;
- :mod:`.reconcile`: the rare reconciliation with the hub's list of servers;
- :mod:`.budgets`: budget alerts and stops;
- :mod:`.culling`: idle warnings and stops, the GPU-memory notices;
- :mod:`.scheduling`: the scheduler's stop orders, preempted servers put back in the queue;
- :mod:`.jobs`: notebook jobs the runner could not end, finished runs' notices;
- :mod:`.advice`: right-sizing advice and the weekly digest;
- :mod:`.stops`: the one way a pass stops a server.
"""

from jupyterhub_gpu.service.tick.advice import advise_sessions, send_digests, update_advice
from jupyterhub_gpu.service.tick.budgets import budget_notify, deliver, enforce_budgets
from jupyterhub_gpu.service.tick.context import (
    LoopSlice,
    ScheduleFollow,
    TickContext,
    TickHealth,
    TickResult,
    TickState,
    open_session_pages,
)
from jupyterhub_gpu.service.tick.culling import (
    enforce_culling,
    sessions_signals,
    signals_since,
)
from jupyterhub_gpu.service.tick.jobs import announce_finished_runs, enforce_jobs, run_announcer
from jupyterhub_gpu.service.tick.metering import run_tick
from jupyterhub_gpu.service.tick.reconcile import reconcile
from jupyterhub_gpu.service.tick.scheduling import enforce_schedule, resume_server

__all__ = [
    "LoopSlice",
    "ScheduleFollow",
    "TickContext",
    "TickHealth",
    "TickResult",
    "TickState",
    "advise_sessions",
    "announce_finished_runs",
    "budget_notify",
    "deliver",
    "enforce_budgets",
    "enforce_culling",
    "enforce_jobs",
    "enforce_schedule",
    "open_session_pages",
    "reconcile",
    "resume_server",
    "run_announcer",
    "run_tick",
    "send_digests",
    "sessions_signals",
    "signals_since",
    "update_advice",
]
