"""The roles the docs give are the reference configurations' roles, and only one page gives them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jupyterhub_gpu.service.app import CONFIG_FILE, GPUService
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
from tests.docs.docs_config import run_snippet
from tests.docs.docs_roles import NEEDED_ROLES, documented, documented_block, hub_settings, reference_configs
from tests.docs.docs_text import PAGES, ROOT, blocks, prose


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return {name: hub_settings(c) for name, c in reference_configs(tmp_path_factory.mktemp("state")).items()}


@pytest.fixture(scope="module")
def docs():
    return hub_settings(documented())


def scopes_of(role: dict) -> set[str]:
    return set(role.get("scopes", []))


@pytest.mark.parametrize("name", ["demo_config.py", "docker_host_config.py", "kubernetes/values.yaml"])
def test_the_documented_roles_are_the_reference_config_s(name, references, docs):
    ref = references[name]
    for role in NEEDED_ROLES:
        assert role in docs["roles"] and role in ref["roles"], (name, role)
        assert scopes_of(docs["roles"][role]) == scopes_of(ref["roles"][role]), (name, role)
        assert docs["roles"][role].get("services") == ref["roles"][role].get("services"), (name, role)
    assert docs["roles"]["gpu-service"]["services"] == ["gpu"]
    assert {"start:servers", "delete:servers"} <= scopes_of(docs["roles"]["gpu-service"])
    assert scopes_of(docs["roles"]["user"]) == {"self", "access:services!service=gpu"}
    assert scopes_of(docs["roles"]["gpu-admins"]) == set(CUSTOM_SCOPES)
    assert docs["allow_named_servers"] is ref["allow_named_servers"] is True
    assert docs["named_server_limit_per_user"] == ref["named_server_limit_per_user"] == 4
    assert docs["custom_scopes"] == ref["custom_scopes"] == CUSTOM_SCOPES


@pytest.mark.parametrize("name", ["demo_config.py", "docker_host_config.py", "kubernetes/values.yaml"])
def test_the_documented_service_entry_is_the_reference_config_s(name, references, docs):
    ref, doc = references[name]["gpu"], docs["gpu"]
    for key in ("oauth_no_confirm", "oauth_client_allowed_scopes", "display"):
        assert doc[key] == ref[key], (name, key)
    assert doc["oauth_client_allowed_scopes"] == sorted(CUSTOM_SCOPES)
    assert doc["command"][1:3] == ref["command"][1:3] == ["-m", "jupyterhub_gpu.service"]
    config_flags = [a for a in doc["command"] if a.startswith("--config=")]
    assert config_flags == ["--config=/etc/jupyterhub/gpu_service_config.py"]


def test_only_the_roles_page_defines_the_needed_roles():
    """Every other page links to it; a second copy is how the docs drifted from the configs before."""
    home = documented_block()
    others = []
    for page in PAGES:
        for block in blocks(page):
            if block == home or block.lang != "python" or "load_roles" not in block.body:
                continue
            if block.not_config:
                continue
            roles = run_snippet(block.body, block.where).get("JupyterHub", {}).get("load_roles", [])
            roles = roles.get_value([]) if hasattr(roles, "get_value") else roles
            others += [f"{block.where}: {r['name']}" for r in roles if r.get("name") in NEEDED_ROLES]
    assert not others, others


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_list_of_the_service_role_s_scopes_in_the_prose_is_whole(page):
    wanted = scopes_of(hub_settings(documented())["roles"]["gpu-service"])
    short = []
    for number, line in enumerate(prose(page).splitlines(), start=1):
        if "gpu-service" in line and "delete:servers" in line:
            named = set(re.findall(r"`([a-z]+:[a-z:_]+)`", line))
            if named & wanted and not wanted <= named:
                short.append(f"{number}: lacks {sorted(wanted - named)}")
    assert not short, short


def test_the_service_s_config_file_has_one_name_everywhere():
    """The docs, the reference configs and the service's default agree: gpu_service_config.py."""
    assert GPUService.config_file.default_value == CONFIG_FILE == "gpu_service_config.py"
    files = [*PAGES, *sorted((ROOT / "config").rglob("*.py")), *sorted((ROOT / "config").rglob("*.yaml"))]
    named = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        named += [(path, m.group(1)) for m in re.finditer(r"--config=([^\s\"'`,)]+)", text)]
        for other in ("jupyterhub_gpu_config.py", "gpu_config.py"):
            assert not re.search(rf"(?<![\w]){re.escape(other)}", text), f"{path.relative_to(ROOT)} names {other}"
    assert len(named) >= 4, named
    wrong = [f"{p.relative_to(ROOT)}: {n}" for p, n in named if Path(n.rstrip(":.")).name != CONFIG_FILE]
    assert not wrong, wrong
