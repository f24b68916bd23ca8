"""Compiles the message catalogs (``jupyterhub_gpu/locale/*/LC_MESSAGES/*.po``) to ``.mo`` with Babel.

Hatchling runs :class:`CatalogBuildHook` for the wheel, the editable install (``pip install -e .``) and so the
Docker images' wheels: the ``.mo`` files are build outputs, never committed (``.gitignore``), and the hook
hands them to the wheel as artifacts. ``python hatch_build.py`` compiles them in a checkout (``make
catalogs``; the tests' conftest does it too, so a ``.po`` just edited is what the tests read). A catalog
that does not parse stops the build with Babel's reason; ``tests/unit/test_catalog.py`` checks what they say.
"""

from __future__ import annotations

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


def compile_catalogs(locale: Path = LOCALE, *, stale_only: bool = False) -> list[Path]:
    """Write each ``.po``'s ``.mo`` beside it (only those older than their ``.po`` with ``stale_only``)."""
    written = []
    for po in sorted(locale.glob("*/LC_MESSAGES/*.po")):
        mo = po.with_suffix(".mo")
        if stale_only and mo.exists() and mo.stat().st_mtime >= po.stat().st_mtime:
            continue
        with po.open("rb") as f:
            catalog = read_po(f, locale=po.parts[-3], abort_invalid=True)
        tmp = mo.with_suffix(f".mo.{os.getpid()}")  # test workers may compile at once
        with tmp.open("wb") as f:
            write_mo(f, catalog)
        tmp.replace(mo)
        written.append(mo)
    return written


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
