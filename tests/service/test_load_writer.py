"""``benchmarks/load.py --hubs 2`` in a test-sized run: no acknowledged sample is missing from the shared ledger,
and a service whose ledger writer falls behind (the ledger's write lock held by another transaction, a small
``c.GPUService.write_queue_limit``) answers 503 instead of queueing without bound, then takes samples again.

Two real hubs with their own gpu services on one real PostgreSQL ledger, driven by the benchmark itself (not
timed: the figures are printed, only the outcomes are asserted).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.hub, pytest.mark.postgres]

LOAD = Path(__file__).resolve().parents[2] / "benchmarks" / "load.py"


def load_module():
    spec = importlib.util.spec_from_file_location("jhgpu_load_benchmark", LOAD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "figures.json"
    code = load_module().main([*args, "--hubs", "2", "--db", "postgresql", "--check", "--json", str(out)])
    report = json.loads(out.read_text())
    report["exit"] = code
    return report


@pytest.mark.timeout(600)
def test_two_hubs_lose_no_acknowledged_sample(tmp_path):
    report = run(tmp_path, "--clients", "8", "--seconds", "12", "--push", "2")
    assert report["acked"] >= 2 * 8 * 4  # every client was answered for several rounds
    assert report["missing"] == 0 and report["errors"] == 0 and report["exit"] == 0
    assert report["endpoints"]["every round/samples"]["503"] == 0  # nothing held it back


@pytest.mark.timeout(600)
def test_a_writer_held_by_a_locked_ledger_answers_503_then_recovers(tmp_path):
    # the ledger's write lock held from 4 s to 10 s into the run: each service's writer waits on it, its queue
    # of 3 fills, and the pushes past it are answered 503 (and sent again by the clients after Retry-After)
    report = run(
        tmp_path, "--clients", "12", "--seconds", "20", "--push", "1", "--queue-limit", "3", "--hold-lock", "4", "6"
    )
    samples = report["endpoints"]["every round/samples"]
    assert samples["503"] > 0
    assert report["missing"] == 0 and report["errors"] == 0 and report["exit"] == 0
    # after the lock: every client's samples taken again (the queues drained, new pushes acknowledged)
    assert report["acked_after_hold"] >= 2 * 12 * 4
