"""Every `jupyterhub-gpu ...` command line in the docs' shell blocks is one the CLI accepts (nothing is sent)."""

from __future__ import annotations

import shlex

import pytest

from jupyterhub_gpu.cli import check_args, make_parser
from tests.docs.docs_text import PAGES, blocks


def command_lines() -> list[tuple[str, str]]:
    """(where, command line) of each `jupyterhub-gpu` line of a bash block, continuations joined."""
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in ("bash", "sh", "shell", "console"):
                continue
            text = block.body.replace("\\\n", " ")
            for number, line in enumerate(text.splitlines(), start=block.line + 1):
                words = shlex.split(line, comments=True)
                if words[:1] == ["jupyterhub-gpu"]:
                    cut = next((i for i, w in enumerate(words) if w in (">", ">>", "|")), len(words))
                    found.append((f"{block.where} (+{number - block.line})", words[1:cut]))
    return found


COMMANDS = command_lines()


def test_the_docs_show_the_cli():
    assert {words[0] for _, words in COMMANDS} >= {"budget", "usage", "job"}


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_documented_command_line_parses(where, argv, monkeypatch, capsys):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "documented")  # as the docs' export lines set it
    parser = make_parser()
    try:
        check_args(parser, parser.parse_args(argv))
    except SystemExit:
        pytest.fail(f"{where}: jupyterhub-gpu {shlex.join(argv)} is refused: {capsys.readouterr().err}")


def test_a_wrong_command_line_is_refused(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "documented")
    parser = make_parser()
    with pytest.raises(SystemExit):
        check_args(parser, parser.parse_args(["budget", "set", "--group", "g", "--limit", "5", "--period", "term"]))
