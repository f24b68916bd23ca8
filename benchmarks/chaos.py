"""The long chaos run: kill -9 of the hub, the gpu service and single-user servers during 100 sessions.

The same run as ``tests/chaos/test_system_chaos.py`` (one real hub, the real
service, real local single-user servers over simulated GPUs, the truth read from
/proc), at N = 100 sessions with 4 hub kills, 4 service kills and 10 server kills,
on sqlite and on a real PostgreSQL server started for the run (Debian's
``postgresql``: ``make postgres-setup``). Prints each round's figures and a table.

Usage::

    .venv/bin/python benchmarks/chaos.py [--sessions 100] [--rounds 1] [--db sqlite,postgresql]
        [--start-every 2.0] [--seed N]

At N = 100 a round takes about 8 minutes on the 2-core machine (sessions start
every 2 s and last up to 75 s; the culled ones 2 minutes). Exit status 1 when any
round found a problem.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.chaos.test_system_chaos import run_system_chaos  # noqa: E402
from tests.conftest import Hub, PostgresServer, postgres_bin_dir  # noqa: E402


def one_round(db: str, sessions: int, seed: int, start_every: float, pg: PostgresServer | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="jhgpu-chaos-") as tmp:
        tmp_path = Path(tmp)
        hubs: list[Hub] = []

        def make_hub(config: str) -> Hub:
            hub = Hub(tmp_path / "hub", config)
            hubs.append(hub)
            hub.start()
            return hub

        database = None
        if db == "postgresql":
            database = pg.create_database()
            url = pg.url(database)
        else:
            url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        began = time.monotonic()
        try:
            outcome = run_system_chaos(make_hub, tmp_path, url, seed, sessions=sessions, start_every=start_every)
            problems = []
        except AssertionError as e:
            outcome, problems = None, str(e).splitlines()
        finally:
            for hub in hubs:
                try:
                    hub.cleanup()
                except Exception:
                    hub.stop(signal.SIGKILL)
            if database:
                pg.drop_database(database)
        return {
            "db": db,
            "seed": seed,
            "seconds": time.monotonic() - began,
            "outcome": outcome,
            "problems": problems,
        }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1, help="rounds per database")
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--start-every", type=float, default=2.0, help="seconds between session starts")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    dbs = [d.strip() for d in args.db.split(",") if d.strip()]
    pg = None
    if "postgresql" in dbs:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            print("PostgreSQL is not installed (make postgres-setup); running sqlite only")
            dbs = [d for d in dbs if d != "postgresql"]
        else:
            pg = PostgresServer(bin_dir)
            pg.start()
    results = []
    try:
        for _ in range(args.rounds):
            for db in dbs:
                results.append(one_round(db, args.sessions, rng.randrange(2**32), args.start_every, pg))
    finally:
        if pg is not None:
            pg.stop()
    print()
    print(f"{'db':<11} {'seed':>10} {'sessions':>8} {'hub':>4} {'svc':>4} {'srv':>4} {'culled':>6} {'rows':>5}"
          f" {'seconds':>7}  result")  # fmt: skip
    failed = 0
    for r in results:
        o = r["outcome"]
        if o is None:
            failed += 1
            print(f"{r['db']:<11} {r['seed']:>10} {'':>8} {'':>4} {'':>4} {'':>4} {'':>6} {'':>5} {r['seconds']:>7.0f}"
                  f"  FAILED: {len(r['problems'])} problem lines")  # fmt: skip
            for line in r["problems"][:20]:
                print(f"    {line}")
            continue
        print(
            f"{r['db']:<11} {r['seed']:>10} {o.sessions:>8} {o.hub_kills:>4} {o.service_kills:>4} {o.server_kills:>4}"
            f" {o.culled:>6} {o.ledger_rows:>5} {r['seconds']:>7.0f}  nothing lost, nothing doubled"
        )
    survived = len(results) - failed
    print(f"{survived} of {len(results)} rounds survived with nothing lost or doubled")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
