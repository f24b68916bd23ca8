"""Real peers for the service tests: an SMTP server (aiosmtpd), a webhook server, a hub with the gpu service."""

from __future__ import annotations

import email
import email.policy
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl

import pytest
from aiosmtpd.controller import Controller

from tests.conftest import free_port


class ServiceUsers:
    """A hub with the gpu service and its ledger, and tokens made as the hub makes them for users and servers."""

    #: the part of the service's URL the test's requests go to
    path = ""

    def __init__(self, hub, ledger):
        self.hub = hub
        self.ledger = ledger
        self.url = f"{hub.url}/services/gpu/{self.path}"

    def token(self, user: str, *scopes: str) -> str:
        """A token of ``user`` with these scopes (none: everything the user may do), as the hub makes it."""
        body = {"note": "test"} | ({"scopes": [*scopes, "access:services!service=gpu"]} if scopes else {})
        r = self.hub.api("POST", f"/users/{user}/tokens", json=body)
        assert r.status_code == 201, r.text
        return r.json()["token"]

    def server_token(self, user: str, server: str = "") -> str:
        """The API token JupyterHub gave the server ``user/server``, read from its process's environment where it
        runs; else (a session the test wrote to the ledger itself) a token with the server's scopes."""
        return self.running_server_token(user, server) or self.minted_server_token(user, server)

    def minted_server_token(self, user: str, server: str = "") -> str:
        """A token the user makes with the scopes of the server's own (the spawner's server_token_scopes)."""
        return self.token(user, f"servers!server={user}/{server}", f"access:servers!server={user}/{server}")

    def running_server_token(self, user: str, server: str = "") -> str | None:
        """``JUPYTERHUB_API_TOKEN`` of the running local server ``user/server`` (gpu-local), or None."""
        state = (self.hub.user(user).get("servers") or {}).get(server, {}).get("state") or {}
        pid = state.get("pid")
        if not pid:
            return None
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return None
        found = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"JUPYTERHUB_API_TOKEN=")]
        return found[0] if found else None


class Mailbox:
    """An aiosmtpd handler that keeps every message it accepts."""

    def __init__(self):
        self.messages = []  # (envelope sender, envelope recipients, parsed message)

    async def handle_DATA(self, server, session, envelope):
        parsed = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        self.messages.append((envelope.mail_from, sorted(envelope.rcpt_tos), parsed))
        return "250 OK"


class SMTPServer:
    def __init__(self, **kwargs):
        self.mailbox = Mailbox()
        self.port = free_port()
        self.controller = Controller(self.mailbox, hostname="127.0.0.1", port=self.port, **kwargs)

    @property
    def messages(self):
        return self.mailbox.messages


@pytest.fixture
def smtp_server():
    server = SMTPServer()
    server.controller.start()
    yield server
    server.controller.stop()


class WebhookServer:
    """An HTTP server on 127.0.0.1 that records POSTs and answers with ``status`` (after ``delay`` seconds).

    ``bodies`` holds each JSON body parsed (a form's as a dict of its fields), ``paths`` each request's path
    with its query, ``times`` when each arrived (``time.monotonic()``).
    """

    def __init__(self, delay: float = 0):
        self.bodies = []
        self.headers = []
        self.paths = []
        self.times = []
        self.status = 200
        self.delay = delay
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers["Content-Length"])
                owner.headers.append(dict(self.headers))
                owner.paths.append(self.path)
                owner.times.append(time.monotonic())
                raw = self.rfile.read(length).decode("utf-8")
                if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
                    owner.bodies.append(dict(parse_qsl(raw)))
                else:
                    owner.bodies.append(json.loads(raw))
                time.sleep(owner.delay)
                body = b"" if owner.status in (204, 304) else b"ok"
                self.send_response(owner.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/gpu"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def webhook():
    server = WebhookServer()
    yield server
    server.close()


GPU_SERVICE_CONFIG = """
import sys
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES

GPU_DB = %(db_url)r
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [
    {"model": "T4", "count": 4, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00"},
    {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"},
]
c.GPULocalSpawner.home_dir_template = %(home)r + "/{username}"
c.GPULocalSpawner.ledger_db_url = GPU_DB
c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
c.GPULocalSpawner.budget_min_minutes = %(min_minutes)d
c.JupyterHub.load_groups = {"cs231n": {"users": ["stu1", "stu2"]}, "thesis": {"users": ["thea"]}}
c.JupyterHub.custom_scopes = CUSTOM_SCOPES
c.JupyterHub.services.append({
    "name": "gpu",
    "url": "http://127.0.0.1:%(service_port)d",
    "command": [sys.executable, "-m", "jupyterhub_gpu.service", "--config=%(service_config)s"],
    "oauth_no_confirm": True,
    "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
})
c.JupyterHub.load_roles.append({
    "name": "gpu-service",
    "services": ["gpu"],
    "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
})
c.JupyterHub.load_roles.append({"name": "user", "scopes": ["self", "access:services!service=gpu"]})
c.JupyterHub.load_roles.append({
    "name": "gpu-admins",
    "users": ["admin"],
    "scopes": sorted(CUSTOM_SCOPES),
})
c.Authenticator.admin_users = {"admin"}
"""

SERVICE_CONFIG = """
c.GPUService.db_url = %(db_url)r
c.GPUService.currency = "CNY"
c.GPUService.timezone = "Asia/Shanghai"
c.GPUService.tick_interval = %(tick)s
c.GPUService.reconcile_interval = %(reconcile)s
c.GPUService.budget_grace_seconds = %(grace)s
c.GPUService.smtp_host = "127.0.0.1" if %(smtp_port)d else ""
c.GPUService.smtp_port = %(smtp_port)d or 25
c.GPUService.mail_from = "gpu@lab.example.edu"
c.GPUService.user_email_template = "{username}@students.example.edu"
c.GPUService.instructor_emails = {"cs231n": ["prof@example.edu"]}
c.GPUService.admin_emails = ["admin@example.edu"]
c.GPUService.webhook_url = %(webhook_url)r
"""


def service_port(config: str) -> int:
    """The gpu service's port in a hub config of :func:`gpu_hub_config`."""
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


def gpu_hub_config(
    tmp_path,
    db_url: str | None = None,
    smtp_port: int = 0,
    webhook_url: str = "",
    tick: float = 1,
    reconcile: float = 600,
    grace: float = 300,
    min_minutes: int = 10,
    gpu_pool: dict[str, int] | None = None,
) -> str:
    """A hub config with gpu-local over simulated GPUs, the ledger, and the managed gpu service.

    ``gpu_pool``: the service's ``c.GPUService.gpu_pool`` (the lab's GPUs a reservation is checked against);
    None leaves it unset. A test that changes ``simulated_gpus`` gives the same counts here.
    """
    db_url = db_url or f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service_config = tmp_path / "gpu_service_config.py"
    service_config.write_text(
        SERVICE_CONFIG
        % {
            "db_url": db_url,
            "tick": tick,
            "reconcile": reconcile,
            "grace": grace,
            "smtp_port": smtp_port,
            "webhook_url": webhook_url,
        }
        + (f"c.GPUService.gpu_pool = {dict(gpu_pool)!r}\n" if gpu_pool is not None else "")
    )
    return GPU_SERVICE_CONFIG % {
        "db_url": db_url,
        "home": str(tmp_path / "homes"),
        "min_minutes": min_minutes,
        "service_port": free_port(),
        "service_config": service_config,
    }
