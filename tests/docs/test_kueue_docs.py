"""docs/kubernetes.md's Kueue objects are the files of config/kubernetes/kueue/, quoted whole.

The page quotes each example file in a ``yaml`` block that names it (``quoted whole from config/kubernetes/kueue/
NAME``); the k8s tests make their objects from the files (tests/k8s/kueue.py), so a page that quoted something
else would document objects no test has run.
"""

from __future__ import annotations

import re

import yaml

from tests.docs.docs_text import ROOT, blocks

PAGE = ROOT / "docs" / "kubernetes.md"
EXAMPLES = ROOT / "config" / "kubernetes" / "kueue"
QUOTED = re.compile(r"quoted whole from config/kubernetes/kueue/(?P<name>[\w.-]+\.yaml)")


def quoted() -> dict[str, str]:
    """The page's quoted example files: file name -> the block's text."""
    found = {}
    for block in blocks(PAGE):
        m = QUOTED.search(block.not_config or "")
        if m:
            assert block.lang == "yaml", f"{block.where}: a quoted example must be a yaml block"
            found[m.group("name")] = block.body
    return found


def test_every_example_file_is_quoted_once_and_exactly():
    files = {p.name: p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))}
    assert files, "config/kubernetes/kueue/ has no example objects"
    page = quoted()
    assert sorted(page) == sorted(files), "docs/kubernetes.md should quote each file of config/kubernetes/kueue/"
    for name, text in files.items():
        assert page[name].strip() == text.strip(), f"docs/kubernetes.md quotes config/kubernetes/kueue/{name} otherwise"


def test_the_quoted_objects_are_the_two_group_department():
    objects = [o for text in quoted().values() for o in yaml.safe_load_all(text) if o]
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert ("ResourceFlavor", "t4") in kinds
    assert [n for k, n in kinds if k == "ClusterQueue"] == ["cs231n", "thesis"]
    assert [n for k, n in kinds if k == "LocalQueue"] == ["cs231n", "thesis"]
    assert {n for k, n in kinds if k == "WorkloadPriorityClass"} == {"notebook", "notebook-preemptible"}
    cohorts = {o["spec"]["cohortName"] for o in objects if o["kind"] == "ClusterQueue"}
    assert len(cohorts) == 1, "the two ClusterQueues share one cohort (they lend and borrow)"
