"""Right-sizing advice through a real hub, real servers pushing simulated samples, and the real service."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import requests

from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import TickContext, send_digests, update_advice
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=0.5"]
"""

# judged after one billed minute, live from the start: the thresholds are settings (docs/advice.md)
ADVICE = """
c.GPUService.advice_min_minutes = 1
c.GPUService.advice_live_after_minutes = 0
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


@pytest.mark.hub
def test_light_use_of_the_a100_is_advised_the_t4_and_the_report_sums_the_savings(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(ADVICE)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1", "stu2", "admin")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    api = f"{hub.url}/services/gpu/api/v1"
    cny = Currency.from_config("CNY")
    tokens = {
        name: hub.api("POST", f"/users/{name}/tokens", json={"note": "t"}).json()["token"]
        for name in ("stu1", "stu2", "admin")
    }

    def get(who: str, path: str, **params) -> requests.Response:
        return requests.get(
            f"{api}/{path}", params=params, headers={"Authorization": f"token {tokens[who]}"}, timeout=30
        )

    # light simulated use: one idle kernel holds 1 GiB of GPU memory at 0% utilization
    for user, profile in (("stu1", "a100"), ("stu2", "t4")):
        assert hub.start_server(user, {"profile": profile}).status_code in (201, 202)
    for user in ("stu1", "stu2"):
        hub.wait_ready(user)
        r = requests.post(
            f"{hub.url}/user/{user}/api/kernels",
            headers={"Authorization": f"token {tokens[user]}"},
            json={"name": "python3"},
            timeout=30,
        )
        assert r.status_code == 201, r.text

    # live advice of the running A100 session: in the ledger and with the session in the API
    (running,) = wait_for(
        lambda: [s for s in get("stu1", "me").json()["active_sessions"] if s["advice"]], 60, what="live advice"
    )
    advice = running["advice"]
    assert advice["final"] is False and advice["suggested_profile"] == "t4"
    assert advice["rate_per_minute"] == "0.25" and advice["suggested_rate_per_minute"] == "0.05"
    assert "The t4 profile (CN¥0.05/min instead of CN¥0.25/min)" in advice["message"]
    assert "So far this session would have cost" in advice["message"]
    assert advice["peak_memory_mib"] <= 1024 and advice["memory_total_mib"] == 40 * 1024
    row = advice_of(ledger, [running["id"]])[running["id"]]
    assert row.reason == "advised" and row.final is False
    # nothing cheaper than a T4 with a GPU: the T4 session is not advised
    assert all(s["advice"] is None for s in get("stu2", "me").json()["active_sessions"])

    # after the stop: final advice, a Lab notice for next time, and the admin report
    for user in ("stu1", "stu2"):
        hub.stop_server(user)
    for user in ("stu1", "stu2"):
        hub.wait_stopped(user)
    ids = [s.id for s in ledger.sessions()]
    wait_for(
        lambda: all(a.final for a in advice_of(ledger, ids).values()) and len(advice_of(ledger, ids)) == 2,
        60,
        what="final advice of both sessions",
    )
    usage = get("admin", "usage", all="true").json()["sessions"]
    by_user = {s["user"]: s for s in usage}
    final = by_user["stu1"]["advice"]
    assert final["final"] is True and final["cost"] == by_user["stu1"]["cost"]
    assert Decimal(final["saving"]) == Decimal(final["cost"]) - Decimal(final["counterfactual_cost"]) > 0
    assert "This session would have cost" in final["message"] and by_user["stu2"]["advice"] is None
    assert [n.kind for n in ledger.notices("stu1")].count("advice") == 1

    report = get("admin", "advice").json()
    assert report["total"]["sessions_judged"] == 2 and report["total"]["sessions_advised"] == 1
    assert Decimal(report["total"]["potential_saving"]) == sum(
        Decimal(s["advice"]["saving"]) for s in usage if s["advice"]
    )
    assert Decimal(report["total"]["potential_saving"]) == sum(Decimal(s["saving"]) for s in report["sessions"])
    groups = {g["group"]: g for g in report["by_group"]}
    assert groups["cs231n"]["potential_saving"] == report["total"]["potential_saving"]
    profiles = {p["profile"]: p for p in report["by_profile"]}
    assert profiles["a100"]["suggested"] == {"t4": 1} and profiles["t4"]["sessions_advised"] == 0
    # the admin page's Right-sizing section shows the same sum, and the session list the advice
    page = requests.get(
        f"{hub.url}/services/gpu/admin", headers={"Authorization": f"token {tokens['admin']}"}, timeout=30
    )
    assert page.status_code == 200, page.text[:500]
    saving = cny.format(Decimal(report["total"]["potential_saving"]))
    assert f"would have saved {saving} on 1 of 2 judged sessions" in page.text
    assert final["message"].split(":")[0] in page.text

    # students may not read it; bad parameters change nothing and say why
    assert get("stu1", "advice").status_code == 403
    assert get("stu1", "advice", group="cs231n").status_code == 403
    bad = get("admin", "advice", since="yesterday")
    assert bad.status_code == 400 and "since" in bad.json()["message"]
    assert get("admin", "advice", colour="red").status_code == 400


def test_the_weekly_digest_reaches_each_groups_instructors_once(tmp_path, smtp_server):
    """A real SMTP server; the ledger holds two weeks of sessions, only last week's are in the digest."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    tz = ZoneInfo("Asia/Shanghai")
    cny = Currency.from_config("CNY")
    ledger.set_pricing(
        [
            {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
            {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
        ],
        "CNY",
        datetime.now(timezone.utc),
    )
    monday = datetime(2026, 11, 23, 8, 0, tzinfo=tz)  # the digest of 16-22 November goes out on this Monday at 8:00
    for sid, group, started in (
        ("old", "cs231n", monday - timedelta(days=10)),
        ("s1", "cs231n", monday - timedelta(days=3)),
        ("s2", "thesis", monday - timedelta(days=2)),
    ):
        ledger.record_start(SessionStart(sid, f"u-{sid}", "", (group,), "a100", ("GPU-1",), 250_000, "CNY", started))
        with ledger.Session() as db:
            for i in range(60):
                minute = (started + timedelta(minutes=i)).astimezone(timezone.utc).replace(tzinfo=None)
                db.add(
                    UsageMinute(
                        session_id=sid,
                        minute=minute,
                        user=f"u-{sid}",
                        pushes=1,
                        samples=2,
                        utilization_tenths_sum=0,
                        memory_used_max_mib=2048,
                        memory_total_mib=40960,
                        kernels_max=1,
                        busy_kernels_max=0,
                        gpus="{}",
                    )
                )
            db.commit()
        ledger.record_stop(sid, started + timedelta(hours=1), "user")
        update_advice(TickContext(ledger=ledger, currency=cny), started + timedelta(hours=2))
    settings = AlertSettings(
        smtp_host="127.0.0.1",
        smtp_port=smtp_server.port,
        mail_from="gpu@lab.example.edu",
        instructor_emails={"cs231n": ("prof@example.edu",), "thesis": ()},
    )
    ctx = TickContext(ledger=ledger, notifier=Notifier(ledger, settings), tz=tz, currency=cny, digest_weekday=0)
    # Sunday evening: not yet; Monday 8:05 local: once; again an hour later: nothing more
    assert asyncio.run(send_digests(ctx, monday - timedelta(hours=12))) == ["cs231n"]
    assert len(smtp_server.messages) == 1  # that was the digest of the week before (with "old")
    smtp_server.messages.clear()
    assert asyncio.run(send_digests(ctx, monday + timedelta(minutes=5))) == ["cs231n"]
    assert asyncio.run(send_digests(ctx, monday + timedelta(hours=1))) == []
    ((_sender, to, message),) = smtp_server.messages
    assert to == ["prof@example.edu"]
    body = message.get_content()
    assert "¥12.00 could have been saved (2026-11-16 to 2026-11-22)" in message["Subject"]
    assert "1 sessions judged, 1 of them" in body and "u-s1" in body and "u-old" not in body and "u-s2" not in body
    assert "The 1× T4 profile (CN¥0.05/min instead of CN¥0.25/min)" in body
