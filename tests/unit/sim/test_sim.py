"""The culling simulator: the trace generator, exact replays of tiny traces, the CLI and the benchmark."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from jupyterhub_gpu.sim.replay import (
    TraceError,
    parse_session,
    read_trace,
    replay,
    report,
    resolve_policy,
    simulate,
)
from jupyterhub_gpu.sim.trace import KINDS, TraceParams, generate, write_trace

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "benchmarks" / "traces" / "sample.jsonl"
START = 36_000  # a multiple of both idle-culler check intervals (300 s and 600 s)


def minute(util=0, busy=False, user=False, mem=0.0):
    return {"gpu_util": util, "gpu_mem_frac": mem, "kernel_busy": busy, "user_active": user}


def session(minutes, end_seconds=None, profile="gpu-t4", kind=None, start=START):
    line = {
        "user": "u1",
        "profile": profile,
        "start": start,
        "end": None if end_seconds is None else start + end_seconds,
        "minutes": minutes,
    }
    if kind:
        line["kind"] = kind
    return line


# A: five busy minutes, then the user leaves for an hour and forgets the server
LEFT = session([minute(90, True, i == 0) for i in range(5)] + [minute() for _ in range(60)])
# B: a training launched from a terminal: GPU busy for an hour, kernel idle, nobody in the Lab
BACKGROUND = session([minute(90) for _ in range(60)], end_seconds=3600)
# C: one GPU cell, then 40 minutes of editing with the GPU idle; the user stops it at 40:30
PRESENT = session([minute(50, True, True)] + [minute(0, user=True) for _ in range(40)], end_seconds=40 * 60 + 30)
# D: a CPU-only profile, no GPU samples, the user active only in the first minute
CPU = session([minute(None, user=i == 0, mem=None) for i in range(30)], end_seconds=1800, profile="cpu")
TINY = [LEFT, BACKGROUND, PRESENT, CPU]
GPUS = {"cpu": 0}


def parsed(lines):
    return [parse_session(line, i + 1) for i, line in enumerate(lines)]


def outcome(line, policy):
    return replay(parse_session(line), resolve_policy(policy), GPUS.get(line["profile"], 1))


# -- exact replays ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "policy", "billed", "culled", "rule"),
    [
        (LEFT, "always-on", 65, False, None),
        (LEFT, "ours", 20, True, "inactive"),  # nothing since 0:05: warned at 0:15, stopped at 0:20
        (LEFT, "idle-culler-600", 15, True, "idle-culler"),  # last activity 0:05, checks every 5 min
        (LEFT, "idle-culler-3600", 65, False, None),  # the 1:10 check comes after the end
        (BACKGROUND, "always-on", 60, False, None),
        (BACKGROUND, "ours", 60, False, None),  # the GPU at 90% is activity
        (BACKGROUND, "idle-culler-600", 10, True, "idle-culler"),  # no request, no kernel: cut at 0:10
        (BACKGROUND, "idle-culler-3600", 60, False, None),
        (PRESENT, "ours", 41, False, None),  # warned at 0:26, the user's next action cancels
        (PRESENT, "idle-culler-600", 41, False, None),
        (CPU, "ours", 16, True, "inactive"),  # CPU-only: gpu_idle does not judge it
        (CPU, "idle-culler-600", 15, True, "idle-culler"),
    ],
)
def test_replay_of_tiny_sessions_is_exact(line, policy, billed, culled, rule):
    result = outcome(line, policy)
    assert (result.billed_minutes, result.culled, result.rule) == (billed, culled, rule)


def test_a_present_user_answers_the_warning():
    result = outcome(PRESENT, "ours")
    assert (result.warnings, result.cancels) == (1, 1)


def test_simulate_totals_for_each_policy():
    sessions = parsed(TINY)
    ours = simulate(sessions, resolve_policy("ours"), Decimal("0.05"), GPUS)
    assert {k: ours[k] for k in ours if k != "policy"} == {
        "sessions": 4,
        "billed_minutes": 20 + 60 + 41 + 16,
        "billed_gpu_minutes": 20 + 60 + 41,
        "billed_idle_gpu_minutes": 15 + 0 + 40,
        "billed_unsampled_gpu_minutes": 0,
        "idle_share": round(55 / 121, 4),
        "false_cull_sessions": 0,
        "false_cull_minutes": 0,
        "culls": 2,
        "culls_by_rule": {"inactive": 2},
        "false_culls_by_rule": {},
        "warnings": 3,
        "cancelled_warnings": 1,
        "memory_notices": 0,
        "cost": "6.05",
    }
    culler = simulate(sessions, resolve_policy("idle-culler-600"), Decimal("0.05"), GPUS)
    assert culler["billed_minutes"] == 15 + 10 + 41 + 15
    assert culler["billed_gpu_minutes"] == 15 + 10 + 41
    assert culler["billed_idle_gpu_minutes"] == 10 + 0 + 40
    assert (culler["false_cull_sessions"], culler["false_cull_minutes"]) == (1, 50)  # the training, cut
    assert (culler["culls"], culler["cost"]) == (3, "3.30")
    assert "warnings" not in culler
    always = simulate(sessions, resolve_policy("always-on"), Decimal("0.05"), GPUS)
    assert (always["billed_gpu_minutes"], always["billed_idle_gpu_minutes"], always["culls"]) == (166, 100, 0)
    slow = simulate(sessions, resolve_policy("idle-culler-3600"), Decimal("0.05"), GPUS)
    assert slow["billed_gpu_minutes"] == 65 + 60 + 41  # nothing reaches an hour of inactivity in time


def test_billing_is_per_started_minute_up_to_the_stop():
    # starts at 10:00:30: ticks at 10:01:30, ...; idle-culler checks at wall-clock 10:05, 10:10, 10:15
    line = session([minute(90, True)] + [minute() for _ in range(40)], start=START + 30)
    assert outcome(line, "idle-culler-600").billed_minutes == 15  # stopped at 10:15:00: 14.5 min -> 15
    assert outcome(line, "ours").billed_minutes == 16  # stopped at 10:16:30


def test_unsampled_gpu_minutes_are_counted_apart_and_unsampled_sessions_judged_on_activity():
    line = session([minute(None, user=i == 0, mem=None) for i in range(40)], end_seconds=2400)
    result = simulate(parsed([line]), resolve_policy("ours"))
    assert result["billed_gpu_minutes"] == 16
    assert result["billed_unsampled_gpu_minutes"] == 16
    assert result["billed_idle_gpu_minutes"] == 0
    assert result["culls_by_rule"] == {"inactive": 1}


def test_memory_notice_is_counted():
    line = session([minute(90, True, mem=0.97) for _ in range(12)], end_seconds=720)
    assert simulate(parsed([line]), resolve_policy("ours"))["memory_notices"] == 1


def test_false_culls_count_busy_minutes_after_the_stop():
    # away 20 minutes mid-session, then back to work: idle-culler-600 and ours both cut it
    minutes = [minute(90, True, True)] + [minute() for _ in range(20)] + [minute(80, True, True) for _ in range(9)]
    line = session(minutes, end_seconds=30 * 60, kind="interactive")
    for policy, billed in (("idle-culler-600", 15), ("ours", 16)):
        result = simulate(parsed([line]), resolve_policy(policy))
        assert result["billed_minutes"] == billed
        assert (result["false_cull_sessions"], result["false_cull_minutes"]) == (1, 9)
        assert result["by_kind"]["interactive"]["false_cull_minutes"] == 9


def test_a_policy_file_of_rules(tmp_path):
    policy_file = tmp_path / "lenient.json"
    policy_file.write_text(json.dumps([{"kind": "gpu_idle", "minutes": 40, "warn_minutes": 5}]))
    policy = resolve_policy(str(policy_file))
    assert policy.name == "lenient"
    assert outcome(LEFT, str(policy_file)).billed_minutes == 45  # GPU idle since 0:05, 40 minutes
    per_profile = tmp_path / "profiles.json"
    per_profile.write_text(json.dumps({"default": [], "profiles": {"gpu-t4": [{"kind": "inactive", "minutes": 30}]}}))
    assert outcome(LEFT, str(per_profile)).billed_minutes == 35
    assert outcome(BACKGROUND, str(per_profile)).billed_minutes == 60


def test_report_has_the_policy_and_the_baselines():
    result = report(parsed(TINY), resolve_policy("ours"), Decimal("0.05"), GPUS, trace="tiny.jsonl")
    assert result["policy"]["policy"] == "ours"
    assert list(result["baselines"]) == ["always-on", "idle-culler-600", "idle-culler-3600"]
    assert result["policy"]["saved_gpu_minutes"] == 166 - 121
    assert result["baselines"]["always-on"]["saved_gpu_minutes"] == 0
    assert (result["rate_per_gpu_minute"], result["idle_threshold_percent"]) == ("0.05", 5)


@pytest.mark.parametrize("name", ["idle-culler", "nonsense", "idle-culler-10"])
def test_unknown_policies_are_refused(name):
    with pytest.raises(ValueError, match="policy"):
        resolve_policy(name)


def test_idle_culler_check_interval():
    assert (resolve_policy("idle-culler-600").every_s, resolve_policy("idle-culler-3600").every_s) == (300, 600)
    assert resolve_policy("idle-culler-1200").every_s == 600
    assert resolve_policy("idle-culler-600/60").every_s == 60


# -- reading traces --------------------------------------------------------------------------------


def write_lines(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{not json", r"line 2: not valid JSON"),
        ("[1, 2]", r"line 2: a session must be a JSON object"),
        ({k: v for k, v in LEFT.items() if k != "user"}, r"line 2: 'user' is missing"),
        ({**LEFT, "start": "noon"}, r"line 2: 'start' must be a number"),
        ({**LEFT, "end": START - 1}, r"line 2: 'end' must be at least"),
        ({**LEFT, "minutes": []}, r"line 2: 'minutes' must be a non-empty list"),
        ({**LEFT, "end": START + 60}, r"line 2: 'minutes' has 65 entries but start..end \(60 s\) spans 1"),
        ({**LEFT, "minutes": [minute(150)]}, r"line 2: minutes\[0\]\.gpu_util must be from 0 to 100"),
        ({**LEFT, "minutes": [minute(mem=1.5)]}, r"line 2: minutes\[0\]\.gpu_mem_frac must be from 0 to 1"),
        ({**LEFT, "minutes": [{**minute(), "kernel_busy": "yes"}]}, r"line 2: minutes\[0\]\.kernel_busy must be"),
        ({**LEFT, "minutes": [{"gpu_util": 0}]}, r"line 2: minutes\[0\]\.gpu_mem_frac is missing"),
    ],
)
def test_bad_trace_lines_name_the_line(tmp_path, bad, message):
    path = write_lines(tmp_path / "t.jsonl", [LEFT, bad])
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_blank_lines_are_skipped_and_kinds_kept(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [LEFT, "", session([minute()], 60, kind="training")])
    sessions = read_trace(path)
    assert [(s.line, s.kind) for s in sessions] == [(1, None), (3, "training")]


# -- the CLI ---------------------------------------------------------------------------------------


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpu.sim", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_cli_prints_valid_json(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", TINY)
    done = cli("--trace", str(path), "--policy", "ours", "--rate-per-gpu-minute", "0.10", "--gpus", "cpu=0")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["policy"]["billed_gpu_minutes"] == 121
    assert result["policy"]["cost"] == "12.10"
    assert result["baselines"]["idle-culler-600"]["false_cull_sessions"] == 1
    done = cli("--trace", str(path), "--policy", "idle-culler-600")
    assert json.loads(done.stdout)["policy"]["policy"] == "idle-culler-600"


@pytest.mark.parametrize(
    ("second_line", "args", "message"),
    [
        ({**LEFT, "minutes": []}, [], "t.jsonl line 2: 'minutes' must be a non-empty list"),
        ("{", [], "t.jsonl line 2: not valid JSON"),
        (LEFT, ["--policy", "bogus"], "unknown policy 'bogus'"),
        (LEFT, ["--rate-per-gpu-minute", "cheap"], "--rate-per-gpu-minute must be a decimal number"),
    ],
)
def test_cli_errors_exit_2_with_a_clear_message(tmp_path, second_line, args, message):
    path = write_lines(tmp_path / "t.jsonl", [LEFT, second_line])
    done = cli("--trace", str(path), *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert message in done.stderr


def test_cli_missing_trace_file_exits_2(tmp_path):
    done = cli("--trace", str(tmp_path / "none.jsonl"))
    assert done.returncode == 2
    assert "cannot read trace" in done.stderr


# -- the generator ---------------------------------------------------------------------------------


def test_generator_is_deterministic_for_a_seed(tmp_path):
    assert generate(40, 7) == generate(40, 7)
    assert generate(40, 7) != generate(40, 8)
    for name in ("a.jsonl", "b.jsonl"):
        done = subprocess.run(
            [sys.executable, "-m", "jupyterhub_gpu.sim.trace", "--sessions", "30", "--seed", "5", "--out", name],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert len(read_trace(tmp_path / "a.jsonl")) == 30


def test_generated_lines_are_valid_trace_lines(tmp_path):
    lines = generate(60, 3)
    sessions = parsed(lines)  # raises on any invalid line
    assert [s.start for s in sessions] == sorted(s.start for s in sessions)
    assert {s.kind for s in sessions} <= set(KINDS)
    write_trace(lines, tmp_path / "t.jsonl")
    assert read_trace(tmp_path / "t.jsonl") == [
        parse_session(json.loads(line), i + 1) for i, line in enumerate((tmp_path / "t.jsonl").read_text().splitlines())
    ]


def runs(flags):
    """Lengths of the runs of True in a list of booleans."""
    out, n = [], 0
    for flag in [*flags, False]:
        if flag:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


def test_generator_follows_its_parameters():
    only = {"frac_training": 0.0, "frac_interactive": 0.0, "frac_forgotten": 0.0, "frac_always_busy": 0.0}
    params = TraceParams(**{**only, "frac_training": 1.0}, bursts_min=2, bursts_max=2, train_min=15, train_max=15)
    for line in generate(20, 1, params):
        assert line["kind"] == "training" and line["end"] is not None
        busy = [m["kernel_busy"] for m in line["minutes"]]
        assert runs(busy) == [15, 15]  # two bursts of exactly 15 minutes
        for m in line["minutes"]:
            assert (60 <= m["gpu_util"] <= 100) if m["kernel_busy"] else (0 <= m["gpu_util"] <= 3)
    params = TraceParams(**{**only, "frac_always_busy": 1.0}, background_share=1.0, busy_hours_min=2, busy_hours_max=3)
    for line in generate(20, 2, params):
        assert line["kind"] == "always_busy"
        gpu = [m["gpu_util"] >= 60 for m in line["minutes"]]
        assert len(runs(gpu)) == 1 and 120 <= runs(gpu)[0] <= 180
        assert not any(m["kernel_busy"] for m in line["minutes"])  # launched from a terminal
        start = gpu.index(True)
        assert not any(m["user_active"] for m in line["minutes"][start:])  # nobody watches
    params = TraceParams(**{**only, "frac_forgotten": 1.0}, overnight_hours_min=6, overnight_hours_max=7)
    for line in generate(20, 3, params):
        assert line["kind"] == "forgotten" and line["end"] is None
        tail = runs([not m["kernel_busy"] and not m["user_active"] for m in line["minutes"]])[-1]
        assert tail >= 6 * 60
    params = TraceParams(profiles="only=1", users=1, days=1, start_hour_mean=9, start_hour_sd=0)
    lines = generate(10, 4, params)
    assert {(line["profile"], line["user"]) for line in lines} == {("only", "u000")}
    assert {line["start"] % 86400 for line in lines} == {9 * 3600}
    heavy = TraceParams(**{**only, "frac_training": 1.0}, mem_heavy_p=1.0)
    for line in generate(5, 5, heavy):
        assert max(m["gpu_mem_frac"] for m in line["minutes"]) >= 0.92


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"frac_training": 0.9}, "add up to 1"),
        ({"train_min": 50, "train_max": 10}, "train_min"),
        ({"away_p": 1.5}, "away_p must be a probability"),
        ({"idle_util_max": 5}, "idle_util_max"),
        ({"profiles": "t4"}, "profiles must be"),
    ],
)
def test_generator_refuses_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TraceParams(**kwargs)


def test_generator_cli_refuses_bad_parameters(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "jupyterhub_gpu.sim.trace", "--out", "t.jsonl", "--train-min", "500"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == 2
    assert "train_min (500) must not exceed train_max" in done.stderr


# -- the sample trace and the benchmark ------------------------------------------------------------


def test_sample_trace_is_the_generator_output_for_seed_2026():
    expected = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in generate(120, 2026))
    assert SAMPLE.read_text() == expected
    assert SAMPLE.stat().st_size < 2_000_000


def test_benchmark_meets_the_issue_on_the_sample_trace(capsys):
    spec = importlib.util.spec_from_file_location("cull_sim", ROOT / "benchmarks" / "cull_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0
    out = capsys.readouterr().out
    assert "| policy " in out and "| ours " in out
    assert "zero false culls on always-busy sessions: yes" in out
    assert "lowest billed idle share: yes" in out
