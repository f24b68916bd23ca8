"""Benchmark: a semester of a lab's GPU pool under FIFO, fair share, and fair share + the preemptible tier +
reservations, played by the pool simulator with the scheduler's real code.

Generates two seeded semesters (:mod:`jupyterhub_gpu.sim.semester`: 4× T4 + 4× A100, two courses with weekly
classes and a deadline week, a thesis group, 120 students): ``light``, whose deadline week asks for about as many
GPU-hours as the pool has, and ``heavy``, whose deadline week asks for 1.5-2 times as many. Plays each under the
three policies (:data:`jupyterhub_gpu.scheduler.POLICIES`) and prints one table per semester:

- what the semester asks for (the deadline week's GPU-hours against the pool's);
- the pool's GPU-hours busy / allocated / available;
- requests served and given up (all, the deadline week, the class requests);
- wait p50 / p90 / p99 (minutes) per group and per tier, and in the deadline week;
- the wait estimate's error (p50, p90) against the wait that followed;
- billed GPU-hours and the share of them in which the GPU did work, next to an always-on baseline for the same
  requests (billed from their start for their whole session, no culling);
- preemptions, work lost to preemption against the preemptible tier's work, stops for a reservation,
  reservation windows served in full;
- spend per group (and its part of all spend and GPU-hours) against its share, and per student;

then whether the targets hold, each with its figures. Nothing is tuned to meet them: a target that does not
hold is printed as FAIL, with what bounds it (for the deadline week's waits: the same semester with no
preemptible request at all, the most the tier can give the full-price requests).

Usage::

    .venv/bin/python benchmarks/semester.py [--load light|heavy|both] [--seed 2026] [--quick] [--weeks N]
                                            [--json] [--check]

``--quick``: three weeks (the second a deadline week) instead of fifteen. ``--check`` exits 1 when a target
fails. See docs/scheduling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from jupyterhub_gpu.money import Currency, from_micros
from jupyterhub_gpu.scheduler import POLICIES
from jupyterhub_gpu.sim.semester import LOADS, load_params, run_semester

FIFO, FAIR, TIER = tuple(POLICIES)
CURRENCY = Currency.from_config("CNY")
#: The targets.
DEADLINE_P90_RATIO = 0.5
LOST_SHARE = 0.02
#: What the sources this project follows report of billed GPU time that did work: always-on, and after their changes.
SOURCES_ALWAYS_ON, SOURCES_AFTER = 0.15, 0.68


def _money(micros: int) -> str:
    return CURRENCY.format(from_micros(micros))


def _waits(w: dict) -> str:
    if not w["requests"]:
        return "-"
    return f"{w['p50']}/{w['p90']}/{w['p99']} ({w['requests']})"


def _served(s: dict) -> str:
    return f"{s['served']}/{s['gave_up']}/{s['waiting']} of {s['requests']}"


def _hours(minutes: int) -> str:
    return f"{minutes / 60:,.0f}"


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
    row("requests served/gave up/left", lambda r: _served(r["served"]["all"]))
    row("  deadline week", lambda r: _served(r["served"]["deadline_week"]))
    row("  class requests", lambda r: _served(r["served"]["by_kind"].get("class", _NONE)))
    row("resumed after a stop (granted)", lambda r: str(r["requests"]["granted"] - r["served"]["all"]["served"]))
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
    row(
        "billed GPU-h (GPU did work)",
        lambda r: f"{_hours(r['billed']['billed_gpu_minutes'])} ({r['billed']['busy_share']:.1%})",
    )
    row(
        "  always-on, same requests",
        lambda r: (
            f"{_hours(r['billed']['always_on']['billed_gpu_minutes'])} ({r['billed']['always_on']['busy_share']:.1%})"
        ),
    )
    row("preemptions", lambda r: str(r["preemptions"]))
    row(
        "work lost to preemption GPU-min",
        lambda r: (
            f"{r['preemption_loss']['lost_gpu_minutes']:,} of {r['preemption_loss']['preemptible_work_gpu_minutes']:,}"
            f" ({r['preemption_loss']['share']:.2%})"
        ),
    )
    row("stops for a reservation", lambda r: str(r["reservation_stops"]))
    row("  work lost at them GPU-min", lambda r: f"{r['preemption_loss']['reservation_lost_gpu_minutes']:,}")
    row("sessions culled", lambda r: str(r["culled"]))
    row(
        "reservation windows served in full",
        lambda r: f"{r['reservation_windows']['served_in_full']} of {r['reservation_windows']['windows']}",
    )
    for group in reports[names[0]]["groups"]:
        row(
            f"spend {group} (spend/GPU-h/share)",
            lambda r, g=group: (
                f"{_money(r['groups'][g]['spend_micros'])} ({r['groups'][g]['spend_share']:.0%}/"
                f"{r['groups'][g]['use_share']:.0%}/{r['groups'][g]['share']:.0%})"
            ),
        )
        row(
            "  per student p50/p90/max",
            lambda r, g=group: "/".join(
                _money(r["spend_micros"]["per_student"].get(g, _NO_SPEND)[k] or 0)
                for k in ("p50_micros", "p90_micros", "max_micros")
            ),
        )
    return table


_NONE = {"served": 0, "gave_up": 0, "waiting": 0, "requests": 0}
_NO_SPEND = {"p50_micros": 0, "p90_micros": 0, "max_micros": 0}


def render(table: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = []
    for j, r in enumerate(table):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        lines.append(" | ".join(cells))
        if j == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def targets(out: dict) -> list[tuple[str, bool | None, str]]:
    """(the target, whether it holds (None: a figure with no target), its figures), for one semester."""
    reports, facts = out["reports"], out["facts"]
    fifo, tier = reports[FIFO], reports[TIER]
    found = []

    def p90(r):
        return r["wait_minutes"]["deadline_week"]["standard"]["p90"]

    p90_fifo, p90_tier = p90(fifo), p90(tier)
    holds = p90_fifo is not None and p90_tier is not None and p90_tier <= DEADLINE_P90_RATIO * p90_fifo

    def times(v):
        return f" ({v / p90_fifo:.2f}x)" if p90_fifo and v is not None else ""

    figures = f"{p90_tier} vs FIFO's {p90_fifo} min{times(p90_tier)}; fair share alone {p90(reports[FAIR])} min"
    if "bound" in out:
        bound = out["bound"]
        alone = bound["served"]["deadline_week"]
        figures += (
            f"; with no preemptible request at all (the most the tier can give them), {p90(bound)} min"
            f"{times(p90(bound))}: the full-price requests alone ask for"
            f" {_ratios(facts['deadline_full_price'])} of the week's GPU-hours and {alone['gave_up']} of their"
            f" {alone['requests']} gave up even then"
        )
    found.append(
        (
            f"p90 wait of full-price requests in the deadline week with {TIER} <= {DEADLINE_P90_RATIO}x FIFO's",
            holds,
            figures,
        )
    )

    loss = tier["preemption_loss"]
    found.append(
        (
            f"work lost to preemption <= {LOST_SHARE:.0%} of the preemptible tier's work ({TIER})",
            loss["share"] <= LOST_SHARE,
            f"{loss['lost_gpu_minutes']:,} of {loss['preemptible_work_gpu_minutes']:,} GPU-minutes"
            f" ({loss['share']:.2%}) in {tier['preemptions']} preemptions, {loss['lost_without_checkpoint']:,} of"
            " them by sessions without CheckpointAndResume",
        )
    )

    windows = tier["reservation_windows"]
    short = windows["short"]
    found.append(
        (
            f"every class reservation starts with every booked GPU ({TIER})",
            windows["windows"] > 0 and not short,
            f"{windows['served_in_full']} of {windows['windows']} windows" + (f"; short: {short}" if short else ""),
        )
    )

    billed = "; ".join(
        f"{n} {r['billed']['busy_share']:.0%} (always-on {r['billed']['always_on']['busy_share']:.0%})"
        for n, r in reports.items()
    )
    found.append(
        (
            "billed GPU-minutes in which the GPU did work",
            None,
            f"{billed}; the sources this project follows report {SOURCES_ALWAYS_ON:.0%} always-on and"
            f" {SOURCES_AFTER:.0%} after their changes",
        )
    )
    served = "; ".join(
        f"{n} {r['served']['deadline_week']['served']} served, {r['served']['deadline_week']['gave_up']} gave up"
        for n, r in reports.items()
    )
    found.append(("requests of the deadline week", None, served))
    return found


def _ratios(demand: dict) -> str:
    models = ", ".join(f"{m} {v:.2f}x" for m, v in demand["by_model"].items())
    return f"{demand['ratio']:.2f}x ({models})"


def describe(out: dict, load: str) -> str:
    facts = out["facts"]
    pool = " + ".join(f"{n}× {m}" for m, n in facts["pool"].items())
    students = ", ".join(f"{g} {n}" for g, n in facts["students"].items())
    deadline = facts["deadline_demand"]
    return (
        f"semester '{load}': seed {facts['seed']}, {facts['weeks']} weeks (deadline week {facts['deadline_week']}),"
        f" pool {pool}, {sum(facts['students'].values())} students ({students}), {facts['jobs']:,} requests\n"
        f"the deadline week asks for {_ratios(deadline)} of the pool's GPU-hours that week (its GPU work"
        f" {deadline['busy_ratio']:.2f}x); the whole term {facts['offered_held_share']:.0%} (its GPU work"
        f" {facts['offered_busy_share']:.0%})"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--load", choices=[*LOADS, "both"], default="both", help="which semester (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2026, help="random seed (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="three weeks (the second a deadline week)")
    p.add_argument("--weeks", type=int, help="weeks of the term (default 15)")
    p.add_argument("--json", action="store_true", help="print the reports as JSON too")
    p.add_argument("--check", action="store_true", help="exit 1 when a target fails")
    args = p.parse_args(argv)
    loads = list(LOADS) if args.load == "both" else [args.load]
    try:
        params = {load: load_params(load, args.quick, args.weeks) for load in loads}
    except ValueError as e:
        p.error(str(e))
    began = time.perf_counter()
    print(
        f"jupyterhub-gpu semester benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC,"
        f" {os.cpu_count() or 1} CPUs ({platform.machine()}), Python {platform.python_version()}"
    )
    print(
        "waits in minutes from a request's arrival to its grant; a request never served counts with the time it"
        " waited; tiers are what the student picked (without the tier every request runs at full price);"
        " served/gave up/left counts each request once (not its resumptions)"
    )
    failed = 0
    everything = {}
    for load in loads:
        out = run_semester(args.seed, params[load], bound=TIER)
        everything[load] = out
        print()
        print(describe(out, load))
        print()
        print(render(rows(out)))
        print()
        for target, holds, figures in targets(out):
            failed += holds is False
            verdict = "figure" if holds is None else "PASS" if holds else "FAIL"
            print(f"{verdict}: {target}: {figures}")
        spent = ", ".join(f"{k} {v:.1f} s" for k, v in out["seconds"].items())
        print(f"({spent})")
    print(f"\nran in {time.perf_counter() - began:.1f} s")
    if args.json:
        print(json.dumps(everything, indent=2))
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
