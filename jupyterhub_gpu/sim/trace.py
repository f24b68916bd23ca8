"""Synthetic lab workload traces for the culling simulator, from documented, parameterised distributions.

``python -m jupyterhub_gpu.sim.trace --sessions N --seed S --out FILE [--PARAM VALUE ...]``
writes N sessions as JSON Lines (the trace format of docs/culling.md). The
same seed and parameters always give the same file.

Each session is one of four kinds (``--frac-*``), built from segments of
minutes; every length below is a whole number of minutes drawn uniformly
between its ``-min`` and ``-max`` parameter unless said otherwise:

- ``training``: set-up (editing), then ``bursts`` rounds of a training burst
  (kernel busy, GPU ``train-util``) followed by a review (editing), then an
  idle tail while the user is away (exponential, mean ``idle-tail-mean``),
  after which the user stops the server themselves.
- ``interactive`` (debugging): for ``interactive`` minutes, editing pauses
  (``think``) alternate with short cells (``debug-burst``; on the GPU at
  ``debug-util``, or on the CPU with probability ``cpu-cell-share``), and
  after a cell the user steps away with probability ``away-p`` (``away``);
  then an idle tail (mean ``interactive-tail-mean``) and the user stops it.
- ``forgotten``: the body of a training or an interactive session, then hours
  of idle (``overnight-hours``): ``end`` is null, nobody stops it.
- ``always_busy``: a short set-up, then one long training run
  (``busy-hours``) with no user activity at all, a fraction
  (``background-share``) launched as a script from a terminal (the kernel is
  idle while the GPU works), then at most ``busy-tail-max`` idle minutes
  before the user stops it. A good policy never culls these.

Five more kinds (shares 0 by default, so the sample trace is unchanged) are
the cases of ``busy_gpu_idle``, hung kernels and the legitimate work that
looks like them:

- ``hung_loader``, ``deadlock``: set-up, a training burst, then the kernel
  stays busy on an idle GPU (a data loader that waits forever, workers that
  deadlock on a lock) with its memory held, for ``hung-hours``; then the user
  comes back, edits a few minutes and stops the server.
- ``hung_input``: set-up, a GPU cell, then a cell blocked on ``input()``
  (kernel busy, GPU idle) for ``hung-hours``; then as above.
- ``bursty``: a long run (``bursty-hours``) with no user activity whose GPU
  works in bursts (``gpu-burst``) between GPU-idle gaps (``gap``: loading the
  next shard, evaluating on the CPU) with the kernel busy throughout; then at
  most ``busy-tail-max`` idle minutes. A good policy never culls these.
- ``preprocess``: set-up, then ``bursts`` rounds of a CPU-heavy preprocessing
  phase (``preprocess``: kernel busy, GPU idle) followed by a training burst;
  then a review and the user stops it. A good policy never culls these either:
  the longest GPU-idle phase of work is ``max(gap-max, preprocess-max)``.

Minute by minute: editing is ``user_active`` with probability
``user-active-p``; an idle GPU shows 0 to ``idle-util-max`` percent; GPU memory
is 0 until the kernel first uses the GPU and then stays at the session's level
(TensorFlow keeps its memory while the kernel lives): uniform in
``mem-min``..``mem-max``, or ``mem-heavy-min``..0.99 for a share
``mem-heavy-p`` of sessions. Starts fall on ``days`` days from ``origin``, at a
normal time of day (``start-hour-mean``, ``start-hour-sd``, kept within 8:00
to 21:30). Every line also carries ``"kind"``, which policies ignore and the
simulator uses for its per-kind breakdown.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path

from jupyterhub_gpu.rules import idle

KINDS = (
    "training",
    "interactive",
    "forgotten",
    "always_busy",
    "hung_loader",
    "hung_input",
    "deadlock",
    "bursty",
    "preprocess",
)
#: The kinds whose kernel hangs busy on an idle GPU until the user comes back.
HUNG_KINDS = ("hung_loader", "hung_input", "deadlock")


def _p(help_text: str, default):
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True)
class TraceParams:
    """The distributions of a generated trace; each field is a ``--flag`` of the CLI."""

    frac_training: float = _p("share of training sessions", default=0.40)
    frac_interactive: float = _p("share of interactive debugging sessions", default=0.35)
    frac_forgotten: float = _p("share of sessions forgotten overnight (end null)", default=0.10)
    frac_always_busy: float = _p("share of long training runs with no user activity", default=0.15)
    frac_hung_loader: float = _p("share of sessions whose data loader hangs (kernel busy, GPU idle)", default=0.0)
    frac_hung_input: float = _p("share of sessions with a cell blocked on input()", default=0.0)
    frac_deadlock: float = _p("share of sessions whose training deadlocks", default=0.0)
    frac_bursty: float = _p("share of long runs whose GPU works in bursts between CPU gaps", default=0.0)
    frac_preprocess: float = _p("share of sessions with CPU-heavy preprocessing phases", default=0.0)
    users: int = _p("number of distinct users", default=60)
    profiles: str = _p("profiles and their shares, PROFILE=SHARE,...", default="gpu-t4=0.7,gpu-a100=0.3")
    origin: str = _p("first day of the trace (UTC, a Monday)", default="2026-02-02")
    days: int = _p("days over which sessions start", default=5)
    start_hour_mean: float = _p("mean start time of day, hours (UTC)", default=13.5)
    start_hour_sd: float = _p("standard deviation of the start time, hours", default=2.5)
    user_active_p: float = _p("probability that an editing minute shows user activity", default=0.8)
    idle_util_max: int = _p("GPU utilization of an idle minute: 0 to this, percent", default=3)
    setup_min: int = _p("set-up editing before training, minutes", default=5)
    setup_max: int = _p("", default=20)
    bursts_min: int = _p("training bursts per training session", default=1)
    bursts_max: int = _p("", default=3)
    train_min: int = _p("length of a training burst, minutes", default=10)
    train_max: int = _p("", default=120)
    train_util_min: int = _p("GPU utilization while training, percent", default=60)
    train_util_max: int = _p("", default=100)
    train_user_p: float = _p("probability per training minute that the user looks at progress", default=0.05)
    review_min: int = _p("review (editing) after a training burst, minutes", default=5)
    review_max: int = _p("", default=20)
    idle_tail_mean: float = _p("mean idle tail before the user stops a training session, minutes", default=40.0)
    interactive_min: int = _p("working time of an interactive session, minutes", default=30)
    interactive_max: int = _p("", default=150)
    think_min: int = _p("editing pause between cells, minutes", default=2)
    think_max: int = _p("", default=12)
    debug_burst_min: int = _p("length of a cell, minutes", default=1)
    debug_burst_max: int = _p("", default=5)
    debug_util_min: int = _p("GPU utilization of a GPU cell, percent", default=20)
    debug_util_max: int = _p("", default=90)
    cpu_cell_share: float = _p("share of cells that run on the CPU only (kernel busy, GPU idle)", default=0.2)
    away_p: float = _p("probability that the user steps away after a cell", default=0.1)
    away_min: int = _p("length of a step away, minutes", default=10)
    away_max: int = _p("", default=45)
    interactive_tail_mean: float = _p("mean idle tail before the user stops an interactive session", default=20.0)
    overnight_hours_min: float = _p("idle hours of a forgotten session", default=6.0)
    overnight_hours_max: float = _p("", default=14.0)
    busy_hours_min: float = _p("length of an always-busy training run, hours", default=2.0)
    busy_hours_max: float = _p("", default=8.0)
    background_share: float = _p("share of always-busy runs started as a script from a terminal", default=0.5)
    busy_tail_max: int = _p("idle minutes after an always-busy run, at most", default=10)
    mem_min: float = _p("GPU memory level of a session, fraction", default=0.2)
    mem_max: float = _p("", default=0.85)
    mem_heavy_p: float = _p("share of sessions near full GPU memory", default=0.1)
    mem_heavy_min: float = _p("lowest memory level of such a session", default=0.92)
    hung_hours_min: float = _p("hours a hung kernel stays hung before its user comes back", default=2.0)
    hung_hours_max: float = _p("", default=10.0)
    bursty_hours_min: float = _p("length of a bursty run, hours", default=2.0)
    bursty_hours_max: float = _p("", default=8.0)
    gpu_burst_min: int = _p("length of a GPU burst of a bursty run, minutes", default=1)
    gpu_burst_max: int = _p("", default=15)
    gap_min: int = _p("GPU-idle gap between bursts of a bursty run (kernel busy), minutes", default=1)
    gap_max: int = _p("", default=60)
    preprocess_min: int = _p("CPU-heavy preprocessing phase (kernel busy, GPU idle), minutes", default=10)
    preprocess_max: int = _p("", default=90)

    def __post_init__(self):
        shares = self.kind_shares()
        if any(s < 0 for s in shares) or not math.isclose(sum(shares), 1.0, abs_tol=1e-6):
            raise ValueError(f"frac_* must be non-negative and add up to 1, got {sum(shares):g}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_p") or f.name.endswith("_share"):
                if not 0 <= value <= 1:
                    raise ValueError(f"{f.name} must be a probability from 0 to 1, got {value!r}")
            elif isinstance(value, (int, float)) and value < 0:
                raise ValueError(f"{f.name} must not be negative, got {value!r}")
            if f.name.endswith("_min") and hasattr(self, f.name[:-4] + "_max"):
                high = getattr(self, f.name[:-4] + "_max")
                if value > high:
                    raise ValueError(f"{f.name} ({value}) must not exceed {f.name[:-4]}_max ({high})")
        if self.users < 1 or self.days < 1:
            raise ValueError("users and days must be at least 1")
        busy = idle.IDLE.util_percent  # the one definition of an idle minute (rules/idle.py)
        if not 0 <= self.idle_util_max < busy:
            raise ValueError(
                f"idle_util_max must be from 0 to {busy - 1} (idle means under {busy}%), got {self.idle_util_max}"
            )
        if self.train_util_min < busy or self.debug_util_min < busy:
            raise ValueError(f"train_util_min and debug_util_min must be at least {busy} (busy means {busy}% or more)")
        if self.mem_heavy_min > 0.99:
            raise ValueError(f"mem_heavy_min must be at most 0.99, got {self.mem_heavy_min}")
        if self.idle_tail_mean <= 0 or self.interactive_tail_mean <= 0:
            raise ValueError("idle_tail_mean and interactive_tail_mean must be above 0")
        self.profile_shares()  # validates
        self.origin_time()

    def kind_shares(self) -> list[float]:
        """The share of each of :data:`KINDS`, in its order."""
        return [getattr(self, f"frac_{kind}") for kind in KINDS]

    def profile_shares(self) -> list[tuple[str, float]]:
        shares = []
        for item in self.profiles.split(","):
            name, sep, share = item.strip().partition("=")
            try:
                weight = float(share)
            except ValueError:
                weight = -1.0
            if not sep or not name or weight <= 0:
                raise ValueError(f"profiles must be PROFILE=SHARE,... with shares above 0, got {self.profiles!r}")
            shares.append((name, weight))
        return shares

    def origin_time(self) -> datetime:
        try:
            return datetime.fromisoformat(self.origin + "T00:00:00+00:00")
        except ValueError:
            raise ValueError(f"origin must be a date such as 2026-02-02, got {self.origin!r}") from None


class _Session:
    """Builds one session's minutes."""

    def __init__(self, rng: random.Random, params: TraceParams):
        self.rng, self.params = rng, params
        self.minutes: list[dict] = []
        heavy = rng.random() < params.mem_heavy_p
        low, high = (params.mem_heavy_min, 0.99) if heavy else (params.mem_min, params.mem_max)
        self.mem_level = round(rng.uniform(low, high), 2)
        self.kernel_holds_gpu = False

    def _between(self, name: str) -> int:
        return self.rng.randint(getattr(self.params, name + "_min"), getattr(self.params, name + "_max"))

    def _idle_util(self) -> int:
        return self.rng.randint(0, self.params.idle_util_max)

    def _add(self, util: int, kernel_busy: bool, user_active: bool, mem: float | None = None) -> None:
        if mem is None:
            mem = self.mem_level if self.kernel_holds_gpu else 0
        self.minutes.append(
            {"gpu_util": util, "gpu_mem_frac": mem, "kernel_busy": kernel_busy, "user_active": user_active}
        )

    def edit(self, n: int) -> None:
        for _ in range(n):
            self._add(self._idle_util(), False, self.rng.random() < self.params.user_active_p)

    def away(self, n: int) -> None:
        for _ in range(n):
            self._add(self._idle_util(), False, False)

    def train(self, n: int, background: bool = False, user_p: float | None = None) -> None:
        user_p = self.params.train_user_p if user_p is None else user_p
        if not background:
            self.kernel_holds_gpu = True
        for _ in range(n):
            util = self.rng.randint(self.params.train_util_min, self.params.train_util_max)
            self._add(util, not background, self.rng.random() < user_p, self.mem_level if background else None)

    def hang(self, n: int) -> None:
        """A kernel busy on an idle GPU, nobody there, its memory (if any) held."""
        for _ in range(n):
            self._add(self._idle_util(), True, False)

    def cpu_phase(self, n: int) -> None:
        """A CPU-heavy phase: the kernel busy, the GPU idle, no user action."""
        for _ in range(n):
            self._add(self._idle_util(), True, False)

    def cell(self) -> None:
        n = self._between("debug_burst")
        on_gpu = self.rng.random() >= self.params.cpu_cell_share
        if on_gpu:
            self.kernel_holds_gpu = True
        for _ in range(n):
            util = self._between("debug_util") if on_gpu else self._idle_util()
            self._add(util, True, self.rng.random() < 0.5)

    def exponential(self, mean: float) -> int:
        return round(self.rng.expovariate(1 / mean))

    # -- bodies ------------------------------------------------------------------------

    def training_body(self) -> None:
        self.edit(self._between("setup"))
        for _ in range(self._between("bursts")):
            self.train(self._between("train"))
            self.edit(self._between("review"))

    def interactive_body(self) -> None:
        target = self._between("interactive")
        while len(self.minutes) < target:
            self.edit(self._between("think"))
            self.cell()
            if self.rng.random() < self.params.away_p:
                self.away(self._between("away"))


def _session(rng: random.Random, params: TraceParams, kind: str) -> tuple[list[dict], bool]:
    """The minutes of one session of ``kind``, and whether the user stops it (False: end null)."""
    s = _Session(rng, params)
    if kind == "training":
        s.training_body()
        s.away(s.exponential(params.idle_tail_mean))
    elif kind == "interactive":
        s.interactive_body()
        s.away(s.exponential(params.interactive_tail_mean))
    elif kind == "forgotten":
        if rng.random() < 0.5:
            s.training_body()
        else:
            s.interactive_body()
        s.away(int(rng.uniform(params.overnight_hours_min, params.overnight_hours_max) * 60))
        return s.minutes, False
    elif kind in HUNG_KINDS:
        s.edit(s._between("setup"))
        if kind == "hung_input":
            s.cell()
        else:
            s.train(s._between("train"))
        s.hang(int(rng.uniform(params.hung_hours_min, params.hung_hours_max) * 60))
        s.edit(rng.randint(1, 5))
    elif kind == "bursty":
        s.edit(rng.randint(2, 10))
        target = len(s.minutes) + int(rng.uniform(params.bursty_hours_min, params.bursty_hours_max) * 60)
        while len(s.minutes) < target:
            s.train(s._between("gpu_burst"), user_p=0.0)
            s.cpu_phase(s._between("gap"))
        s.train(s._between("gpu_burst"), user_p=0.0)
        s.away(rng.randint(0, params.busy_tail_max))
    elif kind == "preprocess":
        s.edit(s._between("setup"))
        for _ in range(s._between("bursts")):
            s.cpu_phase(s._between("preprocess"))
            s.train(s._between("train"))
        s.edit(s._between("review"))
    else:
        s.edit(rng.randint(2, 10))
        hours = rng.uniform(params.busy_hours_min, params.busy_hours_max)
        s.train(max(1, int(hours * 60)), background=rng.random() < params.background_share, user_p=0.0)
        s.away(rng.randint(0, params.busy_tail_max))
    return s.minutes, True


def generate(sessions: int, seed: int, params: TraceParams | None = None) -> list[dict]:
    """``sessions`` trace lines (dicts), in start order; deterministic for ``seed`` and ``params``."""
    params = params or TraceParams()
    rng = random.Random(seed)
    kinds_weights = params.kind_shares()
    names, weights = zip(*params.profile_shares(), strict=True)
    origin = params.origin_time().timestamp()
    out = []
    for _ in range(sessions):
        kind = rng.choices(KINDS, weights=kinds_weights)[0]
        hour = min(21.5, max(8.0, rng.gauss(params.start_hour_mean, params.start_hour_sd)))
        start = int(origin + rng.randrange(params.days) * 86400 + hour * 3600)
        user = f"u{rng.randrange(params.users):03d}"
        profile = rng.choices(names, weights=weights)[0]
        minutes, stopped = _session(rng, params, kind)
        if not minutes:
            minutes = [{"gpu_util": 0, "gpu_mem_frac": 0, "kernel_busy": False, "user_active": True}]
        # the user stops it somewhere in its last minute: one entry per started minute
        end = start + 60 * (len(minutes) - 1) + rng.randint(1, 60) if stopped else None
        out.append({"user": user, "profile": profile, "start": start, "end": end, "minutes": minutes, "kind": kind})
    out.sort(key=lambda line: line["start"])
    return out


def write_trace(lines: list[dict], path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m jupyterhub_gpu.sim.trace",
        description="Generate a synthetic lab workload trace (JSON Lines) for the culling simulator.",
        epilog="The distributions are described in the module docstring and docs/culling.md.",
    )
    p.add_argument("--sessions", type=int, default=120, help="number of sessions (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2026, help="random seed (default: %(default)s)")
    p.add_argument("--out", required=True, help="output file ('-' for stdout)")
    for f in fields(TraceParams):
        help_text = f.metadata["help"] or f"upper bound of {f.name[:-4]}_min"
        kind = type(f.default)
        p.add_argument(_flag(f.name), type=kind, default=f.default, help=f"{help_text} (default: %(default)s)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.sessions < 0:
        print("error: --sessions must not be negative", file=sys.stderr)
        return 2
    try:
        params = TraceParams(**{f.name: getattr(args, f.name) for f in fields(TraceParams)})
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines = generate(args.sessions, args.seed, params)
    if args.out == "-":
        for line in lines:
            sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_trace(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
