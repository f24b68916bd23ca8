"""The named parts of a scheduling policy: the order (FIFO, fair share), preemption, reservations."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from jupyterhub_gpu.scheduler.snapshot import Request, Snapshot
from jupyterhub_gpu.scheduler.texts import Period

#: A group with a share of 0 ranks as if it had used this many times its share (ageing still lifts it).
NO_SHARE_RATIO = 10.0


@dataclass(frozen=True)
class Rank:
    """Where a request stands in its order (lower first) and why, as a key of :data:`TEXTS` and its typed values."""

    value: float
    key: str
    values: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Fifo:
    """First come, first served (the queue of today)."""

    name: str = "fifo"

    def ranks(self, snapshot: Snapshot, requests: Sequence[Request]) -> dict[str, Rank]:
        return {r.id: Rank(0.0, "fifo") for r in requests}


@dataclass(frozen=True)
class FairShare:
    """Serve the group that used least of its share first; first come within a group; waiting ages a request.

    A group's *ratio* for a model is its part of the model's decayed usage (``snapshot.usage``, half-life
    ``half_life``) over its part of the shares (groups without a configured share have ``default_share``).
    A request ranks by its group's ratio less one for each ``ageing`` it has waited, so a request of a group
    that used three times its share overtakes newcomers of an idle group after about three ``ageing`` periods:
    nothing waits for ever.
    """

    half_life: timedelta = timedelta(days=7)
    ageing: timedelta = timedelta(hours=1)
    default_share: float = 1.0
    name: str = "fair-share"

    def __post_init__(self):
        if self.half_life <= timedelta(0) or self.ageing <= timedelta(0):
            raise ValueError("half_life and ageing must be positive durations")
        if self.default_share < 0:
            raise ValueError(f"default_share must not be negative, got {self.default_share!r}")

    def ratios(self, snapshot: Snapshot, model: str, groups: Collection[str]) -> dict[str, float]:
        """Each group's ratio of use to share for ``model`` (0 with no use at all)."""
        known = set(groups) | {g for g, m in snapshot.shares.items() if model in m}
        known |= {g for g, m in snapshot.usage.items() if m.get(model)}
        share = {g: float(snapshot.shares.get(g, {}).get(model, self.default_share)) for g in known}
        used = {g: float(snapshot.usage.get(g, {}).get(model, 0.0)) for g in known}
        total_share, total_used = sum(share.values()), sum(used.values())
        ratios = {}
        for g in known:
            if total_used <= 0:
                ratios[g] = 0.0
            elif share[g] <= 0 or total_share <= 0:
                ratios[g] = NO_SHARE_RATIO
            else:
                ratios[g] = (used[g] / total_used) / (share[g] / total_share)
        return ratios

    def ranks(self, snapshot: Snapshot, requests: Sequence[Request]) -> dict[str, Rank]:
        out = {}
        by_model: dict[str, list[Request]] = {}
        for r in requests:
            by_model.setdefault(r.model, []).append(r)
        period = Period(self.half_life)
        for model, mine in by_model.items():
            ratios = self.ratios(snapshot, model, {r.group for r in mine})
            for r in mine:
                waited = max(timedelta(0), snapshot.now - r.arrived)
                credit = waited / self.ageing
                ratio = ratios[r.group]
                values = {"model": model, "period": period, "waited": waited}
                no_share = float(snapshot.shares.get(r.group, {}).get(model, self.default_share)) <= 0
                if no_share and ratio > 0:
                    key = "share.none"
                else:
                    values["percent"] = round(ratio * 100)
                    key = "share.aged" if credit >= 1 else "share"
                out[r.id] = Rank(ratio - credit, key, values)
        return out


@dataclass(frozen=True)
class Preemption:
    """The preemptible tier: a full-price request that finds no free GPU takes one from a preemptible session.

    Victims, of the request's model: an idle GPU first (no GPU use for ``idle_after``), then the most recently
    started; never one that has run less than ``min_runtime`` (it would lose its start-up for nothing). The victim
    is told at once and stopped ``grace`` later (time to checkpoint). Preemptible requests wait behind every
    full-price request of their model.
    """

    min_runtime: timedelta = timedelta(minutes=10)
    grace: timedelta = timedelta(seconds=120)
    idle_after: timedelta = timedelta(minutes=10)
    name: str = "preemptible-tier"

    def __post_init__(self):
        if self.min_runtime < timedelta(0) or self.grace < timedelta(0) or self.idle_after <= timedelta(0):
            raise ValueError("min_runtime and grace must not be negative, idle_after must be positive")


@dataclass(frozen=True)
class Reservations:
    """Reservation windows: members first during a window; others told when to end before it.

    A session of a non-member that would still hold one of the reserved GPUs at a window's start is told
    (at its start when it is granted, else as soon as the window is within ``horizon``) that it may run until
    ``lead`` before the window; preemptible sessions are chosen first, then the most recently started. A
    non-member is not granted a GPU it could keep for less than ``min_run`` before a window.
    """

    lead: timedelta = timedelta(minutes=5)
    min_run: timedelta = timedelta(minutes=10)
    horizon: timedelta = timedelta(hours=24)
    name: str = "reservations"

    def __post_init__(self):
        if self.lead < timedelta(0) or self.min_run < timedelta(0) or self.horizon <= timedelta(0):
            raise ValueError("lead and min_run must not be negative, horizon must be positive")


@dataclass(frozen=True)
class Policy:
    """A named scheduling policy: an order plugin and the optional preemption and reservation plugins."""

    name: str
    order: Fifo | FairShare = field(default_factory=Fifo)
    preemption: Preemption | None = None
    reservations: Reservations | None = None


#: The policies the simulator compares: today's, fair share, and fair share with the tier and reservations.
POLICIES: dict[str, Policy] = {
    "fifo": Policy("fifo"),
    "fair-share": Policy("fair-share", FairShare()),
    "fair-share+tier+reservations": Policy("fair-share+tier+reservations", FairShare(), Preemption(), Reservations()),
}


def policy_named(name: str) -> Policy:
    """One of :data:`POLICIES`; ValueError naming the others."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown scheduling policy {name!r}: use one of {', '.join(POLICIES)}") from None
