"""The doctor's check of the hub names: the spawner's and the service's the same, and on a ledger that several
hubs share, no two hubs (two hubs' identities, or two hub API URLs, running at once) under one name. Real sqlite
ledgers; nothing started."""

from __future__ import annotations

from datetime import timedelta

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.doctor.hubs import check_hub_names
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN
from jupyterhub_gpu.ledger.hubs import hub_identity
from jupyterhub_gpu.ledger.renaming import rename_hub
from jupyterhub_gpu.ledger.store import Ledger
from tests.unit.doctor.test_doctor_checks import doctor, one
from tests.unit.ledger.test_hub_rename import fill

ONLY = [check_hub_names]


def ledger_of(tmp_path, hub: str) -> Ledger:
    return Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}", hub=hub)


def test_a_single_hub_with_the_default_name_passes(tmp_path):
    ledger_of(tmp_path, "default").close()
    result = one(doctor(tmp_path, only=ONLY), "hub-names", PASS)
    assert "this hub is 'default' (the default name), the only hub on the ledger" in result.message


def test_a_spawner_and_a_service_of_different_hub_names_fail_naming_both(tmp_path):
    extra = 'c.GPULocalSpawner.hub_name = "lab"\n'
    result = one(
        doctor(tmp_path, extra, only=ONLY, service_config='c.GPUService.hub_name = "dept"\n'), "hub-names", FAIL
    )
    assert "records sessions as hub 'lab' (c.GPULocalSpawner.hub_name)" in result.message
    assert "meters hub 'dept' (c.GPUService.hub_name)" in result.message
    assert "c.GPULocalSpawner.hub_name and c.GPUService.hub_name" in result.fix


def test_two_live_hubs_under_one_name_on_the_ledger_fail(tmp_path):
    now = utcnow()
    first, second = ledger_of(tmp_path, "lab"), ledger_of(tmp_path, "lab")
    first.announce("service", "http://lab.example.edu:8081/hub/api", now)
    second.announce("service", "http://dept.example.edu:8081/hub/api", now)
    first.close()
    second.close()
    extra = 'c.GPULocalSpawner.hub_name = "lab"\n'
    result = one(
        doctor(tmp_path, extra, only=ONLY, service_config='c.GPUService.hub_name = "lab"\n'), "hub-names", FAIL
    )
    assert "two hubs run under the hub name 'lab'" in result.message
    assert "http://lab.example.edu:8081/hub/api" in result.message and "http://dept.example.edu" in result.message
    assert "its own hub_name" in result.fix


def test_a_ledger_shared_with_another_hub_under_its_own_name_passes(tmp_path):
    now = utcnow()
    lab, dept = ledger_of(tmp_path, "lab"), ledger_of(tmp_path, "dept")
    lab.announce("service", "http://lab.example.edu:8081/hub/api", now)
    dept.announce("service", "http://dept.example.edu:8081/hub/api", now - timedelta(hours=1))  # gone
    lab.close()
    dept.close()
    extra = 'c.GPULocalSpawner.hub_name = "lab"\n'
    result = one(
        doctor(tmp_path, extra, only=ONLY, service_config='c.GPUService.hub_name = "lab"\n'), "hub-names", PASS
    )
    assert (
        "this hub is 'lab'; the ledger" in result.message
        and "is shared with 'dept' (running now: 'lab')" in result.message
    )


def test_two_hubs_with_one_hub_api_url_both_left_at_the_default_name_fail(tmp_path):
    """Two Zero to JupyterHub releases (each hub API URL http://hub:8081/hub/api) on one ledger, neither named."""
    now = utcnow()
    for secret in (b"a" * 32, b"b" * 32):
        for role in ("hub", "service"):
            member = ledger_of(tmp_path, "default")
            member.announce(role, "http://hub:8081/hub/api", now, "1.0", hub_identity(secret))
            member.close()
    result = one(doctor(tmp_path, only=ONLY), "hub-names", FAIL)
    assert "two hubs run under the hub name 'default'" in result.message
    assert f"hub {hub_identity(b'a' * 32)[:8]}: hub pid" in result.message
    assert f"hub {hub_identity(b'b' * 32)[:8]}: hub pid" in result.message
    assert "set c.GPULocalSpawner.hub_name and c.GPUService.hub_name to a name of its own in each hub's" in result.fix


def test_a_restarted_hub_is_one_hub(tmp_path):
    now = utcnow()
    before = ledger_of(tmp_path, "default")  # killed five minutes ago, its row still young
    before.announce("hub", "http://hub:8081/hub/api", now - timedelta(minutes=6), "1.0", hub_identity(b"a" * 32))
    before.heartbeat(now - timedelta(minutes=5))
    before.close()
    for role in ("hub", "service"):
        after = ledger_of(tmp_path, "default")
        after.announce(role, "http://hub:8081/hub/api", now, "1.0", hub_identity(b"a" * 32))
        after.close()
    result = one(doctor(tmp_path, only=ONLY), "hub-names", PASS)
    assert "this hub is 'default' (the default name), the only hub on the ledger" in result.message


def test_the_doctor_names_this_hubs_identity_and_warns_when_it_runs_under_another_name(tmp_path):
    """This hub's identity from the cookie secret file its config names: found on the ledger, the doctor says
    which hub it is; found under the name the config had before (not restarted since), it says so."""
    secret = bytes(range(32))
    (tmp_path / "cookie_secret").write_text(secret.hex() + "\n")
    mine = hub_identity(secret)
    extra = (
        f'c.JupyterHub.cookie_secret_file = {str(tmp_path / "cookie_secret")!r}\nc.GPULocalSpawner.hub_name = "lab"\n'
    )
    service = 'c.GPUService.hub_name = "lab"\n'
    hub = ledger_of(tmp_path, "default")
    hub.announce("hub", "http://127.0.0.1:8081/hub/api", utcnow(), "1.0", mine)
    result = one(doctor(tmp_path, extra, only=ONLY, service_config=service), "hub-names", WARN)
    assert f"this hub (identity {mine[:8]}: hub pid" in result.message
    assert "runs on the ledger as 'default', but its configuration now names it 'lab'" in result.message
    assert "restart the hub" in result.fix
    hub.close()
    restarted = ledger_of(tmp_path, "lab")
    restarted.announce("hub", "http://127.0.0.1:8081/hub/api", utcnow(), "1.0", mine)  # takes over its row
    restarted.close()
    result = one(doctor(tmp_path, extra, only=ONLY, service_config=service), "hub-names", PASS)
    assert f"this hub is 'lab' (identity {mine[:8]}), the only hub on the ledger" in result.message


def test_bookings_shares_and_edits_under_a_name_no_hub_runs_under_warn_with_the_rename(tmp_path):
    """The hub was 'default' (its rows made before hubs had names too) and is now configured 'lab': the doctor
    counts what 'default' left and names the rename; once renamed, it passes."""
    old = ledger_of(tmp_path, "default")
    fill(old)
    extra = 'c.GPULocalSpawner.hub_name = "lab"\n'
    service = 'c.GPUService.hub_name = "lab"\n'
    result = one(doctor(tmp_path, extra, only=ONLY, service_config=service), "hub-names", WARN)
    assert (
        "the ledger has 1 class booking, 1 group share, 1 profile edit of the hub 'default', which no hub runs under"
        " now (this hub is 'lab')" in result.message
    )
    assert "access restrictions" in result.message
    assert "jupyterhub-gpu hub-rename default lab --db-url sqlite:///" in result.fix
    # a hub running under 'default' keeps them: no warning
    old.announce("service", "http://127.0.0.1:8081/hub/api", utcnow())
    results = doctor(tmp_path, extra, only=ONLY, service_config=service)
    assert not [r for r in results if "which no hub runs under" in r.message]
    old.withdraw()
    rename_hub(old, "default", "lab", utcnow())
    old.close()
    results = doctor(tmp_path, extra, only=ONLY, service_config=service)
    assert [r.status for r in results if r.check == "hub-names"] == [PASS]  # this hub's own rows: no warning


def test_a_hub_still_running_under_its_old_name_with_bookings_is_told_to_rename_them_too(tmp_path):
    secret = bytes(range(32))
    (tmp_path / "cookie_secret").write_text(secret.hex() + "\n")
    extra = (
        f'c.JupyterHub.cookie_secret_file = {str(tmp_path / "cookie_secret")!r}\nc.GPULocalSpawner.hub_name = "lab"\n'
    )
    hub = ledger_of(tmp_path, "default")
    fill(hub)
    hub.announce("hub", "http://127.0.0.1:8081/hub/api", utcnow(), "1.0", hub_identity(secret))
    hub.close()
    result = one(
        doctor(tmp_path, extra, only=ONLY, service_config='c.GPUService.hub_name = "lab"\n'), "hub-names", WARN
    )
    assert "runs on the ledger as 'default', but its configuration now names it 'lab'" in result.message
    assert "stop it, run `jupyterhub-gpu hub-rename default lab --db-url sqlite:///" in result.fix
