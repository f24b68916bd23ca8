"""config/kubernetes: the Zero to JupyterHub values, the hub's inventory RBAC and the hub image recipe.

No cluster and no Helm here: the values are read as Helm would pass them, the
Python the chart runs (``hub.config``, ``hub.loadRoles``, ``hub.extraConfig``)
is applied to a traitlets Config the way the chart's ``jupyterhub_config.py``
does, and the Kubernetes objects in them are checked against the API models.
"""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import tomllib
import yaml
from traitlets.config import Config

from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
from jupyterhub_gpu.spawners.kube.objects import unit_resource, validate_object
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner
from jupyterhub_gpu.spawners.profiles import parse_profiles

ROOT = Path(__file__).resolve().parents[4]
KUBE = ROOT / "config" / "kubernetes"
DB_URL = "postgresql+psycopg://gpu:secret@postgres.db.svc:5432/jupyterhub_gpu"
POD_IP = "10.42.0.17"


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((KUBE / "values.yaml").read_text())


@pytest.fixture
def hub_config(values, monkeypatch) -> Config:
    """The hub's config as the chart builds it, with the env the chart's hub pod gets from values.yaml."""
    env = values["hub"]["extraEnv"]
    assert env["JUPYTERHUB_GPU_DB_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "jupyterhub-gpu-ledger",
        "key": "db-url",
    }
    assert env["POD_IP"]["valueFrom"]["fieldRef"] == {"fieldPath": "status.podIP"}
    monkeypatch.setenv("JUPYTERHUB_GPU_DB_URL", DB_URL)
    monkeypatch.setenv("POD_IP", POD_IP)
    c = Config()
    c.JupyterHub.spawner_class = "kubespawner"
    c.JupyterHub.services = []
    c.JupyterHub.load_roles = [{**role, "name": name} for name, role in values["hub"]["loadRoles"].items()]
    singleuser = values["singleuser"]
    c.KubeSpawner.cmd = singleuser["cmd"]
    c.KubeSpawner.uid = singleuser["uid"]
    c.KubeSpawner.fs_gid = singleuser["fsGid"]
    c.KubeSpawner.profile_list = singleuser["profileList"]
    for section, settings in values["hub"]["config"].items():
        c[section].update(settings)
    for name in sorted(values["hub"]["extraConfig"]):
        exec(compile(values["hub"]["extraConfig"][name], f"<extraConfig {name}>", "exec"), {"c": c})
    return c


def test_the_spawner_is_gpu_kube_and_its_configuration_passes_the_startup_check(values, hub_config):
    assert hub_config.JupyterHub.spawner_class == "gpu-kube"
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    target = entry_points["jupyterhub.spawners"]["gpu-kube"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is GPUKubeSpawner
    assert GPUKubeSpawner.gpu_check_config(hub_config) == []
    spawner = hub_config.GPUKubeSpawner
    assert spawner.ledger_db_url == DB_URL
    assert spawner.gpu_service_url == "http://hub:10101/services/gpu/"
    profiles = parse_profiles(spawner.profiles)
    kinds = {
        p.slug: (unit_resource(p.gpu_model, share=p.gpu_share, mig=p.mig)[0] if p.gpu_count else None, p.gpu_count)
        for p in profiles
    }
    assert kinds == {
        "t4": ("nvidia.com/gpu", 1),
        "a100": ("nvidia.com/gpu", 1),
        "a100x2": ("nvidia.com/gpu", 2),
        "mig-1g": ("nvidia.com/mig-1g.10gb", 1),
        "cpu": (None, 0),
    }
    # one image for every profile: the single-user image the chart also knows
    image = values["singleuser"]["image"]
    assert {p.image for p in profiles} == {f"{image['name']}:{image['tag']}"}


def test_the_gpu_service_is_a_managed_service_with_least_privilege(values, hub_config):
    [service] = hub_config.JupyterHub.services
    config_file = values["hub"]["extraFiles"]["gpu-service-config"]["mountPath"]
    assert service == {
        "name": "gpu",
        "url": f"http://{POD_IP}:10101",
        "command": [sys.executable, "-m", "jupyterhub_gpu.service", f"--config={config_file}"],
        "environment": {"JUPYTERHUB_GPU_DB_URL": DB_URL},
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
        "display": True,
    }
    assert hub_config.JupyterHub.custom_scopes == CUSTOM_SCOPES
    roles = {r["name"]: r for r in hub_config.JupyterHub.load_roles}
    assert roles["gpu-service"] == {
        "name": "gpu-service",
        "services": ["gpu"],
        "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
    }
    assert roles["user"] == {"name": "user", "scopes": ["self", "access:services!service=gpu"]}
    assert sorted(roles["gpu-admins"]["scopes"]) == sorted(CUSTOM_SCOPES)
    assert set(hub_config.JupyterHub.load_groups) == {
        g for p in hub_config.GPUKubeSpawner.profiles for g in p.get("allowed_groups", [])
    } | {"cs231n"}


def test_the_service_config_file_loads_and_agrees_with_the_spawner(values, hub_config, tmp_path, monkeypatch):
    from jupyterhub_gpu.service.app import GPUService

    path = tmp_path / "gpu_service_config.py"
    path.write_text(values["hub"]["extraFiles"]["gpu-service-config"]["stringData"])
    app = GPUService()
    app.load_config_file(str(path))
    assert app.db_url == DB_URL == hub_config.GPUKubeSpawner.ledger_db_url
    assert app.currency == hub_config.GPUKubeSpawner.currency
    assert app.timezone == hub_config.GPUKubeSpawner.budget_timezone
    assert app.db_url.startswith("postgresql+psycopg://")  # PostgreSQL on Kubernetes


def test_the_network_path_to_the_service_is_open_on_one_port(values, hub_config):
    port = urlparse(hub_config.JupyterHub.services[0]["url"]).port
    service_url = urlparse(hub_config.GPUKubeSpawner.gpu_service_url)
    assert (service_url.hostname, service_url.port) == ("hub", port)  # the chart's hub Service
    [extra_port] = values["hub"]["service"]["extraPorts"]
    validate_object(extra_port, "V1ServicePort")
    assert extra_port["port"] == extra_port["targetPort"] == port
    for rule in values["hub"]["networkPolicy"]["ingress"]:
        validate_object(rule, "V1NetworkPolicyIngressRule")
    assert [p["port"] for r in values["hub"]["networkPolicy"]["ingress"] for p in r["ports"]] == [port]
    for rule in values["singleuser"]["networkPolicy"]["egress"]:
        validate_object(rule, "V1NetworkPolicyEgressRule")
    [egress] = values["singleuser"]["networkPolicy"]["egress"]
    assert egress["to"][0]["podSelector"]["matchLabels"] == {"app": "jupyterhub", "component": "hub"}
    assert [p["port"] for p in egress["ports"]] == [port]
    for name, spec in values["hub"]["extraEnv"].items():
        validate_object({"name": name, **spec}, "V1EnvVar")


def test_single_user_settings_leave_storage_limits_and_culling_to_jupyterhub_gpu(values, hub_config):
    singleuser = values["singleuser"]
    assert singleuser["storage"]["type"] == "none"  # GPUKubeSpawner mounts the PVC at /home/jovyan/work
    assert singleuser["profileList"] == []
    assert singleuser["cmd"] == "jupyterhub-singleuser"
    traits = GPUKubeSpawner.class_traits()
    assert (singleuser["uid"], singleuser["fsGid"]) == (traits["server_uid"].default(), traits["server_gid"].default())
    assert singleuser["allowPrivilegeEscalation"] is False
    assert singleuser["cpu"] == {"guarantee": None, "limit": None}
    assert singleuser["memory"] == {"guarantee": None, "limit": None}
    assert values["cull"]["enabled"] is False  # the service culls, GPU-aware and with a warning


def test_the_inventory_rbac_is_read_only_and_binds_the_hub():
    role, binding = yaml.safe_load_all((KUBE / "hub-gpu-inventory-rbac.yaml").read_text())
    validate_object(role, "V1ClusterRole")
    validate_object(binding, "V1ClusterRoleBinding")
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]} == {
        (("nodes",), ("get", "list")),
        (("pods",), ("list",)),
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]


def test_the_kueue_rbac_grants_the_reads_of_the_spawner_and_the_service_and_the_quota_movers_patch():
    read, read_binding, quota, quota_binding = yaml.safe_load_all((KUBE / "hub-kueue-rbac.yaml").read_text())
    for role, binding in ((read, read_binding), (quota, quota_binding)):
        validate_object(role, "V1ClusterRole")
        validate_object(binding, "V1ClusterRoleBinding")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hub", "namespace": "jhub"}]

    def granted(role) -> set[tuple[str, str, str]]:
        return {
            (group, resource, verb)
            for rule in role["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    # what the spawner (kueue_mode.py), the service's pages (feeds/kueue.py) and the doctor (doctor/kueue.py) ask
    needed = {
        ("kueue.x-k8s.io", "localqueues", "get"),
        ("kueue.x-k8s.io", "localqueues", "list"),
        ("kueue.x-k8s.io", "workloads", "list"),
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
        ("kueue.x-k8s.io", "resourceflavors", "get"),
        ("kueue.x-k8s.io", "workloadpriorityclasses", "get"),
        ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get"),
    }
    assert needed <= granted(read)
    assert not {v for _, _, v in granted(read)} - {"get", "list", "watch"}  # read-only
    # the quota mover (service/kueue/cluster.py): list, then a merge patch of each ClusterQueue it moves
    assert granted(quota) == {("kueue.x-k8s.io", "clusterqueues", v) for v in ("get", "list", "patch")}


def test_the_hub_image_installs_the_kubernetes_extra_and_the_postgresql_driver():
    dockerfile = (KUBE / "hub.Dockerfile").read_text()
    assert 'pip install --no-cache-dir "${wheel}[kubernetes]" "psycopg[binary]>=3.1"' in dockerfile
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("jupyterhub-kubespawner") for d in extras["kubernetes"])


def test_the_commented_share_profile_is_valid_once_uncommented(values, hub_config):
    """values.yaml shows a gpu_share profile in comments (it needs time-sliced nodes): it must stay valid."""
    lines = (KUBE / "values.yaml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "# - slug: t4-quarter")
    indent = lines[start].index("#")
    block = []
    for line in lines[start:]:
        if not line.strip().startswith("#") or line.index("#") != indent:
            break
        block.append(line[indent + 2 :])
    (share,) = yaml.safe_load("\n".join(block))
    hub_config.GPUKubeSpawner.profiles = [*hub_config.GPUKubeSpawner.profiles, share]
    assert GPUKubeSpawner.gpu_check_config(hub_config) == []
    (profile,) = [p for p in parse_profiles(hub_config.GPUKubeSpawner.profiles) if p.slug == "t4-quarter"]
    assert (profile.gpu_share, profile.unit) == (4, "share")
    assert unit_resource(profile.gpu_model, share=profile.gpu_share)[0] == "nvidia.com/gpu.shared"
    # a quarter of the whole T4's price per hour: priced per share
    (t4,) = [p for p in parse_profiles(hub_config.GPUKubeSpawner.profiles) if p.slug == "t4"]
    assert profile.price_per_gpu_hour * 4 == t4.price_per_gpu_hour
