"""Benchmark: a semester of a lab's GPU pool under FIFO, fair share, and fair share + the preemptible tier +
reservations, played by the pool simulator with the scheduler's real code (issue 16).

Generates a seeded semester (:mod:`jupyterhub_gpu.sim.semester`: 4× T4 + 4× A100, two courses with weekly classes
and a deadline week, a thesis group, 120 students) and plays it under the three policies
(:data:`jupyterhub_gpu.scheduler.POLICIES`), then prints one table:

- the pool's GPU-hours busy / allocated / available;
- wait p50 / p90 / p99 (minutes) per group and per tier, and in the deadline week;
- the wait estimate's error (p50, p90) against the wait that followed;
- preemptions, GPU-minutes of work lost, stops for a reservation, reservation windows served in full;
- spend per group and per student;

then whether the issue's targets hold, each with its figures. Nothing is tuned to meet them: a target that
does not hold is printed as FAIL, with what bounds it.

Usage::

    .venv/bin/python benchmarks/semester.py [--seed 2026] [--quick] [--weeks N] [--json] [--check]

``--quick``: three weeks (the second a deadline week) instead of fifteen. ``--check`` exits 1 when a target
fails. See docs/scheduling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from jupyterhub_gpu.money import Currency, from_micros
from jupyterhub_gpu.scheduler import POLICIES
from jupyterhub_gpu.sim.semester import SemesterParams, quick_params, run_semester

FIFO, FAIR, TIER = tuple(POLICIES)
CURRENCY = Currency.from_config("CNY")
#: The issue's targets.
BUSY_RATIO = 1.5
DEADLINE_P90_RATIO = 0.5


def _money(micros: int) -> str:
    return CURRENCY.format(from_micros(micros))


def _waits(w: dict) -> str:
    if not w["requests"]:
        return "-"
    return f"{w['p50']}/{w['p90']}/{w['p99']} ({w['requests']})"


def rows(out: dict) -> list[tuple[str, ...]]:
    reports = out["reports"]
    names = list(reports)
    table = [("", *names)]

    def row(label, fn):
        table.append((label, *(fn(reports[n]) for n in names)))

    row("pool GPU-h available", lambda r: f"{r['pool_gpu_hours']['available']:,.0f}")
    row(
        "pool GPU-h allocated (share)",
        lambda r: f"{r['pool_gpu_hours']['allocated']:,.0f} ({r['pool_gpu_hours']['allocated_share']:.1%})",
    )
    row(
        "pool GPU-h busy (share)",
        lambda r: f"{r['pool_gpu_hours']['busy']:,.0f} ({r['pool_gpu_hours']['busy_share']:.1%})",
    )
    row(
        "requests granted/gave up/refused/left",
        lambda r: "/".join(str(r["requests"][k]) for k in ("granted", "abandoned", "refused", "waiting")),
    )
    row("wait p50/p90/p99 min (n): all", lambda r: _waits(r["wait_minutes"]["all"]))
    for group in reports[names[0]]["wait_minutes"]["by_group"]:
        row(f"  group {group}", lambda r, g=group: _waits(r["wait_minutes"]["by_group"].get(g, {"requests": 0})))
    for tier in ("standard", "preemptible"):
        row(f"  tier {tier}", lambda r, t=tier: _waits(r["wait_minutes"]["by_tier"][t]))
    for tier in ("standard", "preemptible"):
        row(f"  deadline week, {tier}", lambda r, t=tier: _waits(r["wait_minutes"]["deadline_week"][t]))
    row(
        "estimate error p50/p90 min (n)",
        lambda r: (
            f"{r['estimate_error_minutes']['p50']}/{r['estimate_error_minutes']['p90']}"
            f" ({r['estimate_error_minutes']['estimated']})"
        ),
    )
    row("preemptions", lambda r: str(r["preemptions"]))
    row("GPU-min of work lost", lambda r: f"{r['lost_gpu_minutes']:,}")
    row("stops for a reservation", lambda r: str(r["reservation_stops"]))
    row("sessions culled", lambda r: str(r["culled"]))
    row(
        "reservation windows served in full",
        lambda r: f"{r['reservation_windows']['served_in_full']} of {r['reservation_windows']['windows']}",
    )
    for group in reports[names[0]]["spend_micros"]["by_group"]:
        row(f"spend {group}", lambda r, g=group: _money(r["spend_micros"]["by_group"].get(g, 0)))
        row(
            "  per student p50/p90/max",
            lambda r, g=group: "/".join(
                _money(r["spend_micros"]["per_student"][g][k] or 0) for k in ("p50_micros", "p90_micros", "max_micros")
            ),
        )
    return table


def render(table: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = []
    for j, r in enumerate(table):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(" | ".join(cells))
        if j == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def targets(out: dict) -> list[tuple[str, bool, str]]:
    """(the target, whether it holds, its figures) for each of the issue's targets."""
    reports, facts = out["reports"], out["facts"]
    fifo, tier = reports[FIFO], reports[TIER]
    found = []

    busy_fifo, busy_tier = fifo["pool_gpu_hours"]["busy_share"], tier["pool_gpu_hours"]["busy_share"]
    ratio = busy_tier / busy_fifo if busy_fifo else float("inf")
    offered = facts["offered_busy_share"]
    bound = offered / busy_fifo if busy_fifo else float("inf")
    allocated = fifo["pool_gpu_hours"]["allocated_share"] / busy_fifo if busy_fifo else float("inf")
    found.append(
        (
            f"busy share of the pool's hours with {TIER} >= {BUSY_RATIO}x FIFO's",
            ratio >= BUSY_RATIO,
            f"{busy_tier:.1%} vs {busy_fifo:.1%} = {ratio:.2f}x; the most any policy could reach here is"
            f" {bound:.2f}x (all the GPU work the semester asks for is {offered:.1%} of the pool's hours), and"
            f" FIFO's allocated-but-idle hours would give {allocated:.2f}x if every one of them became work",
        )
    )

    p90_fifo = fifo["wait_minutes"]["deadline_week"]["standard"]["p90"]
    p90_tier = tier["wait_minutes"]["deadline_week"]["standard"]["p90"]
    holds = p90_fifo is not None and p90_tier is not None and p90_tier <= DEADLINE_P90_RATIO * p90_fifo
    share = f" = {p90_tier / p90_fifo:.2f}x" if p90_fifo else ""
    found.append(
        (
            f"p90 wait of full-price requests in the deadline week with {TIER} <= {DEADLINE_P90_RATIO}x FIFO's",
            holds,
            f"{p90_tier} vs {p90_fifo} min{share} (a request never served counts with the time it waited)",
        )
    )

    windows = tier["reservation_windows"]
    short = windows["short"]
    found.append(
        (
            f"no class reservation starts with fewer GPUs than booked ({TIER})",
            windows["windows"] > 0 and not short,
            f"{windows['served_in_full']} of {windows['windows']} windows started with every booked GPU"
            + (f"; short: {short}" if short else ""),
        )
    )
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=2026, help="random seed (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="three weeks (the second a deadline week)")
    p.add_argument("--weeks", type=int, help="weeks of the term (default 15)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON too")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = p.parse_args(argv)
    params = quick_params() if args.quick else SemesterParams()
    if args.weeks is not None:
        if args.weeks < 1:
            p.error("--weeks must be at least 1")
        params = SemesterParams(weeks=args.weeks, deadline_week=min(params.deadline_week, args.weeks))
    began = time.perf_counter()
    out = run_semester(args.seed, params)
    seconds = time.perf_counter() - began
    facts = out["facts"]
    pool = " + ".join(f"{n}× {m}" for m, n in facts["pool"].items())
    students = ", ".join(f"{g} {n}" for g, n in facts["students"].items())
    print(
        f"jupyterhub-gpu semester benchmark: seed {facts['seed']}, {facts['weeks']} weeks (deadline week"
        f" {facts['deadline_week']}), pool {pool}, {sum(facts['students'].values())} students ({students}),"
        f" {facts['jobs']:,} requests"
    )
    print(
        "waits in minutes from a request's arrival to its grant; a request never served counts with the time it"
        " waited; tiers are what the student picked (without the tier every request runs at full price)"
    )
    print()
    print(render(rows(out)))
    print()
    failed = 0
    for target, holds, figures in targets(out):
        failed += not holds
        print(f"{'PASS' if holds else 'FAIL'}: {target}: {figures}")
    cpus = os.cpu_count() or 1
    spent = ", ".join(f"{k} {v:.1f} s" for k, v in out["seconds"].items())
    print(f"\nran in {seconds:.1f} s on {cpus} CPUs ({spent})")
    if args.json:
        print(json.dumps(out, indent=2))
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
