"""kill -9 of either hub or either gpu service during 20 sessions on each of two hubs that share one ledger.

Two real hubs (``lab-a``, ``lab-b``), each with its own managed gpu service (``c.GPUService.hub_name`` and the
spawner's ``hub_name``), write one PostgreSQL ledger. The same user names run on both hubs, so a service that
reached a session of the other hub (metering, reconciling or stopping it) would show as a wrong stop, a
phantom or a lost row. The truth is the one of test_ledger_chaos.py: a watcher per hub reads /proc (each
hub's servers are the processes whose ``JUPYTERHUB_API_URL`` is that hub's), the test knows when it asked
for each stop and when the stop was confirmed. Then, per hub, exactly the checks of one hub
(:func:`~tests.chaos.test_ledger_chaos.report_and_check` over that hub's rows: one row per server process,
started to the microsecond, stopped within its bounds, ``ceil(seconds / 60)`` minutes at the rate), and
across the ledger: every row is of one of the two hubs, and each hub's rows are exactly its own processes
(a row recorded under the other hub is a phantom there and a loss here).

The hubs' restarts run in threads, so one hub keeps starting and stopping servers while the other is down.
``CHAOS_SEED=<n>`` replays a schedule.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.ledger.store import Ledger
from tests.chaos.test_ledger_chaos import (
    Plan,
    ProcessWatch,
    _dead,
    _kill,
    _stat,
    check_state_assignments,
    report_and_check,
    request_start,
    step_starting,
    utcnow,
)
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.chaos, pytest.mark.hub, pytest.mark.postgres, pytest.mark.timeout(900)]

HUBS = ("lab-a", "lab-b")
SESSIONS = 20  # on each hub
START_EVERY = 5.0  # seconds between session starts on one hub; the second hub starts half a step later
HUB_KILLS = 1  # of each hub (a restart takes tens of seconds on a busy machine)
SERVICE_KILLS = 2  # of each hub's service
MAX_T4 = 4  # each hub's simulated inventory has 4 T4s: never queue
#: the run gives up after this long (its loop took 7 to 9 minutes on 2 cores shared with other work)
GIVE_UP = 720


@dataclass
class HubRun:
    """One hub of the run: its processes, its plans, its kills and what was seen of them."""

    name: str
    hub: object
    watch: ProcessWatch
    plans: list[Plan]
    hub_kills: list[float]
    service_kills: list[float]
    down: bool = False
    up_since: float = 0.0  # when the hub last came up (the run's clock)
    hub_down: list[tuple[datetime, datetime]] = field(default_factory=list)
    service_restarts: list[float | None] = field(default_factory=list)
    state_conflicts: list[str] = field(default_factory=list)
    restarts: list[threading.Thread] = field(default_factory=list)
    restart_errors: list[BaseException] = field(default_factory=list)


class HubRows:
    """The ledger as one hub's checks read it: that hub's rows only."""

    def __init__(self, ledger: Ledger, hub: str):
        self.ledger, self.hub = ledger, hub

    def sessions(self):
        return self.ledger.sessions(hub=self.hub)

    def open_sessions(self):
        return self.ledger.open_sessions(hub=self.hub)


def two_hub_config(tmp_path: Path, name: str, db_url: str) -> str:
    """A hub of :func:`gpu_hub_config` in its own folder, its spawner and its service under the hub name ``name``."""
    folder = tmp_path / name
    folder.mkdir()
    config = gpu_hub_config(folder, db_url=db_url, min_minutes=0, tick=1, reconcile=5)
    service_config = folder / "gpu_service_config.py"
    service_config.write_text(service_config.read_text() + f"\nc.GPUService.hub_name = {name!r}\n")
    return config + f"\nc.JupyterHub.cleanup_servers = False\nc.GPULocalSpawner.hub_name = {name!r}\n"


def spaced(rng: random.Random, n: int, low: float, high: float, gap: float) -> list[float]:
    for _ in range(10_000):
        moments = sorted(rng.uniform(low, high) for _ in range(n))
        if all(b - a >= gap for a, b in itertools.pairwise(moments)):
            return moments
    return sorted(low + (high - low) * (k + 0.5) / n for k in range(n))


def make_plans(rng: random.Random, offset: float) -> list[Plan]:
    plans = []
    for i in range(SESSIONS):
        # a quarter of the sessions cross the one-minute boundary, the rest stay in their first minute
        duration = rng.uniform(50, 70) if i % 4 == 1 else rng.uniform(5, 40)
        plans.append(Plan(f"chaos{i:02d}", offset + i * START_EVERY, rng.random() < 0.6, duration))
    return plans


def run_two_hub_chaos(make_hub, tmp_path: Path, db_url: str, seed: int) -> None:
    rng = random.Random(seed)
    print(f"\ntwo-hub chaos seed {seed} on {db_url.split(':')[0]} (replay with CHAOS_SEED={seed})")
    last = (SESSIONS - 1) * START_EVERY + 20
    # every kill of either hub or service, spaced on one time line so that two never fall together
    per_hub = HUB_KILLS + SERVICE_KILLS
    moments = spaced(rng, len(HUBS) * per_hub, 6, last, 8)
    rng.shuffle(moments)
    runs: list[HubRun] = []
    for k, name in enumerate(HUBS):
        hub = make_hub(two_hub_config(tmp_path, name, db_url), name=name)
        plans = make_plans(rng, offset=k * START_EVERY / 2)
        hub.create_users(*(p.user for p in plans))  # the same user names on both hubs
        watch = ProcessWatch(f"http://127.0.0.1:{hub.hub_port}/hub/api", str(tmp_path / name / "gpu_service_config.py"))
        watch.start()
        mine = moments[k * per_hub : (k + 1) * per_hub]
        hub_kills, service_kills = sorted(mine[:HUB_KILLS]), sorted(mine[HUB_KILLS:])
        runs.append(HubRun(name, hub, watch, plans, hub_kills, service_kills))
        print(f"{name}: hub kills at {[round(t, 1) for t in hub_kills]} s, service kills at"
              f" {[round(t, 1) for t in service_kills]} s")  # fmt: skip
    t0 = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - t0

    def log(message: str) -> None:
        print(f"[{elapsed():6.1f}s] {message}")

    def kill_service(run: HubRun) -> bool:
        pids = run.watch.alive_service_pids()
        if not pids:
            return False  # its hub is (re)starting it: try again a little later
        for pid in pids:
            _kill(pid)
        log(f"{run.name} service kill: SIGKILL {pids}")
        killed_at = elapsed()

        def measure():
            back = _when_restarted(run.watch, pids, 90)
            run.service_restarts.append(round(back - t0 - killed_at, 1) if back else None)

        threading.Thread(target=measure, daemon=True).start()
        return True

    def kill_hub(run: HubRun) -> None:
        killed = utcnow()
        run.down = True
        run.hub.stop(signal.SIGKILL)
        down = rng.uniform(0, 2)
        log(f"{run.name} hub kill: SIGKILL, restarting in {down:.1f}s")

        def restart():
            time.sleep(down)
            try:
                run.hub.start()
            except BaseException as e:  # reported by the main loop, which stops the run
                run.restart_errors.append(e)
                return
            run.hub_down.append((killed, utcnow()))
            for p in run.plans:
                if p.phase == "stopping":
                    p.last_delete = 0  # ask again if the hub forgot the request
            run.up_since = elapsed()
            run.down = False
            log(f"{run.name} hub back up")

        thread = threading.Thread(target=restart, daemon=True)
        run.restarts.append(thread)
        thread.start()

    try:
        while any(p.phase != "done" for run in runs for p in run.plans):
            now = elapsed()
            if now > GIVE_UP:
                unfinished = [(run.name, p.user, p.phase) for run in runs for p in run.plans if p.phase != "done"]
                raise AssertionError(f"the run did not finish: {unfinished}")
            for run in runs:
                if run.restart_errors:
                    raise AssertionError(f"{run.name} did not come back after its kill: {run.restart_errors[0]}")
                # never while its hub starts: JupyterHub gives up its start when a managed service dies then
                if run.service_kills and now >= run.service_kills[0] and not run.down and kill_service(run):
                    run.service_kills.pop(0)
                # a hub is killed again only once it has run a while (its restart is what is under test)
                if run.hub_kills and now >= run.hub_kills[0] and not run.down and now - run.up_since > 5:
                    run.hub_kills.pop(0)
                    kill_hub(run)
                if not run.down:
                    step_hub(run, now, log)
            time.sleep(0.3)
        log("all sessions done on both hubs")
        for run in runs:
            for thread in run.restarts:
                thread.join(120)
            # each hub brings its killed service back (it polls its managed services)
            wait_for(run.watch.alive_service_pids, 90, what=f"a gpu service of {run.name} restarted by its hub")
        time.sleep(1)
        for run in runs:
            run.watch.stop()
        ledger = Ledger(db_url, migrate=False)
        try:
            check_two_hubs(runs, ledger)
        finally:
            ledger.close()
    finally:
        for run in runs:
            run.watch.stop()
            for pid, sid in run.watch.alive_session_pids().items():
                print(f"killing leftover process {pid} of session {sid} ({run.name})")
                _kill(pid)
            for pid in run.watch.alive_service_pids():
                stat = _stat(pid)
                if stat is not None and (run.hub.proc is None or stat.ppid != run.hub.proc.pid):
                    _kill(pid)  # a service orphaned by a hub kill: the hub's cleanup stops only its own


def _when_restarted(watch: ProcessWatch, killed: list[int], timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if [p for p in watch.alive_service_pids() if p not in killed]:
            return time.monotonic()
        time.sleep(0.2)
    return None


def step_hub(run: HubRun, now: float, log) -> None:
    """One pass over a hub's plans: start, notice ready, stop and confirm, as test_ledger_chaos.py's driver."""
    hub, plans = run.hub, run.plans
    try:
        listing = hub.api("GET", "/users").json()
    except (requests.RequestException, ValueError) as e:
        log(f"{run.name} listing failed: {e}")
        return
    servers = {u["name"]: u["servers"][""] for u in listing if "" in (u.get("servers") or {})}
    check_state_assignments(servers, run.state_conflicts)
    t4_busy = sum(1 for p in plans if p.profile == "t4" and p.phase in ("starting", "running", "stopping"))

    def say(message: str) -> None:
        log(f"{run.name} {message}")

    for p in plans:
        if run.down:
            return  # killed meanwhile: the rest waits for its restart
        server = servers.get(p.user)
        try:
            if p.phase == "waiting" and now >= p.start_at:
                p.profile = "t4" if p.wants_gpu and t4_busy < MAX_T4 else "cpu"
                t4_busy += p.profile == "t4"
                request_start(hub, p, say)
                p.phase = "starting"
            elif p.phase == "starting":
                if step_starting(hub, p, server, now, say):
                    say(f"{p.user} stops in {p.duration:.0f}s")
            elif p.phase == "running" and now >= p.ready_at + p.duration:
                p.delete_sent = utcnow()
                p.last_delete = now
                r = hub.stop_server(p.user)
                say(f"{p.user} DELETE -> {r.status_code}")
                p.phase = "stopping"
                if r.status_code == 204 and p.pid and _dead(p.pid):
                    p.gone, p.phase = utcnow(), "done"
            elif p.phase == "stopping":
                proc = run.watch.by_pid(p.pid) if p.pid else None
                if server is None and (proc is None or proc.gone is not None):
                    p.gone, p.phase = utcnow(), "done"
                    say(f"{p.user} gone ({(p.gone - p.delete_sent).total_seconds():.1f}s after DELETE)")
                elif server is not None and not server.get("pending") and now - p.last_delete > 3:
                    p.last_delete = now
                    r = hub.stop_server(p.user)
                    p.notes.append(f"DELETE sent again at {now:.1f}s -> {r.status_code}")
        except requests.RequestException as e:  # the hub died under the request: its restart comes next
            say(f"{p.user}: {e}")
            if p.phase == "stopping" and p.delete_sent is not None and p.gone is None:
                p.last_delete = 0
            return


def check_two_hubs(runs: list[HubRun], ledger: Ledger) -> None:
    problems = []
    names = {run.name for run in runs}
    stray = [(r.id, r.user, r.hub) for r in ledger.sessions() if r.hub not in names]
    if stray:
        problems.append(f"ledger rows of no hub of this run: {stray}")
    for run in runs:
        print(f"--- {run.name}: {len(run.watch.servers)} server processes")
        try:
            report_and_check(
                run.plans,
                run.watch,
                run.state_conflicts,
                run.service_restarts,
                run.hub_down,
                HubRows(ledger, run.name),
                run.hub,
            )
        except AssertionError as e:
            problems.append(f"{run.name}:\n{e}")
    assert not problems, "\n".join(problems + closers(runs))


#: what each hub's log (its gpu service's lines too) says of the sessions its service closed and of its starts
CLOSER_LINES = ("reconciled with the hub", "init_spawners did not complete", " spawners in ")


def closers(runs: list[HubRun]) -> list[str]:
    """Which service closed what, and how long each hub's start loaded its spawners: a closed session is named
    in the log of the hub whose service closed it."""
    lines = ["--- closes by each hub's service, and each hub's spawner loading (from the hubs' logs):"]
    for run in runs:
        lines += [
            f"{run.name}: {line}" for line in run.hub.log_text().splitlines() if any(w in line for w in CLOSER_LINES)
        ]
    return lines


@pytest.fixture
def chaos_seed():
    return int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**32))


def test_kill_9_of_either_hub_or_service_during_20_sessions_on_each_of_two_hubs(
    make_hub, tmp_path, postgres_url, chaos_seed
):
    run_two_hub_chaos(make_hub, tmp_path, postgres_url, chaos_seed)
