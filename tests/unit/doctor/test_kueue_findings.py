"""The doctor's Kueue findings over Kueue's objects as the API server returns them (camelCase JSON).

tests/k8s/test_kueue_doctor.py runs the same checks against Kueue in the real test cluster; here each way a
Kueue setup goes wrong is one case: each says what is wrong and what to fix, and the good setup passes.
"""

from __future__ import annotations

import copy

import pytest

from jupyterhub_gpu.doctor.kueue import ClusterObjects, QueueUse, findings
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN

NS = "jhub"


def cluster_queue(name="cs231n", resource="nvidia.com/gpu", nominal="2", flavor="sim-gpu", active=True):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": "department",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", resource],
                    "flavors": [
                        {
                            "name": flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                                {"name": resource, "nominalQuota": nominal, "borrowingLimit": "2"},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True" if active else "False",
                    "reason": "Ready" if active else "FlavorNotFound",
                    "message": "Can admit new workloads"
                    if active
                    else "Can't admit new workloads: references missing ResourceFlavor(s): sim-gpu.",
                }
            ],
            "flavorsUsage": [{"name": flavor, "resources": [{"name": resource, "total": "1", "borrowed": "0"}]}],
            "admittedWorkloads": 1,
            "pendingWorkloads": 0,
            "reservingWorkloads": 1,
        },
    }


def local_queue(name="cs231n", cq="cs231n"):
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"clusterQueue": cq},
    }


def good() -> ClusterObjects:
    return ClusterObjects(
        groups={"kueue.x-k8s.io": ["v1beta2", "v1beta1"], "visibility.kueue.x-k8s.io": ["v1beta2"]},
        local_queues={(NS, "cs231n"): local_queue()},
        cluster_queues={"cs231n": cluster_queue()},
        flavors={"sim-gpu": {"kind": "ResourceFlavor", "metadata": {"name": "sim-gpu"}}},
        priority_classes={
            "notebook": {"kind": "WorkloadPriorityClass", "metadata": {"name": "notebook"}, "value": 1000}
        },
    )


USE = QueueUse("t4", "cs231n", NS, "nvidia.com/gpu", "notebook")


def statuses(results):
    return [r.status for r in results]


def test_the_good_setup_passes_every_line():
    results = findings([USE], good())
    assert statuses(results) == [PASS, PASS, PASS, PASS], results
    text = " | ".join(r.message for r in results)
    assert "LocalQueue jhub/cs231n → ClusterQueue 'cs231n', active, nvidia.com/gpu nominal quota sim-gpu: 2" in text
    assert "WorkloadPriorityClass 'notebook' (1000)" in text
    assert "VisibilityOnDemand API answers" in text


def test_kueue_not_installed_is_one_fail_that_says_to_install_it():
    found = good()
    found.groups = {"apps": ["v1"]}
    (result,) = findings([USE], found)
    assert result.status == FAIL
    assert "does not serve Kueue's API (kueue.x-k8s.io)" in result.message
    assert "install Kueue" in result.fix


def test_a_local_queue_that_does_not_exist_is_named_with_the_fix():
    found = good()
    found.local_queues = {(NS, "cs231n"): None}
    results = findings([USE], found)
    fail = [r for r in results if r.status == FAIL]
    assert len(fail) == 1
    assert "profile 't4': LocalQueue jhub/cs231n does not exist" in fail[0].message
    assert "create the LocalQueue 'cs231n' in the namespace 'jhub'" in fail[0].fix


def test_a_local_queue_whose_cluster_queue_is_missing():
    found = good()
    found.cluster_queues = {"cs231n": None}
    (fail,) = [r for r in findings([USE], found) if r.status == FAIL]
    assert "points at the ClusterQueue 'cs231n', which does not exist" in fail.message


def test_an_inactive_cluster_queue_says_kueues_reason():
    found = good()
    found.cluster_queues = {"cs231n": cluster_queue(active=False)}
    found.flavors = {"sim-gpu": None}
    fails = [r for r in findings([USE], found) if r.status == FAIL]
    assert (
        "is not active (Can't admit new workloads: references missing ResourceFlavor(s): sim-gpu.)" in fails[0].message
    )
    assert "ResourceFlavor(s) sim-gpu of ClusterQueue 'cs231n' do not exist" in fails[1].message


def test_a_flavor_without_the_profiles_gpu_resource_fails():
    found = good()
    found.cluster_queues = {"cs231n": cluster_queue(resource="nvidia.com/mig-1g.10gb")}
    (fail,) = [r for r in findings([USE], found) if r.status == FAIL]
    assert "has no flavor with nvidia.com/gpu (it covers cpu, memory, nvidia.com/mig-1g.10gb)" in fail.message
    assert "add nvidia.com/gpu to a resource group's coveredResources of 'cs231n'" in fail.fix


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_a_slice_or_share_profile_needs_its_own_resource_covered(resource):
    use = QueueUse("slice", "cs231n", NS, resource, None)
    assert FAIL in statuses(findings([use], good()))
    found = good()
    found.cluster_queues = {"cs231n": cluster_queue(resource=resource)}
    assert FAIL not in statuses(findings([use], found))


def test_no_nominal_quota_is_a_warning_only_borrowing():
    found = good()
    found.cluster_queues = {"cs231n": cluster_queue(nominal="0")}
    (warn,) = [r for r in findings([USE], found) if r.status == WARN]
    assert "nominal quota of 0 nvidia.com/gpu" in warn.message and "borrowed" in warn.message


def test_a_missing_workload_priority_class_fails():
    found = good()
    found.priority_classes = {"notebook": None}
    (fail,) = [r for r in findings([USE], found) if r.status == FAIL]
    assert "WorkloadPriorityClass 'notebook' does not exist" in fail.message


def test_visibility_api_not_answering_is_a_warning_about_positions():
    found = good()
    found.visibility = "not served: no APIService for it"
    (warn,) = [r for r in findings([USE], found) if r.status == WARN]
    assert "VisibilityOnDemand API (visibility.kueue.x-k8s.io) does not answer" in warn.message
    assert "position" in warn.message


def test_a_cpu_profile_needs_only_its_queue():
    use = QueueUse("cpu", "cs231n", NS, None, None)
    results = findings([use], good())
    assert FAIL not in statuses(results) and WARN not in statuses(results)


def test_findings_do_not_change_what_was_read():
    found = good()
    before = copy.deepcopy(found)
    findings([USE], found)
    assert found == before


def test_a_profile_in_kueue_mode_with_no_queue_named_fails_with_where_to_name_one():
    results = findings([QueueUse("t4-low", "", NS, "nvidia.com/gpu", None)], good())
    (fail,) = [r for r in results if r.status == FAIL]
    assert "profile 't4-low' is in Kueue mode but no LocalQueue is named for it" in fail.message
    assert "'kueue_queue'" in fail.fix


def test_the_priority_class_is_checked_once_per_profile_even_when_its_queue_is_missing():
    found = good()
    found.local_queues = {(NS, "cs231n"): None}
    found.priority_classes = {"notebook": None}
    found.visibility = None  # not asked: no LocalQueue exists
    uses = [USE, QueueUse("t4", "thesis", NS, "nvidia.com/gpu", "notebook")]
    found.local_queues[(NS, "thesis")] = None
    results = findings(uses, found)
    priority = [r for r in results if "WorkloadPriorityClass" in r.message]
    assert len(priority) == 1 and priority[0].status == FAIL
    assert "c.GPUKubeSpawner.kueue_priority_class" in priority[0].fix
    (visibility,) = [r for r in results if "VisibilityOnDemand" in r.message]
    assert visibility.status == PASS and "not asked" in visibility.message
