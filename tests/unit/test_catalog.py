"""The message catalogue: every text the package shows has its Chinese, with the same placeholders.

The texts are found in the source, as written: ``_("...")`` calls in Python and in every template
of the package (the usage pages, the spawn form, the hub's pages), and the spawners' texts worded
later (``Phrase("...")``, their errors ``OptionsError("...")``, ``AllocationError("...")``, ...).
A text built at run time (an f-string, ``+``, ``.format``) cannot be looked up, and would put what a
user wrote in the place of the text: none may be passed.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from jupyterhub_gpu import i18n
from jupyterhub_gpu.service.domain import alerts, culling
from jupyterhub_gpu.session import StopReason

PACKAGE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu"


def catalog(locale: str) -> dict[str, str]:
    """A catalog's singular texts as written in its .po: {msgid: msgstr}."""
    with (PACKAGE / "locale" / locale / "LC_MESSAGES" / "jupyterhub_gpu.po").open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and isinstance(m.id, str) and not m.context}


ZH_CN = catalog("zh_CN")
EN = catalog("en")

#: calls whose first argument is a catalogue text: ``_``, ``self._``, ``translator(lang)``, and the spawners'
#: texts worded when shown (jupyterhub_gpu/spawners/messages.py and its error classes)
WORDED = {"Phrase", "UserError", "OptionsError", "AllocationError", "QueueTimeout", "QueueCancelled"}
TEMPLATE_TEXT = re.compile(r"""\b_\(\s*(?:"((?:[^"\\]|\\.)+)"|'((?:[^'\\]|\\.)+)')""")
#: codes the pages pass through _() as values (stop reasons, budget scopes, periods and units)
CODES = {reason.value for reason in StopReason} | {"user", "group", "week", "month", "term", "money", "gpu_hours"}


def is_text_call(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == "_" or f.id in WORDED
    if isinstance(f, ast.Attribute):
        return f.attr == "_"
    return isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "translator"


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    return {
        t.id: node.value
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Name)
    }


def python_texts() -> tuple[set[str], list[str]]:
    """(the texts passed, the places where a text is built at run time)."""
    trees = {
        path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py")) if "migrations" not in path.parts
    }
    shared = {}
    for tree in trees.values():
        shared.update(module_constants(tree))
    texts, built = set(), []
    for path, tree in trees.items():
        # a module's own names first: several modules have a MESSAGES table of their own
        constants = {**shared, **module_constants(tree)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and is_text_call(node) and node.args):
                continue
            arg = node.args[0]
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            if isinstance(arg, ast.Name) and arg.id in constants:
                arg = constants[arg.id]  # a module's named text (MISSING_IMAGE_MESSAGE, TOKEN_REFUSED)
            if isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and arg.value.id in constants:
                table = constants[arg.value.id]  # a table of texts (NO_SUCH_GPU[where], EVENT_NAMES[e])
                if isinstance(table, ast.Dict):
                    texts.update(v.value for v in table.values if isinstance(v, ast.Constant))
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                texts.add(arg.value)
            elif isinstance(arg, (ast.JoinedStr, ast.BinOp)) or (
                isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format"
            ):
                built.append(where)
    return texts, built


def template_texts() -> set[str]:
    texts = set()
    for path in sorted(PACKAGE.rglob("*.html")):
        for double, single in TEMPLATE_TEXT.findall(path.read_text()):
            texts.add(
                (double or single).encode().decode("unicode_escape") if "\\" in (double or single) else double or single
            )
    return texts


def placeholders(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


TEXTS, BUILT = python_texts()
ALL_TEXTS = TEXTS | template_texts() | CODES


def test_texts_are_found_in_every_part_that_shows_them():
    # the usage pages, the spawn form (its template and its progress texts), the budget check, the queue
    for sample in (
        "My usage",
        "Billing is per started minute, from the moment the server starts until it stops.",
        "Waiting for a free {model} — position {position} of {length}",
        "Unknown profile {slug}.",
        "No {model} became free within {limit}; nothing was started. Try again later or choose another profile.",
        "Budget used up: {used} of {limit} ({whose}) spent in {period}; {reset}.",
        "no such GPU in the cluster",
        "This profile's image is not available on the server yet; the admin has been told.",
    ):
        assert sample in ALL_TEXTS, sample
    assert len(ALL_TEXTS) > 150


def test_every_text_has_its_chinese():
    missing = sorted(t for t in ALL_TEXTS if t not in ZH_CN)
    assert not missing, missing


def test_no_text_is_built_at_run_time():
    """What a user or admin wrote (a slug, a group, a display name) is a value of a text, never the text."""
    assert not BUILT, BUILT


@pytest.mark.parametrize("text", sorted(ZH_CN))
def test_the_chinese_has_the_placeholders_of_the_english(text):
    assert placeholders(ZH_CN[text]) == placeholders(text)
    assert ZH_CN[text].strip(), "an empty translation"


def test_english_names_of_codes_have_no_placeholders_to_lose():
    assert all(placeholders(en) == placeholders(code) for code, en in EN.items())


def test_simulated_stays_visible_in_chinese():
    _ = i18n.translator("zh-CN")
    assert _("Simulated {model}", model="A100") == "模拟 A100"
    assert "模拟" in _("Simulated GPUs.")


def test_a_value_is_not_formatted_again():
    """A value with braces (a group named by a user) is shown as it is, never read as a placeholder."""
    _ = i18n.translator("zh-CN")
    assert _("Unknown profile {slug}.", slug="'{0}{slug}'") == "未知的配置 '{0}{slug}'。"


#: the modules that word notices, mails and advice (issue 19): every text of theirs goes through the catalogue
MESSAGE_MODULES = (
    "service/domain/alerts.py",
    "service/domain/culling.py",
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
        "{minutes} minutes billed, {cost}",
        "The {profile} profile ({rate}/min instead of {current}/min) would likely have served.",
        "GPU right-sizing for {group}: {amount} could have been saved ({first} to {last})",
    ):
        assert sample in TEXTS, sample


def test_notice_modules_look_up_only_texts_the_test_can_read():
    """In the message modules, a text looked up is a literal or a module's table of literals: a variable would
    hide an English text without its Chinese from the catalogue check."""
    hidden = []
    for name in MESSAGE_MODULES:
        tree = ast.parse((PACKAGE / name).read_text())
        constants = module_constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and is_text_call(node) and node.args:
                arg = node.args[0]
                table = isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name) and arg.value.id in constants
                named = isinstance(arg, ast.Name) and arg.id in constants
                if not (isinstance(arg, ast.Constant) or table or named):
                    hidden.append(f"{name}:{node.lineno}")
    assert not hidden, hidden


@pytest.mark.parametrize("lang", i18n.LANGUAGES)
def test_every_message_table_is_worded_in_each_language(lang):
    """Each entry of the alerts' and the cull rules' tables has its wording in each language (English: itself)."""
    _ = i18n.translator(lang)
    for table in (alerts.MESSAGES, culling.MESSAGES):
        for text in table.values():
            worded = _(text, **dict.fromkeys(placeholders(text), "X"))
            assert worded.strip() and (lang == "en") == (
                worded == text.format(**dict.fromkeys(placeholders(text), "X"))
            )
