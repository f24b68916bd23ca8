"""The endpoints table of docs/service-api.md lists exactly the operations of the service's OpenAPI document."""

from __future__ import annotations

import re

import yaml

from tests.docs.docs_text import ROOT, prose

OPENAPI = ROOT / "jupyterhub_gpu" / "service" / "web" / "openapi.yaml"
METHODS = ("get", "post", "put", "patch", "delete")


def normal(path: str) -> str:
    """`budgets/{user|group}/{name}` and `/budgets/{scope}/{name}` are one path: parameters are {}."""
    path = path.replace("\\|", "|").strip("/")
    path = re.sub(r"\{[^}]*\}", "{}", path)
    return path.removeprefix("services/gpu/").removeprefix("api/v1/")


def documented() -> set[tuple[str, str]]:
    text = prose(ROOT / "docs" / "service-api.md")
    table = text[text.index("## Endpoints") : text.index("\n## ", text.index("## Endpoints") + 1)]
    found = set()
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        first = row.split(" | ")[0]
        for method, path in re.findall(r"`(GET|POST|PUT|PATCH|DELETE) ([^`?]+)(?:\?[^`]*)?`", first):
            found.add((method, normal(path)))
    return found


def described() -> set[tuple[str, str]]:
    document = yaml.safe_load(OPENAPI.read_text())
    return {(m.upper(), normal(p)) for p, ops in document["paths"].items() for m in ops if m in METHODS}


def test_the_endpoints_table_lists_every_operation_of_the_openapi_document():
    missing = described() - documented()
    assert not missing, f"operations missing from docs/service-api.md's table: {sorted(missing)}"


def test_the_endpoints_table_lists_nothing_the_service_does_not_answer():
    extra = documented() - described()
    assert not extra, f"rows of docs/service-api.md's table that openapi.yaml does not describe: {sorted(extra)}"
