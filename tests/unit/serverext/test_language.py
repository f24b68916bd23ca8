"""The Lab's default language from the spawn's: the file jupyterlab_server reads and the config path to it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from jupyterhub_gpu.env import LANGUAGE
from jupyterhub_gpu.i18n import LANGUAGES
from jupyterhub_gpu.serverext.language import LAB_LOCALES, OVERRIDES_FILE, TRANSLATION_PLUGIN, apply

LOG = logging.getLogger("test-lab-language")


def written(env: dict) -> dict:
    first = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0]
    return json.loads((Path(first) / OVERRIDES_FILE).read_text())


def test_every_language_has_a_lab_locale():
    assert set(LAB_LOCALES) == set(LANGUAGES)


@pytest.mark.parametrize(("language", "locale"), [("zh-CN", "zh_CN"), ("en", "en"), (" zh-CN ", "zh_CN")])
def test_the_spawns_language_becomes_the_labs_default(language, locale):
    env = {LANGUAGE: language}
    assert apply(LOG, env) == locale
    assert written(env) == {TRANSLATION_PLUGIN: {"locale": locale}}


def test_the_directory_goes_first_and_an_existing_config_path_stays_after_it():
    env = {LANGUAGE: "zh-CN", "JUPYTER_CONFIG_PATH": os.pathsep.join(["/etc/lab-a", "/etc/lab-b"])}
    apply(LOG, env)
    first, *rest = env["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert rest == ["/etc/lab-a", "/etc/lab-b"] and (Path(first) / OVERRIDES_FILE).is_file()


@pytest.mark.parametrize("language", ["fr", "zh_CN", "zh-TW", "EN", "en;q=1"])
def test_a_value_that_is_not_one_of_our_languages_changes_nothing(language, caplog):
    env = {LANGUAGE: language, "JUPYTER_CONFIG_PATH": "/etc/lab-a"}
    with caplog.at_level(logging.WARNING):
        assert apply(LOG, env) is None
    assert env["JUPYTER_CONFIG_PATH"] == "/etc/lab-a"
    assert f"{LANGUAGE}={language!r} is not a language of jupyterhub-gpu (en, zh-CN)" in caplog.text


@pytest.mark.parametrize("env", [{}, {LANGUAGE: ""}])
def test_no_language_no_change(env):
    assert apply(LOG, env) is None and "JUPYTER_CONFIG_PATH" not in env
