"""A real Prometheus scraping a real hub and gpu service with the repository's scrape config and alert rules.

Debian's ``prometheus`` (``make prometheus-setup``) runs on loopback with config/prometheus/prometheus.yml aimed
at the test hub (its jobs, paths and token file kept; intervals 1 s) and config/prometheus/rules.yml with every
``for`` at 0 s (``promtool test rules`` checks the real ones). The hub runs simulated GPUs and real single-user
servers, its ledger on a real PostgreSQL (so that the ledger can be made unreachable and reachable again). The
test checks both targets are up with the documented token, that no alert fires in the healthy state, that each
alert fires in a scenario built for it, and that every panel of config/grafana/jupyterhub-gpu.json returns data.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries.samples import record_sample
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.session import SessionStart
from tests.conftest import ROOT, wait_for
from tests.monitoring.prom import DASHBOARD, JOBS, Prometheus, alert_rules, dashboard_expressions, scrape_config_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.prometheus, pytest.mark.hub, pytest.mark.postgres]

UTC = timezone.utc
TOKEN = uuid.uuid4().hex + uuid.uuid4().hex
QUEUE_TIMEOUT = 8
# the prometheus service and its role exactly as docs/service-api.md and docs/monitoring.md say to create them
EXTRA = f"""
c.GPULocalSpawner.queue_timeout = {QUEUE_TIMEOUT}
c.JupyterHub.services.append({{"name": "prometheus", "api_token": {TOKEN!r}}})
c.JupyterHub.load_roles.append({{
    "name": "gpu-metrics",
    "services": ["prometheus"],
    "scopes": ["read:metrics", "custom:gpu-metrics:read", "access:services!service=gpu"],
}})
"""

#: what the dashboard's panels query; test_dashboard.py checks the dashboard holds exactly these
DASHBOARD_QUERIES = {
    "sum by (group, currency) (increase(jupyterhub_gpu_spend_total[1d]))",
    "sum by (profile, currency) (increase(jupyterhub_gpu_spend_total[1d]))",
    "sum(avg_over_time(jupyterhub_gpu_active_gpus[1h]))",
    "sum(avg_over_time(jupyterhub_gpu_busy_gpus[1h]))",
    "sum by (profile) (jupyterhub_gpu_active_sessions)",
    "sum by (model) (jupyterhub_gpu_queue_length)",
    "histogram_quantile(0.9, sum by (le, model) (rate(jupyterhub_gpu_queue_wait_seconds_bucket[30m])))",
    "max by (model) (jupyterhub_gpu_queue_oldest_wait_seconds)",
    'sum by (reason) (increase(jupyterhub_gpu_stops_total{reason=~"gpu_idle|busy_gpu_idle|inactive|max_age|preempted"}'
    "[1h]))",
    "sum by (reason) (increase(jupyterhub_gpu_stops_total[1h]))",
    'max by (subject, unit) (jupyterhub_gpu_budget_used{scope="group"} / jupyterhub_gpu_budget_limit{scope="group"})',
    "max by (profile) (jupyterhub_gpu_session_gpu_idle_seconds)",
}


def closed_session(ledger: Ledger, user: str, groups, profile: str, gpus, rate: int, minutes: int, reason: str):
    """A session that ran ``minutes`` and stopped just now, as the hub records one."""
    now = datetime.now(UTC)
    sid = f"mon-{uuid.uuid4().hex[:12]}"
    started = now - timedelta(minutes=minutes)
    ledger.record_start(SessionStart(sid, user, "", tuple(groups), profile, tuple(gpus), rate, "CNY", started))
    ledger.record_stop(sid, now, reason)


def service_pid(marker: str) -> int | None:
    out = subprocess.run(["pgrep", "-f", "jupyterhub_gpu.service"], capture_output=True, text=True).stdout.split()
    for pid in map(int, out):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode():
                return pid
        except OSError:
            continue
    return None


def firing_names(prom: Prometheus) -> set[str]:
    return {a["labels"]["alertname"] for a in prom.firing()}


def test_prometheus_scrapes_the_hub_and_service_and_every_alert_fires_when_it_should(
    make_hub, tmp_path, postgres_server, postgres_url
):
    hub = make_hub(gpu_hub_config(tmp_path, db_url=postgres_url, tick=2) + EXTRA)
    ledger = Ledger(postgres_url)
    hub.create_users("stu1", "stu2", "thea", "waiter")
    for user, profile in (("stu1", "t4"), ("stu2", "t4"), ("thea", "a100")):
        r = hub.start_server(user, {"profile": profile})
        assert r.status_code in (201, 202), r.text
    for user in ("stu1", "stu2", "thea"):
        hub.wait_ready(user)
    # history: a stopped thesis session (spend, billed minutes and a stop from the first scrape on)
    closed_session(ledger, "thea", ["thesis"], "a100", ["GPU-sim-a100-0"], 250_000, 12, "stopped")
    ledger.set_budget(BudgetRule("user", "thea", "month", "money", Decimal("1000")), datetime.now(UTC))

    token_file = tmp_path / "jupyterhub-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    prom = Prometheus(workdir, scrape_config_for(workdir, f"127.0.0.1:{hub.port}", token_file))
    try:
        # both targets up with the one token (read:metrics for the hub, custom:gpu-metrics:read for the service)
        def all_up():
            targets = prom.targets()
            return len(targets) == len(JOBS) and all(t["health"] == "up" for t in targets) and targets

        targets = wait_for(all_up, 60, interval=0.5, what="both targets up")
        assert {t["labels"]["job"]: t["scrapeUrl"].split(str(hub.port), 1)[1] for t in targets} == JOBS

        # the healthy state: every rule evaluated on scraped data, none firing
        prom.wait_evaluated(time.time() + 3)
        assert prom.firing() == [], prom.firing()
        assert prom.query("jupyterhub_gpu_ledger_up")[0]["value"][1] == "1"

        # a session whose GPU has been idle for two hours (its server sent samples: 0% every minute)
        now = datetime.now(UTC)
        sid = "mon-idle"
        ledger.record_start(
            SessionStart(sid, "idler", "", (), "t4", ("GPU-sim-t4-3",), 50_000, "CNY", now - timedelta(hours=2))
        )
        for i in range(1, 6):
            at = (now - timedelta(minutes=i)).replace(second=0, microsecond=0)
            sample = Sample(sid, at + timedelta(seconds=30), 3, 0.0, 500, 16000, 1, 0, None, None, ())
            record_sample(ledger, "idler", sample)
        alert = prom.wait_firing("GPUSessionIdle", user="idler")
        assert alert["labels"]["profile"] == "t4" and float(alert["value"]) >= 7000
        assert [a["labels"]["user"] for a in prom.firing() if a["labels"]["alertname"] == "GPUSessionIdle"] == [
            "idler"  # the servers just started are not idle an hour
        ]

        # a group budget with under 10% left; thea's own budget (almost all left) stays silent
        ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("10.00")), datetime.now(UTC))
        closed_session(ledger, "stu1", ["cs231n"], "t4", ["GPU-sim-t4-0"], 50_000, 190, "stopped")  # ¥9.50
        alert = prom.wait_firing("GPUBudgetNearlyExhausted", subject="cs231n")
        assert alert["labels"]["scope"] == "group" and alert["labels"]["unit"] == "money"
        assert not [a for a in prom.firing() if a["labels"].get("subject") == "thea"]

        # culls surging: 21 servers culled at once (idle GPU), beside stops by their users that do not count
        for _ in range(3):
            closed_session(ledger, "ann", [], "cpu", [], 10_000, 3, "stopped")
        assert "GPUCullsSurging" not in firing_names(prom)
        for _ in range(21):
            closed_session(ledger, "culled", [], "cpu", [], 10_000, 40, "gpu_idle")
        prom.wait_firing("GPUCullsSurging", job="jupyterhub-gpu")

        # the queue: the only A100 is thea's; waiter's spawn waits over half its time limit, then times out
        r = hub.start_server("waiter", {"profile": "a100"})
        assert r.status_code in (201, 202), r.text
        alert = prom.wait_firing("GPUQueueWaitLong", model="A100")
        assert alert["labels"]["job"] == "jupyterhub"  # the hub's own /hub/metrics
        prom.wait_firing("GPUQueueTimeouts", QUEUE_TIMEOUT + 30, model="A100")
        wait_for(lambda: hub.server("waiter") is None, 30, what="the timed-out spawn gone")
        prom.wait_resolved("GPUQueueWaitLong")

        # the gpu service stopped (SIGSTOP: it neither answers nor exits, so the hub does not restart it)
        marker = str(tmp_path / "gpu_service_config.py")
        pid = wait_for(lambda: service_pid(marker), 30, what="the gpu service process")
        assert "GPUServiceDown" not in firing_names(prom)
        os.kill(pid, signal.SIGSTOP)
        try:
            prom.wait_firing("GPUServiceDown", job="jupyterhub-gpu")
        finally:
            os.kill(pid, signal.SIGCONT)
        prom.wait_resolved("GPUServiceDown")

        # the ledger unreachable: its database refuses connections; the scrape still answers, the ticks fail
        name = postgres_url.rsplit("/", 1)[1]
        assert not {"GPULedgerUnreachable", "GPUServiceTicksFailing", "GPUServiceTicksStalled"} & firing_names(prom)
        with postgres_server.connect() as db:
            db.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        try:
            prom.wait_firing("GPULedgerUnreachable", job="jupyterhub-gpu")
            prom.wait_firing("GPUServiceTicksFailing", job="jupyterhub-gpu")
            prom.wait_firing("GPUServiceTicksStalled", job="jupyterhub-gpu")
            assert [t["health"] for t in prom.targets()] == ["up", "up"]
        finally:
            with postgres_server.connect() as db:
                db.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        prom.wait_resolved("GPULedgerUnreachable")
        prom.wait_resolved("GPUServiceTicksStalled")

        # every alert of rules.yml fired above
        assert {r["alert"] for r in alert_rules()} == {
            "GPUSessionIdle",
            "GPUBudgetNearlyExhausted",
            "GPUCullsSurging",
            "GPUQueueWaitLong",
            "GPUQueueTimeouts",
            "GPUServiceDown",
            "GPULedgerUnreachable",
            "GPUServiceTicksFailing",
            "GPUServiceTicksStalled",
        }

        # every panel of the dashboard returns data
        dashboard = json.loads(DASHBOARD.read_text())
        assert set(dashboard_expressions(dashboard)) == DASHBOARD_QUERIES
        empty = [expr for expr in sorted(DASHBOARD_QUERIES) if not prom.query(expr)]
        assert not empty, f"panels with no data: {empty}"
        shot = os.environ.get("JUPYTERHUB_GPU_DASHBOARD_SCREENSHOT")
        if shot:  # scripts/dashboard-screenshot.py renders the panels from this Prometheus (docs/monitoring.md)
            subprocess.run(
                [sys.executable, str(ROOT / "scripts" / "dashboard-screenshot.py"), prom.url, shot], check=True
            )
    finally:
        prom.stop()
        ledger.close()
