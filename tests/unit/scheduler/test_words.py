"""The scheduler's messages: typed values in, words out in each language; the ledger keeps the values, not words.

A decision of the real :func:`schedule` goes through a real sqlite ledger (a stop order, a published queue entry)
and is worded afterwards in the reader's language from what was stored: nothing is worded in English first and
parsed back.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.ledger.queries.schedule import RESERVED, Queued, order_stop, publish_queue, queue, stop_orders
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler import (
    END,
    PREEMPT,
    QUEUE,
    WEEK,
    FairShare,
    Gpus,
    Grace,
    Period,
    Policy,
    Preemption,
    Request,
    Reservation,
    Reservations,
    Running,
    Snapshot,
    schedule,
    values_from_json,
    values_json,
)
from jupyterhub_gpu.scheduler.words import (
    clock_words,
    gpus_words,
    grace_words,
    period_words,
    reason_words,
    stop_notice_words,
)
from jupyterhub_gpu.session import SessionStart

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc)  # Tuesday 13:00 in Shanghai
CLASS = Reservation(
    "7", "cs231n", "T4", 4, NOW + timedelta(hours=1), NOW + timedelta(hours=3), date(2027, 1, 15), "CS231N"
)


def test_counts_take_the_form_of_their_number():
    assert [gpus_words(n, "T4") for n in (1, 2, 4)] == ["1 T4", "2 T4s", "4 T4s"]
    assert [gpus_words(n, "T4", "zh-CN") for n in (1, 4)] == ["1 块 T4", "4 块 T4"]
    assert reason_words("grant", {"gpus": Gpus(1, "A100")}) == "1 A100 free"
    assert reason_words("grant", {"gpus": Gpus(3, "A100")}) == "3 A100s free"


def test_times_periods_and_graces_are_worded_by_their_type():
    later = NOW + timedelta(minutes=55)
    assert clock_words(later, SHANGHAI, NOW) == "13:55"
    assert clock_words(later + timedelta(days=1), SHANGHAI, NOW) == "Wed 2 Dec 13:55"
    assert clock_words(later + timedelta(days=1), SHANGHAI, NOW, "zh-CN") == "12月2日 13:55"
    assert [period_words(d) for d in (WEEK, timedelta(days=1), timedelta(days=3), timedelta(hours=12))] == [
        "this week",
        "today",
        "in the last 3 days",
        "in the last 12 hours",
    ]
    assert period_words(WEEK, "zh-CN") == "本周"
    assert (grace_words(timedelta(seconds=30)), grace_words(timedelta(minutes=2))) == ("30 s", "2 min")
    assert grace_words(timedelta(seconds=30), "zh-CN") == "30 秒"


def test_values_are_stored_typed_and_come_back_typed():
    values = {
        "at": NOW,
        "waited": timedelta(hours=1, minutes=5),
        "gpus": Gpus(4, "T4"),
        "period": Period(WEEK),
        "grace": Grace(timedelta(seconds=90)),
        "label": "CS231N",
        "percent": 140,
    }
    stored = values_json(values)
    assert "this week" not in stored and "T4s" not in stored and "1 h 5 min" not in stored  # no words, values
    assert values_from_json(stored) == values
    assert values_from_json(json.dumps({"period": "this week"})) == {"period": "this week"}  # an older hub's row
    with pytest.raises(ValueError, match="timezone-aware"):
        values_json({"at": datetime(2026, 12, 1, 13, 0)})
    with pytest.raises(TypeError, match="cannot be stored"):
        values_json({"what": object()})


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


def test_a_reservations_end_is_worded_from_the_ledger_in_each_readers_language(ledger):
    stranger = Running("s1", "bob", "thesis", "T4", NOW - timedelta(hours=1), 4)
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 4}, running=[stranger], reservations=[CLASS], tz=SHANGHAI)
    (end,) = [d for d in schedule(snap, Policy("r", reservations=Reservations())) if d.kind == END]
    assert end.reason == "may run until 13:55: CS231N has 4 T4s reserved from 14:00"
    start = SessionStart("s1", "bob", "", ("thesis",), "t4", ("G",), 1, "CNY", NOW - timedelta(hours=1))
    ledger.record_start(start)
    assert order_stop(ledger, ledger.get_session("s1"), RESERVED, end.at, end.key, dict(end.values), NOW)
    (order,) = stop_orders(ledger)
    assert reason_words(order.reason_key, order.values, "en", SHANGHAI, NOW) == end.reason
    assert (
        reason_words(order.reason_key, order.values, "zh-CN", SHANGHAI, NOW)
        == end.reason_in("zh-CN")
        == ("最多可运行到 13:55：从 14:00 起 4 块 T4 已为 CS231N 预留")
    )
    # the notice says the same booking, and on another day says the day
    assert stop_notice_words(False, order.reason_key, order.values, order.stop_at, "zh-CN", SHANGHAI, NOW) == (
        "此服务器最多可运行到 13:55：从 14:00 起 4 块 T4 已为 CS231N 预留。届时它将被停止；请保存您的工作。"
    )
    yesterday = NOW - timedelta(days=1)
    assert reason_words(order.reason_key, order.values, "en", SHANGHAI, yesterday) == (
        "may run until Tue 1 Dec 13:55: CS231N has 4 T4s reserved from Tue 1 Dec 14:00"
    )


def test_a_preemption_and_a_place_in_the_queue_are_worded_from_the_ledger(ledger):
    running = [Running("s1", "bob", "B", "T4", NOW - timedelta(hours=1), tier="preemptible", checkpoints=True)]
    waiting = [
        Request("want", "ann", "A", "T4", NOW - timedelta(minutes=1)),
        Request("later", "cat", "B", "T4", NOW - timedelta(hours=1, minutes=5)),
    ]
    usage = {"A": {"T4": 1.0}, "B": {"T4": 3.0}}
    snap = Snapshot(now=NOW, free={"T4": 0}, running=running, waiting=waiting, usage=usage, tz=SHANGHAI)
    decisions = schedule(snap, Policy("p", FairShare(), Preemption(grace=timedelta(seconds=30))))
    (preempt,) = [d for d in decisions if d.kind == PREEMPT]
    assert preempt.values == {"grace": Grace(timedelta(seconds=30))}
    assert preempt.reason_in("zh-CN") == (
        "此服务器将在 30 秒 后停止，以便把其 GPU 让给一个全价请求；您的训练正在保存检查点"
    )
    assert stop_notice_words(True, preempt.key, preempt.values, preempt.at, "en", SHANGHAI, NOW) == (
        "This server will be stopped at 13:00 to free its GPU for a full-price request; your training is being"
        " checkpointed (CheckpointAndResume saves on the stop)."
    )
    (later,) = [d for d in decisions if d.kind == QUEUE and d.request == "later"]
    entry = Queued(
        "cat/", "cat", "", "t4", "T4", 1, "standard", "B", NOW, later.position, later.length, None, later.key,
        dict(later.values), NOW,
    )  # fmt: skip
    publish_queue(ledger, [entry])
    (stored,) = queue(ledger)
    assert stored.values == later.values
    english = reason_words(stored.reason_key, stored.values, "en", SHANGHAI, NOW)
    assert (
        english
        == later.reason
        == ("your group has used 150% of its share of T4 GPUs this week; your 1 h 5 min of waiting moves you up")
    )
    chinese = reason_words(stored.reason_key, stored.values, "zh-CN", SHANGHAI, NOW)
    assert chinese == "您的组本周已用掉其 T4 GPU 份额的 150%；您已等待 1 小时 5 分钟，排名因此提前"
