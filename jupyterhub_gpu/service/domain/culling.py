"""Idle culling rules: whether a running session is let be, warned, stopped, or its warning cancelled.

Pure functions of a session's per-minute signals, its user's last activity and
the clock: no database, no hub, no I/O. The service's tick feeds them what the
ledger knows and acts on the :class:`Decision`; the simulator
(:mod:`jupyterhub_gpu.sim`) feeds them a recorded trace with a simulated clock.
Both run this code, so what the simulator measures is what the service does.

Four kinds of rule (:data:`KINDS`), each with a time ``T`` (``minutes``) and a
warning lead (``warn_minutes``):

- ``gpu_idle``: every minute of the last ``T`` had GPU utilization under
  ``util_threshold`` percent and no busy kernel. What the user does in the Lab
  without using the GPU does not keep a GPU server, but it does answer a
  warning (see below). Minutes with no GPU sample count as idle only if the
  hub's activity records show nothing in them either; with no sample at all in
  the last ``T`` minutes the rule does not apply (a server that stops pushing
  samples is judged on hub activity alone, by ``inactive`` and ``max_age``).
  Does not apply to CPU-only sessions. On a shared GPU or a MIG slice a
  server is judged on its own figures (:func:`own_gpu_utilization`): its own
  utilization where the driver gives it, else 0 while it has no process on
  the GPU, so a busy neighbour never keeps an idle server, and stopping one
  server never touches another on the same GPU.
- ``inactive``: nothing at all for ``T`` minutes: no user action, no busy
  kernel, and no GPU utilization at or above ``util_threshold``.
- ``max_age``: the server has been running for ``T`` minutes, whatever it does.
- ``busy_gpu_idle``: the GPU did no work for ``T`` minutes although a kernel
  was busy in them (a hung data loader, a cell blocked on ``input()``, a
  deadlock): every minute of the last ``T`` had GPU utilization under
  ``util_threshold`` and GPU memory in use that did not move by
  :data:`MEMORY_MOVE_FRACTION` or more from the sampled minute before it
  while the GPU computed something (utilization above 0: a move alone, with
  nothing computed, is no work). A
  single minute of GPU work, however short, restarts its clock; a busy kernel
  does not. It applies only once a kernel was busy since its clock started
  (an idle kernel on an idle GPU is ``gpu_idle``'s case) and, like
  ``gpu_idle``, only to GPU sessions with samples; user actions answer its
  warning the same way. Its ``T`` is long (:data:`DEFAULT_RULES`: 2 hours) so
  that the GPU-idle phases of real work (data loading, evaluation, CPU
  preprocessing) fit in it; docs/culling.md gives the simulator's figures.

The protocol, for each rule: the condition has held since ``idle_since``. At
``idle_since + T - warn_minutes`` the user is warned (action ``warn``); the
caller records the warning time and passes it back as ``warned``. The server is
stopped (action ``stop``) once the condition has held for ``T`` *and* the
warning is at least ``warn_minutes`` old, so the user is always warned first,
even after a late tick. Real activity after the warning restarts the idle
clock; if then no rule is still covered by the warning, the action is
``cancel`` and the caller tells the user the stop is off and clears its
warning. For ``gpu_idle`` a user action counts as an answer only once a warning
was due (``idle_since + T - warn_minutes``): it restarts the idle clock, so a
student who keeps working without the GPU is asked again every
``T - warn_minutes`` minutes rather than every minute.

Every user-visible string is a template in :data:`MESSAGES` so that it can be
translated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from functools import partial
from itertools import pairwise

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import from_micros
from jupyterhub_gpu.service.domain.moves import Chosen, next_bigger
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, user_address
from jupyterhub_gpu.session import CULL_REASONS, IDLE_UTIL_PERCENT, StopReason

#: A rule's kind is the stop reason of the servers it stops.
KINDS = CULL_REASONS
#: Actions from least to most urgent.
ACTIONS = ("none", "cancel", "warn", "stop")
#: Warning lead used when a configured rule gives none (capped below ``minutes``).
DEFAULT_WARN_MINUTES = {
    StopReason.GPU_IDLE: 5,
    StopReason.INACTIVE: 5,
    StopReason.MAX_AGE: 30,
    StopReason.BUSY_GPU_IDLE: 20,
}
DEFAULT_UTIL_THRESHOLD = float(IDLE_UTIL_PERCENT)
#: ``busy_gpu_idle``: GPU memory in use that moves by this fraction of the GPU's memory (or more) from one
#: sampled minute to the next is GPU work, whatever the utilization (an allocation is the GPU being used).
MEMORY_MOVE_FRACTION = 0.01
#: The largest ``minutes`` a rule may have: a 31-day month.
MAX_MINUTES = 31 * 24 * 60
MINUTE = timedelta(minutes=1)
_RULE_FIELDS = ("kind", "minutes", "warn_minutes", "util_threshold")
_CONFIG_KEYS = ("default", "profiles", "groups")

#: Every string a user reads. Replace the values (keeping the ``{fields}``) to translate;
#: ``duration.*`` fill ``{limit}`` and ``{age}``.
MESSAGES: dict[str, str] = {
    "warn.gpu_idle": (
        "Your GPU has been idle (under {threshold}%) for {idle_minutes} minutes:"
        " this server will be stopped at {stop_time} unless you use it."
    ),
    "warn.inactive": (
        "This server has had no activity for {idle_minutes} minutes:"
        " it will be stopped at {stop_time} unless you use it."
    ),
    "warn.max_age": (
        "This server has been running for {age}, and servers are stopped after {limit}:"
        " it will be stopped at {stop_time}. Save your work now."
    ),
    "stop.gpu_idle": (
        "Your server was stopped at {stop_time} because its GPU was idle (under {threshold}%)"
        " for {idle_minutes} minutes. Billing stopped with it; your files are kept."
    ),
    "stop.inactive": (
        "Your server was stopped at {stop_time} after {idle_minutes} minutes without activity."
        " Billing stopped with it; your files are kept."
    ),
    "stop.max_age": (
        "Your server was stopped at {stop_time}: servers are stopped after {limit}."
        " Billing stopped with it; your files are kept."
    ),
    "warn.busy_gpu_idle": (
        "Your notebook's kernel is busy but your GPU has done nothing (under {threshold}%) for {age}"
        " (a hung data loader, a cell waiting for input(), a deadlock?):"
        " this server will be stopped at {stop_time} unless the GPU works again or you use the server."
    ),
    "stop.busy_gpu_idle": (
        "Your server was stopped at {stop_time} because its kernel was busy while its GPU did nothing"
        " (under {threshold}%) for {age}. Billing stopped with it; your files are kept."
    ),
    "cancel": "You are using your server again: it will not be stopped.",
    "subject.warn": "Your GPU server will be stopped",
    "subject.cancel": "Idle stop cancelled",
    "memory_high": (
        "GPU memory has been above {percent}% for {minutes} minutes: a profile with a larger GPU may help."
    ),
    "duration.minute": "1 minute",
    "duration.minutes": "{n} minutes",
    "duration.hour": "1 hour",
    "duration.hours": "{n} hours",
}


# -- rules -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CullRule:
    """One cull rule: its kind, its time ``T`` in minutes, its warning lead, and (GPU rules) a threshold.

    ``util_threshold`` is a GPU utilization in percent: below it a minute is
    idle for ``gpu_idle``; at or above it a minute is activity for ``inactive``.
    Constructing a rule validates it (ValueError naming the field).
    """

    kind: str
    minutes: int
    warn_minutes: int
    util_threshold: float = DEFAULT_UTIL_THRESHOLD

    def __post_init__(self):
        _check_rule(self.kind, self.minutes, self.warn_minutes, self.util_threshold, "rule")

    def to_dict(self) -> dict:
        """The configuration dict this rule parses from."""
        return {
            "kind": self.kind,
            "minutes": self.minutes,
            "warn_minutes": self.warn_minutes,
            "util_threshold": self.util_threshold,
        }


def _check_rule(kind, minutes, warn_minutes, util_threshold, where: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not _is_int(minutes) or not 2 <= minutes <= MAX_MINUTES:
        raise ValueError(f"{where}.minutes must be a whole number of minutes from 2 to {MAX_MINUTES}, got {minutes!r}")
    if not _is_int(warn_minutes) or not 1 <= warn_minutes < minutes:
        raise ValueError(
            f"{where}.warn_minutes must be a whole number of minutes from 1 to minutes - 1 ({minutes - 1}),"
            f" got {warn_minutes!r}"
        )
    if (
        isinstance(util_threshold, bool)
        or not isinstance(util_threshold, (int, float))
        or not 0 < util_threshold <= 100
    ):
        raise ValueError(f"{where}.util_threshold must be a percentage above 0 and at most 100, got {util_threshold!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The defaults (see docs/culling.md for why): the lab rule "GPU utilization under 5%
#: for 30 minutes", nothing at all (no user, no kernel, no GPU) for 15 minutes, and at
#: most a day per server; each warned 5 minutes ahead (30 for the day); and a busy kernel on a GPU
#: that did nothing for 2 hours, warned 20 minutes ahead.
DEFAULT_RULES: tuple[CullRule, ...] = (
    CullRule(StopReason.GPU_IDLE, minutes=30, warn_minutes=5, util_threshold=DEFAULT_UTIL_THRESHOLD),
    CullRule(StopReason.INACTIVE, minutes=15, warn_minutes=5, util_threshold=DEFAULT_UTIL_THRESHOLD),
    CullRule(StopReason.MAX_AGE, minutes=24 * 60, warn_minutes=30),
    CullRule(StopReason.BUSY_GPU_IDLE, minutes=120, warn_minutes=20, util_threshold=DEFAULT_UTIL_THRESHOLD),
)


def parse_rule(raw, where: str = "rule") -> CullRule:
    """A :class:`CullRule` from a config dict such as ``{"kind": "gpu_idle", "minutes": 30}``.

    ``warn_minutes`` defaults to :data:`DEFAULT_WARN_MINUTES` of the kind (at
    most half of ``minutes``), ``util_threshold`` to 5. ValueError messages
    start with ``where`` and name the field.
    """
    if isinstance(raw, CullRule):
        return raw
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a dict such as {{'kind': 'gpu_idle', 'minutes': 30}}, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in _RULE_FIELDS)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not a cull rule field (fields: {', '.join(_RULE_FIELDS)})")
    for required in ("kind", "minutes"):
        if required not in raw:
            raise ValueError(f"{where}.{required} is missing")
    kind, minutes = raw["kind"], raw["minutes"]
    if "warn_minutes" in raw:
        warn = raw["warn_minutes"]
    elif kind in KINDS and _is_int(minutes):
        warn = max(1, min(DEFAULT_WARN_MINUTES[kind], minutes // 2))
    else:
        warn = 1
    threshold = raw.get("util_threshold", DEFAULT_UTIL_THRESHOLD)
    _check_rule(kind, minutes, warn, threshold, where)
    return CullRule(kind=kind, minutes=minutes, warn_minutes=warn, util_threshold=float(threshold))


def parse_rules(raw, where: str = "cull_rules") -> tuple[CullRule, ...]:
    """Rules from a list of config dicts (or CullRules); at most one rule of each kind.

    An empty list is valid and means "never cull".
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Iterable):
        example = "[{'kind': 'gpu_idle', 'minutes': 30}]"
        raise ValueError(f"{where} must be a list of rules such as {example}, got {raw!r}")
    rules = tuple(parse_rule(item, f"{where}[{i}]") for i, item in enumerate(raw))
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        if rule.kind in seen:
            raise ValueError(f"{where}[{i}].kind: a second {rule.kind!r} rule; give at most one rule of each kind")
        seen.add(rule.kind)
    return rules


def parse_config(raw, where: str = "cull_rules") -> dict:
    """Validate and normalise the culling configuration.

    ``raw`` is ``None`` (the defaults) or a dict with any of::

        {"default":  [rule, ...],                  # all sessions; omitted: DEFAULT_RULES
         "profiles": {profile_slug: [rule, ...]},  # replaces the default for that profile
         "groups":   {group_name: [rule, ...]}}    # replaces the profile's list for members

    Returns the same structure with tuples of :class:`CullRule`. Parsing a
    parsed config again returns an equal one.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a dict with keys {', '.join(_CONFIG_KEYS)}, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in _CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not a key of the culling config (keys: {', '.join(_CONFIG_KEYS)})")
    out: dict = {"default": DEFAULT_RULES, "profiles": {}, "groups": {}}
    if "default" in raw:
        out["default"] = parse_rules(raw["default"], f"{where}.default")
    for key in ("profiles", "groups"):
        section = raw.get(key)
        section = {} if section is None else section
        if not isinstance(section, Mapping):
            raise ValueError(f"{where}.{key} must be a dict of name -> list of rules, got {section!r}")
        for name, rules in section.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}.{key}: names must be non-empty strings, got {name!r}")
            out[key][name] = parse_rules(rules, f"{where}.{key}[{name!r}]")
    return out


def _leniency(rule: CullRule) -> tuple:
    # longer T, then (gpu rules) a lower threshold, then a longer warning
    return (rule.minutes, -rule.util_threshold if rule.kind != StopReason.MAX_AGE else 0, rule.warn_minutes)


def most_lenient(rule_lists: Sequence[Sequence[CullRule]]) -> tuple[CullRule, ...]:
    """Per kind, the most lenient rule of several lists; a kind missing from any list is dropped.

    A list without a rule of some kind never culls for it, which is the most
    lenient there is. Among rules of one kind the longest ``minutes`` wins, then
    the lowest ``util_threshold``, then the longest warning.
    """
    if not rule_lists:
        return ()
    merged = []
    for kind in KINDS:
        candidates = [r for rules in rule_lists for r in rules if r.kind == kind]
        if len(candidates) < len(rule_lists):  # one rule per kind per list: some list lacks it
            continue
        merged.append(max(candidates, key=_leniency))
    return tuple(merged)


def rules_for(profile_slug: str | None, groups: Iterable[str], config) -> tuple[CullRule, ...]:
    """The rules of a session: its groups' lists, else its profile's list, else the default.

    ``config`` is the structure of :func:`parse_config` (raw or parsed; ``None``
    means the defaults). A user in several configured groups gets, per kind,
    the most lenient of those groups' rules (:func:`most_lenient`), so that
    joining a group never makes culling stricter than that group's own rules.
    """
    parsed = parse_config(config)
    matched = [parsed["groups"][g] for g in sorted(set(groups)) if g in parsed["groups"]]
    if matched:
        return matched[0] if len(matched) == 1 else most_lenient(matched)
    if profile_slug is not None and profile_slug in parsed["profiles"]:
        return parsed["profiles"][profile_slug]
    return parsed["default"]


# -- signals and decisions -------------------------------------------------------------------


def own_gpu_utilization(utilization: float, scope: str | None, processes: int | None) -> float:
    """The utilization of a GPU that counts as this server's own, from what its server reported of it.

    On a shared GPU or a MIG slice (issue 17) the rules judge a server on its own figures. A server whose
    driver gives per-process utilization reports its own (``scope`` "own"): taken as it is. Without it the
    server reports the whole GPU's (``scope`` "gpu"), which its neighbours' work moves: a server with no
    process of its own on the GPU (``processes`` 0) did none of that work, so its utilization is 0 and
    ``gpu_idle`` judges it idle whatever its neighbours do. With processes of its own the whole GPU's
    figure is all there is (docs/culling.md says what that means). A whole GPU (no ``scope``) or an unknown
    process count is taken as reported.
    """
    if scope == "gpu" and processes == 0:
        return 0.0
    return utilization


@dataclass(frozen=True)
class MinuteSignal:
    """What is known of one minute of a session, ``[at, at + 1 minute)``.

    ``at`` is an aware datetime (UTC minute boundaries in the service, minutes
    from the session start in the simulator: any alignment works).
    ``gpu_util`` (percent, the session's GPUs averaged over the minute) and
    ``gpu_mem_frac`` (0-1, the highest fraction of GPU memory in use) are
    ``None`` when no sample arrived for the minute. ``kernel_busy``: a kernel
    was busy at some point in the minute. ``user_active``: the user did
    something in the minute (a request to the server that was not the Lab's own
    polling).
    """

    at: datetime
    gpu_util: float | None = None
    gpu_mem_frac: float | None = None
    kernel_busy: bool = False
    user_active: bool = False


@dataclass(frozen=True)
class Decision:
    """What to do now about a session.

    ``action`` is one of :data:`ACTIONS`. ``rule`` is the rule it concerns (for
    ``none``, the rule nearest to firing; ``None`` when no rule applies),
    ``idle_since`` when its condition began to hold (the start, for
    ``max_age``), ``stop_at`` when the server is (or would be, without
    activity) stopped, and ``message`` the text for the user ("" for ``none``),
    in English; ``words(lang)`` is that text in ``lang``.
    """

    action: str
    rule: CullRule | None = None
    idle_since: datetime | None = None
    stop_at: datetime | None = None
    message: str = ""
    words: Callable[[str], str] | None = field(default=None, compare=False, repr=False)

    def worded(self, lang: str) -> str:
        """The decision's text in ``lang``."""
        return self.words(lang) if self.words is not None else self.message


def _aware(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None:
        raise ValueError(f"{what} must be an aware datetime, got {moment!r}")
    return moment


def _minute_end(signal: MinuteSignal, now: datetime) -> datetime:
    return min(signal.at + MINUTE, now)


def _gpu_idle_since(
    rule: CullRule,
    started: datetime,
    now: datetime,
    signals: Sequence[MinuteSignal],
    last_user_activity: datetime | None,
    kernel_counts: bool = True,
) -> datetime | None:
    """When the GPU-idle condition began to hold, or None when the rule cannot judge (no samples).

    ``kernel_counts``: a busy kernel is activity (``gpu_idle``). Without it (``busy_gpu_idle``)
    only GPU work restarts the clock: utilization at or above the threshold, or GPU memory that
    moved by :data:`MEMORY_MOVE_FRACTION` from the sampled minute before.
    """
    threshold = rule.util_threshold
    window_start = now - timedelta(minutes=rule.minutes)
    sampled_in_window = False
    for signal in reversed(signals):
        if signal.at + MINUTE <= window_start:
            break
        if signal.at < now and signal.gpu_util is not None:
            sampled_in_window = True
            break
    if not sampled_in_window:
        return None
    # walk back to the last minute of real GPU-side activity; keep the user actions seen after it
    reset = started
    answers: list[tuple[datetime, datetime]] = []  # (when it counts from, where the clock restarts)
    sampled_minutes: list[MinuteSignal] = []
    later: MinuteSignal | None = None  # the sampled minute with a memory figure after this one
    for signal in reversed(signals):
        if signal.at >= now:
            continue
        end = _minute_end(signal, now)
        if end <= reset:
            break
        sampled = signal.gpu_util is not None
        gpu_busy = sampled and signal.gpu_util >= threshold
        if not kernel_counts and later is not None and _memory_moved(signal, later):
            reset = _minute_end(later, now)  # the later minute's memory moved: the GPU worked in it
            break
        if (kernel_counts and signal.kernel_busy) or gpu_busy or (not sampled and signal.user_active):
            reset = end
            break
        if sampled:
            sampled_minutes.append(signal)
            if signal.user_active:
                answers.append((signal.at, end))
            if signal.gpu_mem_frac is not None:
                later = signal
    if last_user_activity is not None and reset < last_user_activity <= now:
        in_sampled_minute = any(s.at <= last_user_activity < s.at + MINUTE for s in sampled_minutes)
        if in_sampled_minute:
            answers.append((last_user_activity, last_user_activity))
        else:
            # hub activity in a minute the server did not report on: judged on that activity
            reset = last_user_activity
    since = reset
    lead = timedelta(minutes=rule.minutes - rule.warn_minutes)
    for counts_from, restart in sorted(answers):
        if counts_from > reset and counts_from >= since + lead:
            since = max(since, restart)
    return since


def _memory_moved(earlier: MinuteSignal, later: MinuteSignal) -> bool:
    """GPU memory that moved in ``later`` while its GPU computed something (utilization above 0).

    A move alone is no work: a hung kernel that allocates and frees 1% of the GPU's memory once in each
    horizon, computing nothing, would restart the clock for ever.
    """
    computed = later.gpu_util is not None and later.gpu_util > 0
    return computed and abs(later.gpu_mem_frac - earlier.gpu_mem_frac) >= MEMORY_MOVE_FRACTION


def _busy_gpu_idle_since(
    rule: CullRule,
    started: datetime,
    now: datetime,
    signals: Sequence[MinuteSignal],
    last_user_activity: datetime | None,
) -> datetime | None:
    """When the GPU last stopped working, if a kernel was busy since then; else None (not this rule's case)."""
    since = _gpu_idle_since(rule, started, now, signals, last_user_activity, kernel_counts=False)
    if since is None:
        return None
    for signal in reversed(signals):
        if signal.at >= now:
            continue
        if _minute_end(signal, now) <= since:
            break
        if signal.kernel_busy:
            return since
    return None


def _inactive_since(
    rule: CullRule,
    started: datetime,
    now: datetime,
    signals: Sequence[MinuteSignal],
    last_user_activity: datetime | None,
) -> datetime:
    since = started
    if last_user_activity is not None:
        since = max(since, min(last_user_activity, now))
    for signal in reversed(signals):
        if signal.at >= now:
            continue
        end = _minute_end(signal, now)
        if end <= since:
            break
        gpu_busy = signal.gpu_util is not None and signal.gpu_util >= rule.util_threshold
        if signal.user_active or signal.kernel_busy or gpu_busy:
            since = end
            break
    return since


@dataclass(frozen=True)
class _Candidate:
    action: str
    rule: CullRule
    idle_since: datetime
    stop_at: datetime
    covered: bool


def _duration(minutes: int, lang: str = "en") -> str:
    _ = translator(lang)
    if minutes % 60 == 0:
        hours = minutes // 60
        return _(MESSAGES["duration.hour"]) if hours == 1 else _(MESSAGES["duration.hours"], n=hours)
    return _(MESSAGES["duration.minute"]) if minutes == 1 else _(MESSAGES["duration.minutes"], n=minutes)


def _message(
    action: str, rule: CullRule, idle_since: datetime, stop_at: datetime, now: datetime, tz, lang: str = "en"
) -> str:
    """The decision's text for its user, in ``lang`` (the message catalogue's wording of :data:`MESSAGES`)."""
    _ = translator(lang)
    if action == "none":
        return ""
    if action == "cancel":
        return _(MESSAGES["cancel"])
    threshold = rule.util_threshold
    return _(
        MESSAGES[f"{action}.{rule.kind}"],
        threshold=int(threshold) if float(threshold).is_integer() else threshold,
        idle_minutes=int((now - idle_since) / MINUTE),
        stop_time=stop_at.astimezone(tz).strftime("%H:%M"),
        age=_duration(int((now - idle_since) / MINUTE), lang),
        limit=_duration(rule.minutes, lang),
    )


def evaluate(
    rules: Iterable[CullRule],
    started: datetime,
    now: datetime,
    signals: Sequence[MinuteSignal],
    last_user_activity: datetime | None = None,
    has_gpu: bool = True,
    warned: datetime | None = None,
    *,
    tz: tzinfo = timezone.utc,
) -> Decision:
    """The most urgent decision across ``rules`` for one running session at ``now``.

    ``signals``: the session's minutes, oldest first, at least since its last
    GPU or kernel activity (the service passes the minutes since the start;
    :data:`MAX_MINUTES` bounds them). ``last_user_activity``: the last activity
    the hub or the server reported. ``warned``: when the pending warning was
    sent (``None`` if none). ``tz``: the zone of times in messages.

    Urgency: ``stop`` > ``warn`` > ``cancel`` > ``none``; among equals, the
    earliest ``stop_at``. A rule is *covered* by the warning when the warning
    was sent at or after the rule's warning time; a stop needs a covering
    warning at least ``warn_minutes`` old. While a covered rule waits for its
    stop, another rule is warned about only if it would stop the server sooner.
    """
    _aware(started, "started")
    _aware(now, "now")
    candidates: list[_Candidate] = []
    for rule in rules:
        if rule.kind == StopReason.GPU_IDLE:
            if not has_gpu:
                continue
            since = _gpu_idle_since(rule, started, now, signals, last_user_activity)
            if since is None:
                continue
        elif rule.kind == StopReason.BUSY_GPU_IDLE:
            if not has_gpu:
                continue
            since = _busy_gpu_idle_since(rule, started, now, signals, last_user_activity)
            if since is None:
                continue
        elif rule.kind == StopReason.INACTIVE:
            since = _inactive_since(rule, started, now, signals, last_user_activity)
        else:
            since = started
        warn_at = since + timedelta(minutes=rule.minutes - rule.warn_minutes)
        due = since + timedelta(minutes=rule.minutes)
        lead = timedelta(minutes=rule.warn_minutes)
        covered = warned is not None and warn_at <= warned <= now
        if now < warn_at:
            candidates.append(_Candidate("none", rule, since, due, False))
        elif not covered:
            candidates.append(_Candidate("warn", rule, since, max(due, now + lead), False))
        else:
            stop_at = max(due, warned + lead)
            candidates.append(_Candidate("stop" if now >= stop_at else "none", rule, since, stop_at, True))
    if not candidates:
        if warned is None:
            return Decision("none")
        return Decision("cancel", message=MESSAGES["cancel"], words=lambda lang: translator(lang)(MESSAGES["cancel"]))
    pending = [c.stop_at for c in candidates if c.covered]
    if pending:
        # a warning that would stop the server no sooner than the one already given is not sent:
        # it would replace ``warned`` and so push the pending stop back
        candidates = [
            _Candidate("none", c.rule, c.idle_since, c.stop_at, False)
            if c.action == "warn" and c.stop_at >= min(pending)
            else c
            for c in candidates
        ]
    rank = {action: i for i, action in enumerate(ACTIONS)}
    best = min(candidates, key=lambda c: (-rank[c.action], c.stop_at))
    action = best.action
    if action == "none" and warned is not None and not any(c.covered for c in candidates):
        action = "cancel"
    return Decision(
        action=action,
        rule=best.rule,
        idle_since=best.idle_since,
        stop_at=best.stop_at,
        message=_message(action, best.rule, best.idle_since, best.stop_at, now, tz),
        words=partial(_message, action, best.rule, best.idle_since, best.stop_at, now, tz),
    )


# -- notices -----------------------------------------------------------------------------


def gpu_memory_high(signals: Sequence[MinuteSignal], threshold: float = 0.9, minutes: int = 10) -> bool:
    """True when GPU memory was above ``threshold`` (a fraction) in each of the last ``minutes`` minutes.

    The minutes are the ``minutes`` latest signals, which must be consecutive
    and all sampled: a gap or a minute without a sample means "not known to be
    high".
    """
    if minutes < 1 or len(signals) < minutes:
        return False
    recent = signals[-minutes:]
    for previous, current in pairwise(recent):
        if current.at - previous.at != MINUTE:
            return False
    return all(s.gpu_mem_frac is not None and s.gpu_mem_frac > threshold for s in recent)


def memory_notice(threshold: float = 0.9, minutes: int = 10) -> str:
    """The text of the "GPU memory high" notice."""
    percent = threshold * 100
    return MESSAGES["memory_high"].format(
        percent=int(percent) if float(percent).is_integer() else round(percent, 1), minutes=minutes
    )


def cull_message(session, decision: Decision, settings: AlertSettings, lang: str = "en") -> Message:
    """An idle warning (or its cancellation) for the session's user: in JupyterLab, by mail and webhook.

    ``session`` is the ledger's record (``user``, ``server_name``, ``id``). The
    mail goes to the user's own address (``user_email_template``), never to
    instructors; a failed mail or webhook is logged and not retried (the Lab
    notice is the warning that counts). Worded in ``lang``, and in another language on the gateway's demand.
    """
    warn = decision.action == "warn"
    address = user_address(settings, session.user)
    text = decision.worded(lang)
    return Message(
        user=session.user,
        kind="cull",
        text=text,
        level="warning" if warn else "info",
        session_id=session.id,
        subject=translator(lang)(MESSAGES["subject.warn" if warn else "subject.cancel"]),
        to=(address,) if address else (),
        payload={
            "event": "idle_warning" if warn else "idle_warning_cancelled",
            "user": session.user,
            "server_name": session.server_name,
            "session_id": session.id,
            "rule": decision.rule.kind if decision.rule else None,
            "stop_at": isoformat(decision.stop_at) if decision.stop_at else None,
            "text": text,
        },
        what=f"idle notice for {session.user}",
        source="jupyterhub_gpu.service",
        event="cull",
        lang=lang,
        words=lambda other: cull_message(session, decision, settings, other),
    )


def bigger_profile(options: Sequence, session, affordable=None):
    """The next bigger profile a session may grow to, or None: :func:`.moves.next_bigger`.

    ``options`` are the advice's catalogue (``advice.catalogue``: the published profiles with the
    admins' edits and each one's memory per GPU); ``session`` the ledger's record (or a
    :class:`.moves.Chosen`). Bigger keeps the tier, the group that pays and the kind of unit (a share
    grows to a whole GPU); a profile whose memory is unknown is never offered. The next one is the
    cheapest per minute, then the smallest, among those ``affordable(option)`` says the budgets can pay.
    """
    return next_bigger(options, Chosen.of(session), affordable)


def memory_text(threshold: float, minutes: int, bigger, currency, lang: str = "en") -> str:
    """The "GPU memory high" notice's words: the next bigger profile and its price, or that there is none."""
    _ = translator(lang)
    percent = threshold * 100
    percent = int(percent) if float(percent).is_integer() else round(percent, 1)
    if bigger is None:
        return _(
            "GPU memory has been above {percent}% for {minutes} minutes, and no profile with more GPU memory or"
            " more GPUs is open to you: try a smaller batch size or model.",
            percent=percent,
            minutes=minutes,
        )
    return _(
        "GPU memory has been above {percent}% for {minutes} minutes: a bigger instance may help."
        " {profile} ({gpus} × {memory} GB GPU memory) costs {price}/min.",
        percent=percent,
        minutes=minutes,
        profile=bigger.display_name,
        gpus=bigger.gpu_count,
        memory=f"{bigger.memory_mib / 1024:g}",
        price=currency.format_rate(from_micros(bigger.rate_micros), locale=lang),
    )


def memory_message(
    session,
    threshold: float = 0.9,
    minutes: int = 10,
    options: Sequence = (),
    currency=None,
    lang: str = "en",
    affordable=None,
) -> tuple[Message, Once]:
    """The "GPU memory high" notice of a session, in JupyterLab only, and its once-per-session key.

    With the catalogue (``options``) and the ``currency`` it names the next bigger profile the user
    may use (:func:`bigger_profile`, one its budgets can pay for: ``affordable``) and its price per minute;
    its kind is then ``bigger:<slug>``, which the Lab shows with a "Restart on <profile>" button (docs/user.md).
    """
    bigger = bigger_profile(options, session, affordable) if currency is not None else None
    if currency is None:
        text = memory_notice(threshold, minutes)
    else:
        text = memory_text(threshold, minutes, bigger, currency, lang)
    kind = "advice"
    if bigger is not None and len(f"bigger:{bigger.slug}") <= 32:  # the notice's kind column is 32 characters
        kind = f"bigger:{bigger.slug}"
    message = Message(
        user=session.user,
        kind=kind,
        text=text,
        level="info",
        session_id=session.id,
        what=f"memory notice for {session.user}",
        source="jupyterhub_gpu.service",
        lang=lang,
        words=lambda other: memory_message(session, threshold, minutes, options, currency, other, affordable)[0],
    )
    return message, Once(session.user, f"session:{session.id}", session.started, 90)


# -- the cap of a share (issue 17) -------------------------------------------------------------


def capped_unit(session, options: Sequence = ()) -> str | None:
    """ "share" for a session on a time-sliced share of a GPU, "mig" on a MIG slice, None on whole GPUs.

    From the unit uuids the spawner assigned (the ledger's ``gpus``), never from what a server reports. On
    Kubernetes the device plugin picks the device and the ledger names what the pod asked for
    (``nvidia.com/gpu.shared:0``, ``nvidia.com/mig-1g.10gb:0``): there the published profile (``options``,
    :func:`.advice.catalogue`) says which unit it is.
    """
    uuids = session.gpu_list
    if any(parse_share_uuid(u) for u in uuids):
        return "share"
    if any(u.startswith("MIG-") for u in uuids):
        return "mig"
    if any("/" in u.partition(":")[0] for u in uuids):  # a cluster's resource placeholders
        mine = next((o for o in options if o.slug == session.profile), None)
        if mine is not None and mine.mig:
            return "mig"
        if mine is not None and mine.gpu_share:
            return "share"
    return None


def cap_reached(session, signals: Sequence[MinuteSignal], threshold: float = 0.9, options: Sequence = ()) -> bool:
    """Whether a session on a share or a MIG slice used ``threshold`` (a fraction) of its cap in its latest
    sampled minute: its server's own memory (what the reader attributes to its own processes) over the cap."""
    if capped_unit(session, options) is None:
        return False
    latest = next((s for s in reversed(signals) if s.gpu_mem_frac is not None), None)
    return latest is not None and latest.gpu_mem_frac >= threshold


def cap_text(unit: str, used_fraction: float, cap_mib: int | None, bigger, lang: str = "en") -> str:
    """The cap notice's words: how much of the cap the kernels use, what happens past it, and a bigger profile."""
    _ = translator(lang)
    if cap_mib:
        values = dict(used=f"{used_fraction * cap_mib / 1024:.1f}", cap=f"{cap_mib / 1024:.1f}")
        if unit == "mig":
            text = _(
                "Your kernels use {used} of your MIG slice's {cap} GB;"
                " past it TensorFlow stops with an out-of-memory error.",
                **values,
            )
        else:
            text = _(
                "Your kernels use {used} of your share's {cap} GB;"
                " past it TensorFlow stops with an out-of-memory error.",
                **values,
            )
    else:
        percent = round(used_fraction * 100)
        if unit == "mig":
            text = _(
                "Your kernels use {percent}% of your MIG slice's GPU memory;"
                " past it TensorFlow stops with an out-of-memory error.",
                percent=percent,
            )
        else:
            text = _(
                "Your kernels use {percent}% of your share's GPU memory;"
                " past it TensorFlow stops with an out-of-memory error.",
                percent=percent,
            )
    if bigger is None:
        more = _("No profile with more GPU memory is open to you: try a smaller batch size or model.")
    elif bigger.gpu_count > 1:
        memory = f"{bigger.memory_mib / 1024:g}"
        more = _(
            "The profile '{profile}' has {gpus} × {memory} GB.",
            profile=bigger.display_name,
            gpus=bigger.gpu_count,
            memory=memory,
        )
    else:
        more = _(
            "The profile '{profile}' has {memory} GB.",
            profile=bigger.display_name,
            memory=f"{bigger.memory_mib / 1024:g}",
        )
    return ("" if lang == "zh-CN" else " ").join((text, more))


def cap_message(
    session, signals: Sequence[MinuteSignal], options: Sequence = (), currency=None, lang: str = "en", affordable=None
) -> tuple[Message, Once]:
    """The cap notice of a session on a share or MIG slice, in JupyterLab only, and its once-per-session key.

    The cap is the unit's memory in the catalogue (``options``: a share's is its GPU's divided by the share
    count, :func:`.advice.catalogue`), the use the latest sampled minute's fraction of it. With the
    ``currency`` it names the next bigger profile the user may use and pay for (:func:`bigger_profile`,
    ``affordable``) and its kind is
    ``bigger:<slug>`` (the Lab's "Restart on <profile>" button). Its key is the "GPU memory high" notice's:
    a session gets one of the two, the cap notice first (it needs no ten minutes).
    """
    unit = capped_unit(session, options) or "share"
    latest = next((s for s in reversed(signals) if s.gpu_mem_frac is not None), None)
    used = latest.gpu_mem_frac if latest is not None else 1.0
    mine = next((o for o in options if o.slug == session.profile), None)
    bigger = bigger_profile(options, session, affordable) if currency is not None else None
    kind = "advice"
    if bigger is not None and len(f"bigger:{bigger.slug}") <= 32:  # the notice's kind column is 32 characters
        kind = f"bigger:{bigger.slug}"
    message = Message(
        user=session.user,
        kind=kind,
        text=cap_text(unit, used, mine.memory_mib if mine else None, bigger, lang),
        level="warning",
        session_id=session.id,
        what=f"memory cap notice for {session.user}",
        source="jupyterhub_gpu.service",
        lang=lang,
        words=lambda other: cap_message(session, signals, options, currency, other, affordable)[0],
    )
    return message, Once(session.user, f"session:{session.id}", session.started, 90)
