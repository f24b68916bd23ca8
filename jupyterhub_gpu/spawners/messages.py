"""What the spawners tell a student, worded in the student's language when it is shown.

A :class:`Phrase` is a text of the message catalogue (its English, :mod:`jupyterhub_gpu.i18n`)
with its values, worded once a language is known (``phrase("zh-CN")``); as a ``str`` it is the
English (logs, admins, tests). What a user or an admin wrote (a profile slug sent in a form, a
group, a profile's display name) is always a value, never the text looked up. A value may itself
be a :class:`Phrase`, or any callable ``lang -> str`` (a profile's name in each language, an
amount in the locale's format).

:class:`UserError` is the base of the spawners' errors a student reads (the form's and the REST
API's refusals, the allocators' errors and the queue's time-out): raised where the rule is, worded
by the mixin in the spawn's language.
"""

from __future__ import annotations

from jupyterhub_gpu.i18n import translator


class Phrase:
    """A catalogue text and its values; ``phrase(lang)`` is it in ``lang``, ``str(phrase)`` in English."""

    __slots__ = ("text", "values")

    def __init__(self, text: str, **values):
        self.text = text
        self.values = values

    def __call__(self, lang: str) -> str:
        values = {k: v(lang) if callable(v) else v for k, v in self.values.items()}
        return translator(lang)(self.text, **values)

    def __str__(self) -> str:
        return self("en")

    def __repr__(self) -> str:
        return f"Phrase({self.text!r}, **{self.values!r})"


class UserError(Exception):
    """An error a student reads: ``str(e)`` is English, :meth:`worded` is it in their language."""

    def __init__(self, text: str | Phrase, **values):
        self.phrase = text if isinstance(text, Phrase) else Phrase(text, **values)
        super().__init__(str(self.phrase))

    def worded(self, lang: str) -> str:
        return self.phrase(lang)


def shown(text: str, limit: int = 64) -> str:
    """A value a user sent, as a message names it: at most ``limit`` characters (a message, not an echo)."""
    return text if len(text) <= limit else text[:limit] + "…"
