"""A real JupyterHub with real single-user servers through ``gpu-local`` over simulated GPUs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.env import DEVICES, SESSION_ID, STARTED
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for

pytestmark = pytest.mark.hub

PROFILES = """
c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [
    {"model": "T4", "count": %(t4)d, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "a100", "display_name": "One A100", "gpu_model": "A100", "gpu_count": 1,
     "price_per_gpu_hour": "15.00"},
    {"slug": "t4x2", "display_name": "Two T4 for thesis", "gpu_model": "T4", "gpu_count": 2,
     "price_per_gpu_hour": "3.00", "allowed_groups": ["thesis"]},
    {"slug": "cpu", "display_name": "CPU only", "gpu_count": 0, "price_per_hour": "0.60"},
]
c.GPULocalSpawner.queue_timeout = %(queue_timeout)s
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.JupyterHub.load_groups = {"thesis": {"users": ["thea"]}}
c.JupyterHub.cleanup_servers = %(cleanup)s
"""


def config(tmp_path: Path, t4=4, queue_timeout=300, cleanup=True) -> str:
    return PROFILES % {"t4": t4, "queue_timeout": queue_timeout, "home": tmp_path / "homes", "cleanup": cleanup}


def page_of(session, url: str) -> str:
    r = session.get(url, timeout=30)
    assert r.status_code == 200, r.status_code
    return r.content.decode("utf-8")


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_form_shows_allowed_profiles_prices_and_free_counts(make_hub, tmp_path):
    hub = make_hub(config(tmp_path))
    hub.create_users("sam", "thea")
    page = page_of(hub.login("sam"), f"{hub.url}/hub/spawn/sam")
    assert "Simulated GPUs." in page
    assert "1× Simulated T4 16 GB — CN¥0.05/min — 4 of 4 free" in page
    assert "1× Simulated A100 40 GB — CN¥0.25/min — 1 of 1 free" in page
    assert "CN¥0.01/min" in page and page.count("CPU only") == 1  # the name once, not again in its line
    assert 'value="t4x2"' not in page  # sam is not in the thesis group

    thea_page = page_of(hub.login("thea"), f"{hub.url}/hub/spawn/thea")
    assert 'value="t4x2"' in thea_page
    assert "2× Simulated T4 16 GB — CN¥0.10/min — 4 of 4 free" in thea_page

    # a running A100 server shows in the counts
    assert hub.start_server("thea", {"profile": "a100"}).status_code in (201, 202)
    wait_for(lambda: hub.gpu_state("thea"), what="thea's assignment")
    page = page_of(hub.login("sam"), f"{hub.url}/hub/spawn/sam")
    assert "1× Simulated A100 40 GB — CN¥0.25/min — none free" in page


@pytest.mark.parametrize(
    "form, message",
    [
        ({"profile": "nope"}, "Unknown profile"),
        ({"profile": "t4x2"}, "reserved for other groups"),
        ({"profile": "t4", "image": "evil/image"}, "Unexpected form field(s): image"),
        ({"profile": ["t4", "a100"]}, "exactly one profile"),
        ({}, "Choose a profile"),
    ],
)
def test_bad_form_input_is_refused_and_starts_nothing(make_hub, tmp_path, form, message):
    hub = make_hub(config(tmp_path))
    hub.create_users("sam")
    session = hub.login("sam")
    r = session.post(f"{hub.url}/hub/spawn/sam", data={**form, "_xsrf": session.cookies.get("_xsrf", "")})
    assert message in r.content.decode()
    assert hub.server("sam") is None
    assert hub.api("GET", "/users/sam").json()["servers"] == {}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"profile": "nope"}, "Unknown profile"),
        ({"profile": "t4x2"}, "reserved for other groups"),
        ({"profile": "t4", "image": "evil/image"}, "Unexpected option(s): image"),
        ({"profile": 7}, "must be a profile name"),
    ],
)
def test_bad_api_options_get_400_and_start_nothing(make_hub, tmp_path, options, message):
    hub = make_hub(config(tmp_path))
    hub.create_users("sam")
    r = hub.start_server("sam", options)
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]
    wait_for(lambda: hub.server("sam") is None, 10, what="no server")


def test_server_environment_names_its_gpus_profile_rate_and_session(make_hub, tmp_path):
    hub = make_hub(config(tmp_path))
    hub.create_users("sam")
    assert hub.start_server("sam", {"profile": "t4"}).status_code in (201, 202)
    server = hub.wait_ready("sam")
    gpu = server["state"]["gpu"]
    assert gpu["profile"] == "t4" and len(gpu["devices"]) == 1 and gpu["simulated"] is True
    env = environ_of(server["state"]["pid"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpu["devices"][0]
    assert env["CUDA_VISIBLE_DEVICES"] == gpu["devices"][0]
    assert env["JUPYTERHUB_GPU_PROFILE"] == "t4"
    assert env["JUPYTERHUB_GPU_RATE_PER_MINUTE"] == "0.05"
    assert env["JUPYTERHUB_GPU_CURRENCY"] == "CNY"
    assert env["JUPYTERHUB_GPU_SESSION_ID"] == gpu["session_id"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", env["JUPYTERHUB_GPU_STARTED"])
    assert env["JUPYTERHUB_GPU_SIMULATED"] == "1"

    # CPU-only: no GPU visible
    hub.create_users("cora")
    hub.start_server("cora", {"profile": "cpu"})
    cora = hub.wait_ready("cora")
    env = environ_of(cora["state"]["pid"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert cora["state"]["gpu"]["devices"] == []


def test_ten_spawns_over_four_gpus_assign_four_and_queue_six_in_order(make_hub, tmp_path):
    hub = make_hub(config(tmp_path, t4=4))
    users = [f"u{i:02d}" for i in range(10)]
    hub.create_users(*users)
    for name in users:  # arrival order is the order of these requests
        assert hub.start_server(name, {"profile": "t4"}).status_code in (201, 202)

    running = users[:4]
    queued = users[4:]
    held = {name: hub.gpu_state(name).get("devices") for name in running}
    assert all(len(d) == 1 for d in held.values()), held
    assert len({d[0] for d in held.values()}) == 4  # four distinct GPUs
    for name in queued:
        assert hub.gpu_state(name) == {}
        assert hub.server(name)["pending"] == "spawn"

    # the spawn page's progress stream shows each queued user's place
    for position, name in enumerate(queued, start=1):
        expected = f"Waiting for a free Simulated T4 — position {position} of 6"
        events = hub.progress_events(name, lambda e, x=expected: e.get("message") == x)
        assert all("position" not in e.get("message", "") or "of" in e["message"] for e in events)
    # the allocator's own lines reach the hub's log, in its format
    line = r"\[I [^\]]* jupyterhub_gpu\.allocator queue:\d+\] u09/ waits for 1× T4 \(position 6\)"
    assert re.search(line, hub.log_text()), "the queue's line is not in the hub's log"

    # the queue drains in arrival order as servers stop
    holders = list(running)
    for name in queued:
        leaving = holders.pop(0)
        assert hub.stop_server(leaving).status_code in (202, 204)
        wait_for(lambda n=name: hub.gpu_state(n), 60, what=f"{name} assigned")
        holders.append(name)
        for later in queued[queued.index(name) + 1 :]:
            assert hub.gpu_state(later) == {}, f"{later} jumped the queue"
        assigned = [hub.gpu_state(n)["devices"][0] for n in holders]
        assert len(set(assigned)) == len(assigned) == 4, assigned
    for name in holders:
        hub.wait_ready(name)


def test_queue_timeout_fails_the_spawn_with_a_clear_message(make_hub, tmp_path):
    hub = make_hub(config(tmp_path, queue_timeout=3))
    hub.create_users("first", "second")
    hub.start_server("first", {"profile": "a100"})
    wait_for(lambda: hub.gpu_state("first"), what="first assigned")
    hub.start_server("second", {"profile": "a100"})
    events = hub.progress_events("second", lambda e: e.get("failed"), timeout=30)
    assert any(e.get("message") == "Waiting for a free Simulated A100 — position 1 of 1" for e in events)
    assert "No A100 became free within 3 seconds; nothing was started" in events[-1]["message"]
    wait_for(lambda: hub.server("second") is None, 10, what="second gone")
    assert hub.gpu_state("first")["devices"]


def test_hub_restart_keeps_servers_and_assignments(make_hub, tmp_path):
    hub = make_hub(config(tmp_path, t4=2, cleanup=False))
    hub.create_users("ann", "bob", "cat")
    hub.start_server("ann", {"profile": "t4"})
    hub.start_server("bob", {"profile": "a100"})
    ann = hub.wait_ready("ann")
    bob = hub.wait_ready("bob")
    before = {"ann": ann["state"]["gpu"]["devices"], "bob": bob["state"]["gpu"]["devices"]}

    assert hub.stop(signal.SIGTERM) == 0
    hub.start()
    assert hub.wait_ready("ann")["state"]["gpu"]["devices"] == before["ann"]
    assert hub.wait_ready("bob")["state"]["gpu"]["devices"] == before["bob"]
    assert "jupyterhub-gpu: the GPU configuration of GPULocalSpawner is valid" in hub.log_text()

    # the one A100 is still held: cat queues; the free T4 is not ann's
    hub.start_server("cat", {"profile": "a100"})
    events = hub.progress_events("cat", lambda e: "position" in e.get("message", ""))
    assert events[-1]["message"] == "Waiting for a free Simulated A100 — position 1 of 1"
    hub.stop_server("cat")
    hub.wait_stopped("cat")
    hub.start_server("cat", {"profile": "t4"})
    wait_for(lambda: hub.gpu_state("cat"), what="cat assigned")
    assert hub.gpu_state("cat")["devices"] != before["ann"]
    hub.wait_ready("cat")

    # a server launched by a spawn the hub was killed in the middle of (before it saved the spawner's
    # state): it runs with this hub's API URL and a session no server names
    ann_env = dict(
        item.split("=", 1)
        for item in open(f"/proc/{hub.wait_ready('ann')['state']['pid']}/environ").read().split("\0")
        if "=" in item
    )
    orphan = subprocess.Popen(
        ["sleep", "600"],
        env={"JUPYTERHUB_API_URL": ann_env["JUPYTERHUB_API_URL"], "JUPYTERHUB_GPU_SESSION_ID": "orphan-session"},
        start_new_session=True,
    )
    # another hub's server (another API URL) is none of this hub's business
    stranger = subprocess.Popen(
        ["sleep", "600"],
        env={"JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api", "JUPYTERHUB_GPU_SESSION_ID": "other-hub"},
        start_new_session=True,
    )
    try:
        # after a kill -9 of the hub too
        assert hub.stop(signal.SIGKILL) == -signal.SIGKILL
        hub.start()
        held = [hub.wait_ready(n)["state"]["gpu"]["devices"][0] for n in ("ann", "bob", "cat")]
        assert len(set(held)) == 3
        # the restarted hub stopped the orphan, and only it
        assert orphan.wait(timeout=30) == -signal.SIGTERM
        assert stranger.poll() is None
        assert f"stopping process {orphan.pid} of session orphan-session" in hub.log_text()
    finally:
        for p in (orphan, stranger):
            p.kill()
            p.wait()


ORPHAN = """
import signal, time
# a server that does not stop when asked: the hub's reaper must kill it and wait for it to end
signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(600)
"""


def test_the_gpu_of_an_orphan_is_given_out_only_once_it_ended_and_its_time_is_billed(make_hub, tmp_path):
    """A hub killed between launching a server and recording it: the restarted hub bills the orphan to its end.

    JupyterHub serves after ``init_spawners_timeout`` even while the spawners are still loading; a spawn
    that arrives meanwhile waits for GPUs until the orphan (which ignores SIGTERM: killed after 5 s) has
    ended, then gets its GPU.
    """
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    extra = f"\nc.GPULocalSpawner.ledger_db_url = {db_url!r}\nc.JupyterHub.init_spawners_timeout = 1\n"
    hub = make_hub(config(tmp_path, t4=2, cleanup=False) + extra)
    hub.create_users("ann", "bob", "cat")
    hub.start_server("ann", {"profile": "t4"})
    env = environ_of(hub.wait_ready("ann")["state"]["pid"])
    hub.start_server("cat", {"profile": "t4"})  # cat holds the other T4 throughout
    hub.wait_ready("cat")
    hub.stop_server("ann")
    hub.wait_stopped("ann")
    # ann's T4 is free in the hub's view; this process runs on it with a session no ledger row names
    started = utcnow() - timedelta(seconds=70)
    orphan_env = {**env, SESSION_ID: "orphan-0001", STARTED: isoformat(started)}
    orphan = subprocess.Popen([sys.executable, "-c", ORPHAN], env=orphan_env, start_new_session=True)
    ended: list = []
    watcher = threading.Thread(target=lambda: (orphan.wait(), ended.append(utcnow())), daemon=True)
    watcher.start()
    try:
        time.sleep(1)  # the orphan has set its SIGTERM handler
        assert hub.stop(signal.SIGKILL) == -signal.SIGKILL
        hub.start()
        asked = utcnow()

        def ready_or_gone():
            server = hub.server("bob")
            return "gone" if server is None else server if server.get("ready") else None

        for _ in range(10):
            # a spawn asked while JupyterHub still loads its spawners in the background can be ended by that
            # loading ("appears to have stopped while the Hub was down"): asked again, as a student would; while
            # the ended spawn still unwinds, the next is refused (409: "still being cancelled")
            code = hub.start_server("bob", {"profile": "t4"}).status_code
            if code == 409:
                time.sleep(1)
                continue
            assert code in (201, 202), code
            server = wait_for(ready_or_gone, 90, what="bob ready or gone")
            if server != "gone":
                break
        bob = server["state"]["gpu"]
        # one server of bob's, on its GPU: no earlier spawn of his (stopped by the hub's start-up check while
        # it waited for the restore) launched a second one beside it, on the same GPU, unbilled and unstopped
        time.sleep(2)
        api = environ_of(server["state"]["pid"])["JUPYTERHUB_API_URL"]  # this hub's (other tests have a bob too)
        bobs = [
            pid
            for pid, e in server_environments().items()
            if e.get("JUPYTERHUB_USER") == "bob" and e.get("JUPYTERHUB_API_URL") == api
        ]
        assert bobs == [server["state"]["pid"]], bobs
        watcher.join(30)
        assert ended, "the orphan was never stopped"
        assert bob["devices"] == [env[DEVICES]]  # the orphan's GPU, once it was free
        bob_started = datetime.fromisoformat(bob["started"].replace("Z", "+00:00"))
        assert bob_started >= ended[0] - timedelta(seconds=0.5), (bob_started, ended[0])
        log = hub.log_text().split("jupyterhub-gpu: the GPU configuration of GPULocalSpawner is valid")[-1]
        # the restarted hub stopped the orphan before it loaded its spawners (whose states say what it knows)
        assert "stopping process" in log and "of session orphan-0001" in log
        loaded = re.search(r"Initialized \d+ spawners", log)
        assert loaded and log.index("of session orphan-0001") < loaded.start()
        if asked < ended[0]:  # asked while the orphan ran: told why it waits
            assert "restoring its GPU assignments; your request waits for it" in log
        ledger = Ledger(db_url, migrate=False)
        try:
            row = ledger.get_session("orphan-0001")
            assert row is not None and row.stop_reason == "orphaned" and row.user == "ann"
            stopped = row.stopped.replace(tzinfo=timezone.utc)
            assert ended[0] - timedelta(seconds=1) <= stopped <= ended[0] + timedelta(seconds=1)
            assert row.minutes == billed_minutes(started, stopped) == 2
            assert row.cost_micros == 2 * 50_000  # ¥3.00 per GPU-hour: ¥0.05 a minute
            assert tuple(row.gpu_list) == (env[DEVICES],)
            assert [r.id for r in ledger.open_sessions() if r.user == "bob"] == [bob["session_id"]]
        finally:
            ledger.close()
    finally:
        orphan.kill()
        orphan.wait()
        for name in ("bob", "cat"):  # cleanup_servers is off in this hub: its servers would outlive it
            hub.stop_server(name)
        for name in ("bob", "cat"):
            wait_for(lambda name=name: hub.server(name) is None, 60, what=f"{name} stopped")


def server_environments() -> dict[int, dict[str, str]]:
    """The environments of this machine's single-user servers (by pid)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            raw = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        if b"jupyterhub-singleuser" in cmdline:
            found[int(entry.name)] = dict(
                i.decode(errors="replace").split("=", 1) for i in raw.split(b"\0") if b"=" in i
            )
    return found


def test_bad_profile_in_config_stops_hub_startup(make_hub, tmp_path):
    bad = config(tmp_path) + (
        "\nc.GPULocalSpawner.profiles.append("
        "{'slug': 'broken', 'gpu_model': 'T4', 'gpu_count': 1, 'price_per_gpu_hour': 0.5})\n"
    )
    hub = make_hub(bad, start=False)
    hub.start(wait=False)
    assert hub.proc.wait(60) == 1
    assert "profile 'broken': 'price_per_gpu_hour' must be a decimal string" in hub.log_text()


def test_idle_kernels_are_culled_inside_the_server(make_hub, tmp_path):
    import requests

    extra = "\nc.GPULocalSpawner.kernel_cull_idle_timeout = 3\nc.GPULocalSpawner.kernel_cull_interval = 1\n"
    hub = make_hub(config(tmp_path) + extra)
    hub.create_users("sam")
    hub.start_server("sam", {"profile": "t4"})
    hub.wait_ready("sam")
    token = hub.api("POST", "/users/sam/tokens", json={"note": "test"}).json()["token"]
    headers = {"Authorization": f"token {token}"}
    kernels = f"{hub.url}/user/sam/api/kernels"
    r = requests.post(kernels, headers=headers, json={"name": "python3"}, timeout=30)
    assert r.status_code == 201, r.text
    kernel_id = r.json()["id"]
    assert [k["id"] for k in requests.get(kernels, headers=headers, timeout=10).json()] == [kernel_id]
    wait_for(lambda: requests.get(kernels, headers=headers, timeout=10).json() == [], 60, what="kernel culled")
    assert hub.server("sam")["ready"]  # the server itself keeps running
