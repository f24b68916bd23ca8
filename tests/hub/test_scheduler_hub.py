"""The lab's scheduler in a real hub: fair share between groups, the published queue, reservations.

Real JupyterHub, real single-user servers through ``gpu-local`` over simulated GPUs, the ledger in sqlite. The
past use that fair share weighs is written to the ledger as closed sessions, as the spawner itself writes them.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 1, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "default": True},
]
c.GPULocalSpawner.queue_timeout = 300
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.GPULocalSpawner.ledger_db_url = %(db)r
c.GPULocalSpawner.fair_share = True
c.GPULocalSpawner.schedule_interval = 1
c.JupyterHub.load_groups = {"thesis": {"users": ["tess", "theo"]}, "cs231n": {"users": ["ann", "ava"]}}
"""


def past_session(ledger: Ledger, user: str, group: str, hours: float, ended_ago: timedelta) -> None:
    stopped = utcnow() - ended_ago
    start = SessionStart(
        id=f"past-{user}-{hours}",
        user=user,
        server_name="",
        groups=(group,),
        profile="t4",
        gpus=("GPU-sim-past",),
        rate_micros=50_000,
        currency="CNY",
        started=stopped - timedelta(hours=hours),
        pool=group,
    )
    assert ledger.record_start(start)
    assert ledger.record_stop(start.id, stopped, "stopped", start)


def share_percent(message: str) -> int:
    found = re.search(r"your group has used (\d+)% of its share of T4 GPUs this week", message)
    assert found, message
    return int(found.group(1))


def test_a_group_over_its_share_waits_behind_the_other_group_and_is_told_why(make_hub, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = Ledger(db)
    # equal shares (the default); thesis used 3 T4-hours this week, cs231n 1
    past_session(ledger, "tess", "thesis", 3, timedelta(hours=1))
    past_session(ledger, "ann", "cs231n", 1, timedelta(hours=1))
    hub = make_hub(CONFIG % {"home": tmp_path / "homes", "db": db})
    hub.create_users("ann", "ava", "tess", "theo")

    hub.start_server("ann")  # holds the one T4
    hub.wait_ready("ann")
    hub.start_server("theo")  # thesis asks first ...
    wait_for(lambda: any(q.user == "theo" for q in rows.queue(ledger)), what="theo in the published queue")
    hub.start_server("ava")  # ... cs231n second, and is served first

    ava = hub.progress_events("ava", lambda e: "position 1 of 2" in e.get("message", ""))[-1]["message"]
    theo = hub.progress_events("theo", lambda e: "position 2 of 2" in e.get("message", ""))[-1]["message"]
    assert ava.startswith("Waiting for a free Simulated T4 — position 1 of 2"), ava
    assert theo.startswith("Waiting for a free Simulated T4 — position 2 of 2"), theo
    # the reasons: thesis used 75% of the T4 hours with half the shares, cs231n a quarter and a bit more
    assert share_percent(theo) > 140 and share_percent(ava) < 60, (theo, ava)

    # GET queue reads what the hub publishes: positions, reasons and the groups that pay
    def published():
        entries = {q.user: q for q in rows.queue(ledger)}
        return entries if set(entries) == {"ava", "theo"} and entries["ava"].position == 1 else None

    entries = wait_for(published, what="the published queue")
    assert (entries["ava"].position, entries["ava"].length, entries["ava"].group) == (1, 2, "cs231n")
    assert (entries["theo"].position, entries["theo"].length, entries["theo"].group) == (2, 2, "thesis")
    assert entries["theo"].reason_key == "share" and int(entries["theo"].values["percent"]) > 140

    # the T4 frees: the group under its share gets it, though it asked later
    hub.stop_server("ann")
    hub.wait_stopped("ann")
    hub.wait_ready("ava")
    assert hub.server("theo") is not None and not hub.server("theo").get("ready")
    theo = hub.progress_events("theo", lambda e: "position 1 of 1" in e.get("message", ""))[-1]["message"]
    assert "position 1 of 1" in theo
    wait_for(lambda: [q.user for q in rows.queue(ledger)] == ["theo"], what="theo alone in the queue")
    hub.stop_server("ava")
    hub.wait_ready("theo")
    wait_for(lambda: rows.queue(ledger) == [], what="an empty published queue")
