"""The ``busy_gpu_idle`` cull rule: a kernel that stays busy while its GPU does nothing.

Its decisions at the boundaries of its horizon, what resets it (any minute of GPU work: utilization or
memory that moves), what does not (a busy kernel, idle-kernel minutes in between), what is the other
rules' case, its warning's cancellation, its config's validation and its texts in both languages.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.rules.culling import MEMORY_MOVE_FRACTION, MESSAGES, evaluate
from jupyterhub_gpu.rules.cullrules import DEFAULT_RULES, CullRule, most_lenient, parse_config, parse_rule
from jupyterhub_gpu.rules.signals import MinuteSignal
from jupyterhub_gpu.session import CULL_REASONS, StopReason

UTC = timezone.utc
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
BUSY = CullRule("busy_gpu_idle", minutes=120, warn_minutes=20)
MEM = 0.5


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def hung(n: int, *, gpu=(), kernel_idle=(), mem=None, user=(), unsampled=()) -> list[MinuteSignal]:
    """Minutes 0..n-1 of a kernel busy on an idle GPU holding half its memory, except where listed.

    ``gpu``: minutes the GPU works (60%); ``kernel_idle``: minutes no kernel is busy; ``mem``: minute ->
    memory fraction; ``user``: minutes with a user action; ``unsampled``: minutes without a sample.
    """
    mem = mem or {}
    return [
        MinuteSignal(
            at=at(i),
            gpu_util=None if i in unsampled else (60.0 if i in gpu else 1.0),
            gpu_mem_frac=None if i in unsampled else mem.get(i, MEM),
            kernel_busy=i not in kernel_idle,
            user_active=i in user,
        )
        for i in range(n)
    ]


def run(rules, now_min: float, signals, **kw):
    now = at(now_min)
    return evaluate(rules, T0, now, [s for s in signals if s.at < now], **kw)


def test_a_hung_kernel_is_warned_a_minute_after_not_before_and_stopped_at_the_horizon():
    signals = hung(300)
    assert run([BUSY], 99, signals).action == "none"
    warn = run([BUSY], 100, signals)
    assert (warn.action, warn.rule.kind, warn.stop_at) == ("warn", "busy_gpu_idle", at(120))
    assert warn.idle_since == T0
    assert "kernel is busy" in warn.message and "09:00" not in warn.message and "11:00" in warn.message
    assert run([BUSY], 119, signals, warned=at(100)).action == "none"
    stop = run([BUSY], 120, signals, warned=at(100))
    assert (stop.action, stop.rule.kind) == ("stop", StopReason.BUSY_GPU_IDLE)
    assert "2 hours" in stop.message


def test_the_stop_waits_for_a_warning_as_old_as_its_lead():
    # a tick that came late warns first, and stops warn_minutes after the warning
    signals = hung(300)
    late = run([BUSY], 150, signals)
    assert (late.action, late.stop_at) == ("warn", at(170))
    assert run([BUSY], 169, signals, warned=at(150)).action == "none"
    assert run([BUSY], 170, signals, warned=at(150)).action == "stop"


def test_one_minute_of_gpu_work_restarts_the_clock():
    signals = hung(400, gpu={60})
    assert run([BUSY], 160, signals).action == "none"  # 99 minutes since the burst ended at 61
    warn = run([BUSY], 161, signals)
    assert (warn.action, warn.idle_since, warn.stop_at) == ("warn", at(61), at(181))


def test_gpu_work_at_the_last_minute_of_the_horizon_keeps_the_server():
    signals = hung(400, gpu={119})
    assert run([BUSY], 119, signals, warned=at(100)).action == "none"
    decision = run([BUSY], 120, signals, warned=at(100))
    assert decision.action == "cancel"  # the GPU worked: the warning is off, no stop
    assert "will not be stopped" in decision.message


def test_gpu_memory_that_moves_is_work_and_a_flat_one_is_not():
    moved = hung(400, mem={i: MEM + MEMORY_MOVE_FRACTION for i in range(80, 400)})
    assert run([BUSY], 180, moved).action == "none"  # the move was in minute 80: idle since 81
    assert (run([BUSY], 181, moved).action, run([BUSY], 181, moved).idle_since) == ("warn", at(81))
    jitter = hung(400, mem={i: MEM + MEMORY_MOVE_FRACTION / 2 for i in range(80, 400)})
    assert run([BUSY], 100, jitter).action == "warn"  # a move under 1% of the GPU's memory is not work
    freed = hung(400, mem={i: 0.0 for i in range(80, 400)})  # memory released: the GPU was used
    assert run([BUSY], 180, freed).action == "none" and run([BUSY], 181, freed).action == "warn"


def test_memory_moved_with_nothing_computed_is_no_work_and_a_wiggle_escapes_nothing():
    """A hung kernel that allocates and frees 1% of the GPU's memory once every 110 minutes, computing nothing."""
    wiggle = {i for i in range(24 * 60) if i % 110 == 100}
    signals = [
        MinuteSignal(at=at(i), gpu_util=0.0, gpu_mem_frac=MEM + (0.01 if i in wiggle else 0.0), kernel_busy=True)
        for i in range(24 * 60)
    ]
    decision = run([BUSY], 100, signals)
    assert (decision.action, decision.idle_since) == ("warn", T0)
    assert run([BUSY], 120, signals, warned=at(100)).action == "stop"
    # the same move in a minute the GPU computed something (under the threshold, above 0) is work
    computed = [
        MinuteSignal(at=s.at, gpu_util=2.0 if i == 100 else 0.0, gpu_mem_frac=s.gpu_mem_frac, kernel_busy=True)
        for i, s in enumerate(signals)
    ]
    assert run([BUSY], 120, computed).action == "none"


def test_minutes_whose_kernel_is_idle_do_not_reset_it():
    signals = hung(300, kernel_idle=set(range(50, 53)) | {90})
    assert run([BUSY], 100, signals).action == "warn"


def test_an_idle_kernel_on_an_idle_gpu_is_the_other_rules_case():
    signals = hung(300, kernel_idle=set(range(300)))
    assert run([BUSY], 200, signals).action == "none"
    decision = run(DEFAULT_RULES, 25, signals)
    assert (decision.action, decision.rule.kind) == ("warn", "gpu_idle")
    assert run(DEFAULT_RULES, 30, signals, warned=at(25)).rule.kind == "gpu_idle"


def test_a_busy_kernel_keeps_gpu_idle_off_and_busy_gpu_idle_stops_it_under_the_defaults():
    signals = hung(300)
    actions = []
    warned = None
    for minute in range(1, 300):
        decision = run(DEFAULT_RULES, minute, signals, warned=warned)
        if decision.action == "warn":
            warned = at(minute)
        if decision.action != "none":
            actions.append((minute, decision.action, decision.rule.kind))
        if decision.action == "stop":
            break
    assert actions == [(100, "warn", "busy_gpu_idle"), (120, "stop", "busy_gpu_idle")]


def test_a_user_action_after_the_warning_was_due_answers_it():
    signals = hung(400, user={105})
    assert run([BUSY], 106, signals, warned=at(100)).action == "cancel"
    assert run([BUSY], 205, signals).action == "none"
    assert run([BUSY], 206, signals).action == "warn"  # asked again T - warn_minutes later
    early = hung(400, user={30})  # before the warning was due: no answer, the clock runs on
    assert run([BUSY], 100, early).action == "warn"


def test_no_samples_or_no_gpu_and_it_does_not_judge():
    assert run([BUSY], 200, hung(300, unsampled=set(range(300)))).action == "none"
    assert run([BUSY], 200, hung(300), has_gpu=False).action == "none"


def test_its_config_is_checked_like_the_others():
    rule = parse_rule({"kind": "busy_gpu_idle", "minutes": 120})
    assert (rule.warn_minutes, rule.util_threshold) == (20, 5.0)
    assert parse_rule({"kind": "busy_gpu_idle", "minutes": 30}).warn_minutes == 15  # at most half
    for raw, message in (
        ({"kind": "busy_gpu_idel", "minutes": 120}, "kind must be one of gpu_idle, inactive, max_age, busy_gpu_idle"),
        ({"kind": "busy_gpu_idle", "minutes": 1}, "minutes must be a whole number of minutes from 2"),
        ({"kind": "busy_gpu_idle", "minutes": "2h"}, "minutes must be a whole number"),
        ({"kind": "busy_gpu_idle", "minutes": 120, "warn_minutes": 120}, "warn_minutes must be a whole number"),
        ({"kind": "busy_gpu_idle", "minutes": 120, "util_threshold": 0}, "util_threshold must be a percentage"),
        ({"kind": "busy_gpu_idle", "minutes": 120, "horizon": 3}, "horizon is not a cull rule field"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_config({"profiles": {"a100": [raw]}})
    with pytest.raises(ValueError, match=r"cull_rules.groups\['thesis'\]\[1\].kind: a second 'busy_gpu_idle'"):
        parse_config({"groups": {"thesis": [rule.to_dict(), rule.to_dict()]}})


def test_it_is_off_where_a_list_leaves_it_out_and_the_most_lenient_wins():
    config = parse_config({"groups": {"thesis": [{"kind": "gpu_idle", "minutes": 60}]}})
    assert run(config["groups"]["thesis"], 200, hung(300)).action == "none"
    longer = CullRule("busy_gpu_idle", minutes=240, warn_minutes=30)
    assert most_lenient([[BUSY], [longer]]) == (longer,)
    assert most_lenient([[BUSY], []]) == ()


def test_its_stop_reason_and_texts_exist_in_both_languages():
    assert StopReason.BUSY_GPU_IDLE in CULL_REASONS
    english = translator("en")("busy_gpu_idle")
    assert english != "busy_gpu_idle" and translator("zh-CN")("busy_gpu_idle") not in (english, "busy_gpu_idle")
    _ = translator("zh-CN")
    for key in ("warn.busy_gpu_idle", "stop.busy_gpu_idle"):
        assert _(MESSAGES[key]) != MESSAGES[key]
        text = _(MESSAGES[key], threshold=5, age="2 小时", stop_time="11:00")
        assert "11:00" in text and "5%" in text and "GPU" in text and "{" not in text
