"""Notebook jobs with a real hub, real job servers (gpu-local) and the real gpu service.

One hub runs three jobs at once: a notebook of about 70 s that succeeds, one
that fails, and one over its time limit; then a cancelled one. Each job's
server stops at its end and the ledger bills it per started minute.
"""

from __future__ import annotations

import json
import time
from datetime import timezone
from pathlib import Path

import nbformat
import pytest
import requests

from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job, update_job
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain.jobs import JobError, JobRequest, parse_job_request, run_message
from jupyterhub_gpu.service.tick import TickContext, announce_finished_runs
from jupyterhub_gpu.session import SessionStart
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config

TICK = 10  # seconds; the service default is 30

EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.JupyterHub.allow_named_servers = True
c.JupyterHub.load_roles.append({"name": "gpu-jobs", "services": ["gpu"], "scopes": ["start:servers"]})
"""

SERVICE_EXTRA = """
c.GPUService.max_concurrent_jobs = 2
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


def write_notebook(path: Path, *cells: str, parameters: str | None = None) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if parameters is not None:
        cell = nbformat.v4.new_code_cell(parameters)
        cell.metadata["tags"] = ["parameters"]
        nb.cells.append(cell)
    nb.cells += [nbformat.v4.new_code_cell(c) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


class Client:
    def __init__(self, hub, name: str):
        r = hub.api("POST", f"/users/{name}/tokens", json={"note": "jobs test"})
        assert r.status_code == 201, r.text
        self.headers = {"Authorization": f"token {r.json()['token']}"}
        self.base = f"{hub.url}/services/gpu/api/v1"
        self.hub = hub

    def __call__(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{self.base}/{path}", headers=self.headers, timeout=60, **kwargs)


def outputs(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells])


@pytest.mark.hub
def test_jobs_run_unattended_stop_their_servers_and_are_billed(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=TICK, min_minutes=0)
    (tmp_path / "gpu_service_config.py").open("a").write(SERVICE_EXTRA)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("alice", "bob")
    homes = tmp_path / "homes"
    write_notebook(
        homes / "alice/work/train.ipynb",
        "import time\ntime.sleep(seconds)\nprint('slept', seconds)",
        "6 * 7",
        parameters="seconds = 1",
    )
    write_notebook(homes / "bob/work/bad.ipynb", "print('before the error')", "raise ValueError('bad data')", "1 + 1")
    write_notebook(homes / "bob/work/slow.ipynb", "import time\ntime.sleep(600)")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    alice, bob = Client(hub, "alice"), Client(hub, "bob")

    # bad input: a clear 400 and nothing created
    for body, word in [
        ({"notebook": "../alice/work/train.ipynb", "profile": "cpu"}, "'..'"),
        ({"notebook": "work/train.py", "profile": "cpu"}, ".ipynb"),
        ({"notebook": "work/train.ipynb", "profile": "nope"}, "Unknown profile"),
        ({"notebook": "work/train.ipynb", "profile": "cpu", "time_limit_minutes": -1}, "time_limit_minutes"),
        ({"notebook": "work/train.ipynb", "profile": "cpu", "parameters": [1]}, "parameters"),
        ({"notebook": "work/train.ipynb", "gpu": 1}, "Unknown field"),
    ]:
        r = alice("POST", "jobs", json=body)
        assert r.status_code == 400 and word in r.json()["message"], (body, r.text)
    assert alice("GET", "jobs").json()["jobs"] == []

    # three jobs at once: ~70 s that succeeds (alice), one that fails and one over its limit (bob)
    r = alice("POST", "jobs", json={"notebook": "work/train.ipynb", "profile": "t4", "parameters": {"seconds": 65}})
    assert r.status_code == 201, r.text
    long_job = r.json()
    r = bob("POST", "jobs", json={"notebook": "work/bad.ipynb", "profile": "cpu"})
    assert r.status_code == 201, r.text
    bad_job = r.json()
    r = bob("POST", "jobs", json={"notebook": "work/slow.ipynb", "profile": "cpu", "time_limit_minutes": 0.3})
    assert r.status_code == 201, r.text
    slow_job = r.json()
    # the per-user limit (2): a third job of bob's waits for one of these to end
    r = bob("POST", "jobs", json={"notebook": "work/bad.ipynb", "profile": "cpu"})
    assert r.status_code == 429 and "at most 2" in r.json()["message"]

    # nobody sees, cancels or reads another user's job
    assert bob("GET", f"jobs/{long_job['id']}").status_code == 404
    assert bob("POST", f"jobs/{long_job['id']}/cancel").status_code == 404
    assert [j["id"] for j in bob("GET", "jobs").json()["jobs"]] == [slow_job["id"], bad_job["id"]] or {
        j["id"] for j in bob("GET", "jobs").json()["jobs"]
    } == {slow_job["id"], bad_job["id"]}
    assert bob("GET", "jobs", params={"user": "alice"}).status_code == 403
    assert bob("GET", "jobs", params={"all": "true"}).status_code == 403
    wait_for(lambda: get_job(ledger, long_job["id"]).state == "running", 90, what="alice's job running")
    files = f"{hub.url}/user/alice/{long_job['server_name']}/api/contents/work/jobs/{long_job['id']}/train.ipynb"
    r = requests.get(files, headers=bob.headers, timeout=30, allow_redirects=False)
    assert r.status_code in (302, 403, 404), r.status_code
    assert r.status_code != 200

    # the failing job and the one over its time limit end, and their servers stop
    bad = wait_for(lambda: (j := get_job(ledger, bad_job["id"])).state not in ("starting", "running") and j, 90)
    assert bad.state == "failed" and "ValueError: bad data" in bad.error
    slow = wait_for(lambda: (j := get_job(ledger, slow_job["id"])).state not in ("starting", "running") and j, 120)
    assert slow.state == "timed_out"
    for job in (bad, slow):
        wait_for(lambda j=job: hub.server("bob", j.server_name) is None, 60, what=f"{job.id}'s server gone")
        session = wait_for(lambda j=job: (s := ledger.get_session(j.session_id)).stopped and s, 30)
        assert session.stop_reason == "job_finished" and session.minutes == 1
    bad_out = homes / "bob/work/jobs" / bad.id / "bad.ipynb"
    assert "before the error" in outputs(bad_out) and "bad data" in outputs(bad_out)
    assert "ValueError" in (homes / "bob/work/jobs" / bad.id / "job.log").read_text()

    # cancel: only one's own job; the server stops and the ledger says why
    r = bob("POST", "jobs", json={"notebook": "work/slow.ipynb", "profile": "cpu"})
    assert r.status_code == 201, r.text
    cancel = r.json()
    wait_for(lambda: get_job(ledger, cancel["id"]).state == "running", 90, what="the job to cancel running")
    assert alice("POST", f"jobs/{cancel['id']}/cancel").status_code == 404
    r = bob("POST", f"jobs/{cancel['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert bob("POST", f"jobs/{cancel['id']}/cancel").status_code == 409
    wait_for(lambda: hub.server("bob", cancel["server_name"]) is None, 60, what="the cancelled job's server gone")
    session = wait_for(lambda: (s := ledger.get_session(get_job(ledger, cancel["id"]).session_id)).stopped and s, 30)
    assert session.stop_reason == "job_cancelled"
    time.sleep(TICK + 1)
    assert get_job(ledger, cancel["id"]).state == "cancelled"

    # alice's job: the output notebook, the log, the stop within a tick of the end, 2 minutes billed
    done = wait_for(lambda: (j := get_job(ledger, long_job["id"])).state not in ("starting", "running") and j, 150)
    assert done.state == "succeeded", done.error
    session = wait_for(lambda: (s := ledger.get_session(done.session_id)).stopped and s, 30, what="billing ended")
    stopped = session.stopped.replace(tzinfo=timezone.utc)
    finished = done.finished.replace(tzinfo=timezone.utc)
    lag = (stopped - finished).total_seconds()
    print(f"job end to billing end: {lag:.1f} s")
    assert 0 <= lag <= TICK, (stopped, finished)
    assert session.stop_reason == "job_finished" and session.minutes == 2
    assert 60 < (stopped - session.started.replace(tzinfo=timezone.utc)).total_seconds() < 120
    out = homes / "alice/work/jobs" / done.id / "train.ipynb"
    text = outputs(out)
    assert "slept 65" in text and '"42"' in text
    nb = nbformat.read(out, as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    assert "end: succeeded" in (homes / "alice/work/jobs" / done.id / "job.log").read_text()
    wait_for(lambda: hub.server("alice", done.server_name) is None, 30, what="alice's job server gone")
    assert done.server_name not in hub.user("alice").get("servers", {})  # removed, not only stopped

    shown = alice("GET", f"jobs/{done.id}").json()
    assert shown["state"] == "succeeded" and shown["minutes_billed"] == 2 and shown["cost"] == "0.1"
    assert shown["output_notebook"] == f"work/jobs/{done.id}/train.ipynb"
    assert shown["output_url"].endswith(f"/user/alice/lab/tree/work/jobs/{done.id}/train.ipynb")
    assert 60 < shown["duration_seconds"] < 110
    # the user is told, with the cost
    notice = wait_for(lambda: [n for n in ledger.notices("alice") if n.kind == "run"], 30, what="the run notice")
    assert done.id in notice[0].message and "¥0.10" in notice[0].message


# -- without a hub: the request's checks, the notice, and "told once" -------------------------------


@pytest.mark.parametrize(
    "body, words",
    [
        ([], "JSON object"),
        ({}, "notebook is required"),
        ({"notebook": "/etc/passwd.ipynb"}, "relative"),
        ({"notebook": "~/x.ipynb"}, "relative"),
        ({"notebook": "work/../../x.ipynb"}, "'..'"),
        ({"notebook": "work//x.ipynb"}, "empty parts"),
        ({"notebook": "work/x.txt"}, ".ipynb"),
        ({"notebook": "x\nx.ipynb"}, "control character"),
        ({"notebook": "x.ipynb", "profile": 3}, "profile"),
        ({"notebook": "x.ipynb", "parameters": {"not a name": 1}}, "Python names"),
        ({"notebook": "x.ipynb", "parameters": {"x": "y" * 70000}}, "KiB"),
        ({"notebook": "x.ipynb", "time_limit_minutes": 0}, "from 1 to 60"),
        ({"notebook": "x.ipynb", "time_limit_minutes": 61}, "from 1 to 60"),
        ({"notebook": "x.ipynb", "time_limit_minutes": True}, "time_limit_minutes"),
        ({"notebook": "x.ipynb", "extra": 1}, "Unknown field"),
    ],
)
def test_bad_job_requests_are_refused_with_a_message(body, words):
    with pytest.raises(JobError) as e:
        parse_job_request(body, max_minutes=60, default_minutes=30)
    assert e.value.status == 400 and words in str(e.value)


def test_a_good_job_request():
    request = parse_job_request(
        {"notebook": " work/train.ipynb ", "profile": "t4", "parameters": {"epochs": 5}, "time_limit_minutes": 0.5},
        max_minutes=60,
        default_minutes=30,
    )
    assert request == JobRequest("work/train.ipynb", "t4", {"epochs": 5}, 30)
    assert parse_job_request({"notebook": "a.ipynb"}, 60, 30).time_limit_seconds == 1800


def test_a_finished_run_is_announced_once_per_channel_with_its_cost(tmp_path):
    import asyncio
    from datetime import datetime, timedelta

    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    now = datetime(2026, 11, 29, 20, 0, tzinfo=timezone.utc)
    job = create_job(ledger, "stu1", JobRequest("work/a.ipynb", "t4", {}, 600), "t4", now)
    start = SessionStart("s1", "stu1", job.server_name, (), "t4", ("GPU-1",), 50_000, "CNY", now)
    ledger.record_start(start)
    ledger.claim_stop_reason("s1", "job_finished")
    ledger.record_stop("s1", now + timedelta(seconds=70), "stopped")
    told = []

    async def announce(session, found, channel):
        told.append((session.id, found.id if found else None, channel))
        if channel == "email" and len(told) == 2:
            raise OSError("smtp down")  # released, and sent again next tick

    run = lambda: asyncio.run(  # noqa: E731
        announce_finished_runs(
            TickContext(ledger=ledger, alert_channels=("lab", "email")), now + timedelta(minutes=2), announce
        )
    )
    assert run() == 0  # the job is still "running": the runner's report comes first
    update_job(ledger, job.id, state="succeeded", finished=now + timedelta(seconds=69))
    assert run() == 1 and run() == 1 and run() == 0
    assert told == [("s1", job.id, "lab"), ("s1", job.id, "email"), ("s1", job.id, "email")]
    subject, text = run_message(ledger.get_session("s1"), get_job(ledger, job.id), Currency.from_config("CNY"))
    assert "finished" in subject and "2 minutes billed, CN¥0.10" in text and f"~/work/jobs/{job.id}/a.ipynb" in text
