"""``jupyterhub-gpu doctor`` against Kueue in the test cluster: the good setup passes, a broken one is named.

Kueue v0.17 runs beside the test cluster's control plane (scripts/k8s-setup.sh). Each test gets the example
department of config/kubernetes/kueue/ (tests/k8s/kueue.py: one ResourceFlavor, two ClusterQueues in a cohort,
a LocalQueue per group in the test's namespace, two WorkloadPriorityClasses; cluster-wide names unique to the
test, deleted after), loads a hub config in Kueue mode as the doctor does, and reads the cluster with the admin's
kubeconfig, as the doctor run where the hub runs would with the hub's. Nothing is mocked: the findings come from
what the API server and Kueue's controller answer.
"""

from __future__ import annotations

import pytest

from jupyterhub_gpu.doctor import checks
from jupyterhub_gpu.doctor.kueue import check_kueue
from jupyterhub_gpu.doctor.loading import load_setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN
from tests.k8s.conftest import KUBECONFIG
from tests.unit.doctor.test_doctor_checks import base_config

pytestmark = pytest.mark.k8s

T4 = {"gpu_model": "T4", "gpu_count": 1, "image": "img:1", "price_per_gpu_hour": "3.00"}


def doctor(tmp_path, monkeypatch, dept, profiles, queues=None):
    """The doctor's Kueue lines for a hub of these profiles, in Kueue mode over the test's department."""
    monkeypatch.setenv("KUBECONFIG", str(KUBECONFIG))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    queues = queues or {"cs231n": dept.local_queue("cs231n"), "thesis": dept.local_queue("thesis")}
    extra = f"""
c.JupyterHub.spawner_class = "gpu-kube"
c.GPUKubeSpawner.currency = "CNY"
c.GPUKubeSpawner.budget_timezone = "Asia/Shanghai"
c.GPUKubeSpawner.ledger_db_url = c.GPULocalSpawner.ledger_db_url
c.GPUKubeSpawner.namespace = {dept.namespace!r}
c.GPUKubeSpawner.gpu_node_products = {{"T4": ["Simulated-T4"], "A100": ["NVIDIA-A100-SXM4-40GB"]}}
c.GPUKubeSpawner.profiles = {profiles!r}
c.GPUKubeSpawner.kueue = {{"groups": {queues!r}}}
c.GPUKubeSpawner.kueue_priority_class = {dept.priority_class("notebook")!r}
c.GPUKubeSpawner.kueue_preemptible_priority_class = {dept.priority_class("notebook-preemptible")!r}
"""
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(base_config(tmp_path, extra))
    return checks.run_checks(load_setup(str(path), timeout=10), [check_kueue])


def test_the_example_department_passes(department, tmp_path, monkeypatch):
    profiles = [{"slug": "t4", **T4}, {"slug": "t4-spare", **T4, "price_per_gpu_hour": "1.20", "preemptible": True}]
    results = doctor(tmp_path, monkeypatch, department, profiles)
    assert FAIL not in [r.status for r in results], results
    text = " | ".join(f"{r.status}: {r.message}" for r in results)
    assert "pass: Kueue's API is served (kueue.x-k8s.io" in text
    ns, flavor = department.namespace, department.flavor
    for group in ("cs231n", "thesis"):
        cq = department.cluster_queue(group)
        assert (
            f"pass: profile 't4': LocalQueue {ns}/{group} → ClusterQueue '{cq}', active, nvidia.com/gpu nominal"
            f" quota {flavor}: 2" in text
        )
    assert f"pass: profile 't4': WorkloadPriorityClass '{department.priority_class('notebook')}' (0)" in text
    preemptible = department.priority_class("notebook-preemptible")
    assert f"pass: profile 't4-spare': WorkloadPriorityClass '{preemptible}' (-100)" in text
    (visibility,) = [r for r in results if "VisibilityOnDemand" in r.message]
    assert visibility.status == PASS, visibility  # the test cluster serves it (tests/k8s/kueue.py's fixture)


def test_a_local_queue_that_does_not_exist_is_named(department, tmp_path, monkeypatch):
    queues = {"cs231n": department.local_queue("cs231n"), "thesis": "no-such-queue"}
    results = doctor(tmp_path, monkeypatch, department, [{"slug": "t4", **T4}], queues)
    fails = [r for r in results if r.status == FAIL]
    assert len(fails) == 1, results
    assert f"profile 't4': LocalQueue {department.namespace}/no-such-queue does not exist" in fails[0].message
    assert f"create the LocalQueue 'no-such-queue' in the namespace '{department.namespace}'" in fails[0].fix
    assert any(r.status == PASS and "LocalQueue" in r.message and "/cs231n →" in r.message for r in results)


def test_a_flavor_without_the_profiles_gpu_resource_is_named(department, tmp_path, monkeypatch):
    mig = {
        "slug": "mig-1g",
        "gpu_model": "A100",
        "mig": "1g.10gb",
        "gpu_count": 1,
        "image": "img:1",
        "price_per_gpu_hour": "2.40",
    }
    results = doctor(tmp_path, monkeypatch, department, [mig])
    fails = [r.message for r in results if r.status == FAIL]
    assert len(fails) == 2, results  # one per group's queue
    cq = department.cluster_queue("cs231n")
    assert any(
        f"its ClusterQueue '{cq}' has no flavor with nvidia.com/mig-1g.10gb (it covers cpu, memory,"
        " nvidia.com/gpu): Kueue never admits this profile's pods" in m
        for m in fails
    ), fails
    assert WARN not in [r.status for r in results if "VisibilityOnDemand" not in r.message]
