"""One scheduling cycle: :func:`schedule` (refusals, stops, grants, preemptions, end warnings, the queue)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from jupyterhub_gpu.scheduler.estimate import queue_decisions
from jupyterhub_gpu.scheduler.policies import Policy
from jupyterhub_gpu.scheduler.preempt import preempt
from jupyterhub_gpu.scheduler.snapshot import (
    END,
    FREE_GPU,
    GRANT,
    PREEMPTIBLE,
    QUEUE,
    REFUSE,
    STOP,
    Decision,
    Request,
    Snapshot,
    aware,
)
from jupyterhub_gpu.scheduler.state import Cycle, Holder, Split, Windows, holder_of, limit_values, serve
from jupyterhub_gpu.scheduler.texts import TEXTS, Gpus


def _refusal(request: Request, units: Mapping[str, int]) -> Decision | None:
    total = units.get(request.model, 0)
    whole = isinstance(request.count, int) and not isinstance(request.count, bool)
    values = {
        "model": request.model,
        "count": request.count if whole else str(request.count),
        "gpus": Gpus(request.count, request.model) if whole else str(request.count),
        "total": total,
    }
    if isinstance(request.count, bool) or not isinstance(request.count, int) or request.count < 1:
        return Decision(REFUSE, "refuse.bad_count", values, request=request.id, model=request.model)
    if total <= 0:
        values["models"] = ", ".join(sorted(m for m, n in units.items() if n > 0)) or "none"
        return Decision(REFUSE, "refuse.model", values, request=request.id, model=request.model)
    if request.count > total:
        return Decision(REFUSE, "refuse.count", values, request=request.id, model=request.model)
    return None


def schedule(snapshot: Snapshot, policy: Policy) -> list[Decision]:
    """One scheduling cycle: the decisions for ``snapshot`` under ``policy``.

    In this order: refusals, stops, grants, preemptions, end warnings, then the queue (per model, in order).
    A caller applies the stops before the grants: their GPUs are granted in the same cycle.
    """
    now = aware(snapshot.now, "snapshot.now")
    zone = snapshot.zone
    units = snapshot.units()
    decisions: list[Decision] = []

    waiting = []
    for request in snapshot.waiting:
        refusal = _refusal(request, units)
        if refusal is not None:
            decisions.append(refusal)
        else:
            waiting.append(request)

    windows = Windows(snapshot, policy.reservations, units) if policy.reservations is not None else None
    if windows is not None:
        decisions.extend(windows.refused)

    free = dict(snapshot.free)
    running, stopping = [], set()
    for session in snapshot.running:
        if session.stop_at is not None and session.stop_at <= now:
            key = f"stop.{session.stop_key}" if f"stop.{session.stop_key}" in TEXTS else "stop"
            values = {"at": session.stop_at}
            decisions.append(Decision(STOP, key, values, session=session.id, model=session.model, at=now))
            stopping.add(session.id)
            if session.share <= 1:
                free[session.model] = free.get(session.model, 0) + session.count
        else:
            running.append(session)

    cycle = Cycle(snapshot, policy, units, running, windows)
    cycle.ranks = policy.order.ranks(snapshot, waiting)
    tiered = policy.preemption is not None
    cycle.order = sorted(
        waiting, key=lambda r: (tiered and r.tier == PREEMPTIBLE, cycle.ranks[r.id].value, r.arrived, r.id)
    )
    cycle.holders = {m: [] for m in units}
    gpus, on = snapshot.placed()
    splits = {g.id: Split(g.id, g.model, g.split) for g in gpus}
    for i, session in enumerate(sorted(running, key=lambda s: (s.started, s.id))):
        holder = holder_of(session, i)
        if session.id in on:
            splits[on[session.id]].shares.append(holder)
        else:
            cycle.holders.setdefault(session.model, []).append(holder)
    for gpu in gpus:
        split = splits[gpu.id]
        gone = sum(1 for s in snapshot.running if s.id in stopping and on.get(s.id) == gpu.id)
        split.unknown = max(0, gpu.taken - len(split.shares) - gone)
        if split.shares or split.unknown:
            cycle.holders.setdefault(gpu.model, []).append(split)
        else:  # its last shares stop now: the GPU is whole again
            free[gpu.model] = free.get(gpu.model, 0) + 1
    _reserve(cycle, free)
    _grant(cycle)
    _limits(cycle)
    decisions.extend(cycle.granted.values())
    preempted = preempt(cycle) if policy.preemption is not None else []
    decisions.extend(preempted)
    decisions.extend(_end_warnings(cycle, {d.session for d in preempted}))
    decisions.extend(queue_decisions(cycle, decisions))
    # each decision says its times in the lab's zone, without the day on the cycle's day
    return [replace(d, now=now, zone=zone) for d in decisions]


def _reserve(cycle: Cycle, free: Mapping[str, int]) -> None:
    """Set the reserved units aside that no member uses now, and what is left for anyone."""
    windows = cycle.windows
    for model in cycle.units:
        active = windows.active(model) if windows is not None else []
        left = free.get(model, 0)
        if active:
            room = {r.id: r.count for _, _, r in active}
            for h in sorted(cycle.holders[model], key=lambda h: (h.started, h.order)):
                serve(room, [r for _, _, r in active], h)
            mine = {}
            for _, _, r in active:
                mine[r.id] = min(room[r.id], left)
                left -= mine[r.id]
            cycle.reserved_free[model] = mine
        cycle.general[model] = left


def _joinable(cycle: Cycle, request: Request) -> Split | None:
    """A GPU split into the request's shares with one free, the fullest first; never one of a reservation in
    force whose shares are all its members' when the request is not a member (it is the class's GPU)."""
    active = cycle.windows.active(request.model) if cycle.windows is not None else []
    found = []
    for h in cycle.holders.get(request.model, ()):
        if not isinstance(h, Split) or h.split != request.share or h.free_slots <= 0:
            continue
        if any(h.member_of(r.group) and not request.member_of(r.group) for _, _, r in active):
            continue
        found.append(h)
    return min(found, key=lambda h: (h.free_slots, h.id), default=None)


def _grant(cycle: Cycle) -> None:
    """Grant the waiting requests in order while their model has units; the queue of a model is strict.

    A share request takes a free share of a GPU already split into its shares, else a whole free GPU, which it
    splits."""
    now, windows = cycle.snapshot.now, cycle.windows
    reservation_of = {r.id: r for r in cycle.snapshot.reservations}
    blocked = dict.fromkeys(cycle.units, False)
    later = len(cycle.running)
    for request in cycle.order:
        model = request.model
        count = 1 if request.share > 1 else request.count
        candidate = Holder(request.id, model, count, now, later, request.tier, None, request.member_of)
        split = _joinable(cycle, request) if request.share > 1 and not blocked[model] else None
        if split is not None:
            split.shares.append(candidate)
            if windows is not None:
                moment = windows.limit(model, split, cycle.holders[model], candidate.id)
                if moment is not None and windows.stop_time(moment) - now < cycle.policy.reservations.min_run:
                    split.shares.remove(candidate)
                    split = None
            if split is not None:
                later += 1
                values = {"count": 1, "gpus": Gpus(1, model), "model": model}
                cycle.granted[request.id] = Decision(
                    GRANT, "grant", values, request=request.id, model=model, device=split.id
                )
                continue
        mine = cycle.reserved_free.get(model, {})
        homes = [rid for rid, n in mine.items() if n > 0 and request.member_of(reservation_of[rid].group)]
        from_reserved = min(count, sum(mine[rid] for rid in homes))
        from_general = count - from_reserved
        if from_general and (blocked[model] or cycle.general[model] < from_general):
            if not blocked[model] and windows is not None:
                # the GPUs it would take are set aside for a reservation in force: say so
                held = [(end, r) for _, end, r in windows.active(model) if mine.get(r.id) and r.id not in homes]
                if held and cycle.general[model] + sum(mine[res.id] for _, res in held) >= from_general:
                    end, res = held[0]
                    values = {"gpus": Gpus(res.count, model), "model": model, "label": res.name, "end": end}
                    cycle.blocked_by[model] = Decision(QUEUE, "reserved", values)
            blocked[model] = True
            continue
        unit: Holder | Split = candidate
        if request.share > 1:
            unit = Split(f"new:{request.id}", model, request.share, shares=[candidate])
        if windows is not None and from_general:
            moment = windows.limit(model, unit, [*cycle.holders[model], unit], candidate.id)
            if moment is not None and windows.stop_time(moment) - now < cycle.policy.reservations.min_run:
                if not blocked[model]:
                    res = windows.reservation_for(model, moment, unit)
                    values = {"model": model, "label": res.name, "start": moment}
                    cycle.blocked_by[model] = Decision(QUEUE, "reserved.soon", values)
                blocked[model] = True
                continue
        later += 1
        cycle.holders[model].append(unit)
        cycle.general[model] -= from_general
        take, label = from_reserved, None
        for rid in homes:
            used = min(take, mine[rid])
            mine[rid] -= used
            take -= used
            label = label or (reservation_of[rid].name if used else None)
        values = {"count": count, "gpus": Gpus(count, model), "model": model}
        device = FREE_GPU if request.share > 1 else None
        if label is not None and not from_general:
            values["label"] = label
            cycle.granted[request.id] = Decision(
                GRANT, "grant.reserved", values, request=request.id, model=model, device=device
            )
        else:
            cycle.granted[request.id] = Decision(GRANT, "grant", values, request=request.id, model=model, device=device)


def _limits(cycle: Cycle) -> None:
    """Who must be gone before each window (running sessions and this cycle's grants); grants get their limit.

    Derived afresh each cycle: a session told an end before is chosen again first while an end is still needed,
    and gets none once it is not (the caller withdraws its order)."""
    windows = cycle.windows
    if windows is None:
        return
    by_id = {s.id: s for s in cycle.running}
    for model in cycle.units:
        for moment in windows.moments(model):
            present = [h for h in cycle.holders[model] if h.left(cycle.ends)]
            for _, res, ending in windows.to_end(model, moment, present):
                until = windows.stop_time(moment)
                for session_id in ending:
                    session = by_id.get(session_id)
                    told = session.stop_at if session is not None and session.stop_key == "reserved" else None
                    # an end told before still serves when it is neither later than needed nor earlier than the
                    # window asks (a booking made late is told "now + lead" once, not again each cycle)
                    mine = (
                        told if told is not None and min(moment - windows.rule.lead, until) <= told <= until else until
                    )
                    cycle.ends.setdefault(session_id, (mine, moment, res))
    for request_id, grant in list(cycle.granted.items()):
        if request_id in cycle.ends:
            until, moment, res = cycle.ends.pop(request_id)
            values = limit_values(until, moment, res)
            cycle.granted[request_id] = Decision(
                GRANT, "grant.until", values, request=request_id, model=grant.model, at=until
            )


def _end_warnings(cycle: Cycle, preempted: Collection[str | None]) -> list[Decision]:
    """An ``end`` for every running session that must end before a window, told already or not: the earlier stop
    wins (a preemption in this cycle, or an end told before that is still early enough and not too early)."""
    by_id = {s.id: s for s in cycle.running}
    out = []
    for session_id, (until, moment, res) in cycle.ends.items():
        session = by_id.get(session_id)
        if session is None or session_id in preempted:
            continue
        values = limit_values(until, moment, res)
        out.append(Decision(END, "end", values, session=session_id, reservation=res.id, model=session.model, at=until))
    return out


def estimate(snapshot: Snapshot, policy: Policy, request_id: str) -> Decision | None:
    """The queue decision of one waiting request (``status``: ``Waiting for a free A100 — position 2 of 5 — about
    12 min``), or None when it would be granted (or refused) now."""
    for decision in schedule(snapshot, policy):
        if decision.kind == QUEUE and decision.request == request_id:
            return decision
    return None
