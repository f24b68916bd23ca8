"""The layout holds: imports point one way between the layers, with no circle and none hidden in a function.

Read from the source with :mod:`ast` (nothing is imported), so a new module is checked the moment it exists.
The layers, lowest first (docs/architecture.md draws them):

- the pure core: ``clock``, ``money``, ``billing``, ``session``, ``env``, ``lab``, ``i18n``, ``scheduler/``, ``gpus/``,
  ``rules/`` (idle, culling, advice, samples, moves: plain values in, decisions out): shared by every side;
- ``ledger/``: every table, the Ledger and its queries;
- ``spawners/`` (the hub side) and ``service/`` (domain <- feeds <- web, notify, hubapi, tick, app), which never
  import each other; ``service/domain`` (the service's decisions and words) reads no ledger: ``service/feeds``
  reads it for the rules, the tick and the web apply what they decide;
- ``serverext/`` (inside the user's server) and ``keras/``: the pure core only;
- ``sim/``: the pure core, so the simulator runs the very rules the service runs.

Besides the layers: no module over 600 lines (migrations aside), and no comment that cites an issue number.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu"
NAME = "jupyterhub_gpu"

CORE = ("clock", "money", "billing", "session", "env", "gpus", "lab", "i18n", "scheduler", "rules")

# Which layer a module may import from, by prefix (the module's own package is always allowed).
ALLOWED = {
    "gpus": CORE,
    "clock": CORE,
    "money": CORE,
    "billing": CORE,
    "session": CORE,
    "env": CORE,
    "lab": CORE,
    "i18n": CORE,
    "scheduler": CORE,
    "rules": CORE,  # the pure rules (idle, culling, advice, samples, moves): plain values in, decisions out
    "ledger": (*CORE, "ledger"),
    "spawners": (*CORE, "ledger", "spawners", "hubpages"),  # hubpages: installs the pages' language hook
    "hubpages": (*CORE, "hubpages"),  # hub side: JupyterHub's own pages in the reader's language
    "service.domain": (*CORE, "service.domain"),  # words and decisions of the service, from plain values
    "service.feeds": (*CORE, "ledger", "service.domain", "service.feeds"),  # reads the ledger for the rules
    "service.hubapi": (*CORE,),
    "service.channels": (*CORE, "ledger", "service.domain"),  # who may be sent what, where (alert channels)
    "service.notify": (*CORE, "ledger", "service.domain", "service.hubapi", "service.channels"),
    "service.tick": (*CORE, "ledger", "service.domain", "service.feeds", "service.notify", "service.hubapi"),
    "service.settings": (*CORE, "service.domain", "service.channels"),  # the service's options, by concern
    "service.web": (*CORE, "ledger", "service"),
    "service.app": (*CORE, "ledger", "service"),
    "service": (*CORE, "service.app"),  # service/__init__ and __main__
    "serverext": (*CORE, "serverext", "tensorboard"),
    "keras": (*CORE, "keras"),
    "tensorboard": CORE,
    "cli": (*CORE, "doctor.options"),  # the doctor's runner only when doctor runs (it loads the hub)
    "doctor": (*CORE, "ledger", "spawners", "service", "doctor"),  # at the top, like cli: reads every side
    "sim": (*CORE, "sim"),  # the simulator runs the rules themselves, never the service
}

# Imports that may stay inside a function: optional or heavy dependencies a module loads only when used.
LAZY_OK = (
    "tensorflow",
    "kubernetes",
    "kubernetes_asyncio",
    "kubespawner",
    "docker",
    "pynvml",
    "nbformat",
    "nbclient",
    "papermill",
)

# The hub side: nothing of it may be loaded inside a user's server.
HUB_SIDE = ("jupyterhub.app", "jupyterhub.spawner", "jupyterhub.orm", "jupyterhub.handlers", "jupyterhub.apihandlers")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. "service.web.api"
    target: str  # what it imports, absolute, e.g. "jupyterhub_gpu.ledger.store" or "tornado.web"
    line: int
    in_function: bool
    comment: str  # the source line and the three above it, for the reason of a lazy import


def module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def sources() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue  # frozen history, run by alembic only
        name, is_package = module_name(path)
        found[name] = (path, is_package)
    return found


MODULES = sources()


def imports_of(name: str) -> list[Import]:
    path, is_package = MODULES[name]
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(n) for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = [NAME, *name.split(".")] if name else [NAME]
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [origin]
            if origin == NAME or origin.startswith(NAME + "."):
                # "from jupyterhub_gpu.service import app" imports the module service.app
                submodule = [f"{origin}.{a.name}" for a in node.names]
                targets = [t if t[len(NAME) + 1 :] in MODULES else origin for t in submodule]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        comment = "\n".join(lines[max(node.lineno - 4, 0) : node.lineno])
        for target in dict.fromkeys(targets):
            found.append(Import(name, target, node.lineno, id(node) in inside, comment))
    return found


IMPORTS = {name: imports_of(name) for name in MODULES}


def own(target: str) -> str | None:
    """The package-relative module a target names, or None for a third-party import."""
    if target == NAME:
        return ""
    if target.startswith(NAME + "."):
        rest = target[len(NAME) + 1 :]
        while rest and rest not in MODULES:
            rest = rest.rpartition(".")[0]
        return rest
    return None


def layer_of(name: str) -> str:
    for prefix in sorted(ALLOWED, key=len, reverse=True):
        if name == prefix or name.startswith(prefix + "."):
            return prefix
    return ""


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_every_module_belongs_to_a_layer():
    orphans = [name for name in MODULES if name and not layer_of(name)]
    assert not orphans, f"modules in no layer of this test (add them to ALLOWED with their rule): {orphans}"


def test_imports_point_down_the_layers():
    wrong = []
    for name, found in IMPORTS.items():
        if not name:
            continue
        layer = layer_of(name)
        for imp in found:
            target = own(imp.target)
            if target is None or target == "" or within(target, (layer,)):
                continue
            if not within(target, ALLOWED[layer]):
                wrong.append(f"{name}:{imp.line} imports {target} (layer {layer!r} may import {ALLOWED[layer]})")
    assert not wrong, "\n".join(wrong)


def test_no_import_circle_between_modules():
    graph = {
        name: {own(i.target) for i in found if not i.in_function and own(i.target) not in (None, "", name)}
        for name, found in IMPORTS.items()
    }
    # a package's __init__ importing its own submodules is not a circle through that package
    circles = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles, circles


def test_no_import_inside_a_function_but_optional_heavy_dependencies():
    hidden = []
    for name, found in IMPORTS.items():
        for imp in found:
            if not imp.in_function:
                continue
            top = imp.target.split(".")[0]
            said = "optional heavy dependenc" in imp.comment.lower()
            if said and (top in LAZY_OK or own(imp.target) is not None):
                continue  # an own module named by such a comment is the one that pulls the heavy dependency
            hidden.append(f"{name}:{imp.line} imports {imp.target} inside a function")
    assert not hidden, "\n".join(hidden)


def test_the_server_extension_imports_nothing_of_the_hub_side():
    wrong = [
        f"{name}:{imp.line} {imp.target}"
        for name, found in IMPORTS.items()
        if within(name, ("serverext", "keras", "tensorboard", *CORE))
        for imp in found
        if within(imp.target, HUB_SIDE) or imp.target == "jupyterhub" or within(imp.target, ("jupyterhub",))
    ]
    assert not wrong, wrong


def code_lines(path: Path):
    """(number, line) of a module's code, without comments and docstrings."""
    text = path.read_text()
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    for number, line in enumerate(text.splitlines(), 1):
        if number in docstrings:
            continue
        code = line.split("#", 1)[0]
        if code.strip():
            yield number, code


# a hub API address or path spelled out, or a raw request on the hub client (whose methods name the paths)
HUB_URL = re.compile(r"""["'/]hub/api\b|hub_api_url|JUPYTERHUB_API_URL|["']/(users|groups|proxy)\b|\bhub\.request\(""")


@pytest.mark.parametrize(
    "place",
    [
        # the one hub client of the service, and the hub-side spawners that are given the hub's URL by JupyterHub
        "service.hubapi",
    ],
)
def test_hub_urls_are_built_only_in_the_hub_client(place):
    assert place in MODULES
    built = [
        f"{name}:{number}: {line.strip()}"
        for name, (path, _) in MODULES.items()
        if within(name, ("service",)) and name != place
        for number, line in code_lines(path)
        if HUB_URL.search(line)
    ]
    assert not built, "\n".join(built)


DELIVERY = re.compile(r"\badd_notice\(|\bsmtplib\b|\baiosmtplib\b|\bSMTP\(|AsyncHTTPClient\(|\bfetch\(.*webhook")


def test_notices_mail_and_webhooks_go_out_only_through_the_gateway():
    assert "service.notify" in MODULES
    sent = [
        f"{name}:{number}: {line.strip()}"
        for name, (path, _) in MODULES.items()
        if within(name, ("service",)) and name not in ("service.notify", "service.hubapi")
        for number, line in code_lines(path)
        if DELIVERY.search(line)
    ]
    assert not sent, "\n".join(sent)


def test_the_unit_tests_mirror_the_package():
    """tests/unit/<folder>/ holds the tests of jupyterhub_gpu/<folder>/; the pure core's tests sit at the top."""
    unit = Path(__file__).resolve().parent
    folders = [p for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    strays = [str(p.relative_to(unit)) for p in folders if not (PACKAGE / p.relative_to(unit)).is_dir()]
    assert folders and not strays, f"folders of tests/unit with no package folder of the same path: {strays}"


#: The most lines a module may have (migrations aside): a room a reader can hold in mind.
MAX_LINES = 600


def test_no_module_is_over_600_lines():
    big = {
        name or NAME: n for name, (path, _) in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines (split them by concern): {big}"


#: A reference to an issue or a numbered invariant: the issues are not in the repository, so a comment that
#: cites one points nowhere. A comment gives the reason, or the docs page that has it.
CITES_AN_ISSUE = re.compile(r"\b(?:issue|invariant)s? #?\d+", re.IGNORECASE)
ROOT = PACKAGE.parent


def test_no_comment_cites_an_issue_number():
    places = [
        *PACKAGE.rglob("*.py"),
        *(ROOT / "tests").rglob("*.py"),
        *(ROOT / "labextension" / "src").rglob("*.ts"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "config").rglob("*.py"),
    ]
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}"
        for path in places
        if "migrations" not in path.parts and path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CITES_AN_ISSUE.search(line)
    ]
    assert not cited, "\n".join(cited)


def test_the_rules_core_and_the_domain_read_no_ledger():
    """The rules decide from plain values; the tick and the web read the ledger and apply the decisions."""
    wrong = [
        f"{name}:{imp.line} imports {own(imp.target)}"
        for name, found in IMPORTS.items()
        if within(name, ("rules", "service.domain", "sim"))
        for imp in found
        if own(imp.target) is not None
        and within(own(imp.target), ("ledger", "service.web", "service.tick", "spawners"))
    ]
    assert not wrong, "\n".join(wrong)


def test_a_main_module_runs_only_as_a_program():
    """Importing any module runs nothing (the image's check imports every one): a ``__main__`` runs its command
    only under ``if __name__ == "__main__"``."""
    running = []
    for name, (path, _) in MODULES.items():
        if not name.endswith("__main__"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                running.append(f"{name}:{node.lineno}")
    assert any(n.endswith("__main__") for n in MODULES) and not running, running
