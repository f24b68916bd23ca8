"""Each hub's published profiles and prices on one ledger (sqlite and a real PostgreSQL): a hub's publication
replaces only its own, each hub reads its own, ``hub=None`` reads every hub's; the lab's settings stay one for
the ledger, and a second hub that publishes the same ones changes nothing a service watches."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from jupyterhub_gpu import lab
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger, make_engine
from tests.unit.ledger.test_ledger import T0

# the main case: a lab's Docker hub and the department's Kubernetes hub, other profiles, other prices
LAB = [
    {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
    {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
]
DEPT = [
    {"slug": "l4", "display_name": "1× L4", "gpu_model": "L4", "gpu_count": 1, "rate_per_minute": "0.08"},
    {"slug": "a100", "display_name": "A100 (dept)", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.20"},
]


@pytest.fixture
def two(db_url):
    """The ledgers of two hubs, ``lab-docker`` and ``dept-k8s``, on one database."""
    lab_hub, dept = Ledger(db_url, hub="lab-docker"), Ledger(db_url, hub="dept-k8s")
    yield lab_hub, dept
    lab_hub.close()
    dept.close()


def slugs(profiles) -> list[str]:
    return [p["slug"] for p in profiles]


def test_two_hubs_publish_their_own_profiles_and_each_reads_its_own(two):
    lab_hub, dept = two
    assert lab_hub.set_pricing(LAB, "CNY", T0) == 2
    assert dept.set_pricing(DEPT, "CNY", T0 + timedelta(minutes=1)) == 2  # the second start leaves the first's
    assert slugs(lab_hub.pricing()) == ["t4", "a100"]
    assert slugs(dept.pricing()) == ["l4", "a100"]
    # the same slug on two hubs is two profiles, each at its own hub's price
    assert {p["slug"]: p["rate_per_minute"] for p in lab_hub.pricing()}["a100"] == "0.25"
    assert {p["slug"]: p["rate_per_minute"] for p in dept.pricing()}["a100"] == "0.2"
    # a hub's own reads do not say the hub (one hub's answers are as before hubs)
    assert all("hub" not in p for p in lab_hub.pricing() + dept.pricing())
    # a hub publishing again replaces its own only
    lab_hub.set_pricing(LAB[:1], "CNY", T0 + timedelta(minutes=2))
    assert slugs(lab_hub.pricing()) == ["t4"] and slugs(dept.pricing()) == ["l4", "a100"]


def test_every_hubs_profiles_are_read_with_hub_none_each_naming_its_hub(two):
    lab_hub, dept = two
    lab_hub.set_pricing(LAB, "CNY", T0)
    dept.set_pricing(DEPT, "CNY", T0)
    every = [(p["hub"], p["slug"], p["rate_per_minute"]) for p in lab_hub.pricing(hub=None)]
    assert every == [
        ("dept-k8s", "l4", "0.08"),
        ("dept-k8s", "a100", "0.2"),
        ("lab-docker", "t4", "0.05"),
        ("lab-docker", "a100", "0.25"),
    ]
    assert [(p["hub"], p["slug"]) for p in dept.pricing(hub=None)] == [(h, s) for h, s, _ in every]
    # another hub's by its name
    assert slugs(lab_hub.pricing(hub="dept-k8s")) == ["l4", "a100"]
    assert lab_hub.pricing(hub="nowhere") == []


def test_a_single_hub_ledger_reads_its_profiles_as_before(ledger):
    ledger.set_pricing(LAB, "CNY", T0)
    (t4, a100) = ledger.pricing()
    assert set(t4) >= {"slug", "display_name", "gpu_model", "gpu_count", "rate_per_minute", "currency"}
    assert "hub" not in t4 and (t4["slug"], a100["slug"]) == ("t4", "a100")
    assert [p["hub"] for p in ledger.pricing(hub=None)] == ["default", "default"]


def test_two_hubs_publishing_the_same_lab_settings_change_nothing_a_service_watches(two):
    lab_hub, dept = two
    settings = {lab.CURRENCY: "CNY", lab.SYMBOL: "¥", lab.TIMEZONE: "Asia/Shanghai"}
    lab_hub.set_lab_settings(settings, T0)
    taken = dict(dept.lab_settings())  # what a service takes at its start
    dept.set_lab_settings(dict(settings), T0 + timedelta(minutes=5))  # the other hub starts, same settings
    assert lab.changed(taken, lab_hub.lab_settings()) == []
    # the settings are one for the ledger: the other hub's different ones are what every service then reads
    dept.set_lab_settings({**settings, lab.CURRENCY: "USD"}, T0 + timedelta(minutes=6))
    assert lab.changed(taken, lab_hub.lab_settings()) == ["currency 'CNY' -> 'USD'"]


def test_migrating_gives_the_published_profiles_the_default_hub_and_going_back_keeps_one_set(db_url):
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    engine = make_engine(db_url)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0016")
        connection.execute(
            text(
                "INSERT INTO gpu_pricing (slug, position, display_name, gpu_model, gpu_count, rate_micros, currency,"
                " allowed_groups, updated) VALUES ('t4', 0, '1× T4', 'T4', 1, 50000, 'CNY', '[]', :t)"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0017")
    ledger, dept = Ledger(db_url, hub="default"), Ledger(db_url, hub="dept-k8s")
    try:
        assert [(p["hub"], p["slug"], p["rate_per_minute"]) for p in ledger.pricing(hub=None)] == [
            ("default", "t4", "0.05")
        ]
        dept.set_pricing([{**LAB[0], "rate_per_minute": "0.06"}], "CNY", T0)  # t4 again, on another hub
        assert len(ledger.pricing(hub=None)) == 2
    finally:
        ledger.close()
        dept.close()
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.downgrade(cfg, "0016")  # one set again: the default hub's
        assert connection.execute(text("SELECT slug, rate_micros FROM gpu_pricing")).all() == [("t4", 50000)]
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "head")
    engine.dispose()


def test_two_hubs_starting_at_once_with_the_same_new_lab_settings_both_publish_them(two):
    lab_hub, dept = two
    errors = []
    for round_ in range(8):
        settings = {lab.CURRENCY: "CNY", lab.SYMBOL: "¥", lab.TIMEZONE: f"Etc/GMT-{round_}"}  # new each round
        barrier = threading.Barrier(2)

        def publish(ledger, settings=settings, barrier=barrier):
            barrier.wait()
            try:
                ledger.set_lab_settings(dict(settings), T0)
            except Exception as e:  # a hub whose start would fail
                errors.append(e)

        threads = [threading.Thread(target=publish, args=(ledger,)) for ledger in (lab_hub, dept)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and lab_hub.lab_settings() == settings
