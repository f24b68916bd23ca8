"""The per-user startup script: run by a real jupyter server at start, as its user, killed at its time limit."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from jupyterhub_gpu.env import server_file_name
from jupyterhub_gpu.serverext.startup import StartupScript, run_startup_script
from tests.conftest import free_port, wait_for

BIN = Path(sys.executable).parent
TOKEN = "startup-test-token"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its reaper is dead too
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z" if Path(f"/proc/{pid}").exists() else False


def write_script(home: Path, body: str, mode: int = 0o700) -> Path:
    script = home / "work" / ".jupyterhub-gpu" / "startup.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(body)
    script.chmod(mode)
    return script


def test_the_server_runs_the_script_at_start_as_its_user_and_kills_it_at_the_limit(tmp_path):
    home = tmp_path / "home"
    work = home / "work"
    write_script(
        home,
        "echo started in $(pwd)\nid -u > uid.txt\nsleep 300 &\necho $! > child.pid\nwait\necho never printed\n",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTERHUB")}
    env.update(HOME=str(home), JUPYTERHUB_GPU_STARTUP_TIMEOUT="3", JUPYTERHUB_API_TOKEN="secret-token")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            [str(BIN / "jupyter"), "server", "--no-browser", "--allow-root", f"--port={port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={home}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=home,
        )  # fmt: skip
    try:

        def up():
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                return requests.get(f"{url}/api/status", headers={"Authorization": f"token {TOKEN}"}, timeout=2).ok
            except requests.RequestException:
                return False

        wait_for(up, 60, what="jupyter server")
        child = int(wait_for(lambda: (work / "child.pid").exists() and (work / "child.pid").read_text().strip(), 30))
        assert alive(child)  # the server answers while the script still runs
        log_file = work / ".jupyterhub-gpu" / "startup.log"
        text = wait_for(lambda: "startup script killed" in (t := log_file.read_text()) and t, 30, what="the kill")
        elapsed = time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(20)
    assert (work / "uid.txt").read_text().strip() == str(os.getuid())  # the server's own user
    assert f"started in {work}" in text and "never printed" not in text
    assert "(time limit 3 s)" in text and "killed at the time limit of 3 s" in text
    assert not alive(child)  # its children die with it
    assert elapsed < 60


def run(config: StartupScript) -> dict | None:
    return asyncio.run(run_startup_script(config))


def test_exit_codes_previous_log_token_left_out_and_refusals(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-token")
    monkeypatch.delenv("JUPYTERHUB_GPU_STARTUP_TIMEOUT", raising=False)
    log_file = tmp_path / "work" / ".jupyterhub-gpu" / "startup.log"
    config = StartupScript()
    assert config.timeout == 120
    assert run(config) is None and not log_file.exists()  # no script, nothing to do

    write_script(tmp_path, 'echo "token=[$JUPYTERHUB_API_TOKEN]"\nexit 3\n')
    result = run(config)
    assert result["status"] == "finished" and result["returncode"] == 3
    assert "token=[]" in log_file.read_text() and "finished with exit code 3" in log_file.read_text()

    script = write_script(tmp_path, "touch ran.txt\n", mode=0o722)
    result = run(config)
    assert result["status"] == "refused" and "others may write to" in result["error"]
    assert "chmod go-w" in log_file.read_text() and not (tmp_path / "work" / "ran.txt").exists()
    assert "exit code 3" in log_file.with_name("startup.log.1").read_text()  # the previous run's log is kept

    script.chmod(0o700)
    for bad in ("abc", "-5", "0", "inf"):
        monkeypatch.setenv("JUPYTERHUB_GPU_STARTUP_TIMEOUT", bad)
        result = run(StartupScript())
        assert result["status"] == "refused" and "time limit is not a positive number" in result["error"], bad
        assert not (tmp_path / "work" / "ran.txt").exists()

    monkeypatch.setenv("JUPYTERHUB_GPU_STARTUP_TIMEOUT", "30")
    assert run(StartupScript(enabled=False)) is None
    assert run(StartupScript())["status"] == "finished" and (tmp_path / "work" / "ran.txt").exists()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to hand the script to another user")
def test_a_script_someone_else_owns_is_not_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    script = write_script(tmp_path, "touch ran.txt\n")
    os.chown(script, 1000, 100)
    result = run(StartupScript())
    assert result["status"] == "refused" and "belongs to uid 1000" in result["error"]
    assert not (tmp_path / "work" / "ran.txt").exists()


def test_servers_of_one_user_starting_at_once_each_run_the_script_into_their_own_log(tmp_path, monkeypatch):
    """All of a user's servers share ~/work: two started together (a named server, a notebook job) both run the
    script; neither's log rotation takes the other's file away (that refused the second run)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("JUPYTERHUB_GPU_STARTUP_TIMEOUT", raising=False)
    write_script(tmp_path, "echo ran\n")
    logs = tmp_path / "work" / ".jupyterhub-gpu"
    for _ in range(2):  # the second round has logs to rotate, all at once
        monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "")

        async def together():
            names = ["", "exp", "job-7f3a", "job-7f3a/../x"]
            return await asyncio.gather(*(run_startup_script(StartupScript(), server_name=n) for n in names))

        results = asyncio.run(together())
        assert [r["status"] for r in results] == ["finished"] * 4, results
    assert sorted(p.name for p in logs.glob("startup*.log")) == sorted(
        ["startup.log", "startup-exp.log", "startup-job-7f3a.log", f"startup-{server_file_name('job-7f3a/../x')}.log"]
    )
    assert server_file_name("job-7f3a/../x").startswith("job-7f3a_.._x-")  # cleaned, and told apart by a hash
    assert (logs / "startup-exp.log.1").exists() and (logs / "startup.log.1").exists()
    assert "finished with exit code 0" in (logs / "startup-job-7f3a.log").read_text()
