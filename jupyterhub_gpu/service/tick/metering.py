"""One metering tick: the rare reconciliation, then each pass on its own, then the advice; its health recorded.

The service's Application schedules :func:`run_tick` every ``c.GPUService.tick_interval`` seconds with its
one :class:`.context.TickContext` and :class:`.context.TickState`. A pass that fails is logged and the
others run all the same (budgets failing must not keep culling or job limits from running); the next tick
tries again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.tick.advice import advise_sessions, send_digests
from jupyterhub_gpu.service.tick.budgets import enforce_budgets
from jupyterhub_gpu.service.tick.context import TickContext, TickState
from jupyterhub_gpu.service.tick.culling import enforce_culling
from jupyterhub_gpu.service.tick.jobs import announce_finished_runs, enforce_jobs
from jupyterhub_gpu.service.tick.reconcile import reconcile
from jupyterhub_gpu.service.tick.scheduling import enforce_schedule, move_quotas


async def run_tick(ctx: TickContext, state: TickState, now: datetime, log: logging.Logger) -> bool:
    """One tick at ``now``: whether every part of it ran without an error (also counted in ``state.health``)."""
    state.ticks += 1
    failed = False
    try:
        due = state.last_reconcile is None or now - state.last_reconcile >= ctx.reconcile_interval
        if due:
            summary = await reconcile(ctx, now, state.missing)
            state.last_reconcile = now
            if summary["closed"] or summary["recorded"]:
                log.info("reconciled with the hub: %s", summary)
    except HubAPIError as e:
        failed = True
        log.warning("hub request failed during the tick (reconciliation): %s", e)
    except Exception:
        failed = True
        log.exception("reconciliation failed in this tick")
    # each part on its own: budgets failing must not keep culling or job limits from running
    parts = [
        ("budgets", lambda: enforce_budgets(ctx, now)),
        ("culling", lambda: enforce_culling(ctx, now)),
        ("schedule", lambda: enforce_schedule(ctx, now, state.follow)),
        ("kueue quotas", lambda: move_quotas(ctx, now)),
        ("jobs", lambda: enforce_jobs(ctx, now)),
        ("run notices", lambda: announce_finished_runs(ctx, now)),
    ]
    for name, part in parts:
        try:
            await part()
        except HubAPIError as e:
            failed = True
            log.warning("hub request failed during the tick (%s): %s", name, e)
        except Exception:
            failed = True
            log.exception("metering tick: %s failed; the rest of the tick goes on", name)
    advised = await advice_tick(ctx, now, log)
    ok = advised and not failed
    state.health.record(ok, time.time())
    return ok


async def advice_tick(ctx: TickContext, now: datetime, log: logging.Logger) -> bool:
    """Right-sizing advice for closed and long-running sessions, and the weekly digest (docs/advice.md)."""
    try:
        await advise_sessions(ctx, now)
        await send_digests(ctx, now)
    except Exception:
        log.exception("right-sizing advice failed in this tick")
        return False
    return True
