"""``python -m jupyterhub_gpu.sim --trace FILE --policy NAME|CONFIG``: replay a trace, print JSON.

Exit status 0 with the report on stdout; 2 with a one-line ``error: ...`` on
stderr for a bad trace (it names the line), policy, rate or option.

``python -m jupyterhub_gpu.sim semester [--seed N] [--quick] ...`` plays a
seeded semester of a lab's GPU pool under the scheduling policies instead
(:mod:`.semester`, the pool simulator of docs/scheduling.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from jupyterhub_gpu.money import MoneyError, parse_amount
from jupyterhub_gpu.sim import semester
from jupyterhub_gpu.sim.replay import (
    BASELINES,
    DEFAULT_RATE,
    OURS,
    PolicyError,
    TraceError,
    read_trace,
    report,
    resolve_policy,
)


def _gpus(text: str) -> tuple[str, int]:
    profile, sep, count = text.partition("=")
    if not sep or not profile or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected PROFILE=N (N GPUs, 0 for a CPU-only profile), got {text!r}")
    return profile, int(count)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jupyterhub_gpu.sim",
        description="Replay a JSON Lines session trace through a culling policy and the baselines"
        f" ({', '.join(BASELINES)}); print billed GPU-minutes, idle GPU-minutes, false culls and cost as JSON.",
        epilog="'python -m jupyterhub_gpu.sim semester --help': a lab's GPU pool under the scheduling policies.",
    )
    p.add_argument("--trace", required=True, help="JSON Lines trace, one session per line (docs/culling.md)")
    p.add_argument(
        "--policy",
        default=OURS,
        help=f"{OURS} (the default rules), {', '.join(BASELINES)}, idle-culler-SECONDS[/EVERY],"
        " or a JSON file: a list of rules or a whole c.Culling.rules config (default: %(default)s)",
    )
    p.add_argument(
        "--rate-per-gpu-minute",
        default=str(DEFAULT_RATE),
        metavar="D",
        help="price of one GPU-minute, a decimal such as 0.05 (default: %(default)s)",
    )
    p.add_argument(
        "--gpus",
        type=_gpus,
        action="append",
        default=[],
        metavar="PROFILE=N",
        help="GPUs of a profile (default 1 for every profile; 0: CPU-only); repeat for several",
    )
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["semester"]:
        return semester.main(argv[1:])
    args = parser().parse_args(argv)
    try:
        rate = parse_amount(args.rate_per_gpu_minute, "--rate-per-gpu-minute")
        policy = resolve_policy(args.policy)
        sessions = read_trace(args.trace)
    except (MoneyError, PolicyError, TraceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = report(sessions, policy, rate, dict(args.gpus), trace=args.trace)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
