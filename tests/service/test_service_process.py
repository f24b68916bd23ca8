"""The service as a process: configuration errors, listening, clean shutdown on SIGTERM and SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import free_port, wait_for


def run_service(tmp_path, *args, port=None):
    port = port or free_port()
    env = dict(
        os.environ,
        JUPYTERHUB_SERVICE_URL=f"http://127.0.0.1:{port}",
        JUPYTERHUB_SERVICE_PREFIX="/services/gpu/",
        JUPYTERHUB_API_URL="http://127.0.0.1:1/hub/api",  # no hub: the tick logs and carries on
        JUPYTERHUB_API_TOKEN="x",
        JUPYTERHUB_CLIENT_ID="service-gpu",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub_gpu.service", f"--db-url=sqlite:///{tmp_path / 'l.sqlite'}", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, port


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timezone=Mars/Olympus"], "timezone must be an IANA name"),
        (["--currency=12"], "three-letter ISO 4217 code"),
        (["--tick-interval=-5"], "tick_interval must be positive"),
        (["--GPUService.webhook_url=ftp://x"], "webhook_url"),
        (["--GPUService.smtp_host=mail.example.edu", "--GPUService.mail_from=nobody"], "mail_from"),
        (["--GPUService.alert_thresholds=[80, 120]"], "alert_thresholds must be whole percentages from 1 to 99"),
        (['--GPUService.notify_admin_urls=["tgram://bad"]'], "notify_admin_urls[0]: Apprise cannot use this URL"),
        (['--GPUService.notify_group_urls={"cs231n": ["nothing"]}'], "notify_group_urls['cs231n'][0]"),
        (['--GPUService.notify_admin_urls=[{"url": "json://h/x", "events": ["budget"]}]'], "'budget' is not an event"),
        (["--GPUService.notify_user_url_template=mailto://h?to=a@example.edu"], "must hold {username}"),
    ],
)
def test_bad_configuration_stops_the_service_with_a_message(tmp_path, args, message):
    proc, _ = run_service(tmp_path, *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert message in out
    assert "configuration error" in out and "Traceback" not in out, out


def test_config_file_is_read(tmp_path):
    (tmp_path / "gpu.py").write_text('c.GPUService.timezone = "Asia/Shanghai"\nc.GPUService.currency = "zzz1"\n')
    proc, _ = run_service(tmp_path, f"--config={tmp_path / 'gpu.py'}")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "'zzz1'" in out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_service_listens_and_shuts_down_cleanly(tmp_path, sig):
    proc, port = run_service(tmp_path, "--tick-interval=0.5")
    try:
        wait_for(
            lambda: _get(f"http://127.0.0.1:{port}/services/gpu/api/v1/me") in (403, 302),
            30,
            what="the service listening",
        )
        time.sleep(1)  # a few ticks against an unreachable hub must not kill it
        assert proc.poll() is None
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "shutting down" in out
    assert (tmp_path / "l.sqlite").exists()


def _get(url):
    try:
        return requests.get(url, allow_redirects=False, timeout=2).status_code
    except requests.RequestException:
        return None
