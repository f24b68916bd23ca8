"""JupyterLab opens in the spawn's language: real jupyter servers with ``JUPYTERHUB_GPU_LANGUAGE`` set.

Each server has its own config and user-settings directories; the Simplified Chinese language pack
(``jupyterlab-language-pack-zh-CN``, in the demo extra) is installed in the test environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import requests

from tests.serverext.test_stats_api import Server

PLUGIN = "@jupyterlab/translation-extension:plugin"


class LabServer(Server):
    """A jupyter server (JupyterLab's API included) in ``tmp_path`` with ``language`` in its environment."""

    def __init__(self, tmp_path: Path, language: str | None, admin_locale: str | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTERHUB", "JUPYTER_", "JUPYTERLAB"))}
        env["JUPYTER_CONFIG_DIR"] = str(tmp_path / "config")
        env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path / "user-settings")
        if language is not None:
            env["JUPYTERHUB_GPU_LANGUAGE"] = language
        args = []
        if admin_locale:
            # an admin's overrides.json in the app settings directory (a lab-wide default)
            app_settings = tmp_path / "app-settings"
            app_settings.mkdir()
            (app_settings / "overrides.json").write_text(json.dumps({PLUGIN: {"locale": admin_locale}}))
            args.append(f"--LabApp.app_settings_dir={app_settings}")
        super().__init__(tmp_path, env, args)
        self.log_path = tmp_path / "server.log"

    def locale_setting(self) -> tuple[str, str | None]:
        """(the default the Lab gets, the user's own value or None), as the settings API serves them."""
        r = requests.get(f"{self.url}/lab/api/settings/{PLUGIN}", headers=self.headers, timeout=10)
        assert r.status_code == 200, r.text
        body = r.json()
        return body["schema"]["properties"]["locale"]["default"], body["settings"].get("locale")

    def translations(self, locale: str) -> dict:
        r = requests.get(f"{self.url}/lab/api/translations/{locale}", headers=self.headers, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()


@pytest.fixture
def lab_server(tmp_path):
    servers = []

    def start(language, admin_locale=None, name="server"):
        path = tmp_path / name
        path.mkdir()
        servers.append(LabServer(path, language, admin_locale))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_a_chinese_spawn_opens_the_lab_in_chinese_and_the_users_own_choice_still_wins(lab_server):
    server = lab_server("zh-CN")
    assert server.locale_setting() == ("zh_CN", None)
    # the language pack answers the locale the Lab asks for: its menus in Chinese
    pack = server.translations("zh_CN")
    assert pack["message"] == "" and pack["data"]["jupyterlab"][""]["language"] == "zh-CN"
    texts = pack["data"]["jupyterlab"]
    menus = [texts[f"menu\x04{m}"][0] for m in ("File", "Edit", "View", "Kernel")]
    assert menus == ["文件", "编辑", "查看", "内核"]
    assert "jupyterhub-gpu: JupyterLab opens in zh_CN" in server.log_path.read_text()

    # Settings → Language → English saves the user's own value, which the Lab's composite takes over the default
    raw = json.dumps({"locale": "en"})
    r = requests.put(f"{server.url}/lab/api/settings/{PLUGIN}", headers=server.headers, json={"raw": raw}, timeout=10)
    assert r.status_code == 204, r.text
    assert server.locale_setting() == ("zh_CN", "en")
    # saved in the user's own settings, where the next start finds it
    settings_file = (
        server.tmp_path / "user-settings" / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
    )
    assert json.loads(settings_file.read_text()) == {"locale": "en"}


def test_an_english_spawn_opens_in_english_over_an_admins_lab_wide_chinese(lab_server):
    english = lab_server("en", admin_locale="zh_CN", name="english")
    assert english.locale_setting() == ("en", None)
    # English is JupyterLab's own: no pack, the Lab keeps its English texts
    assert english.translations("en")["data"] == {}
    # without the variable (a server jupyterhub-gpu did not start) the admin's default stands
    plain = lab_server(None, admin_locale="zh_CN", name="plain")
    assert plain.locale_setting() == ("zh_CN", None)
    assert "JupyterLab opens in" not in plain.log_path.read_text()


def test_an_unknown_language_is_named_in_the_log_and_changes_nothing(lab_server):
    server = lab_server("fr")
    assert server.locale_setting() == ("default", None)
    log = server.log_path.read_text()
    assert "JUPYTERHUB_GPU_LANGUAGE='fr' is not a language of jupyterhub-gpu (en, zh-CN)" in log
