"""Reading the docs as the tests need them: fenced blocks, links, headings and GitHub's anchors.

The pages checked are README.md and every ``docs/*.md``. A fenced block preceded by an HTML comment
``<!-- not-config: why -->`` is deliberately partial or illustrative: the snippet tests skip it, and the
reason stays visible to whoever reads the Markdown source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_CONFIG = re.compile(r"<!--\s*not-config\b(?P<why>.*?)-->", re.S)
_FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)\s*$", re.S | re.M
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    body: str
    not_config: str | None  # the reason given in <!-- not-config: ... -->, or None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced code block of ``page``, its body dedented by the fence's indentation."""
    text = page.read_text(encoding="utf-8")
    found = []
    for m in _FENCE.finditer(text):
        indent = len(m.group("indent"))
        body = "\n".join(line[indent:] if line[:indent].strip() == "" else line for line in m.group("body").split("\n"))
        before = text[: m.start()].rstrip()
        marker = None
        last = list(NOT_CONFIG.finditer(before))
        if last and last[-1].end() == len(before):
            marker = last[-1].group("why").strip(" :") or "(no reason given)"
        found.append(Block(page, text.count("\n", 0, m.start()) + 1, m.group("lang").lower(), body, marker))
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks (each replaced by as many empty lines, so line numbers hold)."""
    text = page.read_text(encoding="utf-8")
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


# -- links ----------------------------------------------------------------------------------------------------

_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def links(page: Path) -> list[Link]:
    """Every inline Markdown link and image of ``page`` outside code blocks and code spans."""
    text = prose(page)
    text = _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return [Link(page, text.count("\n", 0, m.start()) + 1, m.group("target")) for m in _LINK.finditer(text)]


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)) or target.startswith("//")


# -- headings and anchors -------------------------------------------------------------------------------------

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$", re.M)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # letters (any script), digits, _ and - stay; `, *, ., :, ... go
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, with GitHub's -1, -2 suffixes for repeated ones."""
    seen: dict[str, int] = {}
    result = set()
    for m in _HEADING.finditer(prose(page)):
        slug = github_slug(m.group("text"))
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}-{seen[slug]}"
        else:
            seen[slug] = 0
        result.add(slug)
    return result
