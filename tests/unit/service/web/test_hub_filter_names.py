"""A ``hub=`` the ledger has not: the hubs' names are told only to a caller who may read every user's usage
(``custom:gpu-usage:read``); a student reading their own usage, or an instructor their group's, gets a clear 400
without them, on the REST API (``GET usage``, ``GET culling``) and on the pages, in the reader's language.

The handlers run in a tornado application of their own with a stand-in caller, as in test_schedule_pages.py; the
ledger is a real sqlite file holding a session of each of two hubs, ``lab-docker`` and ``dept-k8s``.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
from datetime import timedelta

import pytest
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.web import pages
from jupyterhub_gpu.service.web.api import culling as culling_api
from jupyterhub_gpu.service.web.api import usage as usage_api
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.session import SessionStart
from tests.unit.service.web.test_schedule_pages import ADMIN, ALICE, NOW, PREFIX, PROF, SHANGHAI, FakeAuth, FakeHub

HIDDEN = ("physics-k8s", "pia", "phys101")
READER = {"kind": "user", "name": "auditor", "groups": [], "scopes": ["custom:gpu-usage:read"]}
ROUTES = [
    (r"/services/gpu/api/v1/usage", usage_api.UsageHandler),
    (r"/services/gpu/api/v1/culling", culling_api.CullingHandler),
    (r"/services/gpu/?", pages.UserPage),
    (r"/services/gpu/groups/([^/]+)", pages.GroupPage),
    (r"/services/gpu/admin", pages.AdminPage),
]


@pytest.fixture
def ctx(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    # alice on two hubs; a third hub of the ledger, where only another department's student ran
    for hub, user, group in (("lab-docker", "alice", "cs231n"), ("dept-k8s", "alice", "cs231n"), HIDDEN):
        ledger = Ledger(url, hub=hub)
        start = NOW - timedelta(hours=2)
        ledger.record_start(SessionStart(f"on-{hub}", user, "", (group,), "t4", ("GPU-0",), 50_000, "CNY", start))
        ledger.record_stop(f"on-{hub}", start + timedelta(minutes=30), "stopped")
        ledger.close()
    ledger = Ledger(url, hub="lab-docker")
    yield WebContext(
        ledger=ledger,
        hub=FakeHub(),
        hub_auth=FakeAuth(),
        tz=SHANGHAI,
        currency=Currency("CNY"),
        prefix=PREFIX,
        advice_settings=AdviceSettings(),
        max_concurrent_jobs=2,
        job_time_limit_minutes=60,
        job_time_limit_max_minutes=600,
    )
    ledger.close()


def call(ctx, caller, path) -> tuple[int, str]:
    """``(status, the message of a JSON error or the page's text)`` of one GET, as ``caller``."""

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
        app = Application([(p, as_caller(cls), {"ctx": ctx}) for p, cls in ROUTES], cookie_secret=b"hub-names")
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            response = await AsyncHTTPClient().fetch(f"http://127.0.0.1:{port}{PREFIX}{path}", raise_error=False)
        finally:
            server.stop()
        body = response.body.decode()
        if response.headers.get("Content-Type", "").startswith("application/json"):
            return response.code, json.loads(body).get("message", body)
        return response.code, html.unescape(body)

    return asyncio.run(go())


def test_a_student_asking_for_a_hub_the_ledger_has_not_is_told_so_without_the_hubs_names(ctx):
    for path in ("api/v1/usage?hub=nope", "api/v1/usage?user=alice&hub=nope"):
        code, message = call(ctx, ALICE, path)
        assert code == 400 and message == "The ledger has no hub named 'nope'", message
    code, page = call(ctx, ALICE, "?hub=nope")
    assert code == 400 and "The ledger has no hub named nope." in page
    code, page = call(ctx, ALICE, "?hub=nope&lang=zh-CN")
    assert code == 400 and "账本中没有名为 nope 的中心" in page
    for answer in (message, page):
        assert not any(h in answer for h in ("lab-docker", "dept-k8s", "physics-k8s")) and "its hubs" not in answer
    # a hub the ledger has narrows her own usage as before
    code, _ = call(ctx, ALICE, "api/v1/usage?hub=dept-k8s")
    assert code == 200


def test_an_instructor_asking_for_a_hub_the_ledger_has_not_is_told_so_without_the_hubs_names(ctx):
    for path in ("api/v1/usage?group=cs231n&hub=nope", "api/v1/culling?group=cs231n&hub=nope"):
        code, message = call(ctx, PROF, path)
        assert code == 400 and message == "The ledger has no hub named 'nope'", (path, message)
    code, page = call(ctx, PROF, "groups/cs231n?hub=nope")
    assert code == 400 and "The ledger has no hub named nope." in page and "physics-k8s" not in page


def test_a_reader_of_every_report_is_told_the_hubs_the_ledger_has(ctx):
    names = "its hubs: 'dept-k8s', 'lab-docker', 'physics-k8s'"
    for caller in (ADMIN, READER):
        for path in ("api/v1/usage?all=true&hub=nope", "api/v1/usage?user=alice&hub=nope", "api/v1/culling?hub=nope"):
            code, message = call(ctx, caller, path)
            assert code == 400 and message == f"The ledger has no hub named 'nope'; {names}", (path, message)
        code, page = call(ctx, caller, "admin?hub=nope")
        assert code == 400 and "The ledger has no hub named nope; its hubs: dept-k8s, lab-docker, physics-k8s." in page


def hub_options(page: str) -> list[str]:
    return re.findall(r'<option value="([^"]+)"', page[page.index('id="hub"') :].split("</select>")[0])


def test_a_students_hub_filter_offers_the_hubs_of_their_own_sessions_not_every_hub_of_the_ledger(ctx):
    code, page = call(ctx, ALICE, "")
    assert code == 200 and hub_options(page) == ["dept-k8s", "lab-docker"]
    assert "physics-k8s" not in page and '<td class="hub">dept-k8s</td>' in page
    # one hub's sessions: the filter still offers both of hers, the table has that hub's only
    code, page = call(ctx, ALICE, "?hub=dept-k8s")
    assert code == 200 and hub_options(page) == ["dept-k8s", "lab-docker"]
    assert '<td class="hub">dept-k8s</td>' in page and '<td class="hub">lab-docker</td>' not in page
    # an instructor's group page: the hubs of the group's sessions
    code, page = call(ctx, PROF, "groups/cs231n")
    assert code == 200 and hub_options(page) == ["dept-k8s", "lab-docker"] and "physics-k8s" not in page
    # a reader of every report: every hub of the ledger
    code, page = call(ctx, ADMIN, "admin")
    assert code == 200 and hub_options(page) == ["dept-k8s", "lab-docker", "physics-k8s"]
