"""The message catalogs: every text the package shows has its translation, with the same placeholders.

The texts are extracted from the sources and templates with Babel (``tools/messages.py``, the same
extraction that writes ``jupyterhub_gpu/locale/jupyterhub_gpu.pot``): ``_("...")`` and ``_.plural(...)`` calls
in Python and in every template of the package (the usage pages, the spawn form, the hub's pages), the
tables of texts they look up, and the spawners' texts worded later (``Phrase("...")``, ``OptionsError("...")``,
...). A text built at run time (an f-string, ``+``, ``.format``) cannot be looked up, and would put what a
user wrote in the place of the text: none may be passed. Each language's ``.po`` must compile, translate
every text, keep each text's placeholders (in every plural form), and say how its plurals go.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import string
from pathlib import Path

import pytest
from babel.messages.mofile import write_mo
from babel.messages.plurals import get_plural
from babel.messages.pofile import read_po

from jupyterhub_gpu import i18n
from jupyterhub_gpu.rules import culling
from jupyterhub_gpu.service.domain import alerts

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "jupyterhub_gpu"
_spec = importlib.util.spec_from_file_location("messages", ROOT / "tools" / "messages.py")
messages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(messages)


def read_catalog(locale: str):
    with (i18n.LOCALE_DIR / locale / "LC_MESSAGES" / f"{i18n.DOMAIN}.po").open("rb") as f:
        return read_po(f, locale=locale, abort_invalid=True)


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def key(message_id) -> str:
    """A catalog entry's key: its msgid (a plural entry's singular)."""
    return message_id[0] if isinstance(message_id, (list, tuple)) else message_id


EXTRACTED = messages.extract()
#: every text the package passes to its translator: msgid -> the entry (plural entries hold both forms)
TEXTS = {key(m.id): m for m in EXTRACTED if m.id}
#: what no call names but the catalogs word: JupyterHub's own texts, the codes shown through _()
OTHERS = messages.other_texts()
TRANSLATED = [locale for locale in (i18n.locale_of(code) for code in i18n.LANGUAGES) if locale != "en"]
CATALOGS = {locale: read_catalog(locale) for locale in (*TRANSLATED, "en")}


def test_texts_are_found_in_every_part_that_shows_them():
    # the usage pages, the spawn form (its template and its progress texts), the budget check, the queue
    for sample in (
        "My usage",
        "Billing is per started minute, from the moment the server starts until it stops.",
        "Unknown profile {slug}.",
        "Budget used up: {used} of {limit} ({whose}) spent in {period}; {reset}.",
        "no such GPU in the cluster",
        "This profile's image is not available on the server yet; the admin has been told.",
        "Sign in",  # a hub page's template
    ):
        assert sample in TEXTS, sample
    assert len(TEXTS) > 150


def test_plural_texts_are_found_as_pairs():
    """A text with a count is one catalog entry with its plural: "1 minutes" cannot be written."""
    for singular, plural in (
        ("{n} minute", "{n} minutes"),
        ("in {n} second", "in {n} seconds"),
        ("{minutes} minute billed, {cost}", "{minutes} minutes billed, {cost}"),
        ("{count} GPU would have done.", "{count} GPUs would have done."),
    ):
        assert TEXTS[singular].id == (singular, plural)


@pytest.mark.parametrize("locale", TRANSLATED)
def test_every_text_has_its_translation(locale):
    catalog = CATALOGS[locale]
    missing = []
    for text, entry in sorted({**TEXTS, **dict.fromkeys(OTHERS)}.items()):
        found = catalog.get(text, context=entry.context if entry else None)
        plural = bool(entry and entry.pluralizable)
        if found is None or found.pluralizable != plural or not all(found.string if plural else [found.string]):
            missing.append(text)
    assert not missing, f"{locale}: no translation (or not as a plural entry) for {missing}"


@pytest.mark.parametrize("locale", [*TRANSLATED, "en"])
def test_each_translation_keeps_the_placeholders_of_its_text(locale):
    """Every form of every translation names exactly the placeholders of its English (both of a plural's)."""
    wrong = []
    for message in CATALOGS[locale]:
        if not message.id:
            continue
        ids = list(message.id) if message.pluralizable else [message.id]
        forms = [s for s in (message.string if message.pluralizable else [message.string]) if s]
        expected = placeholders(ids[0])
        if any(placeholders(text) != expected for text in ids + forms):
            wrong.append(ids[0])
        if not message.pluralizable and message.string and not message.string.strip():
            wrong.append(ids[0])
    assert not wrong, f"{locale}: placeholders differ from the English in {wrong}"


@pytest.mark.parametrize("locale", [*TRANSLATED, "en"])
def test_each_catalog_compiles_and_says_how_its_plurals_go(locale):
    catalog = CATALOGS[locale]
    assert catalog.num_plurals == get_plural(locale).num_plurals
    assert all(len(m.string) == catalog.num_plurals for m in catalog if m.id and m.pluralizable)
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    assert len(compiled.getvalue()) > 100
    # and the package reads the compiled one: its own words for its language
    code = i18n.code_of(locale)
    assert i18n.translator(code).context(i18n.LANGUAGE_NAME_CONTEXT, "English") == i18n.LANGUAGE_NAMES[code]


def test_no_text_is_built_at_run_time():
    """What a user or admin wrote (a slug, a group, a display name) is a value of a text, never the text."""
    calls = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
        for tree in [ast.parse(path.read_text())]
        for line, kind, _ in messages.python_calls(
            tree, {**messages.shared_constants(), **messages.module_constants(tree)}
        )
        if kind == "built"
    ]
    assert not calls, calls


def test_the_languages_are_the_catalogs_present():
    """Adding a language is adding its catalog: LANGUAGES are English and one per .po (docs/translating.md)."""
    present = sorted(p.parents[1].name for p in i18n.LOCALE_DIR.glob(f"*/LC_MESSAGES/{i18n.DOMAIN}.po"))
    assert sorted(i18n.locale_of(code) for code in i18n.LANGUAGES) == present
    assert i18n.LANGUAGES[0] == "en" and "zh-CN" in i18n.LANGUAGES
    assert i18n.LANGUAGE_NAMES == {"en": "English", "zh-CN": "简体中文"}


def test_the_english_catalog_names_only_codes():
    """English texts are their own words: the English catalog holds the codes shown through _() (stop reasons,
    units), so that a stop reason reads "GPU idle" and not "gpu_idle"."""
    _ = i18n.translator("en")
    assert _("gpu_idle") == "GPU idle" and _("stopped") == "stopped by user" and _("My usage") == "My usage"
    entries = [m for m in CATALOGS["en"] if m.id and not m.context]
    assert entries and all(not m.pluralizable and not placeholders(m.id) and m.string for m in entries)


def test_plurals_follow_the_count_in_each_language():
    en, zh = i18n.translator("en"), i18n.translator("zh-CN")
    assert [en.plural("{n} minute", "{n} minutes", n, n=n) for n in (1, 2, 0)] == ["1 minute", "2 minutes", "0 minutes"]
    assert [zh.plural("{n} minute", "{n} minutes", n, n=n) for n in (1, 2)] == ["1 分钟", "2 分钟"]
    assert culling._duration(1) == "1 minute" and culling._duration(120) == "2 hours"
    assert culling._duration(60, "zh-CN") == "1 小时"


def test_simulated_stays_visible_in_chinese():
    _ = i18n.translator("zh-CN")
    assert _("Simulated {model}", model="A100") == "模拟 A100"
    assert "模拟" in _("Simulated GPUs.")


def test_a_value_is_not_formatted_again():
    """A value with braces (a group named by a user) is shown as it is, never read as a placeholder."""
    _ = i18n.translator("zh-CN")
    assert _("Unknown profile {slug}.", slug="'{0}{slug}'") == "未知的配置 '{0}{slug}'。"


#: the modules that word notices, mails and advice: every text of theirs goes through the catalog
MESSAGE_MODULES = (
    "service/domain/alerts.py",
    "service/domain/culling.py",
    "rules/culling.py",
    "service/domain/jobs.py",
    "service/domain/advice.py",
    "service/domain/notices.py",
    "service/notify.py",
)


def test_notice_mail_and_advice_texts_are_found_by_themselves():
    """The budget alerts' and idle warnings' tables, the run notices, the advice and the digest are found."""
    for sample in (
        "[GPU] {user} has used {threshold}% of {budget}",  # alerts.MESSAGES
        "Hello,\n\n{summary}\n\n{advice}\n\n-- \n{footer}\n",
        "You are using your server again: it will not be stopped.",  # culling.MESSAGES (another module's MESSAGES)
        "Idle stop cancelled",
        "Job {job} ({notebook}) was cancelled: {billed}. Output: ~/{output}, log: ~/{log}.",  # jobs.JOB_TEXTS
        "The {profile} profile ({rate}/min instead of {current}/min) would likely have served.",
        "GPU right-sizing for {group}: {amount} could have been saved ({first} to {last})",
    ):
        assert sample in TEXTS, sample


def test_notice_modules_look_up_only_texts_the_extraction_can_read():
    """In the message modules, a text looked up is a literal or a module's table of literals: a variable would
    hide an English text without its Chinese from the catalog check."""
    hidden = []
    for name in MESSAGE_MODULES:
        path = PACKAGE / name
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        constants = {**messages.shared_constants(), **messages.module_constants(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and messages.is_text_call(node):
                args = node.args[:2] if messages.is_text_call(node) == "plural" else node.args[:1]
                if any(messages.texts_of(arg, constants) is None for arg in args):
                    hidden.append(f"{name}:{node.lineno}")
    assert not hidden, hidden


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_message_table_is_worded_in_each_language(lang):
    """Each entry of the alerts' and the cull rules' tables has its wording in each language (English: itself);
    the entries that are one plural's forms are worded through it."""
    _ = i18n.translator(lang)
    plurals = {form for m in TEXTS.values() if m.pluralizable for form in m.id}
    for table in (alerts.MESSAGES, culling.MESSAGES):
        for text in table.values():
            values = dict.fromkeys(placeholders(text), "X")
            english = text.format(**values)
            if text in plurals:
                (entry,) = [m for m in TEXTS.values() if m.pluralizable and text in m.id]
                worded = _.plural(*entry.id, 2 if text == entry.id[1] else 1, **values)
            else:
                worded = _(text, **values)
            assert worded.strip() and (lang == "en") == (worded == english), text
