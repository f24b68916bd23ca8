"""The preemptible tier through Kueue, on the test cluster: Kueue preempts, the hub bills, tells and resumes.

A real hub (GPUKubeSpawner in Kueue mode), the real gpu service and Kueue v0.17 beside the test cluster's
control plane. The test's ClusterQueue has one GPU of quota and preempts within itself by priority; the
preemptible profile's pods carry a low WorkloadPriorityClass, the standard one's a high one (each made for
the test, deleted after). alice's preemptible server runs a kernel that notes the signals
``CheckpointAndResume`` answers (SIGINT, SIGTERM, SIGHUP) in her volume. bob asks for the standard profile:
Kueue evicts alice's pod (its ``TerminationTarget`` condition, then its deletion); her kernel gets the signal,
she is told as of a preemption, her bill ends at the eviction's time, bob's pod is admitted and starts, and
alice's server, which asked for it, is put back in the queue (a new spawn that waits in Kueue) and starts when
bob stops.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler.texts import KueueWhy
from jupyterhub_gpu.spawners.kube.eviction import event_eviction
from jupyterhub_gpu.spawners.kube.pods import kube_time
from tests.conftest import wait_for
from tests.k8s.conftest import wait_pod
from tests.service.test_plateau_hub import run_cell
from tests.service.test_preemption_hub import kernel_of

pytestmark = pytest.mark.k8s

API = "/apis/kueue.x-k8s.io/v1beta2"

#: the signals CheckpointAndResume saves on (its default ``signals``), each noted in the user's volume
SIGNALS = """
import os, signal, time
path = os.path.expanduser("~/work/signals.txt")
def note(number, frame):
    with open(path, "a") as f:
        print(signal.Signals(number).name, flush=True, file=f)
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), note)
open(os.path.expanduser("~/work/listening"), "w").close()
while True:
    time.sleep(0.1)
"""


@pytest.fixture
def kueue_objects(kube):
    """Unique names of the test's cluster-wide Kueue objects; each one made is deleted after."""
    tag = uuid.uuid4().hex[:6]
    names = {
        "flavor": f"jhgpu-t-{tag}-t4",
        "cq": f"jhgpu-t-{tag}",
        "low": f"jhgpu-t-{tag}-low",
        "high": f"jhgpu-t-{tag}-high",
    }
    yield names
    # deleted at once; Kueue's finalizers keep each until the namespace's workloads are gone (its teardown)
    kube.request("DELETE", f"{API}/clusterqueues/{names['cq']}")
    kube.request("DELETE", f"{API}/resourceflavors/{names['flavor']}")
    for wpc in ("low", "high"):
        kube.request("DELETE", f"{API}/workloadpriorityclasses/{names[wpc]}")


def make_queue(kube, namespace: str, names: dict) -> None:
    """One GPU of quota, preemption within the ClusterQueue by priority, a LocalQueue, two priority classes."""
    kube.create(
        f"{API}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": names["flavor"]}},
    )
    kube.create(
        f"{API}/clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": names["cq"]},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": names["flavor"],
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "16"},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "1"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    kube.create(
        f"{API}/namespaces/{namespace}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "notebooks", "namespace": namespace},
            "spec": {"clusterQueue": names["cq"]},
        },
    )
    for wpc, value in (("low", 10), ("high", 1000)):
        kube.create(
            f"{API}/workloadpriorityclasses",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": names[wpc]},
                "value": value,
            },
        )

    def active():
        cq = kube.get(f"{API}/clusterqueues/{names['cq']}")
        return any(c["type"] == "Active" and c["status"] == "True" for c in cq.get("status", {}).get("conditions", []))

    wait_for(active, timeout=60, what="Kueue's controller to make the test's ClusterQueue active")


def volume_of(kube, namespace: str, user: str) -> Path:
    """The host directory of the user's volume (the test cluster's hostPath PersistentVolumes)."""
    claims = kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")["items"]
    (claim,) = [c for c in claims if user in c["metadata"]["name"] and c["spec"].get("volumeName")]
    volume = kube.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    return Path(volume["spec"]["hostPath"]["path"])


def test_kueue_preempts_a_preemptible_session_which_is_told_billed_to_the_eviction_and_resumed(
    kube, namespace, kube_hub, kueue_objects
):
    names = kueue_objects
    make_queue(kube, namespace, names)
    hub = kube_hub(
        extra=f"""
c.GPUKubeSpawner.kueue = {{"default": "notebooks"}}
c.GPUKubeSpawner.kueue_priority_class = {names["high"]!r}
c.GPUKubeSpawner.kueue_preemptible_priority_class = {names["low"]!r}
c.GPUKubeSpawner.profiles = c.GPUKubeSpawner.profiles + [
    {{"slug": "t4-pre", "gpu_model": "T4", "gpu_count": 1, "image": c.GPUKubeSpawner.profiles[0]["image"],
      "price_per_gpu_hour": "3.00", "mem_limit": "1G", "preemptible": True, "price_factor": "0.4"}},
]
"""
    )
    hub.create_users("alice", "bob")
    ledger = Ledger(f"sqlite:///{hub.ledger_path}")

    hub.start_server("alice", {"profile": "t4-pre", "resume": True})
    first = hub.wait_ready("alice", timeout=240)["state"]["gpu"]
    assert first["tier"] == "preemptible" and first["resume"] is True
    pod = kube.pod(namespace, "jupyter-alice")
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == names["low"]
    home = volume_of(kube, namespace, "alice")
    base, token, kernel = kernel_of(hub, "alice")
    asyncio.run(run_cell(base, token, kernel, SIGNALS))
    wait_for(lambda: (home / "listening").exists(), 60, what="alice's kernel to listen for the signals")

    # bob's standard server: a higher priority in the same ClusterQueue, whose one GPU alice holds
    hub.start_server("bob", {"profile": "t4"})
    (order,) = wait_for(lambda: rows.stop_orders(ledger, pending=False), 120, what="alice's eviction in the ledger")
    assert (order.user, order.kind, order.cause) == ("alice", "preempted", "kueue:WorkloadEvictedDueToPreempted")
    assert order.stop_at == order.decided_at  # the moment Kueue stopped it
    assert order.reason_key == "stop.kueue"  # told after the fact; a preemptible session checkpoints
    notice = wait_for(lambda: [n for n in ledger.notices("alice") if "(Kueue)" in n.message], 60, what="alice's notice")
    # told what happened, when and why (bob's higher priority in the ClusterQueue), not a future stop
    assert notice[0].message.startswith("This server was stopped at "), notice[0].message
    assert (
        "by the cluster's queue (Kueue): a workload of a higher priority needed its GPU. Your training was"
        " checkpointed as it stopped (CheckpointAndResume saves on the stop)."
    ) in notice[0].message, notice[0].message
    assert "put back in the queue" in notice[0].message, notice[0].message

    # the event Kueue left on her pod tells the same eviction (a hub that was down reads it once the pod and its
    # Workload are gone: spawners/kube/eviction.py's check_gone_pod)
    uid = pod["metadata"]["uid"]
    found = kube.get(
        f"/api/v1/namespaces/{namespace}/events",
        params={"fieldSelector": f"involvedObject.uid={uid},reason=Stopped"},
    )["items"]
    told = event_eviction([(kube_time(e.get("firstTimestamp")), e.get("message", "")) for e in found])
    assert told is not None, found
    assert (told.reason, told.told) == (order.cause.removeprefix("kueue:"), KueueWhy("priority", "Preempted"))
    assert abs((told.at - order.stop_at).total_seconds()) <= 2, (told.at, order.stop_at)

    # her kernel got the signal CheckpointAndResume answers, as on the hub's own stop
    signals = wait_for(
        lambda: (home / "signals.txt").exists() and (home / "signals.txt").read_text().split(), 60, what="a signal"
    )
    assert set(signals) & {"SIGINT", "SIGTERM"}, signals

    # billed to the eviction, with its reason
    stopped = wait_for(
        lambda: next((s for s in ledger.sessions(user="alice") if s.stopped is not None), None), 60, what="alice's bill"
    )
    assert stopped.stop_reason == "preempted"
    assert stopped.stopped == order.stop_at.replace(tzinfo=None), (stopped.stopped, order.stop_at)
    assert stopped.minutes == -(-(stopped.stopped - stopped.started) // timedelta(minutes=1))

    # bob's pod is admitted and starts on the GPU alice left
    hub.wait_ready("bob", timeout=240)
    wait_pod(kube, namespace, "jupyter-bob")

    # alice is put back in the queue: a new spawn whose pod waits in Kueue while bob runs
    wait_for(lambda: hub.server("alice") is not None, 60, what="alice put back in the queue")
    gated = wait_pod(kube, namespace, "jupyter-alice", lambda p: bool(p["spec"].get("schedulingGates")), timeout=120)
    assert gated["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == names["low"]
    assert len(rows.stop_orders(ledger, pending=False)) == 1  # one eviction, told once
    assert len([n for n in ledger.notices("alice") if "(Kueue)" in n.message]) == 1

    # bob stops: alice's server starts again, a new session of the same tier that asks to be resumed again
    hub.stop_server("bob")
    hub.wait_stopped("bob")
    second = hub.wait_ready("alice", timeout=240)["state"]["gpu"]
    assert second["session_id"] != first["session_id"]
    assert second["tier"] == "preemptible" and second["resume"] is True
    hub.stop_server("alice")
    hub.wait_stopped("alice")
