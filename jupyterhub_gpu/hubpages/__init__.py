"""JupyterHub's own pages (login, home, spawn, spawn pending, errors) in the reader's language.

JupyterHub has no translations of its pages. This package ships templates that
extend JupyterHub's own (``{% extends "templates/login.html" %}``) and override
only the blocks that hold text, through the message catalogue
(:mod:`jupyterhub_gpu.i18n`), and a language switch in every page's top bar.
The language is the one of the usage pages: the ``jupyterhub-gpu-lang`` cookie,
then ``Accept-Language``, then English.

    import jupyterhub_gpu.hubpages

    c.JupyterHub.template_paths = jupyterhub_gpu.hubpages.template_paths()

The templates need the reader's language per request, which JupyterHub's
``template_vars`` cannot give (their callables receive only the user): importing
this package wraps ``BaseHandler.template_namespace`` once (:mod:`.namespace`),
as :mod:`jupyterhub_gpu.spawners.startup` wraps ``JupyterHub.init_spawners``.
"""

from __future__ import annotations

from pathlib import Path

from jupyterhub_gpu.hubpages.namespace import install_page_language

TEMPLATES = Path(__file__).with_name("templates")


def template_paths() -> list[str]:
    """For ``c.JupyterHub.template_paths``: the hub's pages in English and Chinese (with the usage pages' link)."""
    return [str(TEMPLATES)]


install_page_language()
