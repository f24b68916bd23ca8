"""Every configuration snippet of README.md and docs/ loads: its classes and options exist and its values validate.

A Python block that sets ``c.Something.option`` is a config snippet; so is a JSON or YAML block under a heading
whose loader the project has (budget bodies). A block that is deliberately partial or illustrative carries
``<!-- not-config: why -->`` just before it; there are few, each with its reason. The ready configurations in
``config/`` go through the same checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from jupyterhub_gpu.ledger.hubnames import check_hub_name
from jupyterhub_gpu.rules import cullrules
from jupyterhub_gpu.service.web.params import BadRequest, parse_budget
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from tests.docs.docs_config import CLASSES, FAKE_ENV, probe, problems_of, run_snippet
from tests.docs.docs_text import _CODE_SPAN, _HEADING, PAGES, ROOT, Block, blocks, prose

_SETS_CONFIG = re.compile(r"^\s*c\.[A-Z]\w*\.", re.M)


def heading_before(block: Block) -> str:
    text = prose(block.page)
    found = [m.group("text") for m in _HEADING.finditer(text) if text.count("\n", 0, m.start()) + 1 < block.line]
    return found[-1] if found else ""


def budget_bodies(block: Block) -> list[str]:
    problems = []
    for number, line in enumerate(block.body.splitlines(), start=1):
        try:
            parse_budget("group", "cs231n", json.loads(line))
        except (BadRequest, json.JSONDecodeError) as e:
            problems.append(f"line {number}: {e}")
    return problems


def chart_values_configs(block: Block) -> list[str]:
    """A fragment of the chart's values: YAML whose hub.extraConfig and hub.extraFiles strings are config files;
    each runs as one, its values pass the same checks, and the hub and its service name the same hub."""
    try:
        values = yaml.safe_load(block.body)
    except yaml.YAMLError as e:
        return [f"not YAML: {e}"]
    hub = values.get("hub") or {}
    codes = list((hub.get("extraConfig") or {}).values())
    codes += [f.get("stringData", "") for f in (hub.get("extraFiles") or {}).values()]
    problems, names = [], set()
    environ = {"JUPYTERHUB_GPU_DB_URL": FAKE_ENV["JUPYTERHUB_GPU_LEDGER_URL"]}
    for code in codes:
        try:
            config = run_snippet(code, block.where, environ)
        except Exception as e:  # a config file that does not run is the finding
            problems.append(f"{type(e).__name__}: {e}")
            continue
        for section in ("GPUService", "GPUKubeSpawner"):
            name = config.get(section, {}).get("hub_name")
            if name is not None:
                try:
                    check_hub_name(name, f"c.{section}.hub_name")
                except ValueError as e:
                    problems.append(str(e))
                names.add(name)
    if len(names) > 1:
        problems.append(f"the hub and its service name different hubs: {sorted(names)}")
    return problems or ([] if codes else ["no config in hub.extraConfig or hub.extraFiles"])


#: the loader of the JSON and YAML blocks under each heading: the project's own parser of that input
LOADERS = {"`PUT budgets/{user|group}/{name}`": budget_bodies, "Two hubs on one ledger": chart_values_configs}


@dataclass(frozen=True)
class Snippet:
    block: Block
    kind: str  # "python", "data"


def snippets() -> list[Snippet]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.not_config:
                continue
            if block.lang == "python" and _SETS_CONFIG.search(block.body):
                found.append(Snippet(block, "python"))
            elif block.lang in ("json", "yaml", "yml"):
                found.append(Snippet(block, "data"))
    return found


SNIPPETS = snippets()


def test_the_docs_have_config_snippets_and_few_exceptions():
    python = [s for s in SNIPPETS if s.kind == "python"]
    assert len(python) >= 10, [s.block.where for s in python]
    exceptions = [b for page in PAGES for b in blocks(page) if b.not_config]
    assert len(exceptions) <= 6, [f"{b.where}: {b.not_config}" for b in exceptions]
    assert all(b.not_config != "(no reason given)" for b in exceptions), "say why a block is not config"


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.kind == "python"], ids=lambda s: s.block.where)
def test_every_python_config_snippet_loads_and_validates(snippet, tmp_path):
    config = run_snippet(snippet.block.body, snippet.block.where)
    assert not problems_of(config, tmp_path), f"{snippet.block.where}:\n" + "\n".join(problems_of(config, tmp_path))


@pytest.mark.parametrize("snippet", [s for s in SNIPPETS if s.kind == "data"], ids=lambda s: s.block.where)
def test_every_json_or_yaml_config_block_has_a_loader_and_loads(snippet):
    heading = heading_before(snippet.block)
    loader = LOADERS.get(heading)
    assert loader, (
        f"{snippet.block.where} (under {heading!r}): no loader in the project reads this block;"
        " give it one in LOADERS or mark it <!-- not-config: why -->"
    )
    assert not loader(snippet.block), f"{snippet.block.where}: {loader(snippet.block)}"


@pytest.mark.parametrize("name", ["demo_config.py", "docker_host_config.py"])
def test_the_ready_configs_pass_the_same_checks(name, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_GPU_DEMO_STATE", str(tmp_path / "state"))
    config = PyFileConfigLoader(name, path=str(ROOT / "config")).load_config()
    assert not problems_of(config, tmp_path)


def test_the_documented_default_cull_rules_are_the_code_s():
    (block,) = [b for b in blocks(ROOT / "docs" / "culling.md") if "DEFAULT_RULES = (" in b.body]
    namespace = {"CullRule": cullrules.CullRule}
    exec(block.body, namespace)
    assert namespace["DEFAULT_RULES"] == cullrules.DEFAULT_RULES


# -- options named in the prose --------------------------------------------------------------------------------

_OPTION = re.compile(r"(?<![\w.])(?P<c>c\.)?(?P<cls>[A-Z]\w+)\.(?P<name>[a-z_]\w*)\b")
PLACEHOLDERS = {"x", "option", "smtp_hots"}  # c.GPUService.x = ..., --GPUService.option=value; a typo shown


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_the_prose_names_exists(page):
    """`c.GPUService.tick_interval` must be an option; `GPUDockerSpawner.poll` at least an attribute."""
    text = prose(page)
    wrong = []
    for span in _CODE_SPAN.finditer(text):
        for m in _OPTION.finditer(span.group(0)):
            cls = CLASSES.get(m.group("cls"))
            name = m.group("name")
            line = text.count("\n", 0, span.start()) + 1
            if cls is None:
                if m.group("c"):
                    wrong.append(f"{line}: {m.group(0)}: no such configurable class")
                continue
            if name in PLACEHOLDERS:
                continue
            if m.group("c") and name not in cls.class_traits(config=True):
                wrong.append(f"{line}: {m.group(0)}: {cls.__name__} has no option {name!r}")
            elif not m.group("c") and not hasattr(cls, name):
                wrong.append(f"{line}: {m.group(0)}: {cls.__name__} has no {name!r}")
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


# -- the checker catches what it should ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("c.GPUDockerSpawnr.currency = 'CNY'", "c.GPUDockerSpawnr: no such configurable class"),
        ("c.GPUDockerSpawner.curency = 'CNY'", "GPUDockerSpawner has no such option"),
        ("c.JupyterHub.hub_port = 'eight'", "c.JupyterHub: The 'hub_port' trait"),
        (
            "c.GPUDockerSpawner.profiles = [{'slug': 't4', 'gpu_model': 'T4', 'price_per_gpu_hour': 3.0}]",
            "c.GPUDockerSpawner.profiles: profile 't4'",
        ),
        ("c.GPUDockerSpawner.currency = 'XYZ'", "c.GPUDockerSpawner:"),
        ("c.GPUDockerSpawner.container_user = '0:100'", "c.GPUDockerSpawner"),
        ("c.GPUService.timezone = 'Mars/Olympus'", "timezone must be an IANA name"),
        ("c.GPUService.alert_thresholds = [80, 150]", "alert_thresholds must be whole percentages"),
        ("c.GPUService.smtp_host = 'smtp.example.edu'\nc.GPUService.mail_from = ''", "c.GPUService: the service"),
        (
            "c.JupyterHub.load_roles = [{'name': 'user', 'scopes': ['self', 'acess:services!service=gpu']}]",
            "Scope 'acess:services!service=gpu'",
        ),
        (
            "c.JupyterHub.load_roles = [{'name': 'r', 'scopes': ['read:users!usr=a']}]",
            "Scope filter",
        ),
        (
            "c.JupyterHub.services = [{'name': 'gpu', 'oauth_no_confrim': True}]",
            "JupyterHub has no service field 'oauth_no_confrim'",
        ),
        (
            "c.JupyterHub.services = [{'name': 'gpu'}]\n"
            "c.JupyterHub.load_roles = [{'name': 'r', 'services': ['gpu-svc'], 'scopes': ['read:users']}]",
            "names the service 'gpu-svc'",
        ),
        ("c.JupyterHub.load_roles = [{'name': 'r', 'scope': ['read:users']}]", "no role field ['scope']"),
    ],
)
def test_the_checker_refuses_a_broken_snippet(code, expected, tmp_path):
    problems = problems_of(run_snippet(code, "<test>"), tmp_path)
    assert any(expected in p for p in problems), problems


def test_a_snippet_reading_the_environment_runs_in_a_fake_one(tmp_path):
    code = (
        "import os\n"
        "c.GPUKubeSpawner.ledger_db_url = os.environ['JUPYTERHUB_GPU_LEDGER_URL']\n"
        "c.GPUKubeSpawner.profiles = [{'slug': 'cpu', 'gpu_count': 0, 'image': 'i', 'price_per_hour': '0.60'}]\n"
        "c.JupyterHub.hub_connect_ip = os.environ['POD_IP']\n"
    )
    config = run_snippet(code, "<test>")
    assert config.GPUKubeSpawner.ledger_db_url == FAKE_ENV["JUPYTERHUB_GPU_LEDGER_URL"]
    assert config.JupyterHub.hub_connect_ip == "10.0.0.5"
    assert "POD_IP" not in __import__("os").environ
    assert not problems_of(config, tmp_path)


def test_a_marked_block_is_skipped_and_its_reason_kept(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "# P\n\n<!-- not-config: a fragment -->\n```python\nc.Nope.x = 1\n```\n\n"
        "```python\nc.JupyterHub.hub_port = 1\n```\n"
    )
    marked, plain = blocks(page)
    assert (marked.not_config, plain.not_config) == ("a fragment", None)


def test_the_stand_in_gpus_leave_nvml_snippets_checkable(tmp_path):
    """gpu_backend = "nvml" cannot start here; the check runs its profiles over stand-in GPUs instead."""
    code = (
        "c.GPUDockerSpawner.gpu_backend = 'nvml'\n"
        "c.GPUDockerSpawner.profiles = [{'slug': 't4', 'gpu_model': 'T4', 'image': 'i', 'price_per_gpu_hour': '3.00'}]"
    )
    assert not problems_of(run_snippet(code, "<test>"), tmp_path)
    assert GPUDockerSpawner.gpu_backend.default_value == "nvml"


# -- defaults named in the prose ---------------------------------------------------------------------------------

_DEFAULT = re.compile(
    r"`(?:c\.)?(?:(?P<cls>\w+)\.)?(?P<name>\w+)`(?: \w+){0,2}\s*\((?:by )?default\s+`?(?P<value>[^),;`]+)`?"
)


def same_default(doc: str, code, name: str) -> bool:
    """``doc`` ("600", "10 minutes", "20%", "jupyterhub-gpu") says what the trait's value ``code`` is."""
    text = doc.strip().strip('"').rstrip("%")
    minutes = re.fullmatch(r"(\d+) minutes?", text)
    if minutes and not name.endswith("minutes"):
        return code == int(minutes.group(1)) * 60
    if isinstance(code, bool):
        return text == str(code)
    if isinstance(code, (int, float)):
        try:
            return float(text) == code
        except ValueError:
            return False
    return text == str(code)


def option_owners() -> dict[str, list]:
    """Each option's name, and the classes that have an option of that name."""
    owners: dict[str, list] = {}
    for cls in CLASSES.values():
        for name in cls.class_traits(config=True):
            owners.setdefault(name, []).append(cls)
    return owners


@pytest.mark.parametrize(
    ("doc", "code", "name", "same"),
    [
        ("10 minutes", 600, "reconcile_interval", True),
        ("30", 30, "advice_live_after_minutes", True),
        ("20%", 20, "advice_headroom_percent", True),
        ("1000:100", "1000:100", "container_user", True),
        ("5", 15, "save_grace_seconds", False),
        ("10 minutes", 300, "reconcile_interval", False),
    ],
)
def test_defaults_are_compared_in_the_prose_s_units(doc, code, name, same):
    assert same_default(doc, code, name) is same


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_default_the_prose_gives_is_the_code_s(page):
    """`reconcile_interval` (default 10 minutes) must be what the option's default is (a probe's value)."""
    owners = option_owners()
    text = prose(page)
    wrong = []
    for m in _DEFAULT.finditer(text):
        classes = [c for c in owners.get(m.group("name"), []) if not m.group("cls") or c.__name__ == m.group("cls")]
        for cls in classes:
            value = getattr(probe(cls, Config()), m.group("name"))
            if not same_default(m.group("value"), value, m.group("name")):
                line = text.count("\n", 0, m.start()) + 1
                wrong.append(f"{line}: {m.group(0)} but {cls.__name__}.{m.group('name')} defaults to {value!r}")
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


def table_defaults(page: Path) -> list[tuple[int, list[str], list[str]]]:
    """(line, option names, default values) of each row of a table whose columns are option | default | ..."""
    rows = []
    lines = prose(page).splitlines()
    for number, line in enumerate(lines, start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[:2] != ["option", "default"]:
            continue
        for offset, row in enumerate(lines[number + 1 :], start=number + 2):
            if not row.startswith("|"):
                break
            name_cell, value_cell = [c.strip() for c in row.strip().strip("|").split("|")][:2]
            names = re.findall(r"`(\w+)`", name_cell)
            values = (
                [v.strip().strip("`") for v in value_cell.split(",")] if len(names) > 1 else [value_cell.strip("`")]
            )
            rows.append((offset, names, values))
    return rows


def same_literal(doc: str, code) -> bool:
    literal = {'""': "", "[]": [], "{}": {}, "None": None}
    if doc in literal:
        return code == literal[doc] or (doc == "[]" and list(code) == [])
    return same_default(doc, code, "")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_default_in_an_options_table_is_the_code_s(page):
    owners = option_owners()
    wrong = []
    for line, names, values in table_defaults(page):
        if len(names) != len(values):
            wrong.append(f"{line}: {names} and {values} do not pair up")
            continue
        for name, doc in zip(names, values, strict=True):
            for cls in owners.get(name, []):
                value = getattr(probe(cls, Config()), name)
                if not same_literal(doc, value):
                    wrong.append(f"{line}: {name} is documented as {doc} but {cls.__name__} defaults to {value!r}")
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)
