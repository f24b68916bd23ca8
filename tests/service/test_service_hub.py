"""The gpu service with a real hub, real single-user servers, a real SMTP server and a webhook."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.billing import BudgetRule, billed_minutes
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.hub


def service_pids(db_marker: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "jupyterhub_gpu.service"], capture_output=True, text=True).stdout.split()
    pids = []
    for pid in map(int, out):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().decode()
        except OSError:
            continue
        if db_marker in cmdline:
            pids.append(pid)
    return pids


def ledger_of(tmp_path) -> Ledger:
    return Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")


def aware(moment):
    return moment.replace(tzinfo=timezone.utc)


def test_sessions_are_charged_per_started_minute(make_hub, tmp_path):
    hub = make_hub(gpu_hub_config(tmp_path))
    hub.create_users("short", "long")
    hub.start_server("short", {"profile": "t4"})
    hub.start_server("long", {"profile": "a100"})
    hub.wait_ready("short")
    hub.wait_ready("long")
    ledger = ledger_of(tmp_path)
    started = {r.user: aware(r.started) for r in ledger.open_sessions()}
    assert set(started) == {"short", "long"}

    # stop "short" before its first minute is over, "long" just after
    time.sleep(max(0, 50 - (datetime.now(timezone.utc) - started["short"]).total_seconds()))
    hub.stop_server("short")
    time.sleep(max(0, 61.5 - (datetime.now(timezone.utc) - started["long"]).total_seconds()))
    hub.stop_server("long")
    hub.wait_stopped("short")
    hub.wait_stopped("long")

    records = {r.user: r for r in ledger.sessions()}
    short, long = records["short"], records["long"]
    assert (short.stopped - short.started).total_seconds() < 60
    assert (long.stopped - long.started).total_seconds() > 61
    assert short.minutes == 1 and short.cost_micros == 50_000  # ¥0.05
    assert long.minutes == 2 and long.cost_micros == 500_000  # 2 × ¥0.25
    for r in (short, long):
        assert r.minutes == billed_minutes(r.started, r.stopped)
        assert r.stop_reason == "stopped"
        assert r.currency == "CNY"
        assert len(r.gpu_list) == 1
    assert len(ledger.sessions()) == 2  # nothing doubled


def test_a_session_stopped_while_the_service_is_down_is_charged_to_its_stop(make_hub, tmp_path):
    hub = make_hub(gpu_hub_config(tmp_path))
    hub.create_users("ann")
    hub.start_server("ann", {"profile": "t4"})
    hub.wait_ready("ann")
    marker = str(tmp_path / "gpu_service_config.py")
    pids = wait_for(lambda: service_pids(marker), 30, what="the gpu service process")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    before = datetime.now(timezone.utc)
    hub.stop_server("ann")
    hub.wait_stopped("ann")
    after = datetime.now(timezone.utc)
    record = ledger_of(tmp_path).sessions(user="ann")[0]
    assert before - timedelta(seconds=1) <= aware(record.stopped) <= after
    assert record.minutes == billed_minutes(record.started, record.stopped) == 1
    # the hub brings the service back, and replaying changes nothing
    wait_for(lambda: service_pids(marker), 60, what="the service restarted by the hub")
    assert len(ledger_of(tmp_path).sessions()) == 1


def test_over_budget_user_cannot_start(make_hub, tmp_path):
    # the refusal is the spawn's answer only if it comes within slow_spawn_timeout (0.5 s in the tests' hubs, too
    # short for a budget check on a loaded machine: JupyterHub then answers 202 and the spawn fails later)
    hub = make_hub(gpu_hub_config(tmp_path) + '\nc.JupyterHub.tornado_settings = {"slow_spawn_timeout": 15}\n')
    hub.create_users("stu1")
    ledger = ledger_of(tmp_path)
    # the hub published its profiles and prices at startup
    assert [(p["slug"], p["rate_per_minute"]) for p in ledger.pricing()] == [
        ("t4", "0.05"),
        ("a100", "0.25"),
        ("cpu", "0.01"),
    ]
    now = datetime.now(timezone.utc)
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("0.40")), now)
    # ¥0.40 covers 8 minutes of T4 (¥0.05/min), less than the 10 minutes a spawn needs
    r = hub.start_server("stu1", {"profile": "t4"})
    assert r.status_code == 403, r.text
    message = r.json()["message"]
    assert message.startswith("Budget too low for 10 minutes of this profile: CN¥0.00 of CN¥0.40")
    assert "the cs231n group's budget" in message and "resets on 1 " in message
    wait_for(lambda: hub.server("stu1") is None, 10, what="nothing started")
    # the CPU profile at ¥0.01/min fits
    r = hub.start_server("stu1", {"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("stu1")


def test_running_user_reaching_the_budget_is_warned_then_stopped(make_hub, tmp_path, smtp_server, webhook):
    config = gpu_hub_config(
        tmp_path, smtp_port=smtp_server.port, webhook_url=webhook.url, tick=1, grace=4, min_minutes=0
    )
    hub = make_hub(config)
    hub.create_users("stu2")
    ledger = ledger_of(tmp_path)
    # exactly the first minute of an A100 (¥0.25): the session reaches 100% as it starts
    ledger.set_budget(BudgetRule("user", "stu2", "week", "money", Decimal("0.25")), datetime.now(timezone.utc))
    hub.start_server("stu2", {"profile": "a100"})
    # no wait for "ready": the session is billed from the spawn, so on a slow machine the 4 s grace can
    # end (and the stop come) before the hub ever reports the server ready
    wait_for(lambda: ledger.sessions(user="stu2"), 90, what="stu2's session in the ledger")
    notices = wait_for(lambda: ledger.notices("stu2"), 30, what="the 100% notice")
    assert "stopped in 4 seconds" in notices[-1].message or "stopped" in notices[-1].message
    hub.wait_stopped("stu2", timeout=60)
    record = ledger.sessions(user="stu2")[0]
    # the grace period (4 s) passed between the 100% notice and the stop
    assert (record.stopped - notices[-1].created).total_seconds() >= 4
    assert record.stop_reason == "budget"
    assert record.minutes == 1 and record.cost_micros == 250_000
    # the mail reached the SMTP server (through Apprise: one mail to each recipient); the webhook got the
    # JSON alert (Apprise's JSON body with the documented fields)
    recipients = ["admin@example.edu", "prof@example.edu", "stu2@students.example.edu"]
    wait_for(lambda: len(smtp_server.messages) >= 3, 10, what="alert mail")
    assert sorted(rcpt for _sender, [rcpt], _message in smtp_server.messages) == recipients
    assert all("¥0.25" in message.get_content() for _, _, message in smtp_server.messages)
    wait_for(lambda: webhook.bodies, 10, what="webhook")
    assert webhook.bodies[0]["user"] == "stu2" and webhook.bodies[0]["threshold"] == 100
    # 80% and 95% were passed in the same instant: only the 100% alert is sent, once
    time.sleep(2)
    assert len(smtp_server.messages) == 3 and len(webhook.bodies) == 1
    assert {(a.threshold, a.channel) for a in ledger.alerts("stu2")} == {
        (t, c) for t in (80, 95) for c in ("lab", "apprise")
    } | {(100, c) for c in ("lab", "email", "webhook", "apprise")}
    assert len(ledger.notices("stu2")) == 1


def test_reconciliation_closes_sessions_the_hub_no_longer_runs(make_hub, tmp_path):
    from jupyterhub_gpu.session import SessionStart

    hub = make_hub(gpu_hub_config(tmp_path, reconcile=1, tick=1))
    hub.create_users("kept", "ghost")
    hub.start_server("kept", {"profile": "t4"})
    hub.wait_ready("kept")
    ledger = ledger_of(tmp_path)
    # a session whose stop was never recorded (its hub died at the wrong moment)
    started = datetime.now(timezone.utc) - timedelta(minutes=3)
    ghost = SessionStart("ghost-session", "ghost", "", (), "t4", ("GPU-x",), 50_000, "CNY", started)
    assert ledger.record_start(ghost)
    record = wait_for(
        lambda: (r := ledger.get_session("ghost-session")) and r.stopped is not None and r, 30, what="reconciled"
    )
    assert record.stop_reason == "reconciled"
    assert aware(record.stopped) == started  # never seen running: closed at its start, one minute billed
    assert record.minutes == 1
    kept = ledger.sessions(user="kept")[0]
    assert kept.stopped is None and kept.last_seen is not None  # seen alive, left open
