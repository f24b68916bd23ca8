"""Idle culling: whether a running session is let be, warned, stopped, or its warning cancelled.

Pure functions of a session's per-minute signals, its user's last activity and
the clock: no database, no hub, no I/O. The service's tick feeds them what the
ledger knows and acts on the :class:`Decision`; the simulator
(:mod:`jupyterhub_gpu.sim`) feeds them a recorded trace with a simulated clock.
Both run this code, so what the simulator measures is what the service does.

Four kinds of rule (:data:`KINDS`), each with a time ``T`` (``minutes``) and a
warning lead (``warn_minutes``):

- ``gpu_idle``: every minute of the last ``T`` was idle (:mod:`.idle`: GPU
  utilization under ``util_threshold`` percent, and no busy kernel while the
  definition counts kernels). What the user does in the Lab
  without using the GPU does not keep a GPU server, but it does answer a
  warning (see below). Minutes with no GPU sample count as idle only if the
  hub's activity records show nothing in them either; with no sample at all in
  the last ``T`` minutes the rule does not apply (a server that stops pushing
  samples is judged on hub activity alone, by ``inactive`` and ``max_age``).
  Does not apply to CPU-only sessions. On a shared GPU or a MIG slice a
  server is judged on its own figures (:func:`.idle.own_gpu_utilization`): its own
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
  warning the same way. Its ``T`` is long (:data:`.cullrules.DEFAULT_RULES`: 2 hours) so
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

The rules themselves, their defaults and which apply to a session are :mod:`.cullrules`; the signals
:mod:`.signals`. Every user-visible string is a template in :data:`MESSAGES` so that it can be
translated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone, tzinfo
from functools import partial

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.cullrules import ACTIONS, CullRule
from jupyterhub_gpu.rules.signals import MINUTE, MinuteSignal
from jupyterhub_gpu.session import StopReason

#: ``busy_gpu_idle``: GPU memory in use that moves by this fraction of the GPU's memory (or more) from one
#: sampled minute to the next is GPU work, whatever the utilization (an allocation is the GPU being used).
MEMORY_MOVE_FRACTION = 0.01

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
    "duration.minute": "{n} minute",  # the plural catalog entries of these pairs: translator's .plural
    "duration.minutes": "{n} minutes",
    "duration.hour": "{n} hour",
    "duration.hours": "{n} hours",
}


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

    ``kernel_counts`` (``gpu_idle``): a minute that is work by the idle definition (:data:`.idle.IDLE`, at
    the rule's threshold) restarts the clock. Without it (``busy_gpu_idle``) only GPU work restarts the
    clock: utilization at or above the threshold, or GPU memory that moved by :data:`MEMORY_MOVE_FRACTION`
    from the sampled minute before.
    """
    threshold = rule.util_threshold
    definition = idle.IDLE
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
        worked = definition.busy(signal.gpu_util, kernel_counts and signal.kernel_busy, threshold)
        if not kernel_counts and later is not None and _memory_moved(signal, later):
            reset = _minute_end(later, now)  # the later minute's memory moved: the GPU worked in it
            break
        if worked or (not sampled and signal.user_active):
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
        gpu_busy = idle.IDLE.gpu_worked(signal.gpu_util, rule.util_threshold)
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
        return _.plural(MESSAGES["duration.hour"], MESSAGES["duration.hours"], hours, n=hours)
    return _.plural(MESSAGES["duration.minute"], MESSAGES["duration.minutes"], minutes, n=minutes)


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
