"""The permission matrix: every endpoint and page × every kind of caller -> the expected status.

The table is ``docs/security-matrix.csv``, next to ``docs/security.md``, so that the
documentation and the test are one thing. One real hub with the real gpu service
and two real single-user servers answers every row, once per caller:

- ``anonymous``: no credentials at all;
- ``student_a`` (stu1) and ``student_b`` (stu2): students of the same group, cs231n;
- ``instructor_a`` (prof): holds ``custom:gpu-usage:read!group=cs231n``, the JupyterHub way of
  saying "instructor of A's group"; ``instructor_other`` (tutor): the same for ``thesis``;
- ``admin``: a hub admin with the ``gpu-admins`` role (every custom scope of the service);
- ``gpu_service``: the gpu service's own API token;
- ``server_a``: the API token of student A's running single-user server (read from its environment).

Paths are relative to the hub's public URL; ``direct:`` paths go to a single-user
server's own port, bypassing the proxy. ``{a}``, ``{b}``, ``{notice_a}`` and
``{session_a}`` are filled in at run time. Every refused request must change
nothing (budgets and notices compared before and after), and a refusal by the
service is JSON with a message.

The routes of the service come from :func:`jupyterhub_gpu.service.web.routes.make_handlers`:
a route (or a method of its handler) without a row fails the test, so a new
endpoint cannot skip the matrix.
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
import requests
import sqlalchemy

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.models import NotifyChannel
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import ROOT, Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub

MATRIX_CSV = ROOT / "docs" / "security-matrix.csv"
CALLERS = (
    "anonymous",
    "student_a",
    "student_b",
    "instructor_a",
    "instructor_other",
    "admin",
    "gpu_service",
    "server_a",
)
SERVICE_PREFIX = "/services/gpu/"
GPU_SERVICE_TOKEN = secrets.token_hex(16)
SNAPSHOT_TABLES = (
    "gpu_budgets",
    "gpu_notices",
    "gpu_jobs",
    "gpu_profile_overrides",
    "gpu_pricing",
    "gpu_notify_channels",
    "gpu_reservations",
    "gpu_group_shares",
)
#: The channels the rows name (``{channel_a}``: student A's own, ``{channel_g}``: cs231n's; ``*_del``: ones to
#: delete, put back before every request): loopback port 9, so that a test message is refused at once.
CHANNELS = {
    "channel_a": (9001, "user", "stu1"),
    "channel_a_del": (9002, "user", "stu1"),
    "channel_g": (9003, "group", "cs231n"),
    "channel_g_del": (9004, "group", "cs231n"),
}

EXTRA_CONFIG = f"""
c.JupyterHub.services[-1]["api_token"] = {GPU_SERVICE_TOKEN!r}
c.JupyterHub.load_groups["thesis"] = {{"users": ["thea"]}}
c.JupyterHub.load_roles.append({{
    "name": "instructor-cs231n", "users": ["prof"], "scopes": ["custom:gpu-usage:read!group=cs231n"],
}})
c.JupyterHub.load_roles.append({{
    "name": "instructor-thesis", "users": ["tutor"], "scopes": ["custom:gpu-usage:read!group=thesis"],
}})
# servers reach the service (samples, budget, notices), as in the Docker host configuration
c.GPULocalSpawner.gpu_service_url = c.JupyterHub.services[-1]["url"] + "/services/gpu/"
"""


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    body: str
    expected: dict[str, int]
    why: str
    line: int


def load_matrix(path: Path = MATRIX_CSV) -> list[Row]:
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = set(CALLERS) - set(reader.fieldnames or ())
        assert not missing, f"{path}: no column for {sorted(missing)}"
        for number, raw in enumerate(reader, start=2):
            if raw["method"].startswith("#"):
                continue
            rows.append(
                Row(
                    method=raw["method"].strip().upper(),
                    path=raw["path"].strip(),
                    body=(raw.get("body") or "").strip(),
                    expected={who: int(raw[who]) for who in CALLERS},
                    why=(raw.get("why") or "").strip(),
                    line=number,
                )
            )
    return rows


# -- the routes of the service, from make_handlers ----------------------------------------------


def service_routes() -> list[tuple[re.Pattern, type, tuple[str, ...]]]:
    """(pattern, handler class, the HTTP methods the class implements) for every route of the service."""
    code = textwrap.dedent(
        """
        import json, sys, tempfile
        from pathlib import Path
        from tornado import web
        from jupyterhub_gpu.service.app import GPUService
        from jupyterhub_gpu.service.web.routes import make_handlers
        with tempfile.TemporaryDirectory() as d:
            service = GPUService()
            Path(d, "none.py").write_text("")  # an empty config file (a --config that is missing is refused)
            service.initialize([f"--db-url=sqlite:///{d}/ledger.sqlite", f"--config={d}/none.py"])
            out = []
            for route in make_handlers("/services/gpu/", service):
                pattern, cls = route[0], route[1]
                methods = [m for m in cls.SUPPORTED_METHODS
                           if getattr(cls, m.lower(), None) is not getattr(web.RequestHandler, m.lower(), None)]
                out.append([pattern, cls.__qualname__, methods])
            print(json.dumps(out))
        """
    )
    # a fresh process: GPUService and HubOAuth are singletons that need the service's environment
    env = dict(
        os.environ,
        JUPYTERHUB_API_TOKEN="route-listing",
        JUPYTERHUB_CLIENT_ID="service-gpu",
        JUPYTERHUB_SERVICE_PREFIX=SERVICE_PREFIX,
        JUPYTERHUB_API_URL="http://127.0.0.1:1/hub/api",
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return [(re.compile(p + "$"), name, tuple(m)) for p, name, m in json.loads(result.stdout.splitlines()[-1])]


def concrete_path(path: str) -> str:
    """A row's path with placeholders filled by harmless values, for matching against route patterns."""
    names = {name: "1" for name in CHANNELS}
    return "/" + path.format(a="stu1", b="stu2", notice_a="1", session_a="s1", **names).split("?", 1)[0]


def test_every_route_and_method_of_the_service_has_a_row():
    rows = load_matrix()
    routes = service_routes()
    missing = []
    for pattern, name, methods in routes:
        matching = [r for r in rows if not r.path.startswith("direct:") and pattern.fullmatch(concrete_path(r.path))]
        # the first route that matches a path is the one tornado uses: only count rows that route here
        matching = [r for r in matching if first_route(routes, concrete_path(r.path)) is pattern]
        if not matching:
            missing.append(f"{pattern.pattern} ({name}): no row")
            continue
        for method in methods:
            if method in ("HEAD", "OPTIONS"):
                continue
            if not any(r.method == method for r in matching):
                missing.append(f"{method} {pattern.pattern} ({name}): no row")
    assert not missing, f"routes without a row in {MATRIX_CSV.name} (add them, with the expected statuses):\n" + (
        "\n".join(missing)
    )


def first_route(routes, path: str):
    return next((pattern for pattern, _name, _methods in routes if pattern.fullmatch(path)), None)


# -- the hub, the callers and their tokens ------------------------------------------------------------


def user_token(hub: Hub, name: str) -> str:
    """A token the user makes for themselves (JupyterHub's default: every scope the user has)."""
    r = requests.post(
        f"{hub.api_url}/users/{name}/tokens",
        json={"note": "permission matrix", "auth": {"username": name, "password": "pw"}},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


def process_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode().split("=", 1) for item in raw.split(b"\0") if b"=" in item)


@dataclass
class World:
    hub: Hub
    ledger: Ledger
    tokens: dict[str, str | None]
    server_urls: dict[str, str]  # user -> the server's own URL (its port, not the proxy)
    values: dict[str, str]

    def fill(self, text: str) -> str:
        for key, value in self.values.items():
            text = text.replace("{" + key + "}", value)
        return text

    def url(self, path: str) -> str:
        path = self.fill(path)
        if path.startswith("direct:"):
            user, _, rest = path[len("direct:") :].partition("/")
            return self.server_urls[user] + rest
        return f"{self.hub.url}/{path}"

    def call(self, who: str, method: str, path: str, body: str) -> requests.Response:
        headers = {}
        token = self.tokens[who]
        if token:
            headers["Authorization"] = f"token {token}"
        data = None
        if body:
            data = json.dumps(json.loads(self.fill(body))).encode() if body != "-" else b""
            headers["Content-Type"] = "application/json"
        return requests.request(method, self.url(path), headers=headers, data=data, allow_redirects=False, timeout=30)

    def snapshot(self) -> dict:
        """Every row of the tables a request could change on purpose (not the sessions and samples that
        the running servers and the service's tick keep writing)."""
        found = set(sqlalchemy.inspect(self.ledger.engine).get_table_names())
        with self.ledger.engine.connect() as db:
            return {
                table: sorted(map(repr, db.execute(sqlalchemy.text(f"SELECT * FROM {table}"))))
                for table in SNAPSHOT_TABLES
                if table in found
            }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("matrix")
    hub = Hub(root / "hub", gpu_hub_config(root, min_minutes=0) + EXTRA_CONFIG)
    hub.start()
    ledger = None
    try:
        hub.create_users("admin", "stu1", "stu2", "prof", "tutor", "thea")
        wait_for(
            lambda: requests.get(f"{hub.url}{SERVICE_PREFIX}api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        assert hub.start_server("stu1", {"profile": "t4"}).status_code in (201, 202)
        assert hub.start_server("stu2", {"profile": "cpu"}).status_code in (201, 202)
        a, b = hub.wait_ready("stu1"), hub.wait_ready("stu2")
        env_a, env_b = process_env(a["state"]["pid"]), process_env(b["state"]["pid"])
        tokens = {
            "anonymous": None,
            "student_a": user_token(hub, "stu1"),
            "student_b": user_token(hub, "stu2"),
            "instructor_a": user_token(hub, "prof"),
            "instructor_other": user_token(hub, "tutor"),
            "admin": user_token(hub, "admin"),
            "gpu_service": GPU_SERVICE_TOKEN,
            "server_a": env_a["JUPYTERHUB_API_TOKEN"],
        }
        ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}", migrate=False)
        notice = ledger.add_notice("stu1", "budget", "80% of your budget is used", datetime.now(timezone.utc))
        values = {"a": "stu1", "b": "stu2", "notice_a": str(notice.id), "session_a": a["state"]["gpu"]["session_id"]}
        values["now"] = datetime.now(timezone.utc).isoformat()  # a sample's time must lie inside its session
        values.update({name: str(channel_id) for name, (channel_id, _, _) in CHANNELS.items()})
        urls = {"stu1": env_a["JUPYTERHUB_SERVICE_URL"], "stu2": env_b["JUPYTERHUB_SERVICE_URL"]}
        yield World(hub, ledger, tokens, urls, values)
    finally:
        if ledger is not None:
            ledger.close()
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def reset(world: World) -> None:
    """The same starting point for every request: one budget to delete, none where one is created."""
    now = datetime.now(timezone.utc)
    world.ledger.set_budget(BudgetRule("group", "matrix-old", "month", "money", Decimal(5)), now)
    world.ledger.delete_budget("group", "matrix-new")
    with world.ledger.Session() as db:
        for channel_id, kind, owner in CHANNELS.values():
            if db.get(NotifyChannel, channel_id) is None:
                url = f"json://matrix:S3cret@127.0.0.1:9/{owner}"
                db.add(
                    NotifyChannel(
                        id=channel_id,
                        owner_kind=kind,
                        owner=owner,
                        url=url,
                        service="JSON",
                        masked=f"json://matrix:****@127.0.0.1:9/{owner}",
                        events="budget.100",
                        created=now.replace(tzinfo=None),
                        created_by="matrix",
                    )
                )
        db.commit()


def test_every_caller_gets_the_expected_status_and_refusals_change_nothing(world):
    rows = load_matrix()
    wrong = []
    observed_lines = []
    for row in rows:
        observed = {}
        for who in CALLERS:
            reset(world)
            before = world.snapshot()
            r = world.call(who, row.method, row.path, row.body)
            observed[who] = r.status_code
            if r.status_code != row.expected[who]:
                wrong.append(
                    f"line {row.line}: {row.method} {row.path} as {who}: {r.status_code}"
                    f" (expected {row.expected[who]}) {r.text[:160]!r}"
                )
                continue
            if r.status_code >= 400:
                if world.snapshot() != before:
                    wrong.append(f"line {row.line}: {row.method} {row.path} as {who}: refused but changed the ledger")
                if row.path.startswith("services/gpu/api/") and not json_message(r):
                    wrong.append(f"line {row.line}: {row.method} {row.path} as {who}: no JSON message")
        observed_lines.append(",".join([row.method, row.path, *(str(observed[w]) for w in CALLERS)]))
    if wrong:
        print("observed:\n" + "\n".join(observed_lines))
    assert not wrong, f"{len(wrong)} cells of {MATRIX_CSV.name} disagree:\n" + "\n".join(wrong)


def json_message(r: requests.Response) -> bool:
    try:
        body = r.json()
    except ValueError:
        return False
    return body.get("status") == r.status_code and bool(body.get("message"))


def test_one_users_server_cannot_reach_another_users_server(world):
    """A's server token, and A's own token, are refused by B's server, through the proxy and on B's own port."""
    for who in ("server_a", "student_a"):
        for path in ("user/{b}/api/status", "direct:{b}/api/status", "user/{b}/gpu/api/v1/stats"):
            r = world.call(who, "GET", path, "")
            assert r.status_code == 403, (who, path, r.status_code, r.text[:300])
    # the control: B reaches B's server both ways, so the refusals above are about who asks
    for path in ("user/{b}/api/status", "direct:{b}/api/status"):
        assert world.call("student_b", "GET", path, "").status_code == 200
    # and A's server token cannot start, stop or read B's server through the hub's API
    for method, path in (("GET", "hub/api/users/{b}"), ("DELETE", "hub/api/users/{b}/server")):
        r = world.call("server_a", method, path, "")
        assert r.status_code in (403, 404), (method, path, r.status_code, r.text[:300])
    assert world.hub.server("stu2") is not None
