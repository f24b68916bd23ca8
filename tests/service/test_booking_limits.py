"""An instructor's bookings against a real hub and the real gpu service: the group's limits bind its bookings
together (docs/scheduling.md, "Booking limits"), with the limits set in the service's own configuration file.

The lab has 4 T4s; an instructor of cs231n may hold a model for at most 4 hours without a break (the default
``reservation_max_hours``), at most 30 GPU-hours a week, at most half of each model's GPUs at once. Six adjacent
4-hour weekly bookings of 2 T4s (24 hours each Tuesday) were each within ``reservation_max_hours`` before: now
each one next to one made is a ``409`` naming the hold, and what stands leaves gaps in which others get the T4s.
Three T4s at once, or a fourth booking that week, are refused naming their limits; refusals store nothing; an
admin is not limited.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone

import pytest

from tests.service.conftest import gpu_hub_config
from tests.service.test_reservation_hub import LAB, Service

pytestmark = pytest.mark.hub

LIMITS = """
c.GPUService.reservation_max_gpu_hours_per_week = 30
c.GPUService.reservation_max_pool_fraction = 0.5
"""

INSTRUCTOR = """
c.JupyterHub.load_roles.append(
    {"name": "cs231n-instructor", "users": ["prof"], "scopes": ["custom:gpu-usage:read!group=cs231n"]}
)
"""


def window(day: date, start: int, hours: int = 4) -> tuple[str, str]:
    """A window of ``day`` in the lab's zone from ``start`` o'clock, as ISO 8601 with the lab's offset."""
    begins = datetime.combine(day, time(0), tzinfo=LAB) + timedelta(hours=start)
    return begins.isoformat(), (begins + timedelta(hours=hours)).isoformat()


def test_an_instructor_cannot_split_a_long_hold_and_the_service_s_limits_apply(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, gpu_pool={"T4": 4, "A100": 1})
    with (tmp_path / "gpu_service_config.py").open("a") as service_config:
        service_config.write(LIMITS)
    hub = make_hub(config + INSTRUCTOR)
    hub.create_users("admin", "prof")
    admin = Service(hub, "admin")
    prof = Service(hub, "prof", "custom:gpu-usage:read!group=cs231n")

    today = datetime.now(timezone.utc).astimezone(LAB).date()
    tuesday = today + timedelta(days=(1 - today.weekday()) % 7 + 7)  # a Tuesday 7 to 13 days ahead
    weekly = {"group": "cs231n", "gpu_model": "T4", "count": 2, "weekly_until": str(tuesday + timedelta(weeks=5))}

    def book(caller, start, end, **changes):
        return caller("POST", "reservations", json={**weekly, "start": start, "end": end, **changes})

    def stored():
        r = admin("GET", "reservations")
        assert r.status_code == 200, r.text
        return r.json()["reservations"]

    answers = []
    for hour in range(0, 24, 4):
        before = stored()
        r = book(prof, *window(tuesday, hour))
        answers.append(r.status_code)
        if r.status_code != 201:
            assert stored() == before, r.text
    assert answers == [201, 409, 201, 409, 201, 409]
    made = stored()
    r = book(prof, *window(tuesday, 4))
    assert r.status_code == 409 and r.json()["message"].startswith(
        f"The reservation cannot be made: with cs231n's other T4 bookings (its reservations {made[0]['id']},"
        f" {made[1]['id']}) it holds T4 GPUs without a break for 12 hours, "
    ), r.text
    assert "an instructor may book at most 4 hours at a time (c.Scheduling.reservation_max_hours;" in r.text

    # three bookings of 2 T4s for 4 hours: 24 GPU-hours each week; 4 more on Thursday would be 32, past 30
    thursday = tuesday + timedelta(days=2)
    r = book(prof, *window(thursday, 10), weekly_until=None)
    assert r.status_code == 409, r.text
    assert "cs231n would have 32 GPU-hours booked (8 by this booking, 24 by its reservations" in r.text
    assert "(c.Scheduling.reservation_max_gpu_hours_per_week)" in r.text
    assert book(prof, *window(thursday, 10, hours=3), weekly_until=None).status_code == 201  # 30: just within

    # three of the four T4s at once: past half of the pool, on its own a 400
    r = book(prof, *window(thursday + timedelta(weeks=1), 10, hours=1), weekly_until=None, count=3)
    assert r.status_code == 400, r.text
    assert "may book at most 2 of them for a group at once (50% of the pool," in r.text
    assert len(stored()) == 4

    # an admin is not limited; the admin's booking counts in the group's hold from then on
    assert book(admin, *window(tuesday, 4)).status_code == 201
    r = book(prof, *window(tuesday, 12, hours=1), weekly_until=None, count=1)
    assert r.status_code == 409 and "without a break for 13 hours" in r.text, r.text
