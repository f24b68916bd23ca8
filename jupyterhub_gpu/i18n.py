"""The languages a user reads, and the translator that words a text in one of them.

Texts are written in English where they are used: ``_("...")`` in Python and in the templates, and the
tables of texts the notices, the spawn form and the refusals look up. Their translations live in gettext
catalogs, one per language: ``locale/<locale>/LC_MESSAGES/jupyterhub_gpu.po`` (``zh_CN``; ``en`` names the
codes that are shown in English, stop reasons and units), compiled to ``.mo`` when the package is built
(``hatch_build.py``). :data:`LANGUAGES` are the catalogs present, so a new language is a new catalog
(docs/translating.md). The language comes from the ``jupyterhub-gpu-lang`` cookie (set by the switch on
every page, ``?lang=``) or else from the browser's ``Accept-Language``. A text missing from a catalog is
shown in English (``tests/unit/test_catalog.py`` checks that none is missing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from babel.support import Translations

#: The catalogs' gettext domain (the ``.po``/``.mo`` files' name).
DOMAIN = "jupyterhub_gpu"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
#: The language every text is written in; its catalog holds only the English names of codes.
SOURCE_LANGUAGE = "en"
COOKIE = "jupyterhub-gpu-lang"
#: The context of each catalog's own name for its language (``msgctxt "language name"``, msgid "English").
LANGUAGE_NAME_CONTEXT = "language name"
#: How a language runs items into a list and sentences into a paragraph: catalog entries of their own
#: (``msgctxt "list"``: ``{items}、{item}`` in Chinese; ``msgctxt "sentences"``: ``{text}{sentence}``, no space),
#: used through :meth:`Translator.listing` and :meth:`Translator.sentences`, so that no code asks which language
#: it writes.
LIST_CONTEXT = "list"
LIST_TEXT = "{items}, {item}"
SENTENCES_CONTEXT = "sentences"
SENTENCES_TEXT = "{text} {sentence}"


def code_of(locale: str) -> str:
    """Our language code (a BCP 47 tag: ``zh-CN``) of a catalog's gettext locale (``zh_CN``)."""
    return locale.replace("_", "-")


def locale_of(code: str) -> str:
    """A catalog's gettext locale (``zh_CN``) of one of :data:`LANGUAGES` (``zh-CN``)."""
    return code.replace("-", "_")


def _catalog_languages() -> tuple[str, ...]:
    found = sorted(code_of(po.parents[1].name) for po in LOCALE_DIR.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))
    return (SOURCE_LANGUAGE, *(code for code in found if code != SOURCE_LANGUAGE))


#: The languages a user can read the project in: English first, then one per catalog present.
LANGUAGES = _catalog_languages()


@cache
def translations(lang: str) -> Translations:
    """The compiled catalog of one of :data:`LANGUAGES` (English's for any other code)."""
    code = lang if lang in LANGUAGES else SOURCE_LANGUAGE
    mo = LOCALE_DIR / locale_of(code) / "LC_MESSAGES" / f"{DOMAIN}.mo"
    try:
        with mo.open("rb") as f:
            return Translations(f, domain=DOMAIN)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{mo} is missing: the message catalogs are compiled when the package is built"
            " (pip install, or `make catalogs` / `python hatch_build.py` in a checkout)"
        ) from None


class Translator:
    """The words of one language: ``_(text, **values)``, and ``_.plural(singular, plural, n, **values)``.

    A text is looked up as written and then formatted with ``values`` (``str.format``); a value is never
    formatted again, so one with braces (a group a user named) is shown as it is.
    """

    def __init__(self, lang: str):
        self.lang = lang if lang in LANGUAGES else SOURCE_LANGUAGE
        self._catalog = translations(self.lang)

    def __call__(self, text: str, /, **values) -> str:
        out = self._catalog.gettext(text)
        return out.format(**values) if values else out

    def plural(self, singular: str, plural: str, count: int, /, **values) -> str:
        """The form for ``count`` (the catalog's plural rule: one form in Chinese, two in English), formatted;
        the count is a value too where the text shows it (``_.plural("{n} minute", "{n} minutes", n, n=n)``)."""
        out = self._catalog.ngettext(singular, plural, count)
        return out.format(**values) if values else out

    def context(self, context: str, text: str, /, **values) -> str:
        """A text whose words depend on where it is used (``msgctxt``), such as a language's own name."""
        out = self._catalog.pgettext(context, text)
        return out.format(**values) if values else out

    def listing(self, items: Iterable[str]) -> str:
        """``items`` as one list in this language: ``4 T4s, 2 A100s`` (``4 块 T4、2 块 A100``)."""
        pattern = self.context(LIST_CONTEXT, LIST_TEXT)
        return run_together(pattern, "items", "item", items)

    def sentences(self, parts: Iterable[str]) -> str:
        """Sentences one after the other in this language: a space between them in English, none in Chinese."""
        pattern = self.context(SENTENCES_CONTEXT, SENTENCES_TEXT)
        return run_together(pattern, "text", "sentence", parts)


def run_together(pattern: str, before: str, after: str, parts: Iterable[str]) -> str:
    """``parts`` joined two by two through ``pattern`` (a catalog's text naming ``before`` and ``after``); a part is
    a value, never read as a text."""
    joined = None
    for part in parts:
        joined = part if joined is None else pattern.format(**{before: joined, after: part})
    return joined or ""


def english_an(name: str) -> bool:
    """Whether English says "an" (not "a") before ``name`` as shown: "an A100", "an H100", "an L4", "a T4",
    "an 80 GB card", "a Tesla T4". English grammar, not a word of the catalogs: the English texts come in pairs
    ("of a {model}", "of an {model}") that one translation serves in languages without articles.

    A model code (a word with digits, or in capitals) is read out letter by letter; a number by how it is said
    (8, 11, 18, 80 begin with a vowel); any other word by its first letter."""
    word = name.strip().split(" ")[0] if name.strip() else ""
    if not word:
        return False
    if word[0].isdigit():
        return word.startswith(("8", "11", "18"))
    if any(c.isdigit() for c in word) or word.isupper():
        return word[0].upper() in "AEFHILMNORSX"
    return word[0].lower() in "aeiou"


def translator(lang: str) -> Translator:
    """``_(text, **values)`` for ``lang``: the catalog's text (or the English), formatted."""
    return Translator(lang)


#: Each language's name in itself, for the language switch (``English``, ``简体中文``).
LANGUAGE_NAMES = {code: translator(code).context(LANGUAGE_NAME_CONTEXT, "English") for code in LANGUAGES}


def negotiate(accept_language: str | None, cookie: str | None = None) -> str:
    """The page language: the cookie's choice, else the browser's first supported language, else English.

    A browser's tag matches a language of ours by its primary subtag (``zh-TW`` and ``zh`` read ``zh-CN``).
    """
    if cookie in LANGUAGES:
        return cookie
    choices = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if tag and q > 0:
            choices.append((-q, position, tag.lower()))
    by_primary = {}
    for code in LANGUAGES:
        by_primary.setdefault(code.split("-")[0].lower(), code)
    exact = {code.lower(): code for code in LANGUAGES}
    for _q, _pos, tag in sorted(choices):
        if tag == "*":
            return SOURCE_LANGUAGE
        found = exact.get(tag.replace("_", "-")) or by_primary.get(re.split("[-_]", tag)[0])
        if found:
            return found
    return SOURCE_LANGUAGE


def query_language(handler) -> str | None:
    """The switch's ``?lang=`` of a tornado request ``handler``, when it names one of :data:`LANGUAGES`.

    Read from the raw bytes: tornado's ``get_query_argument`` answers HTTP 400 to a value that is not
    UTF-8, and would again while the error page is rendered.
    """
    raw = (handler.request.query_arguments.get("lang") or [b""])[-1]
    return next((code for code in LANGUAGES if raw == code.encode()), None)


def language_of(handler) -> str:
    """The language of a tornado request ``handler`` (a hub page, the spawn form, a service page):
    the switch's ``?lang=`` (:func:`query_language`), its cookie, else the request's ``Accept-Language``,
    else English."""
    return query_language(handler) or negotiate(
        handler.request.headers.get("Accept-Language"), handler.get_cookie(COOKIE)
    )
