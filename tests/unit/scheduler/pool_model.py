"""The reference model of test_planner_model.py: a small lab's pool, its people and bookings, in physical units.

Three T4s (each whole, or split in two or four shares) and one A100 split into MIG slices (3g.20gb and two
1g.10gb). What a stop frees, and whether the booked windows have their GPUs, is counted on the devices the
allocator says each session holds: a whole T4 frees only when every holder of it has gone, a share of a GPU
split in k serves only a request for 1/k, a MIG slice only a request for that slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from jupyterhub_gpu.spawners.profiles import Profile, parse_profiles

ZONE = ZoneInfo("Europe/Berlin")  # the lab's: summer time from 29 Mar 2026, winter time from 25 Oct 2026
INVENTORY = [
    {"model": "T4", "count": 3, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb", "1g.10gb"]},
]
POOL = {"T4": 3}  # what bookings are checked against (c.GPUService.gpu_pool)
_P = {"preemptible": True, "price_factor": "0.4"}
PROFILES: dict[str, Profile] = {
    p.slug: p
    for p in parse_profiles(
        [
            {"slug": "t4", "gpu_model": "T4", "price_per_gpu_hour": "3.00"},
            {"slug": "t4-p", "gpu_model": "T4", "price_per_gpu_hour": "3.00", **_P},
            {"slug": "t4x2", "gpu_model": "T4", "gpu_count": 2, "price_per_gpu_hour": "3.00"},
            {"slug": "t4-half", "gpu_model": "T4", "gpu_share": 2, "price_per_gpu_hour": "1.50"},
            {"slug": "t4-quarter", "gpu_model": "T4", "gpu_share": 4, "price_per_gpu_hour": "0.78"},
            {"slug": "t4-quarter-p", "gpu_model": "T4", "gpu_share": 4, "price_per_gpu_hour": "0.78", **_P},
            {"slug": "mig", "gpu_model": "A100", "mig": "1g.10gb", "price_per_gpu_hour": "2.40"},
            {"slug": "mig-p", "gpu_model": "A100", "mig": "1g.10gb", "price_per_gpu_hour": "2.40", **_P},
        ],
        require_image=False,
    )
}
WHOLE_T4 = PROFILES["t4"]
USERS = {"ann": ("cs231n",), "bob": ("cs231n", "thesis"), "cat": ("thesis",), "dan": ("other",)}
GROUPS = ("cs231n", "thesis", "other")


def is_member(user: str, group: str) -> bool:
    return group in USERS[user]


@dataclass(frozen=True)
class Booking:
    """``count`` T4s for ``group`` from ``start`` to ``end`` (in the lab's zone), weekly until a day, or once."""

    id: int
    group: str
    count: int
    start: datetime
    end: datetime
    weekly_until: date | None
    made: datetime

    def windows(self, since: datetime, until: datetime) -> list[tuple[datetime, datetime]]:
        """Its windows that overlap [since, until): the same wall-clock hours each week, summer time or not."""
        found, day = [], self.start.date()
        while day <= (self.weekly_until or self.start.date()):
            start = datetime.combine(day, self.start.time(), ZONE)
            if start >= until:
                break
            if start + (self.end - self.start) > since:  # aware arithmetic in one zone keeps the wall clock
                found.append((start, start + (self.end - self.start)))
            day += timedelta(weeks=1)
        return found


@dataclass(frozen=True)
class Unit:
    """One unit a session holds: a whole T4 (``k`` None), a share of a T4 split in ``k``, or a MIG slice."""

    device: str  # the physical T4's uuid, or the MIG instance's
    k: int | None = None
    index: int | None = None
    mig: str | None = None


@dataclass
class Pool:
    """Who holds what, read from the allocator (``held``: key -> its units; ``users``: key -> user)."""

    held: dict[str, list[Unit]]
    users: dict[str, str]
    t4s: list[str]
    bookings: list[Booking] = field(default_factory=list)

    def on(self, device: str) -> list[tuple[str, Unit]]:
        return [(key, u) for key, units in self.held.items() for u in units if u.device == device]

    def capacity_problems(self, asked: dict[str, Profile]) -> list[str]:
        """A T4 held whole and more, split in two ways or past its k, a slice held twice, a session's units wrong."""
        problems = []
        for device in {u.device for units in self.held.values() for u in units}:
            on = self.on(device)
            ks = {u.k for _, u in on}
            if (None in ks and len(on) > 1) or len(ks) > 1 or len({u.index for _, u in on}) < len(on):
                problems.append(f"{device} is held as {on}")
            elif ks != {None} and len(on) > next(iter(ks)):
                problems.append(f"{device} holds {len(on)} shares of 1/{next(iter(ks))}")
        for key, profile in asked.items():
            units = self.held.get(key, [])
            kinds = {(u.k, u.mig) for u in units}
            if len(units) != profile.gpu_count or kinds != {(profile.gpu_share, profile.mig)}:
                problems.append(f"{key} holds {units} for {profile.slug}")
        return problems

    def frees(self, key: str, want: Profile, gone: set[str]) -> bool:
        """Whether stopping ``key`` (the sessions in ``gone`` stopping too) frees a unit ``want`` can take."""
        for unit in self.held.get(key, []):
            if unit.mig:
                if want.mig == unit.mig:
                    return True
            elif want.gpu_model == "T4" and not want.mig:
                if all(h in gone for h, _ in self.on(unit.device)):
                    return True  # the whole GPU frees
                if want.gpu_share and unit.k == want.gpu_share:
                    return True  # a share of a GPU split as it wants frees
        return False

    def frees_for(self, key: str, group: str, gone: set[str]) -> bool:
        """Whether stopping ``key`` (with ``gone``) gives ``group``'s booking a T4: one then free, or held only by its
        members' shares (a GPU whose shares are all the class's serves the class, as :meth:`served` counts it)."""
        for unit in self.held.get(key, []):
            if unit.mig:
                continue
            if all(h in gone or h == key or is_member(self.users[h], group) for h, _ in self.on(unit.device)):
                return True
        return False

    def in_force(self, moment: datetime) -> list[Booking]:
        return [b for b in self.bookings if b.windows(moment, moment + timedelta(seconds=1))]

    def served(self, moment: datetime, gone: set[str]) -> int:
        """The T4s the groups booked at ``moment`` have then: their members' (up to each count), and free ones."""
        booked = self.in_force(moment)
        room = {b.id: b.count for b in booked}
        free = 0
        for device in self.t4s:
            users = {self.users[h] for h, _ in self.on(device) if h not in gone}
            home = next((b for b in booked if room[b.id] and all(is_member(u, b.group) for u in users)), None)
            if not users:
                free += 1
            elif home is not None:
                room[home.id] -= 1
        return sum(b.count - room[b.id] for b in booked) + free

    def short(self, moment: datetime, gone: set[str]) -> bool:
        """Whether the bookings in force at ``moment`` lack T4s with the ``gone`` sessions stopped by then."""
        return self.served(moment, gone) < sum(b.count for b in self.in_force(moment))
