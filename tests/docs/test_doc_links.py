"""Every relative link of README.md and docs/ resolves, anchors included, and every file the prose names exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.docs.docs_text import _CODE_SPAN, PAGES, ROOT, anchors, github_slug, is_external, links, prose


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_pages_are_found():
    names = {page_id(p) for p in PAGES}
    assert {"README.md", "docs/admin.md", "docs/service.md", "docs/service-api.md", "docs/culling.md"} <= names


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("3. The GPU inventory", "3-the-gpu-inventory"),
        ("For callers: `evaluate`", "for-callers-evaluate"),
        ("`PUT budgets/{user|group}/{name}`", "put-budgetsusergroupname"),
        ("Named servers and concurrent spawns", "named-servers-and-concurrent-spawns"),
        ("简体中文", "简体中文"),
        ("What **culling** saved", "what-culling-saved"),
        ("jupyterhub-idle-culler beside the service?", "jupyterhub-idle-culler-beside-the-service"),
    ],
)
def test_github_slugs(heading, slug):
    assert github_slug(heading) == slug


def test_repeated_headings_get_numbered_anchors(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n\n## Notes\n\n```\n# not a heading\n```\n\n## Notes\n")
    assert anchors(page) == {"a", "notes", "notes-1"}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_resolves(page):
    broken = []
    for link in links(page):
        if is_external(link.target):
            continue
        path, _, anchor = link.target.partition("#")
        target = (page.parent / unquote(path)).resolve() if path else page
        where = f"{page_id(page)}:{link.line} ({link.target})"
        if not target.exists():
            broken.append(f"{where}: no such file {target}")
        elif not target.is_relative_to(ROOT):
            broken.append(f"{where}: outside the repository")
        elif anchor and target.suffix == ".md" and unquote(anchor) not in anchors(target):
            broken.append(f"{where}: no heading with the anchor #{anchor} in {target.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


# -- files named in the prose ----------------------------------------------------------------------------------

TRACKED = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
_MENTION = re.compile(r"(?<![\w/.~$<{-])(?P<path>(?:[\w.-]+/)*[\w-]+\.(?:md|py|ya?ml|csv|sh|ipynb|toml|ts|txt|cfg))\b")
# the files the docs name that are not in the repository, on purpose: where an admin puts them, or what they
# are called inside an image, a pod or a browser (the mention is then an instruction, not a pointer)
NOT_IN_THE_REPOSITORY = {
    "jupyterhub_config.py",  # the admin's own hub config
    "gpu_service_config.py",  # the admin's service config file (its default name)
    "startup.sh",  # the student's ~/work/.jupyterhub-gpu/startup.sh
    "train.py",
    "train.ipynb",
    "work/train.ipynb",
    "values.yaml",  # the admin's copy of config/kubernetes/values.yaml
}


def mentions(page: Path) -> list[tuple[int, str]]:
    """Relative file paths named in code spans and plain text (not in fenced blocks or links' targets)."""
    text = re.sub(r"\]\([^)]*\)", "]", prose(page))
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)  # the markers' reasons
    found = []
    for span in _CODE_SPAN.finditer(text):
        inner = span.group(0).strip("`")
        for m in _MENTION.finditer(inner):
            found.append((text.count("\n", 0, span.start()) + 1, m.group("path")))
    plain = _CODE_SPAN.sub(" ", text)
    for m in _MENTION.finditer(plain):
        found.append((plain.count("\n", 0, m.start()) + 1, m.group("path")))
    return found


def resolves(page: Path, mention: str) -> bool:
    if mention in NOT_IN_THE_REPOSITORY or (page.parent / mention).exists() or (ROOT / mention).exists():
        return True
    # a path given inside its package (service/tick.py, web/routes.py, ledger/store.py)
    return any(f.endswith("/" + mention) for f in TRACKED)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_file_the_prose_names_exists(page):
    missing = [f"{page_id(page)}:{line}: {path}" for line, path in mentions(page) if not resolves(page, path)]
    assert not missing, "files named in the docs that the repository does not have:\n" + "\n".join(missing)
