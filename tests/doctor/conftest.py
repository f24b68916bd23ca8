"""Running ``jupyterhub-gpu doctor`` as an admin does: the real command, on the reference configs and broken copies."""

from __future__ import annotations

import io
import json
import os
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from jupyterhub_gpu.cli import main
from tests.conftest import BIN, ROOT, free_port
from tests.service.conftest import smtp_server, webhook  # noqa: F401 (the real SMTP and webhook servers)

DEMO = ROOT / "config" / "demo_config.py"
REFERENCE = ROOT / "config" / "docker_host_config.py"


@dataclass
class Report:
    status: int
    results: list[dict]
    stdout: str
    stderr: str

    def of(self, check: str) -> list[dict]:
        return [r for r in self.results if r["check"] == check]

    def one(self, check: str, status: str) -> dict:
        found = [r for r in self.of(check) if r["status"] == status]
        assert len(found) == 1, f"{check}/{status} in {json.dumps(self.of(check), indent=1)}"
        return found[0]

    def statuses(self) -> set[str]:
        return {r["status"] for r in self.results}


class Doctor:
    """The demo config's ports and state moved into a test's own folder, and the doctor run on it."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.state = tmp_path / "state"
        self.env = dict(
            os.environ,
            PATH=f"{BIN}:{os.environ.get('PATH', '')}",
            JUPYTERHUB_GPU_DEMO_STATE=str(self.state),
            JUPYTERHUB_GPU_DEMO_URL=f"http://127.0.0.1:{free_port()}",
            JUPYTERHUB_GPU_DEMO_HUB_PORT=str(free_port()),
            JUPYTERHUB_GPU_DEMO_PROXY_API_PORT=str(free_port()),
            JUPYTERHUB_GPU_DEMO_SERVICE_PORT=str(free_port()),
        )

    @property
    def ledger(self) -> Path:
        return self.state / "jupyterhub_gpu.sqlite"

    def config(self, extra: str = "", base: Path = DEMO, name: str = "jupyterhub_config.py") -> Path:
        """A copy of a reference config with ``extra`` appended (a broken variant)."""
        path = self.tmp_path / name
        path.write_text(base.read_text() + "\n# -- the test's change --\n" + textwrap.dedent(extra))
        return path

    def service_config(self, text: str) -> Path:
        path = self.tmp_path / "gpu_service_config.py"
        path.write_text(textwrap.dedent(text))
        return path

    def run(self, config: Path, *args: str) -> Report:
        """The doctor in this process (JupyterHub imported once), with the test's environment and folder."""
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as patch:
            for name, value in self.env.items():
                if name.startswith("JUPYTERHUB_GPU_DEMO_"):
                    patch.setenv(name, value)
            patch.chdir(self.tmp_path)
            status = main(["doctor", "-f", str(config), "--json", "--timeout", "3", *args], out=out)
        return Report(status, json.loads(out.getvalue())["results"], out.getvalue(), "")

    def command(self, config: Path, *args: str) -> subprocess.CompletedProcess:
        """The ``jupyterhub-gpu`` command itself, in a process of its own, as an admin runs it."""
        command = [str(BIN / "jupyterhub-gpu"), "doctor", "-f", str(config), "--timeout", "3", *args]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, cwd=self.tmp_path, timeout=240)


@pytest.fixture
def doctor(tmp_path):
    return Doctor(tmp_path)
