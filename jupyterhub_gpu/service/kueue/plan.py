"""Class reservations through Kueue, pure: which ClusterQueue quotas a booked window moves, and back.

A booking of ``count`` GPUs of a model for a group is kept by Kueue itself: from the window's start less the
lead (the moment the hub's scheduler promises the others they may run until: "may run until 13:55") to its end,
the group's ClusterQueue gets a nominal quota of at least ``count`` for the model's ResourceFlavor, and the
GPUs it gains are taken from the nominal quota of the other ClusterQueues of its cohort (those with the most to
spare first), so the cohort's total stays the cluster's GPUs. The others' workloads above their lowered quota
are then borrowing, and Kueue reclaims them for the class's pending workloads (its ClusterQueue needs
``preemption.reclaimWithinCohort``). A lending limit above a lowered quota is lowered with it. After the window
every quota moved goes back to the value recorded before the move. An admin's edit of a moved quota during the
window (the quota there is no longer the one the service set) is the admin's new value: the window's move is
planned from it, and it is what the window's end leaves.

:func:`plan` takes the ClusterQueues as they are (with the values recorded on each before a move: see
:mod:`.cluster`), the configuration and the bookings in force, and returns the target of each ClusterQueue;
nothing here reads a clock or the cluster. docs/kubernetes.md, "Class reservations through Kueue".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jupyterhub_gpu.scheduler.snapshot import Reservation

#: The GPU resource a flavor's quota is moved in, unless the configuration names another.
GPU_RESOURCE = "nvidia.com/gpu"

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_RESOURCE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class KueueConfigError(ValueError):
    """A Kueue reservation setting that cannot work; the message names it."""


@dataclass(frozen=True)
class QuotaConfig:
    """Which ClusterQueue is each group's (``queues``: group -> ClusterQueue) and which ResourceFlavor holds each
    GPU model (``flavors``: model -> flavor), the resource moved (``resource``) and the lead before a window."""

    queues: Mapping[str, str]
    flavors: Mapping[str, str]
    resource: str = GPU_RESOURCE
    lead: timedelta = timedelta(minutes=5)

    @property
    def enabled(self) -> bool:
        return bool(self.queues)


def check_queues(queues) -> None:
    """``c.Kueue.cluster_queues``: a map of group names to ClusterQueue names; KueueConfigError naming the bad one."""
    if not isinstance(queues, Mapping):
        raise KueueConfigError(f"c.Kueue.cluster_queues must map a group to a ClusterQueue name, got {queues!r}")
    for group, name in queues.items():
        if not isinstance(group, str) or not group:
            raise KueueConfigError(f"c.Kueue.cluster_queues: a group must be a non-empty name, got {group!r}")
        if not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name):
            raise KueueConfigError(
                f"c.Kueue.cluster_queues[{group!r}] must be a ClusterQueue name (lower case letters, digits,"
                f" '-' and '.'), got {name!r}"
            )


def check_flavors(flavors) -> None:
    """``c.Kueue.flavors``: a map of GPU models to ResourceFlavor names; KueueConfigError naming the bad one."""
    if not isinstance(flavors, Mapping):
        raise KueueConfigError(f"c.Kueue.flavors must map a GPU model to a ResourceFlavor name, got {flavors!r}")
    for model, name in flavors.items():
        if not isinstance(model, str) or not model:
            raise KueueConfigError(f"c.Kueue.flavors: a GPU model must be a non-empty name, got {model!r}")
        if not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name):
            raise KueueConfigError(
                f"c.Kueue.flavors[{model!r}] must be a ResourceFlavor name (lower case letters, digits, '-' and"
                f" '.'), got {name!r}"
            )


def check_resource(resource) -> None:
    """``c.Kueue.gpu_resource``: an extended resource's name."""
    if not isinstance(resource, str) or not _RESOURCE.fullmatch(resource):
        raise KueueConfigError(f"c.Kueue.gpu_resource must be a resource name such as nvidia.com/gpu, got {resource!r}")


def check_lead(lead_seconds) -> None:
    """``c.Kueue.lead_seconds``: 0 to a day."""
    if isinstance(lead_seconds, bool) or not isinstance(lead_seconds, (int, float)) or not 0 <= lead_seconds <= 86400:
        raise KueueConfigError(f"c.Kueue.lead_seconds must be 0 to 86400 seconds, got {lead_seconds!r}")


def parse_config(queues, flavors, resource: str = GPU_RESOURCE, lead_seconds: float = 300) -> QuotaConfig:
    """The settings checked (``c.Kueue.cluster_queues``, ``c.Kueue.flavors``, ``c.Kueue.gpu_resource``,
    ``c.Kueue.lead_seconds``): KueueConfigError naming the setting and the value that is wrong."""
    check_queues(queues)
    check_flavors(flavors)
    check_resource(resource)
    check_lead(lead_seconds)
    if queues and not flavors:
        raise KueueConfigError("c.Kueue.flavors is empty: name the ResourceFlavor of each GPU model that is booked")
    return QuotaConfig(dict(queues), dict(flavors), resource, timedelta(seconds=lead_seconds))


@dataclass(frozen=True)
class Quota:
    """One flavor's quota of the resource in a ClusterQueue: its nominal quota and lending limit (None: none)."""

    nominal: int
    lending: int | None = None


@dataclass(frozen=True)
class Queue:
    """A ClusterQueue as the plan needs it: its cohort, its quotas by flavor (of the configured resource), the
    quotas recorded before the service moved them (empty: nothing moved), and the quotas the service itself set
    when it moved them (``written``; empty in a record of an older service)."""

    name: str
    cohort: str | None
    quotas: Mapping[str, Quota]
    recorded: Mapping[str, Quota] = field(default_factory=dict)
    written: Mapping[str, Quota] = field(default_factory=dict)

    def edited(self, flavor: str) -> bool:
        """Whether an admin changed a moved quota after the service set it (the quota there is not the one the
        service wrote): that value is then the admin's."""
        written, live = self.written.get(flavor), self.quotas.get(flavor)
        return flavor in self.recorded and written is not None and live is not None and live != written

    def base(self, flavor: str) -> Quota | None:
        """The quota as the admin set it: the recorded one where the service moved it (unless the admin has
        edited it since: then the quota there), else the one there."""
        if flavor in self.recorded and not self.edited(flavor):
            return self.recorded[flavor]
        return self.quotas.get(flavor)


@dataclass(frozen=True)
class Target:
    """What one ClusterQueue's quotas should be now (``quotas``, by flavor), and what to record of the admin's
    values (``recorded``: empty when nothing is moved, and then the record is removed)."""

    queue: str
    quotas: dict[str, Quota]
    recorded: dict[str, Quota]
    reasons: tuple[str, ...] = ()
    short: int = 0  # GPUs a booking needed that no other ClusterQueue of the cohort could give

    @property
    def written(self) -> dict[str, Quota]:
        """The quotas the service sets of the flavors it moves: recorded with the admin's values, so that a later
        edit is told apart from them (:meth:`Queue.edited`)."""
        return {f: self.quotas[f] for f in self.recorded if f in self.quotas}


def in_force(reservations: Sequence[Reservation], now: datetime, lead: timedelta) -> list[Reservation]:
    """The bookings whose quota is moved at ``now``: from their window's start less ``lead`` to its end."""
    ahead = now + lead + timedelta(microseconds=1)
    return [r for r in reservations if any(start - lead <= now < end for start, end in r.windows(now, ahead))]


def plan(queues: Sequence[Queue], config: QuotaConfig, bookings: Sequence[Reservation]) -> list[Target]:
    """The target of every ClusterQueue that has a moved quota or needs one, for the ``bookings`` in force.

    Per flavor: each booked group's ClusterQueue gets ``max(its own quota, the GPUs its bookings of the model
    hold at once)``; what it gains is taken from the other ClusterQueues of its cohort, the one with the most
    nominal quota above what it needs itself first (a queue with a booking of its own gives nothing below it).
    A ClusterQueue whose quotas end where the admin set them gets its record removed (a restore)."""
    by_name = {q.name: q for q in queues}
    need: dict[str, dict[str, int]] = {}  # queue -> flavor -> GPUs booked
    why: dict[str, list[str]] = {}
    for r in bookings:
        name, flavor = config.queues.get(r.group), config.flavors.get(r.model)
        if name is None or flavor is None or name not in by_name:
            continue
        need.setdefault(name, {})
        need[name][flavor] = need[name].get(flavor, 0) + r.count
        why.setdefault(name, []).append(f"reservation {r.id}: {r.count} {r.model} for {r.group}")
    quotas = {q.name: {f: q.base(f) for f in set(q.quotas) | set(q.recorded)} for q in queues}
    short: dict[str, int] = {}
    for name in sorted(need):
        queue = by_name[name]
        for flavor, count in sorted(need[name].items()):
            own = quotas[name].get(flavor)
            if own is None:  # the group's ClusterQueue has no quota of this flavor to raise
                short[name] = short.get(name, 0) + count
                continue
            have = own.nominal
            if count <= have:
                continue
            gained = 0
            donors = [
                d
                for d in queues
                if d.name != name and d.cohort and d.cohort == queue.cohort and quotas[d.name].get(flavor) is not None
            ]
            while gained < count - have:
                spare = {
                    d.name: quotas[d.name][flavor].nominal - need.get(d.name, {}).get(flavor, 0)
                    for d in donors
                    if quotas[d.name][flavor].nominal - need.get(d.name, {}).get(flavor, 0) > 0
                }
                if not spare:
                    break
                donor = max(sorted(spare), key=lambda n: spare[n])  # most to spare; ties by name
                take = min(spare[donor], count - have - gained)
                quota = quotas[donor][flavor]
                nominal = quota.nominal - take
                lending = None if quota.lending is None else min(quota.lending, nominal)
                quotas[donor][flavor] = Quota(nominal, lending)
                why.setdefault(donor, []).append(f"{take} {flavor} to {name}")
                gained += take
            quotas[name][flavor] = Quota(have + gained, own.lending)
            if gained < count - have:
                short[name] = short.get(name, 0) + count - have - gained
    targets = []
    for q in queues:
        moved = {f: quota for f, quota in quotas[q.name].items() if quota is not None and quota != q.base(f)}
        if not moved and not q.recorded and q.name not in short:
            continue
        wanted = {f: quota for f, quota in quotas[q.name].items() if quota is not None}
        recorded = {f: q.base(f) for f in moved if q.base(f) is not None}
        targets.append(Target(q.name, wanted, recorded, tuple(why.get(q.name, ())), short.get(q.name, 0)))
    return targets


def changed(queue: Queue, target: Target) -> bool:
    """Whether a ClusterQueue must be written to reach its target (its quotas or its record differ)."""
    return (
        dict(queue.quotas) != {f: target.quotas.get(f, q) for f, q in queue.quotas.items()}
        or dict(queue.recorded) != dict(target.recorded)
        or (bool(target.recorded) and dict(queue.written) != target.written)
    )
