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

Usage::

    .venv/bin/python benchmarks/load.py [--clients 1000] [--seconds 120] [--push 30]

Needs ``make venv`` (configurable-http-proxy in .venv/bin). Takes ``--seconds`` plus
about a minute (1,000 tokens are made through the hub's API first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import aiohttp
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jupyterhub_gpu.ledger.store import Ledger  # noqa: E402
from jupyterhub_gpu.session import SessionStart  # noqa: E402
from tests.conftest import Hub, wait_for  # noqa: E402
from tests.service.conftest import gpu_hub_config  # noqa: E402

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


def seed_sessions(ledger: Ledger, names: list[str]) -> dict[str, str]:
    now = datetime.now(timezone.utc)
    ids = {}
    for i, name in enumerate(names):
        sid = f"load-{i:05d}"
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


async def client(http, base: str, token: str, session_id: str, push: float, until: float, results: list) -> None:
    headers = {"Authorization": f"token {token}"}
    await asyncio.sleep(random.uniform(0, push))
    while time.monotonic() < until:
        began = time.monotonic()
        sample = {
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
        for method, path, body in (("POST", "samples", sample), ("GET", "me", None)):
            t = time.monotonic()
            try:
                async with http.request(method, f"{base}{path}", json=body, headers=headers) as r:
                    await r.read()
                    ok = 200 <= r.status < 300
                    status = r.status
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                ok, status = False, type(e).__name__
            results.append((path, time.monotonic() - t, ok, status, t))
        await asyncio.sleep(max(0.0, push - (time.monotonic() - began)))


async def run_load(base: str, tokens: dict[str, str], sessions: dict[str, str], clients: int, seconds: float,
                   push: float) -> list:  # fmt: skip
    results: list = []
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=60)
    names = list(tokens)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        until = time.monotonic() + seconds
        await asyncio.gather(
            *(
                client(http, base, tokens[names[i % len(names)]], sessions[names[i % len(names)]], push, until, results)
                for i in range(clients)
            )
        )
    return results


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--users", type=int, default=None, help="users (default: one per client)")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--push", type=float, default=30, help="seconds between a client's rounds (30 = real)")
    args = parser.parse_args(argv)
    users = args.users or args.clients
    random.seed(1)
    with tempfile.TemporaryDirectory(prefix="jhgpu-load-") as tmp:
        root = Path(tmp)
        db_url = f"sqlite:///{root / 'ledger.sqlite'}"
        config = gpu_hub_config(root, db_url=db_url, tick=30, reconcile=3600)
        config += "\nc.JupyterHub.log_level = 'WARNING'\nc.JupyterHub.tornado_settings = {'slow_spawn_timeout': 0.5}\n"
        hub = Hub(root / "hub", config)
        hub.start()
        try:
            names = [f"load{i:05d}" for i in range(users)]
            for i in range(0, len(names), 200):
                hub.create_users(*names[i : i + 200])
            base = f"{hub.url}/services/gpu/api/v1/"
            wait_for(lambda: requests.get(base + "openapi.yaml", timeout=5).status_code == 200, 60, what="service")
            t = time.monotonic()
            tokens = make_tokens(hub, names)
            print(f"{users} users and tokens made in {time.monotonic() - t:.0f}s")
            ledger = Ledger(db_url)
            sessions = seed_sessions(ledger, names)
            ledger.close()
            service_pid = find_service_pid(str(root / "gpu_service_config.py"))
            service_before, hub_before = proc_usage(service_pid), proc_usage(hub.proc.pid)
            started = time.monotonic()
            results = asyncio.run(run_load(base, tokens, sessions, args.clients, args.seconds, args.push))
            wall = time.monotonic() - started
            service_after, hub_after = proc_usage(service_pid), proc_usage(hub.proc.pid)
        finally:
            hub.cleanup()
    latencies = [r[1] * 1000 for r in results]
    errors = [r for r in results if not r[2]]
    print()
    print(f"load: {args.clients} clients, {users} users, one round (POST samples + GET me) every {args.push:g}s"
          f" per client, {wall:.0f}s, through configurable-http-proxy on loopback")  # fmt: skip
    # from the second round on, the service has checked every token with the hub once (HubAuth caches it)
    for title, since in (("every round", started), ("from the second round on", started + args.push)):
        print(f"{title}:")
        print(f"{'endpoint':<10} {'requests':>9} {'req/s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for path in ("samples", "me", None):
            rows = [r[1] * 1000 for r in results if (path is None or r[0] == path) and r[4] >= since]
            span = max(wall - (since - started), 1e-9)
            print(
                f"{path or 'all':<10} {len(rows):>9} {len(rows) / span:>7.1f} {pct(rows, 0.5):>8.1f}"
                f" {pct(rows, 0.9):>8.1f} {pct(rows, 0.99):>8.1f} {max(rows, default=float('nan')):>8.1f}"
            )
    kinds = statistics.multimode([str(r[3]) for r in errors]) if errors else []
    print(f"errors: {len(errors)} of {len(results)}{' (' + ', '.join(kinds) + ')' if kinds else ''}")
    print(
        f"service: CPU {service_after[0] - service_before[0]:.1f}s ({(service_after[0] - service_before[0]) / wall:.0%}"
        f" of a core), RSS {service_before[1] / 2**20:.0f} -> {service_after[1] / 2**20:.0f} MiB"
    )
    print(
        f"hub:     CPU {hub_after[0] - hub_before[0]:.1f}s ({(hub_after[0] - hub_before[0]) / wall:.0%} of a core,"
        f" token checks), RSS {hub_before[1] / 2**20:.0f} -> {hub_after[1] / 2**20:.0f} MiB"
    )
    print(f"p50 {pct(latencies, 0.5):.1f} ms, p99 {pct(latencies, 0.99):.1f} ms, errors {len(errors)}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
