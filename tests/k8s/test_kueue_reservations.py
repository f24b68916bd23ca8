"""A class reservation kept by Kueue, on the test cluster: the booked window moves quota, Kueue reclaims, and after
the window every quota is back as the admin set it.

A real hub (GPUKubeSpawner in Kueue mode, a LocalQueue per group), the real gpu service (``c.Kueue``: each group's
ClusterQueue and the T4's ResourceFlavor) and Kueue v0.17. Two ClusterQueues in a cohort of the test's own (one
GPU of quota each; cs231n's reclaims within the cohort). The thesis group runs two servers, one on the quota cs231n
lends while idle. cs231n books two T4s: until the window nothing moves (the promise to the others holds); from its
start the service gives cs231n's ClusterQueue two GPUs and thesis' none, so a cs231n student's pod makes Kueue
reclaim a thesis pod (told and billed as a preemption); after the window both quotas and the record are gone back.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.kueue.cluster import ANNOTATION
from tests.conftest import wait_for
from tests.k8s.conftest import KUBECONFIG

pytestmark = pytest.mark.k8s

API = "/apis/kueue.x-k8s.io/v1beta2"
OPENS_IN = 45  # seconds from the booking to its window: the thesis servers run before it
LENGTH = 180  # the window's seconds: a cs231n pod is admitted and starts within it


@pytest.fixture
def cohort(kube):
    """Unique names of the test's cluster-wide Kueue objects; each one made is deleted after."""
    tag = uuid.uuid4().hex[:6]
    names = {"flavor": f"jhgpu-t-{tag}-t4", "cohort": f"jhgpu-t-{tag}", "a": f"jhgpu-t-{tag}-cs231n"}
    names["b"] = f"jhgpu-t-{tag}-thesis"
    yield names
    # deleted at once; Kueue's finalizers keep each until the namespace's workloads are gone (its teardown)
    for cq in ("a", "b"):
        kube.request("DELETE", f"{API}/clusterqueues/{names[cq]}")
    kube.request("DELETE", f"{API}/resourceflavors/{names['flavor']}")


def cluster_queue(name: str, cohort: str, flavor: str, preemption: dict) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {},
            "preemption": preemption,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "8"},
                                {"name": "memory", "nominalQuota": "32Gi"},
                                {"name": "nvidia.com/gpu", "nominalQuota": "1"},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def make_cohort(kube, namespace: str, names: dict) -> None:
    kube.create(
        f"{API}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": names["flavor"]}},
    )
    reclaim = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    kube.create(f"{API}/clusterqueues", cluster_queue(names["a"], names["cohort"], names["flavor"], reclaim))
    kube.create(f"{API}/clusterqueues", cluster_queue(names["b"], names["cohort"], names["flavor"], {}))
    for group, cq in (("cs231n", names["a"]), ("thesis", names["b"])):
        kube.create(
            f"{API}/namespaces/{namespace}/localqueues",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": group, "namespace": namespace},
                "spec": {"clusterQueue": cq},
            },
        )

    def active():
        return all(
            any(c["type"] == "Active" and c["status"] == "True" for c in kube.get(f"{API}/clusterqueues/{names[cq]}")
                .get("status", {}).get("conditions", []))
            for cq in ("a", "b")
        )  # fmt: skip

    wait_for(active, timeout=60, what="Kueue's controller to make the test's ClusterQueues active")


def gpu_quota(kube, name: str) -> tuple[str, str | None]:
    """A ClusterQueue's nominal quota of nvidia.com/gpu, and its record of a move (None: none)."""
    cq = kube.get(f"{API}/clusterqueues/{name}")
    (gpu,) = [r for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "nvidia.com/gpu"]
    return str(gpu["nominalQuota"]), (cq["metadata"].get("annotations") or {}).get(ANNOTATION)


@pytest.mark.timeout(900)  # the window is waited out: it opens, Kueue reclaims, it closes
def test_a_booked_window_moves_the_quota_kueue_reclaims_and_it_is_restored_after(kube, namespace, kube_hub, cohort):
    names = cohort
    make_cohort(kube, namespace, names)
    hub = kube_hub(
        extra="""
c.JupyterHub.load_groups = {"cs231n": {"users": ["alice"]}, "thesis": {"users": ["tom", "tim"]}}
c.GPUKubeSpawner.kueue = {"groups": {"cs231n": "cs231n", "thesis": "thesis"}}
""",
        service_extra=f"""
c.Scheduling.gpu_pool = {{"T4": 4}}
c.Kueue.cluster_queues = {{"cs231n": {names["a"]!r}, "thesis": {names["b"]!r}}}
c.Kueue.flavors = {{"T4": {names["flavor"]!r}}}
c.Kueue.lead_seconds = 0
c.Kueue.kubeconfig = {str(KUBECONFIG)!r}
""",
    )
    hub.create_users("alice", "tom", "tim")
    ledger = Ledger(f"sqlite:///{hub.ledger_path}")

    # thesis runs two servers: one on its own GPU of quota, one on the GPU cs231n lends while idle
    for user in ("tom", "tim"):
        hub.start_server(user, {"profile": "t4"})
    for user in ("tom", "tim"):
        hub.wait_ready(user, timeout=300)

    now = datetime.now(timezone.utc).replace(microsecond=0)
    opens, closes = now + timedelta(seconds=OPENS_IN), now + timedelta(seconds=OPENS_IN + LENGTH)
    draft = rows.Draft("cs231n", "T4", 2, opens, closes, note="CS231N")
    rows.add_reservation(ledger, draft, lambda existing: None, timezone.utc, now, "admin")

    # before the window nothing moves: the others may run until it opens
    assert gpu_quota(kube, names["a"]) == ("1", None) and gpu_quota(kube, names["b"]) == ("1", None)
    wait_for(lambda: gpu_quota(kube, names["a"])[0] == "2", OPENS_IN + 60, what="cs231n's quota raised")
    moved_at = datetime.now(timezone.utc)
    assert moved_at >= opens
    (raised, record_a), (lowered, record_b) = gpu_quota(kube, names["a"]), gpu_quota(kube, names["b"])
    assert (raised, lowered) == ("2", "0")
    assert json.loads(record_a)["original"] == {names["flavor"]: {"nominal": 1, "lending": None}}
    assert json.loads(record_b)["original"] == {names["flavor"]: {"nominal": 1, "lending": None}}
    assert all(s.stopped is None for u in ("tom", "tim") for s in ledger.sessions(user=u))  # nobody stopped yet

    # a cs231n student asks: Kueue reclaims a thesis pod (evicted, told and billed as a preemption)
    hub.start_server("alice", {"profile": "t4"})
    evicted = wait_for(
        lambda: [o for o in rows.stop_orders(ledger, pending=False) if o.cause], 180, what="a thesis pod reclaimed"
    )
    assert {o.user for o in evicted} <= {"tom", "tim"} and len(evicted) == 1, evicted
    (order,) = evicted
    assert order.cause.startswith("kueue:WorkloadEvicted") and order.stop_at >= opens
    # told after the fact, and why: thesis' quota, lowered for the window, is borrowed quota Kueue took back
    assert order.reason_key == "stop.kueue.save"  # a standard session: its unsaved work may be lost
    told = wait_for(
        lambda: [n for n in ledger.notices(order.user) if "(Kueue)" in n.message], 60, what="the thesis notice"
    )
    assert "the GPU quota its group had borrowed was taken back by the group that lent it" in told[0].message
    stopped = wait_for(
        lambda: next((s for s in ledger.sessions(user=order.user) if s.stopped is not None), None), 60, what="a bill"
    )
    assert stopped.stop_reason == "preempted" and stopped.stopped == order.stop_at.replace(tzinfo=None)
    hub.wait_ready("alice", timeout=240)

    # after the window: both quotas as the admin set them, and no record left
    wait_for(
        lambda: gpu_quota(kube, names["a"]) == ("1", None) and gpu_quota(kube, names["b"]) == ("1", None),
        (closes - datetime.now(timezone.utc)).total_seconds() + 60,
        what="the quotas restored after the window",
    )
    assert datetime.now(timezone.utc) >= closes
    for user in ("alice", "tom", "tim"):
        hub.stop_server(user)
