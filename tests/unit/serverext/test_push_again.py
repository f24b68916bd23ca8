"""The server extension keeps a push the service answered 503 (nothing stored) and sends the same one again.

The service's side is a small tornado app on loopback that answers as the samples endpoint does when its
writer is behind (``503`` with ``Retry-After``, docs/service-api.md), then takes the pushes.
"""

from __future__ import annotations

import asyncio
import json

from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.serverext.extension import GPUExtension, GPUStats, retry_after
from tests.unit.serverext.test_shared_units import PARENT, spawn_env


class Service:
    def __init__(self, busy: int):
        self.busy = busy  # answers 503 this many times first
        self.stored: list[dict] = []
        self.refused: list[dict] = []


def service_app(state: Service) -> web.Application:
    class Samples(web.RequestHandler):
        def post(self):
            body = json.loads(self.request.body)
            if state.busy > 0:
                state.busy -= 1
                state.refused.append(body)
                self.set_status(503)
                self.set_header("Retry-After", "1")
                self.finish({"status": 503, "message": "busy"})
                return
            state.stored.append(body)
            self.set_status(201)
            self.finish({"session_id": body["session_id"]})

    class Me(web.RequestHandler):
        def get(self):
            self.finish({"notices": []})

    return web.Application([(r"/api/v1/samples", Samples), (r"/api/v1/me", Me)])


class Log:
    def warning(self, *args):
        pass


class App:
    log = Log()


async def test_a_push_refused_with_503_is_sent_again_and_none_is_lost(monkeypatch, tmp_path):
    spawn_env(monkeypatch, tmp_path, GPUDevice("0", PARENT, "Simulated T4", 16384, True))
    state = Service(busy=2)
    sock, port = bind_unused_port()
    server = HTTPServer(service_app(state))
    server.add_sockets([sock])
    ext = GPUExtension(App(), GPUStats(service_url=f"http://127.0.0.1:{port}/", push_interval=30))
    try:
        await ext.exchange_with_service()  # refused: kept, and tried again after Retry-After (1 s)
        assert not ext.service_available and len(ext.unsent) == 1 and len(state.refused) == 1
        first = state.refused[0]
        for _ in range(40):
            if state.stored:
                break
            await asyncio.sleep(0.1)
        # the retry was refused too (busy=2), so it waits again; the next push sends the old one first
        await asyncio.sleep(1.5)
        await ext.exchange_with_service()
        assert ext.service_available and not ext.unsent
        assert state.stored[0] == first  # the same push, not a new one
        assert len(state.stored) == 2 and state.stored[1]["sampled_until"] >= first["sampled_until"]
        assert state.refused == [first, first]
    finally:
        server.stop()
        ext.stop()


def test_retry_after_is_read_within_bounds():
    assert retry_after("3") == 3.0
    assert retry_after(None) == 5.0 and retry_after("soon") == 5.0 and retry_after("nan") == 5.0
    assert retry_after("0") == 1.0 and retry_after("99999") == 300.0
