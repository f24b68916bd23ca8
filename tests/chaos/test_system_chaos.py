"""System chaos: kill -9 of the hub, the gpu service, single-user servers and containers, with N sessions running.

Builds on the process watcher of test_ledger_chaos.py (the truth comes from
/proc, not from the hub or the ledger) and adds what that test does not do:

- **server kills**: a running single-user server is killed with SIGKILL; its
  session must be charged to the moment it died (between the last moment it was
  seen alive and the first it was seen gone, or when the restarted hub could see
  it if the hub was down), exactly once;
- **the culler after hub restarts** (the class of bug in jupyterhub #4574): some
  users are in a group whose cull rule is ``max_age`` 2 minutes; their sessions
  outlive hub kills, and must still be warned and then stopped by the service at
  2 minutes (stop reason ``max_age``), and after each hub restart every server
  that was running must still be listed by the hub (else the culler could not stop it);
- **GPU accounting**: never one GPU in two live servers (processes' environments
  and the hub's state), and at the end the spawn page shows every GPU free again
  (none leaked);

plus, for containers (``docker`` marker): a container killed while the hub is up
and one killed while the hub is dead are charged to their real end (Docker's
``State.FinishedAt``), every container carries the ``jupyterhub-gpu.*`` labels,
and once the hub has seen them gone no container of this hub is left behind.

N = 20 here (``SYSTEM_CHAOS_SESSIONS``); ``python benchmarks/chaos.py`` is the long
run (N = 100). The ledger is on PostgreSQL in the first test (test_ledger_chaos.py
runs the hub/service kills on both databases), on sqlite in the container test.
``CHAOS_SEED=<n>`` replays a schedule.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.ledger.store import Ledger
from tests.chaos.test_ledger_chaos import (
    Plan,
    ProcessWatch,
    _dead,
    _kill,
    _stat,
    _when,
    check_state_assignments,
    report_and_check,
    request_start,
    step_starting,
)
from tests.conftest import wait_for
from tests.docker.test_docker_spawner import IMAGE, docker, remove_by_prefix
from tests.docker.test_docker_spawner import config as docker_hub_config
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.chaos, pytest.mark.hub]

CULL_MINUTES = 2
CULL_GROUP = "cullers"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def aware(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=timezone.utc) if moment is not None and moment.tzinfo is None else moment


@dataclass
class Schedule:
    plans: list[Plan]
    cullable: set[str]
    hub_kills: list[float]
    service_kills: list[float]
    server_kills: list[float]


@dataclass
class Outcome:
    """What a run measured, for the test's report and the benchmark's table."""

    sessions: int = 0
    hub_kills: int = 0
    service_kills: int = 0
    server_kills: int = 0
    culled: int = 0
    ledger_rows: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def make_schedule(rng: random.Random, sessions: int, start_every: float) -> Schedule:
    plans, cullable = [], set()
    n_cull = max(2, sessions // 8)
    for i in range(sessions):
        user = f"sys{i:03d}"
        if i < n_cull:
            # started first, never stopped by the test: the service culls them at CULL_MINUTES, after hub kills
            plans.append(Plan(user, i * start_every, i % 2 == 0, duration=10**6))
            cullable.add(user)
        else:
            duration = rng.uniform(50, 75) if i % 4 == 1 else rng.uniform(15, 45)
            plans.append(Plan(user, i * start_every, rng.random() < 0.6, duration))
    last_start = (sessions - 1) * start_every
    window = max(last_start, CULL_MINUTES * 60 - 20)

    def spaced(n, low, high, gap):
        for _ in range(10_000):
            moments = sorted(rng.uniform(low, high) for _ in range(n))
            if all(b - a >= gap for a, b in itertools.pairwise(moments)):
                return moments
        return sorted(low + (high - low) * (k + 0.5) / n for k in range(n))

    n_hub = 2 if sessions <= 30 else 4
    n_service = 2 if sessions <= 30 else 4
    n_server = 3 if sessions <= 30 else 10
    return Schedule(
        plans,
        cullable,
        hub_kills=spaced(n_hub, 20, window, 25),
        service_kills=spaced(n_service, 10, window, 10),
        server_kills=spaced(n_server, 12, last_start + 10, 3),
    )


def system_config(tmp_path: Path, db_url: str, sessions: int, cull_users: list[str]) -> str:
    config = gpu_hub_config(tmp_path, db_url=db_url, min_minutes=0, tick=1, reconcile=5)
    # the culling rule of this run: only the cull group's sessions, at CULL_MINUTES, warned a minute before
    service_config = tmp_path / "gpu_service_config.py"
    rule = {"kind": "max_age", "minutes": CULL_MINUTES, "warn_minutes": 1}
    service_config.write_text(
        service_config.read_text()
        + f"\nc.GPUService.cull_rules = {{'default': [], 'groups': {{{CULL_GROUP!r}: [{rule!r}]}}}}\n"
    )
    return (
        config
        + f"""
c.JupyterHub.cleanup_servers = False
c.Spawner.poll_interval = 3
c.GPULocalSpawner.simulated_gpus = [
    {{"model": "T4", "count": {max(24, sessions)}, "memory_gb": 16}},
    {{"model": "A100", "count": 1, "memory_gb": 40}},
]
c.JupyterHub.load_groups[{CULL_GROUP!r}] = {{"users": {cull_users!r}}}
"""
    )


def run_system_chaos(make_hub, tmp_path: Path, db_url: str, seed: int, sessions: int = 20,
                     start_every: float = 3.0, log_to=print) -> Outcome:  # fmt: skip
    """The whole run; raises AssertionError listing every problem found."""
    rng = random.Random(seed)
    schedule = make_schedule(rng, sessions, start_every)
    plans = schedule.plans
    outcome = Outcome(sessions=sessions)
    log_to(f"\nsystem chaos, seed {seed}, {sessions} sessions on {db_url.split(':')[0]} (CHAOS_SEED={seed} replays)")
    log_to(
        f"hub kills at {[round(t) for t in schedule.hub_kills]} s, service kills at"
        f" {[round(t) for t in schedule.service_kills]} s, server kills at"
        f" {[round(t) for t in schedule.server_kills]} s; culled by the service: {sorted(schedule.cullable)}"
    )
    hub = make_hub(system_config(tmp_path, db_url, sessions, sorted(schedule.cullable)))
    hub.create_users(*(p.user for p in plans))
    watch = ProcessWatch(f"http://127.0.0.1:{hub.hub_port}/hub/api", str(tmp_path / "gpu_service_config.py"))
    watch.start()
    state_conflicts: list[str] = []
    hub_down: list[tuple[datetime, datetime]] = []
    service_restarts: list[float | None] = []
    problems: list[str] = []
    killed: dict[str, datetime] = {}  # user -> when its server was killed
    t0 = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - t0

    def log(message: str) -> None:
        log_to(f"[{elapsed():6.1f}s] {message}")

    def kill_service() -> bool:
        pids = watch.alive_service_pids()
        if not pids:
            return False  # being restarted by the hub: try again a little later
        for pid in pids:
            _kill(pid)
        outcome.service_kills += 1
        log(f"service kill: SIGKILL {pids or 'nothing alive'}")
        killed_at = elapsed()

        def measure():
            back = _when(lambda: [p for p in watch.alive_service_pids() if p not in pids], 90)
            service_restarts.append(round(back - t0 - killed_at, 1) if back else None)

        threading.Thread(target=measure, daemon=True).start()
        return True

    def kill_hub() -> bool:
        running = {p.user for p in plans if p.phase == "running"}
        down_at = utcnow()
        hub.stop(signal.SIGKILL)
        pause = rng.uniform(0, 2)
        log(f"hub kill: SIGKILL, restarting in {pause:.1f}s")
        time.sleep(pause)
        hub.start()
        hub_down.append((down_at, utcnow()))
        outcome.hub_kills += 1
        log("hub back up")
        # jupyterhub #4574 class: after a restart the hub must still list every server that was running and
        # still is, or the culler (which stops servers through the hub) could never stop it
        listing = {u["name"]: u["servers"].get("") for u in hub.api("GET", "/users").json() if u.get("servers")}
        alive_users = {p.user for p in watch.alive_servers()}
        for user in sorted(running & alive_users):
            if user not in killed and not listing.get(user):
                problems.append(
                    f"after the hub restart at {elapsed():.0f}s the hub does not list {user}'s running server"
                )
        return True

    def kill_server() -> bool:
        candidates = [p for p in plans if p.phase == "running" and p.pid and p.user not in schedule.cullable]
        if not candidates:
            return False
        plan = rng.choice(candidates)
        killed[plan.user] = utcnow()
        # a stop asked for by SIGKILL: charged between the kill and the hub seeing the server gone
        plan.delete_sent = killed[plan.user]
        _kill(plan.pid)
        plan.phase = "killed"
        outcome.server_kills += 1
        plan.notes.append(f"server SIGKILLed at {elapsed():.1f}s")
        log(f"server kill: SIGKILL {plan.user}'s server (pid {plan.pid})")
        return True

    try:
        pending = {
            "hub": list(schedule.hub_kills),
            "service": list(schedule.service_kills),
            "server": list(schedule.server_kills),
        }
        actions = {"hub": kill_hub, "service": kill_service, "server": kill_server}
        deadline = max(p.start_at for p in plans) + CULL_MINUTES * 60 + 240
        while any(p.phase != "done" for p in plans):
            now = elapsed()
            if now > deadline:
                unfinished = [(p.user, p.phase) for p in plans if p.phase != "done"]
                raise AssertionError(f"the run did not finish: {unfinished}")
            for kind, moments in pending.items():
                if kind == "hub" and hub_down and (utcnow() - hub_down[-1][1]).total_seconds() < 15:
                    continue  # a slow restart ate the gap: let the restarted hub work a while first
                if moments and now >= moments[0]:
                    if not actions[kind]():
                        moments[0] = now + 2  # nothing to kill right now
                        continue
                    moments.pop(0)
                    if kind == "hub":
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
            for p in plans:
                server = servers.get(p.user)
                if p.phase == "waiting" and now >= p.start_at:
                    p.profile = "t4" if p.wants_gpu else "cpu"
                    request_start(hub, p, log)
                    p.phase = "starting"
                elif p.phase == "starting":
                    step_starting(hub, p, server, now, log)
                elif p.phase == "running" and p.user in schedule.cullable:
                    if server is None:  # stopped by the service's culler
                        p.gone, p.phase = utcnow(), "done"
                        # a stop asked for by the culler: charged between its due time and the hub seeing it gone
                        proc = watch.servers.get(p.session_id or "")
                        if proc is not None:
                            p.delete_sent = proc.started + timedelta(minutes=CULL_MINUTES)
                        log(f"{p.user} culled")
                elif p.phase == "running" and now >= p.ready_at + p.duration:
                    p.delete_sent, p.last_delete = utcnow(), now
                    r = hub.stop_server(p.user)
                    log(f"{p.user} DELETE -> {r.status_code}")
                    p.phase = "stopping"
                    if r.status_code == 204 and p.pid and _dead(p.pid):
                        p.gone, p.phase = utcnow(), "done"
                elif p.phase == "killed":
                    if server is None:  # the hub saw it die
                        p.gone, p.phase = utcnow(), "done"
                        log(f"{p.user}'s killed server is gone from the hub")
                elif p.phase == "stopping":
                    proc = watch.by_pid(p.pid) if p.pid else None
                    if server is None and (proc is None or proc.gone is not None):
                        p.gone, p.phase = utcnow(), "done"
                        log(f"{p.user} gone")
                    elif server is not None and not server.get("pending") and now - p.last_delete > 3:
                        p.last_delete = now
                        r = hub.stop_server(p.user)
                        p.notes.append(f"DELETE sent again at {now:.1f}s -> {r.status_code}")
            time.sleep(0.3)
        log("all sessions done")
        wait_for(watch.alive_service_pids, 90, what="a gpu service process restarted by the hub")
        time.sleep(1)
        watch.stop()
        outcome.seconds = elapsed()
        ledger = Ledger(db_url, migrate=False)
        try:
            rows = ledger.sessions()
            outcome.ledger_rows = len(rows)
            check_culled(plans, schedule.cullable, ledger, hub_down, watch, problems)
            outcome.culled = sum(1 for r in rows if r.stop_reason == "max_age")
            check_no_gpu_leaked(hub, plans[0].user, problems)
            log_to(f"the hub restarted the killed service after {service_restarts} s")
            try:
                report_and_check(plans, watch, state_conflicts, service_restarts, hub_down, ledger, hub)
            except AssertionError as e:
                problems.append(str(e))
        finally:
            ledger.close()
    finally:
        watch.stop()
        for pid, sid in watch.alive_session_pids().items():
            log_to(f"killing leftover process {pid} of session {sid}")
            _kill(pid)
        for pid in watch.alive_service_pids():
            stat = _stat(pid)
            if stat is not None and (hub.proc is None or stat.ppid != hub.proc.pid):
                _kill(pid)
    outcome.problems = problems
    log_to(
        f"system chaos: {outcome.sessions} sessions, {outcome.hub_kills} hub kills, {outcome.service_kills} service"
        f" kills, {outcome.server_kills} server kills, {outcome.culled} culled, {outcome.ledger_rows} ledger rows,"
        f" {len(problems)} problems, {outcome.seconds:.0f}s"
    )
    assert not problems, "\n".join(problems)
    return outcome


def uncovered(intervals: list[tuple[datetime, datetime]], start: datetime, end: datetime) -> timedelta:
    """How much of [start, end] no interval covers."""
    gap, at = timedelta(), start
    for low, high in sorted(intervals):
        if high <= at:
            continue
        if low > at:
            gap += min(low, end) - at
        at = max(at, high)
        if at >= end:
            return gap
    return gap + max(timedelta(), end - at)


def check_culled(plans, cullable: set[str], ledger: Ledger, hub_down, watch, problems: list[str]) -> None:
    """The cull group's sessions were warned, then stopped by the culler at CULL_MINUTES.

    The culler runs in the service and stops through the hub: while either is down (killed, or being
    restarted) nothing can be culled, so those moments add to the allowed lateness. A warning that came
    late (the service was down when it was due) moves the stop: a server is never stopped sooner than a
    minute (``warn_minutes``) after its warning.
    """
    now = utcnow()
    service_up = [(first, gone or now) for first, gone in watch.service_pids.values()]
    dues = sorted(
        aware(r.started) + timedelta(minutes=CULL_MINUTES)
        for p in plans
        if p.user in cullable and p.session_id and (r := ledger.get_session(p.session_id)) is not None
    )
    for plan in plans:
        if plan.user not in cullable or plan.session_id is None:
            continue
        row = ledger.get_session(plan.session_id)
        if row is None or row.stopped is None:
            problems.append(f"{plan.user}: culled session {plan.session_id} not closed")
            continue
        started, stopped = aware(row.started), aware(row.stopped)
        warned = sorted(aware(n.created) for n in ledger.notices(plan.user, include_dismissed=True) if n.kind == "cull")
        if not warned or warned[0] > stopped:
            problems.append(f"{plan.user}: stopped without an idle warning first ({warned})")
            continue
        due = max(started + timedelta(minutes=CULL_MINUTES), warned[0] + timedelta(minutes=1))
        # the culler stops due servers one after the other, each through the hub: allow a few seconds for each
        # other cull due at the same time or before (measured: ~2.5 s per stop at N = 100 on 2 busy cores)
        queue = sum(1 for d in dues if d <= due) - 1
        late = timedelta(seconds=20 + 5 * queue) + uncovered(service_up, due, stopped)
        late += sum(
            ((min(up, stopped) - max(down, due)) for down, up in hub_down if down <= stopped and up >= due), timedelta()
        )
        if row.stop_reason != "max_age":
            problems.append(f"{plan.user}: stopped as {row.stop_reason!r}, not by the culler (max_age)")
        if not started + timedelta(minutes=CULL_MINUTES) <= stopped <= due + late:
            problems.append(f"{plan.user}: culled at {stopped}, due at {due} (allowed lateness {late})")
        if row.minutes != billed_minutes(row.started, row.stopped):
            problems.append(f"{plan.user}: minutes {row.minutes} != ceil(seconds / 60)")


def check_no_gpu_leaked(hub, user: str, problems: list[str]) -> None:
    """With every server stopped, the spawn page shows every GPU of every model free."""
    page = hub.login(user).get(f"{hub.url}/hub/spawn", timeout=30).text
    counts = [(int(a), int(b)) for a, b in re.findall(r"(\d+) of (\d+) free", page)]
    if not counts:
        problems.append(f"the spawn page shows no GPU counts: {page[:300]!r}")
    for free, total in counts:
        if free != total:
            problems.append(f"GPU leaked: the spawn page shows {free} of {total} free with no server running")


@pytest.fixture
def chaos_seed():
    return int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(2**32))


@pytest.mark.postgres
@pytest.mark.timeout(600)
def test_kill_9_of_hub_service_and_servers_during_20_sessions(make_hub, tmp_path, postgres_url, chaos_seed):
    sessions = int(os.environ.get("SYSTEM_CHAOS_SESSIONS") or 20)
    outcome = run_system_chaos(make_hub, tmp_path, postgres_url, chaos_seed, sessions=sessions)
    assert outcome.hub_kills >= 2 and outcome.service_kills >= 2 and outcome.server_kills >= 1
    assert outcome.culled >= 2


# -- containers -------------------------------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_container_kills_are_charged_to_their_end_and_leave_no_container(make_hub, tmp_path):
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"test image {IMAGE} missing: run `make test-image`")
    prefix = f"jhgpu-chaos-{uuid.uuid4().hex[:6]}"
    datasets = f"{prefix}-datasets"
    docker("volume", "create", datasets)
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    extra = f"""
c.JupyterHub.cleanup_servers = False
c.Spawner.poll_interval = 2
c.GPUDockerSpawner.ledger_db_url = {db_url!r}
"""
    hub = make_hub(docker_hub_config(datasets, prefix) + extra)
    try:
        check_container_kills(hub, prefix, db_url)
    finally:
        hub.cleanup()
        remove_by_prefix(prefix)


def containers_of(prefix: str) -> dict[str, dict]:
    """Every container of this hub (running or not), by id, with its labels and state."""
    ids = docker("ps", "-aq", "--filter", f"name={prefix}").split()
    if not ids:
        return {}
    return {c["Id"]: c for c in json.loads(docker("inspect", *ids))}


def check_container_kills(hub, prefix: str, db_url: str) -> None:
    users = ["ctr0", "ctr1", "ctr2"]
    hub.create_users(*users)
    for user in users:
        assert hub.start_server(user, {"profile": "t4"}).status_code in (201, 202)
    state = {user: hub.wait_ready(user, timeout=150)["state"] for user in users}
    devices = [d for s in state.values() for d in s["gpu"]["devices"]]
    assert len(devices) == len(set(devices)) == 3, devices  # three GPUs, one each
    problems: list[str] = []
    for cid, info in containers_of(prefix).items():
        labels = info["Config"]["Labels"]
        for key in ("managed", "user", "session-id", "gpus", "profile"):
            if f"jupyterhub-gpu.{key}" not in labels:
                problems.append(f"container {cid[:12]} lacks the label jupyterhub-gpu.{key}")
    ledger = Ledger(db_url, migrate=False)
    try:
        # 1. a container killed while the hub is up
        before = utcnow()
        docker("kill", state["ctr0"]["object_id"])
        after = utcnow()
        wait_for(lambda: hub.server("ctr0") is None, 30, what="the hub to see ctr0's container dead")
        # 2. the hub killed, then a container killed while it is down, then the hub back
        hub.stop(signal.SIGKILL)
        before1 = utcnow()
        docker("kill", state["ctr1"]["object_id"])
        after1 = utcnow()
        # and a container of this hub that no server names: what a hub killed in the middle of a spawn
        # leaves behind (launched, state never saved)
        ctr2_env = json.loads(docker("inspect", state["ctr2"]["object_id"]))[0]["Config"]["Env"]
        api_url = next(e for e in ctr2_env if e.startswith("JUPYTERHUB_API_URL="))
        orphan = docker(
            "run", "-d", "--network", "host", "--name", f"{prefix}-orphan",
            "--label", "jupyterhub-gpu.managed=true", "--label", "jupyterhub-gpu.session-id=orphan-session",
            "-e", api_url, "-e", "JUPYTERHUB_GPU_SESSION_ID=orphan-session", IMAGE, "sleep", "600",
        ).strip()  # fmt: skip
        time.sleep(2)
        hub.start()
        if not _when(lambda: orphan not in containers_of(prefix), 30):
            problems.append(f"the restarted hub left the orphan container {orphan[:12]} of an interrupted spawn")
        wait_for(lambda: hub.server("ctr1") is None, 30, what="the restarted hub to see ctr1's container dead")
        if not hub.server("ctr2") or not hub.server("ctr2").get("ready"):
            problems.append("the restarted hub lost ctr2's running container")
        for user, low, high in (("ctr0", before, after), ("ctr1", before1, after1)):
            sid = state[user]["gpu"]["session_id"]
            row = wait_for(lambda s=sid: (r := ledger.get_session(s)) and r.stopped and r, 30, what=f"{user} closed")
            stopped = aware(row.stopped)
            # Docker's FinishedAt: the real end, between sending the kill and its return
            if not low - timedelta(seconds=1) <= stopped <= high + timedelta(seconds=1):
                problems.append(f"{user}: stopped {stopped}, killed between {low} and {high} ({row.stop_reason})")
            if row.minutes != billed_minutes(row.started, row.stopped):
                problems.append(f"{user}: minutes {row.minutes} != ceil(seconds / 60)")
        # reconcile: a dead server's container is removed once the hub has seen it dead (remove = True), so
        # nothing of a finished session stays on the host; every container left is one the hub runs
        for user in ("ctr0", "ctr1"):
            cid = state[user]["object_id"]
            if not _when(lambda c=cid: c not in containers_of(prefix), 15):
                problems.append(f"{user}'s killed container {cid[:12]} is still on the host after the hub saw it dead")
        running = {s["object_id"] for u in users if (s := (hub.server(u) or {}).get("state"))}
        for cid, info in containers_of(prefix).items():
            if info["State"]["Running"] and cid not in running:
                problems.append(f"orphan: container {cid[:12]} ({info['Config']['Labels']}) runs unknown to the hub")
        # the freed GPUs are handed out again, never the one ctr2 still holds
        for user in ("ctr0", "ctr1"):
            assert hub.start_server(user, {"profile": "t4"}).status_code in (201, 202)
        again = {u: hub.wait_ready(u, timeout=150)["state"]["gpu"]["devices"] for u in ("ctr0", "ctr1")}
        held = [*again["ctr0"], *again["ctr1"], *state["ctr2"]["gpu"]["devices"]]
        if len(set(held)) != 3:
            problems.append(f"one GPU given twice after the kills: {held}")
        for user in users:
            hub.stop_server(user)
        for user in users:
            hub.wait_stopped(user, timeout=60)
        left = containers_of(prefix)
        if left:
            states = {
                cid[:12]: (c["Config"]["Labels"].get("jupyterhub-gpu.user"), c["State"]["Status"])
                for cid, c in left.items()
            }
            problems.append(f"containers left after every server stopped: {states}")
        if ledger.open_sessions():
            problems.append(f"open sessions left: {[(r.user, r.id) for r in ledger.open_sessions()]}")
    finally:
        ledger.close()
    assert not problems, "\n".join(problems)
