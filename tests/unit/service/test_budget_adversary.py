"""A student who wants free GPU time against the budgets, looked at as an adversary (docs/service.md, "Budgets").

Each test reproduces a way out of a budget that worked, through the real code
path: the real GPULocalSpawner of a JupyterHub User (its pre-spawn hook, the
spawn check, the pool choice), the real ledger (sqlite) and the real tick.
The clock is moved, never slept on. Checks that found the rules sound are
listed in the report of the review, not here.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from jupyterhub.spawner import SpawnException
from test_budget_periods import DEC, LATE, at, make_spawner, start

from jupyterhub_gpu.billing import BudgetRule, minutes_in_window, period_window

UTC = timezone.utc


def spawn(spawner, options, now):
    spawner.user_options = options
    asyncio.run(at(now, spawner.run_pre_spawn_hook()))
    pool = spawner._gpu_pool
    from jupyterhub_gpu.spawners.budget import drop_reservation as _drop_reservation

    _drop_reservation(spawner)  # the start is not recorded here: free the hold and the GPUs for the next attempt
    spawner.allocator.release(spawner._gpu_key)
    return pool


# -- the pool a student picks --------------------------------------------------------------------------------------


def test_a_group_whose_budget_binds_nothing_now_cannot_be_chosen_to_escape_one_that_binds(ledger, hub):
    """A student in cs231n (monthly budget, used up) and in last term's course (a term budget that ended).

    Before: the ended course was a "budgeted group", so it could be chosen (and,
    sorting first, was even the default), its budget refused nothing and the tick
    never stopped the session: unlimited GPU time while cs231n's budget was used up.
    """
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("1")), LATE)
    ended = BudgetRule("group", "algo-fall", "term", "money", Decimal("100"), date(2026, 9, 1), date(2026, 11, 30))
    ledger.set_budget(ended, LATE)
    start(ledger, "used", "bob", DEC, groups=("cs231n",), pool="cs231n")
    ledger.record_stop("used", DEC + timedelta(minutes=30), "stopped")  # ¥1.50 of cs231n's ¥1
    now = DEC + timedelta(hours=2)
    spawner = make_spawner(ledger, "ann", ("algo-fall", "cs231n"))
    form = asyncio.run(at(now, spawner._render_gpu_options_form()))
    assert '<option value="algo-fall">' not in form
    for options in ({"profile": "t4"}, {"profile": "t4", "pool": "algo-fall"}):
        with pytest.raises(SpawnException) as refused:
            spawn(spawner, options, now)
        assert "cs231n" in str(refused.value), (options, str(refused.value))
    # an upcoming term binds nothing yet either: it is no way out before it starts
    spring = BudgetRule("group", "algo-fall", "term", "money", Decimal("100"), date(2027, 2, 1), date(2027, 6, 30))
    ledger.set_budget(spring, now)
    with pytest.raises(SpawnException, match="cs231n"):
        spawn(spawner, {"profile": "t4", "pool": "algo-fall"}, now)
    assert ledger.open_sessions() == []


def test_a_group_budget_in_gpu_hours_is_no_way_out_of_a_money_budget_for_a_cpu_profile(ledger):
    """A GPU-hour budget draws nothing from a CPU-only profile: choosing its group made a paid CPU server free."""
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("1")), LATE)
    ledger.set_budget(BudgetRule("group", "astro", "month", "gpu_hours", Decimal("10")), LATE)
    start(ledger, "used", "bob", DEC, groups=("cs231n",), rate=10_000, gpus=0)
    ledger.record_stop("used", DEC + timedelta(minutes=100), "stopped")  # ¥1.00 of cs231n's ¥1
    now = DEC + timedelta(hours=2)
    spawner = make_spawner(ledger, "ann", ("astro", "cs231n"))
    for options in ({"profile": "cpu"}, {"profile": "cpu", "pool": "astro"}):
        with pytest.raises(SpawnException, match="cs231n"):
            spawn(spawner, options, now)
    # for a GPU profile both budgets bind, and the student may choose either
    assert spawn(spawner, {"profile": "t4", "pool": "astro"}, now) == "astro"


# -- period boundaries in the lab's time zone ------------------------------------------------------------------------


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Asia/Shanghai", "Australia/Lord_Howe"])
def test_periods_tile_the_time_line_across_dst_changes(zone):
    """Every instant is in exactly one week and one month, and the minutes of a session across a change add up."""
    tz = ZoneInfo(zone)
    for period in ("week", "month"):
        moment = datetime(2026, 1, 1, tzinfo=UTC)
        windows = []
        while moment < datetime(2027, 1, 10, tzinfo=UTC):
            windows.append(period_window(period, moment, tz))
            moment = windows[-1][1]
        for (a, b), (c, _) in itertools.pairwise(windows):
            assert b == c and a < b
            assert b.astimezone(tz).hour == 0 and b.astimezone(tz).minute == 0
            if period == "week":
                assert b.astimezone(tz).weekday() == 0
            for probe in (b - timedelta(microseconds=1), b, b + timedelta(minutes=59, seconds=59)):
                lo, hi = period_window(period, probe, tz)
                assert lo <= probe < hi
        # a session running across each boundary: its minutes add up over the periods
        for _, boundary in windows[:-1]:
            started = boundary - timedelta(minutes=7, seconds=30)
            minutes = 600
            parts = [minutes_in_window(started, minutes, a, b) for a, b in windows]
            assert sum(parts) == minutes


# -- concurrent named servers on different pools ----------------------------------------------------------------------


def test_concurrent_named_spawns_split_over_two_pools_still_fit_the_users_own_budget(ledger):
    """Eight named servers at once, four on each of two group pools: the user's own budget holds them all."""
    from jupyterhub_gpu.spawners.budget import drop_reservation as _drop_reservation

    # room for 2 × 20 minutes (budget_min_minutes) of ¥0.05 in ann's own budget; the pools have plenty
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("2.5")), LATE)
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("100")), LATE)
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal("100")), LATE)
    first = make_spawner(ledger, "ann", ("cs231n", "thesis"))
    user = first.user
    from jupyterhub import orm

    for i in range(8):
        user.db.add(orm.Spawner(user=user.orm_user, name=f"s{i}"))
    user.db.commit()
    spawners = [user.spawners[f"s{i}"] for i in range(8)]

    async def one(i, spawner):
        spawner.user_options = {"profile": "t4", "pool": "cs231n" if i % 2 else "thesis"}
        try:
            await spawner.run_pre_spawn_hook()
        except SpawnException as e:
            assert "Budget" in str(e) and "your budget" in str(e), str(e)
            return False
        return True

    async def all_at_once():
        return await asyncio.gather(*(one(i, s) for i, s in enumerate(spawners)))

    now = DEC + timedelta(hours=1)
    started = asyncio.run(at(now, all_at_once()))
    assert sum(started) == 2, started
    for s in spawners:
        _drop_reservation(s)
        s.allocator.release(s._gpu_key)


@pytest.mark.parametrize("forged", [" cs231n", "cs231n ", "CS231N", "cs231n\u200b", "cs231n\x00", "", "algo-fall"])
def test_a_pool_name_that_is_not_exactly_a_binding_group_of_the_user_starts_nothing(ledger, forged):
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("100")), LATE)
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal("100")), LATE)
    spawner = make_spawner(ledger, "ann", ("cs231n", "thesis", "algo-fall"))
    with pytest.raises(SpawnException, match=r"pool|cannot pay"):
        spawn(spawner, {"profile": "t4", "pool": forged}, DEC)
    assert ledger.open_sessions() == []


def test_a_second_start_of_a_server_whose_stopped_start_still_runs_is_refused_and_the_first_gives_up(ledger):
    """Two spawns of one server at once would both launch, on its one GPU, and only the last would be stopped.

    JupyterHub's stop of a server that is still starting only clears its flags (the hub's start-up check
    "appears to have stopped while the Hub was down" does it to a spawn waiting for the GPU restore), so the
    student's next start began a second spawn on the same spawner while the first ran on.
    """
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("100")), LATE)
    spawner = make_spawner(ledger, "ann", ())
    spawner.user_options = {"profile": "t4"}
    allocator = spawner.allocator
    now = DEC + timedelta(hours=1)

    async def scenario():
        # both T4s taken: the first start waits in the queue
        for other in ("x/", "y/"):
            await allocator.acquire(other, "T4", 1)
        first = asyncio.ensure_future(at(now, spawner.run_pre_spawn_hook()))
        for _ in range(500):  # until it stands in the queue
            if allocator.position(spawner._gpu_key) is not None:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(SpawnException) as refused:
            await at(now, spawner.run_pre_spawn_hook())  # the student's second start, in a request of its own
        assert refused.value.status_code == 409
        assert "still being cancelled" in str(refused.value)
        allocator.release("x/")  # a T4 frees: the first start gets it, sees it was given up, and frees it
        with pytest.raises(SpawnException, match="stopped while it was starting"):
            await first
        assert allocator.held_by(spawner._gpu_key) == [] and len(allocator.free("T4")) == 1
        # once the first has ended, the server starts again as usual
        await at(now, spawner.run_pre_spawn_hook())
        assert [d.name for d in allocator.held_by(spawner._gpu_key)] != []

    asyncio.run(scenario())
    assert ledger.open_sessions() == []
