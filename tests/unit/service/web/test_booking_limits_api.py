"""An instructor's bookings through the real ``POST reservations`` handler and a real ledger: the group's limits
bind its bookings together, at every window of a weekly booking, as the lab's clocks run.

Splitting a booking does not get past ``reservation_max_hours`` (adjacent bookings of a group are one hold),
the GPU-hours of a week add up over the group's bookings (``reservation_max_gpu_hours_per_week``), and a group
holds at most its part of a model's pool at once (``reservation_max_pool_fraction``). A refusal names the
limit, where, and the figures, and stores nothing; admins are not limited, but their bookings count.
"""

from __future__ import annotations

from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.web.context import WebContext
from tests.unit.service.web.test_schedule_api import ADMIN, PROF, SHANGHAI, FakeAuth, FakeHub, booking, call, tables

# now is Tue 1 Dec 2026 16:00 in Shanghai (test_schedule_api.NOW): an instructor books from 2 Dec 16:00 on


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


@pytest.fixture
def ctx(ledger):
    return SimpleNamespace(
        ledger=ledger, tz=SHANGHAI, gpu_pool={"T4": 4, "A100": 2}, hub=FakeHub(), hub_auth=FakeAuth()
    )


def book(ctx, caller, start, end, **changes):
    """``POST reservations`` of a window in the lab's zone (``2026-12-08T14:00``)."""
    offset = changes.pop("offset", "+08:00")
    return call(ctx, caller, "POST", "/reservations", booking(start=start + offset, end=end + offset, **changes))


@pytest.fixture
def six_windows():
    return [(f"2026-12-08T{h:02d}:00", f"2026-12-08T{h + 4:02d}:00" if h < 20 else "2026-12-09T00:00") for h in
            range(0, 24, 4)]  # fmt: skip


def test_an_instructor_cannot_split_a_24_hour_hold_into_six_4_hour_bookings(ctx, ledger, six_windows):
    """``reservation_max_hours = 4`` (the default), yet six adjacent 4-hour weekly bookings held every T4 for 24
    hours each week: each passed on its own. Now the first stands; each next one, next to it, is refused with a
    409 naming the hold, and stores nothing."""
    weekly = {"count": 4, "weekly_until": "2027-01-12"}
    made, refused = [], []
    for start, end in six_windows:
        before = tables(ledger)
        code, answer = book(ctx, PROF, start, end, **weekly)
        if code == 201:
            made.append(answer)
        else:
            assert code == 409, answer
            assert tables(ledger) == before
            refused.append(start)
    # each one next to one made is refused; what stands leaves 4-hour gaps in which others get the T4s
    assert [(r["start"][11:16], r["end"][11:16]) for r in made] == [("00:00", "04:00"), ("08:00", "12:00"),
                                                                    ("16:00", "20:00")]  # fmt: skip
    first = made[0]
    code, answer = book(ctx, PROF, *six_windows[1], **weekly)
    assert answer["message"] == (
        f"The reservation cannot be made: with cs231n's other T4 bookings (its reservations {first['id']},"
        f" {made[1]['id']}) it holds T4 GPUs without a break for 12 hours, Tue 8 Dec 2026 00:00–12:00 (and 5 more"
        " like it later), and an instructor may book at most 4 hours at a time (c.Scheduling.reservation_max_hours;"
        " a group's bookings less than 60 minutes apart count as one hold); an administrator can book a longer one"
    )
    assert refused == [start for start, _ in six_windows[1::2]]
    # 15 or 59 minutes after it is still the same hold (a break that short serves nobody); an hour after, others
    # may use the T4s in between
    assert book(ctx, PROF, "2026-12-08T04:15", "2026-12-08T04:45")[0] == 409
    assert book(ctx, PROF, "2026-12-08T04:59", "2026-12-08T05:29")[0] == 409
    assert book(ctx, PROF, "2026-12-08T05:00", "2026-12-08T05:30")[0] == 201


def test_an_admin_s_bookings_are_not_limited_but_count_in_the_group_s_hold(ctx, ledger, six_windows):
    for start, end in six_windows:
        assert book(ctx, ADMIN, start, end, count=4, weekly_until="2027-01-12")[0] == 201
    before = tables(ledger)
    code, answer = book(ctx, PROF, "2026-12-09T00:00", "2026-12-09T01:00", count=1)
    assert code == 409 and "holds T4 GPUs without a break for 25 hours" in answer["message"], answer
    assert "from Tue 8 Dec 2026 00:00 to Wed 9 Dec 2026 01:00" in answer["message"]
    assert tables(ledger) == before
    # another model is another hold; another group's bookings are not this group's
    assert book(ctx, PROF, "2026-12-09T00:00", "2026-12-09T01:00", gpu_model="A100", count=1)[0] == 201
    assert book(ctx, PROF, "2026-12-10T00:00", "2026-12-10T04:00", count=1)[0] == 201


def test_an_instructor_s_week_of_gpu_hours_counts_every_booking_of_the_group(ctx, ledger):
    ctx.reservation_max_gpu_hours_per_week = 20
    assert book(ctx, PROF, "2026-12-08T14:00", "2026-12-08T16:00", count=4, weekly_until="2027-01-12")[0] == 201
    assert book(ctx, ADMIN, "2026-12-10T10:00", "2026-12-10T14:00", gpu_model="A100", count=2)[0] == 201  # 8 + 8
    before = tables(ledger)
    code, answer = book(ctx, PROF, "2026-12-11T10:00", "2026-12-11T14:00", count=2)
    assert code == 409, answer
    assert answer["message"] == (
        "The reservation cannot be made: in the week of Mon 7 Dec 2026 (Monday to Sunday, Asia/Shanghai) cs231n"
        " would have 24 GPU-hours booked (8 by this booking, 16 by its reservations 1, 2), and an instructor may"
        " book at most 20 GPU-hours a week for a group (c.Scheduling.reservation_max_gpu_hours_per_week); an"
        " administrator can book more"
    )
    assert tables(ledger) == before
    # the next week has room; so has this one for 4 more GPU-hours
    assert book(ctx, PROF, "2026-12-18T10:00", "2026-12-18T12:00", count=2)[0] == 201
    assert book(ctx, PROF, "2026-12-11T10:00", "2026-12-11T12:00", count=2)[0] == 201
    # a booking past it on its own: a 400
    ctx.reservation_max_gpu_hours_per_week = 10
    code, answer = book(ctx, PROF, "2027-01-20T10:00", "2027-01-20T13:00", count=4)
    assert code == 400, answer
    assert answer["message"].startswith(
        "The reservation cannot be made: in the week of Mon 18 Jan 2027 (Monday to Sunday, Asia/Shanghai) it has"
        " 12 GPU-hours booked, and an instructor may book at most 10 GPU-hours a week"
    )


def test_an_instructor_s_group_holds_at_most_its_part_of_a_model_s_pool(ctx, ledger):
    ctx.reservation_max_pool_fraction = 0.5
    code, answer = book(ctx, PROF, "2026-12-08T14:00", "2026-12-08T16:00", count=3)
    assert code == 400, answer
    assert answer["message"] == (
        "The reservation cannot be made: on Tue 8 Dec 2026 14:00–16:00, cs231n would hold 3 of the pool's 4 T4 GPUs"
        " at once, and an instructor may book at most 2 of them for a group at once (50% of the pool,"
        " c.Scheduling.reservation_max_pool_fraction); an administrator can book more"
    )
    assert tables(ledger)["gpu_reservations"] == []
    assert book(ctx, PROF, "2026-12-08T14:00", "2026-12-08T16:00", count=2)[0] == 201
    assert book(ctx, PROF, "2026-12-08T14:00", "2026-12-08T16:00", gpu_model="A100", count=2)[0] == 400
    assert book(ctx, ADMIN, "2026-12-09T14:00", "2026-12-09T16:00", count=4)[0] == 201


@pytest.mark.parametrize(
    "zone, offsets, refused",
    [
        # Sundays 00:00-04:00 from October: on 31 Oct 2027 the clocks go back, and that window is 5 hours
        ("Europe/Berlin", ("+02:00", "+02:00"), True),
        ("America/New_York", ("-04:00", "-04:00"), True),  # 7 Nov 2027
        ("Asia/Shanghai", ("+08:00", "+08:00"), False),  # no summer time: 4 hours every Sunday of the term
    ],
)
def test_a_weekly_booking_is_measured_at_every_window_in_the_lab_s_zone(ctx, ledger, zone, offsets, refused):
    ctx.tz = ZoneInfo(zone)
    code, answer = call(
        ctx,
        PROF,
        "POST",
        "/reservations",
        booking(
            start=f"2027-10-03T00:00{offsets[0]}",
            end=f"2027-10-03T04:00{offsets[1]}",
            weekly_until="2027-12-26",
            count=1,
        ),
    )
    if not refused:
        assert code == 201, answer
        return
    assert code == 400, answer
    night = "Sun 31 Oct 2027" if zone == "Europe/Berlin" else "Sun 7 Nov 2027"
    assert (
        f"its window on {night} 00:00–04:00 lasts 5 hours (the clocks change in it: 4 hours on the clock), and an"
        " instructor may book at most 4 hours at a time (c.Scheduling.reservation_max_hours)" in answer["message"]
    )
    assert tables(ledger)["gpu_reservations"] == []


@pytest.mark.parametrize(
    "setting, value, words",
    [
        ("reservation_max_gpu_hours_per_week", "0", "must be a positive number of GPU-hours, or None"),
        ("reservation_max_gpu_hours_per_week", "-40", "must be a positive number of GPU-hours, or None"),
        ("reservation_max_gpu_hours_per_week", "float('nan')", "must be a positive number of GPU-hours"),
        ("reservation_max_gpu_hours_per_week", "float('inf')", "must be a positive number of GPU-hours"),
        ("reservation_max_pool_fraction", "0", "must be a part of the pool above 0 and at most 1"),
        ("reservation_max_pool_fraction", "1.5", "must be a part of the pool above 0 and at most 1"),
        ("reservation_max_pool_fraction", "50", "must be a part of the pool above 0 and at most 1"),
        ("reservation_max_pool_fraction", "float('nan')", "must be a part of the pool above 0 and at most 1"),
    ],
)
def test_the_service_does_not_start_with_bad_booking_limits(tmp_path, monkeypatch, capsys, setting, value, words):
    from jupyterhub_gpu.service.app import GPUService

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.py"
    config.write_text(f"c.GPUService.{setting} = {value}\n")
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:  # one line naming the setting, not a traceback
        GPUService().initialize([db, f"--config={config}"])
    assert exit_info.value.code == 1
    assert f"configuration error: GPUService.{setting} {words}" in capsys.readouterr().err
    assert not (tmp_path / "ledger.sqlite").exists()


def test_the_booking_limits_reach_the_handlers():
    """The defaults keep today's bookings (4 hours, no weekly limit, the whole pool); the settings reach the
    handlers' context."""
    from jupyterhub_gpu.service.settings import Scheduling

    scheduling = Scheduling()  # the settings' group (c.Scheduling; c.GPUService.<name> of old still works)
    defaults = (
        scheduling.reservation_max_hours,
        scheduling.reservation_max_gpu_hours_per_week,
        scheduling.reservation_max_pool_fraction,
    )
    assert defaults == (4, None, 1)
    configured = SimpleNamespace(
        **{name: None for name in ("ledger", "hub", "hub_auth", "currency_info", "advice_settings", "notifier")},
        tick_health=None,
        tz=SHANGHAI,
        prefix="/services/gpu/",
        jobs=SimpleNamespace(max_concurrent=1, time_limit_minutes=1, time_limit_max_minutes=1),
        scheduling=SimpleNamespace(
            gpu_pool={"T4": 4},
            reservation_max_hours=6,
            reservation_notice_hours=12,
            reservation_max_gpu_hours_per_week=40,
            reservation_max_pool_fraction=0.5,
        ),
    )
    ctx = WebContext.from_service(configured)
    assert (ctx.reservation_max_hours, ctx.reservation_max_gpu_hours_per_week, ctx.reservation_max_pool_fraction) == (
        6,
        40,
        0.5,
    )
