"""The xdist groups hold: under ``-n`` with ``--dist loadgroup``, the k8s tests (sharing the test cluster's 4 GPUs,
each removing what it made) run in one worker, and so do the Docker and chaos tests.

A real pytest-xdist run in a subprocess over toy tests marked as ours are, grouped by the hook of
``tests/conftest.py``; each toy test writes down the worker that ran it. The hook once ran after xdist's own
(which reads the marks) and every group was spread over all the workers, silently: the k8s tests then deleted
each other's namespaces in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOY_CONFTEST = """
from tests.conftest import pytest_collection_modifyitems  # noqa: F401  (the hook under test, alone)


def pytest_configure(config):
    for mark in ("k8s", "docker", "chaos"):
        config.addinivalue_line("markers", mark)
"""

TOY_TESTS = """
import os
import time
from pathlib import Path

import pytest


def note(kind, i):
    time.sleep(0.2)  # long enough for the scheduler to spread what it may
    Path(os.environ["TOY_OUT"], f"{kind}-{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.k8s
@pytest.mark.parametrize("i", range(6))
def test_k8s(i):
    note("k8s", i)


@pytest.mark.docker
@pytest.mark.parametrize("i", range(4))
def test_docker(i):
    note("serial", i)


@pytest.mark.chaos
@pytest.mark.parametrize("i", range(2))
def test_chaos(i):
    note("serial", 10 + i)


@pytest.mark.parametrize("i", range(12))
def test_free(i):
    note("free", i)
"""


def test_each_group_runs_in_one_worker_and_the_rest_spreads(tmp_path):
    toy = tmp_path / "toy"
    toy.mkdir()
    (toy / "conftest.py").write_text(TOY_CONFTEST)
    (toy / "test_toy.py").write_text(TOY_TESTS)
    (toy / "pytest.ini").write_text("[pytest]\n")  # not the project's settings
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, TOY_OUT=str(out), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider",
         str(toy)],
        cwd=toy, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = {p.name: p.read_text() for p in out.iterdir()}
    assert len(ran) == 24
    workers = {kind: {w for name, w in ran.items() if name.startswith(kind)} for kind in ("k8s", "serial", "free")}
    assert len(workers["k8s"]) == 1, ran
    assert len(workers["serial"]) == 1, ran
    assert len(workers["free"]) > 1, ran  # the rest is spread: the run really had several workers
