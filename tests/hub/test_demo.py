"""The embedded demo's own config (what `make demo` runs) starts and serves the simulated profiles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT, free_port, wait_for

pytestmark = pytest.mark.hub
BIN = Path(sys.executable).parent


def test_demo_config_serves_the_simulated_profiles_and_the_service(tmp_path):
    port = free_port()
    env = dict(
        os.environ,
        PATH=f"{BIN}:{os.environ.get('PATH', '')}",
        JUPYTERHUB_GPU_DEMO_STATE=str(tmp_path / "state"),
        JUPYTERHUB_GPU_DEMO_URL=f"http://127.0.0.1:{port}",
        JUPYTERHUB_GPU_DEMO_HUB_PORT=str(free_port()),
        JUPYTERHUB_GPU_DEMO_PROXY_API_PORT=str(free_port()),
        JUPYTERHUB_GPU_DEMO_SERVICE_PORT=str(free_port()),
    )
    log = open(tmp_path / "demo.log", "wb")
    hub = subprocess.Popen(
        [str(BIN / "jupyterhub"), "-f", str(ROOT / "config" / "demo_config.py")],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def up():
            assert hub.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            try:
                return requests.get(f"{base}/hub/login", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, 60, what="the demo hub")
        s = requests.Session()
        s.get(f"{base}/hub/login", timeout=10)
        r = s.post(
            f"{base}/hub/login",
            data={"username": "alice", "password": "demo", "_xsrf": s.cookies.get("_xsrf", "")},
            timeout=10,
        )
        assert r.status_code == 200
        form = s.get(f"{base}/hub/spawn", timeout=10).content.decode()
        assert "Simulated GPUs." in form
        # each profile's name once: the line under a name that says the GPUs has the rest only
        assert "16 GB — CN¥0.05/min — 2 of 2 free" in form
        assert "40 GB — CN¥0.25/min — 1 of 1 free" in form
        assert "16 GB — CN¥0.10/min" in form and 'value="t4x2"' in form  # alice is in the thesis group
        assert "CN¥0.01/min" in form and "CPU only — CN¥0.01/min" not in form
        me = wait_for(
            lambda: (r := s.get(f"{base}/services/gpu/api/v1/me", timeout=10)).status_code == 200 and r.json(),
            60,
            what="the gpu service",
        )
        assert me["user"] == "alice" and me["currency"] == "CNY"
    finally:
        os.killpg(hub.pid, signal.SIGTERM)  # Ctrl-C's equivalent: the hub stops its proxy and service
        hub.wait(30)
        log.close()
    assert hub.returncode == 0
