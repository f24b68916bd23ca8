"""What the hub pages' scripts write, in a real browser: in Chinese for a zh-CN reader, English for en-US.

The templates' static texts are checked without a browser (tests/hub/test_hub_pages_language.py); this test
runs their scripts: the password toggle, the home page's start/stop button (JupyterHub's own home.js writes
English into it), the relative "last activity" of named servers, and the spawn-pending page's progress
messages and stop button. The progress stream is given fixed events (JupyterHub's own messages, a detail
with markup) through a page-level EventSource, so what is checked is the page's translation of them.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import wait_for
from tests.hub.test_hub_pages_language import CONFIG

pytestmark = [pytest.mark.browser, pytest.mark.hub]

EVENTS = [
    {"progress": 0, "message": "Server requested"},
    {"progress": 50, "message": "Spawning server..."},
    {"progress": 100, "failed": True, "message": "Spawn failed: disk <b>full</b>"},
]
READY = [
    {
        "progress": 100,
        "message": "Server ready at /user/wu/",
        "html_message": 'Server ready at <a href="/user/wu/">/user/wu/</a>',
    }
]
FAKE_STREAM = (
    "window.EventSource = class { constructor(url) { setTimeout(() => {"
    " for (const e of %s) this.onmessage({data: JSON.stringify(e)}); }, 200); } close() {} };"
)


def log_in(page, hub, name="wu"):
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", "pw")
    page.click("#login_submit")
    page.wait_for_load_state()


def pending_page(browser, hub, locale, events):
    """A fresh browser context on wu's spawn-pending page, its progress stream giving ``events``."""
    context = browser.new_context(locale=locale)
    page = context.new_page()
    page.add_init_script(FAKE_STREAM % json.dumps(events))
    log_in(page, hub)
    assert hub.start_server("wu", {"profile": "cpu"}).status_code in (201, 202)
    page.goto(f"{hub.url}/hub/spawn-pending/wu")
    page.wait_for_function("window._jupyterhub_page_loaded === true")
    page.wait_for_function(f"document.querySelectorAll('.progress-log-event').length >= {len(events)}")
    return context, page


def stop_wu(hub):
    hub.stop_server("wu")
    wait_for(lambda: hub.server("wu") is None, 60, what="wu stopped")


def test_the_pages_scripts_write_the_readers_language(make_hub, tmp_path, browser):
    hub = make_hub(CONFIG % {"home": tmp_path / "homes"})
    hub.create_users("wu")
    context = browser.new_context(locale="zh-CN")
    page = context.new_page()
    page.goto(f"{hub.url}/hub/login")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.click("#toggle_password_visibility")
    assert page.get_attribute("#toggle_password_visibility", "title") == "隐藏密码"

    log_in(page, hub)
    assert hub.start_server("wu", {"profile": "cpu"}).status_code in (201, 202)
    assert hub.start_server("wu", {"profile": "cpu"}, server_name="notes").status_code in (201, 202)
    hub.wait_ready("wu")
    wait_for(lambda: (hub.server("wu", "notes") or {}).get("ready"), 90, what="wu/notes ready")
    page.goto(f"{hub.url}/hub/home")
    page.wait_for_function("window._jupyterhub_page_loaded === true")
    assert page.inner_text("#start").strip() == "我的服务器"
    assert page.inner_text("tr[data-server-name=notes] .gpu-time-col").strip().endswith("前")  # "4秒钟前"
    page.click("#stop")
    page.wait_for_function("document.getElementById('start').title === '您的服务器正在停止'")
    wait_for(lambda: hub.server("wu") is None, 60, what="wu stopped")
    page.wait_for_function("document.getElementById('start').textContent.trim() === '启动我的服务器'", timeout=30_000)
    assert page.get_attribute("#start", "title") == "启动您的默认服务器"
    context.close()

    context, page = pending_page(browser, hub, "zh-CN", EVENTS)
    log = page.inner_html("#progress-log")
    assert "已请求服务器" in log and "正在启动服务器……" in log
    # the start of JupyterHub's message translated, its detail kept, and kept as text
    assert page.inner_html("#progress-message") == "启动失败：disk &lt;b&gt;full&lt;/b&gt;"
    page.click("#stop-server-btn")
    texts = page.evaluate("[$('#stop-server-btn').text(), $('#stop-server-status').text()]")
    assert texts in (["正在停止……", "正在停止服务器……"], ["正在停止……", "服务器已停止！"]), texts
    context.close()
    stop_wu(hub)

    context, page = pending_page(browser, hub, "zh-CN", READY)
    assert page.inner_html("#progress-message") == '服务器已就绪：<a href="/user/wu/">/user/wu/</a>'
    context.close()
    stop_wu(hub)

    context, page = pending_page(browser, hub, "en-US", EVENTS)
    assert page.inner_html("#progress-message") == "Spawn failed: disk &lt;b&gt;full&lt;/b&gt;"
    assert "Server requested" in page.inner_html("#progress-log")
    assert page.inner_text("#stop-server-btn") == "Stop Server"
    context.close()
    stop_wu(hub)


def test_the_switch_on_the_spawn_page_keeps_the_choice_and_starts_nothing(make_hub, tmp_path, browser):
    """The switch sets the cookie from its script and reloads the page with no ?lang= in the address (JupyterHub
    takes any query argument of /hub/spawn as a spawn request): the form comes back in the other language,
    with no error above it, and nothing starts."""
    hub = make_hub(CONFIG % {"home": tmp_path / "homes"})
    hub.create_users("wu")
    context = browser.new_context(locale="en-US")
    page = context.new_page()
    log_in(page, hub)
    page.goto(f"{hub.url}/hub/spawn/wu")
    assert "Billing is per started minute" in page.inner_text("body")
    page.click("#gpu-language button")
    with page.expect_navigation():
        page.click("#gpu-lang-zh-CN")
    assert "lang=" not in page.url and page.url.endswith("/hub/spawn/wu")
    body = page.inner_text("body")
    assert "按开始的分钟计费" in body and page.query_selector(".spawn-error-msg") is None
    assert {c["name"]: c["value"] for c in context.cookies()}.get("jupyterhub-gpu-lang") == "zh-CN"
    assert hub.server("wu") is None
    context.close()
