"""The k8s layer: a real JupyterHub with GPUKubeSpawner against the one-node test cluster of scripts/k8s-setup.sh.

``make test`` (and ``make test-k8s``) start the cluster first: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and a kubelet on containerd, built from the Kubernetes Go modules, with 4 simulated
``nvidia.com/gpu`` from a device plugin that speaks the kubelet's API. The hub runs outside the cluster with the
admin's kubeconfig; pods live on the bridge network of the script (10.214.0.0/24), where the hub and the gpu
service listen on the node's address so that servers reach them. Each test gets a namespace of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import free_port, gpu_service_registration, wait_for

K8S_DIR = Path(os.environ.get("K8S_DIR", "/var/lib/jhgpu-k8s"))
KUBECONFIG = K8S_DIR / "admin.kubeconfig"
API = "https://127.0.0.1:16443"
NODE = "jhgpu-sim-node"
NODE_IP = "10.214.0.1"
GPUS = 4
#: the CPU TensorFlow image (JupyterLab and the server extension); scripts/k8s-setup.sh imports it (K8S_IMAGE)
IMAGE = os.environ.get("K8S_IMAGE", "jupyterhub-gpu/tensorflow:2.15-cpu")
#: the node's stand-in NVIDIA driver (scripts/k8s-setup.sh: K8S_NVML_ROOT)
K8S_NVML_ROOT = Path(os.environ.get("K8S_NVML_ROOT", "/var/lib/jupyterhub-gpu-sim-k8s"))
#: the kubelet's record of which device each container got (the device manager's checkpoint)
DEVICE_CHECKPOINT = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")


class Kube:
    """A few calls of the real API server, as the cluster's admin (client certificate)."""

    def __init__(self):
        pki = K8S_DIR / "pki"
        self.session = requests.Session()
        self.session.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
        # per request: a session's verify loses to REQUESTS_CA_BUNDLE, which these machines set
        self.ca = str(pki / "ca.crt")

    def get(self, path: str, **kwargs):
        r = self.request("GET", path, **kwargs)
        r.raise_for_status()
        return r.json()

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        return self.session.request(method, API + path, timeout=15, verify=self.ca, **kwargs)

    def create(self, path: str, body: dict) -> dict:
        """POST an object; the API server must accept it (201)."""
        r = self.request("POST", path, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def pods(self, namespace: str) -> list[dict]:
        return self.get(f"/api/v1/namespaces/{namespace}/pods")["items"]

    def pod(self, namespace: str, name: str) -> dict | None:
        r = self.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return r.json() if r.status_code == 200 else None

    def pvc(self, namespace: str, name: str) -> dict | None:
        r = self.request("GET", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
        return r.json() if r.status_code == 200 else None


def pod_devices(pod_uid: str) -> list[str]:
    """The device IDs the kubelet's device manager gave the pod's containers (its checkpoint file)."""
    try:
        data = json.loads(DEVICE_CHECKPOINT.read_text())["Data"]
    except (OSError, ValueError, KeyError):
        return []
    out = []
    for entry in data.get("PodDeviceEntries") or []:
        if entry.get("PodUID") == pod_uid and entry.get("ResourceName") == "nvidia.com/gpu":
            ids = entry.get("DeviceIDs") or {}
            for value in ids.values() if isinstance(ids, dict) else [ids]:
                out.extend(value)
    return sorted(set(out))


def running(pod: dict | None) -> bool:
    return bool(pod) and pod["status"].get("phase") == "Running"


@pytest.fixture(scope="session")
def kube():
    if not KUBECONFIG.exists():
        pytest.fail("no test cluster: run `make test-k8s` (or `bash scripts/k8s-setup.sh`)")
    k = Kube()
    try:
        node = k.get(f"/api/v1/nodes/{NODE}")
    except requests.RequestException as e:
        pytest.fail(f"the test cluster does not answer ({e}): run `bash scripts/k8s-setup.sh`")
    assert node["status"]["allocatable"].get("nvidia.com/gpu") == str(GPUS), node["status"]["allocatable"]
    # an interrupted run's namespaces would hold GPUs (the kubelet restarts their pods): remove them first
    for ns in k.get("/api/v1/namespaces")["items"]:
        if ns["metadata"]["name"].startswith("jhgpu-t-"):
            remove_namespace(k, ns["metadata"]["name"])
    holding = [p["metadata"]["name"] for p in k.get("/api/v1/pods")["items"] if "nvidia.com/gpu" in str(p["spec"])]
    assert not holding, f"pods outside the tests hold GPUs of the test cluster: {holding}"
    return k


@pytest.fixture
def namespace(kube):
    name = f"jhgpu-t-{uuid.uuid4().hex[:8]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # the controller manager makes the namespace's "default" service account a moment later; until then the API
    # server refuses every pod in it (403 "serviceaccount default not found"), as it would on any cluster
    wait_for(
        lambda: kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default").status_code == 200,
        timeout=60,
        what=f"the default service account of {name}",
    )
    yield name
    remove_namespace(kube, name)


def remove_namespace(kube: Kube, name: str) -> None:
    """Delete a test's namespace and wait until its pods are gone (their GPUs free, their containers ended),
    then hand its volumes back emptied."""
    # the normal grace period: the kubelet ends the containers before the API forgets the pods
    kube.request("DELETE", f"/api/v1/namespaces/{name}/pods")
    wait_for(lambda: not kube.pods(name), timeout=120, what=f"the pods of {name} to go")
    for pvc in kube.get(f"/api/v1/namespaces/{name}/persistentvolumeclaims")["items"]:
        kube.request("DELETE", f"/api/v1/namespaces/{name}/persistentvolumeclaims/{pvc['metadata']['name']}")
    kube.request("DELETE", f"/api/v1/namespaces/{name}")
    release_volumes(kube)


def release_volumes(kube: Kube) -> None:
    """Make the test cluster's Released volumes Available again, wiped: the directory itself is removed and made
    anew (empty, the server's uid alone), and only then is its claim cleared, at the version that was read.

    Test clusters only: a production cluster uses a dynamic provisioner whose volumes are deleted with their
    claims, so no student's data ever reaches another student.
    """
    for pv in kube.get("/api/v1/persistentvolumes")["items"]:
        if pv["status"].get("phase") != "Released" or not pv["metadata"]["name"].startswith("jhgpu-pv-"):
            continue
        path = Path(pv["spec"]["hostPath"]["path"])
        assert path.parent == K8S_DIR / "volumes", path
        shutil.rmtree(path)  # symlinks are removed, never followed
        path.mkdir(mode=0o700)
        os.chown(path, 1000, 100)
        assert not any(path.iterdir())
        r = kube.request(
            "PATCH",
            f"/api/v1/persistentvolumes/{pv['metadata']['name']}",
            headers={"Content-Type": "application/merge-patch+json"},
            json={"metadata": {"resourceVersion": pv["metadata"]["resourceVersion"]}, "spec": {"claimRef": None}},
        )
        assert r.status_code == 200, r.text


def kube_hub_config(
    tmp_path: Path,
    namespace: str,
    service_port: int,
    *,
    extra: str = "",
    service_extra: str = "",
    tick: float = 1,
    db_url: str = "",
    python: str = sys.executable,
    service_config_path: str = "",
) -> str:
    """A hub with GPUKubeSpawner on the test cluster, the ledger and the managed gpu service.

    The hub's API and the service listen on the node's address (the pods' gateway); the proxy and the
    tests stay on loopback. The service's configuration is written to ``tmp_path/gpu_service_config.py``;
    a hub that sees it elsewhere (in a pod) names its ``python`` and ``service_config_path``.
    """
    db_url = db_url or f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service_config = tmp_path / "gpu_service_config.py"
    service_config.write_text(
        f"""
c.GPUService.db_url = {db_url!r}
c.GPUService.currency = "CNY"
c.GPUService.tick_interval = {tick}
c.GPUService.reconcile_interval = 5
c.GPUService.budget_grace_seconds = 4
{service_extra}
"""
    )
    return f"""
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES

c.JupyterHub.hub_ip = {NODE_IP!r}
c.JupyterHub.spawner_class = "gpu-kube"
c.JupyterHub.cleanup_servers = False
c.GPUKubeSpawner.namespace = {namespace!r}
c.GPUKubeSpawner.currency = "CNY"
c.GPUKubeSpawner.ledger_db_url = {db_url!r}
c.GPUKubeSpawner.budget_min_minutes = 0
c.GPUKubeSpawner.gpu_service_url = "http://{NODE_IP}:{service_port}/services/gpu/"
c.GPUKubeSpawner.image_pull_policy = "Never"
c.GPUKubeSpawner.cmd = ["jupyterhub-singleuser"]
c.Spawner.args = []
c.GPUKubeSpawner.storage_class = "jhgpu-local"
c.GPUKubeSpawner.start_timeout = 180
c.GPUKubeSpawner.http_timeout = 180
c.GPUKubeSpawner.inventory_ttl = 1
# no cpu_limit (requests = limits would be the limit): the node has 2 CPUs and 4 GPU pods must fit on it at
# once; a quarter CPU each throttled JupyterLab's start past the hub's timeout on a loaded machine
c.GPUKubeSpawner.profiles = [
    {{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {IMAGE!r},
      "price_per_gpu_hour": "3.00", "mem_limit": "1G", "default": True}},
]
{gpu_service_registration(f"http://{NODE_IP}:{service_port}", service_config_path or service_config, python)}
{extra}
"""


@pytest.fixture
def kube_hub(make_hub, tmp_path, namespace, kube, monkeypatch):
    """``factory(extra="")``: a started hub of this test's namespace; its ``ledger`` is the service's database."""
    monkeypatch.setenv("KUBECONFIG", str(KUBECONFIG))
    hubs = []

    def factory(extra: str = "", service_extra: str = "", tick: float = 1):
        config = kube_hub_config(tmp_path, namespace, free_port(), extra=extra, service_extra=service_extra, tick=tick)
        hub = make_hub(config)
        hub.namespace = namespace
        hub.ledger_path = tmp_path / "ledger.sqlite"
        hubs.append(hub)
        return hub

    yield factory
    for hub in hubs:
        hub.cleanup()


def token(hub, user: str) -> dict:
    """Request headers with a new API token of ``user``."""
    r = hub.api("POST", f"/users/{user}/tokens", json={"note": "k8s test"})
    assert r.status_code == 201, r.text
    return {"Authorization": f"token {r.json()['token']}"}


def wait_pod(kube: Kube, namespace: str, name: str, predicate=running, timeout=120) -> dict:
    return wait_for(
        lambda: (p := kube.pod(namespace, name)) and predicate(p) and p, timeout=timeout, what=f"pod {name}"
    )


def now() -> float:
    return time.time()


# Kueue's fixtures (the manager runs in the test cluster; tests/k8s/kueue.py), for every test of the layer
from tests.k8s.kueue import department, kueue  # noqa: E402, F401
