"""The hub image of config/kubernetes/hub.Dockerfile running as a pod of the test cluster, as Zero to JupyterHub
runs it: the hub and its managed gpu service inside the pod, the cluster reached with the pod's service-account
token (in-cluster configuration, not the admin's kubeconfig), the GPU inventory read with the permissions of
config/kubernetes/hub-gpu-inventory-rbac.yaml and nothing more, and the ledger on PostgreSQL.

The image is the recipe itself built on a stand-in for the chart's hub image (scripts/build-k8s-hub-image.sh:
no registry is reachable here). Unlike the chart, the pod runs on the host's network: the API server of the
test cluster listens on loopback and there is no kube-proxy for its Service address; and the proxy
(configurable-http-proxy) runs on the machine, where the chart runs it as a pod of its own.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest
import requests
import yaml

from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import BIN, Hub, free_port, wait_for
from tests.k8s.conftest import API, NODE, NODE_IP, kube_hub_config, pod_devices, token, wait_pod

pytestmark = pytest.mark.k8s

HUB_IMAGE = os.environ.get("K8S_HUB_IMAGE", "jupyterhub-gpu/k8s-hub:test")
ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = "/usr/local/etc/jupyterhub"  # where the chart mounts the hub's configuration
#: Zero to JupyterHub's Role for the hub (its templates/hub/rbac.yaml): namespaced, no nodes
CHART_HUB_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
        "verbs": ["get", "watch", "list", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]


class PodHub(Hub):
    """The hub of a pod: the same REST helpers as the tests' local hubs; its log is the pod's."""

    def __init__(self, workdir: Path, config: str, kube, namespace: str, proxy: dict):
        super().__init__(workdir, config)
        self.kube, self.namespace = kube, namespace
        # reached through the proxy the test started
        self.port = proxy["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_url = f"{self.url}/hub/api"

    def log_text(self) -> str:
        r = self.kube.request("GET", f"/api/v1/namespaces/{self.namespace}/pods/hub/log")
        return r.text if r.status_code == 200 else f"(no log: {r.status_code} {r.text[:200]})"


def hub_process_uid() -> int | None:
    """The uid of the process that runs the pod's hub on this machine (containers are processes here)."""
    wanted = f"{CONFIG_DIR}/jupyterhub_config.py".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            if not (args[1:2] and args[1].endswith(b"jupyterhub") and wanted in args):
                continue
            uid = next(line for line in (proc / "status").read_text().splitlines() if line.startswith("Uid:"))
        except OSError:
            continue
        return int(uid.split()[1])
    return None


def inventory_rbac(namespace: str) -> list[dict]:
    """config/kubernetes/hub-gpu-inventory-rbac.yaml with the binding's namespace changed, as its comment says."""
    docs = list(yaml.safe_load_all((ROOT / "config/kubernetes/hub-gpu-inventory-rbac.yaml").read_text()))
    for doc in docs:
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


def can(kube, namespace: str, verb: str, resource: str, in_namespace: str = "") -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:hub",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": {"verb": verb, "resource": resource, "namespace": in_namespace},
        },
    }
    r = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
    assert r.status_code == 201, r.text
    return r.json()["status"].get("allowed", False)


@pytest.fixture
def inventory_role(kube, namespace):
    """The file's ClusterRole and ClusterRoleBinding (cluster-wide: removed after the test, and before it if an
    interrupted run left them)."""
    role, binding = inventory_rbac(namespace)
    paths = {
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    }

    def remove():
        for doc in (binding, role):
            kube.request("DELETE", f"{paths[doc['kind']]}/{doc['metadata']['name']}")

    remove()
    for doc in (role, binding):
        kube.create(paths[doc["kind"]], doc)
    yield
    remove()


@pytest.fixture
def proxy(tmp_path):
    """configurable-http-proxy on this machine, started by the test (the chart's proxy is a pod of its own)."""
    ports = {"port": free_port(), "api_port": free_port(), "token": secrets.token_hex(16)}
    log = open(tmp_path / "proxy.log", "ab")
    proc = subprocess.Popen(
        [
            str(BIN / "configurable-http-proxy"),
            "--ip",
            "127.0.0.1",
            "--port",
            str(ports["port"]),
            "--api-ip",
            "127.0.0.1",
            "--api-port",
            str(ports["api_port"]),
        ],
        env=dict(os.environ, CONFIGPROXY_AUTH_TOKEN=ports["token"]),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield ports
    proc.terminate()
    proc.wait(10)


@pytest.mark.timeout(600)
def test_the_hub_image_runs_as_a_pod_with_its_service_account_and_the_inventory_rbac(
    kube, namespace, inventory_role, proxy, postgres_url, tmp_path
):
    ns = namespace
    # the chart's objects for the hub: its ServiceAccount and namespaced Role; ours: the inventory ClusterRole
    kube.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "hub"}})
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {"metadata": {"name": "hub"}, "rules": CHART_HUB_RULES},
    )
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": [{"kind": "ServiceAccount", "name": "hub", "namespace": ns}],
        },
    )
    # what the file grants, and only that: nodes and pods read cluster-wide, nothing written outside the namespace
    assert can(kube, ns, "list", "nodes") and can(kube, ns, "list", "pods")
    assert not can(kube, ns, "create", "pods", "default") and not can(kube, ns, "list", "secrets")
    assert not can(kube, ns, "update", "nodes")

    service_port = free_port()
    config = kube_hub_config(
        tmp_path,
        ns,
        service_port,
        db_url=postgres_url,
        python="python",
        service_config_path=f"{CONFIG_DIR}/gpu_service_config.py",
    )
    hub = PodHub(tmp_path / "hub", config, kube, ns, proxy)
    # the pod's own paths and the proxy the test started; later settings win over the tests' base config
    hub.config_file.write_text(
        hub.config_file.read_text()
        + f"""
c.JupyterHub.bind_url = {hub.url!r}
c.JupyterHub.hub_ip = {NODE_IP!r}
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy["api_port"]}"
c.ConfigurableHTTPProxy.auth_token = {proxy["token"]!r}
c.ConfigurableHTTPProxy.pid_file = "/srv/jupyterhub/proxy.pid"
"""
    )
    kube.create(
        f"/api/v1/namespaces/{ns}/configmaps",
        {
            "metadata": {"name": "hub"},
            "data": {
                "jupyterhub_config.py": hub.config_file.read_text(),
                "gpu_service_config.py": (tmp_path / "gpu_service_config.py").read_text(),
            },
        },
    )
    kube.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": "hub", "labels": {"component": "hub"}},
            "spec": {
                "serviceAccountName": "hub",
                # see the module's docstring: the API server is on loopback, without a Service address
                "hostNetwork": True,
                "restartPolicy": "Never",
                # the test cluster's only node is the GPU node; a real cluster runs the hub on a CPU node
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "hub",
                        "image": HUB_IMAGE,
                        "imagePullPolicy": "Never",
                        "args": ["jupyterhub", "--config", f"{CONFIG_DIR}/jupyterhub_config.py", "--debug"],
                        "env": [
                            # in-cluster configuration, pointed at the API server's real address (no kube-proxy here)
                            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                            {"name": "KUBERNETES_SERVICE_PORT", "value": API.rsplit(":", 1)[1]},
                        ],
                        "volumeMounts": [
                            {"name": "config", "mountPath": CONFIG_DIR},
                            {"name": "data", "mountPath": "/srv/jupyterhub"},
                        ],
                    }
                ],
                "volumes": [{"name": "config", "configMap": {"name": "hub"}}, {"name": "data", "emptyDir": {}}],
            },
        },
    )
    try:
        wait_pod(kube, ns, "hub", timeout=120)
        wait_for(hub._up, timeout=120, what=f"the hub pod's API at {hub.api_url}")
    except AssertionError:
        raise AssertionError(f"the hub pod did not come up:\n{hub.log_text()[-4000:]}") from None
    # the API server's admission gave the pod its service account's token (a projected volume we did not write)
    pod = kube.pod(ns, "hub")
    token_volumes = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    assert token_volumes and "projected" in token_volumes[0], pod["spec"]["volumes"]
    # the recipe's USER 1000: the hub process runs unprivileged
    assert wait_for(hub_process_uid, timeout=10, what="the hub process") == 1000

    try:
        hub.create_users("alice")
        assert hub.start_server("alice").status_code in (201, 202)
        hub.wait_ready("alice", timeout=180)
        # the pod the hub made with its service account: bound to the GPU node, a device the kubelet chose
        user_pod = wait_pod(kube, ns, hub.server("alice")["state"]["pod_name"])
        assert user_pod["spec"]["nodeName"] == NODE
        devices = wait_for(lambda: pod_devices(user_pod["metadata"]["uid"]), timeout=10, what="the device")
        headers = token(hub, "alice")
        stats = requests.get(f"{hub.url}/user/alice/gpu/api/v1/stats?history=0", headers=headers, timeout=15)
        assert [g["uuid"] for g in stats.json()["gpus"]] == devices
        # the spawner in the hub pod recorded the session in PostgreSQL, and the gpu service in the same pod
        # (behind the proxy, as the servers' extension and the Lab reach it) meters it from there
        (record,) = Ledger(postgres_url).sessions(user="alice")
        assert record.stopped is None and record.simulated and record.gpu_count == 1
        me = requests.get(f"{hub.url}/services/gpu/api/v1/me", headers=headers, timeout=15)
        assert me.status_code == 200, me.text
        assert [s["id"] for s in me.json()["active_sessions"]] == [record.id], me.json()

        hub.stop_server("alice")
        hub.wait_stopped("alice", timeout=90)
        wait_for(lambda: kube.pod(ns, user_pod["metadata"]["name"]) is None, timeout=90, what="the user pod to go")
        (record,) = Ledger(postgres_url).sessions(user="alice")
        assert record.stopped is not None and record.stop_reason == "stopped"
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- the hub pod's log:\n{hub.log_text()[-4000:]}") from None
