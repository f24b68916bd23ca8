"""Fixtures of the service's unit tests: a stand-in hub that answers the tick's stop requests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyterhub_gpu.service.hubapi import HubClient


class StopHub:
    """Answers ``DELETE /hub/api/users/NAME/server[s/SERVER]`` with 204 and records it; ``on_stop(path)`` runs
    before it answers (what users do elsewhere while the service awaits the hub)."""

    def __init__(self):
        self.stops: list[str] = []
        self.on_stop = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_DELETE(self):
                owner.stops.append(self.path)
                if owner.on_stop is not None:
                    owner.on_stop(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()
        self.client = HubClient(f"http://127.0.0.1:{self.httpd.server_address[1]}/hub/api", "token")

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def hub():
    server = StopHub()
    yield server
    server.close()
