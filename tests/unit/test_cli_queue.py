"""``jupyterhub-gpu queue``: what it asks the service and how it shows the answer (a recording HTTP server)."""

from __future__ import annotations

import pytest

from tests.unit.test_cli import FakeService, run

QUEUED = {
    "user": "alice",
    "server_name": "",
    "profile": "a100",
    "gpu_model": "A100",
    "count": 1,
    "tier": "standard",
    "group": "cs231n",
    "position": 2,
    "length": 5,
    "wait_seconds": 720,
    "status": "Waiting for a free A100 — position 2 of 5 — about 12 min",
    "reason_key": "share",
    "reason": "your group has used 140% of its share of A100 GPUs this week",
    "arrived": "2026-12-01T05:40:00Z",
    "updated": "2026-12-01T06:00:00Z",
}


@pytest.fixture
def service(monkeypatch):
    server = FakeService()
    monkeypatch.setenv("JUPYTERHUB_GPU_URL", server.url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-token")
    yield server
    server.close()


def test_queue_lists_the_waiting_requests_in_the_labs_zone(service):
    service.answers.append((200, {"timezone": "Asia/Shanghai", "queue": [QUEUED, {**QUEUED, "wait_seconds": None}]}))
    code, out = run("queue")
    assert code == 0
    assert service.requests[-1]["path"] == "/services/gpu/api/v1/queue"
    header, first, second = out.splitlines()
    assert header.split() == [
        "POSITION", "GPUS", "USER", "SERVER", "PROFILE", "TIER", "GROUP", "WAIT", "SINCE", "(Asia/Shanghai)", "WHY",
    ]  # fmt: skip
    assert "2 of 5" in first and "1x A100" in first and "~12 min" in first and "2026-12-01 13:40" in first
    assert first.endswith("your group has used 140% of its share of A100 GPUs this week")
    assert "unknown" in second


def test_queue_list_passes_its_filters_and_language(service):
    service.answers.append((200, {"timezone": "UTC", "queue": []}))
    assert run("queue", "list", "--group", "cs231n", "--lang", "zh-CN") == (0, "No requests waiting for a GPU.\n")
    assert service.requests[-1]["path"] == "/services/gpu/api/v1/queue?lang=zh-CN&group=cs231n"
    service.answers.append((200, {"timezone": "UTC", "queue": [QUEUED]}))
    code, out = run("queue", "--user", "alice", "--json")
    assert code == 0 and '"position": 2' in out
    assert service.requests[-1]["path"] == "/services/gpu/api/v1/queue?user=alice"


def test_queue_preemptions(service):
    record = {
        "session_id": "s1",
        "user": "alice",
        "server_name": "train",
        "stop_at": "2026-12-01T06:02:00Z",
        "decided_at": "2026-12-01T06:00:00Z",
        "noticed_at": "2026-12-01T06:00:10Z",
        "done_at": None,
        "reason_key": "preempt",
        "reason": "this server will be stopped in 2 min to free its GPU for a full-price request; save your work now",
    }
    service.answers.append((200, {"preemptions": [record]}))
    code, out = run("queue", "preemptions", "--tz", "Asia/Shanghai")
    assert code == 0 and "2026-12-01 14:02" in out and "not yet" in out and "train" in out
    assert service.requests[-1]["path"] == "/services/gpu/api/v1/preemptions"


def test_a_refusal_prints_the_services_message(service, capsys):
    service.answers.append((403, {"status": 403, "message": "This needs the custom:gpu-usage:read scope"}))
    assert run("queue", "--user", "bob")[0] == 1
    assert "custom:gpu-usage:read" in capsys.readouterr().err


def test_bad_queue_arguments_are_refused_before_sending(service, capsys):
    for argv in (("queue", "--lang", "fr"), ("queue", "--user", "a/b"), ("queue", "purge")):
        with pytest.raises(SystemExit) as e:
            run(*argv)
        assert e.value.code == 2
    assert service.requests == []
