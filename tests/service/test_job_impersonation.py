"""Jobs cannot be impersonated: job- names, the runner's reports, finished-run notices.

With a real hub and the real gpu service: tokens are minted by the hub with the
scopes JupyterHub gives a server's own token (``servers!server=USER/NAME``), so
the service sees them exactly as it sees a running server's token; jobs and
their sessions are recorded in the real ledger.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from jupyterhub_gpu.ledger.queries.jobs import active_jobs, create_job, get_job, update_job
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.jobs import JobRequest, run_message
from jupyterhub_gpu.service.hubapi import HubClient
from jupyterhub_gpu.service.tick import TickContext, announce_finished_runs, enforce_jobs
from jupyterhub_gpu.session import SessionStart
from tests.conftest import Hub, wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config, service_port

UTC = timezone.utc
CNY = Currency.from_config("CNY")

EXTRA = """
c.JupyterHub.allow_named_servers = True
c.JupyterHub.load_roles.append({"name": "gpu-jobs", "services": ["gpu"], "scopes": ["start:servers"]})
"""


class Env(ServiceUsers):
    path = "api/v1/"

    def post(self, token: str, path: str, body=None) -> requests.Response:
        return requests.post(self.url + path, json=body, headers={"Authorization": f"token {token}"}, timeout=30)

    def running_job(self, user: str, now: datetime, minutes: int = 10):
        """A job whose server runs: the job and its session in the ledger."""
        job = create_job(self.ledger, user, JobRequest("work/train.ipynb", "cpu", {}, minutes * 60), "cpu", now)
        start = SessionStart(f"s-{job.id}", user, job.server_name, ("cs231n",), "cpu", (), 10_000, "CNY", now)
        self.ledger.record_start(start)
        update_job(self.ledger, job.id, state="running", started=now, session_id=start.id)
        return get_job(self.ledger, job.id), start


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs-forged")
    config = gpu_hub_config(root) + EXTRA
    # the servers reach the service: their own token gets its access scope
    config += f'\nc.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:{service_port(config)}/services/gpu/"\n'
    hub = Hub(root / "hub", config)
    hub.start()
    try:
        hub.create_users("alice", "bob")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        yield Env(hub, Ledger(f"sqlite:///{root / 'ledger.sqlite'}"))
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


@pytest.mark.hub
def test_a_user_cannot_make_a_server_named_like_a_job(env):
    token = env.token("alice")
    job, _ = env.running_job("bob", datetime.now(UTC))
    for name, options in [
        ("job-0123456789ab", {"profile": "cpu"}),
        ("job-mine", {"profile": "cpu"}),
        # the job_id option only the service sets: a user naming another user's job gets nothing either
        (job.server_name, {"profile": "cpu", "job_id": job.id}),
    ]:
        r = requests.post(
            f"{env.hub.api_url}/users/alice/servers/{name}",
            json=options,
            headers={"Authorization": f"token {token}"},
            timeout=30,
        )
        assert r.status_code >= 400 and "reserved for notebook jobs" in r.json()["message"], (name, r.text)
        assert env.hub.server("alice", name) is None
    assert not [s for s in env.ledger.open_sessions() if s.user == "alice"]


@pytest.mark.hub
def test_only_the_jobs_own_server_may_report_it_started_or_finished(env):
    now = datetime.now(UTC)
    job, session = env.running_job("alice", now)
    body = {"session_id": session.id, "state": "succeeded", "error": None}
    forgers = {
        "another server of alice": env.server_token("alice", "other"),
        "alice's own token": env.token("alice"),
        "alice's default server": env.server_token("alice"),
    }
    for who, token in forgers.items():
        r = env.post(token, f"jobs/{job.id}/finished", body)
        assert r.status_code == 403 and "own server" in r.json()["message"], (who, r.text)
        assert env.post(token, f"jobs/{job.id}/started", {"session_id": session.id}).status_code == 403
        r = env.post(token, "stop-when-done", {"session_id": session.id})
        assert r.status_code == 403, (who, r.text)
    # the job still runs: it holds its max_concurrent_jobs slot and its time limit still applies
    assert get_job(env.ledger, job.id).state == "running"
    assert job.id in {j.id for j in active_jobs(env.ledger, "alice")}
    assert env.ledger.get_session(session.id).pending_stop_reason is None
    # bob, with a server of his own, gets nothing either
    assert env.post(env.server_token("bob", job.server_name), f"jobs/{job.id}/finished", body).status_code == 404
    # the job's own server may
    r = env.post(env.server_token("alice", job.server_name), f"jobs/{job.id}/finished", body)
    assert r.status_code == 200 and r.json()["state"] == "succeeded", r.text
    assert env.ledger.get_session(session.id).pending_stop_reason == "job_finished"


@pytest.mark.hub
def test_stop_when_done_only_from_the_sessions_own_server(env):
    start = SessionStart("swd-1", "alice", "lab", ("cs231n",), "cpu", (), 10_000, "CNY", datetime.now(UTC))
    env.ledger.record_start(start)
    assert env.post(env.server_token("alice", "other"), "stop-when-done", {"session_id": "swd-1"}).status_code == 403
    assert env.ledger.get_session("swd-1").pending_stop_reason is None
    r = env.post(env.server_token("alice", "lab"), "stop-when-done", {"session_id": "swd-1"})
    assert r.status_code == 200 and env.ledger.get_session("swd-1").pending_stop_reason == "stop_when_done"
    # a kernel's PlateauStop(stop_server=True): reason plateau; no other reason (a server cannot call itself culled)
    for bad in ("budget", "gpu_idle", ["plateau"], None):
        r = env.post(env.server_token("alice", "lab"), "stop-when-done", {"session_id": "swd-1", "reason": bad})
        assert r.status_code == 400 and "reason must be one of stop_when_done, plateau" in r.json()["message"], r.text
    assert (
        env.post(
            env.server_token("alice", "other"), "stop-when-done", {"session_id": "swd-1", "reason": "plateau"}
        ).status_code
        == 403
    )
    r = env.post(env.server_token("alice", "lab"), "stop-when-done", {"session_id": "swd-1", "reason": "plateau"})
    assert r.status_code == 200 and r.json()["stop_reason"] == "plateau", r.text
    assert env.ledger.get_session("swd-1").pending_stop_reason == "plateau"
    # the service's pass does not relabel the server's own stop under way (docs/admin.md, stop reasons) ...
    assert env.ledger.claim_stop_reason("swd-1", "gpu_idle") == "plateau"
    assert env.ledger.get_session("swd-1").pending_stop_reason == "plateau"
    # ... and once the service stops it for its own reason (a cull, a budget), the server's reports do not either
    env.ledger.record_start(
        SessionStart("swd-2", "alice", "lab", ("cs231n",), "cpu", (), 10_000, "CNY", datetime.now(UTC))
    )
    assert env.ledger.claim_stop_reason("swd-2", "gpu_idle") == "gpu_idle"
    for reason in ("plateau", "stop_when_done"):
        r = env.post(env.server_token("alice", "lab"), "stop-when-done", {"session_id": "swd-2", "reason": reason})
        assert r.status_code == 409 and "already stopping this session (gpu_idle)" in r.json()["message"], r.text
    assert env.ledger.get_session("swd-2").pending_stop_reason == "gpu_idle"


@pytest.mark.hub
def test_a_server_that_says_it_is_done_is_stopped_so_its_reason_cannot_be_pinned(env):
    """A kernel holds the server's own token: a "done" posted while the server goes on working would label its
    later budget stop or cull. The service takes the reason only with the stop, which it asks the hub for."""
    r = env.hub.start_server("alice", {"profile": "cpu"}, server_name="flagged")
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: (env.hub.server("alice", "flagged") or {}).get("ready"), 90, what="alice/flagged ready")
    (session,) = [s for s in env.ledger.open_sessions() if s.user == "alice" and s.server_name == "flagged"]
    token = env.running_server_token("alice", "flagged")
    assert token
    r = env.post(token, "stop-when-done", {"session_id": session.id})
    assert r.status_code == 200, r.text
    wait_for(lambda: env.ledger.get_session(session.id).stopped is not None, 60, what="the flagged server's stop")
    assert env.ledger.get_session(session.id).stop_reason == "stop_when_done"
    wait_for(lambda: not (env.hub.server("alice", "flagged") or {}).get("ready"), 30, what="alice/flagged gone")


# -- without a hub: the notices and the tick ----------------------------------------------------------


def test_a_run_notice_names_a_job_only_for_its_own_user(tmp_path):
    """bob names a server after alice's job and stops it when done: his notice shows nothing of her job."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    job = create_job(ledger, "alice", JobRequest("work/secret-thesis.ipynb", "cpu", {}, 600), "cpu", now)
    update_job(ledger, job.id, state="failed", finished=now, error="KeyError: 'api_key=hunter2'")
    ledger.record_start(SessionStart("bob-1", "bob", job.server_name, (), "cpu", (), 10_000, "CNY", now))
    ledger.claim_stop_reason("bob-1", "stop_when_done")
    ledger.record_stop("bob-1", now + timedelta(minutes=2), "stopped")
    told = []

    async def announce(session, found, channel):
        told.append((session.user, found, run_message(session, found, CNY)))

    assert asyncio.run(announce_finished_runs(TickContext(ledger=ledger), now + timedelta(minutes=3), announce)) == 1
    ((user, found, (subject, text)),) = told
    assert user == "bob" and found is None
    assert "secret-thesis" not in subject + text and "hunter2" not in text  # (the name is his own)


class HubPeer:
    """An HTTP server standing in for the hub's REST API: records each request, answers 204."""

    def __init__(self):
        self.requests = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_DELETE(self):
                length = int(self.headers.get("Content-Length") or 0)
                owner.requests.append(("DELETE", self.path, json.loads(self.rfile.read(length) or b"null")))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hub/api"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_job_reported_ended_whose_server_still_runs_is_stopped_by_the_tick(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    job = create_job(ledger, "alice", JobRequest("work/a.ipynb", "cpu", {}, 3600), "cpu", now)
    ledger.record_start(SessionStart("s-a", "alice", job.server_name, (), "cpu", (), 10_000, "CNY", now))
    # the runner reported the end (and so freed its slot and its time limit) but its server keeps running
    update_job(ledger, job.id, state="succeeded", started=now, finished=now + timedelta(minutes=1), session_id="s-a")
    hub = HubPeer()
    try:
        client = HubClient(hub.url, "token")
        soon = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=client), now + timedelta(minutes=1, seconds=30)))
        assert soon["ended_still_running"] == [] and hub.requests == []  # the runner is given its margin
        later = asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=client), now + timedelta(minutes=3)))
        assert later["ended_still_running"] == [job.id]
        assert hub.requests == [("DELETE", f"/hub/api/users/alice/servers/{job.server_name}", {"remove": True})]
        assert ledger.get_session("s-a").pending_stop_reason == "job_finished"
        ledger.record_stop("s-a", now + timedelta(minutes=3), "stopped")
        assert (
            asyncio.run(enforce_jobs(TickContext(ledger=ledger, hub=client), now + timedelta(minutes=4)))[
                "ended_still_running"
            ]
            == []
        )
    finally:
        hub.close()


@pytest.mark.hub
def test_a_jobs_server_is_not_restarted_on_a_bigger_profile(env):
    """Its restart would start ``job-<id>`` without its job: the job would fail and nothing would run again."""
    start = SessionStart(
        "job-s", "alice", "job-abc123", ("cs231n",), "t4", ("GPU-x",), 50_000, "CNY", datetime.now(UTC)
    )
    env.ledger.record_start(start)
    r = env.post(env.server_token("alice", "job-abc123"), "restart-bigger", {"session_id": "job-s", "profile": "a100"})
    assert r.status_code == 409 and "job's server is not restarted" in r.json()["message"], r.text
    assert env.ledger.get_session("job-s").stopped is None
