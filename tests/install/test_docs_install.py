"""The install commands of README.md and docs/admin.md work, run exactly as written.

jupyterhub-gpu has no PyPI release: ``pip install jupyterhub-gpu`` finds nothing. The docs install
from a clone: the block after the line ``<!-- install-from-source: ... -->`` clones the repository, builds the
wheel (with the Lab extension: Node.js, jlpm from the build's own jupyter-builder, Yarn's global cache) and
installs it. This test takes that block from both documents (they must say the same), and runs it with bash in
a fresh venv (the "JupyterHub environment": its ``python3`` first on PATH) and an empty directory, with
``JUPYTERHUB_GPU_REPO`` pointing at this checkout: ``git clone`` gets its committed HEAD, as a user gets the
repository. Then the venv's ``jupyterhub-gpu --version`` and ``--help`` run, and the package, its spawners and
its backends import from the venv. 45 s to 2½ minutes here (2 cores) with pip's and Yarn's caches warm.

No command of any fenced block of the docs may install jupyterhub-gpu from a package index again.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.install, pytest.mark.xdist_group("install")]

DOCS = [ROOT / "README.md", ROOT / "docs/admin.md"]
MARKER = re.compile(r"^<!-- install-from-source:.*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
# `pip install jupyterhub-gpu`, `pip3 install -U jupyterhub_gpu[kubernetes]`, `pip install jupyterhub-gpu==0.1`
FROM_INDEX = re.compile(
    r"\bpip3?\s+install\b(?:\s+-\S+)*\s+['\"]?jupyterhub[-_]gpu(?:\[[^\]]*\])?(?:[=<>~!]=?\S*)?['\"]?(\s|$)"
)


def fenced_blocks(path: Path) -> list[tuple[int, list[str], bool]]:
    """Each fenced block of a Markdown file: (line number of its fence, its lines, whether the marker precedes it)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            start, body = i, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            marked = start > 0 and bool(MARKER.match(lines[start - 1]))
            blocks.append((start + 1, body, marked))
        i += 1
    return blocks


def install_block(path: Path) -> list[str]:
    marked = [(line, body) for line, body, is_marked in fenced_blocks(path) if is_marked]
    assert len(marked) == 1, f"{path.name}: expected one fenced block after an '<!-- install-from-source: -->' line"
    return marked[0][1]


def test_no_doc_installs_jupyterhub_gpu_from_an_index():
    for docs in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line, body, _ in fenced_blocks(docs):
            for offset, command in enumerate(body, start=1):
                assert not FROM_INDEX.search(command.split("#")[0]), (
                    f"{docs.relative_to(ROOT)}:{line + offset}: {command.strip()!r} installs jupyterhub-gpu from a "
                    "package index, where it is not published; install the wheel built from the repository"
                )


def test_the_check_catches_an_install_from_the_index():
    for bad in ("pip install jupyterhub-gpu", "python3 -m pip install -U jupyterhub_gpu[kubernetes]",
                "pip3 install 'jupyterhub-gpu==0.1.0'", "pip install jupyterhub-gpu  # the hub side"):  # fmt: skip
        assert FROM_INDEX.search(bad.split("#")[0]), bad
    for good in ("python3 -m pip install dist/jupyterhub_gpu-*.whl", "pip install ./jupyterhub-gpu",
                 "pip install jupyterhub-gpu-extras-doc"):  # fmt: skip
        assert not FROM_INDEX.search(good), good


def test_the_docs_install_commands_build_and_install_a_working_package(tmp_path):
    blocks = {path.name: install_block(path) for path in DOCS}
    assert blocks["README.md"] == blocks["admin.md"], "README.md and docs/admin.md show different install commands"
    commands = blocks["README.md"]
    assert any(c.startswith("git clone ") for c in commands), commands
    assert shutil.which("node"), "building the wheel's Lab extension needs Node.js (>= 20.19) on PATH"

    venv, work = tmp_path / "hub-env", tmp_path / "work"
    work.mkdir()
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON", "JUPYTER", "CONDA"))}
    # the JupyterHub environment's python3 first, then the system's (git, node); not the test venv's
    system = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != Path(sys.executable).parent]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *system])
    env["JUPYTERHUB_GPU_REPO"] = str(ROOT)  # stands in for the repository's URL: its committed HEAD is cloned
    script = "set -euo pipefail\n" + "\n".join(commands) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"the docs' install commands failed ({proc.returncode}):\n{script}\n" + (proc.stdout + proc.stderr)[-6000:]
    )

    def venv_run(*argv: str) -> str:
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout}{r.stderr}"
        return r.stdout + r.stderr

    version = venv_run(str(venv / "bin/jupyterhub-gpu"), "--version")
    assert re.fullmatch(r"jupyterhub-gpu \d+\.\d+\.\d+\S*\s*", version), version
    assert "usage: jupyterhub-gpu" in venv_run(str(venv / "bin/jupyterhub-gpu"), "--help")
    where = venv_run(
        str(venv / "bin/python"),
        "-c",
        "import jupyterhub_gpu, jupyterhub_gpu.spawners.docker.spawner, jupyterhub_gpu.spawners.local,"
        " jupyterhub_gpu.gpus.nvml, jupyterhub_gpu.serverext, pynvml, apprise, dockerspawner;"
        " print(jupyterhub_gpu.__file__)",
    ).strip()
    assert Path(where).is_relative_to(venv), f"jupyterhub_gpu imported from {where}, not the venv's install"
    # the wheel carries the built Lab extension
    assert (venv / "share/jupyter/labextensions/jupyterhub-gpu/package.json").is_file()
