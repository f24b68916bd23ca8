"""What a user's server reports cannot be forged, and an admin's price edit is priced as it is charged.

One real hub with the gpu service serves the module. Servers' tokens are minted
by the hub with exactly the scopes JupyterHub gives a server's own token
(``servers!server=USER/NAME``), so the service authenticates them as it does a
running server's; the sessions they report for are recorded in the real ledger.

- samples: times outside [session start, now + skew], values that overflow, and
  more minute rows than the session ran are refused with a 400 and nothing
  stored; ``last_activity`` never moves past now.
- right-sizing: a forged ``memory_total_mib`` in one user's T4 session does not
  make the advice tell another user that a T4 serves a 30 GB job.
- price edits: ``GET pricing`` shows the rate the spawner charges for an edit
  of one part of a rate, and an edit that would not price is refused at the form.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import requests

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.ledger.queries.overrides import load_overrides, save_override
from jupyterhub_gpu.ledger.queries.samples import MAX_SAMPLES_PER_MINUTE, record_sample, session_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.overrides import Override
from jupyterhub_gpu.rules.samples import MAX_CLOCK_SKEW, Sample
from jupyterhub_gpu.service.tick import TickContext, update_advice
from jupyterhub_gpu.session import SessionStart
from tests.conftest import Hub, wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config

pytestmark = pytest.mark.hub

UTC = timezone.utc
GB = 1024
CNY = Currency.from_config("CNY")

# two more profiles: one with a flat part in its rate, one whose parts are not each a multiple of 0.000060
EXTRA = """
c.GPULocalSpawner.profiles = c.GPULocalSpawner.profiles + [
    {"slug": "t4plus", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "price_per_hour": "0.60"},
    {"slug": "tiny", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "0.000030", "price_per_hour": "0.000030"},
]
"""


class Env(ServiceUsers):
    def post(self, token: str, path: str, body=None, data: bytes | None = None) -> requests.Response:
        headers = {"Authorization": f"token {token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
            return requests.post(self.url + path, data=data, headers=headers, timeout=30)
        return requests.post(self.url + path, json=body, headers=headers, timeout=30)

    def session(self, sid: str, user: str, profile: str, started: datetime, server: str = "", gpus=("GPU-sim-t4-0",)):
        rate = {"t4": 50_000, "a100": 250_000, "cpu": 10_000}[profile]
        start = SessionStart(sid, user, server, ("cs231n",), profile, tuple(gpus), rate, "CNY", started, True)
        assert self.ledger.record_start(start)
        return start


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("forged")
    hub = Hub(root / "hub", gpu_hub_config(root) + EXTRA)
    hub.start()
    try:
        hub.create_users("admin", "stu1", "stu2", "thea")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        yield Env(hub, Ledger(f"sqlite:///{root / 'ledger.sqlite'}"))
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def sample(session_id: str, at: datetime, **fields) -> dict:
    return {"session_id": session_id, "sampled_until": isoformat(at), "samples": 2, "utilization_avg": 50} | fields


# -- samples --------------------------------------------------------------------------------------------


def test_sample_times_outside_the_session_and_overflowing_values_are_refused(env):
    now = datetime.now(UTC)
    started = now - timedelta(minutes=10)
    env.session("forge-times", "stu1", "t4", started)
    token = env.server_token("stu1")
    assert env.post(token, "api/v1/samples", sample("forge-times", now)).status_code == 201
    kept = session_minutes(env.ledger, "forge-times")
    assert len(kept) == 1
    for fields, word in [
        # the activity of the far future: today this turns the `inactive` rule off for the session for good
        ({"last_activity": "9999-01-01T00:00:00Z"}, "last_activity"),
        ({"last_kernel_activity": "9999-01-01T00:00:00Z"}, "last_kernel_activity"),
        # a time whose UTC form overflows (a 500 today), and one before the year 1 in UTC
        ({"sampled_until": "9999-12-31T23:00-05:00"}, "sampled_until"),
        ({"last_activity": "0001-01-01T00:30+01:00"}, "last_activity"),
        ({"sampled_until": isoformat(started - timedelta(seconds=1))}, "before the session started"),
        ({"sampled_until": isoformat(now + timedelta(minutes=10))}, "later than"),
        ({"last_activity": isoformat(started - timedelta(hours=1))}, "before the session started"),
        ({"samples": 10**30}, "samples"),
        ({"utilization_avg": 10**400}, "utilization_avg"),
        ({"interval_seconds": -5}, "interval_seconds"),
        ({"memory_used_avg_mib": 10**40}, "memory_used_avg_mib"),
        ({"gpus": [{"uuid": "GPU-a", "utilization_avg": 1}, {"uuid": "GPU-b", "utilization_avg": 1}]}, "holds 1"),
    ]:
        r = env.post(token, "api/v1/samples", sample("forge-times", now, **fields))
        assert r.status_code == 400 and word in r.json()["message"], (fields, r.status_code, r.text)
    # JSON numbers Python cannot hold: a 400 as well (a 500 today)
    for raw in (b'"samples": ' + b"9" * 5000, b'"utilization_avg": 1e400'):
        body = b'{"session_id": "forge-times", "sampled_until": "' + isoformat(now).encode() + b'", ' + raw + b"}"
        r = env.post(token, "api/v1/samples", data=body)
        assert r.status_code == 400, (raw[:40], r.status_code, r.text[:300])
    # nothing was stored by any of them
    after = session_minutes(env.ledger, "forge-times")
    assert [(m.minute, m.pushes, m.samples) for m in after] == [(m.minute, m.pushes, m.samples) for m in kept]
    assert env.ledger.get_session("forge-times").last_activity is None


def test_last_activity_never_moves_past_now(env):
    now = datetime.now(UTC)
    env.session("forge-activity", "stu1", "t4", now - timedelta(minutes=5))
    token = env.server_token("stu1")
    ahead = now + timedelta(seconds=50)  # inside the clock skew: taken, but as now
    r = env.post(token, "api/v1/samples", sample("forge-activity", now, last_activity=isoformat(ahead)))
    answered = datetime.now(UTC)
    assert r.status_code == 201, r.text
    last = env.ledger.get_session("forge-activity").last_activity.replace(tzinfo=UTC)
    assert now <= last <= answered


def test_a_session_has_no_more_minute_rows_than_minutes_it_ran(env):
    now = datetime.now(UTC).replace(second=30, microsecond=0)
    started = now - timedelta(minutes=5)
    env.session("forge-rows", "stu1", "t4", started)
    token = env.server_token("stu1")
    codes = []
    for offset in range(-30, 31):  # a minute row for each of an hour around the session
        r = env.post(token, "api/v1/samples", sample("forge-rows", now + timedelta(minutes=offset), samples=1))
        codes.append(r.status_code)
    assert set(codes) == {201, 400}
    rows = session_minutes(env.ledger, "forge-rows")
    # the minutes from the start to now (and one of clock skew): never the hour that was asked for
    assert 5 <= len(rows) <= 7, [m.minute for m in rows]
    latest = (datetime.now(UTC) + MAX_CLOCK_SKEW).replace(tzinfo=None)
    assert all(started.replace(tzinfo=None, second=0) <= m.minute <= latest for m in rows)
    # one minute's row takes a bounded number of samples: its sums never overflow an integer column
    r = env.post(token, "api/v1/samples", sample("forge-rows", now, samples=MAX_SAMPLES_PER_MINUTE))
    assert r.status_code == 400 and "at most" in r.json()["message"]


def test_only_the_sessions_own_server_may_report_its_samples(env):
    now = datetime.now(UTC)
    env.session("forge-owner", "stu1", "t4", now - timedelta(minutes=3))
    body = sample("forge-owner", now)
    other_server = env.server_token("stu1", "other")  # another server of the same user
    own_token = env.token("stu1")  # the user's own token, not a server's
    stranger = env.server_token("stu2")
    for token in (other_server, own_token, stranger):
        assert env.post(token, "api/v1/samples", body).status_code == 403
    assert session_minutes(env.ledger, "forge-owner") == []
    assert env.post(env.server_token("stu1"), "api/v1/samples", body).status_code == 201


# -- right-sizing advice ----------------------------------------------------------------------------------


def test_a_forged_memory_size_does_not_advise_others_onto_a_smaller_gpu(env):
    """stu1's T4 server claims 80 GB; thea's A100 session peaked at 30 GB: a T4 (16 GB) cannot serve it."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    t0 = now - timedelta(minutes=40)
    env.session("forge-t4", "stu1", "t4", t0)
    token = env.server_token("stu1")
    for i in range(20):  # the forged memory size, through the real API (times inside the session)
        at = t0 + timedelta(minutes=i, seconds=30)
        body = sample("forge-t4", at, utilization_avg=1, memory_used_max_mib=GB, memory_total_mib=80 * GB)
        assert env.post(token, "api/v1/samples", body).status_code == 201
    env.ledger.record_stop("forge-t4", t0 + timedelta(minutes=20), "stopped")
    update_advice(TickContext(ledger=env.ledger, currency=CNY), now)  # stu1's session is judged (and its memory kept)
    victim = env.session("forge-a100", "thea", "a100", t0, gpus=("GPU-sim-a100-0",))
    for i in range(20):  # thea: 30 GB, a quiet GPU: only memory says no to a T4
        at = t0 + timedelta(minutes=i, seconds=30)
        minute = Sample(victim.id, at, 2, 1.0, 30 * GB, 40 * GB, 1, 0, None, None, ())
        record_sample(env.ledger, "thea", minute)
    env.ledger.record_stop("forge-a100", t0 + timedelta(minutes=20), "stopped")
    update_advice(TickContext(ledger=env.ledger, currency=CNY), now)
    advice = advice_of(env.ledger, ["forge-t4", "forge-a100"])
    assert advice["forge-a100"].reason == "nothing_cheaper", advice["forge-a100"].message
    assert advice["forge-a100"].suggested_profile is None
    # the memory the advice keeps comes from the inventory (a simulated T4 has 16 GB), not the server
    assert advice["forge-t4"].gpu_memory_mib == 16 * GB and advice["forge-t4"].memory_total_mib == 16 * GB


# -- admin price edits ------------------------------------------------------------------------------------


def spawn_form_rates(hub: Hub) -> dict[str, str]:
    page = hub.login("admin").get(f"{hub.url}/hub/spawn", timeout=30)
    assert page.status_code == 200, page.text[:500]
    found = dict(re.findall(r'data-profile="([^"]+)".*?(¥[0-9.]+)/min', page.text, re.S))
    assert found, page.text[:2000]
    return found


def admin_post(env: Env, path: str, data: dict) -> requests.Response:
    browser = env.hub.login("admin")
    page = browser.get(env.url + "admin", timeout=30)
    assert page.status_code == 200, page.text[:300]
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
    return browser.post(env.url + path, data={**data, "_xsrf": xsrf}, timeout=30, allow_redirects=False)


def pricing(env: Env) -> dict[str, dict]:
    r = requests.get(env.url + "api/v1/pricing", headers={"Authorization": f"token {env.token('admin')}"}, timeout=30)
    assert r.status_code == 200, r.text
    return {p["slug"]: p for p in r.json()["profiles"]}


def test_a_price_edit_is_shown_as_the_spawner_charges_it(env):
    """Configured 3.00/GPU-h + 0.60/h, the GPU price edited to 6.00: 6.60/h, 0.11/min on both sides."""
    try:
        r = admin_post(env, "admin/profiles/t4plus", {"price_per_gpu_hour": "6.00", "restrict": "config"})
        assert r.status_code == 303, r.text[:500]
        shown = pricing(env)["t4plus"]
        assert (shown["rate_per_minute"], shown["price_per_hour"]) == ("0.11", "6.6")
        assert "price_per_gpu_hour" not in shown  # the parts stay inside the service
        assert spawn_form_rates(env.hub)["t4plus"] == "¥0.11"
    finally:
        admin_post(env, "admin/profiles/t4plus", {"action": "reset"})


def test_a_price_edit_that_would_not_price_is_refused_at_the_form_and_changes_nothing(env):
    # 0.000060/GPU-h + the configured 0.000030/h = 0.00009/h: not a whole number of 0.000001 per minute
    r = admin_post(env, "admin/profiles/tiny", {"price_per_gpu_hour": "0.000060", "restrict": "config"})
    assert r.status_code == 400 and "not a whole number of 0.000001 per minute" in r.text, r.text[:300]
    assert "tiny" not in load_overrides(env.ledger)
    r = admin_post(env, "admin/profiles/t4plus", {"price_per_gpu_hour": "999999999999999"})
    assert r.status_code == 400 and "too large" in r.text and not load_overrides(env.ledger)
    assert spawn_form_rates(env.hub)["tiny"] == "¥0.000001"


def test_a_stored_edit_that_no_longer_prices_fails_no_spawn(env):
    """An edit saved before the configuration changed under it: ignored on both sides, not a broken hub."""
    save_override(env.ledger, Override("tiny", price_per_gpu_hour=Decimal("0.000060")), datetime.now(UTC), "admin")
    try:
        rates = spawn_form_rates(env.hub)
        assert rates["tiny"] == "¥0.000001" and rates["t4"] == "¥0.05"
        assert pricing(env)["tiny"]["rate_per_minute"] == "0.000001"
    finally:
        admin_post(env, "admin/profiles/tiny", {"action": "reset"})
