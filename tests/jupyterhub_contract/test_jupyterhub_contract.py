"""JupyterHub's own Spawner contract: its spawner tests, with GPULocalSpawner under MockSpawner.

The tests come from the installed ``jupyterhub`` package: all of ``test_spawner.py`` and
``test_named_servers.py``, and the server, spawn, stop and progress tests of ``test_api.py`` (111 tests
with JupyterHub 6.1.1, less the one that ``gpu_contract_plugin.REPLACED`` replaces by our own case of the
same requests, since it assumes a pre-spawn hook that returns at once), and our own cases of the contract
next to them (``contract_cases.py``).
``gpu_contract_plugin.py`` puts our spawner under every mock spawner they use; they run in a pytest of
their own (``contract.ini``: their fixtures need module-scoped event loops). Every test must pass except
the deliberate differences, which are strict expected failures, each with its reason
(``gpu_contract_plugin.XFAIL``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent

MODULES = ["jupyterhub.tests.test_spawner", "jupyterhub.tests.test_named_servers", "jupyterhub.tests.test_api"]
#: ``-k`` matches module names too: every test of the first two modules, and these of test_api.py
SELECTION = "(spawn or stop or progress or server or start) and not service"
EXPECTED_TOTAL = 110
#: our own cases (contract_cases.py): stops while queued, start_timeout, the start/stop race, a stop at each await
CASES = 6
#: the deliberate differences (gpu_contract_plugin.XFAIL), as JUnit names them
EXPECTED_XFAIL = {
    "test_spawner_insert_api_token",
    "test_predefined_options_from_form[default]",
    "test_default_server",
    *(
        f"test_create_or_start_named_server[{p}]"
        for p in (
            "$p~c|a! ch@rs--%24p~c%7Ca%21%20ch@rs-True-True",
            "hash#?question--hash%23%3Fquestion-True-True",
            "trevor-None-trevor-False-False",
            "trevor-My name is Trevor-trevor-False-False",
            # pytest writes the non-ASCII characters of these parameters as escapes
            r"server1-e_\xea\u1eb9\xe8\xea\xe9\xf8\xdf\xe6\u1e63--server1-False-False",
            r"server-abcdef12-e_\xea\u1eb9\xe8\xea\xe9\xf8\xdf\xe6\u1e63--server-abcdef12-False-False",
        )
    ),
    "test_named_server_spawn_form",
    *(
        f"test_named_server_spawn_with_opts[{p}]"
        for p in (
            "energy=abc-expected0",
            "energy=abc&display_name=a+b-expected1",
            "energy=abc&opt-foo=bar-expected2",
            "energy=abc&opt-opt-foo=bar-expected3",
            "energy=abc&opt-energy=def&opt-opt-foo=bar-expected4",
            "opt-energy=abc&opt-display_name=a+b&opt-opt-foo=bar-expected5",
        )
    ),
    "test_spawn",
    "test_progress",
}

pytestmark = [pytest.mark.hub, pytest.mark.timeout(900)]


def run_contract(tmp_path: Path, stock: bool = False) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run the selection in its own pytest; returns the process and each test's outcome by name."""
    junit = tmp_path / "contract.xml"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env["JUPYTERHUB_GPU_CONTRACT_STOCK"] = "1" if stock else "0"
    env.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", "-c", str(HERE / "contract.ini"), "--rootdir", str(HERE), "-q"]
    command += ["-rfEX", "-p", "no:xdist", f"--junitxml={junit}", str(HERE / "contract_cases.py")]
    command += ["--pyargs", *MODULES, "-k", f"contract_cases or ({SELECTION})"]
    proc = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    outcomes = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
            skipped = case.find("skipped")
            if skipped is not None and skipped.get("type") == "pytest.xfail":
                outcome = "xfailed"
            else:
                outcome = kinds[0] if kinds else "passed"
            outcomes[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return proc, outcomes


def test_jupyterhub_spawner_tests_pass_with_gpu_local_spawner(tmp_path):
    proc, outcomes = run_contract(tmp_path)
    report = proc.stdout[-6000:] + proc.stderr[-2000:]
    bad = sorted(name for name, outcome in outcomes.items() if outcome not in ("passed", "xfailed"))
    assert not bad, f"JupyterHub's tests that fail with GPULocalSpawner: {bad}\n{report}"
    assert proc.returncode == 0, report
    ours = {name for name in outcomes if name.startswith("contract_cases::")}
    assert len(ours) == CASES, report
    assert len(outcomes) - len(ours) == EXPECTED_TOTAL, report
    xfailed = {name.split("::", 1)[1] for name, outcome in outcomes.items() if outcome == "xfailed"}
    assert xfailed == EXPECTED_XFAIL, report
