"""The preemptible tier in a cycle: which preemptible sessions stop, and for which full-price request."""

from __future__ import annotations

from datetime import datetime, timedelta

from jupyterhub_gpu.scheduler.policies import Preemption
from jupyterhub_gpu.scheduler.snapshot import PREEMPT, PREEMPTIBLE, Decision, Running
from jupyterhub_gpu.scheduler.state import Cycle
from jupyterhub_gpu.scheduler.texts import duration_text


def _is_idle(session: Running, now: datetime, rule: Preemption) -> bool:
    return session.last_gpu_use is None or now - session.last_gpu_use >= rule.idle_after


def preempt(cycle: Cycle) -> list[Decision]:
    """Victims for the full-price requests left waiting, in order, model by model."""
    rule, now = cycle.policy.preemption, cycle.snapshot.now
    soon = now + rule.grace
    # GPUs that free within the grace anyway (sessions told to stop, known ends) serve the queue first
    supply = {m: max(0, n) for m, n in cycle.general.items()}
    for session in cycle.running:
        known = [t for t in (session.stop_at, session.ends) if t is not None]
        if known and min(known) <= soon:
            supply[session.model] = supply.get(session.model, 0) + session.count
    victims: dict[str, list[Running]] = {}
    for session in cycle.running:
        if session.tier != PREEMPTIBLE or session.stop_at is not None or session.id in cycle.ends:
            continue
        if session.ends is not None and session.ends <= soon:
            continue
        if now - session.started < rule.min_runtime:
            continue
        victims.setdefault(session.model, []).append(session)
    for candidates in victims.values():
        # an idle GPU first, then the most recently started
        candidates.sort(key=lambda s: (not _is_idle(s, now, rule), -s.started.timestamp(), s.id))
    grace = duration_text(rule.grace) if rule.grace >= timedelta(minutes=1) else f"{rule.grace.seconds} s"
    out = []
    done: set[str] = set()
    for request in cycle.order:
        model = request.model
        if request.id in cycle.granted or model in done:
            continue
        blocked = cycle.blocked_by.get(model)
        if request.tier == PREEMPTIBLE or (blocked is not None and blocked.key == "reserved.soon"):
            done.add(model)  # a GPU taken now would not serve it either; behind it nobody preempts
            continue
        need = request.count - supply.get(model, 0)
        if need <= 0:
            supply[model] -= request.count
            continue
        chosen, freed = [], 0
        for session in victims.get(model, []):
            if freed >= need:
                break
            chosen.append(session)
            freed += session.count
        if freed < need:
            done.add(model)  # not enough to take: it waits, and the queue behind it with it
            continue
        supply[model] = freed - need
        for session in chosen:
            victims[model].remove(session)
            key = "preempt" if session.checkpoints else "preempt.save"
            out.append(
                Decision(
                    PREEMPT,
                    key,
                    {"grace": grace},
                    session=session.id,
                    model=model,
                    at=soon,
                    for_request=request.id,
                )
            )
    return out
