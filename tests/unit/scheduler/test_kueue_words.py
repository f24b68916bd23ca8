"""Kueue's stop of a session in words, English and Chinese: after the fact ("was stopped at 14:02"), with Kueue's
reason, checkpointed or "work not saved may be lost" by the session's tier; the reason the preemption records
show, the student's notice and the subject of its mail and webhook; stored and read back from the ledger's JSON."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.scheduler.texts import KueueWhy, values_from_json, values_json
from jupyterhub_gpu.scheduler.words import reason_words, stop_notice_words, stop_subject_words
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.schedule import order_message

UTC = timezone.utc
AT = datetime(2026, 12, 1, 14, 2, tzinfo=UTC)
NOW = AT + timedelta(seconds=20)
PRIORITY = KueueWhy("priority", "Preempted")


@pytest.mark.parametrize(
    ("why", "en", "zh"),
    [
        (PRIORITY, "a workload of a higher priority needed its GPU", "一个优先级更高的工作负载需要它的 GPU"),
        (
            KueueWhy("reclaim", "Preempted"),
            "the GPU quota its group had borrowed was taken back by the group that lent it",
            "其小组借用的 GPU 配额被出借的小组收回",
        ),
        (
            KueueWhy("fair_sharing", "Preempted"),
            "its group was using more than its fair share of the GPUs it shares with other groups",
            "其小组使用的 GPU 超过了它与其他小组共享时应得的公平份额",
        ),
        (
            KueueWhy("stopped", "ClusterQueueStopped"),
            "its queue was stopped by an administrator",
            "其队列已被管理员停止",
        ),
        (
            KueueWhy("ready", "PodsReadyTimeout"),
            "its server was not ready within Kueue's time limit for a start (pods-ready timeout)",
            "其服务器未在 Kueue 的启动时限内就绪（pods-ready 超时）",
        ),
        (KueueWhy("other", "NodeFailures"), "Kueue's reason is NodeFailures", "Kueue 给出的原因是 NodeFailures"),
        # a kind a newer hub wrote: Kueue's own reason
        (KueueWhy("newer", "SomethingElse"), "Kueue's reason is SomethingElse", "Kueue 给出的原因是 SomethingElse"),
    ],
)
def test_the_preemption_records_say_what_kueue_did_and_why(why, en, zh):
    values = {"at": AT, "why": why}
    assert reason_words("stop.kueue.save", values, "en", UTC, NOW) == (
        f"this server was stopped at 14:02 by the cluster's queue (Kueue): {en}; work not saved by then may be lost"
    )
    assert reason_words("stop.kueue.save", values, "zh-CN", UTC, NOW) == (
        f"此服务器已于 14:02 被集群的队列（Kueue）停止：{zh}；此前未保存的工作可能已丢失"
    )


def test_a_session_that_checkpoints_is_told_its_training_was_checkpointed():
    values = {"at": AT, "why": PRIORITY}
    assert reason_words("stop.kueue", values, "en", UTC, NOW) == (
        "this server was stopped at 14:02 by the cluster's queue (Kueue): a workload of a higher priority needed its"
        " GPU; your training was checkpointed as it stopped (CheckpointAndResume saves on the stop)"
    )
    assert reason_words("stop.kueue", values, "zh-CN", UTC, NOW) == (
        "此服务器已于 14:02 被集群的队列（Kueue）停止：一个优先级更高的工作负载需要它的 GPU；"
        "您的训练在停止时已保存检查点（CheckpointAndResume 会在停止时保存）"
    )


def test_the_notice_names_the_evictions_time_not_the_tick_that_tells_it():
    values = {"at": AT, "why": KueueWhy("reclaim", "Preempted")}
    later = NOW + timedelta(minutes=3)  # the service's tick tells it later, and would stop it "now"
    assert stop_notice_words(True, "stop.kueue.save", values, later, "en", UTC, later) == (
        "This server was stopped at 14:02 by the cluster's queue (Kueue): the GPU quota its group had borrowed was"
        " taken back by the group that lent it. Work not saved by then may be lost."
    )
    assert stop_notice_words(True, "stop.kueue", values, later, "zh-CN", UTC, later) == (
        "此服务器已于 14:02 被集群的队列（Kueue）停止：其小组借用的 GPU 配额被出借的小组收回。"
        "您的训练在停止时已保存检查点（CheckpointAndResume 会在停止时保存）。"
    )
    assert stop_subject_words(True, "gpu1", later, "en", UTC, later, "stop.kueue", values) == (
        "[GPU] Your server gpu1 was stopped at 14:02 by the cluster's queue (Kueue)"
    )
    assert stop_subject_words(True, "gpu1", later, "zh-CN", UTC, later, "stop.kueue.save", values) == (
        "[GPU] 您的服务器 gpu1 已于 14:02 被集群的队列（Kueue）停止"
    )
    # the hub's own preemption keeps its words (the future: it is told before the stop)
    assert stop_subject_words(True, "gpu1", later, "en", UTC, later, "preempt", {}) == (
        "[GPU] Your server gpu1 will be stopped at 14:05 to free its GPU"
    )


def test_kueues_reason_is_stored_and_read_back():
    values = {"at": AT, "why": KueueWhy("other", "NodeFailures")}
    assert values_from_json(values_json(values)) == values


def test_the_students_notice_mail_and_webhook_of_kueues_stop():
    order = SimpleNamespace(
        session_id="s1",
        user="alice",
        server_name="gpu1",
        kind="preempted",
        stop_at=AT,
        decided_at=AT,
        reason_key="stop.kueue.save",
        values={"at": AT, "why": PRIORITY},
        cause="kueue:WorkloadEvictedDueToPreempted",
    )
    session = SimpleNamespace(resume=True)
    message = order_message(order, session, UTC, NOW, AlertSettings(), model="T4", lang="en")
    assert message.text == (
        "This server was stopped at 14:02 by the cluster's queue (Kueue): a workload of a higher priority needed its"
        " GPU. Work not saved by then may be lost. It will be put back in the queue and start again when a T4 is free."
    )
    assert message.subject == "[GPU] Your server gpu1 was stopped at 14:02 by the cluster's queue (Kueue)"
    assert message.payload["reason"] == (
        "this server was stopped at 14:02 by the cluster's queue (Kueue): a workload of a higher priority needed its"
        " GPU; work not saved by then may be lost"
    )
    assert "full-price" not in message.text and "will be stopped" not in message.subject
    chinese = message.words("zh-CN")
    assert chinese.subject == "[GPU] 您的服务器 gpu1 已于 14:02 被集群的队列（Kueue）停止"
    assert chinese.text.startswith(
        "此服务器已于 14:02 被集群的队列（Kueue）停止：一个优先级更高的工作负载需要它的 GPU。"
    )
