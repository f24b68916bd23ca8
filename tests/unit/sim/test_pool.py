"""The pool simulator: exact small labs under each policy, culling as the service does it, and the semester."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu.rules.cullrules import DEFAULT_RULES
from jupyterhub_gpu.scheduler import (
    POLICIES,
    PREEMPTIBLE,
    FairShare,
    Policy,
    Reservation,
    decayed_usage,
)
from jupyterhub_gpu.sim import __main__ as cli
from jupyterhub_gpu.sim.metrics import percentile, report
from jupyterhub_gpu.sim.pool import (
    HORIZON,
    NATURAL,
    PREEMPTED,
    RESERVED,
    Job,
    Lab,
    PoolSim,
    simulate,
)
from jupyterhub_gpu.sim.replay import TraceMinute, cull_length, parse_session, replay_rules
from jupyterhub_gpu.sim.semester import SemesterParams, lab_and_jobs, run_semester
from jupyterhub_gpu.sim.trace import TraceParams, generate

ROOT = Path(__file__).resolve().parents[3]
ORIGIN = datetime(2026, 9, 7, 8, 0, tzinfo=timezone.utc)
FIFO, FAIR, TIER = (POLICIES[n] for n in POLICIES)
BUSY = TraceMinute(90, 0.5, True, False)
IDLE_USER = TraceMinute(0, 0.5, False, True)  # editing: the user there, the GPU idle


def job(jid, arrival, minutes, group="A", **kw) -> Job:
    kw.setdefault("rate_micros", 50_000)
    kw.setdefault("preemptible_rate_micros", 20_000)
    return Job(jid, f"u-{jid}", group, "t4", "T4", arrival, tuple(minutes), **kw)


def lab(units=1, minutes=24 * 60, reservations=(), windows=()) -> Lab:
    return Lab(
        pool={"T4": units},
        origin=ORIGIN,
        minutes=minutes,
        reservations=reservations,
        class_windows=windows,
    )


def runs_of(result, job_id):
    return [r for r in result.runs if r.job == job_id]


def request_of(result, request_id):
    return next(r for r in result.requests if r.id == request_id)


# -- culling: the service's rules decide how long a session runs ------------------------------------------------


def test_cull_length_is_the_replay_of_the_real_cull_rules():
    kinds = dict(
        frac_training=0.2,
        frac_interactive=0.2,
        frac_forgotten=0.2,
        frac_always_busy=0.1,
        frac_hung_loader=0.1,
        frac_hung_input=0.1,
        frac_bursty=0.1,
    )
    lines = generate(40, seed=11, params=TraceParams(**kinds))
    culled = 0
    for number, line in enumerate(lines):
        session = parse_session(line, number)
        outcome = replay_rules(session, DEFAULT_RULES)
        length, rule = cull_length(session.minutes, DEFAULT_RULES)
        assert length == outcome.billed_minutes, (number, line["kind"])
        assert rule == (outcome.rule if outcome.culled else None)
        culled += outcome.culled
    assert culled >= 5  # the table holds culled sessions, not only ones their users stopped


def test_an_idle_session_is_culled_and_a_busy_one_runs_to_its_end():
    assert cull_length([BUSY] * 120) == (120, None)
    # 10 busy minutes then nothing at all: inactive warns at 10, stops at 15 minutes of nothing
    nothing = TraceMinute(0, 0.5, False, False)
    assert cull_length([BUSY] * 10 + [nothing] * 300) == (25, "inactive")
    assert cull_length([BUSY] * 10 + [nothing] * 300, rules=()) == (310, None)


# -- small labs, exactly -----------------------------------------------------------------------------------------


def test_fifo_a_request_waits_for_the_session_ahead_and_its_estimate_is_that_end():
    first = job("first", 0, [BUSY] * 30, time_limit=30)
    second = job("second", 5, [BUSY] * 20)
    result = simulate(lab(), [first, second], FIFO)
    assert request_of(result, "first").wait == 0
    second_record = request_of(result, "second")
    assert (second_record.wait, second_record.outcome) == (25, "granted")
    assert second_record.estimate == 25  # the first session's known end (its job's time limit)
    (run,) = runs_of(result, "first")
    assert (run.start, run.minutes, run.busy_gpu_minutes, run.end) == (0, 30, 30, NATURAL)
    assert run.cost_micros == 30 * 50_000
    figures = report(result)
    assert figures["estimate_error_minutes"]["p50"] == 0
    assert figures["pool_gpu_hours"]["busy"] == round(50 / 60, 1)


def test_a_student_who_gives_up_leaves_the_queue():
    result = simulate(lab(), [job("long", 0, [BUSY] * 120), job("impatient", 1, [BUSY] * 5, patience=10)], FIFO)
    record = request_of(result, "impatient")
    assert (record.outcome, record.wait) == ("abandoned", 10)
    assert runs_of(result, "impatient") == []


@pytest.mark.parametrize("checkpoints", [True, False])
def test_a_preempted_job_resumes_and_does_all_its_work(checkpoints):
    """A preemptible training (60 GPU-minutes) from minute 0; a full-price request at 5. The training is
    preempted at 10 (its minimum runtime) and stops at 12 (the grace); the full-price session runs 20
    minutes; the training resumes at 32 from its checkpoint (or from the start, losing its 12 minutes)."""
    training = job("train", 0, [BUSY] * 60, tier=PREEMPTIBLE, checkpoints=checkpoints, requeue=True)
    urgent = job("urgent", 5, [BUSY] * 20, group="B")
    result = simulate(lab(), [training, urgent], TIER)
    assert result.preemptions == 1
    assert request_of(result, "urgent").wait == 7
    first, resumed = runs_of(result, "train")
    assert (first.start, first.minutes, first.end) == (0, 12, PREEMPTED)
    assert first.lost_gpu_minutes == (0 if checkpoints else 12)
    assert (resumed.start, resumed.end) == (32, NATURAL)
    assert resumed.minutes == (48 if checkpoints else 60)
    # the same total work as without the interruption, plus what was lost
    assert first.busy_gpu_minutes + resumed.busy_gpu_minutes == 60 + first.lost_gpu_minutes
    assert request_of(result, "train.r1").wait == 20
    assert first.cost_micros == 12 * 20_000  # the preemptible rate


def test_under_fifo_the_same_full_price_request_waits_for_the_whole_training():
    training = job("train", 0, [BUSY] * 60, tier=PREEMPTIBLE, checkpoints=True, requeue=True)
    result = simulate(lab(), [training, job("urgent", 5, [BUSY] * 20, group="B")], FIFO)
    assert result.preemptions == 0
    assert request_of(result, "urgent").wait == 55
    assert runs_of(result, "train")[0].cost_micros == 60 * 50_000  # no tier: full price


def test_a_reservation_stops_a_stranger_before_the_class_and_its_members_start_on_time():
    start = ORIGIN + timedelta(minutes=120)
    booking = Reservation("class", "cs", "T4", 1, start, start + timedelta(hours=2), label="CS231N")
    pool = lab(reservations=(booking,), windows=(("class", 120, 240),))
    stranger = job("stranger", 60, [BUSY] * 180, group="other")
    member = job("member", 121, [IDLE_USER, BUSY] * 40, group="cs", patience=30)
    result = simulate(pool, [stranger, member], TIER)
    (run,) = runs_of(result, "stranger")
    assert (run.start, run.minutes, run.end) == (60, 55, RESERVED)  # until 12:55, 5 minutes before the class
    assert run.lost_gpu_minutes == 55  # no checkpoint
    assert request_of(result, "member").wait == 0
    assert [w.served for w in result.windows] == [True]
    # without the reservation plugin (FIFO, today) the stranger keeps the GPU and the class waits
    result = simulate(pool, [stranger, member], FIFO)
    assert [w.served for w in result.windows] == [False]
    assert request_of(result, "member").outcome == "abandoned"


def test_the_horizon_ends_the_runs_still_going():
    result = simulate(lab(minutes=30), [job("j", 0, [BUSY] * 60), job("w", 1, [BUSY] * 5)], FIFO)
    assert [(r.minutes, r.end) for r in result.runs] == [(30, HORIZON)]
    assert request_of(result, "w").outcome == "waiting"


def test_the_simulators_decayed_usage_is_the_schedulers():
    jobs = [job(f"a{i}", 40 * i, [BUSY] * 50, group="A") for i in range(6)]
    jobs += [job(f"b{i}", 15 + 90 * i, [BUSY] * 25, group="B") for i in range(3)]
    half_life = timedelta(hours=2)
    policy = Policy("fair", FairShare(half_life=half_life))
    sim = PoolSim(lab(units=2, minutes=300), jobs, policy)
    result = sim.run()
    at = ORIGIN + timedelta(minutes=300)
    sessions = [
        (
            r.group,
            r.model,
            r.count,
            ORIGIN + timedelta(minutes=r.start),
            ORIGIN + timedelta(minutes=r.start + r.minutes),
        )
        for r in result.runs
    ]
    expected = decayed_usage(sessions, at, half_life)
    assert set(sim.usage) == set(expected)
    for group, by_model in expected.items():
        assert sim.usage[group]["T4"] == pytest.approx(by_model["T4"], rel=1e-9)


def test_percentile_is_the_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 90) == 90
    assert percentile(list(range(1, 101)), 99) == 99


# -- a generated semester ----------------------------------------------------------------------------------------

ONE_WEEK = SemesterParams(weeks=1, deadline_week=1)


@pytest.fixture(scope="module")
def week():
    return run_semester(7, ONE_WEEK)


def test_a_semester_week_is_deterministic_for_its_seed(week):
    again = run_semester(7, ONE_WEEK, ("fifo",))
    assert again["reports"]["fifo"] == week["reports"]["fifo"]
    assert again["facts"] == week["facts"]
    other = run_semester(8, ONE_WEEK, ("fifo",))
    assert other["reports"]["fifo"] != week["reports"]["fifo"]


def test_a_semester_week_under_each_policy_adds_up(week):
    lab_, jobs, facts = lab_and_jobs(7, ONE_WEEK)
    assert facts["jobs"] == len(jobs) > 200
    assert sum(facts["students"].values()) == 120
    assert lab_.pool == {"T4": 4, "A100": 4}
    reports = week["reports"]
    assert list(reports) == list(POLICIES)
    for name, figures in reports.items():
        hours = figures["pool_gpu_hours"]
        assert 0 < hours["busy"] <= hours["allocated"] <= hours["available"] == 8 * 7 * 24
        counted = figures["requests"]
        assert sum(counted.values()) == figures["wait_minutes"]["all"]["requests"] + counted["refused"]
        assert counted["refused"] == 0
        first_requests = sum(1 for _ in jobs)
        resumes = sum(counted.values()) - first_requests
        if name == "fair-share+tier+reservations":
            assert figures["preemptions"] > 0 and resumes > 0
            windows = figures["reservation_windows"]
            assert windows["windows"] == 2 and windows["served_in_full"] == 2  # CS231N and CS224N
        else:
            assert figures["preemptions"] == figures["lost_gpu_minutes"] == resumes == 0
        assert figures["estimate_error_minutes"]["estimated"] > 0
    # the tier is cheaper for the thesis group, which picks it most
    spend = {n: r["spend_micros"]["by_group"]["thesis"] for n, r in reports.items()}
    assert spend["fair-share+tier+reservations"] < spend["fifo"]


def test_the_cli_plays_a_semester_as_json(capsys):
    assert cli.main(["semester", "--weeks", "1", "--policy", "fifo", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out["reports"]) == ["fifo"]
    assert out["facts"]["seed"] == 3
    assert cli.main(["semester", "--weeks", "0"]) == 2
    assert "--weeks must be at least 1" in capsys.readouterr().err


def test_the_benchmark_prints_both_semesters_and_the_targets(capsys):
    spec = importlib.util.spec_from_file_location("semester_benchmark", ROOT / "benchmarks" / "semester.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    assert benchmark.main(["--weeks", "1", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("semester ")] == [
        "semester 'light'",
        "semester 'heavy'",
    ]
    headers = [line for line in out.splitlines() if line.lstrip().startswith("|")]
    assert len(headers) == 2
    assert [cell.strip() for cell in headers[0].split("|")[1:]] == list(POLICIES)
    for label in (
        "requests served/gave up/left",
        "billed GPU-h (GPU did work)",
        "always-on, same requests",
        "work lost to preemption GPU-min",
        "reservation windows served in full",
        "spend thesis (spend/GPU-h/share)",
    ):
        assert out.count(label) == 2
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS: ", "FAIL: ", "figure: "))]
    assert len(verdicts) == 10
    assert sum(line.startswith("PASS: every class reservation starts with every booked GPU") for line in verdicts) == 2
    assert sum("with no preemptible request at all" in line for line in verdicts) == 2
