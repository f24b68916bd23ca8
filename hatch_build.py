"""Compiles the message catalogs (``jupyterhub_gpu/locale/*/LC_MESSAGES/*.po``) to ``.mo`` with Babel.

Hatchling runs :class:`CatalogBuildHook` for the wheel, the editable install (``pip install -e .``) and so the
Docker images' wheels: the ``.mo`` files are build outputs, never committed (``.gitignore``), and the hook
hands them to the wheel as artifacts. ``python hatch_build.py`` compiles them in a checkout (``make
catalogs``; the tests' conftest does it too, so a ``.po`` just edited is what the tests read). A catalog
that does not parse stops the build with Babel's reason; ``tests/unit/test_catalog.py`` checks what they say.

The Lab extension's catalogs (``jupyterhub_gpu_lab.po``, JupyterLab's ``%1`` placeholders) compile instead to
``jupyterhub_gpu.json`` beside them, the format JupyterLab serves to the front end: the package's
``jupyterlab.locale`` entry point names ``jupyterhub_gpu/``, whose ``locale/<lang>/LC_MESSAGES/jupyterhub_gpu.json``
JupyterLab merges into the language's translations for the ``jupyterhub_gpu`` domain
(``tests/unit/test_catalog_lab.py`` checks them against the extension's sources).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # compiling in a checkout (python hatch_build.py) needs only Babel
    BuildHookInterface = object

LOCALE = Path(__file__).resolve().parent / "jupyterhub_gpu" / "locale"
#: The Lab extension's catalog in each language, and what it compiles to (the name JupyterLab looks for).
LAB_SUFFIX = "_lab.po"
LAB_JSON = "jupyterhub_gpu.json"


def compile_catalogs(locale: Path = LOCALE, *, stale_only: bool = False) -> list[Path]:
    """Write each ``.po``'s ``.mo`` beside it (only those older than their ``.po`` with ``stale_only``)."""
    written = []
    for po in sorted(locale.glob("*/LC_MESSAGES/*.po")):
        lab = po.name.endswith(LAB_SUFFIX)
        mo = po.with_name(LAB_JSON) if lab else po.with_suffix(".mo")
        if stale_only and mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
            continue
        with po.open("rb") as f:
            catalog = read_po(f, locale=po.parts[-3], abort_invalid=True)
        tmp = mo.with_suffix(f".mo.{os.getpid()}")  # test workers may compile at once
        with tmp.open("wb") as f:
            if lab:
                f.write(
                    json.dumps(
                        lab_json(catalog, po.parts[-3].replace("_", "-")), ensure_ascii=False, sort_keys=True
                    ).encode("utf-8")
                )
            else:
                write_mo(f, catalog)
        tmp.replace(mo)
        written.append(mo)
    return written


def lab_json(catalog, language: str) -> dict:
    """A catalog as JupyterLab's translation JSON: a header under "" and each msgid (``ctx\\x04msgid`` with a
    context) to the list of its forms, as the language packs ship them; untranslated entries are left out, so
    JupyterLab shows their English."""
    data = {
        "": {
            "domain": "jupyterhub_gpu",
            "language": language,  # as JupyterLab names the locale it loads: zh-CN
            "plural_forms": catalog.plural_forms,
            "version": "jupyterhub_gpu",
        }
    }
    for message in catalog:
        if not message.id or message.fuzzy:
            continue
        forms = list(message.string) if isinstance(message.string, (list, tuple)) else [message.string]
        if not all(forms):
            continue
        msgid = message.id[0] if message.pluralizable else message.id
        if message.pluralizable and len(forms) < 2:
            forms.append("")  # JupyterLab takes an entry with one form for a singular (as the language packs pad)
        data[f"{message.context}\x04{msgid}" if message.context else msgid] = forms
    return data


class CatalogBuildHook(BuildHookInterface):
    """Hatchling's hook: compile the catalogs and ship the ``.mo`` files (gitignored, so named as artifacts)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return  # the sdist ships the .po files; a wheel built from it compiles them
        for mo in compile_catalogs(Path(self.root) / "jupyterhub_gpu" / "locale"):
            build_data["artifacts"].append(mo.relative_to(self.root).as_posix())


if __name__ == "__main__":
    for path in compile_catalogs(stale_only="--stale" in sys.argv[1:]):
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
