"""The spawn form and every message around a spawn in the student's language, through a real hub.

One real JupyterHub with ``gpu-local`` servers over simulated GPUs (one A100, so a second spawn
queues) and a real sqlite ledger (for the budget check). The language is the switch's cookie, else
the request's ``Accept-Language``, else English: the form is read in zh-CN and in English, its
refusals come back in the language it was shown in, a spawn's progress events (its queue position,
its assignment, its time-out) and its refusals are in the language of the request that started it,
and the server's environment carries that language for the Lab.
"""

from __future__ import annotations

import html
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.i18n import COOKIE
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import Hub, wait_for

pytestmark = pytest.mark.hub

ZH = {"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}
EN = {"Accept-Language": "en-US,en;q=0.9"}

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [
    {"model": "T4", "count": 2, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": {"en": "One T4", "zh-CN": "一块 T4"},
     "description": {"en": "For coursework", "zh-CN": "课程作业用"},
     "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "a100", "display_name": {"en": "One A100", "zh-CN": "一块 A100"}, "gpu_model": "A100",
     "gpu_count": 1, "price_per_gpu_hour": "15.00"},
    {"slug": "thesis", "display_name": "Thesis T4", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "allowed_groups": ["thesis"]},
    {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"},
]
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.GPULocalSpawner.ledger_db_url = %(db)r
c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
c.GPULocalSpawner.queue_timeout = 120
def short_wait_for_third(spawner):  # runs before the queue: third's spawn times out soon
    if spawner.user.name == "third":
        spawner.queue_timeout = 5
c.Spawner.pre_spawn_hook = short_wait_for_third
c.JupyterHub.load_groups = {"thesis": {"users": ["thea"]}, "cs231n": {"users": ["thea"]}}
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("spawn-language")
    db = f"sqlite:///{root / 'ledger.sqlite'}"
    ledger = Ledger(db)
    # broke has used up nothing yet and may spend nothing: every paid spawn is refused
    ledger.set_budget(BudgetRule("user", "broke", "month", "money", Decimal("0.10")), utcnow() - timedelta(days=1))
    ledger.close()
    hub = Hub(root / "hub", CONFIG % {"home": root / "homes", "db": db})
    hub.start()
    try:
        hub.create_users("sam", "thea", "broke", "first", "second", "third")
        yield hub
    finally:
        hub.cleanup()


def form_page(hub: Hub, user: str, headers: dict | None = None, cookie: str | None = None) -> str:
    session = hub.login(user)
    if cookie is not None:
        session.cookies.set(COOKIE, cookie, path="/")
    r = session.get(f"{hub.url}/hub/spawn/{user}", headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.status_code
    return html.unescape(r.content.decode("utf-8"))


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def progress(hub: Hub, user: str, until, timeout: float = 60) -> list[dict]:
    """The spawn's progress events of ``user`` until ``until(event)``."""
    events = []
    deadline = time.monotonic() + timeout
    with hub.api("GET", f"/users/{user}/server/progress", stream=True) as r:
        r.raise_for_status()
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                events.append(json.loads(line[5:]))
                if until(events[-1]):
                    return events
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"progress of {user} ended without the expected event: {events}")


def spawn_refusal(hub: Hub, user: str, options: dict, headers: dict) -> str:
    """The message of a spawn refused before it starts: the API's answer, or the failed progress event."""
    r = hub.api("POST", f"/users/{user}/server", json=options, headers=headers)
    if r.status_code >= 400:
        return r.json()["message"]
    assert r.status_code == 202, r.text
    return progress(hub, user, lambda e: e.get("failed"))[-1]["message"]


# -- the form -----------------------------------------------------------------------------------------


def test_the_form_in_chinese_from_the_browser(hub):
    page = form_page(hub, "sam", ZH)
    for text in (
        'lang="zh-CN"',
        "模拟 GPU。",
        "此 Hub 使用模拟的 GPU",
        "一块 T4",
        "课程作业用",
        "1× 模拟 T4 16 GB — ¥0.05/分钟 — 空闲 2 块，共 2 块",
        "1× 模拟 A100 40 GB — ¥0.25/分钟 — 空闲 1 块，共 1 块",
        "仅 CPU — ¥0.01/分钟",
        "按开始的分钟计费，从服务器启动时起，到它停止时为止。",
        '<input type="hidden" name="lang" value="zh-CN">',
    ):
        assert text in page, text
    for english in ("Simulated GPUs.", "Billing is per started minute", "One T4", "For coursework", "CPU only —"):
        assert english not in page, english
    assert 'value="thesis"' not in page  # sam is not in the thesis group


def test_the_switch_s_cookie_wins_over_the_browser(hub):
    page = form_page(hub, "sam", EN, cookie="zh-CN")
    assert "按开始的分钟计费" in page and "Billing is per started minute" not in page
    page = form_page(hub, "sam", ZH, cookie="en")
    assert "Billing is per started minute" in page and "按开始的分钟计费" not in page


def test_the_form_in_english(hub):
    page = form_page(hub, "sam", EN)
    assert "Simulated GPUs." in page and "One T4" in page and "For coursework" in page
    assert "1× Simulated A100 40 GB — CN¥0.25/min — 1 of 1 free" in page
    assert "Billing is per started minute, from the moment the server starts until it stops." in page
    assert "模拟" not in page and "一块 T4" not in page
    assert "Billing is per started minute" in form_page(hub, "sam")  # no Accept-Language: English


@pytest.mark.parametrize(
    ("headers", "cookie", "chinese"),
    [
        ({"Accept-Language": "x" * 6000 + ",zh-CN"}, None, True),  # a huge header
        ({"Accept-Language": ",".join(["de;q=0.9"] * 800) + ",zh;q=0.1"}, None, True),
        ({"Accept-Language": ";;;q=abc,,zh-CN;q=x,=;"}, None, False),  # nonsense: English
        (ZH, "klingon", True),  # a bad cookie is ignored
        (EN, '"><script>alert(1)</script>', False),
        (EN, "zh-CN" * 200, False),
    ],
)
def test_a_bad_cookie_or_header_does_not_break_the_form(hub, headers, cookie, chinese):
    page = form_page(hub, "sam", headers, cookie)
    assert ("按开始的分钟计费" in page) is chinese and ("Billing is per started minute" in page) is not chinese
    assert "<script>alert(1)" not in page


@pytest.mark.parametrize(
    ("form", "chinese", "english"),
    [
        ({"profile": "v100"}, "未知的配置 'v100'。", "Unknown profile 'v100'."),
        ({"profile": "thesis"}, "您不能使用配置 'thesis'：它仅供其他组使用。", "You may not use the profile 'thesis'"),
        (
            {"profile": "t4", "image": "evil/image"},
            "意外的表单字段：image。未启动任何服务器。",
            "Unexpected form field(s)",
        ),
        ({}, "请选择一个配置。未启动任何服务器。", "Choose a profile. Nothing was started."),
        (
            {"profile": "<b>{0}{slug}</b>" + "x" * 200},
            "未知的配置 '<b>{0}{slug}</b>" + "x" * 48 + "…'。",  # the value as sent, shortened, escaped, not formatted
            "Unknown profile '<b>{0}{slug}</b>",
        ),
    ],
)
def test_a_refusal_of_the_form_answers_in_the_form_s_language(hub, form, chinese, english):
    session = hub.login("sam")
    session.get(f"{hub.url}/hub/spawn/sam", headers=ZH, timeout=30)
    data = {**form, "_xsrf": session.cookies.get("_xsrf", "")}
    r = session.post(f"{hub.url}/hub/spawn/sam", data={**data, "lang": "zh-CN"}, timeout=30)
    assert "<b>{0}" not in r.text  # escaped
    page = html.unescape(r.content.decode("utf-8"))
    assert chinese in page and english not in page
    assert "按开始的分钟计费" in page  # the form shown again is in the same language
    r = session.post(f"{hub.url}/hub/spawn/sam", data={**data, "lang": "en"}, timeout=30)
    page = html.unescape(r.content.decode("utf-8"))
    assert english in page and chinese not in page and "Billing is per started minute" in page
    assert hub.server("sam") is None


def test_a_bad_pool_is_refused_in_the_form_s_language(hub):
    """The pool is checked when the spawn starts: the spawn a form starts speaks the form's language."""
    session = hub.login("thea")
    data = {"profile": "t4", "pool": "physics", "lang": "zh-CN", "_xsrf": session.cookies.get("_xsrf", "")}
    page = html.unescape(session.post(f"{hub.url}/hub/spawn/thea", data=data, headers=EN, timeout=30).content.decode())
    assert "组 'physics' 不能为 一块 T4 付费：请从 cs231n, thesis 中选择一个。未启动任何服务器。" in page
    data["lang"] = "en"
    page = html.unescape(session.post(f"{hub.url}/hub/spawn/thea", data=data, headers=EN, timeout=30).content.decode())
    assert "The group 'physics' cannot pay for One T4: choose one of cs231n, thesis. Nothing was started." in page
    assert hub.server("thea") is None


def test_the_form_shown_again_under_a_budget_refusal_speaks_the_form_s_language(hub):
    """The pool and budget refusals come from the spawn (not the form's check): the form shown again under
    them is in the refused form's language, and so is the next refusal from that form."""
    session = hub.login("broke")
    session.get(f"{hub.url}/hub/spawn/broke", headers=ZH, timeout=30)
    data = {"profile": "t4", "lang": "zh-CN", "_xsrf": session.cookies.get("_xsrf", "")}
    r = session.post(f"{hub.url}/hub/spawn/broke", data=data, headers=EN, timeout=30)
    page = html.unescape(r.content.decode("utf-8"))
    assert "预算不足以支付此配置的 10 分钟" in page
    assert "按开始的分钟计费" in page and "Billing is per started minute" not in page  # the form under it
    assert 'name="lang" value="zh-CN"' in page
    wait_for(lambda: hub.server("broke") is None, 10, what="nothing started")


@pytest.mark.parametrize("query", ["?lang=zh-CN", "?lang=en", "?_xsrf=x", "?lang=zh-CN&_xsrf=x"])
def test_the_language_switch_on_the_spawn_page_shows_the_form_and_starts_nothing(hub, query):
    """JupyterHub takes any query argument of /hub/spawn as a spawn request: the switch's ?lang= (the link
    without scripts) and a reload after a refused form show the form, with no error above it."""
    session = hub.login("sam")
    r = session.get(f"{hub.url}/hub/spawn/sam{query}", headers=ZH, timeout=30)
    assert r.status_code == 200, r.status_code
    page = html.unescape(r.content.decode("utf-8"))
    assert 'name="profile"' in page and "spawn-error-msg" not in page
    if "lang=en" in query:
        assert "Billing is per started minute" in page
    elif "lang=zh-CN" in query:
        assert "按开始的分钟计费" in page
    assert hub.server("sam") is None


def test_a_link_cannot_start_a_billed_server(hub):
    """GET /hub/spawn?profile=... (a link another student sends, followed with the victim's cookies) starts
    nothing: a server starts from the form's POST or the REST API (allow_spawn_from_link is off)."""
    session = hub.login("sam")
    r = session.get(
        f"{hub.url}/hub/spawn/sam?profile=cpu", headers={**ZH, "Referer": "https://evil.example/"}, timeout=30
    )
    assert r.status_code == 400, r.status_code
    page = html.unescape(r.content.decode("utf-8"))
    assert "链接不能启动服务器：请选择一个配置，然后点击“启动”。" in page and 'name="profile"' in page
    r = session.get(f"{hub.url}/hub/spawn/sam?opt-profile=a100", headers=EN, timeout=30)
    assert "A link cannot start a server: choose a profile and press Start." in html.unescape(r.text)
    time.sleep(1)
    assert hub.server("sam") is None


# -- a spawn's refusals and its progress ----------------------------------------------------------


def test_the_budget_refusal_in_chinese_and_in_english(hub):
    message = spawn_refusal(hub, "broke", {"profile": "t4"}, ZH)
    assert message.startswith("预算不足以支付此配置的 10 分钟："), message
    assert "已花费 ¥0.00，额度 ¥0.10（您的预算）" in message and message.endswith("重置。"), message
    message = spawn_refusal(hub, "broke", {"profile": "t4"}, EN)
    assert "Budget too low for 10 minutes of this profile: CN¥0.00 of CN¥0.10 (your budget)" in message, message
    # an API spawn with no language at all: English
    assert "Budget too low" in spawn_refusal(hub, "broke", {"profile": "t4"}, {})
    wait_for(lambda: hub.server("broke") is None, 10, what="nothing started")


def test_a_queued_spawn_speaks_chinese_and_its_server_knows_the_language(hub):
    assert hub.start_server("first", {"profile": "a100"}).status_code in (201, 202)  # English (no language)
    wait_for(lambda: hub.gpu_state("first") or (hub.server("first") or {}).get("ready"), 60, what="first's A100")
    r = hub.api("POST", "/users/second/server", json={"profile": "a100"}, headers=ZH)
    assert r.status_code == 202, r.text
    events = progress(hub, "second", lambda e: "排队中" in e.get("message", ""))
    # after JupyterHub's own first event ("Server requested": the hub's pages word it)
    assert events[1]["message"] == "正在启动服务器……", events
    assert events[-1]["message"] == "正在等待空闲的 模拟 A100 — 排队中：第 1 位，共 1 位", events
    assert not any("Waiting for" in e.get("message", "") for e in events), events

    hub.wait_ready("first")
    with ThreadPoolExecutor(1) as pool:  # follow second's progress from before the A100 is freed
        following = pool.submit(progress, hub, "second", lambda e: e.get("ready") or e.get("failed"), 90)
        time.sleep(1)
        assert hub.stop_server("first").status_code in (202, 204)
        events = following.result()
    assigned = [e["message"] for e in events if e.get("message", "").startswith("已分配")]
    assert assigned and assigned[0].startswith("已分配 模拟 A100 ("), events
    assert "正在启动 一块 A100，费率 ¥0.25/分钟" in assigned[0], events
    server = hub.wait_ready("second")
    found = environ_of(server["state"]["pid"])
    assert found[gpu_env.LANGUAGE] == "zh-CN" and found[gpu_env.PROFILE_NAME] == "一块 A100"

    # the queue's time-out, while second holds the only A100
    r = hub.api("POST", "/users/third/server", json={"profile": "a100"}, headers=ZH)
    assert r.status_code == 202, r.text
    failed = progress(hub, "third", lambda e: e.get("failed"), timeout=60)[-1]["message"]
    assert "5 秒内没有空闲的 A100；未启动任何服务器。请稍后再试，或选择其他配置。" in failed, failed
    assert "became free" not in failed
    assert "No A100 became free within 5 seconds" in hub.log_text()  # the hub's log keeps the English
    hub.stop_server("second")
    hub.wait_stopped("second")


def test_an_english_spawn_s_server_is_told_english(hub):
    assert hub.start_server("first", {"profile": "cpu"}).status_code in (201, 202)
    server = hub.wait_ready("first")
    found = environ_of(server["state"]["pid"])
    assert found[gpu_env.LANGUAGE] == "en" and found[gpu_env.PROFILE_NAME] == "cpu"
    hub.stop_server("first")
    hub.wait_stopped("first")
