"""``jupyterhub-gpu doctor`` on the demo config and broken copies of it, against real ledgers, mail and ports.

Each broken case asserts the line's status, that its fix names what to change, and the exit status.
The Docker checks (images, runtime, the reference Docker config) are in test_doctor_docker.py (-m docker).
"""

from __future__ import annotations

import hashlib
import json
import socket
import sqlite3
from datetime import datetime, timezone

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import free_port
from tests.doctor.conftest import Report


def migrate(db_url: str, revision: str) -> None:
    """A ledger at an older migration, as an older jupyterhub-gpu left it."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    engine = create_engine(db_url)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
    engine.dispose()


def head() -> str:
    ledger_dir = sorted(p.name for p in (MIGRATIONS / "versions").glob("0*.py"))
    return ledger_dir[-1].split("_", 1)[0]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_demo_config_passes_or_warns_only(doctor):
    done = doctor.command(doctor.config(), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = Report(done.returncode, json.loads(done.stdout)["results"], done.stdout, done.stderr)
    assert "fail" not in report.statuses()
    assert "SIMULATED" in report.one("gpus", "warn")["message"]  # labelled wherever it is shown
    assert report.one("alerts", "warn")["fix"]
    assert {r["status"] for r in report.of("docker")} == {"skip"}  # local processes: no Docker
    assert all(r["status"] == "pass" for r in report.of("ports"))
    assert not doctor.ledger.exists()  # nothing written: the hub creates the ledger at its first start


def test_the_text_report_has_one_line_per_check_and_the_fix(doctor):
    done = doctor.command(doctor.config('c.GPULocalSpawner.profiles[0]["price_per_gpu_hour"] = "1.00001"\n'))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(failed) == 1 and "'t4'" in failed[0] and " — fix: " in failed[0]
    assert lines[-1].endswith("1 fail, 3 skip") and "pass" in lines[-1]  # docker, images; limits: no profiles


def test_a_bad_price_fails_naming_the_profile_and_the_field(doctor):
    report = doctor.run(doctor.config('c.GPULocalSpawner.profiles[0]["price_per_gpu_hour"] = "1.00001"\n'))
    assert report.status == 1
    line = report.one("profiles", "fail")
    assert "'t4'" in line["message"] and "price_per_gpu_hour" in line["message"]
    assert "jupyterhub_config.py" in line["fix"]


def test_a_profile_asking_more_gpus_than_the_host_has_fails(doctor):
    report = doctor.run(doctor.config('c.GPULocalSpawner.profiles[2]["gpu_count"] = 3\n'))  # t4x2 -> 3× T4
    assert report.status == 1
    assert "'t4x2': needs 3× 'T4' but this host has 2" in report.one("profiles", "fail")["message"]


def test_roles_missing_start_servers_fail_naming_the_role_and_the_scope(doctor):
    report = doctor.run(doctor.config('c.JupyterHub.load_roles[0]["scopes"].remove("start:servers")\n'))
    assert report.status == 1
    line = report.one("roles", "fail")
    assert "'gpu-service' lacks start:servers" in line["message"]
    assert "'start:servers'" in line["fix"] and "load_roles" in line["fix"]


def test_a_service_currency_differing_from_the_spawners_fails_naming_both(doctor):
    extra = """
    c.JupyterHub.services[0]["command"] = [
        "--currency=USD" if a == "--currency=CNY" else a for a in c.JupyterHub.services[0]["command"]
    ]
    """
    report = doctor.run(doctor.config(extra))
    assert report.status == 1
    line = report.one("currency", "fail")
    assert "GPUService.currency is 'USD'" in line["message"] and "'CNY'" in line["message"]
    assert "c.GPULocalSpawner.currency" in line["fix"]


def test_a_ledger_on_an_old_migration_warns_and_is_not_touched(doctor):
    doctor.state.mkdir(parents=True)
    url = f"sqlite:///{doctor.ledger}"
    migrate(url, "0008")
    before = digest(doctor.ledger)
    report = doctor.run(doctor.config())
    assert report.status == 0  # a warning: the hub migrates it at start
    line = report.one("ledger", "warn")
    assert f"at migration 0008, this jupyterhub-gpu needs {head()}" in line["message"]
    assert "back the database up" in line["fix"] and "migrates" in line["fix"]
    assert digest(doctor.ledger) == before  # read only
    with sqlite3.connect(doctor.ledger) as db:
        assert db.execute("select version_num from alembic_version").fetchall() == [("0008",)]


def test_a_ledger_at_the_newest_migration_passes(doctor):
    doctor.state.mkdir(parents=True)
    Ledger(f"sqlite:///{doctor.ledger}").close()
    report = doctor.run(doctor.config())
    assert f"at migration {head()} (the newest)" in report.one("ledger", "pass")["message"]


def test_a_ledger_holding_sessions_in_another_currency_warns(doctor):
    doctor.state.mkdir(parents=True)
    ledger = Ledger(f"sqlite:///{doctor.ledger}")
    ledger.record_start(
        SessionStart(
            id="s-usd",
            user="alice",
            server_name="",
            groups=(),
            profile="t4",
            gpus=(),
            rate_micros=50_000,
            currency="USD",
            started=datetime(2026, 11, 2, 9, 0, tzinfo=timezone.utc),
            simulated=True,
        )
    )
    ledger.close()
    report = doctor.run(doctor.config())  # the demo prices in CNY
    assert report.status == 0
    line = report.one("ledger", "warn")
    assert "1 in USD" in line["message"] and "c.GPULocalSpawner.currency" in line["message"]
    assert "budgets" in line["fix"]


def test_a_ledger_from_a_newer_version_fails(doctor):
    doctor.state.mkdir(parents=True)
    Ledger(f"sqlite:///{doctor.ledger}").close()
    with sqlite3.connect(doctor.ledger) as db:
        db.execute("update alembic_version set version_num = '0099'")
    report = doctor.run(doctor.config())
    assert report.status == 1
    line = report.one("ledger", "fail")
    assert "0099" in line["message"] and "does not know" in line["message"]
    assert "cannot be migrated down" in line["fix"]


@pytest.mark.postgres
def test_a_postgresql_ledger_reachable_and_current_passes(doctor, postgres_url):
    Ledger(postgres_url).close()
    extra = f"""
    c.GPULocalSpawner.ledger_db_url = {postgres_url!r}
    c.JupyterHub.services[0]["command"] = [
        {f"--db-url={postgres_url}"!r} if a.startswith("--db-url=") else a for a in c.JupyterHub.services[0]["command"]
    ]
    """
    report = doctor.run(doctor.config(extra))
    line = report.one("ledger", "pass")
    assert f"at migration {head()}" in line["message"] and "postgresql" in line["message"]


@pytest.mark.postgres
def test_an_unreachable_postgresql_ledger_fails(doctor):
    url = f"postgresql+psycopg://gpu:secret@127.0.0.1:{free_port()}/ledger"
    extra = f"""
    c.GPULocalSpawner.ledger_db_url = {url!r}
    c.JupyterHub.services[0]["command"] = [
        {f"--db-url={url}"!r} if a.startswith("--db-url=") else a for a in c.JupyterHub.services[0]["command"]
    ]
    """
    report = doctor.run(doctor.config(extra))
    assert report.status == 1
    line = report.one("ledger", "fail")
    assert "cannot reach the ledger" in line["message"] and "gpu:secret@" not in report.stdout
    assert "database server runs" in line["fix"]


def test_an_unreachable_smtp_host_fails_naming_the_setting(doctor):
    port = free_port()  # nothing listens there
    service = doctor.service_config(
        f"""
        c.GPUService.smtp_host = "127.0.0.1"
        c.GPUService.smtp_port = {port}
        c.GPUService.mail_from = "gpu@example.edu"
        """
    )
    report = doctor.run(doctor.config(), "--service-config", str(service))
    assert report.status == 1
    line = report.one("alerts", "fail")
    assert f"127.0.0.1:{port} unreachable" in line["message"]
    assert "smtp_host" in line["fix"]


def test_a_reachable_smtp_server_passes_and_send_test_delivers_to_the_admins(doctor, smtp_server):
    service = doctor.service_config(
        f"""
        c.GPUService.smtp_host = "127.0.0.1"
        c.GPUService.smtp_port = {smtp_server.port}
        c.GPUService.mail_from = "gpu@example.edu"
        c.GPUService.admin_emails = ["labadmin@example.edu"]
        """
    )
    report = doctor.run(doctor.config(), "--service-config", str(service))
    assert "EHLO answered" in report.one("alerts", "pass")["message"]
    assert smtp_server.messages == []  # reaching is not sending
    report = doctor.run(doctor.config(), "--service-config", str(service), "--send-test")
    assert "test message sent" in report.one("alerts", "pass")["message"]
    [(_sender, to, message)] = smtp_server.messages
    assert to == ["labadmin@example.edu"] and "test" in message["Subject"]


def test_an_apprise_webhook_is_reached_and_send_test_posts_to_it(doctor, webhook):
    url = webhook.url.replace("http://", "json://")
    service = doctor.service_config(f"c.GPUService.notify_admin_urls = [{url!r}]\n")
    report = doctor.run(doctor.config(), "--service-config", str(service), "--send-test")
    assert report.status == 0
    assert "test message sent" in report.one("alerts", "pass")["message"]
    assert len(webhook.bodies) == 1 and "doctor" in str(webhook.bodies[0])


def test_a_port_in_use_fails_naming_the_setting(doctor):
    hub_port = int(doctor.env["JUPYTERHUB_GPU_DEMO_HUB_PORT"])
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", hub_port))
        taken.listen()
        report = doctor.run(doctor.config())
    assert report.status == 1
    line = report.one("ports", "fail")
    assert f"127.0.0.1:{hub_port}" in line["message"] and "hub_port" in line["message"]
    assert "ss -ltnp" in line["fix"]


def test_the_ports_are_not_checked_while_the_hub_runs(doctor, make_hub):
    hub = make_hub(
        """
        c.JupyterHub.spawner_class = "gpu-local"
        c.GPULocalSpawner.gpu_backend = "simulated"
        c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 1}]
        c.GPULocalSpawner.profiles = [{"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"}]
        """
    )
    report = doctor.run(hub.config_file)
    line = report.one("ports", "skip")
    assert f"answers at {hub.url}" in line["message"]
    assert report.one("service", "fail")["message"].startswith("no gpu service")  # a hub without billing
