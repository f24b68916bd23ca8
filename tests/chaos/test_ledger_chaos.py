"""kill -9 of the gpu service and of the hub at random moments during 20 sessions: the ledger stays exact.

The truth the ledger is compared with comes neither from the ledger nor from the
hub: a watcher thread reads /proc every 0.2 s and records every single-user
server process of this hub (its session id, start and GPUs from its environment,
when it was last seen alive). The test itself knows when it asked for each stop
(DELETE sent) and when the stop was confirmed (the hub no longer lists the server
and its process is gone). Then, for every session that ran:

- exactly one ledger row, none for anything that did not run (no loss, no double);
- ``started`` equal to the server's ``JUPYTERHUB_GPU_STARTED`` to the microsecond;
- ``stopped`` between the DELETE and the confirmation; for a server that ended
  by itself (one that starts while the hub is dead gives up after five tries to
  reach it), between the last moment it was seen alive and the first it was seen
  gone, or when the restarted hub could see it if the hub was down meanwhile;
- ``minutes == ceil(seconds / 60)`` and ``cost == minutes × rate``;

and at the end: no open session, no process of any session left, never one GPU
in two live servers (neither in the processes' environments nor in the hub's
state), and the killed service brought back by the hub.

Stops are only requested while the hub is up, but the hub may be killed while
one is in progress. The seed is printed; ``CHAOS_SEED=<n>`` replays a schedule
(the timing of a loaded machine still varies).
"""

from __future__ import annotations

import itertools
import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.chaos, pytest.mark.hub, pytest.mark.timeout(600)]

SESSIONS = 20
START_EVERY = 5.0  # seconds between session starts
HUB_KILLS = 3
SERVICE_KILLS = 3
MAX_T4 = 4  # the simulated inventory has 4 T4s: never queue
RATE_MICROS = {"t4": 50_000, "cpu": 10_000}  # ¥3.00/GPU-hour and ¥0.60/hour, per minute


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def aware(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=timezone.utc) if moment is not None else None


# -- the truth: the processes themselves ---------------------------------------------------


@dataclass
class ServerProcess:
    pid: int
    session_id: str
    user: str
    profile: str
    devices: tuple[str, ...]
    started: datetime  # JUPYTERHUB_GPU_STARTED
    first_seen: datetime
    last_alive: datetime
    gone: datetime | None = None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class _Stat:
    state: str
    ppid: int
    identity: str  # start time and command name: changes when the pid is reused and when the process execs
    age: float  # seconds


def _stat(pid: int, uptime: float = 0.0) -> _Stat | None:
    """What /proc/PID/stat says of a process; None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 1 :].split()
    started = int(fields[19])
    return _Stat(fields[0], int(fields[1]), f"{started}:{comm}", uptime - started / _CLOCK_TICKS)


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def _environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class ProcessWatch(threading.Thread):
    """Records every single-user server of one hub, and every gpu service process of one config, from /proc.

    A server's children (kernels, probes) inherit its environment: the server is
    the root of the processes that carry its session id.
    """

    def __init__(self, hub_api_url: str, service_marker: str, interval: float = 0.2):
        super().__init__(daemon=True)
        self.hub_api_url = hub_api_url.rstrip("/")
        self.service_marker = service_marker
        self.interval = interval
        self.servers: dict[str, ServerProcess] = {}  # by session id
        self.session_pids: dict[int, str] = {}  # every live process of a session (children too), last scan
        self.service_pids: dict[int, tuple[datetime, datetime | None]] = {}
        self.gpu_conflicts: list[str] = []
        self.errors: list[BaseException] = []
        self._known: dict[int, tuple[str, str | None]] = {}  # pid -> (identity, session id | "service" | None)
        self._env: dict[str, dict[str, str]] = {}  # session id -> its environment
        self._lock = threading.Lock()
        self._halt = threading.Event()

    def run(self):
        try:
            while not self._halt.is_set():
                self.scan()
                self._halt.wait(self.interval)
        except BaseException as e:  # reported by the test
            self.errors.append(e)

    def stop(self):
        self._halt.set()
        self.join(10)
        self.scan()

    def scan(self):
        now = utcnow()
        uptime = _uptime()
        sessions: dict[str, dict[int, int]] = {}  # session id -> {pid: ppid}
        alive_services: set[int] = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            stat = _stat(pid, uptime)
            if stat is None or stat.state == "Z":
                continue
            known = self._known.get(pid)
            if known is None or known[0] != stat.identity:
                what, decided = self._classify(pid)
                # a process caught in exec shows an empty environment for an instant: look again while it is young
                if decided or stat.age > 2:
                    self._known[pid] = (stat.identity, what)
            else:
                what = known[1]
            if what == "service":
                alive_services.add(pid)
            elif what is not None:
                sessions.setdefault(what, {})[pid] = stat.ppid
        with self._lock:
            self.session_pids = {pid: sid for sid, pids in sessions.items() for pid in pids}
            for sid, pids in sessions.items():
                proc = self.servers.get(sid)
                if proc is None:
                    roots = [pid for pid, ppid in pids.items() if ppid not in pids]
                    self.servers[sid] = proc = self._server(sid, min(roots), now)
                if proc.gone is None and proc.pid in pids:
                    while pids.get(proc.pid) in pids:  # an ancestor seen late is the server itself
                        proc.pid = pids[proc.pid]
            held: dict[str, str] = {}
            for sid, proc in self.servers.items():
                if proc.gone is not None:
                    continue
                if proc.pid in sessions.get(sid, {}):
                    proc.last_alive = now
                    for device in proc.devices:
                        if device in held:
                            self.gpu_conflicts.append(f"{now}: {device} in {held[device]} and {sid}")
                        held[device] = sid
                else:
                    proc.gone = now
            for pid, (first, gone) in self.service_pids.items():
                if pid not in alive_services and gone is None:
                    self.service_pids[pid] = (first, now)

    def _server(self, sid: str, pid: int, now: datetime) -> ServerProcess:
        env = self._env[sid]
        return ServerProcess(
            pid=pid,
            session_id=sid,
            user=env.get("JUPYTERHUB_USER", ""),
            profile=env.get("JUPYTERHUB_GPU_PROFILE", ""),
            devices=tuple(d for d in env.get("JUPYTERHUB_GPU_DEVICES", "").split(",") if d),
            started=parse_time(env["JUPYTERHUB_GPU_STARTED"]),
            first_seen=now,
            last_alive=now,
        )

    def _classify(self, pid: int) -> tuple[str | None, bool]:
        """(session id, "service" or None; whether that is final for this process image)."""
        env = _environ(pid)
        if not env:
            return None, False
        if env.get("JUPYTERHUB_GPU_SESSION_ID") and env.get("JUPYTERHUB_API_URL", "").rstrip("/") == self.hub_api_url:
            sid = env["JUPYTERHUB_GPU_SESSION_ID"]
            self._env.setdefault(sid, env)
            return sid, True
        cmdline = _cmdline(pid)
        if self.service_marker in cmdline and "jupyterhub_gpu.service" in cmdline:
            with self._lock:
                self.service_pids.setdefault(pid, (utcnow(), None))
            return "service", True
        return None, True

    def alive_servers(self) -> list[ServerProcess]:
        with self._lock:
            return [p for p in self.servers.values() if p.gone is None]

    def alive_session_pids(self) -> dict[int, str]:
        """Every live process of any session (servers and what they left behind)."""
        with self._lock:
            return dict(self.session_pids)

    def alive_service_pids(self) -> list[int]:
        with self._lock:
            return [pid for pid, (_first, gone) in self.service_pids.items() if gone is None]

    def by_pid(self, pid: int) -> ServerProcess | None:
        with self._lock:
            return next((p for p in self.servers.values() if p.pid == pid), None)


# -- the driver --------------------------------------------------------------------------------


@dataclass
class Plan:
    user: str
    start_at: float  # seconds after the run began
    wants_gpu: bool
    duration: float  # seconds from ready to the stop request
    profile: str = ""
    phase: str = "waiting"  # waiting -> starting -> running -> stopping -> done
    start_requests: int = 0
    last_start: float = 0.0
    ready_at: float | None = None
    pid: int | None = None
    session_id: str | None = None
    delete_sent: datetime | None = None
    last_delete: float = 0.0
    gone: datetime | None = None
    notes: list[str] = field(default_factory=list)


def make_schedule(rng: random.Random) -> tuple[list[Plan], list[float], list[float]]:
    plans = []
    for i in range(SESSIONS):
        # a quarter of the sessions cross the one-minute boundary, the rest stay in their first minute
        duration = rng.uniform(50, 70) if i % 4 == 1 else rng.uniform(5, 40)
        plans.append(Plan(f"chaos{i:02d}", i * START_EVERY, rng.random() < 0.6, duration))
    last = (SESSIONS - 1) * START_EVERY + 20

    def spaced(n, low, high, gap):
        while True:
            moments = sorted(rng.uniform(low, high) for _ in range(n))
            if all(b - a >= gap for a, b in itertools.pairwise(moments)):
                return moments

    return plans, spaced(HUB_KILLS, 8, last, 15), spaced(SERVICE_KILLS, 4, last, 10)


def run_chaos(make_hub, tmp_path: Path, db_url: str, seed: int) -> None:
    rng = random.Random(seed)
    print(f"\nchaos seed {seed} on {db_url.split(':')[0]} (replay with CHAOS_SEED={seed})")
    config = gpu_hub_config(tmp_path, db_url=db_url, min_minutes=0, tick=1, reconcile=5)
    config += "\nc.JupyterHub.cleanup_servers = False\n"
    hub = make_hub(config)
    plans, hub_kills, service_kills = make_schedule(rng)
    print(f"hub kills at {[round(t, 1) for t in hub_kills]} s")
    print(f"service kills at {[round(t, 1) for t in service_kills]} s")
    hub.create_users(*(p.user for p in plans))
    # servers reach the hub's own API port (c.JupyterHub.hub_port), not the proxy's
    watch = ProcessWatch(f"http://127.0.0.1:{hub.hub_port}/hub/api", str(tmp_path / "gpu_service_config.py"))
    watch.start()
    state_conflicts: list[str] = []
    hub_down: list[tuple[datetime, datetime]] = []  # (killed, API answering again)
    service_restarts: list[float] = []
    t0 = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - t0

    def log(message: str) -> None:
        print(f"[{elapsed():6.1f}s] {message}")

    def kill_service(count: int) -> None:
        pids = watch.alive_service_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log(f"service kill {count}: SIGKILL {pids or 'nothing (no service process alive)'}")
        killed_at = elapsed()

        def restarted():
            return [p for p in watch.alive_service_pids() if p not in pids]

        def measure():
            back = _when(restarted, 90)
            service_restarts.append(round(back - t0 - killed_at, 1) if back else None)

        threading.Thread(target=measure, daemon=True).start()

    def kill_hub(count: int) -> None:
        killed = utcnow()
        hub.stop(signal.SIGKILL)
        down = rng.uniform(0, 2)
        log(f"hub kill {count}: SIGKILL, restarting in {down:.1f}s")
        time.sleep(down)
        hub.start()
        hub_down.append((killed, utcnow()))
        log(f"hub {count} back up")

    try:
        servers: dict[str, dict] = {}
        pending_hub_kills, pending_service_kills = list(hub_kills), list(service_kills)
        while any(p.phase != "done" for p in plans):
            now = elapsed()
            if now > 420:
                unfinished = [(p.user, p.phase) for p in plans if p.phase != "done"]
                raise AssertionError(f"the run did not finish: {unfinished}")
            if pending_service_kills and now >= pending_service_kills[0]:
                pending_service_kills.pop(0)
                kill_service(SERVICE_KILLS - len(pending_service_kills))
            if pending_hub_kills and now >= pending_hub_kills[0]:
                pending_hub_kills.pop(0)
                kill_hub(HUB_KILLS - len(pending_hub_kills))
                for p in plans:
                    if p.phase == "stopping":
                        p.last_delete = 0  # ask again if the hub forgot the request
            try:
                listing = hub.api("GET", "/users").json()
            except requests.RequestException as e:
                log(f"listing failed: {e}")
                time.sleep(0.5)
                continue
            servers = {u["name"]: u["servers"][""] for u in listing if "" in (u.get("servers") or {})}
            check_state_assignments(servers, state_conflicts)
            t4_busy = sum(1 for p in plans if p.profile == "t4" and p.phase in ("starting", "running", "stopping"))
            for p in plans:
                server = servers.get(p.user)
                if p.phase == "waiting" and now >= p.start_at:
                    p.profile = "t4" if p.wants_gpu and t4_busy < MAX_T4 else "cpu"
                    t4_busy += p.profile == "t4"
                    request_start(hub, p, log)
                    p.phase = "starting"
                elif p.phase == "starting":
                    if step_starting(hub, p, server, now, log):
                        log(f"{p.user} stops in {p.duration:.0f}s")
                elif p.phase == "running" and now >= p.ready_at + p.duration:
                    p.delete_sent = utcnow()
                    p.last_delete = now
                    r = hub.stop_server(p.user)
                    log(f"{p.user} DELETE -> {r.status_code}")
                    p.phase = "stopping"
                    if r.status_code == 204 and p.pid and _dead(p.pid):
                        # stopped before the hub answered: confirm now rather than after the next listing
                        p.gone, p.phase = utcnow(), "done"
                        log(f"{p.user} gone ({(p.gone - p.delete_sent).total_seconds():.1f}s after DELETE)")
                elif p.phase == "stopping":
                    proc = watch.by_pid(p.pid) if p.pid else None
                    if server is None and (proc is None or proc.gone is not None):
                        p.gone, p.phase = utcnow(), "done"
                        log(f"{p.user} gone ({(p.gone - p.delete_sent).total_seconds():.1f}s after DELETE)")
                    elif server is not None and not server.get("pending") and now - p.last_delete > 3:
                        p.last_delete = now
                        r = hub.stop_server(p.user)
                        p.notes.append(f"DELETE sent again at {now:.1f}s -> {r.status_code}")
                        log(f"{p.user} DELETE again -> {r.status_code}")
            time.sleep(0.3)
        log("all sessions done")
        # the hub brings the killed service back (it polls its managed services)
        wait_for(watch.alive_service_pids, 90, what="a gpu service process restarted by the hub")
        time.sleep(1)
        watch.stop()
        ledger = Ledger(db_url, migrate=False)
        try:
            report_and_check(plans, watch, state_conflicts, service_restarts, hub_down, ledger, hub)
        finally:
            ledger.close()
    finally:
        watch.stop()
        for pid, sid in watch.alive_session_pids().items():
            print(f"killing leftover process {pid} of session {sid}")
            _kill(pid)
        for pid in watch.alive_service_pids():
            stat = _stat(pid)
            if stat is not None and (hub.proc is None or stat.ppid != hub.proc.pid):
                _kill(pid)  # a service orphaned by a hub kill: the hub's cleanup stops only its own


def _when(predicate, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.2)
    return None


def _dead(pid: int) -> bool:
    stat = _stat(pid)
    return stat is None or stat.state == "Z"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def request_start(hub, plan: Plan, log) -> None:
    plan.start_requests += 1
    plan.last_start = time.monotonic()
    r = hub.start_server(plan.user, {"profile": plan.profile})
    log(f"{plan.user} start {plan.profile} -> {r.status_code}")
    if r.status_code not in (201, 202, 400):
        raise AssertionError(f"start of {plan.user} refused: {r.status_code} {r.text}")


def step_starting(hub, plan: Plan, server: dict | None, now: float, log) -> bool:
    """A plan whose start was asked for: running once the hub says its server is ready (True then), or
    asked again when the spawn was lost (the hub was killed during it)."""
    if server and server.get("ready"):
        state = server.get("state") or {}
        plan.phase, plan.ready_at = "running", now
        plan.pid = state.get("pid")
        plan.session_id = (state.get("gpu") or {}).get("session_id")
        log(f"{plan.user} ready ({plan.profile}, pid {plan.pid})")
        return True
    if server is None and time.monotonic() - plan.last_start > 5:
        if plan.start_requests >= 5:
            raise AssertionError(f"{plan.user} did not start after {plan.start_requests} requests")
        plan.notes.append(f"start requested again at {now:.1f}s")
        request_start(hub, plan, log)
    return False


def check_state_assignments(servers: dict[str, dict], conflicts: list[str]) -> None:
    """No GPU in the hub's state of two servers at once."""
    holders: dict[str, str] = {}
    for user, server in servers.items():
        for device in ((server.get("state") or {}).get("gpu") or {}).get("devices", []):
            if device in holders:
                conflicts.append(f"{device} held by {holders[device]} and {user}")
            holders[device] = user


# how late the hub's exit stamp may trail this test's own observation of a process's end (see report_and_check)
STAMP_SLACK = timedelta(seconds=1)


def report_and_check(plans, watch: ProcessWatch, state_conflicts, service_restarts, hub_down, ledger, hub) -> None:
    rows = {r.id: r for r in ledger.sessions()}
    procs = watch.servers
    print(f"{len(procs)} server processes seen, {len(rows)} ledger rows")
    print(f"the hub restarted the killed service after {service_restarts} s")
    print(f"hub down {[f'{a:%H:%M:%S.%f}-{b:%H:%M:%S.%f}' for a, b in hub_down]}")
    problems = []
    lags = []
    for proc in sorted(procs.values(), key=lambda p: p.started):
        plan = next((p for p in plans if p.session_id == proc.session_id), None)
        row = rows.get(proc.session_id)
        line = f"{proc.user} {proc.profile} {proc.session_id[:8]} started {proc.started:%H:%M:%S.%f}"
        if row is None:
            problems.append(f"{line}: NO LEDGER ROW (lost)")
            continue
        started, stopped = aware(row.started), aware(row.stopped)
        line += f" stopped {stopped:%H:%M:%S.%f}" if stopped else " still open"
        line += f" ({row.stop_reason}) {row.minutes} min {row.cost_micros} micros"
        if plan is not None and plan.delete_sent is not None and plan.gone is not None:
            # stopped by the test: the stop lies between the request and its confirmation
            low, high, why = plan.delete_sent, plan.gone, "[DELETE sent, confirmed gone]"
        else:
            # ended without a stop request (e.g. a server that could not reach a dead hub while starting):
            # between the last moment it was seen alive and the first it was seen gone, or, if the hub
            # was down meanwhile, when the restarted hub could see it
            # The hub stamps the end from a thread woken by the process's pidfd; on a loaded machine that thread
            # can wait for the GIL a little longer than this watcher does, so the stamp may trail the
            # watcher's "first seen gone" by a scheduling delay (0.05-0.2 s seen with both cores busy).
            gone = proc.gone + STAMP_SLACK if proc.gone else utcnow()
            low, high, why = proc.last_alive, gone, "[last seen alive, first seen gone + stamp slack]"
            for down, up in hub_down:
                if down <= high and up >= low:
                    # it ended while the hub was down: billed to the last evidence that it was alive (the
                    # service's last listing, its last sample + one push interval; docs/service.md), which can
                    # be older than the watcher's last sight of it, and never to the moment the hub came back
                    low, why = min(low, started), "[last evidence of life, first seen gone + stamp slack]"
            line += f"; ended by itself between {low:%H:%M:%S.%f} and {(proc.gone or low):%H:%M:%S.%f}"
        if stopped:
            lags.append((stopped - proc.last_alive).total_seconds())
            line += f"; recorded {(stopped - proc.last_alive).total_seconds():+.2f}s after the process was last seen"
        print(line + ("; " + "; ".join(plan.notes) if plan and plan.notes else ""))
        if started != proc.started:
            problems.append(f"{line}: started {started} != the server's JUPYTERHUB_GPU_STARTED {proc.started}")
        if stopped is None:
            problems.append(f"{line}: never closed")
            continue
        if not low <= stopped <= high:
            problems.append(
                f"{line}: stop outside {why} = [{low:%H:%M:%S.%f}, {high:%H:%M:%S.%f}]"
                f" by {(stopped - high).total_seconds() if stopped > high else (stopped - low).total_seconds():+.2f}s;"
                f" the truth is {billed_minutes(proc.started, low)}..{billed_minutes(proc.started, high)} minutes"
            )
        if row.minutes != billed_minutes(row.started, row.stopped):
            problems.append(f"{line}: minutes != ceil(seconds / 60)")
        if row.cost_micros != row.minutes * RATE_MICROS[proc.profile] or row.rate_micros != RATE_MICROS[proc.profile]:
            problems.append(f"{line}: cost != minutes × rate ({RATE_MICROS[proc.profile]})")
        if tuple(row.gpu_list) != proc.devices:
            problems.append(f"{line}: GPUs {row.gpu_list} != the server's {proc.devices}")
    if lags:
        mean = sum(lags) / len(lags)
        print(f"stops recorded after the process was last seen alive: max {max(lags):.2f}s, mean {mean:.2f}s")
    for sid in sorted(set(rows) - set(procs)):
        problems.append(f"ledger row {sid} ({rows[sid].user}) for no server process (phantom)")
    for plan in plans:
        if plan.session_id and plan.session_id not in procs:
            problems.append(f"{plan.user}: the hub's session {plan.session_id} was never seen as a process")
        proc = watch.by_pid(plan.pid) if plan.pid else None
        if plan.pid and (proc is None or proc.session_id != plan.session_id):
            problems.append(f"{plan.user}: the hub's pid {plan.pid} is not the server of session {plan.session_id}")
    if ledger.open_sessions():
        problems.append(f"open sessions left: {[(r.user, r.id) for r in ledger.open_sessions()]}")
    left = watch.alive_session_pids()
    if left:
        problems.append(f"processes of sessions left running (orphans): {left}")
    if watch.gpu_conflicts:
        problems.append(f"one GPU in two live server processes: {watch.gpu_conflicts[:5]}")
    if state_conflicts:
        problems.append(f"one GPU in two servers' hub state: {state_conflicts[:5]}")
    if watch.errors:
        problems.append(f"the process watcher failed: {watch.errors!r}")
    running = [u["name"] for u in hub.api("GET", "/users").json() if u.get("servers")]
    if running:
        problems.append(f"the hub still lists servers of {running}")
    assert not problems, "\n".join(problems) + hub_log_of(hub, problems)


def hub_log_of(hub, problems: list[str], lines: int = 40) -> str:
    """The hub's log lines about the users and sessions named in ``problems`` (the last ``lines``), for CI."""
    names = {word for p in problems for word in p.split()[:3] if re.fullmatch(r"[a-z]+\d+|[0-9a-f]{8}", word)}
    if not names:
        return ""
    about = [line for line in hub.log_text().splitlines() if any(n in line for n in names)]
    return f"\n--- the hub's log about {sorted(names)} (last {lines} lines) ---\n" + "\n".join(about[-lines:])


@pytest.fixture
def chaos_seed():
    return int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**32))


def test_kill_9_of_hub_and_service_during_20_sessions_sqlite(make_hub, tmp_path, chaos_seed):
    run_chaos(make_hub, tmp_path, f"sqlite:///{tmp_path / 'ledger.sqlite'}", chaos_seed)


@pytest.mark.postgres
def test_kill_9_of_hub_and_service_during_20_sessions_postgresql(make_hub, tmp_path, postgres_url, chaos_seed):
    run_chaos(make_hub, tmp_path, postgres_url, chaos_seed)


def test_a_server_that_dies_while_the_hub_is_dead_is_charged_to_its_stop(make_hub, tmp_path):
    """The deterministic core of the chaos above: the hub is killed, then its server; the hub comes back.

    The restarted hub finds the server dead. The ledger must close the session at the last
    evidence that it was alive (here the service's last listing, every 5 s: no samples are pushed),
    never after it died and never at the moment the hub came back (docs/service.md).
    """
    config = gpu_hub_config(tmp_path, min_minutes=0, tick=1, reconcile=5)
    hub = make_hub(config + "\nc.JupyterHub.cleanup_servers = False\n")
    watch = ProcessWatch(f"http://127.0.0.1:{hub.hub_port}/hub/api", str(tmp_path / "gpu_service_config.py"))
    try:
        check_dies_while_the_hub_is_dead(hub, tmp_path)
    finally:
        watch.scan()
        for pid in watch.alive_service_pids():  # the service orphaned by the hub kill
            stat = _stat(pid)
            if stat is not None and (hub.proc is None or stat.ppid != hub.proc.pid):
                _kill(pid)


def check_dies_while_the_hub_is_dead(hub, tmp_path) -> None:
    hub.create_users("dora")
    hub.start_server("dora", {"profile": "t4"})
    server = hub.wait_ready("dora")
    pid, sid = server["state"]["pid"], server["state"]["gpu"]["session_id"]
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}", migrate=False)
    time.sleep(8)  # the service reconciles with the hub meanwhile (every 5 s)
    hub.stop(signal.SIGKILL)
    died = utcnow()  # the server dies after this moment
    _kill(pid)
    wait_for(lambda: _dead(pid), 10, what="the server's death")
    time.sleep(3)
    hub.start()
    back = utcnow()
    wait_for(lambda: hub.server("dora") is None, 30, what="the restarted hub to see the server gone")
    record = wait_for(lambda: (r := ledger.get_session(sid)) and r.stopped and r, 30, what="the session closed")
    stopped = aware(record.stopped)
    assert died - timedelta(seconds=5 + 3) <= stopped <= died < back, (
        f"stopped {stopped} ({record.stop_reason}); the server died at {died}, the hub was back at {back}"
    )
    assert record.minutes == billed_minutes(record.started, record.stopped)
    ledger.close()
