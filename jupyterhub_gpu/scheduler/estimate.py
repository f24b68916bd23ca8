"""The queue decisions: each waiting request's place, why it stands there, and the estimate of its wait."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from jupyterhub_gpu.scheduler.snapshot import (
    END,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    Decision,
    Request,
    Running,
    SessionLengths,
)
from jupyterhub_gpu.scheduler.state import Cycle, Split


def minutes_of(delta: timedelta) -> float:
    return delta / timedelta(minutes=1)


class History:
    """The snapshot's history, with every profile's lengths together for a profile that has none (made once)."""

    def __init__(self, history: Mapping[str, SessionLengths]):
        self.history = history
        self._pooled: SessionLengths | None = None

    def of(self, profile: str) -> SessionLengths:
        lengths = self.history.get(profile)
        if lengths is not None and len(lengths):
            return lengths
        if self._pooled is None:
            self._pooled = SessionLengths(m for lengths in self.history.values() for m in lengths.lengths)
        return self._pooled

    def median(self, profile: str) -> float:
        found = self.of(profile).median()
        return math.inf if found is None else found


def expected_end(session: Running, now: datetime, history: Mapping[str, SessionLengths] | History) -> float:
    """Minutes from ``now`` until ``session`` is expected to end (``math.inf``: nothing is known).

    The earliest of its known ends (a stop it was told, its ``ends``) and, from the history of its profile
    (of every profile when its own has none), the median time left of past sessions that ran longer.
    """
    known_history = history if isinstance(history, History) else History(history)
    known = [t for t in (session.stop_at, session.ends) if t is not None]
    best = min((minutes_of(t - now) for t in known), default=math.inf)
    remaining = known_history.of(session.profile).remaining(minutes_of(now - session.started))
    if remaining is not None:
        best = min(best, remaining)
    return max(0.0, best)


def queue_decisions(cycle: Cycle, decided: Sequence[Decision]) -> list[Decision]:
    """The queue decisions: position, reason and estimate of each waiting request, model by model."""
    snapshot, rule = cycle.snapshot, cycle.policy.preemption
    now, history = snapshot.now, History(snapshot.history)
    told: dict[str, datetime] = {}
    for d in decided:
        if d.kind in (PREEMPT, END) and d.session and d.at is not None:
            told[d.session] = min(d.at, told.get(d.session, d.at))
    requests = {r.id: r for r in snapshot.waiting}
    by_model: dict[str, list[Request]] = {}
    for request in cycle.order:
        if request.id not in cycle.granted:
            by_model.setdefault(request.model, []).append(request)
    by_id = {s.id: s for s in cycle.running}

    def times(unit_id: str) -> tuple[float, float]:
        """(minutes until it frees for a full-price request, ... for a preemptible one) of a session or a grant."""
        session = by_id.get(unit_id)
        if session is None:  # granted in this cycle
            request, grant = requests[unit_id], cycle.granted[unit_id]
            length = history.median(request.profile)
            if grant.at is not None:
                length = min(length, minutes_of(grant.at - now))
            return length, length
        # the stops this cycle gives, not those told before and not given again (they are withdrawn)
        session = replace(session, stop_at=told.get(session.id))
        natural = expected_end(session, now, history)
        standard = natural
        if rule is not None and session.tier == PREEMPTIBLE:
            # a planned stop never shields it: a full-price request may take it at its minimum runtime
            preempted = max(now, session.started + rule.min_runtime) + rule.grace
            standard = min(natural, minutes_of(preempted - now))
        return standard, natural

    out = []
    for model, queue in by_model.items():
        # each GPU of the model: (minutes until it is free for a full-price request, ... for a preemptible one); a
        # GPU split into shares frees when its last share does; its free shares serve share requests now
        units: list[tuple[float, float]] = [(0.0, 0.0)] * max(0, cycle.general.get(model, 0))
        slots: dict[int, list[tuple[float, float]]] = {}
        for holder in cycle.holders.get(model, ()):
            if isinstance(holder, Split):
                ends = [times(h.id) for h in holder.shares]
                if holder.unknown or not ends:
                    ends.append((math.inf, math.inf))
                units.append((max(e[0] for e in ends), max(e[1] for e in ends)))
                slots.setdefault(holder.split, []).extend([(0.0, 0.0)] * holder.free_slots)
            else:
                units.extend([times(holder.id)] * holder.count)
        if cycle.windows is not None:
            # idle reserved units: free for everyone when their window ends
            for _, end, res in cycle.windows.active(model):
                after = minutes_of(end - now)
                units.extend([(after, after)] * cycle.reserved_free.get(model, {}).get(res.id, 0))
        waits = _estimate(queue, units, rule is not None, history, slots)
        for position, request in enumerate(queue, start=1):
            rank = cycle.ranks[request.id]
            key, values = rank.key, dict(rank.values)
            blocked = cycle.blocked_by.get(model)
            if position == 1 and blocked is not None:
                key, values = blocked.key, dict(blocked.values)
            elif rule is not None and request.tier == PREEMPTIBLE:
                key, values = "tier", {"model": model}
            wait = waits[request.id]
            out.append(
                Decision(
                    QUEUE,
                    key,
                    values,
                    request=request.id,
                    model=model,
                    position=position,
                    length=len(queue),
                    wait=None if wait is None else timedelta(seconds=round(wait * 60)),
                )
            )
    return out


def _estimate(
    queue: Sequence[Request],
    units: list[tuple[float, float]],
    tiered: bool,
    history: History,
    slots: Mapping[int, list[tuple[float, float]]] | None = None,
) -> dict[str, float | None]:
    """Minutes each request of one model's queue is expected to wait (None: nothing is known).

    Each GPU frees at its expected time; each request in turn takes the ``count`` GPUs that free first (never
    starting before the request ahead of it: the queue is strict) and holds them for its profile's median
    session length. A share request of k takes a free share of a GPU split in k (``slots``: k -> the times its
    free shares are free), else a GPU, which it splits (its other shares serve the share requests behind it).
    Full-price requests see a preemptible session free at its preemption; preemptible requests (behind every
    full-price one) at its natural end.
    """
    heap = list(units)
    heapq.heapify(heap)
    shares = {k: sorted(v) for k, v in (slots or {}).items()}
    preemptible_phase = False
    last = 0.0
    out: dict[str, float | None] = {}
    for request in queue:
        if tiered and not preemptible_phase and request.tier == PREEMPTIBLE:
            preemptible_phase = True
            heap = [(natural, natural) for _, natural in heap]
            heapq.heapify(heap)
            shares = {k: sorted((n, n) for _, n in v) for k, v in shares.items()}
        k = request.share
        if k > 1:
            free = shares.setdefault(k, [])
            if free:
                start = max(free.pop(0)[0], last)
            elif heap:
                start = max(heapq.heappop(heap)[0], last)  # the GPU it splits stays split (held)
                free.extend([(start, start)] * (k - 1))
            else:
                out[request.id] = None
                continue
            last = start
            out[request.id] = None if math.isinf(start) else start
            end = start + history.median(request.profile)
            free.append((end, end))
            free.sort()
            continue
        if len(heap) < request.count:
            out[request.id] = None
            continue
        taken = [heapq.heappop(heap)[0] for _ in range(request.count)]
        start = max(*taken, last)
        last = start
        out[request.id] = None if math.isinf(start) else start
        end = start + history.median(request.profile)
        for _ in range(request.count):
            heapq.heappush(heap, (end, end))
    return out
