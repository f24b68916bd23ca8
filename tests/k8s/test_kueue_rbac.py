"""config/kubernetes/hub-kueue-rbac.yaml on the test cluster: the API server's own access reviews say the hub's
account may make the reads Kueue mode makes (the spawner's, the gpu service's pages and doctor's) and the quota
mover's patch, and nothing more of Kueue's (no Workload written, no ClusterQueue deleted).

The file is applied as its comment says (the bindings' namespace changed to the test's), under role and binding
names unique to the test (cluster-wide objects: deleted after the test).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
PATHS = {
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


@pytest.fixture
def kueue_rbac(kube, namespace):
    suffix = uuid.uuid4().hex[:8]
    docs = list(yaml.safe_load_all((ROOT / "config/kubernetes/hub-kueue-rbac.yaml").read_text()))
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] += f"-{suffix}"
            for subject in doc["subjects"]:
                subject["namespace"] = namespace
    try:
        for doc in docs:
            kube.create(PATHS[doc["kind"]], doc)
        yield
    finally:
        for doc in reversed(docs):
            kube.request("DELETE", f"{PATHS[doc['kind']]}/{doc['metadata']['name']}")


def allowed(kube, namespace: str, verb: str, group: str, resource: str, in_namespace: str = "") -> bool:
    subresource = ""
    if "/" in resource:
        resource, subresource = resource.split("/", 1)
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:hub",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": resource,
                "subresource": subresource,
                "namespace": in_namespace,
            },
        },
    }
    r = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    assert r.status_code == 201, r.text
    return r.json()["status"].get("allowed", False)


KUEUE = "kueue.x-k8s.io"


def test_the_kueue_rbac_lets_the_hub_read_kueue_and_move_quota_and_nothing_more(kube, namespace, kueue_rbac):
    ns = namespace
    # the spawner, in its namespace
    assert allowed(kube, ns, "get", KUEUE, "localqueues", ns)
    assert allowed(kube, ns, "list", KUEUE, "workloads", ns)
    assert allowed(kube, ns, "get", "visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", ns)
    # the pages and the doctor, every namespace
    for resource in ("clusterqueues", "localqueues", "workloads"):
        assert allowed(kube, ns, "list", KUEUE, resource)
    for resource in ("clusterqueues", "resourceflavors", "workloadpriorityclasses"):
        assert allowed(kube, ns, "get", KUEUE, resource)
    # the quota mover
    assert allowed(kube, ns, "patch", KUEUE, "clusterqueues")
    # nothing more
    assert not allowed(kube, ns, "delete", KUEUE, "clusterqueues")
    assert not allowed(kube, ns, "patch", KUEUE, "workloads", ns)
    assert not allowed(kube, ns, "create", KUEUE, "localqueues", ns)
    assert not allowed(kube, ns, "patch", KUEUE, "resourceflavors")
