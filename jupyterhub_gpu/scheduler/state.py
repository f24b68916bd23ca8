"""What one run of :func:`~jupyterhub_gpu.scheduler.schedule` works on: holders, reservation windows, the cycle."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from jupyterhub_gpu.scheduler.policies import Policy, Rank, Reservations
from jupyterhub_gpu.scheduler.snapshot import (
    PREEMPTIBLE,
    REFUSE,
    STANDARD,
    Decision,
    Request,
    Reservation,
    Running,
    Snapshot,
)
from jupyterhub_gpu.scheduler.texts import Gpus


@dataclass
class Holder:
    """A session (running, or granted in this cycle) holding ``count`` whole GPUs, as the reservation check sees it.

    A share of a GPU is a holder too (``count`` 1), but only inside the :class:`Split` of its GPU: the GPU is the
    unit a reservation or a whole request needs.
    """

    id: str
    model: str
    count: int
    started: datetime
    order: int  # among sessions started at the same time: the later granted, the larger
    tier: str
    gone_by: datetime | None  # when it is known to have stopped
    member_of: Callable[[str], bool]
    told: str | None = None  # the stop it was told and that this cycle derives again ("preempted", "reserved")

    @property
    def endable(self) -> bool:
        return True

    def ending(self, group: str | None = None) -> list[str]:
        """The sessions to end so that its GPUs are free (for a reservation of ``group``: its members stay)."""
        return [self.id]

    def left(self, ended) -> bool:
        """Whether it still holds its GPUs once the sessions in ``ended`` are gone."""
        return self.id not in ended


@dataclass
class Split:
    """One GPU split into ``split`` shares, as one holder of one GPU: the GPU is free only when every share is.

    ``shares``: the sessions on it (and this cycle's grants), each a :class:`Holder` of one share; ``unknown``:
    shares held by servers the snapshot does not list (no stop can move them).
    """

    id: str
    model: str
    split: int
    unknown: int = 0
    shares: list[Holder] = field(default_factory=list)
    count: int = 1

    @property
    def free_slots(self) -> int:
        return max(0, self.split - self.unknown - len(self.shares))

    @property
    def started(self) -> datetime:
        return max(h.started for h in self.shares) if self.shares else datetime.max.replace(tzinfo=timezone.utc)

    @property
    def order(self) -> int:
        return max((h.order for h in self.shares), default=0)

    @property
    def tier(self) -> str:
        every = self.shares and not self.unknown and all(h.tier == PREEMPTIBLE for h in self.shares)
        return PREEMPTIBLE if every else STANDARD

    @property
    def told(self) -> str | None:
        kinds = {h.told for h in self.shares}
        return kinds.pop() if len(kinds) == 1 and not self.unknown else None

    @property
    def gone_by(self) -> datetime | None:
        if self.unknown or not self.shares or any(h.gone_by is None for h in self.shares):
            return None
        return max(h.gone_by for h in self.shares)

    def member_of(self, group: str) -> bool:
        return bool(self.shares) and not self.unknown and all(h.member_of(group) for h in self.shares)

    @property
    def endable(self) -> bool:
        return bool(self.shares) and not self.unknown

    def ending(self, group: str | None = None) -> list[str]:
        return [h.id for h in self.shares if group is None or not h.member_of(group)]

    def left(self, ended) -> bool:
        return bool(self.unknown) or any(h.id not in ended for h in self.shares)


class Windows:
    """The reservation windows that matter in this cycle, and who must end before each of them."""

    def __init__(self, snapshot: Snapshot, rule: Reservations, units: Mapping[str, int]):
        self.rule = rule
        self.now = snapshot.now
        self.units = units
        self.refused: list[Decision] = []
        # (start, end, reservation) of each window in force now or starting within the horizon, per model
        self.by_model: dict[str, list[tuple[datetime, datetime, Reservation]]] = {}
        for res in snapshot.reservations:
            for start, end in res.windows(self.now, self.now + rule.horizon):
                total = units.get(res.model, 0)
                others = sum(r.count for s, e, r in self.by_model.get(res.model, ()) if s < end and e > start)
                if others + res.count > total:  # the pool shrank under a booking: the later booking gives way
                    values = {
                        "label": res.name,
                        "count": res.count,
                        "gpus": Gpus(res.count, res.model),
                        "model": res.model,
                        "start": start,
                        "end": end,
                        "total": total,
                        "taken": others,
                    }
                    self.refused.append(
                        Decision(REFUSE, "refuse.reservation", values, reservation=res.id, model=res.model, at=start)
                    )
                    continue
                self.by_model.setdefault(res.model, []).append((start, end, res))
        for windows in self.by_model.values():
            windows.sort(key=lambda w: (w[0], w[2].id))

    def active(self, model: str) -> list[tuple[datetime, datetime, Reservation]]:
        return [w for w in self.by_model.get(model, ()) if w[0] <= self.now < w[1]]

    def moments(self, model: str) -> list[datetime]:
        """The moments to check a model at: now when a window is in force, and each later window's start."""
        return sorted({max(s, self.now) for s, _, _ in self.by_model.get(model, ())})

    def in_force(self, model: str, moment: datetime) -> list[Reservation]:
        return [r for s, e, r in self.by_model.get(model, ()) if s <= moment < e]

    def to_end(
        self, model: str, moment: datetime, holders: Sequence[Holder | Split]
    ) -> list[tuple[Holder | Split, Reservation, list[str]]]:
        """The holders that must be gone by ``moment`` so that each reservation then has its GPUs, in order: each with
        the reservation it gives way to and the sessions to end.

        A member's session counts towards its group's reservation while the reservation has room (a GPU split into
        shares when every share on it is a member's); one that holds more GPUs than the room left serves the
        reservation with some of them and holds the rest, and is ended only for another group's reservation that the
        strangers' ends cannot serve. The others are chosen, those
        told this end already first (so that the ends given stay the ends needed), then preemptible ones, then the
        most recently started, until the reservations fit. A GPU split into shares is freed only by ending every
        stranger's share on it; one with shares of servers the snapshot does not list cannot be. A stranger is one
        to the booking the GPU then serves (:meth:`_give_way`): the GPU left to one group's members' shares counts
        towards that group's booking while it has room, so their shares stay.
        """
        reservations = self.in_force(model, moment)
        if not reservations:
            return []
        room = {r.id: r.count for r in reservations}
        outside, serving = [], []  # serving: (a member's session that serves a reservation, the GPUs it holds beyond)
        for h in sorted(holders, key=lambda h: (h.started, h.order)):
            if h.gone_by is not None and h.gone_by <= moment:
                continue
            left = serve(room, reservations, h)
            if left == h.count:
                outside.append(h)
            elif left:
                serving.append((h, left))
        frees = {id(h): h.count for h in outside} | {id(h): left for h, left in serving}
        excess = sum(r.count for r in reservations) + sum(frees.values()) - self.units.get(model, 0)
        if excess <= 0:
            return []

        def preference(h: Holder | Split):
            return h.told != "reserved", h.tier != PREEMPTIBLE, -h.started.timestamp(), -h.order

        # a member's session that serves its group's reservation is ended only when the strangers' ends are not
        # enough (for another group's reservation); ending it frees only the GPUs it holds beyond its group's room
        candidates = sorted(outside, key=preference) + sorted((h for h, _ in serving), key=preference)
        chosen = []
        for h in candidates:
            if excess <= 0:
                break
            if not h.endable:
                continue
            chosen.append(h)
            excess -= frees[id(h)]
        # one chosen later may free enough alone (a session of two GPUs after one of one): the others chosen before
        # it are not needed, the least preferred let off first
        for h in reversed(chosen[:-1]):
            if frees[id(h)] <= -excess:
                chosen.remove(h)
                excess += frees[id(h)]
        return [self._give_way(h, reservations, room) for h in chosen]

    @staticmethod
    def _give_way(
        holder: Holder | Split, reservations: Sequence[Reservation], room: dict[str, int]
    ) -> tuple[Holder | Split, Reservation, list[str]]:
        """The reservation ``holder`` gives way to and the sessions that end for it.

        A whole holder ends, for a reservation of a group it is not a member of (if any). A GPU split into shares ends
        the fewest shares that free it for the reservations: its strangers' to a reservation with room left, whose
        members' shares then hold the GPU as one of its GPUs (``room`` counts it), else every share (for a booking
        with room left). Among those, the one that tells the fewest sessions an end not told before, then the fewest
        ends, then the first booking.
        """
        first = next((r for r in reservations if not holder.member_of(r.group)), reservations[0])
        if not isinstance(holder, Split):
            return holder, first, holder.ending(first.group)
        freed = next((r for r in reservations if room[r.id] > 0 and not holder.member_of(r.group)), first)
        options = [(freed, holder.ending(None))]
        options += [(r, holder.ending(r.group)) for r in reservations if room[r.id] > 0]
        told = {h.id for h in holder.shares if h.told == "reserved"}
        res, ids = min(options, key=lambda o: (len(set(o[1]) - told), len(o[1])))
        if len(ids) < len(holder.shares):  # the members' shares stay: the GPU is one of the booking's
            room[res.id] -= 1
        return holder, res, ids

    def reservation_for(self, model: str, moment: datetime, holder: Holder | Split) -> Reservation:
        """The reservation a holder gives way to at ``moment`` (one of a group it is not a member of, if any)."""
        found = self.in_force(model, moment)
        return next((r for r in found if not holder.member_of(r.group)), found[0])

    def limit(
        self, model: str, holder: Holder | Split, holders: Sequence[Holder | Split], session: str
    ) -> datetime | None:
        """The first window start before which ``session`` (of ``holder``: a whole holder, or a share of a split GPU)
        would have to end; None: no limit."""
        for moment in self.moments(model):
            if any(h is holder and session in ids for h, _, ids in self.to_end(model, moment, holders)):
                return moment
        return None

    def stop_time(self, moment: datetime) -> datetime:
        """When a session stops for a window that starts at ``moment``: ``lead`` before it, and never sooner than
        ``lead`` from now (a late booking, or a window already in force)."""
        return max(moment - self.rule.lead, self.now + self.rule.lead)


def serve(room: dict[str, int], reservations: Sequence[Reservation], holder: Holder | Split) -> int:
    """Count ``holder``'s GPUs towards the room left in the reservations of its groups; the GPUs left over."""
    left = holder.count
    for r in reservations:
        if left and room[r.id] > 0 and holder.member_of(r.group):
            used = min(room[r.id], left)
            room[r.id] -= used
            left -= used
    return left


def holder_of(session: Running, order: int) -> Holder:
    """A running session as a holder: gone by its known end (a stop told and not yet due binds nothing)."""
    return Holder(
        session.id,
        session.model,
        1 if session.share > 1 else session.count,
        session.started,
        order,
        session.tier,
        session.ends,
        session.member_of,
        session.stop_key if session.stop_at is not None else None,
    )


def limit_values(until: datetime, moment: datetime, res: Reservation) -> dict:
    """The values of a session's end before a window (``grant.until``, ``end``)."""
    return {"until": until, "count": res.count, "gpus": Gpus(res.count, res.model), "model": res.model,
            "label": res.name, "start": moment}  # fmt: skip


@dataclass
class Cycle:
    """What one run of :func:`schedule` works on, model by model."""

    snapshot: Snapshot
    policy: Policy
    units: dict[str, int]
    running: list[Running]
    windows: Windows | None
    order: list[Request] = field(default_factory=list)
    ranks: dict[str, Rank] = field(default_factory=dict)
    holders: dict[str, list[Holder | Split]] = field(default_factory=dict)
    general: dict[str, int] = field(default_factory=dict)  # free units anyone may take
    reserved_free: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> reservation -> idle units
    granted: dict[str, Decision] = field(default_factory=dict)
    blocked_by: dict[str, Decision] = field(default_factory=dict)  # model -> why its head waits, if a reservation
    ends: dict[str, tuple[datetime, datetime, Reservation]] = field(default_factory=dict)
