"""Benchmark: how much idle GPU time each culling policy bills, and what busy work it cuts, on a trace.

Replays a trace (default: the sample trace, 120 sessions from
``python -m jupyterhub_gpu.sim.trace --sessions 120 --seed 2026``) through the
simulator (:mod:`jupyterhub_gpu.sim.replay`, which runs the service's real
cull rules) under four policies and prints one table:

    always-on | jupyterhub-idle-culler 600 s | idle-culler 3600 s | ours (DEFAULT_RULES)

then the issue's acceptance check: ours must cut no always-busy session and
bill the lowest idle share of the four. Then the effect of the
``busy_gpu_idle`` rule (a busy kernel on a GPU that does nothing): the idle
GPU-minutes it removes against ours without it, the sessions it stops by
kind, and its false culls (a stop of a session whose GPU would have worked
again), which must be 0; ``--sweep`` adds the same for other horizons. The
trace with hung kernels and the legitimate runs that look like them is
``benchmarks/traces/hung.jsonl``.

Usage::

    .venv/bin/python benchmarks/cull_sim.py [--trace FILE] [--policy ours|FILE.json]
        [--rate-per-gpu-minute 0.05] [--json] [--check] [--sweep]

``--check`` exits 1 when the acceptance check fails (or the ``busy_gpu_idle``
rule falsely culls a session, or removes nothing from a trace with hung kernels). See docs/culling.md for
the model and the numbers on the sample trace.
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from jupyterhub_gpu.money import parse_amount
from jupyterhub_gpu.rules.cullrules import CullRule, parse_config
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.sim.replay import (
    BASELINES,
    DEFAULT_RATE,
    OURS,
    Policy,
    PolicyError,
    TraceError,
    read_trace,
    report,
    resolve_policy,
    simulate,
)
from jupyterhub_gpu.sim.trace import HUNG_KINDS

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "benchmarks" / "traces" / "sample.jsonl"
BUSY_KIND = "always_busy"
BUSY_RULE = StopReason.BUSY_GPU_IDLE
#: Horizons of ``busy_gpu_idle`` that ``--sweep`` compares (minutes).
SWEEP = (60, 90, 120, 180, 240)
HEADER = (
    "policy",
    "billed GPU-h",
    "billed idle GPU-h",
    "idle share",
    "false-cull sessions",
    "false-cull minutes",
    "culls",
    "cost",
)


def _hours(minutes: int) -> str:
    return str((Decimal(minutes) / 60).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def table(results: list[dict]) -> str:
    rows = [HEADER]
    for r in results:
        rows.append(
            (
                r["policy"],
                _hours(r["billed_gpu_minutes"]),
                _hours(r["billed_idle_gpu_minutes"]),
                f"{r['idle_share'] * 100:.1f}%",
                str(r["false_cull_sessions"]),
                str(r["false_cull_minutes"]),
                str(r["culls"]),
                str(Decimal(r["cost"]).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("| " + " | ".join(cells) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def verdict(results: list[dict], ours: dict) -> tuple[bool, list[str]]:
    """The issue's acceptance check, as lines of text, and whether it passed."""
    lines = []
    busy = [r.get("by_kind", {}).get(BUSY_KIND) for r in results]
    if all(b is not None for b in busy):
        for r, b in zip(results, busy, strict=True):
            lines.append(
                f"{r['policy']}: {b['false_cull_sessions']} of {b['sessions']} always-busy sessions cut short"
                f" ({b['false_cull_minutes']} busy minutes lost)"
            )
        ours_busy = ours["by_kind"][BUSY_KIND]["false_cull_sessions"]
    else:
        lines.append("the trace has no session kinds: counting false culls over all sessions")
        ours_busy = ours["false_cull_sessions"]
    lowest = min(r["idle_share"] for r in results)
    others = [r for r in results if r is not ours]
    best_other = min(others, key=lambda r: r["idle_share"])
    ok_busy = ours_busy == 0
    ok_share = ours["idle_share"] <= lowest and ours["idle_share"] < best_other["idle_share"]
    lines.append(f"zero false culls on always-busy sessions: {'yes' if ok_busy else 'NO'}")
    lines.append(
        f"lowest billed idle share: {'yes' if ok_share else 'NO'} ({ours['idle_share'] * 100:.1f}% against"
        f" {best_other['idle_share'] * 100:.1f}% for {best_other['policy']})"
    )
    return ok_busy and ok_share, lines


def rules_with_busy(rules, minutes: int | None) -> tuple[CullRule, ...]:
    """``rules`` with their ``busy_gpu_idle`` rule dropped (``None``) or given the horizon ``minutes``."""
    out = []
    for rule in rules:
        if rule.kind != BUSY_RULE:
            out.append(rule)
        elif minutes is not None:
            out.append(CullRule(BUSY_RULE, minutes, min(rule.warn_minutes, minutes - 1), rule.util_threshold))
    return tuple(out)


def _policy(name: str, rules) -> Policy:
    return Policy(name, "rules", parse_config({"default": list(rules)}))


def busy_effect(sessions, policy: Policy, rate) -> dict:
    """What ``busy_gpu_idle`` does on ``sessions``: ours with it against ours without it."""
    rules = policy.config["default"]
    rule = next((r for r in rules if r.kind == BUSY_RULE), None)
    with_it = simulate(sessions, policy, rate)
    without = simulate(sessions, _policy(f"{policy.name} without {BUSY_RULE}", rules_with_busy(rules, None)), rate)
    return {
        "rule": rule.to_dict() if rule else None,
        "idle_gpu_minutes_removed": without["billed_idle_gpu_minutes"] - with_it["billed_idle_gpu_minutes"],
        "gpu_minutes_removed": without["billed_gpu_minutes"] - with_it["billed_gpu_minutes"],
        "culls": with_it["culls_by_rule"].get(BUSY_RULE, 0),
        "false_culls": with_it["false_culls_by_rule"].get(BUSY_RULE, 0),
        "hung_sessions": sum(1 for s in sessions if s.kind in HUNG_KINDS),
        "by_kind": {
            kind: (tally["culls"], tally["false_cull_sessions"], tally["sessions"])
            for kind, tally in with_it.get("by_kind", {}).items()
        },
        "with": with_it,
        "without": without,
    }


def busy_lines(effect: dict) -> list[str]:
    rule = effect["rule"]
    if rule is None:
        return [f"{BUSY_RULE}: not in this policy"]
    removed = effect["idle_gpu_minutes_removed"]
    lines = [
        f"{BUSY_RULE} ({rule['minutes']} min, warned {rule['warn_minutes']} min ahead, under"
        f" {rule['util_threshold']:g}%): {removed} idle GPU-minutes ({_hours(removed)} GPU-h) removed against"
        f" {effect['without']['policy']}; {effect['culls']} sessions stopped by it"
        f" ({effect['hung_sessions']} hung in the trace), {effect['false_culls']} of them false culls",
    ]
    for kind, (culls, false, total) in sorted(effect["by_kind"].items()):
        lines.append(f"  {kind}: {culls} of {total} stopped (any rule), {false} false culls")
    return lines


def sweep_table(sessions, policy: Policy, rate) -> str:
    rows = [("busy_gpu_idle minutes", "idle GPU-h removed", "stopped by it", "its false culls", "all false culls")]
    for minutes in SWEEP:
        rules = rules_with_busy(policy.config["default"], minutes)
        effect = busy_effect(sessions, _policy(f"{BUSY_RULE}={minutes}", rules), rate)
        rows.append(
            (
                str(minutes),
                _hours(effect["idle_gpu_minutes_removed"]),
                str(effect["culls"]),
                str(effect["false_culls"]),
                str(effect["with"]["false_cull_sessions"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(SAMPLE), help="JSON Lines trace (default: benchmarks/traces/sample.jsonl)")
    p.add_argument("--policy", default=OURS, help="our policy: ours (DEFAULT_RULES) or a JSON file of rules")
    p.add_argument("--rate-per-gpu-minute", default=str(DEFAULT_RATE), metavar="D", help="default: %(default)s")
    p.add_argument("--json", action="store_true", help="print the simulator's full JSON report as well")
    p.add_argument("--check", action="store_true", help="exit 1 when the acceptance check fails")
    p.add_argument("--sweep", action="store_true", help=f"compare {BUSY_RULE} horizons {SWEEP} as well")
    args = p.parse_args(argv)
    try:
        rate = parse_amount(args.rate_per_gpu_minute, "--rate-per-gpu-minute")
        policy = resolve_policy(args.policy)
        sessions = read_trace(args.trace)
    except (ValueError, PolicyError, TraceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = report(sessions, policy, rate, trace=args.trace)
    ours = result["policy"]
    results = [result["baselines"][name] for name in BASELINES] + [ours]
    shown = Path(args.trace).resolve()
    shown = shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown
    print(f"trace: {shown} ({len(sessions)} sessions), {rate} per GPU-minute, idle = GPU under 5%\n")
    print(table(results))
    ok, lines = verdict(results, ours)
    print()
    print("\n".join(lines))
    if policy.kind == "rules" and "default" in policy.config:
        effect = busy_effect(sessions, policy, rate)
        print()
        print("\n".join(busy_lines(effect)))
        if effect["rule"] is not None:
            ok_busy = effect["false_culls"] == 0 and (effect["hung_sessions"] == 0 or effect["culls"] > 0)
            print(f"{BUSY_RULE}: no false culls and minutes removed where kernels hang: {'yes' if ok_busy else 'NO'}")
            ok = ok and ok_busy
        if args.sweep:
            print()
            print(sweep_table(sessions, policy, rate))
    if args.json:
        print(json.dumps(result, indent=2))
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
