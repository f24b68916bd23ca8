"""The pages' Kueue reader against Kueue in the test cluster: a ClusterQueue's notebooks and batch Jobs together.

The example department (config/kubernetes/kueue/, made per test by tests/k8s/kueue.py) gets a batch/v1 Job of
1 GPU and a user server's pod of 1 GPU (KubeSpawner's labels; our pause image, so it runs at once) in the course's
LocalQueue, both admitted, and a second server's pod that then waits: its quota of 2 is used. The service's
reader (:class:`KueueStatus`, the real Kubernetes client, the admin's kubeconfig as the service's) must report
what Kueue says: the quota used, each workload, its kind and state, and Kueue's reason for the one waiting.
"""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.service.feeds.kueue import KueueStatus
from tests.conftest import wait_for
from tests.k8s.conftest import KUBECONFIG
from tests.k8s.kueue import admitted, gpu_job, gpu_pod, workload_of

pytestmark = pytest.mark.k8s


def server_pod(name: str, user: str, queue: str) -> dict:
    pod = gpu_pod(name, queue)
    pod["metadata"]["labels"].update({"component": "singleuser-server", "hub.jupyter.org/username": user})
    return pod


def test_the_reader_shows_a_queues_notebooks_and_jobs_as_kueue_counts_them(department, kube, monkeypatch):
    ns = department.namespace
    queue = department.local_queue("cs231n")
    kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", gpu_job("train", queue))
    wait_for(lambda: admitted(workload_of(kube, ns, "Job", "train")), timeout=60, what="the Job's admission")
    kube.create(f"/api/v1/namespaces/{ns}/pods", server_pod("jupyter-alice", "alice", queue))
    wait_for(lambda: admitted(workload_of(kube, ns, "Pod", "jupyter-alice")), timeout=60, what="alice's admission")
    # the cohort lends the course the thesis group's idle GPUs: take them so that the next notebook waits
    kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("thesis-work", department.local_queue("thesis"), gpus=2))
    wait_for(lambda: admitted(workload_of(kube, ns, "Pod", "thesis-work")), timeout=60, what="the thesis pod")
    kube.create(f"/api/v1/namespaces/{ns}/pods", server_pod("jupyter-bob", "bob", queue))
    wait_for(lambda: workload_of(kube, ns, "Pod", "jupyter-bob"), timeout=60, what="bob's Workload")

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    cq = department.cluster_queue("cs231n")
    status = KueueStatus({"cs231n": cq}, str(KUBECONFIG), ttl=0)

    def reading():
        return asyncio.run(status.get())

    def settled():
        usage = reading().queues.get(cq)
        pending = [w for w in usage.workloads if w.state == "pending"] if usage else []
        gpus = [q.used for q in usage.quotas if q.resource == "nvidia.com/gpu"] if usage else []
        # Kueue writes a ClusterQueue's usage to its status a moment after it admits
        return usage if pending and pending[0].reason and gpus == [2] else None

    usage = wait_for(settled, timeout=60, interval=1, what="Kueue's reason for bob's waiting")
    assert not reading().error
    rows = {(w.kind, w.owner, w.state) for w in usage.workloads}
    assert rows == {("job", "train", "admitted"), ("notebook", "alice", "admitted"), ("notebook", "bob", "pending")}
    (quota,) = [q for q in usage.quotas if q.resource == "nvidia.com/gpu"]
    assert (quota.flavor, quota.nominal, quota.used, quota.borrowed) == (department.flavor, 2, 2, 0)
    (bob,) = [w for w in usage.workloads if w.owner == "bob"]
    assert bob.gpus == 1 and bob.namespace == ns and bob.queue == queue
    assert "nvidia.com/gpu" in bob.reason, bob.reason  # Kueue's words: the GPU quota is what it lacks
    print("Kueue's reason for bob:", bob.reason)
    assert usage.cohort == department.cohort and usage.active
