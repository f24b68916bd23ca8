"""The service carries out the hub scheduler's stop orders, and puts preempted servers and jobs back in the queue.

The real tick step (:func:`enforce_schedule`, :func:`enforce_jobs`) runs against a real sqlite ledger, the real
gateway (Lab notices in the ledger, the deprecated webhook setting to an HTTP server on 127.0.0.1) and the real
hub client talking to an HTTP server that stands in for the hub's REST API and records what it was asked. The
clock is moved, never waited for.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import event
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job, update_job
from jupyterhub_gpu.ledger.queries.schedule import (
    PREEMPTED,
    RESERVED,
    mark_order,
    order_stop,
    stop_orders,
    withdraw_order,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.scheduler import Gpus, Grace
from jupyterhub_gpu.service.domain.jobs import JobRequest
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.schedule import order_message, withdrawn_message
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import ScheduleFollow, TickContext, enforce_jobs, enforce_schedule
from jupyterhub_gpu.service.web.api import jobs as jobs_api
from jupyterhub_gpu.session import SessionStart
from tests.service.conftest import WebhookServer

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
T0 = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)  # 13:00 in Shanghai
PRICING = [
    {"slug": "t4-pre", "display_name": "T4 (cheap)", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.02"},
    {"slug": "a100", "display_name": "A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
]  # fmt: skip
PREEMPT_VALUES = {"grace": Grace(timedelta(minutes=2))}
END_VALUES = {"until": T0 + timedelta(minutes=55), "count": 4, "gpus": Gpus(4, "T4"), "model": "T4", "label": "CS231N",
              "start": T0 + timedelta(hours=1)}  # fmt: skip


class HubDouble:
    """Stands in for the hub's REST API: records each request; answers stops 204, starts 201 (or ``fail``'s status
    for the next requests of a method), and a user's model with the servers in ``servers``; runs ``on_request``
    before it answers (the hub or a user acting while the service awaits)."""

    def __init__(self):
        self.requests: list[tuple[str, str, object]] = []
        self.fail: dict[str, list[tuple[int, str]]] = {}
        self.servers: dict[str, dict] = {}
        self.on_request = None  # (method, path) -> None: what happens elsewhere while the hub answers
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                owner.requests.append((self.command, self.path, body))
                if owner.on_request is not None:
                    owner.on_request(self.command, self.path)
                failing = owner.fail.get(self.command)
                if failing:
                    status, message = failing.pop(0)
                    return self._json(status, {"status": status, "message": message})
                if self.command == "GET":
                    name = self.path.rsplit("/", 1)[-1]
                    return self._json(200, {"name": name, "groups": [], "servers": owner.servers.get(name, {})})
                if self.command == "POST":
                    return self._json(201, {})
                self.send_response(204)
                self.end_headers()

            def _json(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.client = HubClient(f"http://127.0.0.1:{self.httpd.server_address[1]}/hub/api", "token")

    def of(self, method: str) -> list[tuple[str, object]]:
        return [(path, body) for m, path, body in self.requests if m == method]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hub():
    server = HubDouble()
    yield server
    server.close()


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_pricing(PRICING, "CNY", T0 - timedelta(days=1))
    yield ledger
    ledger.close()


@pytest.fixture
def webhook():
    server = WebhookServer()
    yield server
    server.close()


@pytest.fixture
def notifier(ledger, webhook):
    notifier = Notifier(ledger, AlertSettings(webhook_url=webhook.url), stored=False)
    yield notifier
    notifier.close()


def start(ledger, sid="s1", user="alice", server="", profile="t4-pre", resume=False, tier="preemptible", at=None):
    record = SessionStart(
        sid, user, server, ("cs231n",), profile, ("GPU-t4-0",), 20_000, "CNY", at or T0 - timedelta(hours=1),
        pool="cs231n", language="zh-CN" if user == "li" else "en", tier=tier, resume=resume,
    )  # fmt: skip
    ledger.record_start(record)
    return ledger.get_session(sid)


def tick(ledger, hub, notifier, now, follow=None):
    ctx = TickContext(ledger=ledger, hub=hub.client, notifier=notifier, tz=SHANGHAI)
    return asyncio.run(enforce_schedule(ctx, now, follow))


def order(ledger, session, kind=PREEMPTED, stop_at=T0 + timedelta(minutes=2), key="preempt", values=None, now=T0):
    values = values if values is not None else (PREEMPT_VALUES if kind == PREEMPTED else END_VALUES)
    return order_stop(ledger, session, kind, stop_at, key, values, now, for_user="bob")


def notices(ledger, user="alice"):
    return [n.message for n in ledger.notices(user)]


# -- notices ---------------------------------------------------------------------------------------------------


def test_a_preemption_is_told_at_once_and_only_once(ledger, hub, notifier, webhook):
    session = start(ledger, resume=True)
    order(ledger, session)
    first = tick(ledger, hub, notifier, T0 + timedelta(seconds=20))
    assert first["noticed"] == ["s1"] and first["stopped"] == []
    (text,) = notices(ledger)
    assert text == (
        "This server will be stopped at 13:02 to free its GPU for a full-price request; your training is being"
        " checkpointed (CheckpointAndResume saves on the stop). It will be put back in the queue and start again"
        " when a T4 is free."
    )
    (posted,) = webhook.bodies  # the webhook of the (deprecated) settings: every event but the digest
    assert posted["event"] == "preemption" and posted["session_id"] == "s1" and posted["resume"] is True
    # the whole grace from the notice (2 min from 05:00:20): the stop it names
    assert posted["stop_at"] == "2026-12-01T05:02:20Z" and "for_user" not in posted  # whose request it was: not said
    assert stop_orders(ledger)[0].noticed_at == T0 + timedelta(seconds=20)
    again = tick(ledger, hub, notifier, T0 + timedelta(seconds=50))
    assert again["noticed"] == [] and len(notices(ledger)) == 1 and len(webhook.bodies) == 1
    assert hub.requests == []


def test_an_order_moved_earlier_is_told_again(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session, RESERVED, stop_at=T0 + timedelta(minutes=55), key="end")
    tick(ledger, hub, notifier, T0)
    assert notices(ledger) == [
        "This server may run until 13:55: CS231N has 4 T4s reserved from 14:00. It will be stopped then;"
        " save your work."
    ]
    # a later order changes nothing; an earlier one (a preemption now) is told again
    assert not order(ledger, session, RESERVED, stop_at=T0 + timedelta(hours=2), key="end")
    tick(ledger, hub, notifier, T0 + timedelta(minutes=1))
    assert len(notices(ledger)) == 1
    preempt_at = T0 + timedelta(minutes=1)
    assert order(ledger, session, PREEMPTED, stop_at=T0 + timedelta(minutes=3), key="preempt.save", now=preempt_at)
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=1, seconds=30))
    assert result["noticed"] == ["s1"]
    assert notices(ledger)[-1] == (
        "This server will be stopped at 13:03 to free its GPU for a full-price request; save your work now."
    )
    assert len(notices(ledger)) == 2 and hub.requests == []


def test_a_notice_speaks_its_users_language(ledger, hub, notifier):
    session = start(ledger, sid="s-li", user="li", server="exp", resume=True)
    order(ledger, session, RESERVED, stop_at=T0 + timedelta(minutes=55), key="end")
    tick(ledger, hub, notifier, T0)
    (text,) = notices(ledger, "li")
    assert text == "此服务器最多可运行到 13:55：从 14:00 起 4 块 T4 已为 CS231N 预留。届时它将被停止；请保存您的工作。"


def test_each_notice_exists_in_english_and_chinese():
    now = T0
    session = SimpleNamespace(id="s1", user="alice", server_name="", resume=True)
    cases = [
        (PREEMPTED, "preempt", PREEMPT_VALUES, "T4", None, "saves on the stop", "检查点"),
        (PREEMPTED, "preempt.save", PREEMPT_VALUES, "A100", None, "when an A100 is free", "A100"),
        (PREEMPTED, "preempt", PREEMPT_VALUES, None, "abc123def456", "The job will be put back", "作业"),
        (RESERVED, "end", END_VALUES, "T4", None, "CS231N has 4 T4s reserved", "4 块 T4"),
        (RESERVED, "stop", {}, "T4", None, "reserved for a class from then", "课程预留"),
    ]
    for kind, key, values, model, job_id, english, chinese in cases:
        stop = SimpleNamespace(
            session_id="s1", user="alice", server_name="", kind=kind, stop_at=now + timedelta(days=1, minutes=2),
            reason_key=key, values=values,
        )  # fmt: skip
        en = order_message(stop, session, SHANGHAI, now, AlertSettings(), model, job_id)
        zh = en.worded("zh-CN")
        assert english in en.text and "Wed 2 Dec 13:02" in en.subject + en.text, en.text
        assert chinese in zh.text and "12月2日 13:02" in zh.subject, zh.text
        assert en.event == ("preemption" if kind == PREEMPTED else "cull") and zh.event == en.event
        assert not any("\u4e00" <= c <= "\u9fff" for c in en.text + en.subject)


# -- stops -----------------------------------------------------------------------------------------------------


def test_the_server_is_stopped_at_its_time_with_the_orders_reason(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, T0 + timedelta(seconds=10))  # the notice: its 2 minutes' grace counts from it
    early = tick(ledger, hub, notifier, T0 + timedelta(minutes=2))
    assert early["stopped"] == [] and hub.requests == []
    due = tick(ledger, hub, notifier, T0 + timedelta(minutes=2, seconds=10))
    assert due["stopped"] == [("alice", "")]
    assert hub.of("DELETE") == [("/hub/api/users/alice/server", None)]
    assert ledger.get_session("s1").pending_stop_reason == "preempted"
    done_at = stop_orders(ledger, pending=False)[0].done_at
    assert stop_orders(ledger) == [] and done_at == T0 + timedelta(minutes=2, seconds=10)
    ledger.record_stop("s1", T0 + timedelta(minutes=2, seconds=3), "stopped")  # the spawner's stop
    assert ledger.get_session("s1").stop_reason == "preempted"
    tick(ledger, hub, notifier, T0 + timedelta(minutes=3))
    assert len(hub.of("DELETE")) == 1 and hub.of("POST") == []  # no resume asked for


def test_a_stop_never_comes_in_the_tick_of_its_notice(ledger, hub, notifier):
    """An order seen only after its time (the service was down): told now, stopped a tick later."""
    session = start(ledger, server="dev", tier=None)
    order(ledger, session, RESERVED, stop_at=T0 + timedelta(minutes=5), key="end")
    late = T0 + timedelta(minutes=9)
    assert tick(ledger, hub, notifier, late)["noticed"] == ["s1"] and hub.requests == []
    assert tick(ledger, hub, notifier, late + timedelta(seconds=30))["stopped"] == [("alice", "dev")]
    assert hub.of("DELETE") == [("/hub/api/users/alice/servers/dev", None)]
    assert ledger.get_session("s1").pending_stop_reason == "reserved"


def test_a_hub_that_fails_is_asked_again_next_tick(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, T0)
    hub.fail["DELETE"] = [(500, "the hub broke")]
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=2))["stopped"] == []
    assert stop_orders(ledger)[0].done_at is None
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=2, seconds=30))["stopped"] == [("alice", "")]
    assert len(hub.of("DELETE")) == 2 and stop_orders(ledger) == []


def test_an_order_of_a_closed_session_is_done_and_nothing_else(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session)
    ledger.record_stop("s1", T0 + timedelta(seconds=5), "stopped")  # its user stopped it first
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=5))
    assert result["closed"] == ["s1"] and result["noticed"] == [] and hub.requests == []
    assert notices(ledger) == [] and stop_orders(ledger) == []
    assert stop_orders(ledger, pending=False)[0].done_at == T0 + timedelta(minutes=5)


def test_a_late_preemption_notice_still_gives_the_whole_grace(ledger, hub, notifier, webhook):
    """The service was down past the stop's time: the user still gets the 2 minutes the hub promised."""
    session = start(ledger)
    order(ledger, session)  # decided at 13:00, to stop at 13:02
    late = T0 + timedelta(minutes=9)
    assert tick(ledger, hub, notifier, late)["noticed"] == ["s1"]
    assert notices(ledger)[0].startswith("This server will be stopped at 13:11 to free its GPU")
    assert webhook.bodies[0]["stop_at"] == "2026-12-01T05:11:00Z"
    for seconds in (30, 60, 119):
        assert tick(ledger, hub, notifier, late + timedelta(seconds=seconds))["stopped"] == []
    assert hub.requests == []
    assert tick(ledger, hub, notifier, late + timedelta(minutes=2))["stopped"] == [("alice", "")]


# -- withdrawn orders ------------------------------------------------------------------------------------------


def test_a_withdrawn_preemption_that_was_told_is_called_off_and_never_stops(ledger, hub, notifier, webhook):
    session = start(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, T0)  # told: stopped at 13:02
    assert withdraw_order(ledger, "s1", T0 + timedelta(seconds=40), not_before=T0 + timedelta(seconds=40))
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=3))  # past its time: it is off all the same
    assert result["withdrawn"] == ["s1"] and result["stopped"] == [] and hub.requests == []
    assert notices(ledger)[-1] == "The stop of this server at 13:02 is off: the GPU is no longer needed."
    posted = webhook.bodies[-1]
    assert (posted["event"], posted["session_id"], posted["stop_at"]) == (
        "preemption_withdrawn",
        "s1",
        "2026-12-01T05:02:00Z",
    )
    assert ledger.get_session("s1").pending_stop_reason is None
    assert stop_orders(ledger) == [] and stop_orders(ledger, pending=False)[0].done_at == T0 + timedelta(minutes=3)
    tick(ledger, hub, notifier, T0 + timedelta(minutes=4), ScheduleFollow())
    assert len(notices(ledger)) == 2 and len(webhook.bodies) == 2 and hub.requests == []


def test_a_withdrawn_reservations_end_is_called_off_in_the_users_language(ledger, hub, notifier):
    session = start(ledger, sid="s-li", user="li", server="exp")
    order(ledger, session, RESERVED, stop_at=T0 + timedelta(minutes=55), key="end")
    tick(ledger, hub, notifier, T0)
    assert withdraw_order(ledger, "s-li", T0 + timedelta(minutes=1), not_before=T0 + timedelta(minutes=1))
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=2))["withdrawn"] == ["s-li"]
    assert notices(ledger, "li")[-1] == "此服务器原定于 13:55 的停止已取消：课程预留不再需要其 GPU。"
    assert tick(ledger, hub, notifier, T0 + timedelta(hours=1))["stopped"] == [] and hub.requests == []


def test_a_withdrawn_order_never_told_is_closed_without_a_word(ledger, hub, notifier, webhook):
    session = start(ledger)
    order(ledger, session)
    assert withdraw_order(ledger, "s1", T0 + timedelta(seconds=5), not_before=T0 + timedelta(seconds=5))
    result = tick(ledger, hub, notifier, T0 + timedelta(seconds=20))
    assert result["withdrawn"] == ["s1"] and result["noticed"] == []
    assert notices(ledger) == [] and webhook.bodies == [] and hub.requests == []
    assert stop_orders(ledger) == []
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3))["stopped"] == [] and hub.requests == []


def test_an_order_withdrawn_during_the_tick_that_stops_it_is_not_carried_out(ledger, hub, notifier):
    """Told at 13:00, due at 13:02; the hub withdraws bob's while the service stops alice's server."""
    order(ledger, start(ledger))
    order(ledger, start(ledger, sid="s2", user="bob"))
    tick(ledger, hub, notifier, T0)

    def withdraw_bobs(method, path):
        if method == "DELETE" and "/alice/" in path:
            withdraw_order(ledger, "s2", T0 + timedelta(minutes=2), not_before=T0)

    hub.on_request = withdraw_bobs
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=2))
    assert result["stopped"] == [("alice", "")] and result["withdrawn"] == ["s2"]
    assert [path for path, _ in hub.of("DELETE")] == ["/hub/api/users/alice/server"]
    assert ledger.get_session("s2").pending_stop_reason is None
    assert notices(ledger, "bob")[-1] == "The stop of this server at 13:02 is off: the GPU is no longer needed."


def while_told(notifier, monkeypatch, act):
    """``act()`` runs once, as the hub's scheduler would in its own process, while the service sends a notice."""
    send, acted = notifier.send, []

    async def send_then_act(*args, **kwargs):
        outcome = await send(*args, **kwargs)
        if not acted:
            acted.append(act())
        return outcome

    monkeypatch.setattr(notifier, "send", send_then_act)
    return acted


def test_an_order_moved_earlier_while_its_notice_goes_out_is_told_again_with_the_new_time(
    ledger, hub, notifier, monkeypatch
):
    """Told "13:55" while the hub moves the stop to 13:10: the user must hear of 13:10 before 13:10 comes."""
    session = start(ledger)
    order(ledger, session, RESERVED, stop_at=T0 + timedelta(minutes=55), key="end")
    moved_at = T0 + timedelta(seconds=1)
    acted = while_told(
        notifier,
        monkeypatch,
        lambda: order(ledger, session, PREEMPTED, stop_at=T0 + timedelta(minutes=10), key="preempt", now=moved_at),
    )
    first = tick(ledger, hub, notifier, T0)
    assert acted == [True] and first["noticed"] == []  # the notice named the old time: the order is not told
    assert stop_orders(ledger)[0].noticed_at is None
    second = tick(ledger, hub, notifier, T0 + timedelta(seconds=30))
    assert second["noticed"] == ["s1"]
    assert "13:10" in notices(ledger)[-1] and len(notices(ledger)) == 2
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=11))["stopped"] == [("alice", "")]


def test_an_order_given_again_while_its_withdrawal_is_told_is_still_carried_out(ledger, hub, notifier, monkeypatch):
    """Withdrawn, then ordered again by the hub while the service tells alice the stop is off: the new order must
    not be marked done with the old one (order_stop refuses a done order for good: it would never stop)."""
    session = start(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, T0)  # told: stopped at 13:02
    assert withdraw_order(ledger, "s1", T0 + timedelta(seconds=30), not_before=T0 + timedelta(seconds=30))
    again_at = T0 + timedelta(seconds=41)
    acted = while_told(
        notifier, monkeypatch, lambda: order(ledger, session, stop_at=T0 + timedelta(minutes=4), now=again_at)
    )
    withdrawn = tick(ledger, hub, notifier, T0 + timedelta(seconds=40))
    assert acted == [True] and withdrawn["withdrawn"] == []
    (pending,) = stop_orders(ledger)
    assert (pending.stop_at, pending.done_at, pending.noticed_at) == (T0 + timedelta(minutes=4), None, None)
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=1))["noticed"] == ["s1"]
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=5))["stopped"] == [("alice", "")]
    assert [path for path, _ in hub.of("DELETE")] == ["/hub/api/users/alice/server"]


def test_an_order_withdrawn_while_its_notice_goes_out_is_called_off_in_words(ledger, hub, notifier, monkeypatch):
    """Told "stopped at 13:02" while the hub withdraws the order: the user must then hear that the stop is off."""
    session = start(ledger)
    order(ledger, session)
    acted = while_told(
        notifier, monkeypatch, lambda: withdraw_order(ledger, "s1", T0 + timedelta(seconds=1), not_before=T0)
    )
    assert tick(ledger, hub, notifier, T0)["noticed"] == ["s1"] and acted == [True]
    assert tick(ledger, hub, notifier, T0 + timedelta(seconds=30))["withdrawn"] == ["s1"]
    assert notices(ledger)[-1] == "The stop of this server at 13:02 is off: the GPU is no longer needed."
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3))["stopped"] == [] and hub.requests == []


def test_marking_an_order_compares_and_sets_in_one_statement(ledger):
    """The hub's scheduler writes between the service's read and its mark: the mark must not see an old row."""
    session = start(ledger)
    order(ledger, session)
    (read,) = stop_orders(ledger)
    order(ledger, session, stop_at=T0 + timedelta(minutes=1), now=T0 + timedelta(seconds=5))  # moved earlier
    assert not mark_order(ledger, "s1", noticed=T0 + timedelta(seconds=6), as_read=read)
    assert stop_orders(ledger)[0].noticed_at is None
    (moved,) = stop_orders(ledger)
    assert mark_order(ledger, "s1", noticed=T0 + timedelta(seconds=7), as_read=moved)
    assert not mark_order(ledger, "s1", done=T0 + timedelta(seconds=8), as_read=read)
    assert mark_order(ledger, "s1", done=T0 + timedelta(seconds=9), as_read=moved)
    assert stop_orders(ledger) == [] and not mark_order(ledger, "s1", done=T0 + timedelta(seconds=10))


def test_each_withdrawal_exists_in_english_and_chinese():
    for kind, english, chinese in (
        (PREEMPTED, "is off: the GPU is no longer needed.", "不再需要其 GPU"),
        (RESERVED, "is off: the class reservation no longer needs its GPU.", "课程预留不再需要其 GPU"),
    ):
        stop = SimpleNamespace(session_id="s1", user="alice", server_name="", kind=kind, stop_at=T0 + timedelta(days=1))
        en = withdrawn_message(stop, SHANGHAI, T0, AlertSettings())
        zh = en.worded("zh-CN")
        assert en.text == f"The stop of this server at Wed 2 Dec 13:00 {english}" and chinese in zh.text
        assert "12月2日 13:00" in zh.subject and en.event == zh.event == ("preemption" if kind == PREEMPTED else "cull")
        assert not any("\u4e00" <= c <= "\u9fff" for c in en.text + en.subject)


def test_without_orders_a_tick_reads_one_query(ledger, hub, notifier):
    follow = ScheduleFollow()
    tick(ledger, hub, notifier, T0, follow)  # the first tick reads the preemption records too
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(ledger.engine, "before_cursor_execute", listener)
    try:
        tick(ledger, hub, notifier, T0 + timedelta(seconds=30), follow)
    finally:
        event.remove(ledger.engine, "before_cursor_execute", listener)
    assert len(statements) == 1 and "gpu_schedule_orders" in statements[0]


# -- resume ----------------------------------------------------------------------------------------------------


def preempt_and_close(ledger, hub, notifier, follow, session, closed_at=T0 + timedelta(minutes=2, seconds=5)):
    order(ledger, session)
    tick(ledger, hub, notifier, T0, follow)
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=2), follow)["stopped"]
    ledger.record_stop(session.id, closed_at, "stopped")  # the spawner records the stop: its reason is the order's


def test_a_preempted_server_that_asked_for_it_is_put_back_in_the_queue_once(ledger, hub, notifier):
    follow = ScheduleFollow()
    preempt_and_close(ledger, hub, notifier, follow, start(ledger, server="train", resume=True))
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=2, seconds=30), follow)
    assert result["resumed"] == ["s1"]
    options = {"profile": "t4-pre", "pool": "cs231n", "resume": True}
    assert hub.of("POST") == [("/hub/api/users/alice/servers/train", {"user_options": options})]
    assert hub.of("GET") == [("/hub/api/users/alice", None)]  # is it back already (the user started it)?
    tick(ledger, hub, notifier, T0 + timedelta(minutes=3), follow)
    # a restarted service reads the preemption records again, and resumes nothing twice
    tick(ledger, hub, notifier, T0 + timedelta(minutes=4), ScheduleFollow())
    assert len(hub.of("POST")) == 1


def test_a_server_its_user_started_again_is_not_started_twice(ledger, hub, notifier):
    follow = ScheduleFollow()
    preempt_and_close(ledger, hub, notifier, follow, start(ledger, server="train", resume=True))
    hub.servers["alice"] = {"train": {"pending": "spawn", "ready": False}}  # waiting in the hub's queue already
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3), follow)["resumed"] == []
    assert hub.of("POST") == []


def test_a_resume_the_hub_cannot_take_now_is_tried_again(ledger, hub, notifier):
    follow = ScheduleFollow()
    preempt_and_close(ledger, hub, notifier, follow, start(ledger, resume=True))
    hub.fail["POST"] = [(503, "the hub is busy")]
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3), follow)["resumed"] == []
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3, seconds=30), follow)["resumed"] == ["s1"]
    assert [path for path, _ in hub.of("POST")] == ["/hub/api/users/alice/server"] * 2


def test_a_resume_the_hub_refuses_is_told_and_not_tried_again(ledger, hub, notifier):
    follow = ScheduleFollow()
    preempt_and_close(ledger, hub, notifier, follow, start(ledger, resume=True))
    hub.fail["POST"] = [(403, "Budget used up: 50 of 50 (your budget) spent in December; resets on 2027-01-01.")]
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=3), follow)["refused"] == ["s1"]
    assert notices(ledger)[-1] == (
        "Your server (default) was stopped to free its GPU and could not be put back in the queue: Budget used up:"
        " 50 of 50 (your budget) spent in December; resets on 2027-01-01."
    )
    tick(ledger, hub, notifier, T0 + timedelta(minutes=4), ScheduleFollow())
    assert len(hub.of("POST")) == 1


def test_a_resume_survives_a_service_killed_between_the_stop_and_its_record(ledger, hub, notifier):
    """The hub stopped the server for the order, and the service died before it marked the order done."""
    session = start(ledger, server="train", resume=True)
    order(ledger, session)
    tick(ledger, hub, notifier, T0)
    ledger.claim_stop_reason("s1", PREEMPTED)  # what the killed tick had done, and the hub's stop
    ledger.record_stop("s1", T0 + timedelta(minutes=2, seconds=5), "stopped")
    result = tick(ledger, hub, notifier, T0 + timedelta(minutes=3), ScheduleFollow())  # the restarted service
    assert result["closed"] == ["s1"] and result["resumed"] == ["s1"]
    options = {"profile": "t4-pre", "pool": "cs231n", "resume": True}
    assert hub.of("POST") == [("/hub/api/users/alice/servers/train", {"user_options": options})]
    tick(ledger, hub, notifier, T0 + timedelta(minutes=4), ScheduleFollow())
    assert len(hub.of("POST")) == 1  # once, whatever the restarts


def test_a_session_its_user_stopped_before_the_preemption_is_not_resumed(ledger, hub, notifier):
    order(ledger, start(ledger, resume=True))
    tick(ledger, hub, notifier, T0)
    ledger.record_stop("s1", T0 + timedelta(seconds=50), "stopped")  # its user stopped it first
    assert tick(ledger, hub, notifier, T0 + timedelta(minutes=1), ScheduleFollow())["closed"] == ["s1"]
    assert hub.requests == []


def test_a_preempted_server_that_did_not_ask_stays_stopped(ledger, hub, notifier):
    follow = ScheduleFollow()
    preempt_and_close(ledger, hub, notifier, follow, start(ledger, resume=False))
    tick(ledger, hub, notifier, T0 + timedelta(minutes=3), follow)
    assert hub.of("POST") == [] and hub.of("GET") == []


# -- notebook jobs ---------------------------------------------------------------------------------------------


def running_job(ledger, now=T0 - timedelta(hours=1)):
    job = create_job(ledger, "alice", JobRequest("work/train.ipynb", "t4-pre", {}, 3600), "t4-pre", now)
    session = start(ledger, sid="s-job", server=job.server_name, at=now)
    update_job(ledger, job.id, state="running", started=now, session_id=session.id)
    return get_job(ledger, job.id), session


def test_a_preempted_job_is_requeued_not_failed(ledger, hub, notifier):
    job, session = running_job(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, T0)
    assert "The job will be put back in the queue and run again when a T4 is free" in notices(ledger)[0]
    tick(ledger, hub, notifier, T0 + timedelta(minutes=2))
    assert hub.of("DELETE") == [(f"/hub/api/users/alice/servers/{job.server_name}", None)]
    ledger.record_stop(session.id, T0 + timedelta(minutes=2, seconds=4), "stopped")
    summary = asyncio.run(
        enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(minutes=2, seconds=30))
    )
    assert summary["requeued"] == [job.id] and summary["lost"] == []
    requeued = get_job(ledger, job.id)
    assert (requeued.state, requeued.started, requeued.error) == ("starting", None, None)
    assert hub.of("POST") == [
        (
            f"/hub/api/users/alice/servers/{job.server_name}",
            # the group that paid for the preempted run pays again
            {"user_options": {"profile": "t4-pre", "pool": "cs231n", "job_id": job.id}, "display_name": job.id},
        )
    ]
    # later ticks: it waits in the hub's queue (not over its time limit, not lost), and is started once
    hub.servers["alice"] = {job.server_name: {"pending": "spawn", "ready": False}}
    for minutes in (3, 10, 70):
        summary = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(minutes=minutes)))
        assert summary == {"time_limit": [], "lost": [], "ended_still_running": [], "requeued": []}
    assert len(hub.of("POST")) == 1 and get_job(ledger, job.id).state == "starting"
    # the schedule's follow-up leaves a job's server to enforce_jobs
    tick(ledger, hub, notifier, T0 + timedelta(minutes=3), ScheduleFollow())
    assert len(hub.of("POST")) == 1


def test_a_job_cancelled_during_the_tick_is_not_started_again(ledger, hub):
    """Two preempted jobs; while the hub starts the first one's server again, the other is cancelled by its owner."""
    first, _ = running_job(ledger)
    second = create_job(
        ledger, "alice", JobRequest("work/b.ipynb", "t4-pre", {}, 3600), "t4-pre", T0 - timedelta(hours=1)
    )
    start(ledger, sid="s-job2", server=second.server_name)
    update_job(ledger, second.id, state="running", started=T0 - timedelta(hours=1), session_id="s-job2")
    for sid in ("s-job", "s-job2"):
        ledger.claim_stop_reason(sid, PREEMPTED)
        ledger.record_stop(sid, T0, "stopped")
    cancelled = []

    def cancel_the_other(method, path):
        if method == "POST" and not cancelled:
            other = second if path.endswith(first.server_name) else first
            assert update_job(ledger, other.id, state="cancelled", finished=T0, error="Cancelled by its owner.")
            cancelled.append(other.id)

    hub.on_request = cancel_the_other
    summary = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(seconds=30)))
    (other,) = cancelled
    assert len(hub.of("POST")) == 1 and other not in summary["requeued"] and len(summary["requeued"]) == 1
    assert get_job(ledger, other).state == "cancelled"
    summary = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(minutes=1)))
    assert len(hub.of("POST")) == 1 and get_job(ledger, other).state == "cancelled"


def test_a_requeued_job_whose_server_never_comes_back_fails(ledger, hub, notifier):
    job, session = running_job(ledger)
    order(ledger, session)
    ledger.claim_stop_reason(session.id, "preempted")
    ledger.record_stop(session.id, T0, "stopped")
    asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(seconds=30)))
    hub.servers["alice"] = {}  # the hub lost it
    summary = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(minutes=16)))
    assert summary["lost"] == [job.id]
    assert get_job(ledger, job.id).error == "The job's server did not start again after it was preempted."


def test_a_job_the_hub_will_not_start_again_fails_with_the_hubs_words(ledger, hub):
    job, session = running_job(ledger)
    ledger.claim_stop_reason(session.id, "preempted")
    ledger.record_stop(session.id, T0, "stopped")
    hub.fail["POST"] = [(400, "Unknown profile t4-pre.")]
    summary = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=hub.client), T0 + timedelta(seconds=30)))
    assert summary["lost"] == [job.id]
    failed = get_job(ledger, job.id)
    assert failed.state == "failed" and failed.error.endswith("could not be started again: Unknown profile t4-pre.")


def test_the_runners_failure_report_of_a_preempted_server_is_not_the_jobs_end(ledger):
    """The kernel dies when the server is stopped for a preemption: the runner's "failed" does not end the job."""
    job, session = running_job(ledger)
    ledger.claim_stop_reason(session.id, "preempted")
    caller = {"kind": "user", "name": "alice", "scopes": [f"servers!server=alice/{job.server_name}"]}
    body = {"session_id": session.id, "state": "failed", "error": "DeadKernelError: Kernel died"}
    code, answer = post(ledger, caller, f"/jobs/{job.id}/finished", body)
    assert code == 409 and "being preempted" in answer["message"]
    assert get_job(ledger, job.id).state == "running"
    code, answer = post(ledger, caller, f"/jobs/{job.id}/finished", {**body, "state": "succeeded", "error": None})
    assert code == 200 and get_job(ledger, job.id).state == "succeeded"  # it did finish in time


def post(ledger, caller, path, body):
    class Handler(jobs_api.JobFinishedHandler):
        async def prepare(self):
            pass

        def get_current_user(self):
            return caller

    async def go():
        ctx = SimpleNamespace(ledger=ledger, tz=SHANGHAI, base_url="/", currency=Currency.from_config("CNY"))
        app = Application([(r"/jobs/([^/]+)/finished", Handler, {"ctx": ctx})])
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{path}", method="POST", body=json.dumps(body), raise_error=False
            )
        finally:
            server.stop()
        return response.code, json.loads(response.body)

    return asyncio.run(go())
