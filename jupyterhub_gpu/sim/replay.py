"""Replay a lab workload trace through a culling policy with a simulated clock, and count the waste.

A trace (JSON Lines, see docs/culling.md) holds one session per line with one
entry per started minute of what the session would do if nothing stopped it.
A policy decides, minute by minute, whether to stop it:

- ``ours`` (or a JSON file of cull rules): the service's real
  :func:`~jupyterhub_gpu.rules.culling.evaluate`, called at the end of every
  minute as the service's tick would, with the warning it sent last; a warned
  user answers only through what the trace shows them doing.
- ``idle-culler-T``: a model of jupyterhub-idle-culler with ``--timeout=T``:
  every ``cull_every`` seconds of wall-clock time (its default ``T // 2``;
  600 s for ``idle-culler-3600``, Zero to JupyterHub's ``cull.every``) it stops
  servers whose last activity is ``T`` seconds old or older. Its activity is
  jupyter_server's ``last_activity``: requests from the user and kernel
  activity; a minute counts as activity when the trace has ``user_active`` or
  ``kernel_busy`` in it. The model is kind to idle-culler: it sees a busy
  kernel even when the kernel sends no messages, and the hub's copy of the
  activity is never late.
- ``always-on``: never stopped; a session with ``end: null`` runs to the end of
  its minutes.

Billing is the real :func:`~jupyterhub_gpu.billing.billed_minutes`:
every started minute until the stop (or the natural end). A minute is *idle*
when its GPU did no work by the idle definition (:meth:`.idle.IdleRule.gpu_idle`:
``gpu_util`` under 5%), whatever its kernel did: the waste the figures count is
GPU time; a *false cull* is a culled session whose trace shows lost work after
the stop (:func:`lost_work`): GPU work (5% or more), or a kernel busy with a cell
started after the stop. A kernel that was
busy at the stop and stays busy with its GPU idle is not work by itself (it is
what ``busy_gpu_idle`` judges hung): such a stop is a false cull only if the GPU
would have worked again.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.culling import evaluate
from jupyterhub_gpu.rules.cullrules import CullRule, default_rules, parse_config, rules_for
from jupyterhub_gpu.rules.signals import MinuteSignal, gpu_memory_high, minute_signals
from jupyterhub_gpu.session import StopReason

#: Price of one GPU-minute when none is given (3.00 per GPU-hour).
DEFAULT_RATE = Decimal("0.05")
ALWAYS_ON = "always-on"
#: The baselines every report carries, in table order.
BASELINES = (ALWAYS_ON, "idle-culler-600", "idle-culler-3600")
OURS = "ours"
#: idle-culler's check interval when the name gives none: its default is timeout // 2;
#: Zero to JupyterHub runs it with timeout 3600 and every 600.
_IDLE_CULLER_EVERY = {3600: 600}
_IDLE_CULLER = re.compile(r"idle-culler-(\d+)(?:/(\d+))?")
_MINUTE_FIELDS = ("gpu_util", "gpu_mem_frac", "kernel_busy", "user_active")


class TraceError(ValueError):
    """A trace line that cannot be replayed; the message names the file and line."""


class PolicyError(ValueError):
    """A policy name or policy file that cannot be used."""


@dataclass(frozen=True)
class TraceMinute:
    gpu_util: float | None
    gpu_mem_frac: float | None
    kernel_busy: bool
    user_active: bool

    @property
    def busy(self) -> bool:
        """Real work this minute, by the idle definition: the GPU worked, or (where kernels count) a kernel was busy."""
        return idle.IDLE.busy(self.gpu_util, self.kernel_busy)

    @property
    def idle(self) -> bool:
        """A sampled minute whose GPU did no work (the figures' idle GPU-minute, whatever the kernel did)."""
        return idle.IDLE.gpu_idle(self.gpu_util)

    @property
    def gpu_busy(self) -> bool:
        """The GPU worked this minute (at or above the idle threshold)."""
        return idle.IDLE.gpu_worked(self.gpu_util)


def lost_work(after) -> int:
    """How many of the minutes after a stop were work: the GPU busy, or a kernel busy with a new cell.

    The kernel busy at the stop counts until it first goes idle only through its GPU: a kernel that
    stays busy on an idle GPU is a hung one, and stopping it loses nothing unless the GPU works later.
    """
    continuing = True  # the kernel that was busy at the stop, until it goes idle
    lost = 0
    for m in after:
        if not m.kernel_busy:
            continuing = False
        if m.gpu_busy or (m.kernel_busy and not continuing):
            lost += 1
    return lost


@dataclass(frozen=True)
class TraceSession:
    user: str
    profile: str
    start: float  # seconds (Unix time, or any origin)
    end: float | None  # when the user would stop it; None: never (forgotten)
    minutes: tuple[TraceMinute, ...]
    kind: str | None = None  # optional label from the generator, for breakdowns only
    line: int = 0

    @property
    def started(self) -> datetime:
        return datetime.fromtimestamp(self.start, timezone.utc)

    @property
    def natural_end(self) -> datetime:
        seconds = self.end if self.end is not None else self.start + 60 * len(self.minutes)
        return datetime.fromtimestamp(seconds, timezone.utc)


# -- reading traces ----------------------------------------------------------------------


def _number(value, what: str, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if value < low or (high is not None and value > high):
        span = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
        raise ValueError(f"{what} must be {span}, got {value!r}")
    return value


def _minute(raw, index: int) -> TraceMinute:
    where = f"minutes[{index}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be an object with {', '.join(_MINUTE_FIELDS)}, got {raw!r}")
    for name in _MINUTE_FIELDS:
        if name not in raw:
            raise ValueError(f"{where}.{name} is missing")
    util, mem = raw["gpu_util"], raw["gpu_mem_frac"]
    for name in ("kernel_busy", "user_active"):
        if not isinstance(raw[name], bool):
            raise ValueError(f"{where}.{name} must be true or false, got {raw[name]!r}")
    return TraceMinute(
        gpu_util=None if util is None else _number(util, f"{where}.gpu_util", 0, 100),
        gpu_mem_frac=None if mem is None else _number(mem, f"{where}.gpu_mem_frac", 0, 1),
        kernel_busy=raw["kernel_busy"],
        user_active=raw["user_active"],
    )


def parse_session(data, line: int = 0) -> TraceSession:
    """A session from one decoded trace line; ValueError says which field is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"a session must be a JSON object, got {type(data).__name__}")
    for name in ("user", "profile", "start", "end", "minutes"):
        if name not in data:
            raise ValueError(f"{name!r} is missing")
    for name in ("user", "profile"):
        if not isinstance(data[name], str) or not data[name]:
            raise ValueError(f"{name!r} must be a non-empty string, got {data[name]!r}")
    start = _number(data["start"], "'start'", 0)
    end = None if data["end"] is None else _number(data["end"], "'end'", start)
    raw_minutes = data["minutes"]
    if not isinstance(raw_minutes, list) or not raw_minutes:
        raise ValueError("'minutes' must be a non-empty list, one entry per started minute")
    if end is not None:
        # the minutes billing charges for start..end (to the microsecond, as the replay bills them)
        expected = billed_minutes(
            datetime.fromtimestamp(start, timezone.utc), datetime.fromtimestamp(end, timezone.utc)
        )
        if len(raw_minutes) != expected:
            raise ValueError(
                f"'minutes' has {len(raw_minutes)} entries but start..end ({end - start:g} s) spans {expected}"
                " started minutes: give one entry per started minute"
            )
    kind = data.get("kind")
    return TraceSession(
        user=data["user"],
        profile=data["profile"],
        start=start,
        end=end,
        minutes=tuple(_minute(m, i) for i, m in enumerate(raw_minutes)),
        kind=kind if isinstance(kind, str) else None,
        line=line,
    )


def read_trace(path) -> list[TraceSession]:
    """Every session of a JSON Lines trace; blank lines are skipped.

    TraceError (``FILE line N: what``) on the first line that is not a valid session.
    """
    sessions = []
    try:
        handle = open(path, encoding="utf-8")
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror or e}") from None
    with handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                sessions.append(parse_session(json.loads(text), number))
            except json.JSONDecodeError as e:
                raise TraceError(f"{path} line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
            except ValueError as e:
                raise TraceError(f"{path} line {number}: {e}") from None
    return sessions


# -- policies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """A named culling policy: rules (our service), an idle-culler model, or none."""

    name: str
    kind: str  # "rules" | "idle-culler" | "always-on"
    config: dict | None = None  # parsed cull rules config, for "rules"
    timeout_s: int = 0
    every_s: int = 0


def resolve_policy(spec: str) -> Policy:
    """``ours``, ``always-on``, ``idle-culler-T`` (``idle-culler-T/E`` to set ``cull_every``), or a JSON file.

    A JSON policy file holds a list of rules (the default list) or the whole
    culling config (``{"default": ..., "profiles": ..., "groups": ...}``).
    """
    if spec == OURS:
        return Policy(OURS, "rules", parse_config(None))
    if spec == ALWAYS_ON:
        return Policy(ALWAYS_ON, "always-on")
    match = _IDLE_CULLER.fullmatch(spec)
    if match:
        timeout = int(match.group(1))
        every = int(match.group(2)) if match.group(2) else _IDLE_CULLER_EVERY.get(timeout, timeout // 2)
        if timeout < 60 or every < 1:
            raise PolicyError(f"policy {spec!r}: the timeout must be at least 60 s and cull_every at least 1 s")
        return Policy(spec, "idle-culler", timeout_s=timeout, every_s=every)
    path = Path(spec)
    if not path.suffix == ".json" and not path.exists():
        known = ", ".join((OURS, *BASELINES))
        raise PolicyError(f"unknown policy {spec!r}: use one of {known}, idle-culler-SECONDS, or a JSON file of rules")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PolicyError(f"cannot read policy file {spec}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise PolicyError(f"policy file {spec}: not valid JSON ({e.msg} at line {e.lineno})") from None
    try:
        config = parse_config({"default": raw} if isinstance(raw, list) else raw, where=path.name)
    except ValueError as e:
        raise PolicyError(f"policy file {spec}: {e}") from None
    return Policy(path.stem, "rules", config)


# -- replay ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a policy did to one session."""

    billed_minutes: int
    culled: bool = False
    rule: str | None = None  # the rule that stopped it ("idle-culler" for the baseline)
    warnings: int = 0
    cancels: int = 0
    memory_notice: bool = False


def natural_minutes(session: TraceSession) -> int:
    """Minutes billed if nothing stops the session."""
    return billed_minutes(session.started, session.natural_end)


def _signals(session: TraceSession) -> list[MinuteSignal]:
    return minute_signals(session.minutes, session.started)


def replay_rules(session: TraceSession, rules, has_gpu: bool = True) -> Outcome:
    """Run the service's rules on a session, one tick at the end of every minute."""
    started, natural_end = session.started, session.natural_end
    signals = _signals(session)
    warned: datetime | None = None
    warnings = cancels = 0
    memory = False
    for i in range(len(signals)):
        now = started + timedelta(minutes=i + 1)
        if now >= natural_end:
            break
        seen = signals[: i + 1]
        memory = memory or (has_gpu and gpu_memory_high(seen))
        decision = evaluate(rules, started, now, seen, has_gpu=has_gpu, warned=warned)
        if decision.action == "warn":
            warned, warnings = now, warnings + 1
        elif decision.action == "cancel":
            warned, cancels = None, cancels + 1
        elif decision.action == "stop":
            return Outcome(billed_minutes(started, now), True, decision.rule.kind, warnings, cancels, memory)
    return Outcome(natural_minutes(session), False, None, warnings, cancels, memory)


def replay_idle_culler(session: TraceSession, timeout_s: int, every_s: int) -> Outcome:
    """The idle-culler model: checks at wall-clock multiples of ``every_s``, activity from the trace."""
    start = session.start
    end = session.natural_end.timestamp()
    active_ends = [start + 60 * (j + 1) for j, m in enumerate(session.minutes) if m.user_active or m.kernel_busy]
    check = (math.floor(start / every_s) + 1) * every_s
    pointer = 0
    last = start  # jupyter_server counts its own start as activity
    while check < end:
        # minutes that began before the check: their activity is known (clamped to the check)
        while pointer < len(active_ends) and active_ends[pointer] - 60 < check:
            last = max(last, min(active_ends[pointer], check))
            pointer += 1
        if check - last >= timeout_s:
            stop = datetime.fromtimestamp(check, timezone.utc)
            return Outcome(billed_minutes(session.started, stop), True, "idle-culler")
        check += every_s
    return Outcome(natural_minutes(session))


def replay(session: TraceSession, policy: Policy, gpus: int = 1) -> Outcome:
    if policy.kind == "always-on":
        return Outcome(natural_minutes(session))
    if policy.kind == "idle-culler":
        return replay_idle_culler(session, policy.timeout_s, policy.every_s)
    rules = rules_for(session.profile, (), policy.config)
    return replay_rules(session, rules, has_gpu=gpus > 0)


# -- the pool simulator's culling: what a session does if the scheduler lets it run ---------------------------


def _first_possible_warning(minutes: Sequence[TraceMinute], rules: Sequence[CullRule]) -> int:
    """A minute index before which no rule can warn (so its evaluation is ``none`` and may be skipped).

    A rule warns once its condition has held for ``T - warn_minutes``; each run counted here is at least as
    long as that rule's condition (it ignores what could restart the rule's clock sooner), so the bound is safe.
    """
    first = len(minutes)
    for rule in rules:
        lead = rule.minutes - rule.warn_minutes
        if rule.kind == StopReason.MAX_AGE:
            first = min(first, max(0, lead - 2))
            continue
        threshold = rule.util_threshold
        definition = idle.IDLE
        run = 0
        for i, m in enumerate(minutes):
            gpu_busy = definition.gpu_worked(m.gpu_util, threshold)
            if rule.kind == StopReason.GPU_IDLE:
                holds = not definition.busy(m.gpu_util, m.kernel_busy, threshold)
            elif rule.kind == StopReason.BUSY_GPU_IDLE:
                holds = not gpu_busy
            else:  # inactive
                holds = not gpu_busy and not m.kernel_busy and not m.user_active
            run = run + 1 if holds else 0
            if run >= lead:
                first = min(first, max(0, i - 2))
                break
    return first


#: Where a simulated session starts, for the cull rules (any aware time: they judge relative times only).
_EPOCH = datetime(2026, 1, 5, tzinfo=timezone.utc)


def cull_length(minutes: Sequence[TraceMinute], rules: Sequence[CullRule] | None = None) -> tuple[int, str | None]:
    """How many minutes a session with this trace runs, and the cull rule that stops it (None: its user does).

    The service's tick at the end of every minute, as :func:`replay_rules` runs it (the same result),
    skipping the minutes in which no rule can warn yet. ``rules``: None for the defaults (at the idle
    definition's threshold), ``()`` for none.
    """
    rules = default_rules() if rules is None else rules
    n = len(minutes)
    if not rules or not n:
        return n, None
    first = _first_possible_warning(minutes, rules)
    if first >= n:
        return n, None
    signals = minute_signals(minutes, _EPOCH)
    warned: datetime | None = None
    for i in range(first, n - 1):
        now = _EPOCH + timedelta(minutes=i + 1)
        decision = evaluate(rules, _EPOCH, now, signals[: i + 1], has_gpu=True, warned=warned)
        if decision.action == "warn":
            warned = now
        elif decision.action == "cancel":
            warned = None
        elif decision.action == "stop":
            return i + 1, str(decision.rule.kind)
    return n, None


# -- accounting -------------------------------------------------------------------------------


def _tally(sessions, outcomes, gpus_of) -> dict:
    billed = gpu_minutes = idle = unsampled = false_minutes = false_sessions = 0
    for session, outcome in zip(sessions, outcomes, strict=True):
        gpus = gpus_of(session.profile)
        shown = session.minutes[: outcome.billed_minutes]
        billed += outcome.billed_minutes
        gpu_minutes += gpus * outcome.billed_minutes
        idle += gpus * sum(1 for m in shown if m.idle)
        unsampled += gpus * sum(1 for m in shown if m.gpu_util is None)
        if outcome.culled:
            lost = lost_work(session.minutes[outcome.billed_minutes :])
            false_minutes += lost
            false_sessions += 1 if lost else 0
    return {
        "sessions": len(outcomes),
        "billed_minutes": billed,
        "billed_gpu_minutes": gpu_minutes,
        "billed_idle_gpu_minutes": idle,
        "billed_unsampled_gpu_minutes": unsampled,
        "idle_share": round(idle / gpu_minutes, 4) if gpu_minutes else 0.0,
        "false_cull_sessions": false_sessions,
        "false_cull_minutes": false_minutes,
        "culls": sum(1 for o in outcomes if o.culled),
    }


def simulate(sessions: list[TraceSession], policy: Policy, rate: Decimal = DEFAULT_RATE, gpus=None) -> dict:
    """Replay every session under ``policy``: totals, cost, and a breakdown by session kind.

    ``gpus`` maps a profile to its GPU count (default 1; 0 is a CPU-only
    profile, which ``gpu_idle`` does not judge).
    """
    gpus = dict(gpus or {})

    def gpus_of(profile: str) -> int:
        return gpus.get(profile, 1)

    outcomes = [replay(s, policy, gpus_of(s.profile)) for s in sessions]
    result = {"policy": policy.name, **_tally(sessions, outcomes, gpus_of)}
    result["culls_by_rule"] = dict(sorted(Counter(o.rule for o in outcomes if o.culled).items()))
    false_by_rule = Counter(
        o.rule for s, o in zip(sessions, outcomes, strict=True) if o.culled and lost_work(s.minutes[o.billed_minutes :])
    )
    result["false_culls_by_rule"] = dict(sorted(false_by_rule.items()))
    if policy.kind == "rules":
        result["warnings"] = sum(o.warnings for o in outcomes)
        result["cancelled_warnings"] = sum(o.cancels for o in outcomes)
        result["memory_notices"] = sum(1 for o in outcomes if o.memory_notice)
    result["cost"] = str(rate * result["billed_gpu_minutes"])
    kinds = sorted({s.kind for s in sessions if s.kind})
    if kinds:
        result["by_kind"] = {}
        for kind in kinds:
            picked = [(s, o) for s, o in zip(sessions, outcomes, strict=True) if s.kind == kind]
            result["by_kind"][kind] = _tally([s for s, _ in picked], [o for _, o in picked], gpus_of)
    return result


def report(
    sessions: list[TraceSession], policy: Policy, rate: Decimal = DEFAULT_RATE, gpus=None, trace: str = ""
) -> dict:
    """The simulator's JSON: the policy, and the baselines, each with GPU-minutes saved against always-on."""
    results = {name: simulate(sessions, resolve_policy(name), rate, gpus) for name in BASELINES}
    if policy.kind != "rules" and policy.name in results:
        main = results[policy.name]
    else:
        main = simulate(sessions, policy, rate, gpus)
    always = results[ALWAYS_ON]["billed_gpu_minutes"]
    for result in (main, *results.values()):
        result["saved_gpu_minutes"] = always - result["billed_gpu_minutes"]
    return {
        "trace": trace,
        "sessions": len(sessions),
        "rate_per_gpu_minute": str(rate),
        "idle_threshold_percent": idle.IDLE.util_percent,
        "policy": main,
        "baselines": results,
    }
