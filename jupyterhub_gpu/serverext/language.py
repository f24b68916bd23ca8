"""The Lab's language: JupyterLab opens in the language the user chose for the spawn (``$JUPYTERHUB_GPU_LANGUAGE``).

JupyterLab 4 keeps its display language in the setting ``locale`` of
``@jupyterlab/translation-extension:plugin``: the Lab reads it through the settings API when it
starts and asks the translations API for that language pack. The spawner writes the user's language
(the pages' switch, else the browser's ``Accept-Language``) into the server's environment; here it
becomes that setting's *default* for this one server:

jupyterlab_server layers default settings from ``labconfig/default_setting_overrides.json`` in every
directory of the Jupyter config path, the first directory first. At link time (before any extension
loads, so before JupyterLab reads its overrides) this module writes such a file in a directory of the
server's own and puts that directory first on ``JUPYTER_CONFIG_PATH``. The same server then answers
``zh_CN`` for a Chinese spawn and ``en`` for an English one, whatever the machine's locale or an
admin's ``overrides.json`` says, while the user's own choice in Settings → Language (saved in their
user settings, which win over every default) still holds. Kernels and terminals inherit the path;
the directory holds nothing but that one file and is removed when the server exits.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

from jupyterhub_gpu.env import LANGUAGE, language_from_env
from jupyterhub_gpu.i18n import LANGUAGES, locale_of

#: The JupyterLab plugin whose ``locale`` setting is the Lab's display language.
TRANSLATION_PLUGIN = "@jupyterlab/translation-extension:plugin"
#: Our languages as JupyterLab's locales (its language packs are named ``zh_CN``, as our catalogs; English needs none).
LAB_LOCALES = {code: locale_of(code) for code in LANGUAGES}
#: The file jupyterlab_server reads from every ``labconfig`` directory of the Jupyter config path.
OVERRIDES_FILE = Path("labconfig", "default_setting_overrides.json")


def lab_locale(language: str) -> str:
    """JupyterLab's locale for one of :data:`~jupyterhub_gpu.i18n.LANGUAGES` (``"zh-CN"`` -> ``"zh_CN"``)."""
    return LAB_LOCALES[language]


def default_settings(language: str) -> dict:
    """The default settings that open the Lab in ``language``."""
    return {TRANSLATION_PLUGIN: {"locale": lab_locale(language)}}


def apply(log, env: MutableMapping[str, str] = os.environ) -> str | None:
    """Make the spawn's language the Lab's default; the locale set, or None when there is none to set.

    Without the variable (a server jupyterhub-gpu did not start) nothing changes; a value that is not
    one of our languages is logged with the ones accepted, and changes nothing.
    """
    language = language_from_env(env)
    if not language:
        return None
    if language not in LANGUAGES:
        log.warning(
            "jupyterhub-gpu: %s=%r is not a language of jupyterhub-gpu (%s): the Lab keeps its default language",
            LANGUAGE,
            language,
            ", ".join(LANGUAGES),
        )
        return None
    directory = Path(tempfile.mkdtemp(prefix="jupyterhub-gpu-lab-language-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / OVERRIDES_FILE
    path.parent.mkdir()
    path.write_text(json.dumps(default_settings(language), indent=2) + "\n", encoding="utf-8")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(p for p in (str(directory), env.get("JUPYTER_CONFIG_PATH")) if p)
    locale = lab_locale(language)
    log.info(
        "jupyterhub-gpu: JupyterLab opens in %s (%s=%s; Settings → Language still changes it)",
        locale,
        LANGUAGE,
        language,
    )
    return locale
