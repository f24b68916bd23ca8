"""Billing starts when the GPU is really held and ends when it is really let go.

Through the spawners' own code and a real sqlite ledger:

- Kubernetes: no cluster runs here, so the pods are the Pod JSON the API returns, in the pod reflector
  KubeSpawner reads (``RecordingKubeSpawner`` of tests/unit/spawners/kube/test_kube_spawner.py stands in for the API
  server's pod creation). A pod that waited unscheduled for a GPU is billed from its binding; one whose
  container ended while the hub was down, to the container's ``finishedAt``.
- Local processes (real ones): a server that ended while the hub was down is billed to its last pushed
  sample plus one push interval, never to the moment the hub came back; an exit time of an earlier
  server of the same spawner never closes a later session; a pidfd that reports an end while the
  server runs on bills nothing (the watch checks /proc, and a pid reused by another process is not it).

The clock moves by patching :func:`jupyterhub_gpu.clock.utcnow` where the spawners read it.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets.config import Config

from jupyterhub_gpu.clock import aware_utc as _aware
from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.queries.samples import record_sample
from jupyterhub_gpu.ledger.store import shared_ledger
from jupyterhub_gpu.rules.samples import parse_sample
from jupyterhub_gpu.spawners import budget as budget_module
from jupyterhub_gpu.spawners import launch as launch_module
from jupyterhub_gpu.spawners import local as local_module
from jupyterhub_gpu.spawners import queueing as queueing_module
from jupyterhub_gpu.spawners import records as records_module
from jupyterhub_gpu.spawners import stopping as stopping_module
from jupyterhub_gpu.spawners.kube import pods as kube_pods
from jupyterhub_gpu.spawners.kube import spawner as kube_module
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from tests.unit.spawners.kube.test_kube_spawner import (
    Cluster,
    RecordingKubeSpawner,
    kubeconfig,
    make_config,
    make_spawner,
    spawn,
)

__all__ = ["kubeconfig"]  # the autouse fixture of the Kubernetes tests: a client configuration that points nowhere

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


class Clock:
    """The spawners' clock, moved by the test."""

    def __init__(self, monkeypatch, now: datetime):
        self.now = now
        for module in (launch_module, queueing_module, stopping_module, budget_module, kube_module):
            monkeypatch.setattr(module, "utcnow", lambda: self.now, raising=False)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def running_pod(spawner, *, created, bound, finished=None) -> dict:
    """A Pod as the API returns it: created, unschedulable until ``bound``, then running (or terminated)."""
    state = {"terminated": {"exitCode": 0, "finishedAt": stamp(finished)}} if finished else {"running": {}}
    return {
        "metadata": {"name": spawner.pod_name, "namespace": spawner.namespace, "uid": "u-1"},
        "status": {
            "phase": "Succeeded" if finished else "Running",
            "podIP": "10.0.0.5",
            "startTime": stamp(bound + timedelta(seconds=2)),
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(bound)},
                {"type": "Ready", "status": "False" if finished else "True", "lastTransitionTime": stamp(bound)},
            ],
            "containerStatuses": [{"name": "notebook", "ready": not finished, "state": state}],
        },
        "spec": {"nodeName": "gpu-node-1"},
        "_created": stamp(created),
    }


class PodReflector(SimpleNamespace):
    """KubeSpawner's pod reflector as it looks once loaded: ``pods`` by ``namespace/name``."""

    def __init__(self):
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        super().__init__(pods={}, first_load_future=future)


class BindingKubeSpawner(RecordingKubeSpawner):
    """The API server's part: the pod waits unscheduled for ``wait``, then is bound and runs."""

    reflectors: dict = {}
    clock: Clock
    wait = timedelta(minutes=6, seconds=30)

    async def _start(self):
        result = await super()._start()
        created = self.clock.now
        self.clock.now = created + self.wait + timedelta(seconds=20)  # bound, image pulled, server up
        reflector = self.reflectors.setdefault(("pods", self.namespace), PodReflector())
        reflector.pods[f"{self.namespace}/{self.pod_name}"] = running_pod(
            self, created=created, bound=created + self.wait
        )
        return result


def test_pod_binding_and_termination_are_read_from_the_api_pod():
    pod_bound_at, pod_finished_at = kube_pods.pod_bound_at, kube_pods.pod_finished_at
    spawner = SimpleNamespace(pod_name="jupyter-ann", namespace="jhub")
    pod = running_pod(spawner, created=T0, bound=T0 + timedelta(minutes=3))
    assert pod_bound_at(pod) == T0 + timedelta(minutes=3)
    assert pod_finished_at(pod) is None
    # still waiting for a GPU: no binding yet
    pod["status"]["conditions"][0] = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "lastTransitionTime": stamp(T0),
    }
    assert pod_bound_at(pod) is None
    ended = running_pod(spawner, created=T0, bound=T0, finished=T0 + timedelta(minutes=9))
    assert pod_finished_at(ended) == T0 + timedelta(minutes=9)


async def test_kubernetes_bills_from_the_binding_not_the_unscheduled_wait(tmp_path, monkeypatch):
    clock = Clock(monkeypatch, T0)
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    BindingKubeSpawner.clock = clock
    BindingKubeSpawner.reflectors = {}
    spawner = make_spawner(make_config(Cluster(), ledger_db_url=ledger_url), cls=BindingKubeSpawner)
    await spawn(spawner, "t4")
    session_id = spawner.gpu_session["session_id"]
    record = shared_ledger(ledger_url).get_session(session_id)
    assert _aware(record.started) == T0 + BindingKubeSpawner.wait  # not T0: the wait for a GPU is free
    assert spawner.get_state()["gpu"]["started"] == isoformat(T0 + BindingKubeSpawner.wait)


async def test_a_pod_that_ended_while_the_hub_was_down_is_billed_to_its_container_end(tmp_path, monkeypatch):
    clock = Clock(monkeypatch, T0)
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    BindingKubeSpawner.clock = clock
    BindingKubeSpawner.reflectors = {}
    config = make_config(Cluster(), ledger_db_url=ledger_url)
    config.KubeSpawner.delete_stopped_pods = False  # deleting would need the API server
    spawner = make_spawner(config, cls=BindingKubeSpawner)
    await spawn(spawner, "t4")
    state = spawner.get_state()
    bound = T0 + BindingKubeSpawner.wait
    # the hub goes down; the server's container ends 9 minutes after the binding; the hub comes back later
    finished = bound + timedelta(minutes=9, seconds=10)
    BindingKubeSpawner.reflectors[("pods", spawner.namespace)].pods[f"{spawner.namespace}/{spawner.pod_name}"] = (
        running_pod(spawner, created=T0, bound=bound, finished=finished)
    )
    clock.now = T0 + timedelta(hours=2)
    restarted = make_spawner(config, cls=BindingKubeSpawner)
    restarted.load_state(state)
    assert await restarted.poll() == 0
    record = shared_ledger(ledger_url).get_session(state["gpu"]["session_id"])
    assert _aware(record.stopped) == finished
    assert record.minutes == 10  # 9 min 10 s, per started minute; not the two hours until the hub came back


SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def local_config(tmp_path, ledger_url) -> Config:
    c = Config()
    c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": 2, "memory_gb": 16}]
    c.GPULocalSpawner.profiles = [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True}
    ]
    c.GPULocalSpawner.ledger_db_url = ledger_url
    c.GPULocalSpawner.home_dir_template = f"{tmp_path}/homes/{{username}}"
    c.GPULocalSpawner.cmd = SLEEPER
    c.GPULocalSpawner.sample_push_interval = 30
    return c


def local_spawner(config, name="lou"):
    from jupyterhub.objects import Hub

    spawner = make_spawner(config, name=name, cls=GPULocalSpawner)
    spawner.hub = Hub(ip="127.0.0.1", port=8081, base_url="/hub/")
    spawner.user_options = {}
    return spawner


async def test_a_local_server_that_ended_while_the_hub_was_down_is_billed_to_its_last_sample(tmp_path, monkeypatch):
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    config = local_config(tmp_path, ledger_url)
    spawner = local_spawner(config)
    await spawner.run_pre_spawn_hook()
    await spawner.start()
    state = spawner.get_state()
    session = state["gpu"]
    started = datetime.fromisoformat(session["started"].replace("Z", "+00:00"))
    ledger = shared_ledger(ledger_url)
    # the server pushed samples for four minutes, then the hub went down (its watcher with it) and the server ended
    last = started + timedelta(minutes=4, seconds=5)
    body = {"session_id": session["session_id"], "sampled_until": isoformat(last), "samples": 5}
    record_sample(ledger, "lou", parse_sample(body))
    spawner._gpu_watched_pid = None  # the old hub's watcher thread died with it
    os.kill(spawner.pid, signal.SIGKILL)
    spawner.proc.wait(10)  # reaped (by init, with the hub gone)
    # the hub comes back an hour later and polls the server it has in its state
    Clock(monkeypatch, started + timedelta(hours=1))
    restarted = local_spawner(config)
    restarted.load_state(state)
    assert await restarted.poll() is not None
    record = ledger.get_session(session["session_id"])
    minute = last.replace(second=0, microsecond=0)
    assert _aware(record.stopped) == minute + timedelta(seconds=30)  # the last sample's minute + one push interval
    assert record.stop_reason == "exited"
    assert restarted.allocator.held_by(restarted._gpu_key) == []


async def test_an_earlier_servers_exit_time_never_closes_a_later_session(tmp_path, monkeypatch):
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = local_spawner(local_config(tmp_path, ledger_url), name="eve")
    await spawner.run_pre_spawn_hook()
    await spawner.start()
    first = spawner.gpu_session["session_id"]
    os.kill(spawner.pid, signal.SIGTERM)
    for _ in range(100):  # the watcher thread stamps the first server's exit
        if spawner._gpu_exited_at is not None:
            break
        await asyncio.sleep(0.05)
    stale = spawner._gpu_exited_at
    assert stale is not None
    assert await spawner.poll() is not None

    # the next server of the same spawner cannot be watched (pidfd_open fails: an old kernel, or it ended at once)
    def no_pidfd(pid):
        raise OSError("pidfd_open is not available")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    spawner.user_options = {}
    await spawner.run_pre_spawn_hook()
    await spawner.start()
    second = spawner.gpu_session["session_id"]
    assert second != first
    alive = datetime.now(timezone.utc)
    assert await spawner.poll() is None  # running: the last evidence that it is alive
    os.kill(spawner.pid, signal.SIGKILL)
    await asyncio.sleep(0.3)
    assert await spawner.poll() is not None
    record = shared_ledger(ledger_url).get_session(second)
    assert record.stopped is not None
    assert _aware(record.stopped) >= alive > stale  # never the earlier server's exit time
    assert _aware(record.stopped) > _aware(record.started)


class _SpuriousPoll:
    """A ``select.poll`` whose first wait returns at once, as a pidfd woken while its process runs."""

    woken = 0

    def __init__(self):
        self._real = _real_poll()

    def register(self, fd, mask):
        self._real.register(fd, mask)

    def poll(self, *timeout):
        if _SpuriousPoll.woken == 0:
            _SpuriousPoll.woken += 1
            return [(0, select.POLLIN)]
        return self._real.poll(*timeout)


_real_poll = select.poll


async def test_a_wake_of_the_exit_watch_while_the_server_runs_bills_nothing(tmp_path, monkeypatch):
    # fault injection at the kernel boundary: the pidfd reports an end that has not happened (CI billed a
    # running server 35 s early); the watch must check the process itself and bill only its real end
    monkeypatch.setattr(local_module.select, "poll", _SpuriousPoll)
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = local_spawner(local_config(tmp_path, ledger_url), name="wes")
    await spawner.run_pre_spawn_hook()
    await spawner.start()
    session = spawner.gpu_session["session_id"]
    for _ in range(40):
        if _SpuriousPoll.woken:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert _SpuriousPoll.woken == 1
    assert spawner._gpu_exited_at is None
    assert shared_ledger(ledger_url).get_session(session).stopped is None  # still running, still open
    assert await spawner.poll() is None
    killed = datetime.now(timezone.utc)
    os.kill(spawner.pid, signal.SIGKILL)
    for _ in range(100):
        if spawner._gpu_exited_at is not None:
            break
        await asyncio.sleep(0.05)
    assert spawner._gpu_exited_at is not None and spawner._gpu_exited_at >= killed
    await asyncio.sleep(0.2)
    record = shared_ledger(ledger_url).get_session(session)
    assert record.stop_reason == "exited" and _aware(record.stopped) >= killed


def test_an_ended_process_is_told_from_a_running_one_and_from_a_later_one_with_its_pid():
    proc = subprocess.Popen(SLEEPER)
    try:
        image = local_module._process_image(proc.pid)
        assert image is not None and image[0] in ("R", "S")
        assert not local_module._has_ended(proc.pid, image[1])
        assert local_module._has_ended(proc.pid, str(int(image[1]) + 1))  # the pid is another process's now
        proc.kill()
        assert local_module._wait_ended(proc.pid, 5, image[1])  # a zombie nobody reaped yet has ended
    finally:
        proc.kill()
        proc.wait()
    assert local_module._has_ended(proc.pid)


async def test_a_server_whose_stop_a_killed_hub_began_is_billed_to_no_earlier_than_that(tmp_path, monkeypatch):
    # CI: a DELETE began the stop, the hub was killed before it ended, the server ended while no hub ran,
    # and the restarted hub billed it to its last sample (the gpu service was down too: 35 s too early)
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    config = local_config(tmp_path, ledger_url)
    config.GPULocalSpawner.sample_push_interval = 1  # no sample pushed: the only evidence is the hub's own
    spawner = local_spawner(config, name="dee")
    await spawner.run_pre_spawn_hook()
    await spawner.start()
    state = spawner.get_state()
    sid = state["gpu"]["session_id"]
    ledger = shared_ledger(ledger_url)
    await asyncio.sleep(1.5)
    release = asyncio.Event()

    async def the_stop_never_ends(self, now=False):
        await release.wait()

    monkeypatch.setattr(SimpleLocalProcessSpawner, "stop", the_stop_never_ends)
    began = datetime.now(timezone.utc)
    stopping = asyncio.ensure_future(spawner.stop())
    for _ in range(100):
        if ledger.get_session(sid).last_seen is not None:
            break
        await asyncio.sleep(0.05)
    # the hub is killed here, its stop unfinished; the server ends a second later; a new hub process starts
    spawner._gpu_watched_pid = None  # the old hub's watcher died with it
    monkeypatch.setattr(records_module, "_PROCESS_STARTED", datetime.now(timezone.utc))
    os.kill(spawner.pid, signal.SIGKILL)
    spawner.proc.wait(10)
    await asyncio.sleep(1)
    restarted = local_spawner(config, name="dee")
    restarted.load_state(state)
    assert await restarted.poll() is not None
    record = ledger.get_session(sid)
    assert record.stop_reason == "stopped"  # the stop by hand the killed hub began, claimed as it began
    assert _aware(record.stopped) >= began  # the stop's beginning, not its start
    release.set()
    await stopping
