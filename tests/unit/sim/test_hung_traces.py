"""The simulator on hung kernels: the trace kinds, what counts as a false cull, and the benchmark's check."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from jupyterhub_gpu.rules.cullrules import DEFAULT_RULES
from jupyterhub_gpu.sim.replay import TraceMinute, lost_work, parse_session, resolve_policy, simulate
from jupyterhub_gpu.sim.trace import HUNG_KINDS, TraceParams, generate

ROOT = Path(__file__).resolve().parents[3]
HUNG = ROOT / "benchmarks" / "traces" / "hung.jsonl"
#: The flags docs/culling.md gives for the hung-kernel trace (seed 19, 80 sessions).
HUNG_MIX = {
    "frac_training": 0.15,
    "frac_interactive": 0.15,
    "frac_forgotten": 0.05,
    "frac_always_busy": 0.1,
    "frac_hung_loader": 0.1,
    "frac_hung_input": 0.1,
    "frac_deadlock": 0.05,
    "frac_bursty": 0.15,
    "frac_preprocess": 0.15,
}


def m(util=0, kernel=False, user=False) -> TraceMinute:
    return TraceMinute(gpu_util=util, gpu_mem_frac=0.5, kernel_busy=kernel, user_active=user)


def test_lost_work_is_gpu_work_or_a_cell_started_after_the_stop():
    hung_then_back = [m(kernel=True)] * 30 + [m(user=True)] * 3
    assert lost_work(hung_then_back) == 0  # the hung kernel, then the user stopping it: nothing lost
    assert lost_work([m(kernel=True)] * 5 + [m(80, kernel=True)] * 4) == 4  # the GPU would have worked
    assert lost_work([m(kernel=True), m(), m(kernel=True), m(kernel=True)]) == 2  # a new cell after the stop
    assert lost_work([m(), m(60)]) == 1


def test_the_hung_trace_is_the_generator_output_and_has_every_kind():
    lines = generate(80, 19, TraceParams(**HUNG_MIX))
    assert HUNG.stat().st_size < 2_000_000  # small enough to stay in the repository
    assert HUNG.read_text() == "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    kinds = {line["kind"] for line in lines}
    assert set(HUNG_KINDS) | {"bursty", "preprocess", "always_busy"} <= kinds


def test_generated_hung_kinds_hang_and_legit_ones_work_in_bursts():
    lines = generate(60, 7, TraceParams(**{**HUNG_MIX, "hung_hours_min": 3.0, "hung_hours_max": 3.0}))
    for line in lines:
        minutes = parse_session(line).minutes
        runs, run = [], 0  # stretches of busy kernel on an idle GPU
        for minute in minutes:
            if minute.kernel_busy and not minute.gpu_busy:
                run += 1
            else:
                runs, run = [*runs, run], 0
        longest = max([*runs, run])
        if line["kind"] in HUNG_KINDS:
            assert longest >= 180 and not any(x.gpu_busy for x in minutes[-5:])
        elif line["kind"] == "bursty":
            assert longest <= 60 and sum(x.gpu_busy for x in minutes) > 0
        elif line["kind"] == "preprocess":
            assert 10 <= longest <= 90


def test_ours_stops_hung_sessions_only_with_the_busy_rule():
    lines = [line for line in generate(40, 5, TraceParams(**HUNG_MIX))]
    sessions = [parse_session(line) for line in lines]
    result = simulate(sessions, resolve_policy("ours"))
    hung = sum(1 for s in sessions if s.kind in HUNG_KINDS)
    assert hung and result["culls_by_rule"]["busy_gpu_idle"] == hung
    assert "busy_gpu_idle" not in result["false_culls_by_rule"]
    for kind in ("bursty", "preprocess", "always_busy"):
        if kind in result["by_kind"]:
            assert result["by_kind"][kind]["culls"] == 0


def test_benchmark_on_the_hung_trace_removes_idle_minutes_without_false_culls(capsys):
    spec = importlib.util.spec_from_file_location("cull_sim", ROOT / "benchmarks" / "cull_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--trace", str(HUNG), "--check"]) == 0
    out = capsys.readouterr().out
    assert "| ours " in out and "zero false culls on always-busy sessions: yes" in out
    found = re.search(
        r"busy_gpu_idle \(120 min.*?: (\d+) idle GPU-minutes .* (\d+) sessions stopped by it .*, (\d+) of", out
    )
    assert found, out
    removed, stopped, false = map(int, found.groups())
    assert removed > 0 and stopped > 0 and false == 0
    assert "busy_gpu_idle: no false culls and minutes removed where kernels hang: yes" in out
    for kind in ("bursty", "preprocess", "always_busy"):
        assert re.search(rf"  {kind}: 0 of \d+ stopped \(any rule\), 0 false culls", out)


def test_the_sweep_compares_horizons_and_longer_ones_stop_no_work(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("cull_sim", ROOT / "benchmarks" / "cull_sim.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mix = {**HUNG_MIX, "preprocess_min": 70, "preprocess_max": 85, "hung_hours_min": 2.5, "hung_hours_max": 3.0}
    lines = generate(16, 11, TraceParams(**mix))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert module.main(["--trace", str(path), "--sweep"]) == 0
    rows = {}
    for text in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in text.strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert sorted(rows) == list(module.SWEEP)
    assert rows[60][3] != "0"  # a 60-minute horizon stops preprocessing of 70-85 minutes: false culls
    assert all(rows[minutes][3] == "0" for minutes in (120, 180, 240))
    assert module.rules_with_busy(DEFAULT_RULES, None) == DEFAULT_RULES[:3]
