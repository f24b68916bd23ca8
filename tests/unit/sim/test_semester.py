"""The two semesters' shape (the heavy deadline week asks for 1.5-2x the pool), the checkpoint model, and the
semester's figures on a tiny lab worked out by hand."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone

import pytest

from jupyterhub_gpu.scheduler import POLICIES, PREEMPTIBLE
from jupyterhub_gpu.sim import __main__ as cli
from jupyterhub_gpu.sim.checkpoint import epoch_ends, resume_point
from jupyterhub_gpu.sim.metrics import group_shares, report
from jupyterhub_gpu.sim.pool import PREEMPTED, Job, Lab, simulate
from jupyterhub_gpu.sim.replay import TraceMinute, cull_length
from jupyterhub_gpu.sim.semester import LOADS, WEEK_MINUTES, demand, lab_and_jobs, load_params

TIER = POLICIES["fair-share+tier+reservations"]
ORIGIN = datetime(2026, 9, 7, 8, 0, tzinfo=timezone.utc)
BUSY = TraceMinute(90, 0.5, True, False)
IDLE_USER = TraceMinute(0, 0.5, False, True)  # editing: the user there, the GPU idle


@functools.cache
def _semester(seed: int, load: str):
    return lab_and_jobs(seed, LOADS[load])


def _deadline_demand(seed: int, load: str) -> dict:
    lab, jobs, facts = _semester(seed, load)
    first, last = facts["deadline_minutes"]
    lengths = {j.id: cull_length(j.minutes) for j in jobs if first <= j.arrival < last}
    return demand(lab, jobs, lengths, first, last)


# -- the semesters' shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [2026, 1, 2, 3])
def test_the_heavy_deadline_week_asks_for_one_and_a_half_to_two_times_the_pool(seed):
    asked = _deadline_demand(seed, "heavy")
    assert 1.5 <= asked["ratio"] <= 2.0, asked
    # every model is over-asked, not only one: no policy can serve the week in full
    assert all(ratio > 1.0 for ratio in asked["by_model"].values()), asked


@pytest.mark.parametrize("seed", [2026, 1])
def test_the_light_deadline_week_asks_for_about_what_the_pool_has(seed):
    asked = _deadline_demand(seed, "light")
    assert 0.8 <= asked["ratio"] <= 1.2, asked


def test_the_heavy_semester_is_the_light_one_until_its_deadline_week():
    light_lab, light, facts = _semester(2026, "light")
    heavy_lab, heavy, _ = _semester(2026, "heavy")
    first, _ = facts["deadline_minutes"]
    assert heavy_lab == light_lab
    # the class requests are drawn after the term's: the same classes, other students and sessions
    before = [j for j in light if j.arrival < first and j.kind != "class"]
    assert [j for j in heavy if j.arrival < first and j.kind != "class"] == before
    assert len(heavy) > len(light)


def test_demand_on_a_hand_made_week():
    lab = Lab(pool={"T4": 1, "A100": 1}, origin=ORIGIN, minutes=WEEK_MINUTES)
    jobs = [
        Job("a", "u", "g", "t4", "T4", 10, (BUSY,) * 60),
        Job("b", "u", "g", "a100", "A100", 20, (BUSY,) * 30 + (IDLE_USER,) * 30, count=2),
        Job("late", "u", "g", "t4", "T4", WEEK_MINUTES, (BUSY,) * 60),  # not in the week
    ]
    lengths = {j.id: cull_length(j.minutes) for j in jobs}
    asked = demand(lab, jobs, lengths, 0, WEEK_MINUTES)
    assert asked["held_gpu_minutes"] == 60 + 2 * 60
    assert asked["busy_gpu_minutes"] == 60 + 2 * 30
    assert asked["ratio"] == round(180 / (2 * WEEK_MINUTES), 4)
    assert asked["by_model"] == {"T4": round(60 / WEEK_MINUTES, 4), "A100": round(120 / WEEK_MINUTES, 4)}


def test_loads_and_their_errors():
    assert load_params("heavy").deadline_factor == 6.0
    assert load_params("light").deadline_factor == 3.0
    quick = load_params("heavy", quick=True)
    assert (quick.weeks, quick.deadline_week, quick.deadline_factor) == (3, 2, 6.0)
    assert load_params("heavy", weeks=4).deadline_week == 4
    with pytest.raises(ValueError, match="unknown load 'medium'"):
        load_params("medium")
    with pytest.raises(ValueError, match="--weeks must be at least 1"):
        load_params("light", weeks=0)


def test_the_cli_plays_the_heavy_semester(capsys):
    assert cli.main(["semester", "--load", "heavy", "--weeks", "1", "--policy", "fifo", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["facts"]["load"] == "heavy"
    assert out["facts"]["deadline_demand"]["ratio"] > 1.5
    assert set(out["reports"]["fifo"]["served"]["all"]) == {"requests", "served", "gave_up", "refused", "waiting"}


def test_checkpoint_details_are_seeded_and_leave_the_requests_alone():
    _, jobs, _ = lab_and_jobs(5, load_params("light", weeks=2))
    _, again, _ = lab_and_jobs(5, load_params("light", weeks=2))
    assert jobs == again
    saving = [j for j in jobs if j.checkpoints]
    assert saving and all(j.epoch_minutes is not None for j in saving)
    assert not any(j.epoch_minutes for j in jobs if not j.checkpoints)
    cut_off = sum(1 for j in saving if not j.saves_on_stop)
    assert 0 < cut_off < len(saving) / 2  # a few saves at the stop take longer than the kill's wait


# -- the checkpoint model ------------------------------------------------------------------------------------


def _job(minutes, checkpoints=True, epoch=None, saves=True) -> Job:
    return Job(
        "j", "u", "g", "t4", "T4", 0, tuple(minutes), checkpoints=checkpoints, epoch_minutes=epoch, saves_on_stop=saves
    )


def test_epochs_end_every_epoch_minutes_of_a_fit_and_where_the_fit_ends():
    minutes = [IDLE_USER] * 2 + [BUSY] * 7 + [IDLE_USER] * 3 + [BUSY] * 4
    # a fit from index 2 to 8: epochs end after 3 and 6 busy minutes, and the fit ends at index 9
    assert epoch_ends(tuple(minutes), 3, len(minutes)) == [5, 8, 9, 15, 16]
    assert epoch_ends(tuple(minutes), None, len(minutes)) == [9, 16]
    # a fit cut by the stop has not ended: no save at the stop index
    assert epoch_ends(tuple(minutes), None, 6) == []


def test_resume_point_is_the_last_save():
    minutes = [BUSY] * 20
    assert resume_point(_job(minutes, epoch=5, saves=True), 0, 13) == 13  # saved at the stop
    assert resume_point(_job(minutes, epoch=5, saves=False), 0, 13) == 10  # cut off: the last epoch's save
    assert resume_point(_job(minutes, epoch=5, saves=False), 12, 14) == 12  # none since its own start
    assert resume_point(_job(minutes, checkpoints=False), 12, 14) == 0  # no callback: from the start


# -- the figures on a tiny lab, worked out by hand -----------------------------------------------------------


def test_the_figures_of_a_tiny_lab_are_the_hand_computed_ones():
    """One T4; groups A (share 1) and B (share 3).

    - ``p`` (A, preemptible, CheckpointAndResume with 5-minute epochs whose save at a stop is cut off) arrives
      at 0 with 30 busy minutes; ``u`` (B, full price: 10 busy minutes, then 10 of editing) at 5. At 10 ``p``
      reaches its minimum runtime and is preempted; it stops at 12 (the grace), having saved at 5 and 10: the
      2 busy minutes since are lost, and it resumes from minute 10 of its trace.
    - ``u`` runs 12-32; ``g`` (B, full price, patience 10) arrives at 15 and gives up at 25.
    - ``p`` runs again 32-52 (its 20 minutes left).
    """
    p = Job(
        "p",
        "ua",
        "A",
        "t4",
        "T4",
        0,
        (BUSY,) * 30,
        tier=PREEMPTIBLE,
        checkpoints=True,
        requeue=True,
        epoch_minutes=5,
        saves_on_stop=False,
        rate_micros=50_000,
        preemptible_rate_micros=20_000,
    )
    u = Job("u", "ub", "B", "t4", "T4", 5, (BUSY,) * 10 + (IDLE_USER,) * 10, rate_micros=50_000)
    g = Job("g", "ug", "B", "t4", "T4", 15, (BUSY,) * 5, patience=10, rate_micros=50_000)
    lab = Lab(pool={"T4": 1}, origin=ORIGIN, minutes=120, shares={"A": {"T4": 1.0}, "B": {"T4": 3.0}})
    result = simulate(lab, [p, u, g], TIER)
    assert [(r.job, r.start, r.minutes, r.end, r.lost_gpu_minutes) for r in result.runs] == [
        ("p", 0, 12, PREEMPTED, 2),
        ("u", 12, 20, "natural", 0),
        ("p", 32, 20, "natural", 0),
    ]
    figures = report(result, {"deadline_week": (0, 120)})

    # served versus given up: each request once (p's resumption is not a new one)
    assert figures["served"]["all"] == {"requests": 3, "served": 2, "gave_up": 1, "refused": 0, "waiting": 0}
    assert figures["served"]["deadline_week"] == figures["served"]["all"]
    # waits: u 7 (5 -> 12), g 10 (gave up), p 0 and its resumption 20 (12 -> 32); p90 by nearest rank
    week = figures["wait_minutes"]["deadline_week"]
    assert (week["standard"]["requests"], week["standard"]["p90"]) == (2, 10)
    assert (week["preemptible"]["requests"], week["preemptible"]["p90"]) == (2, 20)
    # billed 12 + 20 + 20 = 52 GPU-minutes, of which the GPU worked 12 + 10 + 20 = 42; always-on: p's 30 minutes
    # (all busy) and u's 20 (10 busy), served at once and never stopped
    assert figures["billed"] == {
        "billed_gpu_minutes": 52,
        "busy_gpu_minutes": 42,
        "busy_share": round(42 / 52, 4),
        "always_on": {"requests": 2, "billed_gpu_minutes": 50, "busy_gpu_minutes": 40, "busy_share": 0.8},
    }
    # lost: 2 of the preemptible tier's 12 + 20 minutes of work
    assert figures["preemption_loss"] == {
        "lost_gpu_minutes": 2,
        "preemptible_work_gpu_minutes": 32,
        "share": round(2 / 32, 4),
        "lost_without_checkpoint": 0,
        "reservation_lost_gpu_minutes": 0,
    }
    # spend: A 32 minutes at 0.02 = 640,000 micros, B 20 at 0.05 = 1,000,000; shares 1/4 and 3/4
    assert figures["groups"] == {
        "A": {
            "spend_micros": 640_000,
            "spend_share": round(640 / 1640, 4),
            "gpu_minutes": 32,
            "use_share": round(32 / 52, 4),
            "share": 0.25,
        },
        "B": {
            "spend_micros": 1_000_000,
            "spend_share": round(1000 / 1640, 4),
            "gpu_minutes": 20,
            "use_share": round(20 / 52, 4),
            "share": 0.75,
        },
    }


def test_a_group_share_is_weighted_by_the_models_units():
    # A has all of the T4s' shares (3 units) and half of the A100s' (1 unit): (3 * 1 + 1 * 0.5) / 4
    shares = {"A": {"T4": 1.0, "A100": 1.0}, "B": {"T4": 0.0, "A100": 1.0}}
    assert group_shares({"T4": 3, "A100": 1}, shares, ["A", "B"]) == {"A": 0.875, "B": 0.125}
    # a group without a configured share has 1 of each model
    assert group_shares({"T4": 1}, {"A": {"T4": 3.0}}, ["A", "C"]) == {"A": 0.75, "C": 0.25}
