"""Kueue in the test cluster, with the department of config/kubernetes/kueue/ (two groups of 2 GPUs in a cohort).

What the hub's Kueue mode builds on, read back from the API server and the visibility API: a pod labelled with a
LocalQueue is gated by Kueue's webhook, becomes a Workload, is admitted within its ClusterQueue's quota and runs
on the GPU node (the flavor's node label and toleration added by Kueue); over quota it waits with a position; a
group borrows the idle other's GPUs and gives them back when the owner asks (Kueue evicts the borrower's pod); a
lower-priority notebook of a group is evicted for a higher one; a batch/v1 Job holds quota as a notebook does.
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from tests.conftest import wait_for
from tests.k8s.conftest import running, wait_pod
from tests.k8s.kueue import (
    ADMISSION_GATE,
    GPU,
    admitted,
    condition,
    gated,
    gpu_job,
    gpu_pod,
    gpu_usage,
    pending,
    pending_in_local_queue,
    workload_of,
)

pytestmark = pytest.mark.k8s


def create_pod(kube, namespace: str, body: dict) -> dict:
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


def run_pods(kube, namespace: str, queue: str, names: list[str], **kwargs) -> None:
    """Create GPU pods of ``queue`` one after the other (their order is the queue's) and wait until they run."""
    for name in names:
        create_pod(kube, namespace, gpu_pod(name, queue, **kwargs))
        wait_pod(kube, namespace, name, timeout=60)


def pending_names(kube, cluster_queue: str) -> list[tuple[str, int, int]]:
    """(owner pod, position in the ClusterQueue, position in the LocalQueue) of each pending workload, in order."""
    return [
        (wl["metadata"]["ownerReferences"][0]["name"], wl["positionInClusterQueue"], wl["positionInLocalQueue"])
        for wl in pending(kube, cluster_queue)
    ]


def after_second(obj: dict) -> None:
    """Wait until the clock is past the second of ``obj``'s creation time (API timestamps have whole seconds)."""
    created = datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()
    wait_for(lambda: time.time() >= created + 1.05, timeout=5, what="the next second")


def evicted(kube, namespace: str, name: str) -> dict | None:
    """The pod's TerminationTarget condition once Kueue stopped it (it then deletes the pod), else None."""
    pod = kube.pod(namespace, name)
    c = condition(pod, "TerminationTarget")
    return c if c and c["status"] == "True" else None


def test_pod_of_a_local_queue_is_gated_then_admitted_within_quota(kueue, namespace, department):
    kube = kueue
    queue = department.local_queue("cs231n")
    created = create_pod(kube, namespace, gpu_pod("nb-1", queue))
    # the webhook gated it at creation, before any scheduling
    assert ADMISSION_GATE in [g["name"] for g in created["spec"].get("schedulingGates", [])], created["spec"]
    assert "kueue.x-k8s.io/managed" in created["metadata"].get("finalizers", [])

    wl = wait_for(
        lambda: admitted(w := workload_of(kube, namespace, "Pod", "nb-1")) and w, timeout=60, what="the admission"
    )
    assert wl["spec"]["queueName"] == queue
    assert wl["status"]["admission"]["clusterQueue"] == department.cluster_queue("cs231n")
    assigned = wl["status"]["admission"]["podSetAssignments"][0]
    assert assigned["flavors"][GPU] == department.flavor
    assert assigned["resourceUsage"][GPU] == "1"

    pod = wait_pod(kube, namespace, "nb-1", timeout=60)
    assert not gated(pod)
    # the flavor's node label and toleration, added by Kueue: the pod's own spec had neither
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "Simulated-T4"}
    assert any(t.get("key") == GPU for t in pod["spec"]["tolerations"])
    assert pod["spec"]["nodeName"] == "jhgpu-sim-node"
    assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]
    wait_for(lambda: gpu_usage(kube, department.cluster_queue("cs231n")) == (1, 0), timeout=30, what="the usage")


def test_over_quota_a_pod_waits_with_its_position_then_runs_when_a_gpu_frees(kueue, namespace, department):
    kube = kueue
    cs231n, thesis = department.cluster_queue("cs231n"), department.cluster_queue("thesis")
    # thesis uses its own 2 GPUs (nothing to lend), cs231n its own 2: the cohort is full
    run_pods(kube, namespace, department.local_queue("thesis"), ["th-1", "th-2"])
    run_pods(kube, namespace, department.local_queue("cs231n"), ["cs-1", "cs-2"])
    create_pod(kube, namespace, gpu_pod("cs-3", department.local_queue("cs231n")))
    wait_for(lambda: pending_names(kube, cs231n) == [("cs-3", 0, 0)], timeout=30, what="cs-3 queued")
    # Kueue orders a queue by its Workloads' creation times, which have whole seconds: two created within one
    # second may come in either order
    after_second(workload_of(kube, namespace, "Pod", "cs-3"))
    create_pod(kube, namespace, gpu_pod("cs-4", department.local_queue("cs231n")))

    waiting = wait_for(lambda: len(p := pending_names(kube, cs231n)) == 2 and p, timeout=30, what="two pending")
    assert waiting == [("cs-3", 0, 0), ("cs-4", 1, 1)]
    by_lq = pending_in_local_queue(kube, namespace, department.local_queue("cs231n"))
    assert [w["metadata"]["ownerReferences"][0]["name"] for w in by_lq] == ["cs-3", "cs-4"]
    assert pending_names(kube, thesis) == []
    for name in ("cs-3", "cs-4"):
        assert gated(kube.pod(namespace, name))
        reserved = condition(workload_of(kube, namespace, "Pod", name), "QuotaReserved")
        assert reserved["status"] == "False" and "insufficient unused quota for nvidia.com/gpu" in reserved["message"]
    assert gpu_usage(kube, cs231n) == (2, 0)

    # a GPU of cs231n frees: the head of its queue is admitted and runs, the other moves up
    kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/cs-1")
    wait_pod(kube, namespace, "cs-3", timeout=90)
    wait_for(lambda: pending_names(kube, cs231n) == [("cs-4", 0, 0)], timeout=30, what="cs-4 at the head")
    assert gated(kube.pod(namespace, "cs-4"))


def test_a_group_borrows_the_idle_groups_gpus_and_gives_them_back_when_asked(kueue, namespace, department):
    kube = kueue
    cs231n, thesis = department.cluster_queue("cs231n"), department.cluster_queue("thesis")
    # thesis is idle: cs231n runs 4 pods, 2 of them on thesis's lent GPUs
    run_pods(kube, namespace, department.local_queue("cs231n"), ["cs-1", "cs-2", "cs-3", "cs-4"])
    wait_for(lambda: gpu_usage(kube, cs231n) == (4, 2), timeout=30, what="cs231n borrowing 2")

    # thesis asks for one of its own: Kueue reclaims it, evicting a borrowed pod of cs231n
    create_pod(kube, namespace, gpu_pod("th-1", department.local_queue("thesis")))
    wait_pod(kube, namespace, "th-1", timeout=90)
    gone = [n for n in ("cs-1", "cs-2", "cs-3", "cs-4") if not running(kube.pod(namespace, n))]
    assert len(gone) == 1, gone
    wait_for(lambda: kube.pod(namespace, gone[0]) is None, timeout=60, what=f"{gone[0]} deleted by Kueue")
    assert gpu_usage(kube, cs231n) == (3, 1)
    assert gpu_usage(kube, thesis) == (1, 0)
    # an evicted plain pod is deleted, its Workload with it: nothing of it stays queued
    assert workload_of(kube, namespace, "Pod", gone[0]) is None
    assert pending_names(kube, cs231n) == []


def test_a_preemptible_notebook_is_evicted_for_a_notebook_of_its_group(kueue, namespace, department):
    kube = kueue
    low, normal = department.priority_class("notebook-preemptible"), department.priority_class("notebook")
    run_pods(kube, namespace, department.local_queue("thesis"), ["th-1", "th-2"])
    run_pods(kube, namespace, department.local_queue("cs231n"), ["low-1", "low-2"], priority_class=low)
    wl = workload_of(kube, namespace, "Pod", "low-1")
    assert wl["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": low}
    assert wl["spec"]["priority"] == -100

    create_pod(kube, namespace, gpu_pod("nb-1", department.local_queue("cs231n"), priority_class=normal))
    stopped = wait_for(
        lambda: evicted(kube, namespace, "low-1") or evicted(kube, namespace, "low-2"),
        timeout=60,
        what="a preemptible pod evicted",
    )
    assert stopped["reason"] == "WorkloadEvictedDueToPreempted", stopped
    wait_pod(kube, namespace, "nb-1", timeout=90)
    assert sum(running(kube.pod(namespace, n)) for n in ("low-1", "low-2")) == 1
    # the thesis pods, of the same priority as a notebook and within their quota, were left alone
    assert all(running(kube.pod(namespace, n)) for n in ("th-1", "th-2"))


def test_a_batch_job_holds_quota_that_a_notebook_then_waits_for(kueue, namespace, department):
    kube = kueue
    cs231n = department.cluster_queue("cs231n")
    run_pods(kube, namespace, department.local_queue("thesis"), ["th-1", "th-2"])
    job = gpu_job("train", department.local_queue("cs231n"), parallelism=2)
    created = kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", job)
    assert created["spec"]["suspend"] is True  # Kueue's webhook suspends it until admitted
    wl = wait_for(lambda: admitted(w := workload_of(kube, namespace, "Job", "train")) and w, timeout=60, what="job")
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    wait_for(
        lambda: sum(running(p) for p in kube.pods(namespace) if p["metadata"]["name"].startswith("train-")) == 2,
        timeout=90,
        what="the Job's 2 pods running",
    )
    assert kube.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/train")["spec"]["suspend"] is False
    assert gpu_usage(kube, cs231n) == (2, 0)

    # a notebook of the same group (priority "notebook", as a Job without a class) waits behind the Job
    create_pod(
        kube,
        namespace,
        gpu_pod("nb-1", department.local_queue("cs231n"), priority_class=department.priority_class("notebook")),
    )
    wait_for(lambda: pending_names(kube, cs231n) == [("nb-1", 0, 0)], timeout=30, what="the notebook queued")
    assert gated(kube.pod(namespace, "nb-1"))
    assert admitted(workload_of(kube, namespace, "Job", "train"))

    # the Job ends: its quota goes to the notebook
    kube.request(
        "DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/train", json={"propagationPolicy": "Background"}
    )
    wait_pod(kube, namespace, "nb-1", timeout=90)
    assert pending_names(kube, cs231n) == []
