"""The preemptible tier in a cycle: which preemptible sessions stop, and for which full-price request.

Counted in GPUs of the model: a whole request needs whole GPUs, and stopping shares frees one only when every share
on it stops; a share request needs a free share of a GPU split into its shares, or a whole GPU to split. A stop a
session was told earlier binds nothing here: the victims are chosen afresh each cycle, those told a preemption
first, and a planned end (a reservation's, however far) never shields a session from being taken now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jupyterhub_gpu.scheduler.policies import Preemption
from jupyterhub_gpu.scheduler.snapshot import PREEMPT, PREEMPTIBLE, Decision, Running
from jupyterhub_gpu.scheduler.state import Cycle, Split
from jupyterhub_gpu.scheduler.texts import Grace


def _is_idle(session: Running, now: datetime, rule: Preemption) -> bool:
    return session.last_gpu_use is None or now - session.last_gpu_use >= rule.idle_after


@dataclass
class Victim:
    """What one preemption frees: ``gpus`` whole GPUs (a whole session, or a split GPU with all of its shares), or
    one share of a GPU split in ``split`` (``gpus`` 0)."""

    sessions: list[Running]
    gpus: int
    split: int = 1
    gpu: str | None = None  # the split GPU it is on, or is


def _order_key(victim: Victim, now: datetime, rule: Preemption):
    sessions = victim.sessions
    told = all(s.stop_key == "preempted" and s.stop_at is not None for s in sessions)
    idle = all(_is_idle(s, now, rule) for s in sessions)
    newest = max(s.started for s in sessions)
    # those told a preemption first (the stop they were told stays the stop needed), an idle GPU next, then the
    # most recently started
    return (not told, not idle, -newest.timestamp(), sessions[0].id)


def preempt(cycle: Cycle) -> list[Decision]:
    """Victims for the full-price requests left waiting, in order, model by model."""
    rule, now = cycle.policy.preemption, cycle.snapshot.now
    soon = now + rule.grace
    by_id = {s.id: s for s in cycle.running}

    def ends_soon(session: Running) -> bool:
        known = [t for t in (session.ends, cycle.ends.get(session.id, (None,))[0]) if t is not None]
        return bool(known) and min(known) <= soon

    def eligible(session: Running) -> bool:
        # a stop planned later (an end before a window, a budget, a max age) never shields it
        return session.tier == PREEMPTIBLE and now - session.started >= rule.min_runtime and not ends_soon(session)

    # GPUs (and shares) that free within the grace anyway (known ends, ends of this cycle) serve the queue first
    supply = {m: max(0, n) for m, n in cycle.general.items()}
    slots: dict[tuple[str, int], int] = {}
    wholes: dict[str, list[Victim]] = {}
    parts: dict[tuple[str, int], list[Victim]] = {}
    for model, holders in cycle.holders.items():
        for h in holders:
            if isinstance(h, Split):
                mine = [by_id[x.id] for x in h.shares if x.id in by_id]
                if h.endable and len(mine) == len(h.shares) and all(ends_soon(s) for s in mine):
                    supply[model] = supply.get(model, 0) + 1
                    continue
                key = (model, h.split)
                slots[key] = slots.get(key, 0) + h.free_slots + sum(1 for s in mine if ends_soon(s))
                if h.endable and len(mine) == len(h.shares) and all(eligible(s) for s in mine):
                    wholes.setdefault(model, []).append(Victim(mine, 1, h.split, h.id))
                parts.setdefault(key, []).extend(Victim([s], 0, h.split, h.id) for s in mine if eligible(s))
            elif h.id in by_id:
                session = by_id[h.id]
                if ends_soon(session):
                    supply[model] = supply.get(model, 0) + h.count
                elif eligible(session):
                    wholes.setdefault(model, []).append(Victim([session], h.count))
    for victims in (*wholes.values(), *parts.values()):
        victims.sort(key=lambda v: _order_key(v, now, rule))

    def take(victim: Victim) -> None:
        """Take a victim out of every list: a split GPU taken whole loses its shares, a share its split GPU."""
        model = victim.sessions[0].model
        gone = {s.id for s in victim.sessions}

        def keeps(v: Victim) -> bool:
            return not gone & {s.id for s in v.sessions} and (victim.gpu is None or v.gpu != victim.gpu)

        wholes[model] = [v for v in wholes.get(model, []) if keeps(v)]
        key = (model, victim.split)
        parts[key] = [v for v in parts.get(key, []) if not gone & {s.id for s in v.sessions}]

    grace = Grace(rule.grace)
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
        chosen: list[Victim] = []
        if request.share > 1:
            key = (model, request.share)
            if slots.get(key, 0) > 0:
                slots[key] -= 1
                continue
            if supply.get(model, 0) >= 1:
                supply[model] -= 1
                slots[key] = slots.get(key, 0) + request.share - 1
                continue
            # a share of a split GPU first (it frees just what is asked), else a whole GPU to split
            if parts.get(key):
                chosen = [parts[key][0]]
            elif wholes.get(model):
                chosen = [wholes[model][0]]
                supply[model] = supply.get(model, 0) + chosen[0].gpus - 1
                slots[key] = slots.get(key, 0) + request.share - 1
            else:
                done.add(model)  # nothing to take: it waits, and the queue behind it with it
                continue
        else:
            need = request.count - supply.get(model, 0)
            if need <= 0:
                supply[model] -= request.count
                continue
            freed = 0
            for victim in wholes.get(model, []):
                if freed >= need:
                    break
                chosen.append(victim)
                freed += victim.gpus
            if freed < need:
                done.add(model)  # not enough to take: it waits, and the queue behind it with it
                continue
            supply[model] = freed - need
        for victim in chosen:
            take(victim)
            for session in victim.sessions:
                told = session.stop_at if session.stop_key == "preempted" else None
                at = told if told is not None and now <= told <= soon else soon
                key = "preempt" if session.checkpoints else "preempt.save"
                out.append(
                    Decision(PREEMPT, key, {"grace": grace}, session=session.id, model=model, at=at,
                             for_request=request.id)
                )  # fmt: skip
    return out
