"""JupyterHub's own pages (login, home, spawn, spawn pending, errors) in the reader's language.

A real hub with ``gpu-local`` over simulated GPUs and ``jupyterhub_gpu.hubpages.template_paths()``, read as
a browser reads it: the language follows ``Accept-Language`` until the switch (``?lang=``) sets the cookie,
and what a user or a URL puts into a page stays text.
"""

from __future__ import annotations

import html
import json
import re
from urllib.parse import parse_qsl, quote

import pytest
import requests

from jupyterhub_gpu.i18n import COOKIE
from tests.conftest import Hub, wait_for

pytestmark = pytest.mark.hub

CONFIG = """
import jupyterhub_gpu.hubpages
c.JupyterHub.template_paths = jupyterhub_gpu.hubpages.template_paths()
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "A100", "count": 1, "memory_gb": 40}]
c.GPULocalSpawner.profiles = [
    {"slug": "a100", "display_name": "One A100", "gpu_model": "A100", "gpu_count": 1,
     "price_per_gpu_hour": "15.00", "default": True},
    {"slug": "cpu", "display_name": "CPU only", "gpu_count": 0, "price_per_hour": "0.60"},
]
c.GPULocalSpawner.queue_timeout = 300
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.JupyterHub.allow_named_servers = True


def refuse_failer(spawner):  # the user "failer"'s spawns fail, with a message JupyterHub shows on its pages
    if spawner.user.name == "failer":
        e = RuntimeError("refused by the test")
        e.jupyterhub_message = 'disk <b id="evil">full</b>'
        raise e


c.Spawner.pre_spawn_hook = refuse_failer
"""

ZH = "zh-CN,zh;q=0.9,en;q=0.5"
EN = "en-US,en;q=0.9"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hubpages")
    hub = Hub(root / "hub", CONFIG % {"home": root / "homes"})
    hub.start()
    hub.create_users("wu", "holder", "failer")
    yield hub
    try:
        hub.cleanup()  # stops the servers, then the hub
    finally:
        hub.stop()  # the hub, even when a server would not stop


def browser(language: str) -> requests.Session:
    s = requests.Session()
    s.headers["Accept-Language"] = language
    s.hooks["response"].append(utf8)
    return s


def utf8(response, *args, **kwargs):
    """The hub's pages are UTF-8 (their meta charset) even where its header names no charset (error pages)."""
    response.encoding = "utf-8"


def sign_in(s: requests.Session, hub: Hub, name: str = "wu", password: str = "pw") -> requests.Response:
    """Post the login form as a browser does (its page first, for the XSRF cookie)."""
    s.get(f"{hub.url}/hub/login", timeout=10)
    return s.post(
        f"{hub.url}/hub/login",
        data={"username": name, "password": password, "_xsrf": s.cookies.get("_xsrf", "")},
        timeout=30,
    )


def login(hub: Hub, language: str, name: str = "wu") -> requests.Session:
    s = browser(language)
    r = sign_in(s, hub, name)
    assert r.status_code == 200, r.text[:500]
    return s


def pair(key: str, value: str) -> str:
    """A key and its value in a JSON object as Jinja's ``tojson`` writes it into a page's script."""
    return f"{json.dumps(key)}: {json.dumps(value)}"


def text_of(page: str) -> str:
    """A page's visible text: without its scripts and tags, entities decoded, spaces collapsed."""
    page = re.sub(r"<script\b.*?</script>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def check(page: str, present: list[str], absent: list[str]) -> None:
    text = text_of(page)
    missing = [t for t in present if t not in text]
    left = [t for t in absent if t in text]
    assert not missing and not left, f"missing {missing}, left in the page {left}:\n{text[:3000]}"


LOGIN_EN = ["Sign in", "Username:", "Password:"]
LOGIN_ZH = ["登录", "用户名：", "密码：", "English", "简体中文"]


def test_login_page_follows_accept_language(hub):
    zh = browser(ZH).get(f"{hub.url}/hub/login", timeout=10)
    assert zh.status_code == 200
    check(zh.text, LOGIN_ZH, [*LOGIN_EN, "Warning: JupyterHub seems", "Show password"])
    assert 'value="登录"' in zh.text and 'title="显示密码"' in zh.text
    assert pair("hide", "隐藏密码") in zh.text  # what the password toggle's script writes
    assert 'document.documentElement.lang = "zh-CN"' in zh.text

    en = browser(EN).get(f"{hub.url}/hub/login", timeout=10)
    check(en.text, LOGIN_EN, ["用户名", "密码"])
    assert 'document.documentElement.lang = "en"' in en.text
    # no preference, or only languages the catalogue lacks: English
    for language in ("", "fr-FR,de;q=0.8"):
        check(browser(language).get(f"{hub.url}/hub/login", timeout=10).text, LOGIN_EN, ["用户名"])


def test_a_wrong_password_is_refused_in_the_readers_language(hub):
    cases = ((ZH, "用户名或密码错误", "Invalid username"), (EN, "Invalid username or password", "错误"))
    for language, message, other in cases:
        r = sign_in(browser(language), hub, password="wrong")
        assert r.status_code == 403
        check(r.text, [message], [other])


def test_home_and_spawn_pages_in_chinese_and_english(hub):
    zh = login(hub, ZH)
    home = zh.get(f"{hub.url}/hub/home", timeout=10)
    assert home.status_code == 200
    check(
        home.text,
        ["启动我的服务器", "命名服务器", "服务器名称", "最近活动", "添加新服务器", "主页", "令牌", "退出登录", "wu"],
        ["Start My Server", "Named Servers", "Add New Server", "Logout", "Token"],
    )
    assert 'placeholder="为服务器命名"' in home.text

    spawn = zh.get(f"{hub.url}/hub/spawn", timeout=10)
    assert spawn.status_code == 200
    check(spawn.text, ["服务器选项", "启动"], ["Server Options", "Logout"])
    assert re.search(r'<button type="submit"[^>]*>启动</button>', spawn.text)

    en = login(hub, EN)
    check(
        en.get(f"{hub.url}/hub/home", timeout=10).text,
        ["Start My Server", "Named Servers", "Add New Server", "Logout", "Token"],
        ["启动", "命名服务器", "退出登录"],
    )
    check(en.get(f"{hub.url}/hub/spawn", timeout=10).text, ["Server Options", "Start"], ["服务器选项"])


def test_a_refused_spawn_shows_the_error_in_the_chinese_frame(hub):
    zh = login(hub, ZH)
    form = {"profile": "nope", "lang": "zh-CN", "_xsrf": zh.cookies.get("_xsrf", "")}  # the form's own lang field
    r = zh.post(f"{hub.url}/hub/spawn", data=form, timeout=30)
    text = text_of(r.text)
    assert "服务器选项" in text and "错误：" in text and "Error:" not in text, text[:2000]
    assert "nope" in text  # the refusal's detail (the spawn form's own message) is kept
    assert hub.server("wu") is None


def test_error_pages_show_the_status_in_the_readers_language_and_keep_the_detail(hub):
    zh = login(hub, ZH)
    r = zh.get(f"{hub.url}/hub/no-such-page", timeout=10)
    assert r.status_code == 404
    check(r.text, ["404 : 未找到", "Jupyter 有很多卫星"], ["Not Found", "lots of moons"])
    r = browser(EN).get(f"{hub.url}/hub/no-such-page", timeout=10)
    check(r.text, ["404 : Not Found", "Jupyter has lots of moons"], ["未找到"])

    # JupyterHub's own detail of an error stays as it is (the admin's and the logs' language), once
    r = zh.get(f"{hub.url}/hub/spawn-pending/wu/no-such-server", timeout=10)
    assert r.status_code == 404
    check(r.text, ["404 : 未找到 wu has no such server no-such-server"], ["Not Found"])
    r = zh.get(f"{hub.url}/hub/admin", timeout=10)
    assert r.status_code == 403
    text = text_of(r.text)
    assert "403 : 禁止访问" in text and "Forbidden" not in text
    assert text.count("Action is not authorized with current scopes") == 1, text


def test_a_server_not_running_and_a_failed_spawn_in_the_readers_language(hub):
    r = login(hub, ZH).get(f"{hub.url}/hub/user/wu/", timeout=10)
    assert r.status_code == 424
    check(r.text, ["服务器未运行", "您的服务器 未运行。", "要启动它吗？", "启动服务器"], ["not running", "Launch"])
    r = login(hub, EN).get(f"{hub.url}/hub/user/wu/", timeout=10)
    check(r.text, ["Server not running", "Would you like to start it?", "Launch Server"], ["服务器未运行"])

    zh = login(hub, ZH, "failer")
    form = {"profile": "cpu", "lang": "zh-CN", "_xsrf": zh.cookies.get("_xsrf", "")}  # the form's own lang field
    r = zh.post(f"{hub.url}/hub/spawn", data=form, timeout=30)
    # the spawn page again, with JupyterHub's error in the Chinese frame, its detail kept
    assert r.status_code == 500
    check(r.text, ["服务器选项", "错误：", "Unhandled error starting server failer"], ["Error:", "Server Options"])
    r = zh.get(f"{hub.url}/hub/user/failer/", timeout=10)
    assert r.status_code == 500
    check(
        r.text,
        ["启动失败", "最近一次启动您的服务器 失败了。", 'disk <b id="evil">full</b>', "要重新启动吗？", "重新启动"],
        ["Spawn failed", "Would you like to retry", "Relaunch"],
    )
    assert '<b id="evil">' not in r.text  # the message is text


def test_spawn_pending_page_and_its_script_texts_in_chinese(hub):
    assert hub.start_server("holder", {"profile": "a100"}).status_code in (201, 202)
    hub.wait_ready("holder")
    try:
        zh = login(hub, ZH)
        xsrf = zh.cookies.get("_xsrf", "")
        r = zh.post(f"{hub.url}/hub/spawn", data={"profile": "a100", "lang": "zh-CN", "_xsrf": xsrf}, timeout=30)
        assert r.status_code == 200 and "/spawn-pending/wu" in r.url, (r.status_code, r.url)
        page = r.text
        check(
            page,
            ["您的服务器正在启动。", "服务器就绪后，页面将自动跳转。", "事件日志", "停止服务器"],
            ["Your server is starting up", "You will be redirected", "Event log", "Stop Server"],
        )
        # the texts the page's script writes: the stop button's and JupyterHub's own progress messages
        for english, chinese in (
            ("Stopping...", "正在停止……"),
            ("Server stopped successfully!", "服务器已停止！"),
            ("Server requested", "已请求服务器"),
            ("Spawn failed", "启动失败"),
        ):
            assert pair(english, chinese) in page
        assert json.dumps(["Spawn failed: ", "启动失败：{detail}"]) in page

        en = login(hub, EN).get(f"{hub.url}/hub/spawn-pending/wu", timeout=10).text
        check(en, ["Your server is starting up.", "Event log", "Stop Server"], ["您的服务器正在启动", "事件日志"])
        assert pair("Stopping...", "Stopping...") in en
    finally:
        hub.stop_server("wu")
        hub.stop_server("holder")
        wait_for(lambda: hub.server("wu") is None and hub.server("holder") is None, 60, what="servers stopped")


def test_the_switch_sets_the_cookie_at_the_base_url_and_wins_over_accept_language(hub):
    s = browser(ZH)
    page = s.get(f"{hub.url}/hub/login?next=%2Fhub%2Fspawn", timeout=10).text
    # the switch: links relative to this page, keeping its query (next) and setting lang
    links = dict(re.findall(r'id="gpu-lang-([\w-]+)"[^>]*href="([^"]*)"', page, flags=re.S))
    assert set(links) == {"en", "zh-CN"}
    for code, link in links.items():
        link = html.unescape(link)
        assert link.startswith("?")
        assert dict(parse_qsl(link[1:])) == {"next": "/hub/spawn", "lang": code}

    r = s.get(f"{hub.url}/hub/login{html.unescape(links['en'])}", timeout=10)
    check(r.text, LOGIN_EN, ["用户名"])
    cookie = next(c for c in s.cookies if c.name == COOKIE)
    assert cookie.value == "en" and cookie.path == "/"
    assert "samesite=lax" in r.headers["Set-Cookie"].lower()
    # later pages, without ?lang=, follow the cookie rather than the browser's zh-CN
    check(s.get(f"{hub.url}/hub/login", timeout=10).text, LOGIN_EN, ["用户名"])
    check(s.get(f"{hub.url}/hub/no-such-page", timeout=10).text, ["Not Found"], ["未找到"])

    # and the other way: an English browser that chose Chinese, through the login to the home page
    en = browser(EN)
    en.get(f"{hub.url}/hub/login?lang=zh-CN", timeout=10)
    check(en.get(f"{hub.url}/hub/login", timeout=10).text, LOGIN_ZH, LOGIN_EN)
    assert sign_in(en, hub).status_code == 200
    check(en.get(f"{hub.url}/hub/home", timeout=10).text, ["启动我的服务器"], ["Start My Server"])


@pytest.mark.parametrize("bad", ["fr", "zh", "EN", "zh-cn", "<script>", "en;q=1", ""])
def test_a_bad_lang_value_is_ignored(hub, bad):
    s = browser(ZH)
    r = s.get(f"{hub.url}/hub/login?lang={quote(bad)}", timeout=10)
    assert r.status_code == 200
    check(r.text, LOGIN_ZH, LOGIN_EN)  # the browser's language, unchanged
    assert COOKIE not in r.headers.get("Set-Cookie", "")
    links = dict(re.findall(r'id="gpu-lang-([\w-]+)"[^>]*href="([^"]*)"', r.text, flags=re.S))
    assert links == {"en": "?lang=en", "zh-CN": "?lang=zh-CN"}  # the bad value is neither kept nor shown
    # nor does a bad cookie choose anything
    s.cookies.set(COOKIE, quote(bad) or "x", path="/")
    check(s.get(f"{hub.url}/hub/login", timeout=10).text, LOGIN_ZH, LOGIN_EN)


@pytest.mark.parametrize("path", ["/hub/login", "/hub/home", "/hub/token"])
@pytest.mark.parametrize("raw", ["%ff", "%C0%AE"])
def test_a_lang_value_that_is_not_utf_8_is_ignored(hub, path, raw):
    """tornado answers 400 to a query argument that is not UTF-8 when it is read as text, and again while
    the error page renders (a blank page): the switch reads the raw bytes and ignores such a value."""
    s = login(hub, ZH)
    r = s.get(f"{hub.url}{path}?lang={raw}", timeout=10)
    assert r.status_code == 200, r.status_code
    assert "简体中文" in r.text and COOKIE not in r.headers.get("Set-Cookie", "")


EVIL = '"><script>alert(1)</script><b x="'


def test_user_controlled_values_stay_text(hub):
    # a next URL and any query argument go into the switch's links: escaped, never markup
    s = browser(ZH)
    r = s.get(f"{hub.url}/hub/login", params={"next": EVIL, EVIL: EVIL, "lang": "zh-CN"}, timeout=10)
    assert r.status_code == 200
    assert "<script>alert(1)" not in r.text and '<b x="' not in r.text
    links = re.findall(r'id="gpu-lang-[\w-]+"[^>]*href="([^"]*)"', r.text, flags=re.S)
    assert len(links) == 2
    for link in links:
        assert dict(parse_qsl(html.unescape(link)[1:]))[EVIL] == EVIL

    # a user name given in the login page's URL, and a page path, shown back
    r = s.get(f"{hub.url}/hub/login", params={"username": EVIL}, timeout=10)
    assert "<script>alert(1)" not in r.text and 'value="&#34;&gt;&lt;script&gt;' in r.text
    r = s.get(f"{hub.url}/hub/{quote(EVIL)}", timeout=10)
    assert r.status_code == 404 and "<script>alert(1)" not in r.text and '<b x="' not in r.text

    # a user name on the login form (after a refused login) and in the top bar
    r = sign_in(s, hub, EVIL, "wrong")
    assert r.status_code == 403
    assert "<script>alert(1)" not in r.text and '<b x="' not in r.text
    assert 'value="&#34;&gt;&lt;script&gt;' in r.text  # the name kept in the field, as text
    check(r.text, ["用户名或密码错误"], ["Invalid username"])

    odd = "o'neil&<b>"
    created = hub.api("POST", "/users", json={"usernames": [odd]})
    if created.status_code == 201:  # JupyterHub takes such a name: it must show as text
        page = login(hub, ZH, odd).get(f"{hub.url}/hub/home", timeout=10).text
        assert '<span class="me-1">o&#39;neil&amp;&lt;b&gt;</span>' in page  # the top bar's name, as text
        assert "<b>" not in re.sub(r"<script\b.*?</script>", "", page, flags=re.S)
