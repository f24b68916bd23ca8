"""One source of truth for the lab's currency and time zone: the hub publishes them, the service takes them.

Real hubs with their managed gpu service, and the service as a process on a
ledger where the settings were published as the hub publishes them
(``lab.published_rows`` through ``Ledger.set_lab_settings``).
"""

from __future__ import annotations

import re
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu import lab
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config
from tests.service.test_service_process import run_service

UTC = timezone.utc
PUBLISHED = {
    **lab.published_rows(
        {"currency": "CNY", "currency_symbol": None, "timezone": "Asia/Shanghai"},
        {
            "currency": "c.GPULocalSpawner.currency",
            "currency_symbol": "the default of c.GPULocalSpawner.currency_symbol",
            "timezone": "c.GPULocalSpawner.budget_timezone",
        },
    ),
    # the spawn's minimum charge (the hub config's budget_min_minutes), which a restart's budget check reads
    lab.MIN_MINUTES: "10",
}


def seed(ledger: Ledger, sid: str, user: str, currency: str, started: str, minutes: int, rate: int = 50_000):
    start = datetime.fromisoformat(started).replace(tzinfo=UTC)
    ledger.record_start(SessionStart(sid, user, "", ("cs231n",), "t4", ("GPU-sim-t4-0",), rate, currency, start))
    ledger.record_stop(sid, start + timedelta(minutes=minutes), "stopped")


def without_service_currency(tmp_path: Path) -> None:
    """The service's config as gpu_hub_config writes it, less its currency and time zone: the hub's are taken."""
    path = tmp_path / "gpu_service_config.py"
    lines = path.read_text().splitlines()
    kept = [line for line in lines if not line.startswith(("c.GPUService.currency", "c.GPUService.timezone"))]
    assert len(kept) == len(lines) - 2
    path.write_text("\n".join(kept) + "\n")


# -- with a real hub ---------------------------------------------------------------------------------


@pytest.mark.hub
def test_the_service_takes_the_hubs_currency_and_time_zone_and_pages_use_the_readers_locale(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path)
    without_service_currency(tmp_path)
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    # 2025-03-05 16:30 UTC is 00:30 on 6 March in Shanghai; 10 minutes of T4 at ¥0.05
    seed(ledger, "cny-1", "stu1", "CNY", "2025-03-05T16:30:00", 10)
    # a session charged in USD before the lab changed its currency keeps its own
    seed(ledger, "usd-1", "stu1", "USD", "2025-03-10T01:00:00", 2, rate=1_000_000)
    hub = make_hub(config)
    hub.create_users("stu1")

    assert ledger.lab_settings() == PUBLISHED  # what the hub published at its start
    log = hub.log_text()
    assert (
        "c.GPULocalSpawner.currency is 'CNY' but the ledger already holds sessions charged in another currency"
        " (1 in USD)"
    ) in log

    browser = hub.login("stu1")
    url = f"{hub.url}/services/gpu/"
    assert browser.get(url, timeout=30).status_code == 200  # through OAuth
    me = browser.get(url + "api/v1/me", timeout=30).json()
    assert me["currency"] == "CNY" and me["currency_symbol"] == "CN¥"  # the service's config says neither

    march = "?since=2025-03-01&until=2025-03-31"
    english = browser.get(url + march + "&lang=en", timeout=30).text
    cost = re.search(r'<tr data-session="cny-1".*?class="text-end cost">([^<]*)<', english, re.S).group(1)
    assert cost == "CN¥0.50"
    assert "Mar 6, 2025 00:30" in english  # in the lab's time zone, not 16:30 UTC
    usd = re.search(r'<tr data-session="usd-1".*?class="text-end cost">([^<]*)<', english, re.S).group(1)
    assert usd == "$2.00"  # shown in the currency it was charged in, never relabelled CN¥

    chinese = browser.get(url + march + "&lang=zh-CN", timeout=30).text
    cost = re.search(r'<tr data-session="cny-1".*?class="text-end cost">([^<]*)<', chinese, re.S).group(1)
    assert cost == "¥0.50"
    assert "2025年3月6日 00:30" in chinese
    usd = re.search(r'<tr data-session="usd-1".*?class="text-end cost">([^<]*)<', chinese, re.S).group(1)
    assert usd == "US$2.00"


@pytest.mark.hub
def test_a_service_set_to_another_currency_stops_the_hubs_start_naming_both(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path)
    service_config = tmp_path / "gpu_service_config.py"
    service_config.write_text(service_config.read_text().replace('currency = "CNY"', 'currency = "USD"'))
    hub = make_hub(config, start=False)
    hub.start(wait=False)
    assert hub.proc.wait(120) != 0  # JupyterHub stops when its managed service does not come up
    log = hub.log_text()
    assert (
        "GPUService.currency is 'USD' but the hub's spawner publishes 'CNY' (c.GPULocalSpawner.currency):"
        " set one of them (c.GPULocalSpawner.currency = 'USD' in the hub's config), or remove GPUService.currency"
        " so the service takes the hub's"
    ) in log
    assert "Traceback" not in log.split("GPUService.currency is 'USD'")[0][-2000:]


# -- the service as a process ------------------------------------------------------------------------


def published_ledger(tmp_path: Path, rows=PUBLISHED) -> Ledger:
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")  # the ledger run_service uses
    ledger.set_lab_settings(rows, datetime.now(UTC))
    return ledger


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--currency=USD"],
            "GPUService.currency is 'USD' but the hub's spawner publishes 'CNY' (c.GPULocalSpawner.currency)",
        ),
        (
            ["--timezone=UTC"],
            "GPUService.timezone is 'UTC' but the hub's spawner publishes 'Asia/Shanghai'"
            " (c.GPULocalSpawner.budget_timezone): set one of them (c.GPULocalSpawner.budget_timezone = 'UTC'",
        ),
        (
            ["--GPUService.currency_symbol=RMB"],
            "GPUService.currency_symbol is 'RMB' but the hub's spawner publishes ''"
            " (the default of c.GPULocalSpawner.currency_symbol)",
        ),
    ],
)
def test_the_service_refuses_settings_that_differ_from_the_hubs(tmp_path, args, message):
    published_ledger(tmp_path)
    proc, _ = run_service(tmp_path, *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert message in out and "configuration error" in out and "Traceback" not in out, out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--currency=cny"], "GPUService.currency is an ISO 4217 code, written in capitals: use 'CNY', not 'cny'"),
        (["--currency=RMB"], "GPUService.currency 'RMB' is not an ISO 4217 currency code; did you mean 'CNY'"),
        (["--currency=DEM"], "GPUService.currency 'DEM' (German Mark) is a former ISO 4217 currency, not in use today"),
    ],
)
def test_a_currency_code_not_in_use_is_refused_with_a_hint(tmp_path, args, message):
    proc, _ = run_service(tmp_path, *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and message in out and "Traceback" not in out, out


def _run_until_listening(tmp_path, *args):
    proc, port = run_service(tmp_path, *args)
    url = f"http://127.0.0.1:{port}/services/gpu/api/v1/openapi.yaml"

    def up():
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[0])
        try:
            return requests.get(url, timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_for(up, 30, what="the service listening")
    return proc


def _stop(proc) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[0]


def test_settings_that_agree_start_and_a_changed_currency_is_warned_of(tmp_path):
    ledger = published_ledger(tmp_path)
    seed(ledger, "usd", "ann", "USD", "2025-01-01T00:00:00", 1)
    proc = _run_until_listening(tmp_path, "--currency=CNY", "--timezone=Asia/Shanghai")
    out = _stop(proc)
    assert proc.returncode == 0, out
    assert "currency CNY, time zone Asia/Shanghai" in out
    assert (
        "the lab's currency is 'CNY' but the ledger already holds sessions charged in another currency (1 in USD)"
        in out
    )


def test_a_service_started_before_the_hub_ever_published_runs_then_stops_when_the_hub_publishes_others(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    proc = _run_until_listening(tmp_path, "--currency=EUR", "--tick-interval=0.3")
    try:
        time.sleep(1)  # ticks with nothing published: it runs on its own settings
        assert proc.poll() is None
        ledger.set_lab_settings(PUBLISHED, datetime.now(UTC))  # the hub starts with CNY
        proc.wait(30)
    finally:
        out = _stop(proc)
    assert proc.returncode == 1, out
    assert "the hub has not published the lab's currency and time zone to this ledger yet" in out
    assert "currency 'EUR'" in out
    assert "the hub now publishes other lab settings than this service started with (currency 'EUR' -> 'CNY'" in out
    # started again, it refuses: its own currency is set and differs from the hub's
    proc, _ = run_service(tmp_path, "--currency=EUR")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "GPUService.currency is 'EUR' but the hub's spawner publishes 'CNY'" in out
