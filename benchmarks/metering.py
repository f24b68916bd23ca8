"""Benchmark: one metering tick and one reconciliation at 100, 1,000 and 5,000 active sessions.

Runs the service's real code (:func:`enforce_budgets`, :func:`reconcile`, the
real :class:`Ledger` and :class:`HubClient`, alerts through the real
:func:`tick.deliver` with Lab notices only) against:

- a fresh ledger (sqlite in a temp dir, or ``--db URL`` of a scratch database)
  holding N open sessions (users ``u00000``...), three closed sessions per user
  over the last 30 days, a budget per group and budgets for 10% of the users,
  some of them past 80%, 95% and 100% so that alerts fire and servers are stopped;
- a local HTTP server on 127.0.0.1, in its own process (so that its CPU is not
  counted as the service's), that replays JupyterHub 6's response to
  ``GET /hub/api/users?state=active`` with pagination (``items`` and
  ``_pagination``, pages of at most 200 like the hub's ``api_page_max_limit``)
  and answers ``DELETE /hub/api/users/NAME/server`` with 204.

Usage::

    .venv/bin/python benchmarks/metering.py [--sizes 100,1000,5000] [--db sqlite|URL] [--repeat 3] [--profile]

The hub's own CPU cannot be measured against a replay; it is estimated from
DESIGN.md's measurement: listing active servers costs the hub ~0.6 ms of CPU
per active server. See benchmarks/README.md for the numbers on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import math
import multiprocessing
import os
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import delete, insert

from jupyterhub_gpu.billing import BudgetRule, budget_status, charge
from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.models import AlertSent, Budget, Notice, SessionRecord
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.alerts import BudgetAlert
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.tick import TickContext, deliver, enforce_budgets, reconcile

#: The moment of the first tick (a Friday afternoon in Shanghai), so that every run sees the same periods.
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
TZ = ZoneInfo("Asia/Shanghai")
CURRENCY = Currency.from_config("CNY")
TICK_INTERVAL = timedelta(seconds=30)  # GPUService.tick_interval's default
GRACE = timedelta(minutes=5)  # GPUService.budget_grace_seconds's default
TOKEN = "benchmark-token"
#: DESIGN.md, "Facts about these machines": hub CPU to list one active server (JupyterHub 6.1.1, 2 cores).
HUB_CPU_PER_LISTED_SERVER = 0.0006
TARGET_SIZE, TARGET_SECONDS = 5000, 1.0

#: slug -> (GPUs, rate per minute in micro-CNY, share of sessions)
PROFILES = {
    "t4-1": (1, 15_000, 0.40),
    "a100-1": (1, 50_000, 0.30),
    "a100-2": (2, 100_000, 0.10),
    "cpu": (0, 1_000, 0.20),
}
#: group -> (period, unit, the group's used fraction of its budget at NOW)
GROUPS = {
    "cs231n": ("term", "gpu_hours", Decimal("0.60")),
    "cs224n": ("month", "money", Decimal("0.50")),
    "ml-lab": ("month", "money", Decimal("0.70")),
    "vision-lab": ("week", "money", Decimal("0.40")),
    "nlp-lab": ("month", "gpu_hours", Decimal("0.30")),
}
COURSES, LABS = ["cs231n", "cs224n"], ["ml-lab", "vision-lab", "nlp-lab"]
TERM = (date(2026, 9, 1), date(2027, 1, 15))
#: Used fractions of the 10% of users with their own budget: under 80%, 80-95%, 95-100%, over 100%.
USER_FRACTIONS = [
    (Decimal("0.50"), 0.50),
    (Decimal("0.85"), 0.20),
    (Decimal("0.97"), 0.15),
    (Decimal("1.05"), 0.15),
]
HISTORY_PER_USER = 3
DRIFT = 0.01  # share of servers the hub and the ledger disagree on (each way), for the reconciler


# -- the population ----------------------------------------------------------------------


@dataclass
class Population:
    """What the ledger and the hub both hold: users, their groups and their sessions."""

    sessions: list[dict] = field(default_factory=list)  # rows of gpu_sessions, open and closed
    hub_users: list[dict] = field(default_factory=list)  # JupyterHub 6 user models with their servers
    budgets: list[dict] = field(default_factory=list)
    alerts: list[dict] = field(default_factory=list)
    expected_stops: int = 0


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(timezone.utc).replace(tzinfo=None)


def _session_row(rng, user, groups, server_name, profile, started, stopped=None) -> dict:
    gpus, rate, _ = PROFILES[profile]
    row = {
        "id": f"{rng.getrandbits(128):032x}",
        "user": user,
        "server_name": server_name,
        "groups": json.dumps(sorted(groups)),
        "pool": sorted(groups)[0] if groups else None,  # the default pool: the first group (issue 14)
        "profile": profile,
        "gpus": json.dumps([f"GPU-{rng.getrandbits(64):016x}" for _ in range(gpus)]),
        "gpu_count": gpus,
        "simulated": False,
        "rate_micros": rate,
        "currency": CURRENCY.code,
        "started": _naive(started),
        "stopped": None,
        "stop_reason": None,
        "pending_stop_reason": None,
        "minutes": None,
        "cost_micros": None,
        "last_seen": None,
    }
    if stopped is not None:
        c = charge(row["started"], _naive(stopped), rate, gpus)
        row.update(stopped=_naive(stopped), stop_reason="stopped", minutes=c.minutes, cost_micros=c.cost_micros)
    return row


def _hub_user(name: str, groups: list[str], session: dict) -> dict:
    """A user model as JupyterHub 6.1 returns it to a service with read:users, read:servers, admin:server_state."""
    started = isoformat(session["started"].replace(tzinfo=timezone.utc))
    gpu_count, rate, _ = PROFILES[session["profile"]]
    state = {
        "container_id": session["id"] * 2,
        "container_name": f"jupyter-{name}",
        "gpu": {
            "profile": session["profile"],
            "devices": json.loads(session["gpus"]),
            "device_names": ["NVIDIA A100" if "a100" in session["profile"] else "Tesla T4"] * gpu_count,
            "simulated": False,
            "session_id": session["id"],
            "started": started,
            "rate_per_minute": str(Decimal(rate) / 1_000_000),
            "currency": CURRENCY.code,
            "groups": sorted(groups),
        },
    }
    server = {
        "name": "",
        "display_name": "",
        "full_name": f"{name}/",
        "last_activity": isoformat(NOW - timedelta(minutes=3)),
        "started": started,
        "pending": None,
        "ready": True,
        "stopped": False,
        "url": f"/user/{name}/",
        "user_options": {"profile": session["profile"]},
        "progress_url": f"/hub/api/users/{name}/server/progress",
        "full_url": None,
        "full_progress_url": None,
        "state": state,
    }
    return {
        "kind": "user",
        "name": name,
        "admin": False,
        "roles": ["user"],
        "groups": groups,
        "server": f"/user/{name}/",
        "pending": None,
        "created": "2026-09-01T02:00:00.000000Z",
        "last_activity": isoformat(NOW - timedelta(minutes=3)),
        "servers": {"": server},
    }


def _limit(used: Decimal, fraction: Decimal) -> Decimal:
    return max(Decimal("0.01"), (used / fraction).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def make_population(n: int, seed: int = 42) -> Population:
    rng = random.Random(seed)
    pop = Population()
    profiles, weights = list(PROFILES), [p[2] for p in PROFILES.values()]
    members: dict[str, list[dict]] = {g: [] for g in GROUPS}
    by_user: dict[str, list[dict]] = {}
    for i in range(n):
        user = f"u{i:05d}"
        groups = [rng.choice(COURSES if rng.random() < 0.6 else LABS)]
        if rng.random() < 0.2:  # a course student who also works in a lab
            groups.append(rng.choice([g for g in LABS if g not in groups] or COURSES))
        mine = []
        for _ in range(HISTORY_PER_USER):
            started = NOW - timedelta(days=rng.uniform(0.5, 30))
            duration = timedelta(minutes=rng.uniform(10, 240))
            mine.append(
                _session_row(rng, user, groups, "", rng.choices(profiles, weights)[0], started, started + duration)
            )
        open_session = _session_row(
            rng, user, groups, "", rng.choices(profiles, weights)[0], NOW - timedelta(minutes=rng.uniform(1, 480))
        )
        mine.append(open_session)
        by_user[user] = mine
        for g in groups:
            members[g].extend(mine)
        # drift: a server the hub stopped while the service was down, or one whose start the ledger missed
        r = rng.random()
        pop.sessions.extend(mine if r >= 2 * DRIFT else mine[:-1] if r >= DRIFT else mine)
        if r >= DRIFT:  # else: in the ledger, not in the hub
            pop.hub_users.append(_hub_user(user, groups, open_session))

    def used(rule: BudgetRule, rows: list[dict]) -> Decimal:
        usage = Ledger.usage_rows([_Record(r) for r in rows], NOW)
        return budget_status(rule, usage, NOW, TZ).used

    updated = _naive(NOW - timedelta(days=10))
    for group, (period, unit, fraction) in GROUPS.items():
        term = TERM if period == "term" else (None, None)
        rule = BudgetRule("group", group, period, unit, Decimal(1), *term)
        limit = _limit(used(rule, members[group]), fraction)
        pop.budgets.append(_budget_row("group", group, period, unit, limit, term, updated))
    budget_users = rng.sample(sorted(by_user), max(1, n // 10))
    fractions, shares = [f for f, _ in USER_FRACTIONS], [s for _, s in USER_FRACTIONS]
    for user in budget_users:
        period, unit = rng.choice([("month", "money"), ("month", "money"), ("week", "money"), ("month", "gpu_hours")])
        rule = BudgetRule("user", user, period, unit, Decimal(1))
        u = used(rule, by_user[user])
        if unit == "gpu_hours" and u == 0:
            unit, rule = "money", BudgetRule("user", user, period, "money", Decimal(1))
            u = used(rule, by_user[user])
        fraction = rng.choices(fractions, shares)[0]
        pop.budgets.append(_budget_row("user", user, period, unit, _limit(u, fraction), (None, None), updated))
        if fraction > 1 and rng.random() < 2 / 3:
            # told 10 minutes ago (past the grace period): this tick stops the server
            start = _period_start(rule)
            for threshold in (80, 95, 100):
                pop.alerts.append(
                    {
                        "user": user,
                        "budget_key": rule.key,
                        "period_start": _naive(start),
                        "threshold": threshold,
                        "channel": "lab",
                        "sent": _naive(NOW - timedelta(minutes=10)),
                        "revision": updated.isoformat(),  # the budget's revision (Budget.revision)
                    }
                )
            pop.expected_stops += 1
    return pop


def _period_start(rule: BudgetRule) -> datetime:
    return budget_status(rule, [], NOW, TZ).period_start


def _budget_row(scope, subject, period, unit, limit, term, updated) -> dict:
    return {
        "scope": scope,
        "subject": subject,
        "period": period,
        "unit": unit,
        "limit": str(limit),
        "term_start": term[0],
        "term_end": term[1],
        "updated": updated,
    }


class _Record:
    """A gpu_sessions row with the attributes Ledger.usage_rows reads."""

    def __init__(self, row: dict):
        self.__dict__.update(row)

    @property
    def group_list(self):
        return json.loads(self.groups)


def fill_ledger(ledger: Ledger, pop: Population) -> None:
    with ledger.engine.begin() as db:
        for table in (Notice, AlertSent, Budget, SessionRecord):  # a scratch database given by --db
            db.execute(delete(table))
        db.execute(insert(SessionRecord), pop.sessions)
        db.execute(insert(Budget), pop.budgets)
        if pop.alerts:
            db.execute(insert(AlertSent), pop.alerts)


# -- the replayed hub -----------------------------------------------------------------------


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    users: list[dict] = []
    pages: dict[tuple[int, int, bool], bytes] = {}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes = b"", content_type="application/json") -> None:
        self.send_response(code)
        if body:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") != f"token {TOKEN}":
            self._send(403, b'{"status": 403, "message": "Action is not authorized with current scopes"}')
            return False
        return True

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path != "/hub/api/users":
            return self._send(404, b'{"status": 404, "message": "Not Found"}')
        if not self._authorized():
            return
        query = parse_qs(url.query)
        paginated = "application/jupyterhub-pagination+json" in self.headers.get("Accept", "")
        offset = abs(int(query.get("offset", ["0"])[0]))
        limit = min(200, max(1, abs(int(query.get("limit", ["50" if paginated else "200"])[0]))))
        key = (offset, limit, paginated)
        with self.lock:
            body = self.pages.get(key)
            if body is None:
                items = self.users[offset : offset + limit]
                if paginated:
                    total = len(self.users)
                    nxt = None
                    if offset + limit < total:
                        q = urlencode({"state": "active", "offset": offset + limit, "limit": limit})
                        nxt = {"offset": offset + limit, "limit": limit, "url": f"http://127.0.0.1/hub/api/users?{q}"}
                    model = {
                        "items": items,
                        "_pagination": {"offset": offset, "limit": limit, "total": total, "next": nxt},
                    }
                else:
                    model = items
                body = self.pages[key] = json.dumps(model).encode()
        self._send(200, body)

    def do_DELETE(self):
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/")]
        # /hub/api/users/NAME/server or /hub/api/users/NAME/servers/SERVER
        if parts[:4] != ["", "hub", "api", "users"] or len(parts) not in (6, 7):
            return self._send(404, b'{"status": 404, "message": "Not Found"}')
        if self._authorized():
            self._send(204)


def serve_hub(users: list[dict], conn) -> None:
    """The replay server's process: listen on 127.0.0.1, send the port back, serve until killed."""
    _HubHandler.users = users
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HubHandler)
    conn.send(server.server_address[1])
    server.serve_forever()


# -- measuring --------------------------------------------------------------------------


@dataclass
class Run:
    wall: float
    cpu: float
    sql: int
    hub: int
    alerts: int = 0
    stops: int = 0


async def measure(coro_factory, ledger: Ledger, hub: HubClient, profile: cProfile.Profile | None = None):
    q, r = ledger.queries, hub.requests
    w, c = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    result = await coro_factory()
    if profile is not None:
        profile.disable()
    run = Run(time.perf_counter() - w, time.process_time() - c, ledger.queries - q, hub.requests - r)
    return run, result


def make_notify(ledger: Ledger, settings: AlertSettings, now_box: list[datetime]):
    """tick.budget_notify, with the tick's clock instead of the wall clock."""

    async def notify(user, groups, status, threshold):
        alert = BudgetAlert.from_status(
            user, groups, status, threshold, currency=CURRENCY, grace_seconds=int(GRACE.total_seconds()), tz=TZ
        )
        await deliver(alert, settings, ledger, now_box[0])

    return notify


@dataclass
class SizeResult:
    n: int
    sessions_rows: int
    hub_servers: int
    ticks: list[Run]
    reconciles: list[Run]
    profile_text: str = ""


async def bench_size(n: int, db: str, repeat: int, want_profile: bool, workdir: Path) -> SizeResult:
    pop = make_population(n)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    hub_process = ctx.Process(target=serve_hub, args=(pop.hub_users, child), daemon=True)
    hub_process.start()
    try:
        port = parent.recv()
        url = f"sqlite:///{workdir / f'ledger-{n}.sqlite'}" if db == "sqlite" else db
        ledger = Ledger(url)
        fill_ledger(ledger, pop)
        hub = HubClient(f"http://127.0.0.1:{port}/hub/api", TOKEN)
        settings = AlertSettings()  # Lab notices only: no mail, no webhook
        now_box = [NOW]
        notify = make_notify(ledger, settings, now_box)
        profile = cProfile.Profile() if want_profile else None
        tick = TickContext(ledger=ledger, hub=hub, tz=TZ, budget_grace=GRACE)

        ticks = []
        for i in range(repeat):
            now_box[0] = now = NOW + i * TICK_INTERVAL
            run, result = await measure(
                lambda now=now: enforce_budgets(tick, now, notify),
                ledger,
                hub,
                profile if i == repeat - 1 else None,  # profile a warm tick
            )
            run.alerts, run.stops = len(result.alerts), len(result.stopped)
            ticks.append(run)
        missing = {}  # what the service's TickState keeps between reconciliations
        reconciles = []
        for i in range(repeat):
            now = NOW + (repeat + i) * TICK_INTERVAL
            run, result = await measure(lambda now=now: reconcile(tick, now, missing), ledger, hub)
            run.alerts, run.stops = len(result["recorded"]), len(result["closed"])
            reconciles.append(run)
        text = ""
        if profile is not None:
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(20)
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(25)
            text = out.getvalue()
        ledger.close()
        return SizeResult(n, len(pop.sessions), len(pop.hub_users), ticks, reconciles, text)
    finally:
        hub_process.kill()
        hub_process.join()


# -- the report -------------------------------------------------------------------------


def _median(runs: list[Run], attr: str):
    return statistics.median(getattr(r, attr) for r in runs)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(headers), "-+-".join("-" * w for w in widths), *(line(r) for r in rows)])


def report(results: list[SizeResult], repeat: int) -> str:
    out = []
    headers = [
        "sessions",
        "tick wall s",
        "tick CPU s",
        "tick SQL",
        "tick hub req",
        "alerts",
        "stops",
        "recon wall s",
        "recon CPU s",
        "recon SQL",
        "recon hub req",
        "hub CPU/recon (est.)",
    ]

    def row(r: SizeResult, pick) -> list[str]:
        t, c = r.ticks, r.reconciles
        return [
            f"{r.n:,}",
            f"{pick(t, 'wall'):.3f}",
            f"{pick(t, 'cpu'):.3f}",
            f"{pick(t, 'sql'):,.0f}",
            f"{pick(t, 'hub'):,.0f}",
            f"{pick(t, 'alerts'):,.0f}",
            f"{pick(t, 'stops'):,.0f}",
            f"{pick(c, 'wall'):.3f}",
            f"{pick(c, 'cpu'):.3f}",
            f"{pick(c, 'sql'):,.0f}",
            f"{pick(c, 'hub'):,.0f}",
            f"{r.hub_servers * HUB_CPU_PER_LISTED_SERVER:.1f} s",
        ]

    out.append(f"Median of {repeat} runs (ticks {TICK_INTERVAL.seconds} s apart; alerts = notify calls):")
    out.append(table(headers, [row(r, _median) for r in results]))
    out.append("")
    out.append(
        "First (cold) run: the first tick delivers the alerts newly due; the first reconcile records missed starts"
    )
    out.append(table(headers, [row(r, lambda runs, a: getattr(runs[0], a)) for r in results]))
    out.append("")
    out.append("Every run (wall s / SQL statements / hub requests):")
    for r in results:
        runs = lambda rs: ", ".join(f"{x.wall:.3f}/{x.sql}/{x.hub}" for x in rs)  # noqa: E731
        out.append(
            f"  {r.n:,} sessions: ledger {r.sessions_rows:,} session rows ({HISTORY_PER_USER} closed per user"
            f" over 30 days), hub lists {r.hub_servers:,} active servers"
        )
        out.append(f"    ticks:      {runs(r.ticks)}")
        out.append(
            f"    reconciles: {runs(r.reconciles)}  (recorded missed starts: {[x.alerts for x in r.reconciles]},"
            f" closed: {[x.stops for x in r.reconciles]})"
        )
    out.append("")
    at = {r.n: r for r in results}
    if TARGET_SIZE in at:
        wall = _median(at[TARGET_SIZE].ticks, "wall")
        verdict = "PASS" if wall <= TARGET_SECONDS else "FAIL"
        out.append(
            f"Target: one tick at {TARGET_SIZE:,} sessions in at most {TARGET_SECONDS:.0f} s on this"
            f" {os.cpu_count()}-core machine: {wall:.3f} s -> {verdict}"
        )
    else:
        out.append(f"Target: not measured ({TARGET_SIZE:,} sessions is not among --sizes)")
    for a, b in itertools.pairwise(results):
        k = b.n / a.n

        def ratio(runs_a, runs_b, attr, k=k):
            x, y = _median(runs_a, attr), _median(runs_b, attr)
            if not x:
                return "n/a"
            exp = math.log(y / x) / math.log(k) if y > 0 and k != 1 else float("nan")
            return f"x{y / x:.1f} (~n^{exp:.2f})"

        out.append(
            f"Scaling {a.n:,} -> {b.n:,} (x{k:g} sessions): tick wall {ratio(a.ticks, b.ticks, 'wall')},"
            f" tick SQL {ratio(a.ticks, b.ticks, 'sql')}, reconcile wall {ratio(a.reconciles, b.reconciles, 'wall')},"
            f" reconcile SQL {ratio(a.reconciles, b.reconciles, 'sql')}"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000", help="active sessions, comma-separated")
    parser.add_argument(
        "--db",
        default="sqlite",
        help="'sqlite' (a fresh file in a temp dir) or the URL of a SCRATCH database (emptied)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the median is reported")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the last tick at each size")
    args = parser.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if args.repeat < 1 or not sizes or min(sizes) < 1:
        parser.error("--repeat and --sizes must be positive")
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-metering-bench-") as tmp:
        for n in sizes:
            print(f"... {n:,} sessions", file=sys.stderr, flush=True)
            results.append(asyncio.run(bench_size(n, args.db, args.repeat, args.profile, Path(tmp))))
    print(
        f"jupyterhub-gpu metering benchmark, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC,"
        f" {os.cpu_count()} CPUs, ledger {args.db.split('://')[0]}"
    )
    print()
    print(report(results, args.repeat))
    for r in results:
        if r.profile_text:
            print(f"\n== cProfile of one warm tick at {r.n:,} sessions ==\n{r.profile_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
