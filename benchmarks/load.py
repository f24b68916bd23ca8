"""Benchmark: 1,000 clients on the gpu service at the Lab extension's real cadence, through a real hub.

A real JupyterHub (tests/conftest.py's ``Hub``: configurable-http-proxy, the hub,
and the real gpu service it manages) with ``--users`` users, each with their own
API token (made through the hub's REST API) and one open session in the ledger
(simulated T4). No single-user server process is started: ``--clients`` clients
play what each running server's extension does with the service, on loopback,
through the proxy, with that user's token:

- every ``--push`` seconds (the server extension's ``push_interval``, 30 s):
  ``POST api/v1/samples`` (its GPU samples since the last push), then
  ``GET api/v1/me`` (budget, sessions and notices shown in JupyterLab);
- the browser's own Lab extension polls its *server* every 5 s (``pollInterval``),
  and only that server talks to the service, so the 30 s cadence is what the
  service sees per session. ``--push 5`` is the stress case (every poll reaching
  the service).

Each client starts at a random offset in the first period, so the load is spread
as it is in a lab. For ``--seconds`` every request's latency is recorded; the
table gives the request rate, p50/p90/p99/max latency, errors (non-2xx or no
answer), and the service's and the hub's CPU and memory (``/proc``) over the run.
A second table leaves out the first round (in which the service checks each
token with the hub once; it caches the answer for 60 s).

With ``--hubs N``, N hubs, each with its own gpu service (``c.GPUService.hub_name`` = ``hub0``...), its own
users and ``--clients`` clients, share one ledger (``--db postgresql``: a throwaway PostgreSQL server, as the
tests start it). A client answered 503 (the service's writer is behind) sends the same sample again after
``Retry-After``, as the server extension does; every sample answered 201 is then looked for in the ledger
(``--check``: exit 1 when one is missing). Per service, each tick's time and ledger statements are read from
the service's log (``tick: ... s, ... ledger statements``; absent in code before that line).

The code measured is the ``jupyterhub_gpu`` Python imports: set ``PYTHONPATH`` to a git worktree of an earlier
commit to measure it with this same script (the hubs and services it starts inherit the environment).

Usage::

    .venv/bin/python benchmarks/load.py [--clients 1000] [--seconds 120] [--push 30] [--hubs 1] [--db sqlite]

Needs ``make venv`` (configurable-http-proxy in .venv/bin). Takes ``--seconds`` plus
about a minute (1,000 tokens are made through the hub's API first).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: an earlier worktree's jupyterhub_gpu is the one measured

from sqlalchemy import text  # noqa: E402

import jupyterhub_gpu  # noqa: E402
from jupyterhub_gpu.ledger.store import Ledger  # noqa: E402
from jupyterhub_gpu.service.app import GPUService  # noqa: E402
from jupyterhub_gpu.session import SessionStart  # noqa: E402
from tests.conftest import Hub, PostgresServer, postgres_bin_dir, wait_for  # noqa: E402
from tests.service.conftest import gpu_hub_config  # noqa: E402

SERVICE_OPTIONS = GPUService.class_traits(config=True)
TICK_LINE = re.compile(
    r"tick: ([0-9.]+) s, ([0-9]+) ledger statements"
    r"(?:; ([0-9]+) writes, ([0-9.]+) s on the writer \(longest ([0-9.]+) s\);"
    r" the requests' loop lag p99 ([0-9.]+) ms, max ([0-9.]+) ms)?"
)

CLK = os.sysconf("SC_CLK_TCK")


def proc_usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def find_service_pid(marker: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "jupyterhub_gpu.service" in cmdline and marker in cmdline:
                return int(entry.name)
    raise RuntimeError("the gpu service process was not found")


def make_tokens(hub: Hub, names: list[str]) -> dict[str, str]:
    """One token per user's default server, as the hub gives it to the server (the spawner's
    ``server_token_scopes``: only the session's own server may push its samples), made by the hub's
    admin service token (scope ``tokens``)."""
    session = requests.Session()
    session.headers["Authorization"] = f"token {hub.token}"
    tokens = {}
    for name in names:
        scopes = [f"servers!server={name}/", f"access:servers!server={name}/", "access:services!service=gpu"]
        r = session.post(f"{hub.api_url}/users/{name}/tokens", json={"note": "load", "scopes": scopes}, timeout=30)
        r.raise_for_status()
        tokens[name] = r.json()["token"]
    return tokens


def seed_sessions(ledger: Ledger, names: list[str], prefix: str = "load") -> dict[str, str]:
    now = datetime.now(timezone.utc)
    ids = {}
    for i, name in enumerate(names):
        sid = f"{prefix}-{i:05d}"
        ledger.record_start(
            SessionStart(
                id=sid,
                user=name,
                server_name="",
                groups=("cs231n",),
                profile="t4",
                gpus=(f"GPU-sim-t4-{i}",),
                rate_micros=50_000,
                currency="CNY",
                started=now - timedelta(minutes=random.randint(1, 120)),
                simulated=True,
            )
        )
        ids[name] = sid
    return ids


async def client(
    http, hub: int, base: str, token: str, session_id: str, push: float, until: float, results: list, acked: list
) -> None:
    headers = {"Authorization": f"token {token}"}
    await asyncio.sleep(random.uniform(0, push))
    unsent: list[dict] = []  # samples answered 503: sent again, as the server extension does
    while time.monotonic() < until:
        began = time.monotonic()
        unsent.append(
            {
                "session_id": session_id,
                "sampled_until": datetime.now(timezone.utc).isoformat(),
                "interval_seconds": push,
                "samples": 15,
                "utilization_avg": random.uniform(0, 100),
                "memory_used_max_mib": random.randint(0, 16_000),
                "memory_total_mib": 16_384,
                "kernels": 1,
                "busy_kernels": random.randint(0, 1),
            }
        )
        retry = 0.0
        while unsent:
            status, retry = await request(http, hub, base, headers, "POST", "samples", unsent[0], results)
            if status == 201:
                acked.append((session_id, unsent.pop(0)["sampled_until"], time.monotonic()))
            elif status == 503:
                break  # kept; sent again after Retry-After
            else:
                unsent.pop(0)  # refused or lost: not acknowledged
        await request(http, hub, base, headers, "GET", "me", None, results)
        if unsent and retry < push:
            await asyncio.sleep(retry)
            continue
        await asyncio.sleep(max(0.0, push - (time.monotonic() - began)))


async def request(http, hub: int, base: str, headers, method: str, path: str, body, results: list):
    """One request: (its status, its Retry-After); its latency and outcome appended to ``results``."""
    t = time.monotonic()
    retry = 0.0
    try:
        async with http.request(method, f"{base}{path}", json=body, headers=headers) as r:
            await r.read()
            status = r.status
            retry = float(r.headers.get("Retry-After", 0) or 0)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        status = type(e).__name__
    results.append((path, time.monotonic() - t, status in (200, 201), status, t, hub))
    return status, retry


async def run_load(targets: list[dict], clients: int, seconds: float, push: float, hold=None) -> tuple[list, list]:
    """Every hub's clients at once: (every request's result, every acknowledged sample).

    ``hold``: (after, seconds, url), a transaction that holds the ledger's write lock for ``seconds`` from
    ``after`` seconds into the run (the writers fall behind for real).
    """
    results: list = []
    acked: list = []
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        until = time.monotonic() + seconds
        jobs = []
        for hub, target in enumerate(targets):
            names = list(target["tokens"])
            for i in range(clients):
                name = names[i % len(names)]
                job = client(
                    http, hub, target["base"], target["tokens"][name], target["sessions"][name], push, until,
                    results, acked,
                )  # fmt: skip
                jobs.append(job)
        if hold is not None:
            jobs.append(asyncio.to_thread(hold_lock, *hold))
        await asyncio.gather(*jobs)
    return results, acked


def hold_lock(after: float, seconds: float, db_url: str) -> None:
    """Hold the ledger's write lock (a table lock on PostgreSQL, BEGIN IMMEDIATE on sqlite) for ``seconds``."""
    time.sleep(after)
    ledger = Ledger(db_url, migrate=False)
    try:
        with ledger.engine.connect() as conn:
            if ledger.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.execute(text("LOCK TABLE gpu_usage_minutes IN EXCLUSIVE MODE"))
            time.sleep(seconds)
            conn.rollback()
    finally:
        ledger.close()


def missing_samples(db_url: str, acked: list) -> list:
    """The acknowledged samples whose minute is not in the ledger with at least as many pushes as were acked."""
    want: dict[tuple[str, str], int] = {}
    for session_id, until, _ in acked:
        minute = datetime.fromisoformat(until).astimezone(timezone.utc).replace(tzinfo=None, second=0, microsecond=0)
        want[(session_id, minute.isoformat())] = want.get((session_id, minute.isoformat()), 0) + 1
    ledger = Ledger(db_url, migrate=False)
    try:
        with ledger.engine.connect() as conn:
            rows = conn.execute(text("SELECT session_id, minute, pushes FROM gpu_usage_minutes")).all()
    finally:
        ledger.close()
    have = {}
    for sid, minute, pushes in rows:
        minute = minute if isinstance(minute, datetime) else datetime.fromisoformat(str(minute))
        have[(sid, minute.replace(tzinfo=None).isoformat())] = pushes
    return [(key, n, have.get(key, 0)) for key, n in want.items() if have.get(key, 0) < n]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start_hub(root: Path, hub_index: int, hubs: int, db_url: str, queue_limit: int | None) -> Hub:
    config = gpu_hub_config(root, db_url=db_url, tick=30, reconcile=3600)
    config += "\nc.JupyterHub.log_level = 'WARNING'\nc.JupyterHub.tornado_settings = {'slow_spawn_timeout': 0.5}\n"
    extra = ""
    if hubs > 1 and "hub_name" in SERVICE_OPTIONS:
        extra += f"c.GPUService.hub_name = 'hub{hub_index}'\n"
        config += f"c.GPULocalSpawner.hub_name = 'hub{hub_index}'\n"
    if queue_limit is not None and "write_queue_limit" in SERVICE_OPTIONS:
        extra += f"c.GPUService.write_queue_limit = {queue_limit}\n"
    with open(root / "gpu_service_config.py", "a") as f:
        f.write(extra)
    hub = Hub(root / "hub", config)
    hub.start()
    return hub


def ledger_for(db_url: str, hub_index: int, hubs: int) -> Ledger:
    if hubs > 1 and "hub" in inspect.signature(Ledger).parameters:
        return Ledger(db_url, hub=f"hub{hub_index}")
    return Ledger(db_url)


def tick_lines(hub: Hub, since: int) -> list[tuple]:
    """Each tick's (seconds, statements, writes, seconds on the writer, longest write, loop lag p99 ms, max ms);
    the last five None where the code measured logs only the first two."""
    with open(hub.log_file, "rb") as log:
        log.seek(since)
        found = TICK_LINE.findall(log.read().decode(errors="replace"))
    return [(float(s), int(n), *(float(x) if x else None for x in rest)) for s, n, *rest in found]


def proxy_pid(hub: Hub) -> int | None:
    try:
        return int((hub.workdir / "proxy.pid").read_text().strip())
    except (OSError, ValueError):
        return None


def cpu_of(pid: int | None) -> float:
    try:
        return proc_usage(pid)[0] if pid else 0.0
    except OSError:
        return 0.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000, help="clients (servers) per hub")
    parser.add_argument("--users", type=int, default=None, help="users per hub (default: one per client)")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--push", type=float, default=30, help="seconds between a client's rounds (30 = real)")
    parser.add_argument("--hubs", type=int, default=1, help="hubs, each with its own gpu service, on one ledger")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--queue-limit", type=int, default=None, help="each service's write_queue_limit")
    parser.add_argument("--hold-lock", type=float, nargs=2, metavar=("AFTER", "SECONDS"), default=None,
                        help="hold the ledger's write lock for SECONDS, AFTER seconds into the run")  # fmt: skip
    parser.add_argument("--check", action="store_true", help="exit 1 when an acknowledged sample is missing")
    parser.add_argument("--json", type=Path, default=None, help="write the figures there too")
    parser.add_argument("--logs", type=Path, default=None, help="keep each hub's log (with its service's) there")
    args = parser.parse_args(argv)
    for name in ("clients", "hubs", "seconds", "push"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive")
    users = args.users or args.clients
    random.seed(1)
    pg = None
    hubs: list[Hub] = []
    with tempfile.TemporaryDirectory(prefix="jhgpu-load-") as tmp:
        root = Path(tmp)
        try:
            if args.db == "postgresql":
                bin_dir = postgres_bin_dir()
                if bin_dir is None:
                    parser.error("--db postgresql needs PostgreSQL's initdb and postgres (apt install postgresql)")
                pg = PostgresServer(bin_dir)
                pg.start()
                db_url = pg.url(pg.create_database())
            else:
                db_url = f"sqlite:///{root / 'ledger.sqlite'}"
            targets = []
            t = time.monotonic()
            for h in range(args.hubs):
                (root / f"hub{h}").mkdir()
                hub = start_hub(root / f"hub{h}", h, args.hubs, db_url, args.queue_limit)
                hubs.append(hub)
                names = [f"h{h}u{i:05d}" for i in range(users)]
                for i in range(0, len(names), 200):
                    hub.create_users(*names[i : i + 200])
                base = f"{hub.url}/services/gpu/api/v1/"
                wait_for(
                    lambda b=base: requests.get(b + "openapi.yaml", timeout=5).status_code == 200, 60, what="service"
                )
                tokens = make_tokens(hub, names)
                ledger = ledger_for(db_url, h, args.hubs)
                sessions = seed_sessions(ledger, names, prefix=f"load-h{h}")
                ledger.close()
                pid = find_service_pid(str(root / f"hub{h}" / "gpu_service_config.py"))
                targets.append({"base": base, "tokens": tokens, "sessions": sessions, "pid": pid, "hub": hub})
            print(f"{args.hubs} hub(s), {users} users and tokens each, made in {time.monotonic() - t:.0f}s")
            before = [(proc_usage(x["pid"]), proc_usage(x["hub"].proc.pid)) for x in targets]
            proxies = [proxy_pid(x["hub"]) for x in targets]
            machine = {"load_before": os.getloadavg(), "proxies_cpu": -sum(cpu_of(p) for p in proxies)}
            log_at = [x["hub"].log_file.stat().st_size for x in targets]
            own = os.times()
            started = time.monotonic()
            hold = (args.hold_lock[0], args.hold_lock[1], db_url) if args.hold_lock else None
            results, acked = asyncio.run(run_load(targets, args.clients, args.seconds, args.push, hold))
            wall = time.monotonic() - started
            done = os.times()
            machine["generator_cpu"] = done.user + done.system - own.user - own.system
            machine["proxies_cpu"] += sum(cpu_of(p) for p in proxies)
            machine["load_after"] = os.getloadavg()
            after = [(proc_usage(x["pid"]), proc_usage(x["hub"].proc.pid)) for x in targets]
            ticks = [tick_lines(x["hub"], at) for x, at in zip(targets, log_at, strict=True)]
            missing = missing_samples(db_url, acked)
        finally:
            for h, hub in enumerate(hubs):
                if args.logs is not None and hub.log_file.exists():
                    args.logs.mkdir(parents=True, exist_ok=True)
                    shutil.copy(hub.log_file, args.logs / f"hub{h}.log")
                hub.cleanup()
            if pg is not None:
                pg.stop()
    report = summarize(args, users, wall, started, results, acked, missing, before, after, ticks, machine)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if (report["errors"] or (args.check and missing)) else 0


def summarize(args, users, wall, started, results, acked, missing, before, after, ticks, machine=None) -> dict:
    """Print the tables; the figures as a dict."""
    machine = machine or {}
    print()
    print(f"load: {args.hubs} hub(s) x {args.clients} clients, {users} users each, {args.db} ledger, one round"
          f" (POST samples + GET me) every {args.push:g}s per client, {wall:.0f}s, through configurable-http-proxy"
          f" on loopback")  # fmt: skip
    print(f"code: {Path(jupyterhub_gpu.__file__).parent}")
    report: dict = {"hubs": args.hubs, "clients": args.clients, "db": args.db, "wall": wall, "endpoints": {}}
    if machine:
        report["machine"] = machine
        print(
            f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in machine['load_before'])}"
            f" before, {' '.join(f'{x:.2f}' for x in machine['load_after'])} after; this load generator"
            f" {machine['generator_cpu']:.1f}s CPU ({machine['generator_cpu'] / wall:.0%} of a core), the proxies"
            f" {machine['proxies_cpu']:.1f}s"
        )
    # from the second round on, the service has checked every token with the hub once (HubAuth caches it)
    for title, since in (("every round", started), ("from the second round on", started + args.push)):
        print(f"{title}:")
        print(f"{'endpoint':<10} {'requests':>9} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}"
              f" {'max ms':>8} {'503':>6} {'errors':>6}")  # fmt: skip
        for path in ("samples", "me", None):
            rows = [r for r in results if (path is None or r[0] == path) and r[4] >= since]
            ms = [r[1] * 1000 for r in rows]
            busy = sum(1 for r in rows if r[3] == 503)
            errors = sum(1 for r in rows if not r[2] and r[3] != 503)
            span = max(wall - (since - started), 1e-9)
            figures = {"requests": len(rows), "p50": pct(ms, 0.5), "p90": pct(ms, 0.9), "p99": pct(ms, 0.99),
                       "max": max(ms, default=float("nan")), "503": busy, "errors": errors}  # fmt: skip
            report["endpoints"][f"{title}/{path or 'all'}"] = figures
            print(
                f"{path or 'all':<10} {len(rows):>9} {len(rows) / span:>7.1f} {figures['p50']:>8.1f}"
                f" {figures['p90']:>8.1f} {figures['p99']:>8.1f} {figures['max']:>8.1f} {busy:>6} {errors:>6}"
            )
    errors = [r for r in results if not r[2] and r[3] != 503]
    kinds = statistics.multimode([str(r[3]) for r in errors]) if errors else []
    print(f"errors: {len(errors)} of {len(results)}{' (' + ', '.join(kinds) + ')' if kinds else ''};"
          f" 503 (sent again): {sum(1 for r in results if r[3] == 503)}")  # fmt: skip
    print(f"acknowledged samples: {len(acked)}, missing from the ledger: {len(missing)}")
    report.update(errors=len(errors), acked=len(acked), missing=len(missing), services=[])
    if args.hold_lock:  # acknowledged once the lock was let go: the writers caught up
        released = started + sum(args.hold_lock)
        report["acked_after_hold"] = sum(1 for *_, t in acked if t > released)
        print(f"acknowledged after the lock was let go: {report['acked_after_hold']}")
    for h, ((s0, h0), (s1, h1), tick) in enumerate(zip(before, after, ticks, strict=True)):
        secs = [t[0] for t in tick]
        stmts = [t[1] for t in tick]
        tick_text = (
            f"ticks {len(tick)}: p50 {pct(secs, 0.5):.3f} s, max {max(secs):.3f} s,"
            f" statements p50 {pct(stmts, 0.5):.0f}, max {max(stmts)}"
            if tick
            else "ticks: not logged by this code"
        )
        logged = [t for t in tick if t[2] is not None]
        if logged:
            tick_text += (
                f"; writes p50 {pct([t[2] for t in logged], 0.5):.0f} ({pct([t[3] for t in logged], 0.5):.3f} s on"
                f" the writer, longest {max(t[4] for t in logged):.3f} s); the requests' loop lag p99"
                f" {max(t[5] for t in logged):.1f} ms, max {max(t[6] for t in logged):.1f} ms"
            )
        cpu = s1[0] - s0[0]
        rss = f"{s0[1] / 2**20:.0f} -> {s1[1] / 2**20:.0f} MiB"
        print(f"service hub{h}: CPU {cpu:.1f}s ({cpu / wall:.0%} of a core), RSS {rss}; {tick_text};"
              f" hub CPU {h1[0] - h0[0]:.1f}s")  # fmt: skip
        report["services"].append({"cpu": s1[0] - s0[0], "ticks": tick})
    return report


if __name__ == "__main__":
    sys.exit(main())
