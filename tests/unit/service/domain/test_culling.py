"""Cull rules: warn at T - lead, stop at T after a warning, cancel on activity, overrides, parsing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.rules.culling import MESSAGES, Decision, evaluate
from jupyterhub_gpu.rules.cullrules import (
    DEFAULT_RULES,
    CullRule,
    most_lenient,
    parse_config,
    parse_rule,
    parse_rules,
    rules_for,
)
from jupyterhub_gpu.rules.signals import MinuteSignal, gpu_memory_high
from jupyterhub_gpu.service.domain.culling import memory_notice

UTC = timezone.utc
T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
GPU_IDLE = CullRule("gpu_idle", minutes=30, warn_minutes=5)
INACTIVE = CullRule("inactive", minutes=60, warn_minutes=10)
MAX_AGE = CullRule("max_age", minutes=120, warn_minutes=15)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def sig(i: int, util: float | None = 0.0, busy: bool = False, user: bool = False, mem: float | None = None):
    return MinuteSignal(at=at(i), gpu_util=util, gpu_mem_frac=mem, kernel_busy=busy, user_active=user)


def trace(n: int, busy_minutes=(), user_minutes=(), unsampled=(), util_busy=80.0) -> list[MinuteSignal]:
    """Minutes 0..n-1: idle GPU unless listed (busy: kernel busy and GPU at ``util_busy``)."""
    return [
        sig(
            i,
            util=None if i in unsampled else (util_busy if i in busy_minutes else 0.0),
            busy=i in busy_minutes,
            user=i in user_minutes,
        )
        for i in range(n)
    ]


def run(rules, now_min: float, signals, **kw) -> Decision:
    now = at(now_min)
    seen = [s for s in signals if s.at < now]
    return evaluate(rules, T0, now, seen, **kw)


# -- gpu_idle -------------------------------------------------------------------------------


def test_gpu_idle_warns_exactly_at_t_minus_lead_then_stops_exactly_at_t():
    signals = trace(60, busy_minutes={0})  # GPU used in minute 0: idle from 14:01
    assert run([GPU_IDLE], 25, signals).action == "none"
    warn = run([GPU_IDLE], 26, signals)
    assert warn.action == "warn"
    assert warn.rule == GPU_IDLE
    assert warn.idle_since == at(1)
    assert warn.stop_at == at(31)
    assert warn.message == (
        "Your GPU has been idle (under 5%) for 25 minutes: this server will be stopped at 14:31 unless you use it."
    )
    pending = run([GPU_IDLE], 30, signals, warned=at(26))
    assert (pending.action, pending.stop_at, pending.message) == ("none", at(31), "")
    stop = run([GPU_IDLE], 31, signals, warned=at(26))
    assert (stop.action, stop.stop_at, stop.idle_since) == ("stop", at(31), at(1))
    assert "idle (under 5%) for 30 minutes" in stop.message


def test_no_stop_without_a_warning_even_when_the_time_is_long_past():
    signals = trace(90, busy_minutes={0})
    late = run([GPU_IDLE], 60, signals)  # the service was down: the user is still warned first
    assert (late.action, late.stop_at) == ("warn", at(65))
    assert run([GPU_IDLE], 64, signals, warned=at(60)).action == "none"
    assert run([GPU_IDLE], 65, signals, warned=at(60)).action == "stop"


def test_a_warning_given_before_the_rule_was_due_does_not_count():
    signals = trace(60, busy_minutes={0})
    # a warning at 14:20 belongs to something else: gpu_idle warns on its own at 14:26
    assert run([GPU_IDLE], 26, signals, warned=at(20)).action == "warn"


@pytest.mark.parametrize(
    "activity",
    [
        {"busy_minutes": {0, 27}},  # a busy kernel (and GPU)
        {"busy_minutes": {0}, "user_minutes": {27}},  # the user did something
    ],
)
def test_activity_after_the_warning_cancels_and_restarts_the_clock(activity):
    signals = trace(90, **activity)
    assert run([GPU_IDLE], 26, signals).action == "warn"
    cancel = run([GPU_IDLE], 28, signals, warned=at(26))
    assert cancel.action == "cancel"
    assert cancel.message == MESSAGES["cancel"]
    assert cancel.idle_since == at(28)
    # warning cleared: the idle clock runs from 14:28, so no new warning before 14:53
    assert run([GPU_IDLE], 52, signals).action == "none"
    again = run([GPU_IDLE], 53, signals)
    assert (again.action, again.stop_at) == ("warn", at(58))


def test_gpu_utilization_after_the_warning_cancels():
    signals = trace(60, busy_minutes={0})
    signals[27] = sig(27, util=40.0)  # a GPU job outside any kernel
    assert run([GPU_IDLE], 28, signals, warned=at(26)).action == "cancel"


def test_utilization_under_the_threshold_is_idle_and_at_it_is_not():
    signals = [sig(i, util=4.9) for i in range(40)]
    assert run([GPU_IDLE], 25, signals).action == "warn"  # idle since the start
    signals[10] = sig(10, util=5.0)
    assert run([GPU_IDLE], 25, signals).action == "none"
    assert run([GPU_IDLE], 36, signals).action == "warn"  # idle since 14:11
    low = CullRule("gpu_idle", minutes=30, warn_minutes=5, util_threshold=1)
    signals = [sig(i, util=3.0) for i in range(40)]
    assert run([low], 36, signals).action == "none"


def test_user_actions_before_the_warning_do_not_keep_a_gpu_server():
    # typing for 25 minutes without running anything: the GPU is idle, the warning comes
    signals = trace(60, busy_minutes={0}, user_minutes=set(range(1, 26)))
    assert run([GPU_IDLE], 26, signals).action == "warn"


def test_a_student_working_without_the_gpu_is_asked_again_every_t_minus_lead():
    signals = trace(120, busy_minutes={0}, user_minutes=set(range(1, 120)))
    actions = {}
    warned = None
    for minute in range(1, 90):
        decision = run([GPU_IDLE], minute, signals, warned=warned)
        if decision.action == "warn":
            warned = at(minute)
        elif decision.action == "cancel":
            warned = None
        if decision.action != "none":
            actions[minute] = decision.action
    assert actions == {26: "warn", 27: "cancel", 52: "warn", 53: "cancel", 78: "warn", 79: "cancel"}


def test_last_user_activity_answers_a_warning():
    signals = trace(60, busy_minutes={0})
    decision = run([GPU_IDLE], 28, signals, warned=at(26), last_user_activity=at(27.5))
    assert (decision.action, decision.idle_since) == ("cancel", at(27.5))


# -- no samples: judged on hub activity alone ---------------------------------------------------


def test_no_samples_in_the_window_gpu_idle_does_not_fire():
    signals = trace(200, unsampled=set(range(200)))
    assert run([GPU_IDLE], 100, signals).action == "none"
    assert run([GPU_IDLE], 100, signals).rule is None
    # inactive still judges: nothing since the start -> warn at T - lead
    decision = run([GPU_IDLE, INACTIVE], 50, signals)
    assert (decision.action, decision.rule.kind) == ("warn", "inactive")
    assert run([GPU_IDLE, INACTIVE], 49, signals).action == "none"


def test_no_samples_and_no_signals_at_all_judged_on_last_activity():
    decision = run([GPU_IDLE, INACTIVE], 80, [], last_user_activity=at(30))
    assert (decision.action, decision.rule.kind, decision.idle_since) == ("warn", "inactive", at(30))
    assert decision.message.startswith("This server has had no activity for 50 minutes")
    assert run([GPU_IDLE, INACTIVE], 79, [], last_user_activity=at(30)).action == "none"


def test_a_server_that_stops_pushing_samples_is_judged_on_activity_alone():
    signals = trace(10)  # idle samples for 10 minutes, then the server goes silent
    assert run([GPU_IDLE], 26, signals).action == "warn"  # unsampled, inactive minutes count as idle
    assert run([GPU_IDLE], 40, signals).action == "none"  # no sample in the last 30 minutes
    assert run([GPU_IDLE], 40, signals, warned=at(26)).action == "cancel"


def test_unsampled_minutes_with_user_activity_are_not_idle():
    signals = trace(60, busy_minutes={0}, unsampled={10}, user_minutes={10})
    assert run([GPU_IDLE], 26, signals).action == "none"
    assert run([GPU_IDLE], 36, signals).action == "warn"  # idle since the end of minute 10
    # hub activity inside a minute the server did not report on counts the same way
    signals = trace(60, busy_minutes={0}, unsampled=set(range(8, 12)))
    assert run([GPU_IDLE], 36, signals, last_user_activity=at(10.5)).idle_since == at(10.5)


# -- CPU-only, inactive, max_age ------------------------------------------------------------------


def test_cpu_only_sessions_are_not_judged_on_the_gpu():
    signals = trace(100, user_minutes={0})
    assert run([GPU_IDLE], 60, signals, has_gpu=False).action == "none"
    decision = run([GPU_IDLE, INACTIVE], 51, signals, has_gpu=False)
    assert (decision.action, decision.rule.kind) == ("warn", "inactive")


def test_inactive_counts_users_kernels_and_the_gpu_as_activity():
    signals = trace(200, user_minutes={5})
    assert run([INACTIVE], 55, signals).action == "none"
    assert run([INACTIVE], 56, signals).action == "warn"  # nothing since 14:06
    assert run([INACTIVE], 65, signals, warned=at(56)).action == "none"
    stop = run([INACTIVE], 66, signals, warned=at(56))
    assert (stop.action, stop.stop_at, stop.idle_since) == ("stop", at(66), at(6))
    assert stop.message.startswith("Your server was stopped at 15:06 after 60 minutes without activity")
    # a training with nobody watching is activity: GPU at 80% from a script, kernel idle
    training = [sig(i, util=80.0) for i in range(200)]
    assert run([INACTIVE], 150, training).action == "none"
    kernel = trace(200, user_minutes={5})
    kernel[30] = sig(30, busy=True)
    assert run([INACTIVE], 80, kernel).action == "none"
    assert run([INACTIVE], 81, kernel).action == "warn"


def test_max_age_warns_and_stops_whatever_the_session_does():
    busy = trace(200, busy_minutes=set(range(200)), user_minutes=set(range(200)))
    assert run([MAX_AGE], 104, busy).action == "none"
    warn = run([MAX_AGE], 105, busy)
    assert (warn.action, warn.stop_at, warn.idle_since) == ("warn", at(120), T0)
    assert warn.message == (
        "This server has been running for 105 minutes, and servers are stopped after 2 hours:"
        " it will be stopped at 16:00. Save your work now."
    )
    assert run([MAX_AGE], 110, busy, warned=at(105)).action == "none"  # activity does not cancel it
    stop = run([MAX_AGE], 120, busy, warned=at(105))
    assert stop.action == "stop"
    assert "servers are stopped after 2 hours" in stop.message


# -- several rules -----------------------------------------------------------------------------


def test_the_most_urgent_decision_wins():
    signals = trace(200, busy_minutes={0})
    # at 14:50 gpu_idle is warned and due to stop; inactive is due to warn
    decision = run([INACTIVE, GPU_IDLE], 51, signals, warned=at(26))
    assert (decision.action, decision.rule.kind) == ("stop", "gpu_idle")
    # both due to warn: the one that stops first
    short = CullRule("inactive", minutes=28, warn_minutes=3)
    decision = run([GPU_IDLE, short], 26, signals)
    assert (decision.action, decision.rule.kind, decision.stop_at) == ("warn", "inactive", at(29))
    # nothing due: none, naming the rule nearest to firing
    decision = run([MAX_AGE, GPU_IDLE, INACTIVE], 10, signals)
    assert (decision.action, decision.rule.kind, decision.stop_at) == ("none", "gpu_idle", at(31))


def test_a_second_rule_gets_its_own_warning():
    signals = trace(200, busy_minutes=set(range(100)))  # busy until 15:40, then idle
    warned = at(105)  # max_age warning
    decision = run([MAX_AGE, GPU_IDLE], 125, signals, warned=warned)
    assert (decision.action, decision.rule.kind) == ("stop", "max_age")
    decision = run([MAX_AGE, GPU_IDLE], 110, signals, warned=warned)
    assert decision.action == "none"  # max_age pending, gpu_idle not due: no cancel


def test_a_later_rule_does_not_push_back_a_pending_stop():
    # gpu_idle warned at 14:26 (stop 14:31); at 14:28 a stricter inactive rule becomes due
    # with a stop at 14:33: no second warning, and the server still stops at 14:31
    inactive = CullRule("inactive", minutes=30, warn_minutes=3)
    signals = trace(60, busy_minutes={0}, user_minutes={1})
    assert run([GPU_IDLE, inactive], 26, signals).action == "warn"
    decision = run([GPU_IDLE, inactive], 28, signals, warned=at(26))
    assert (decision.action, decision.rule.kind, decision.stop_at) == ("none", "gpu_idle", at(31))
    assert run([GPU_IDLE, inactive], 31, signals, warned=at(26)).action == "stop"
    # one that would stop it sooner is warned about
    sooner = CullRule("max_age", minutes=29, warn_minutes=1)
    decision = run([GPU_IDLE, sooner], 28, signals, warned=at(26))
    assert (decision.action, decision.rule.kind, decision.stop_at) == ("warn", "max_age", at(29))


def test_activity_cancels_only_when_no_rule_is_still_covered():
    signals = trace(200, busy_minutes={0, 107})
    # max_age warned at 14:45 and still due: using the GPU does not cancel that warning
    assert run([MAX_AGE, GPU_IDLE], 108, signals, warned=at(105)).action == "none"


def test_no_rules_no_decision():
    assert evaluate([], T0, at(10), trace(10)) == Decision("none")
    assert evaluate([], T0, at(10), trace(10), warned=at(5)).action == "cancel"


def test_messages_use_the_given_time_zone():
    signals = trace(60, busy_minutes={0})
    decision = run([GPU_IDLE], 26, signals, tz=ZoneInfo("Asia/Shanghai"))
    assert "stopped at 22:31 unless" in decision.message


def test_evaluate_refuses_naive_datetimes():
    with pytest.raises(ValueError, match="now must be an aware datetime"):
        evaluate([GPU_IDLE], T0, datetime(2026, 3, 2, 15, 0), [])


# -- defaults, overrides, parsing -------------------------------------------------------------


def test_default_rules_follow_the_lab_rule():
    by_kind = {r.kind: r for r in DEFAULT_RULES}
    assert by_kind["gpu_idle"] == CullRule("gpu_idle", minutes=30, warn_minutes=5, util_threshold=5.0)
    assert by_kind["inactive"] == CullRule("inactive", minutes=15, warn_minutes=5, util_threshold=5.0)
    assert by_kind["max_age"] == CullRule("max_age", minutes=1440, warn_minutes=30)
    assert parse_rules([r.to_dict() for r in DEFAULT_RULES]) == DEFAULT_RULES


CONFIG = {
    "default": [{"kind": "gpu_idle", "minutes": 30}],
    "profiles": {
        "a100": [{"kind": "gpu_idle", "minutes": 20}, {"kind": "max_age", "minutes": 480}],
        "cpu": [{"kind": "inactive", "minutes": 120, "warn_minutes": 10}],
    },
    "groups": {
        "thesis": [{"kind": "gpu_idle", "minutes": 60}, {"kind": "max_age", "minutes": 2880}],
        "course": [{"kind": "gpu_idle", "minutes": 45, "util_threshold": 2}, {"kind": "max_age", "minutes": 720}],
        "nolimits": [],
    },
}


def test_rules_for_default_profile_and_group():
    assert rules_for(None, (), None) == DEFAULT_RULES
    assert rules_for("t4", ["unknown-group"], CONFIG) == (CullRule("gpu_idle", 30, 5),)
    assert rules_for("a100", (), CONFIG) == (CullRule("gpu_idle", 20, 5), CullRule("max_age", 480, 30))
    assert rules_for("cpu", (), CONFIG) == (CullRule("inactive", 120, 10),)
    # a group's list replaces the profile's, whatever the profile
    assert rules_for("a100", ["thesis"], CONFIG) == (CullRule("gpu_idle", 60, 5), CullRule("max_age", 2880, 30))
    assert rules_for("a100", ["nolimits"], CONFIG) == ()
    # no "default" key: DEFAULT_RULES
    assert rules_for("t4", (), {"profiles": {}}) == DEFAULT_RULES


def test_several_groups_get_the_most_lenient_rule_of_each_kind():
    assert rules_for("t4", ["course", "thesis"], CONFIG) == (
        CullRule("gpu_idle", 60, 5),
        CullRule("max_age", 2880, 30),
    )
    # a group that does not cull a kind at all is the most lenient for that kind
    assert rules_for("t4", ["course", "nolimits"], CONFIG) == ()
    # equal T: the lower threshold is more lenient
    a = [CullRule("gpu_idle", 30, 5, util_threshold=5)]
    b = [CullRule("gpu_idle", 30, 5, util_threshold=2), CullRule("inactive", 60, 10)]
    assert most_lenient([a, b]) == (CullRule("gpu_idle", 30, 5, util_threshold=2),)


def test_parse_config_normalises_and_is_idempotent():
    parsed = parse_config(CONFIG)
    assert parse_config(parsed) == parsed
    assert parsed["default"] == (CullRule("gpu_idle", 30, 5),)
    assert parse_config(None) == {"default": DEFAULT_RULES, "profiles": {}, "groups": {}}


def test_parse_rule_defaults():
    assert parse_rule({"kind": "inactive", "minutes": 90}) == CullRule("inactive", 90, 5)
    assert parse_rule({"kind": "max_age", "minutes": 600}) == CullRule("max_age", 600, 30)
    assert parse_rule({"kind": "gpu_idle", "minutes": 6}) == CullRule("gpu_idle", 6, 3)  # at most half of T
    assert parse_rule({"kind": "gpu_idle", "minutes": 2}).warn_minutes == 1
    assert parse_rule({"kind": "gpu_idle", "minutes": 30, "util_threshold": 2.5}).util_threshold == 2.5


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("gpu_idle", r"^cull_rules must be a list of rules"),
        ([["gpu_idle", 30]], r"^cull_rules\[0\] must be a dict"),
        ([{"minutes": 30}], r"^cull_rules\[0\]\.kind is missing"),
        ([{"kind": "gpu_idle"}], r"^cull_rules\[0\]\.minutes is missing"),
        ([{"kind": "idle", "minutes": 30}], r"^cull_rules\[0\]\.kind must be one of gpu_idle, inactive, max_age"),
        ([{"kind": "gpu_idle", "minutes": 0}], r"^cull_rules\[0\]\.minutes must be a whole number"),
        ([{"kind": "gpu_idle", "minutes": 30.0}], r"^cull_rules\[0\]\.minutes must be a whole number"),
        ([{"kind": "gpu_idle", "minutes": True}], r"^cull_rules\[0\]\.minutes must be a whole number"),
        ([{"kind": "gpu_idle", "minutes": 30, "warn_minutes": 30}], r"^cull_rules\[0\]\.warn_minutes must be"),
        ([{"kind": "gpu_idle", "minutes": 30, "warn_minutes": 0}], r"^cull_rules\[0\]\.warn_minutes must be"),
        ([{"kind": "gpu_idle", "minutes": 30, "util_threshold": 0}], r"^cull_rules\[0\]\.util_threshold must be"),
        ([{"kind": "gpu_idle", "minutes": 30, "util_threshold": 101}], r"^cull_rules\[0\]\.util_threshold"),
        ([{"kind": "gpu_idle", "minutes": 30, "util_threshold": "5"}], r"^cull_rules\[0\]\.util_threshold"),
        ([{"kind": "gpu_idle", "minutes": 30, "minute": 5}], r"^cull_rules\[0\]\.minute is not a cull rule field"),
        (
            [{"kind": "gpu_idle", "minutes": 30}, {"kind": "gpu_idle", "minutes": 60}],
            r"^cull_rules\[1\]\.kind: a second 'gpu_idle' rule",
        ),
    ],
)
def test_parse_errors_name_the_field(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_rules(raw)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], r"^cull_rules must be a dict with keys default, profiles, groups"),
        ({"defaults": []}, r"^cull_rules\.defaults is not a key"),
        ({"profiles": []}, r"^cull_rules\.profiles must be a dict"),
        (
            {"profiles": {"a100": [{"kind": "gpu_idle", "minutes": -1}]}},
            r"^cull_rules\.profiles\['a100'\]\[0\]\.minutes",
        ),
        ({"groups": {"": []}}, r"^cull_rules\.groups: names must be non-empty strings"),
        ({"default": [{"kind": "max_age"}]}, r"^cull_rules\.default\[0\]\.minutes is missing"),
    ],
)
def test_config_errors_name_the_place(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_config(raw)


def test_constructing_a_bad_rule_fails():
    with pytest.raises(ValueError, match=r"^rule\.warn_minutes"):
        CullRule("gpu_idle", minutes=10, warn_minutes=10)


# -- GPU memory notice ---------------------------------------------------------------------------


def test_gpu_memory_high_for_ten_minutes():
    high = [sig(i, mem=0.95) for i in range(10)]
    assert gpu_memory_high(high)
    assert not gpu_memory_high(high[1:])  # nine minutes
    assert gpu_memory_high([sig(0, mem=0.5), *high])
    assert not gpu_memory_high([*high, sig(10, mem=0.5)])
    exactly = [sig(i, mem=0.9) for i in range(10)]
    assert not gpu_memory_high(exactly)  # above 90%, not at it
    unsampled = [*high[:5], sig(5, util=None, mem=None), *high[6:]]
    assert not gpu_memory_high(unsampled)
    gap = [*high[:5], *[sig(i + 1, mem=0.95) for i in range(5, 10)]]
    assert not gpu_memory_high(gap)
    assert gpu_memory_high([sig(i, mem=0.85) for i in range(5)], threshold=0.8, minutes=5)


def test_memory_notice_text():
    assert memory_notice() == ("GPU memory has been above 90% for 10 minutes: a profile with a larger GPU may help.")


def test_the_example_in_the_docs():
    # started 13:30, last cell until 14:00, typing until 14:10, then nothing
    started = T0 - timedelta(minutes=30)
    signals = [
        MinuteSignal(
            at=started + timedelta(minutes=i),
            gpu_util=80.0 if i < 30 else 0.0,
            kernel_busy=i < 30,
            user_active=30 <= i < 40,
        )
        for i in range(120)
    ]
    events, warned = [], None
    for minute in range(1, 120):
        now = started + timedelta(minutes=minute)
        decision = evaluate(DEFAULT_RULES, started, now, [s for s in signals if s.at < now], warned=warned)
        if decision.action != "none":
            events.append((now.strftime("%H:%M"), decision.action, decision.rule.kind, decision.message))
        if decision.action == "warn":
            warned = now
        if decision.action == "stop":
            assert billed_minutes(started, now) == 55
            break
    assert events[0] == (
        "14:20",
        "warn",
        "inactive",
        "This server has had no activity for 10 minutes: it will be stopped at 14:25 unless you use it.",
    )
    assert [e[:3] for e in events[1:]] == [("14:25", "stop", "inactive")]
