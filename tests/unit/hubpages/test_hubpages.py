"""The hub's page templates: each extends JupyterHub's own, overrides only blocks that exist there, and every
text it shows has its Chinese; the language namespace over a real tornado request."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from http.client import responses
from pathlib import Path
from urllib.parse import urlparse

import pytest
from babel.messages.pofile import read_po
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PrefixLoader, nodes
from jupyterhub._data import DATA_FILES_PATH
from tornado.testing import AsyncHTTPTestCase
from tornado.web import Application, RequestHandler

from jupyterhub_gpu import hubpages
from jupyterhub_gpu.hubpages.namespace import HUB_MESSAGES, STATUS_CODES, language_namespace, switch_links
from jupyterhub_gpu.i18n import COOKIE, LOCALE_DIR

# where JupyterHub's own templates are, as JupyterHub finds them (app.py: _template_paths_default)
JUPYTERHUB_TEMPLATES = Path(DATA_FILES_PATH) / "templates"
OURS = sorted(hubpages.TEMPLATES.glob("*.html"))
# as JupyterHub builds its loader: "templates/NAME" is its own, NAME the first in template_paths
ENV = Environment(
    loader=ChoiceLoader(
        [
            PrefixLoader({"templates": FileSystemLoader([str(JUPYTERHUB_TEMPLATES)])}, "/"),
            FileSystemLoader([*hubpages.template_paths(), str(JUPYTERHUB_TEMPLATES)]),
        ]
    ),
    autoescape=True,
)
PLACEHOLDER = re.compile(r"{(\w+)}")
with (LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / "jupyterhub_gpu.po").open("rb") as po:
    #: the Chinese catalog's texts, as written in its .po
    ZH_CN = {m.id: m.string for m in read_po(po) if isinstance(m.id, str) and m.id and not m.context}


def parsed(name: str):
    return ENV.parse(ENV.loader.get_source(ENV, name)[0])


def blocks_of(name: str) -> set[str]:
    """Every block a template and the templates it extends define."""
    tree = parsed(name)
    found = {b.name for b in tree.find_all(nodes.Block)}
    extends = next(tree.find_all(nodes.Extends), None)
    if extends is not None and isinstance(extends.template, nodes.Const):
        found |= blocks_of(extends.template.value)
    return found


def texts_of(name: str) -> list[str]:
    """The message ids a template gives ``_()``."""
    return [
        call.args[0].value
        for call in parsed(name).find_all(nodes.Call)
        if isinstance(call.node, nodes.Name) and call.node.name == "_"
        if call.args and isinstance(call.args[0], nodes.Const)
    ]


def test_the_templates_are_the_pages_a_student_meets():
    names = {p.name for p in OURS}
    assert {"page.html", "login.html", "home.html", "spawn.html", "spawn_pending.html", "error.html"} <= names
    assert {"404.html", "logout.html", "not_running.html", "stop_pending.html"} <= names


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_each_extends_jupyterhubs_own_and_overrides_only_its_blocks(path):
    tree = parsed(path.name)
    extends = next(tree.find_all(nodes.Extends))
    assert extends.template.value == f"templates/{path.name}"  # its own namesake: an upgrade keeps the rest
    original = blocks_of(f"templates/{path.name}")
    ours = {b.name for b in tree.body if isinstance(b, nodes.Block)}
    assert ours and ours <= original, f"blocks JupyterHub's {path.name} does not have: {ours - original}"
    ENV.get_template(path.name)  # compiles, with its parents


@pytest.mark.parametrize("path", OURS, ids=lambda p: p.name)
def test_every_text_of_the_templates_has_its_chinese_with_the_same_placeholders(path):
    texts = texts_of(path.name)
    assert texts or path.name == "error.html"  # its texts are JupyterHub's: gpu_error_title, gpu_hub_text
    missing = [t for t in texts if t not in ZH_CN]
    assert not missing, f"{path.name}: no Chinese for {missing}"
    for text in texts:
        assert set(PLACEHOLDER.findall(text)) == set(PLACEHOLDER.findall(ZH_CN[text])), text


def test_jupyterhubs_own_messages_and_status_reasons_have_their_chinese():
    assert [m for m in HUB_MESSAGES if m not in ZH_CN] == []
    assert [responses[c] for c in STATUS_CODES if responses[c] not in ZH_CN] == []


class Page(RequestHandler):
    """A tornado page that answers with what :func:`language_namespace` gives its request."""

    base_url = "/jh/"  # JupyterHub's base URL, where the cookie goes
    spawn_home_error = "You can try restarting your server from the <a href='/jh/hub/home'>home page</a>."

    class hub:  # JupyterHub's handler.hub, as its BaseHandler has it
        base_url = "/jh/hub/"

    def get(self):
        ns = language_namespace(self)
        title = ns["gpu_error_title"]
        self.finish(
            {
                "lang": ns["gpu_lang"],
                "sign_in": ns["_"]("Sign in"),
                "switch": ns["gpu_switch"],
                "links": switch_links(self),
                "titles": [
                    title(404, None),
                    title(404, "Not Found"),
                    title(404, "wu has no such server x"),
                    title(403, "not allowed", "not allowed"),  # said once, in the message
                    title(403, "Invalid username or password"),
                    title(424, None),  # a reason the catalogue lacks: English
                    title(599, "Custom"),
                ],
                "hub_text": [ns["gpu_hub_text"]("Spawn failed"), ns["gpu_hub_text"]("Spawn failed: disk full")],
                "extra": [
                    str(ns["gpu_extra_error_html"](self.spawn_home_error)),
                    str(ns["gpu_extra_error_html"]("<i>an admin's own</i>")),
                    str(ns["gpu_extra_error_html"]("")),
                ],
            }
        )


class TestLanguageNamespace(AsyncHTTPTestCase):
    def get_app(self):
        return Application([(r"/.*", Page)])

    def page(self, uri: str, **headers):
        response = self.fetch(uri, headers=headers)
        assert response.code == 200
        return json.loads(response.body), response.headers.get_list("Set-Cookie")

    def test_the_switch_sets_the_cookie_at_the_base_url(self):
        ns, cookies = self.page("/jh/hub/login?lang=zh-CN&next=%2Fjh%2Fhub%2Fspawn", **{"Accept-Language": "en-US"})
        assert ns["lang"] == "zh-CN" and ns["sign_in"] == "登录"
        (cookie,) = cookies
        attributes = {a.strip().split("=")[0].lower(): a.strip().partition("=")[2] for a in cookie.split(";")[1:]}
        assert cookie.startswith(f"{COOKIE}=zh-CN;") and attributes["path"] == "/jh/"
        assert attributes["samesite"] == "Lax" and "expires" in attributes
        assert "secure" not in attributes  # plain HTTP here; over HTTPS the cookie is Secure
        assert ns["switch"] == {
            "en": "?next=%2Fjh%2Fhub%2Fspawn&lang=en",
            "zh-CN": "?next=%2Fjh%2Fhub%2Fspawn&lang=zh-CN",
        }

    def test_a_bad_value_is_ignored_and_the_cookie_wins_over_accept_language(self):
        for bad in ("fr", "zh", "ZH-CN", "%3Cb%3E", ""):
            ns, cookies = self.page(f"/jh/hub/login?lang={bad}", **{"Accept-Language": "zh-CN"})
            assert ns["lang"] == "zh-CN" and cookies == []  # the browser's, unchanged, nothing kept
        ns, _ = self.page("/jh/hub/login", **{"Accept-Language": "zh-CN", "Cookie": f"{COOKIE}=en"})
        assert ns["lang"] == "en"
        ns, _ = self.page("/jh/hub/login", **{"Accept-Language": "zh-CN", "Cookie": f"{COOKIE}=fr"})
        assert ns["lang"] == "zh-CN"  # a cookie naming no language chooses nothing

    def test_switch_links_stay_on_the_page_whatever_the_query(self):
        ns, _ = self.page("/jh/hub/login?next=https%3A%2F%2Fevil.example%2F&a=1&a=2&lang=en&%22%3E=%3C")
        for code, link in ns["links"].items():
            assert link.startswith("?") and link.endswith(f"lang={code}")
            assert "next=https%3A%2F%2Fevil.example%2F" in link and "a=1&a=2" in link and "%22%3E=%3C" in link
            assert "lang=en&" not in link  # the old choice is dropped

    def test_error_titles_translate_standard_reasons_and_keep_jupyterhubs_detail(self):
        ns, _ = self.page("/jh/hub/x", **{"Accept-Language": "zh-CN"})
        assert ns["titles"] == [
            ["未找到", ""],
            ["未找到", ""],
            ["未找到", "wu has no such server x"],
            ["禁止访问", ""],
            ["禁止访问", "用户名或密码错误"],
            ["Failed Dependency", ""],
            ["Custom", ""],
        ]
        assert ns["hub_text"] == ["启动失败", "Spawn failed: disk full"]  # only JupyterHub's own whole messages
        assert ns["extra"] == ["您可以在<a href='/jh/hub/home'>主页</a>重新启动服务器。", "<i>an admin's own</i>", ""]
        ns, _ = self.page("/jh/hub/x")
        assert ns["titles"][0] == ["Not Found", ""] and ns["hub_text"][0] == "Spawn failed"
        assert ns["extra"][0] == Page.spawn_home_error  # English: JupyterHub's own, as it was


class TestCookieBehindHTTPS(AsyncHTTPTestCase):
    """TLS ends in front of the proxy: JupyterHub's cookies are Secure from its https public_url, and so is ours."""

    def get_app(self):
        return Application([(r"/.*", Page)], public_url=urlparse("https://hub.example.edu/jh/"))

    def test_the_switch_s_cookie_is_secure_when_the_hub_s_public_url_is_https(self):
        response = self.fetch("/jh/hub/login?lang=zh-CN")
        (cookie,) = response.headers.get_list("Set-Cookie")
        assert "secure" in {a.strip().lower() for a in cookie.split(";")}


def test_loading_a_gpu_spawner_installs_the_pages_language_without_importing_hubpages():
    """A config that names the template folder as a path (a YAML values file) and never imports
    jupyterhub_gpu.hubpages still renders its pages: JupyterHub loading a gpu-* spawner installs the hook."""
    code = (
        "from importlib.metadata import entry_points\n"
        "from jupyterhub.handlers.base import BaseHandler\n"
        "(ep,) = [e for e in entry_points(group='jupyterhub.spawners') if e.name == 'gpu-local']\n"
        "ep.load()\n"
        "print(getattr(BaseHandler.template_namespace.fget, '_jupyterhub_gpu_language', False))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "True", out.stderr
