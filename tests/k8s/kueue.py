"""Kueue in the k8s layer: the department of config/kubernetes/kueue/ made per test, and reads of Kueue's state.

scripts/k8s-setup.sh runs Kueue's manager beside the control plane (docs/kubernetes.md "The test cluster"): its
webhooks gate every pod labelled ``kueue.x-k8s.io/queue-name`` (and suspend every such batch Job) in any namespace
but kube-system and kueue-system; its visibility API lists a ClusterQueue's or LocalQueue's pending workloads with
their positions.

The ``department`` fixture instantiates the example objects (one ResourceFlavor, two ClusterQueues in a cohort,
a LocalQueue per group in the test's namespace, the two WorkloadPriorityClasses) with names unique to the test,
so tests never share a cluster-scoped object; at the end it deletes the namespace's Jobs and pods, waits for their
Workloads to go, then deletes the objects and waits for them to be gone.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from tests.conftest import wait_for

if TYPE_CHECKING:
    from tests.k8s.conftest import Kube

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "kubernetes" / "kueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: the scheduling gate Kueue's webhook puts on a managed pod until its Workload is admitted
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: the annotation naming a managed pod's Workload
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
#: the pod made from our own pause binary, present on the node (scripts/k8s-setup.sh): starts at once
PAUSE_IMAGE = "localhost/jhgpu-pause:sim"
GPU = "nvidia.com/gpu"

PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
}


def load_examples() -> list[dict]:
    """The example objects, as config/kubernetes/kueue/ has them (docs/kubernetes.md quotes the same files)."""
    out = []
    for name in ("resource-flavor.yaml", "priority-classes.yaml", "cluster-queues.yaml", "local-queues.yaml"):
        out.extend(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d)
    return out


def object_path(obj: dict) -> str:
    """The REST path of a Kueue object."""
    plural = PLURALS[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    base = f"{KUEUE}/namespaces/{namespace}/{plural}" if namespace else f"{KUEUE}/{plural}"
    return f"{base}/{obj['metadata']['name']}"


@dataclass
class Department:
    """The example department in a test's namespace; the names are the test's own (``suffix``)."""

    namespace: str
    suffix: str
    #: the example's name -> this test's name, for the cluster-scoped objects (flavor, cohort, ClusterQueues,
    #: WorkloadPriorityClasses); LocalQueues keep their names (the namespace is the test's)
    names: dict[str, str]
    objects: list[dict] = field(default_factory=list)

    def cluster_queue(self, group: str) -> str:
        return self.names[group]

    def local_queue(self, group: str) -> str:
        return group

    def priority_class(self, name: str) -> str:
        return self.names[name]

    @property
    def flavor(self) -> str:
        return self.names["t4"]

    @property
    def cohort(self) -> str:
        return self.names["department"]


def department_objects(namespace: str, suffix: str) -> tuple[dict[str, str], list[dict]]:
    """The example objects renamed for one test: every cluster-scoped name (and each reference to it) gets
    ``-suffix``; the LocalQueues move to ``namespace``."""
    objects = copy.deepcopy(load_examples())
    names = {"department": f"department-{suffix}"}
    for obj in objects:
        if obj["kind"] != "LocalQueue":
            names[obj["metadata"]["name"]] = f"{obj['metadata']['name']}-{suffix}"
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "LocalQueue":
            meta["namespace"] = namespace
            obj["spec"]["clusterQueue"] = names[obj["spec"]["clusterQueue"]]
            continue
        meta["name"] = names[meta["name"]]
        if obj["kind"] == "ClusterQueue":
            obj["spec"]["cohortName"] = names[obj["spec"]["cohortName"]]
            for group in obj["spec"]["resourceGroups"]:
                for flavor in group["flavors"]:
                    flavor["name"] = names[flavor["name"]]
    return names, objects


def active(kube: Kube, obj: dict) -> bool:
    r = kube.request("GET", object_path(obj))
    if r.status_code != 200:
        return False
    conditions = r.json().get("status", {}).get("conditions", [])
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def make_department(kube: Kube, namespace: str) -> Department:
    """Create the example department for ``namespace`` and wait until its queues are active."""
    suffix = namespace.rsplit("-", 1)[-1]
    names, objects = department_objects(namespace, suffix)
    dept = Department(namespace=namespace, suffix=suffix, names=names)
    for obj in objects:
        path = object_path(obj).rsplit("/", 1)[0]
        kube.create(path, obj)
        dept.objects.append(obj)
    for obj in objects:
        if obj["kind"] in ("ClusterQueue", "LocalQueue"):
            wait_for(lambda obj=obj: active(kube, obj), timeout=60, what=f"{obj['kind']} {obj['metadata']['name']}")
    return dept


def remove_department(kube: Kube, dept: Department) -> None:
    """Delete the namespace's Jobs and pods, wait for their Workloads to go, then the department's objects."""
    ns = dept.namespace
    jobs = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    for job in jobs:
        kube.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}",
            json={"propagationPolicy": "Background"},
        )
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods")
    wait_for(lambda: not kube.pods(ns), timeout=120, what=f"the pods of {ns} to go")
    wait_for(lambda: not workloads(kube, ns), timeout=60, what=f"the Workloads of {ns} to go")
    for obj in reversed(dept.objects):
        kube.request("DELETE", object_path(obj))
    for obj in dept.objects:
        wait_for(
            lambda obj=obj: kube.request("GET", object_path(obj)).status_code == 404,
            timeout=60,
            what=f"{obj['kind']} {obj['metadata']['name']} to be deleted",
        )


@pytest.fixture
def kueue(kube):
    """The cluster serves Kueue's API and its visibility API (else: the cluster was started without Kueue)."""
    for group in (KUEUE, VISIBILITY):
        r = kube.request("GET", group)
        if r.status_code != 200:
            pytest.fail(f"the test cluster does not serve {group} ({r.status_code}): run `bash scripts/k8s-setup.sh`")
    return kube


@pytest.fixture
def department(kueue, namespace):
    """The example department (config/kubernetes/kueue/) with this test's names, in this test's namespace."""
    dept = make_department(kueue, namespace)
    yield dept
    remove_department(kueue, dept)


# -- reads ----------------------------------------------------------------------------------------------------


def workloads(kube: Kube, namespace: str) -> list[dict]:
    return kube.get(f"{KUEUE}/namespaces/{namespace}/workloads")["items"]


def workload_of(kube: Kube, namespace: str, owner_kind: str, owner_name: str) -> dict | None:
    """The Workload Kueue made for a pod or a Job (its owner), or None while there is none."""
    for wl in workloads(kube, namespace):
        for ref in wl["metadata"].get("ownerReferences", []):
            if ref["kind"] == owner_kind and ref["name"] == owner_name:
                return wl
    return None


def condition(obj: dict | None, kind: str) -> dict | None:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return None


def admitted(wl: dict | None) -> bool:
    c = condition(wl, "Admitted")
    return bool(c) and c["status"] == "True"


def gated(pod: dict | None) -> bool:
    """The pod still carries Kueue's scheduling gate (not admitted yet)."""
    return bool(pod) and any(g["name"] == ADMISSION_GATE for g in pod["spec"].get("schedulingGates") or [])


def pending(kube: Kube, cluster_queue: str) -> list[dict]:
    """The ClusterQueue's pending workloads from the visibility API, in order; each has ``positionInClusterQueue``
    and ``positionInLocalQueue`` (0 is the head) and ``metadata.ownerReferences`` (the pod or Job)."""
    return kube.get(f"{VISIBILITY}/clusterqueues/{cluster_queue}/pendingworkloads")["items"]


def pending_in_local_queue(kube: Kube, namespace: str, local_queue: str) -> list[dict]:
    return kube.get(f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads")["items"]


def gpu_usage(kube: Kube, cluster_queue: str) -> tuple[int, int]:
    """(GPUs in use by the ClusterQueue's admitted workloads, of which borrowed from the cohort)."""
    cq = kube.get(f"{KUEUE}/clusterqueues/{cluster_queue}")
    for flavor in cq.get("status", {}).get("flavorsUsage", []):
        for res in flavor["resources"]:
            if res["name"] == GPU:
                return int(res.get("total", "0")), int(res.get("borrowed", "0"))
    return 0, 0


# -- objects --------------------------------------------------------------------------------------------------


def queue_labels(queue: str, priority_class: str | None = None) -> dict[str, str]:
    """The labels that put a pod or Job in ``queue`` (a LocalQueue), at ``priority_class`` if given."""
    return {QUEUE_LABEL: queue, **({PRIORITY_LABEL: priority_class} if priority_class else {})}


def gpu_pod(name: str, queue: str, *, gpus: int = 1, priority_class: str | None = None) -> dict:
    """A pod of ``queue`` (a LocalQueue) asking for GPUs: our pause image, so it runs at once once admitted.

    No node selector nor toleration: the ResourceFlavor's are added by Kueue at admission."""
    labels = queue_labels(queue, priority_class)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [_container(gpus)]},
    }


def gpu_job(name: str, queue: str, *, parallelism: int = 1, gpus: int = 1, priority_class: str | None = None) -> dict:
    """A batch/v1 Job of ``queue`` with ``parallelism`` pods of ``gpus`` GPUs each (Kueue suspends it until
    admitted, then counts all its pods against the quota at once)."""
    labels = queue_labels(queue, priority_class)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [_container(gpus)],
                }
            },
        },
    }


def _container(gpus: int) -> dict:
    return {
        "name": "main",
        "image": PAUSE_IMAGE,
        "imagePullPolicy": "Never",
        "resources": {
            "limits": {GPU: str(gpus), "memory": "32Mi"},
            "requests": {GPU: str(gpus), "cpu": "10m", "memory": "32Mi"},
        },
    }


def set_gpu_quota(
    kube: Kube,
    cluster_queue: str,
    *,
    nominal: int | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
) -> dict:
    """Change the GPU quota of a ClusterQueue of the example (its one resource group and flavor)."""
    cq = kube.get(f"{KUEUE}/clusterqueues/{cluster_queue}")
    for res in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if res["name"] == GPU:
            for key, value in (
                ("nominalQuota", nominal),
                ("borrowingLimit", borrowing_limit),
                ("lendingLimit", lending_limit),
            ):
                if value is not None:
                    res[key] = value
    r = kube.request("PUT", f"{KUEUE}/clusterqueues/{cluster_queue}", json=cq)
    assert r.status_code == 200, r.text
    return r.json()
