"""``queue`` and ``preemptions`` through the real handlers, without a hub: who sees which waiting request, in
which language, and every refusal.

The handlers run in a tornado application of their own with a stand-in caller (the model the hub would return
for a token); the ledger is a real sqlite file holding a queue as the hub's scheduler publishes it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.queries.schedule import PREEMPTED, Queued, mark_order, order_stop, publish_queue
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler import WEEK, Grace, Period
from jupyterhub_gpu.service.web.api import queue as queue_api
from jupyterhub_gpu.session import SessionStart

SHANGHAI = ZoneInfo("Asia/Shanghai")
WAITED = timedelta(hours=1, minutes=5)
TWO_MIN = Grace(timedelta(minutes=2))
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)

ADMIN = {"kind": "user", "name": "admin", "groups": [], "scopes": ["custom:gpu-budgets:write"]}
READER = {"kind": "user", "name": "auditor", "groups": [], "scopes": ["custom:gpu-usage:read"]}
PROF = {"kind": "user", "name": "prof", "groups": [], "scopes": ["custom:gpu-usage:read!group=cs231n"]}
TUTOR = {"kind": "user", "name": "tutor", "groups": [], "scopes": ["custom:gpu-usage:read!group=thesis"]}
ALICE = {"kind": "user", "name": "alice", "groups": ["cs231n"], "scopes": []}
BOB = {"kind": "user", "name": "bob", "groups": ["cs231n"], "scopes": []}
CAROL = {"kind": "user", "name": "carol", "groups": ["thesis"], "scopes": []}
NOBODY = {"kind": "user", "name": "dave", "groups": ["cs231n"], "scopes": []}
SERVICE = {"kind": "service", "name": "grafana", "scopes": []}


def entry(user, server, group, model, position, length, key="share", values=None, wait=720, tier="standard"):
    return Queued(
        key=f"{user}/{server}", user=user, server_name=server, profile=model.lower(), gpu_model=model, count=1,
        tier=tier, group=group, arrived=NOW - timedelta(minutes=10 * position), position=position, length=length,
        wait_seconds=wait, reason_key=key,
        values=values if values is not None else {"percent": 140, "model": model, "period": Period(WEEK)},
        updated=NOW,
    )  # fmt: skip


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    publish_queue(
        ledger,
        [
            entry("alice", "", "cs231n", "A100", 2, 3),
            entry("bob", "train", "cs231n", "A100", 1, 3, key="fifo", values={}, wait=None),
            entry("carol", "", "thesis", "A100", 3, 3, key="share.aged",
                  values={"percent": 300, "model": "A100", "period": Period(WEEK), "waited": WAITED}, wait=4000),
            entry("alice", "cheap", "cs231n", "T4", 1, 1, key="tier", values={"model": "T4"}, wait=30,
                  tier="preemptible"),
        ],
    )  # fmt: skip
    yield ledger
    ledger.close()


def call(ledger, caller, path, headers=None):
    """``(status, JSON)`` of one GET to the queue's handlers, as ``caller``."""

    def as_caller(cls):
        class Handler(cls):
            async def prepare(self):
                pass

            def get_current_user(self):
                return caller

            def now(self):
                return NOW

        return Handler

    async def go():
        ctx = SimpleNamespace(ledger=ledger, tz=SHANGHAI, hub_auth=SimpleNamespace(get_token=lambda *a, **k: "t"))
        app = Application(
            [
                (r"/queue", as_caller(queue_api.QueueHandler), {"ctx": ctx}),
                (r"/preemptions", as_caller(queue_api.PreemptionsHandler), {"ctx": ctx}),
            ]
        )
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{path}", headers=headers or {}, raise_error=False
            )
        finally:
            server.stop()
        return response.code, json.loads(response.body)

    return asyncio.run(go())


def seen(answer) -> list[str]:
    return [f"{e['user']}/{e['server_name']}" for e in answer["queue"]]


def test_a_user_sees_their_own_waiting_requests_only(ledger):
    code, answer = call(ledger, ALICE, "/queue")
    assert code == 200 and seen(answer) == ["alice/", "alice/cheap"]
    first = answer["queue"][0]
    assert first == {
        "user": "alice",
        "server_name": "",
        "profile": "a100",
        "gpu_model": "A100",
        "count": 1,
        "tier": "standard",
        "group": "cs231n",
        "position": 2,
        "length": 3,
        "wait_seconds": 720,
        "status": "Waiting for a free A100 — position 2 of 3 — about 12 min",
        "reason_key": "share",
        "reason": "your group has used 140% of its share of A100 GPUs this week",
        "arrived": "2026-12-01T07:40:00Z",
        "updated": "2026-12-01T08:00:00Z",
    }
    assert answer["queue"][1]["status"] == "Waiting for a free T4 — position 1 of 1 — any moment now"
    assert answer["queue"][1]["reason"] == "preemptible requests wait until no full-price request needs a T4"
    assert (answer["language"], answer["timezone"]) == ("en", "Asia/Shanghai")
    assert answer["updated"] == "2026-12-01T08:00:00Z"
    code, answer = call(ledger, ALICE, "/queue?user=alice")
    assert code == 200 and seen(answer) == ["alice/", "alice/cheap"]
    code, answer = call(ledger, NOBODY, "/queue")  # in the group, nothing waiting: nothing, not the group's
    assert code == 200 and answer["queue"] == [] and answer["updated"] is None


def test_another_users_requests_are_never_shown_to_a_student(ledger):
    for path in ("/queue?user=bob", "/queue?group=cs231n", "/queue?user=carol"):
        code, answer = call(ledger, ALICE, path)
        assert code == 403 and "custom:gpu-usage:read" in answer["message"], (path, answer)
    code, answer = call(ledger, BOB, "/queue")
    assert seen(answer) == ["bob/train"] and answer["queue"][0]["status"].endswith("no estimate yet")


def test_admins_see_every_request(ledger):
    for caller in (ADMIN, READER):
        code, answer = call(ledger, caller, "/queue")
        assert code == 200 and seen(answer) == ["bob/train", "alice/", "carol/", "alice/cheap"]
        assert seen(call(ledger, caller, "/queue?user=carol")[1]) == ["carol/"]
        assert seen(call(ledger, caller, "/queue?group=thesis")[1]) == ["carol/"]


def test_an_instructor_sees_the_requests_of_their_groups_only(ledger):
    code, answer = call(ledger, PROF, "/queue")
    assert code == 200 and seen(answer) == ["bob/train", "alice/", "alice/cheap"]
    assert seen(call(ledger, PROF, "/queue?group=cs231n")[1]) == ["bob/train", "alice/", "alice/cheap"]
    assert seen(call(ledger, PROF, "/queue?user=alice")[1]) == ["alice/", "alice/cheap"]
    assert call(ledger, PROF, "/queue?user=carol")[1]["queue"] == []  # another group's student: nothing
    code, answer = call(ledger, PROF, "/queue?group=thesis")
    assert code == 403 and "custom:gpu-usage:read!group=thesis" in answer["message"]
    assert seen(call(ledger, TUTOR, "/queue")[1]) == ["carol/"]


def test_the_queue_speaks_the_readers_language(ledger):
    for how in ({"path": "/queue?lang=zh-CN"}, {"path": "/queue", "headers": {"Accept-Language": "zh-CN,zh;q=0.9"}}):
        code, answer = call(ledger, TUTOR, how["path"], how.get("headers"))
        assert code == 200 and answer["language"] == "zh-CN"
        (carol,) = answer["queue"]
        assert carol["status"] == "正在等待空闲的 A100 — 排队中：第 3 位，共 3 位 — 约 1 小时 5 分钟"
        assert carol["reason"] == "您的组本周已用掉其 A100 GPU 份额的 300%；您已等待 1 小时 5 分钟，排名因此提前"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/queue?lang=fr", "lang must be one of en, zh-CN"),
        ("/queue?model=T4", "Unknown parameter(s) 'model'"),
        ("/queue?user=a&user=b", "Give user at most once"),
        ("/queue?user=" + quote("a/b"), "contains '/'"),
        ("/queue?group=%20x", "white space"),
        ("/preemptions?since=2026-01-01", "Unknown parameter(s) 'since'"),
    ],
)
def test_bad_input_is_a_400_naming_it(ledger, path, words):
    code, answer = call(ledger, ADMIN, path)
    assert code == 400 and words in answer["message"], answer


def test_a_service_without_a_reading_scope_sees_nothing(ledger):
    code, answer = call(ledger, SERVICE, "/queue")
    assert code == 403 and "not a user" in answer["message"]
    assert call(ledger, SERVICE, "/preemptions")[0] == 403
    code, answer = call(ledger, {**SERVICE, "scopes": ["custom:gpu-usage:read"]}, "/queue")
    assert code == 200 and len(answer["queue"]) == 4


def test_preemption_records_own_and_admins(ledger):
    for sid, user in (("s-a", "alice"), ("s-b", "bob")):
        ledger.record_start(SessionStart(sid, user, "", ("cs231n",), "t4", ("G",), 1, "CNY", NOW - timedelta(hours=2)))
        order_stop(
            ledger, ledger.get_session(sid), PREEMPTED, NOW - timedelta(hours=1), "preempt", {"grace": TWO_MIN},
            NOW - timedelta(hours=1, minutes=2), for_user="carol",
        )  # fmt: skip
    mark_order(ledger, "s-a", noticed=NOW - timedelta(hours=1, minutes=1), done=NOW - timedelta(hours=1))
    code, answer = call(ledger, ALICE, "/preemptions")
    assert code == 200 and [p["session_id"] for p in answer["preemptions"]] == ["s-a"]
    (mine,) = answer["preemptions"]
    assert "for_user" not in mine  # whose request took the GPU is not the user's business
    assert mine["reason"].startswith("this server will be stopped in 2 min to free its GPU")
    assert mine["done_at"] == "2026-12-01T07:00:00Z"
    assert call(ledger, ALICE, "/preemptions?user=bob")[0] == 403
    assert call(ledger, PROF, "/preemptions?user=bob")[0] == 403
    code, answer = call(ledger, ADMIN, "/preemptions")
    assert sorted(p["session_id"] for p in answer["preemptions"]) == ["s-a", "s-b"]
    assert {p["for_user"] for p in answer["preemptions"]} == {"carol"}
    code, answer = call(ledger, READER, "/preemptions?user=bob&lang=zh-CN")
    assert [p["session_id"] for p in answer["preemptions"]] == ["s-b"]
    assert answer["preemptions"][0]["reason"].startswith("此服务器将在 2 分钟 后停止")
