"""The doctor's Kueue check from a hub's config file: which queues it checks, a refused setting, an unreadable cluster.

The config files are written here and loaded as the hub loads them; the cluster is a kubeconfig whose API server
does not listen (a closed port on loopback), so the read fails for real. tests/k8s/test_kueue_doctor.py runs the
check against Kueue in the test cluster.
"""

from __future__ import annotations

import socket

import pytest

from jupyterhub_gpu.doctor import checks
from jupyterhub_gpu.doctor.kueue import QueueUse, check_kueue, queue_uses
from jupyterhub_gpu.doctor.loading import load_setup
from jupyterhub_gpu.doctor.results import FAIL
from tests.unit.doctor.test_doctor_checks import base_config

KUBE = """
c.JupyterHub.spawner_class = "gpu-kube"
c.GPUKubeSpawner.currency = "CNY"
c.GPUKubeSpawner.budget_timezone = "Asia/Shanghai"
c.GPUKubeSpawner.ledger_db_url = c.GPULocalSpawner.ledger_db_url
c.GPUKubeSpawner.namespace = "jhub"
c.GPUKubeSpawner.gpu_node_products = {"T4": ["Tesla-T4"], "A100": ["NVIDIA-A100-SXM4-40GB"]}
c.GPUKubeSpawner.profiles = [
    {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": "img:1", "price_per_gpu_hour": "3.00"},
    {"slug": "t4-low", "gpu_model": "T4", "gpu_count": 1, "image": "img:1", "price_per_gpu_hour": "1.20",
     "preemptible": True},
    {"slug": "slice", "gpu_model": "A100", "mig": "1g.10gb", "gpu_count": 1, "image": "img:1",
     "price_per_gpu_hour": "2.40", "kueue_queue": "thesis-slices"},
    {"slug": "cpu", "gpu_count": 0, "image": "img:1", "price_per_hour": "0.60"},
]
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A kubeconfig whose API server is a closed port of this machine."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{closed_port()}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return path


def setup_of(tmp_path, extra: str):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(base_config(tmp_path, KUBE + extra))
    return load_setup(str(path), timeout=2)


def test_each_gpu_profile_is_checked_with_every_queue_a_spawn_of_it_may_use(tmp_path):
    setup = setup_of(
        tmp_path,
        """
c.GPUKubeSpawner.kueue = {"groups": {"cs231n": "cs231n", "thesis": "thesis"}, "profiles": {"t4-low": "spare"}}
c.GPUKubeSpawner.kueue_priority_class = "notebook"
c.GPUKubeSpawner.kueue_preemptible_priority_class = "notebook-preemptible"
""",
    )
    assert queue_uses(setup.probe) == [
        QueueUse("t4", "cs231n", "jhub", "nvidia.com/gpu", "notebook"),
        QueueUse("t4", "thesis", "jhub", "nvidia.com/gpu", "notebook"),
        QueueUse("t4-low", "spare", "jhub", "nvidia.com/gpu", "notebook-preemptible"),
        QueueUse("slice", "thesis-slices", "jhub", "nvidia.com/mig-1g.10gb", "notebook"),
    ]  # the CPU profile is never in Kueue mode


def test_without_kueue_mode_the_check_says_nothing_and_reads_nothing(tmp_path, nowhere):
    setup = setup_of(tmp_path, "c.GPUKubeSpawner.profiles = [c.GPUKubeSpawner.profiles[0]]\n")
    assert list(check_kueue(setup)) == []


def test_a_cluster_that_cannot_be_read_is_one_fail_with_where_to_run(tmp_path, nowhere):
    setup = setup_of(tmp_path, 'c.GPUKubeSpawner.kueue = {"default": "cs231n"}\n')
    (result,) = checks.run_checks(setup, [check_kueue])
    assert result.status == FAIL
    assert "Kueue mode is on, but the cluster cannot be read" in result.message
    assert "KUBECONFIG" in result.fix


def test_a_profile_in_kueue_mode_without_any_queue_fails_before_reading(tmp_path, nowhere):
    setup = setup_of(tmp_path, 'c.GPUKubeSpawner.kueue = {"profiles": {"t4": "cs231n"}}\n')
    uses = queue_uses(setup.probe)
    assert QueueUse("t4-low", "", "jhub", "nvidia.com/gpu", None) in uses


def test_a_kueue_setting_naming_an_unknown_profile_is_refused_and_nothing_is_read(tmp_path, nowhere):
    setup = setup_of(tmp_path, 'c.GPUKubeSpawner.kueue = {"profiles": {"v100": "cs231n"}}\n')
    (result,) = checks.run_checks(setup, [check_kueue])
    assert result.status == FAIL
    assert "c.GPUKubeSpawner.kueue['profiles'] names 'v100', which is not a profile" in result.message
    assert "cannot be read" not in result.message


def test_a_kueue_setting_the_spawner_refuses_is_the_config_checks_fail(tmp_path, nowhere):
    setup = setup_of(tmp_path, 'c.GPUKubeSpawner.kueue = {"queues": "cs231n"}\n')
    (config,) = checks.run_checks(setup, [checks.check_config])
    assert config.status == FAIL and "unknown key(s) 'queues'" in config.message
    (kueue,) = checks.run_checks(setup, [check_kueue])
    assert kueue.status == "skip"
