"""The usage pages in a real browser: Debian's Chromium through a real hub, the service and OAuth.

One hub and one browser serve every check: an admin lowers a group's budget in
the form and a student of that group is refused at spawn; a student sees only
their own data and gets 403 on others' pages; an instructor sees only their
groups; the CSV a browser downloads equals the ledger rows. The screenshots of
each page in English and Chinese go to docs/images/pages-*.png.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.clock import naive_utc as _naive
from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")

INSTRUCTOR = """
c.JupyterHub.load_roles.append({
    "name": "instructors-cs231n",
    "users": ["prof"],
    "scopes": ["custom:gpu-usage:read!group=cs231n"],
})
"""

# (user, groups, profile, gpu count, rate micros/minute, days ago, hour, minutes, stop reason, busy share)
HISTORY = [
    ("stu1", ["cs231n"], "t4", 1, 50_000, 11, 9, 95, "stopped", 0.8),
    ("stu2", ["cs231n"], "a100", 1, 250_000, 10, 14, 60, "gpu_idle", 0.2),
    ("thea", ["thesis"], "a100", 1, 250_000, 9, 10, 240, "stopped", 0.9),
    ("stu1", ["cs231n"], "t4", 1, 50_000, 7, 20, 45, "inactive", 0.3),
    ("stu2", ["cs231n"], "t4", 1, 50_000, 6, 16, 120, "stopped", 0.7),
    ("thea", ["thesis"], "t4x2", 2, 100_000, 5, 9, 300, "max_age", 0.6),
    ("stu1", ["cs231n"], "cpu", 0, 10_000, 4, 13, 30, "stopped", 0.0),
    ("stu2", ["cs231n"], "a100", 1, 250_000, 3, 10, 90, "budget", 0.5),
    ("stu1", ["cs231n"], "t4", 1, 50_000, 2, 15, 75, "gpu_idle", 0.1),
    ("thea", ["thesis"], "a100", 1, 250_000, 1, 8, 180, "stopped", 0.85),
]


def seed(ledger: Ledger, now: datetime) -> list[str]:
    """Sessions of the last twelve days, with per-minute samples so that utilization has numbers."""
    ids = []
    for i, (user, groups, profile, gpus, rate, days, hour, minutes, reason, busy) in enumerate(HISTORY):
        local_day = (now.astimezone(SHANGHAI) - timedelta(days=days)).date()
        started = datetime(local_day.year, local_day.month, local_day.day, hour, 7, tzinfo=SHANGHAI).astimezone(UTC)
        sid = f"demo-{i:02d}"
        devices = tuple(f"GPU-sim-{profile}-{n}" for n in range(gpus))
        ledger.record_start(SessionStart(sid, user, "", tuple(groups), profile, devices, rate, "CNY", started, True))
        ledger.record_stop(sid, started + timedelta(minutes=minutes, seconds=-20), reason)
        if gpus:
            with ledger.Session() as db:
                for m in range(minutes):
                    util = 60 if m < minutes * busy else 1
                    db.add(
                        UsageMinute(
                            session_id=sid,
                            minute=_naive(started.replace(second=0, microsecond=0) + timedelta(minutes=m)),
                            user=user,
                            pushes=2,
                            samples=6,
                            utilization_tenths_sum=util * 10 * 6,
                            memory_used_max_mib=3000,
                            memory_total_mib=16000,
                            kernels_max=1,
                            busy_kernels_max=0,
                            gpus="{}",
                        )
                    )
                db.commit()
        ids.append(sid)
    return ids


def login(browser, hub, name: str, locale: str = "en-US"):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale=locale, accept_downloads=True)
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", "pw")
    page.click("#login_submit")
    page.wait_for_url(re.compile(r".*/hub/(home|spawn).*"))
    return context, page


def screenshot(page, name: str) -> None:
    page.wait_for_selector("canvas[data-drawn=true]", timeout=10_000)
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS_IMAGES / f"pages-{name}.png"), full_page=True)


def test_usage_pages_for_students_instructors_and_admins(make_hub, tmp_path, browser):
    hub = make_hub(gpu_hub_config(tmp_path, min_minutes=10) + INSTRUCTOR)
    hub.create_users("admin", "stu1", "stu2", "thea", "prof")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    now = datetime.now(UTC)
    seed(ledger, now)
    since = (now.astimezone(SHANGHAI) - timedelta(days=12)).date().isoformat()
    window = f"?since={since}"
    service = f"{hub.url}/services/gpu/"

    # -- the admin lowers cs231n's budget in the form -----------------------------------------------
    admin_ctx, admin = login(browser, hub, "admin")
    admin.goto(service + "admin" + window)
    admin.fill("#b-subject", "cs231n")
    admin.fill("#b-limit", "-3")
    admin.click("#budget-set")
    assert "must not be negative" in admin.locator("#budget-error").inner_text()
    assert ledger.get_budget("group", "cs231n") is None  # refused, nothing changed
    admin.fill("#b-limit", "100")
    admin.select_option("#b-period", "month")
    admin.click("#budget-set")
    admin.locator("#saved").wait_for()
    assert f"since={since}" in admin.url  # back in the window the form was sent from
    assert Decimal(ledger.get_budget("group", "cs231n").limit) == 100
    admin.goto(service + "admin" + window)
    row = admin.locator('#budgets-table tr[data-subject="cs231n"]')
    assert row.locator(".limit").inner_text() == "CN¥100.00"
    # the culled sessions show as savings, the samples as utilization
    assert admin.locator("#utilization-table tr[data-name=billed] td").inner_text() != "0.00"
    assert admin.locator("#culling-table tr[data-name=total] td").nth(1).inner_text() == "4"
    screenshot(admin, "admin-en")
    # the CSV a browser downloads equals the ledger's rows
    with admin.expect_download() as download:
        admin.click('#sessions a.csv[data-table="sessions"]')
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    records = {r.id: r for r in ledger.sessions(since=datetime.fromisoformat(since).replace(tzinfo=SHANGHAI))}
    assert sorted(r["id"] for r in rows) == sorted(records) and len(rows) == len(HISTORY)
    for r in rows:
        rec = records[r["id"]]
        assert (r["user"], r["profile"], r["stop_reason"]) == (rec.user, rec.profile, rec.stop_reason)
        assert int(r["minutes_billed"]) == rec.minutes and Decimal(r["cost"]) * 1_000_000 == rec.cost_micros
    admin.click("#language-switch a[lang=zh-CN]")
    admin.wait_for_selector("text=按组花费")
    screenshot(admin, "admin-zh")

    # now lower it below ten minutes of a T4 (¥0.50): a student of the group is refused at spawn
    admin.click("#language-switch a[lang=en]")
    admin.fill("#b-subject", "cs231n")
    admin.fill("#b-limit", "0.10")
    admin.click("#budget-set")
    admin.locator("#saved").wait_for()
    admin_ctx.close()

    stu_ctx, stu = login(browser, hub, "stu1")
    stu.goto(f"{hub.url}/hub/spawn")
    stu.check("#profile-t4")
    stu.click("input[type=submit], button[type=submit]")
    stu.wait_for_selector("text=/Budget (used up|too low)/")
    assert hub.server("stu1") is None
    # the student's own page: their sessions only, their group's budget as balance
    stu.goto(service + window)
    users = set(stu.locator("#sessions-table tr[data-user]").evaluate_all("rows => rows.map(r => r.dataset.user)"))
    assert users == {"stu1"}
    # an English page: Babel writes CNY as CN¥ (¥ on the Chinese one)
    assert stu.locator('#budgets-table tr[data-subject="cs231n"] .limit').inner_text() == "CN¥0.10"
    screenshot(stu, "student-en")
    stu.click("#language-switch a[lang=zh-CN]")
    stu.wait_for_selector("text=全部会话")
    screenshot(stu, "student-zh")
    for path in ("users/stu2", "groups/cs231n", "admin"):
        response = stu.goto(service + path)
        assert response.status == 403, path
        assert stu.locator("#error").is_visible()
    stu_ctx.close()

    # -- the instructor of cs231n sees cs231n and nothing else ---------------------------------------
    prof_ctx, prof = login(browser, hub, "prof", locale="zh-CN")
    prof.goto(service)
    prof.click('#gpu-nav a[href$="groups/cs231n"]')
    prof.wait_for_selector("#sessions-table")
    assert prof.locator("h1").inner_text().startswith("组 cs231n")  # Chinese from the browser's language
    prof.goto(service + "groups/cs231n" + window)
    users = set(prof.locator("#sessions-table tr[data-user]").evaluate_all("rows => rows.map(r => r.dataset.user)"))
    assert users == {"stu1", "stu2"}
    screenshot(prof, "instructor-zh")
    prof.click("#language-switch a[lang=en]")
    prof.wait_for_selector("text=Top users")
    screenshot(prof, "instructor-en")
    assert prof.goto(service + "groups/thesis").status == 403
    assert prof.goto(service + "users/thea").status == 403
    assert prof.goto(service + "admin").status == 403
    prof_ctx.close()
    shot_path = DOCS_IMAGES / "pages-admin-en.png"
    wait_for(shot_path.exists, 5, what="the screenshots")
