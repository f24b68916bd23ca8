"""``jupyterhub-gpu hub-rename OLD NEW --db-url URL``: bad arguments exit 2 before the ledger is opened; on a real
sqlite ledger it moves the hub's rows and prints them, ``--dry-run`` prints them and changes nothing, and a
refusal is an error (status 1) that changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.queries import schedule
from jupyterhub_gpu.ledger.store import Ledger
from tests.unit.ledger.test_hub_rename import counts, fill
from tests.unit.ledger.test_ledger import make_start
from tests.unit.test_cli import run


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = Ledger(url)
    fill(ledger)
    ledger.close()
    return url


def state(url: str) -> dict:
    ledger = Ledger(url, migrate=False)
    try:
        return counts(ledger)
    finally:
        ledger.close()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["default", "Lab"], "argument NEW: a hub name must be 1 to 63 characters"),
        (["de fault", "lab"], "argument OLD: a hub name must be 1 to 63 characters"),
        (["lab", "lab"], "OLD and NEW are both 'lab'"),
        (["default"], "the following arguments are required: NEW"),
        (["default", "lab", "--db-url"], "argument --db-url: expected one argument"),
    ],
)
def test_bad_arguments_exit_2_before_the_ledger_is_opened(url, argv, said, capsys):
    before = state(url)
    args = ["hub-rename", *argv] + ([] if "--db-url" in argv else ["--db-url", url])
    with pytest.raises(SystemExit) as exit_:
        run(*args)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err
    assert state(url) == before


def test_no_db_url_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        run("hub-rename", "default", "lab")
    assert exit_.value.code == 2
    assert "the following arguments are required: --db-url" in capsys.readouterr().err


def test_a_dry_run_prints_the_counts_and_changes_nothing(url):
    before = state(url)
    code, out = run("hub-rename", "default", "lab", "--db-url", url, "--dry-run")
    assert code == 0
    assert "would rename the hub 'default' to 'lab'" in out and "nothing changed" in out
    assert any(line.split() == ["move", "gpu_reservations", "1"] for line in out.splitlines())
    assert "delete  gpu_pricing" in out
    assert state(url) == before


def test_the_rename_moves_the_rows_and_prints_them(url):
    code, out = run("hub-rename", "default", "lab", "--db-url", url)
    assert code == 0, out
    assert "renamed the hub 'default' to 'lab' on the ledger sqlite:///" in out
    lines = [line.split() for line in out.splitlines()]
    for table in ("gpu_reservations", "gpu_group_shares", "gpu_profile_overrides", "gpu_sessions"):
        assert ["moved", table, "1"] in lines
    assert [
        "deleted",
        "gpu_pricing",
        "1",
        "(the",
        "hub",
        "publishes",
        "its",
        "profiles",
        "again",
        "at",
        "its",
        "start)",
    ] in lines
    assert "set hub_name = 'lab' on both sides of the hub" in out
    code, _ = run("hub-rename", "default", "lab", "--db-url", url)  # again: nothing left under 'default'
    assert code == 1
    lab = Ledger(url, migrate=False, hub="lab")
    try:
        assert schedule.share_table(lab) == {"cs231n": {"T4": 3}}
    finally:
        lab.close()


def test_a_refusal_is_an_error_and_changes_nothing(url, capsys):
    member = Ledger(url, hub="default")
    member.announce("hub", "http://127.0.0.1:8081/hub/api", utcnow() - timedelta(minutes=1))
    member.close()
    before = state(url)
    code, out = run("hub-rename", "default", "lab", "--db-url", url)
    assert code == 1 and out == ""
    err = capsys.readouterr().err
    assert "jupyterhub-gpu: error: stop the hubs first: hub pid" in err and "nothing changed" in err
    assert state(url) == before


def test_a_ledger_that_does_not_exist_is_an_error_and_is_not_created(tmp_path, capsys):
    missing = tmp_path / "none.sqlite"
    code, _ = run("hub-rename", "default", "lab", "--db-url", f"sqlite:///{missing}")
    assert code == 1
    assert "there is no ledger at" in capsys.readouterr().err
    assert not missing.exists()


def test_a_name_with_rows_needs_merge(url, capsys):
    lab = Ledger(url, hub="lab")
    lab.record_start(make_start("s2"))
    lab.close()
    code, _ = run("hub-rename", "default", "lab", "--db-url", url)
    assert code == 1
    assert "merge them (--merge)" in capsys.readouterr().err
    code, out = run("hub-rename", "default", "lab", "--db-url", url, "--merge")
    assert code == 0, out
    assert state(url)["gpu_sessions"] == {"lab": 2}
