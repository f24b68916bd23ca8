"""The message catalog's extraction: every text the package passes to its translator, found with Babel.

``python tools/messages.py`` (``make messages``) writes ``jupyterhub_gpu/locale/jupyterhub_gpu.pot`` from the
sources and templates, and updates each language's ``.po`` from it (new texts arrive untranslated, texts no
longer used become obsolete ``#~`` entries); then translate the new entries and run ``make catalogs``.
``tests/unit/test_catalog.py`` runs the same extraction and fails on a text that has no translation.

Python is read by :func:`extract_python_texts`, a Babel extraction method: the translator's calls
(``_("...")``, ``_.plural("...", "...", n)``, ``_.context("...", "...")``, ``translator(lang)("...")``; the
``msgctxt`` entries include how a language runs a list and sentences together, :mod:`jupyterhub_gpu.i18n`'s
``LIST_TEXT`` and ``SENTENCES_TEXT``), the spawners' texts worded later
(``Phrase("...")`` and their error classes), and, where a call passes a module's named text or a table's
entry (``_(MESSAGES["warn.gpu_idle"])``, ``_(EVENT_NAMES[event])``), the text or the table's texts. Templates
are read by Jinja's own Babel extractor (``{{ _("...") }}``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import cache
from http.client import responses
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jupyterhub_gpu"
LOCALE = PACKAGE / "locale"
DOMAIN = "jupyterhub_gpu"
POT = LOCALE / f"{DOMAIN}.pot"
SOURCE_LOCALE = "en"

#: calls whose first argument is a catalog text besides ``_``: the spawners' texts worded when shown
#: (jupyterhub_gpu/spawners/messages.py and its error classes)
WORDED = frozenset({"Phrase", "UserError", "OptionsError", "AllocationError", "QueueTimeout", "QueueCancelled"})
#: codes the pages pass through ``_()`` as values (stop reasons, budget scopes, periods and units): their
#: words are in the catalogs (English's included), but no call names them
CODES_COMMENT = "a code shown through _() (a stop reason, a budget's scope, period or unit)"


def is_text_call(call: ast.Call) -> str | None:
    """``"singular"`` for a call that words one text, ``"plural"`` for ``_.plural``, ``"context"`` for
    ``_.context`` (a text with its ``msgctxt``), else None."""
    f = call.func
    if isinstance(f, ast.Name):
        return "singular" if f.id == "_" or f.id in WORDED else None
    if isinstance(f, ast.Attribute):
        if f.attr in ("plural", "context"):
            return f.attr
        return "singular" if f.attr == "_" else None
    if isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "translator":
        return "singular"
    return None


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    return {
        t.id: node.value
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }


@cache
def shared_constants() -> dict[str, ast.expr]:
    """Every module's top-level names: a text may be named in one module and worded in another."""
    shared: dict[str, ast.expr] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            shared.update(module_constants(ast.parse(path.read_text())))
    return shared


def texts_of(arg: ast.expr, constants: dict[str, ast.expr]) -> list[str] | None:
    """The texts an argument can be: a literal, a named text, a table's entry (or every entry); None when
    it is built at run time (an f-string, ``+``, ``.format``) or cannot be read."""
    if isinstance(arg, ast.Name) and arg.id in constants:
        arg = constants[arg.id]
    if isinstance(arg, ast.IfExp):  # one of two named texts (auth's TOKEN_LACKS_SCOPE or LOGIN_LACKS_SCOPE)
        both = [texts_of(arg.body, constants), texts_of(arg.orelse, constants)]
        return None if None in both else both[0] + both[1]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg.value]
    if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and arg.value.id in constants:
        table = constants[arg.value.id]
        if not isinstance(table, ast.Dict):
            return None
        entries = dict(zip(table.keys, table.values, strict=True))
        key = arg.slice
        if isinstance(key, ast.Constant):
            for k, v in entries.items():
                if isinstance(k, ast.Constant) and k.value == key.value:
                    return texts_of(v, constants)
        return [v.value for v in table.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return None


def built_at_run_time(arg: ast.expr) -> bool:
    return isinstance(arg, (ast.JoinedStr, ast.BinOp)) or (
        isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format"
    )


def python_calls(tree: ast.Module, constants: dict[str, ast.expr]) -> Iterator[tuple[int, str, tuple]]:
    """``(line, kind, texts)`` of each text call: kind ``singular`` (texts: the texts it can word), ``plural``
    (texts: its one singular and plural pair), ``context`` (texts: its context and its text) or ``built`` (a
    text made at run time: texts empty)."""
    for node in ast.walk(tree):
        kind = isinstance(node, ast.Call) and node.args and is_text_call(node)
        if not kind:
            continue
        if kind in ("plural", "context"):
            pair = [texts_of(a, constants) for a in node.args[:2]]
            if any(built_at_run_time(a) for a in node.args[:2]):
                yield node.lineno, "built", ()
            elif len(pair) == 2 and all(t and len(t) == 1 for t in pair):
                yield node.lineno, kind, (pair[0][0], pair[1][0])
            continue
        found = texts_of(node.args[0], constants)
        if found:
            yield node.lineno, "singular", tuple(found)
        elif built_at_run_time(node.args[0]):
            yield node.lineno, "built", ()


def extract_python_texts(fileobj, keywords, comment_tags, options) -> Iterator[tuple[int, str, object, list]]:
    """A Babel extraction method for the package's Python (see the module's docstring)."""
    tree = ast.parse(fileobj.read().decode("utf-8"))
    constants = {**shared_constants(), **module_constants(tree)}
    for line, kind, texts in python_calls(tree, constants):
        if kind in ("plural", "context"):
            yield line, kind, texts, []
        for text in texts if kind == "singular" else ():
            yield line, "_", text, []


METHOD_MAP = [
    ("**/migrations/**", "ignore"),
    ("**.py", "tools.messages:extract_python_texts"),
    ("**/templates/**.html", "jinja2.ext:babel_extract"),
]
#: Jinja's extractor reads only; its i18n extension gives it the ``_`` calls
TEMPLATE_OPTIONS = {"**/templates/**.html": {"extensions": "jinja2.ext.i18n", "silent": "false"}}


def extract() -> Catalog:
    """The catalog template: every text of the sources and templates, with where each is used."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    catalog = Catalog(project="jupyterhub-gpu", copyright_holder="jupyterhub-gpu", charset="utf-8", fuzzy=False)
    catalog.creation_date = datetime(2026, 1, 1, tzinfo=timezone.utc)  # a fixed date: regenerating changes nothing
    for filename, lineno, message, comments, context in extract_from_dir(
        PACKAGE,
        METHOD_MAP,
        options_map=TEMPLATE_OPTIONS,
        keywords={"_": None, "plural": (1, 2), "context": ((1, "c"), 2)},
        strip_comment_tags=True,
    ):
        catalog.add(message, None, [(f"jupyterhub_gpu/{filename}", lineno)], auto_comments=comments, context=context)
    return catalog


def codes() -> set[str]:
    """The codes shown through ``_()`` as values: every msgid of the English catalog but the language's name."""
    with (LOCALE / "en" / "LC_MESSAGES" / f"{DOMAIN}.po").open("rb") as f:
        return {m.id for m in read_po(f) if isinstance(m.id, str) and m.id and not m.context}


def hub_texts() -> set[str]:
    """What JupyterHub itself writes on its pages and the hub's pages word (``hubpages/namespace.py``): its
    messages (``HUB_MESSAGES``) and the reasons of the status codes a student may meet (``STATUS_CODES``)."""
    names = module_constants(ast.parse((PACKAGE / "hubpages" / "namespace.py").read_text()))
    messages = {e.value for e in names["HUB_MESSAGES"].elts if isinstance(e, ast.Constant)}
    return messages | {responses[e.value] for e in names["STATUS_CODES"].elts if isinstance(e, ast.Constant)}


def other_texts() -> dict[str, str]:
    """The texts no call names, each with why it is in the catalogs."""
    out = dict.fromkeys(sorted(hub_texts()), "JupyterHub's own text, worded on the hub's pages (hubpages/namespace.py)")
    out.update(dict.fromkeys(sorted(codes()), CODES_COMMENT))
    return out


def write_template() -> Catalog:
    """Write the ``.pot``: the extracted texts, the codes and each language's name (``msgctxt``)."""
    catalog = extract()
    for text, why in other_texts().items():
        if text not in catalog:
            catalog.add(text, None, auto_comments=[why])
    catalog.add(
        "English",
        None,
        auto_comments=["the name of this catalog's language, in that language (the language switch)"],
        context="language name",
    )
    with POT.open("wb") as f:
        write_po(f, catalog, width=120, sort_by_file=True)
    return catalog


def update_catalogs(template: Catalog) -> None:
    """Each language's ``.po`` brought in step with the template (Babel's ``update``: no fuzzy guesses)."""
    for po in sorted(LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.po")):
        if po.parents[1].name == SOURCE_LOCALE:
            continue  # the texts are English already: its catalog names only the codes, by hand
        with po.open("rb") as f:
            catalog = read_po(f, locale=po.parents[1].name)
        catalog.update(template, no_fuzzy_matching=True, update_header_comment=False)
        with po.open("wb") as f:
            write_po(f, catalog, width=120, sort_by_file=True, ignore_obsolete=True)


if __name__ == "__main__":
    update_catalogs(write_template())
    print(f"wrote {POT.relative_to(ROOT)} and updated", *sorted(p.parent.parent.name for p in LOCALE.glob("*/*/*.po")))
