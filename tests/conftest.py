"""Shared test helpers: a real JupyterHub in a subprocess, driven over its REST API."""

from __future__ import annotations

import ctypes
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _compile_catalogs() -> None:
    """The tests read the message catalogs as a built package does: compiled, from the .po files as they are now."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.compile_catalogs(stale_only=True)


_compile_catalogs()

# A shell's background job (`make test &`, nohup) starts with SIGINT ignored, and every process it starts would
# inherit that: single-user servers deaf to the hub's SIGINT, kernels and Keras fits that no interrupt reaches.
# The suite runs as from a terminal: a handler here, and the children (xdist workers, hubs, servers) start
# with the default again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


_PORTS_GIVEN: set[int] = set()
_PORT_BLOCK = 3000


def free_port() -> int:
    """A free loopback port for a test's hub, proxy, service or database.

    Port 0 would draw from the kernel's ephemeral range (32768-60999 here), the range client sockets and
    every other pytest-xdist worker draw from too: a port seen free can be taken before the server binds it.
    So each worker takes its ports from a block of its own below that range (20000 + 3000 × worker number),
    and never hands out the same one twice. ``JUPYTERHUB_GPU_TEST_PORT_LOW`` moves the blocks (default 20000),
    so that several pytest runs on one machine (developers working side by side) do not share a block.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    low = int(os.environ.get("JUPYTERHUB_GPU_TEST_PORT_LOW", "20000")) + (index % 4) * _PORT_BLOCK
    if len(_PORTS_GIVEN) > _PORT_BLOCK * 3 // 4:
        _PORTS_GIVEN.clear()  # long runs: ports of finished tests are free again
    for _ in range(10 * _PORT_BLOCK):
        port = random.randrange(low, low + _PORT_BLOCK)
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{low + _PORT_BLOCK}")


def wait_for(predicate, timeout=60.0, interval=0.2, what="condition"):
    """Poll ``predicate`` until it returns a truthy value; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class Hub:
    """A real ``jupyterhub`` subprocess with a tiny config and an admin service token."""

    ADMIN_SCOPES = [
        "admin:users",
        "admin:servers",
        "admin:server_state",
        "admin:groups",
        "tokens",
        "list:users",
        "read:users",
    ]

    def __init__(self, workdir: Path, config: str):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.hub_port = free_port()
        self.proxy_api_port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/hub/api"
        self.config_file = self.workdir / "jupyterhub_config.py"
        self.log_file = self.workdir / "hub.log"
        self.proc: subprocess.Popen | None = None
        #: more environment for the hub process (the stand-in driver's, for example)
        self.env: dict[str, str] = {}
        self.write_config(config)

    def write_config(self, config: str) -> None:
        base = f"""
        c = get_config()  # noqa
        c.JupyterHub.bind_url = {self.url!r}
        c.JupyterHub.hub_ip = "127.0.0.1"
        c.JupyterHub.hub_port = {self.hub_port}
        c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.proxy_api_port}"
        c.ConfigurableHTTPProxy.command = [{str(BIN / "configurable-http-proxy")!r}]
        c.ConfigurableHTTPProxy.pid_file = {str(self.workdir / "proxy.pid")!r}
        c.JupyterHub.db_url = "sqlite:///{self.workdir / "jupyterhub.sqlite"}"
        c.JupyterHub.cookie_secret_file = {str(self.workdir / "cookie_secret")!r}
        c.JupyterHub.authenticator_class = "dummy"
        c.DummyAuthenticator.password = "pw"
        c.Authenticator.allow_all = True
        c.JupyterHub.services = [{{"name": "tester", "api_token": {self.token!r}}}]
        c.JupyterHub.load_roles = [
            {{"name": "tester", "scopes": {self.ADMIN_SCOPES!r}, "services": ["tester"]}},
        ]
        c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0.5}}
        c.Spawner.cmd = [{str(BIN / "jupyterhub-singleuser")!r}]
        c.Spawner.args = ["--allow-root"] if __import__("os").getuid() == 0 else []
        c.Spawner.start_timeout = 90
        c.Spawner.http_timeout = 90
        """
        self.config_file.write_text(textwrap.dedent(base) + "\n" + textwrap.dedent(config))

    def start(self, wait=True) -> None:
        env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", **self.env)
        self._log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        self.log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [str(BIN / "jupyterhub"), "-f", str(self.config_file), "--debug"],
            cwd=self.workdir,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        if wait:
            wait_for(self._up, timeout=120, what=f"the hub at {self.url} (log: {self.log_file})")

    def _up(self):
        """The hub's API answers; a hub process this object started must still run (None: started elsewhere).

        The hub answers its API as soon as it listens, before its managed services have started and before their
        routes are in the proxy (until then ``/services/<name>/`` falls through to the hub's own 404 page). So a
        hub this object started is up once its log says it is running, which it says after those steps.
        """
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"hub exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
        try:
            if requests.get(f"{self.api_url}/", timeout=2).status_code != 200:
                return False
        except requests.RequestException:
            return False
        if self.proc is None:
            return True
        with open(self.log_file, "rb") as log:
            log.seek(self._log_offset)
            return b"JupyterHub is now running" in log.read()

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def stop(self, sig=signal.SIGTERM, timeout=30) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    # -- REST --------------------------------------------------------------
    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"token {self.token}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.api_url}{path}", headers=headers, timeout=30, **kwargs)

    def create_users(self, *names: str) -> None:
        r = self.api("POST", "/users", json={"usernames": list(names)})
        assert r.status_code in (201, 409), r.text

    def user(self, name: str) -> dict:
        r = self.api("GET", f"/users/{name}", params={"include_stopped_servers": "0"})
        r.raise_for_status()
        return r.json()

    def server(self, name: str, server_name: str = "") -> dict | None:
        return self.user(name).get("servers", {}).get(server_name)

    def gpu_state(self, name: str) -> dict:
        server = self.server(name) or {}
        return (server.get("state") or {}).get("gpu") or {}

    def start_server(self, name: str, options: dict | None = None, server_name: str = "") -> requests.Response:
        path = f"/users/{name}/servers/{server_name}" if server_name else f"/users/{name}/server"
        return self.api("POST", path, json=options if options is not None else {})

    def stop_server(self, name: str, server_name: str = "") -> requests.Response:
        path = f"/users/{name}/servers/{server_name}" if server_name else f"/users/{name}/server"
        return self.api("DELETE", path)

    def wait_ready(self, name: str, timeout=90) -> dict:
        try:
            return wait_for(lambda: (s := self.server(name)) and s.get("ready") and s, timeout, what=f"{name} ready")
        except AssertionError as e:
            # the hub's own account of the spawn (its workdir may be gone by the time anyone reads the report)
            raise AssertionError(
                f"{e}\n--- the hub's log about {name}, and its errors:\n" + "\n".join(self.problems(name)[-80:])
            ) from None

    def problems(self, about: str | None = None) -> list[str]:
        """The hub log's errors and warnings with their tracebacks, and (``about``) its lines naming a user."""
        noise = ("GET /hub/api/users", "Checking access to /hub/api/users")
        lines, in_problem = [], False
        for line in self.log_text().splitlines():
            if line.startswith("["):
                in_problem = line.startswith(("[E ", "[W ", "[C "))
                if (in_problem or (about and about in line)) and not any(n in line for n in noise):
                    lines.append(line)
            elif in_problem:  # a traceback or a multi-line message
                lines.append(line)
        return lines

    def wait_stopped(self, name: str, timeout=60) -> None:
        wait_for(lambda: self.server(name) is None, timeout, what=f"{name} stopped")

    def progress_events(self, name: str, until, timeout=30) -> list[dict]:
        """Read the spawn progress stream of ``name`` until ``until(event)`` is true."""
        events = []
        with self.api("GET", f"/users/{name}/server/progress", stream=True) as r:
            r.raise_for_status()
            deadline = time.monotonic() + timeout
            for line in r.iter_lines(decode_unicode=True):
                if time.monotonic() > deadline:
                    break
                if line and line.startswith("data:"):
                    event = json.loads(line[5:])
                    events.append(event)
                    if until(event):
                        return events
        raise AssertionError(f"progress of {name} ended without the expected event: {events}")

    def login(self, name: str, password: str = "pw") -> requests.Session:
        """A browser-like session logged in through the login form."""
        s = requests.Session()
        s.get(f"{self.url}/hub/login", timeout=10)
        r = s.post(
            f"{self.url}/hub/login",
            data={"username": name, "password": password, "_xsrf": s.cookies.get("_xsrf", "")},
            timeout=10,
        )
        assert r.status_code == 200, r.text[:500]
        return s

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            for user in self.api("GET", "/users").json():
                for server_name in user.get("servers", {}):
                    self.stop_server(user["name"], server_name)
            for user in self.api("GET", "/users").json():
                for server_name in user.get("servers", {}):
                    wait_for(lambda u=user["name"], s=server_name: self.server(u, s) is None, 30, what="cleanup")
        self.stop()


@pytest.fixture
def make_hub(tmp_path, request):
    hubs = request.node.jhgpu_hubs = []

    def factory(config: str, name: str = "hub", start: bool = True) -> Hub:
        hub = Hub(tmp_path / name, config)
        hubs.append(hub)
        if start:
            hub.start()
        return hub

    yield factory
    for hub in hubs:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


# -- PostgreSQL: a throwaway server per test session, a fresh database per test --------


def postgres_bin_dir() -> Path | None:
    """Where initdb and postgres are (Debian's newest /usr/lib/postgresql/N/bin, else PATH)."""
    found = sorted(
        (p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "postgres").exists()),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0,
    )
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and (Path(initdb).parent / "postgres").exists() else None


class PostgresServer:
    """A PostgreSQL cluster in a temporary folder, on a free loopback port, trusting loopback logins."""

    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        self.port = free_port()
        # postgres refuses to run as root: as root, the cluster belongs to the postgres OS user,
        # in a folder of its own under /tmp (pytest's own tmp folders are 0700 root)
        self.as_user = "postgres" if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-pg-"))
        self.data = self.dir / "data"
        self.log_file = self.dir / "postgres.log"
        self.proc: subprocess.Popen | None = None
        if self.as_user:
            shutil.chown(self.dir, self.as_user, self.as_user)

    def _run_kwargs(self) -> dict:
        return {"user": self.as_user, "group": self.as_user, "extra_groups": []} if self.as_user else {}

    def start(self) -> None:
        initdb = subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-locale",
            ],
            capture_output=True,
            text=True,
            cwd=self.dir,
            **self._run_kwargs(),
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed ({initdb.returncode}):\n{initdb.stdout}\n{initdb.stderr}")
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-h",
                "127.0.0.1",
                "-k",
                str(self.dir),
                # throwaway data: no fsync; and a zone other than UTC, so that any
                # time-zone-dependent storage of the ledger's times shows up in tests
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "timezone=Asia/Shanghai",
                "-c",
                "max_connections=200",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            start_new_session=True,
            **self._run_kwargs(),
        )
        log.close()
        wait_for(self._ready, timeout=60, interval=0.2, what=f"PostgreSQL on port {self.port} (log: {self.log_file})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"postgres exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
        try:
            with self.connect():
                return True
        except Exception:
            return False

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def connect(self, dbname: str = "postgres"):
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True, connect_timeout=5
        )

    def url(self, dbname: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        name = f"test_{secrets.token_hex(6)}"
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, then exit
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for this test session (initdb in a temporary folder; stopped at the end)."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL's server programs (initdb, postgres) are not installed: run `make test`,"
            " or `bash scripts/postgres-setup.sh` once, then pytest again",
            pytrace=False,
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("psycopg is not installed: run `make test` (or `make venv`), then pytest again", pytrace=False)
    server = PostgresServer(bin_dir)
    try:
        server.start()
    except Exception:
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A SQLAlchemy URL of a fresh, empty database on the test PostgreSQL server (dropped afterwards)."""
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``-n``), the tests that drive the one Docker engine, and the chaos
    tests that kill processes and time their restarts, run one after another in a single worker; the rest
    (each with its own hub on free ports) spread over the others. The k8s tests share the test cluster's 4 GPUs:
    they run one after another in a worker of their own.

    First of the hooks (``tryfirst``): pytest-xdist reads the group marks in a hook of its own, registered in
    each worker after this conftest, so called before it; without ``tryfirst`` it found no mark and every
    group ran spread over all the workers (the k8s tests deleted each other's namespaces: tests/unit/
    test_xdist_groups.py)."""
    for item in items:
        if item.get_closest_marker("docker") or item.get_closest_marker("chaos"):
            item.add_marker(pytest.mark.xdist_group("serial"))
        elif item.get_closest_marker("k8s"):
            item.add_marker(pytest.mark.xdist_group("k8s"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the errors and warnings of the hubs it started: a CI log then says why a
    spawn answered 500, not only that it did."""
    report = yield
    if report.failed and call.when in ("setup", "call"):
        for hub in getattr(item, "jhgpu_hubs", []):
            lines = hub.problems()
            if lines:
                report.sections.append((f"hub log {hub.workdir.name}: errors and warnings", "\n".join(lines[-60:])))
    return report


def pytest_configure(config):
    """The groups above must hold: pytest-xdist 3.8 puts a test in its group by renaming its node id, which
    pytest 9.2 ignores (the k8s tests then ran in three workers at once, one deleting another's namespace, and
    the Docker and chaos tests side by side). Refuse to run the groups apart; constraints.txt pins pytest 9.1."""
    from packaging.version import Version

    if config.getoption("dist", "no") == "loadgroup" and Version(pytest.__version__) >= Version("9.2"):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} breaks pytest-xdist's --dist loadgroup (the k8s, Docker and chaos groups"
            " would run in several workers at once): install constraints.txt's versions (make venv)"
        )


# -- the stand-in NVIDIA driver -------------------------------------------------------------------


def build_standin(root: Path) -> Path:
    """Build the stand-in library into ``root/lib`` as scripts/nvml-sim-setup.sh does."""
    lib = root / "lib" / "libnvidia-ml.so.1"
    lib.parent.mkdir(parents=True, exist_ok=True)
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-Wl,-soname,libnvidia-ml.so.1"]
    subprocess.run(["gcc", *flags, "-o", str(lib), str(ROOT / "tools/nvml-sim/nvml_sim.c"), "-lpthread"], check=True)
    return lib


@pytest.fixture(scope="session")
def standin_library(tmp_path_factory) -> Path:
    lib = build_standin(tmp_path_factory.mktemp("nvml-sim"))
    ctypes.CDLL(str(lib))  # now dlopen("libnvidia-ml.so.1") (pynvml) finds this one, by its soname
    return lib


@pytest.fixture
def driver(standin_library, tmp_path, monkeypatch):
    """The stand-in NVIDIA driver (tools/nvml-sim) as this process's NVML, its state in ``tmp_path``."""
    from jupyterhub_gpu.gpus.standin import StandIn

    standin = StandIn(root=tmp_path / "sim")
    for key, value in standin.environment().items():
        if key != "LD_LIBRARY_PATH":
            monkeypatch.setenv(key, value)
    return standin


def gpu_service_registration(url: str, service_config, python: str = sys.executable) -> str:
    """Hub config lines that run the gpu service as a managed service at ``url`` with its config file, and give
    it and the users the scopes it needs (``from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES`` first)."""
    return f"""
c.JupyterHub.custom_scopes = CUSTOM_SCOPES
c.JupyterHub.services.append({{
    "name": "gpu",
    "url": {url!r},
    "command": [{python!r}, "-m", "jupyterhub_gpu.service", "--config={service_config}"],
    "oauth_no_confirm": True,
    "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
}})
c.JupyterHub.load_roles.append({{
    "name": "gpu-service",
    "services": ["gpu"],
    "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
}})
c.JupyterHub.load_roles.append({{"name": "user", "scopes": ["self", "access:services!service=gpu"]}})
"""
