"""GPUKubeSpawner without a cluster: KubeSpawner's own get_pod_manifest() for each kind of profile.

No Kubernetes cluster can run on these machines. The spawner here is the real
GPUKubeSpawner of a real JupyterHub ``User`` (JupyterHub's ORM in an in-memory
sqlite), with KubeSpawner's real configuration and manifest code. Only two
things stand in for the cluster, and both are named for it:

- the inventory's fetch coroutine returns Node and Pod JSON as the API would;
- ``RecordingKubeSpawner._start`` (KubeSpawner's coroutine that talks to the
  API server) records the pod KubeSpawner would create instead of creating it.

The pods are checked as whole dicts and against the Kubernetes API schema (the
kubernetes client's models, with client-side validation).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from jupyterhub import orm
from jupyterhub.objects import Hub
from jupyterhub.spawner import SpawnException
from jupyterhub.user import User
from traitlets.config import Config

from jupyterhub_gpu.spawners.kube.objects import validate_object
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner

pytestmark = pytest.mark.timeout(60)

A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"
IMAGE = "registry.example.edu/jupyterhub-gpu/tensorflow:2.15"
GIB = 1024**3

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: unused}}]
contexts: [{name: none, context: {cluster: none, user: none, namespace: jhub}}]
current-context: none
"""


@pytest.fixture(autouse=True)
async def kubeconfig(tmp_path_factory, monkeypatch):
    """KubeSpawner loads a client configuration when constructed; this one points nowhere and is never used."""
    from kubernetes_asyncio.config import kube_config

    path = tmp_path_factory.getbasetemp() / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    # the client reads $KUBECONFIG when it is imported, which may have happened already
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    yield
    from kubespawner import clients

    for key, client in list(clients._client_cache.items()):
        if key[0] is asyncio.get_running_loop():
            await client.api_client.close()


def gpu_node(name, product, allocatable, memory=None):
    labels = {"nvidia.com/gpu.product": product}
    if memory:
        labels["nvidia.com/gpu.memory"] = str(memory)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


class Cluster:
    """The inventory's fetch coroutine: the API's Node and Pod JSON of a small GPU cluster."""

    def __init__(self):
        self.nodes = [
            gpu_node("a100-1", A100_40, {"nvidia.com/gpu": "4"}, memory=40960),
            gpu_node("a100-2", A100_80, {"nvidia.com/gpu": "8"}, memory=81920),
            gpu_node("a100-mig", A100_80, {"nvidia.com/mig-1g.10gb": "7"}),
            gpu_node("t4-1", T4, {"nvidia.com/gpu": "2"}, memory=15360),
        ]
        self.pods = []
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        return list(self.nodes), list(self.pods)

    def occupy_t4s(self):
        self.pods = [
            {
                "metadata": {"name": "train"},
                "spec": {"nodeName": "t4-1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
                "status": {"phase": "Running"},
            }
        ]


PROFILES = [
    {
        "slug": "t4",
        "display_name": "1× T4",
        "gpu_model": "T4",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "3.00",
        "cpu_limit": 4,
        "mem_limit": "16G",
        "default": True,
    },
    {
        "slug": "mig",
        "display_name": "A100 slice",
        "gpu_model": "A100 MIG 1g.10gb",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "2.40",
        "cpu_limit": 2,
        "mem_limit": "8G",
    },
    {
        "slug": "a100x2",
        "display_name": "2× A100",
        "gpu_model": "A100",
        "gpu_count": 2,
        "image": IMAGE,
        "price_per_gpu_hour": "15.00",
        "cpu_limit": 16,
        "mem_limit": "128G",
        "allowed_groups": ["thesis"],
    },
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "gpu_count": 0,
        "image": IMAGE,
        "price_per_hour": "0.60",
        "cpu_limit": 0.5,
        "mem_limit": "4G",
    },
]


class RecordingKubeSpawner(GPUKubeSpawner):
    """Stands in for the API server only: records the pod KubeSpawner would create (no cluster here)."""

    async def _start(self):
        self.created_pod = await self.get_pod_manifest()
        return ("10.0.0.5", 8888)


def make_config(cluster, **extra) -> Config:
    c = Config()
    c.GPUKubeSpawner.profiles = PROFILES
    c.GPUKubeSpawner.currency = "CNY"

    async def fetch():  # a function: traitlets deep-copies config values, and a function is kept as is
        return await cluster()

    c.GPUKubeSpawner.inventory_fetch = fetch
    c.GPUKubeSpawner.inventory_ttl = 0.05
    c.GPUKubeSpawner.datasets_claim = "lab-datasets"
    c.GPUKubeSpawner.queue_timeout = 5
    c.KubeSpawner.events_enabled = False  # KubeSpawner's progress would watch the API's events
    # what Zero to JupyterHub sets for every user pod
    c.KubeSpawner.extra_labels = {"hub.jupyter.org/network-access-hub": "true"}
    c.KubeSpawner.tolerations = [
        {"key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user", "effect": "NoSchedule"}
    ]
    for key, value in extra.items():
        setattr(c.GPUKubeSpawner, key, value)
    return c


def make_spawner(config: Config, name="alice", groups=(), cls=RecordingKubeSpawner):
    """The spawner of a real JupyterHub User, as the hub makes it (JupyterHub's ORM in memory)."""
    db = orm.new_session_factory("sqlite://")()
    user = orm.User(name=name)
    db.add(user)
    for g in groups:
        group = orm.Group(name=g)
        db.add(group)
        user.groups.append(group)
    db.commit()
    hub = Hub(ip="127.0.0.1", port=8081, base_url="/hub/")
    settings = {"spawner_class": cls, "config": config, "db": db, "hub": hub, "domain": "", "statsd": None}
    return User(user, settings).spawners[""]


async def spawn(spawner, profile: str):
    """The hub's spawn sequence: options, pre-spawn hook (validation, budget), start."""
    spawner.user_options = {"profile": profile}
    await spawner.run_pre_spawn_hook()
    return await spawner.start()


def serialized(pod) -> dict:
    from kubernetes_asyncio.client import ApiClient

    return ApiClient().sanitize_for_serialization(pod)


def check_schema(data: dict, kind: str) -> None:
    """Validate against the API schema twice: our strict walk, and the kubernetes client's own models."""
    validate_object(data, kind)
    from kubernetes import client

    api = client.ApiClient(client.Configuration())
    assert api.configuration.client_side_validation
    model = api.deserialize(json.dumps(data), kind, "application/json")
    assert api.sanitize_for_serialization(model) == data


POD_SECURITY = {
    "fsGroup": 100,
    "runAsGroup": 100,
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "runAsGroup": 100,
    "runAsNonRoot": True,
    "runAsUser": 1000,
}
Z2JH_TOLERATION = {"effect": "NoSchedule", "key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user"}
GPU_TOLERATION = {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}
VOLUMES = [
    {"name": "work", "persistentVolumeClaim": {"claimName": "claim-alice"}},
    {"name": "datasets", "persistentVolumeClaim": {"claimName": "lab-datasets", "readOnly": True}},
]
MOUNTS = [
    {"mountPath": "/home/jovyan/work", "name": "work"},
    {"mountPath": "/home/jovyan/datasets", "name": "datasets", "readOnly": True},
]


def expected_spec(resources, tolerations, node_selector=None, affinity=None) -> dict:
    spec = {
        "automountServiceAccountToken": False,
        "containers": [
            {
                "args": [
                    "jupyterhub-singleuser",
                    "--MappingKernelManager.cull_idle_timeout=1800",
                    "--MappingKernelManager.cull_interval=60",
                    "--MappingKernelManager.cull_connected=True",
                    "--MappingKernelManager.cull_busy=False",
                ],
                "image": IMAGE,
                "lifecycle": {},  # KubeSpawner's lifecycle_hooks, empty
                "name": "notebook",
                "ports": [{"containerPort": 8888, "name": "notebook-port"}],
                "resources": resources,
                "securityContext": CONTAINER_SECURITY,
                "volumeMounts": MOUNTS,
            }
        ],
        "imagePullSecrets": [],
        "restartPolicy": "OnFailure",
        "securityContext": POD_SECURITY,
        "tolerations": tolerations,
        "volumes": VOLUMES,
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    return spec


def split_env(pod: dict) -> tuple[dict, dict]:
    """(the pod without its env, the env as a dict)."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.pop("env")}
    return pod, env


def expected_gpu_env(spawner, *, profile, name, model, rate, count, resource, cpu, mem) -> dict:
    session = spawner.gpu_session
    env = {
        "JUPYTERHUB_GPU_PROFILE": profile,
        "JUPYTERHUB_GPU_PROFILE_NAME": name,
        "JUPYTERHUB_GPU_MODEL": model,
        "JUPYTERHUB_GPU_RATE_PER_MINUTE": rate,
        "JUPYTERHUB_GPU_CURRENCY": "CNY",
        "JUPYTERHUB_GPU_CURRENCY_SYMBOL": "",  # none set: the Lab writes its language's symbol
        "JUPYTERHUB_GPU_LANGUAGE": "en",  # no request: English
        "JUPYTERHUB_GPU_SESSION_ID": session["session_id"],
        "JUPYTERHUB_GPU_STARTED": session["started"],
        "JUPYTERHUB_GPU_SIMULATED": "0",
        "JUPYTERHUB_GPU_READER": "nvml",
        "JUPYTERHUB_GPU_DEVICES": "",
        "JUPYTERHUB_GPU_COUNT": str(count),
        # the group that pays, kept for a hub that restarts without the spawner's state
        **({"JUPYTERHUB_GPU_POOL": session["pool"]} if session.get("pool") else {}),
        "CPU_LIMIT": cpu,
        "MEM_LIMIT": mem,
    }
    if count:
        env.update(
            JUPYTERHUB_GPU_DEVICE_INFO="[]",
            JUPYTERHUB_GPU_DEVICE_DISCOVERY="nvml",
            JUPYTERHUB_GPU_RESOURCE=resource,
        )
    else:
        env.update(JUPYTERHUB_GPU_DEVICE_INFO="[]", NVIDIA_VISIBLE_DEVICES="void", CUDA_VISIBLE_DEVICES="")
    return env


def gpu_env_of(env: dict) -> dict:
    keys = ("JUPYTERHUB_GPU_", "NVIDIA_", "CUDA_", "CPU_LIMIT", "MEM_LIMIT")
    return {k: v for k, v in env.items() if k.startswith(keys)}


async def test_one_gpu_profile():
    cluster = Cluster()
    spawner = make_spawner(make_config(cluster))
    assert await spawn(spawner, "t4") == ("10.0.0.5", 8888)
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        {
            "limits": {"cpu": "4", "memory": str(16 * GIB), "nvidia.com/gpu": "1"},
            "requests": {"cpu": "4", "memory": str(16 * GIB), "nvidia.com/gpu": "1"},
        },
        [Z2JH_TOLERATION, GPU_TOLERATION],
        node_selector={"nvidia.com/gpu.product": T4},
    )
    assert pod["metadata"]["labels"]["jupyterhub-gpu/session-id"] == spawner.gpu_session["session_id"]
    assert {k: v for k, v in pod["metadata"]["labels"].items() if "gpu" in k or "network" in k} == {
        "hub.jupyter.org/network-access-hub": "true",
        "jupyterhub-gpu/managed": "true",
        "jupyterhub-gpu/profile": "t4",
        "jupyterhub-gpu/session-id": spawner.gpu_session["session_id"],
    }
    assert gpu_env_of(env) == expected_gpu_env(
        spawner,
        profile="t4",
        name="1× T4",
        model="T4",
        rate="0.05",
        count=1,
        resource="nvidia.com/gpu",
        cpu="4.0",
        mem=str(16 * GIB),
    )
    # the session's "devices" only count GPUs: the device plugin picks the real ones
    assert spawner.gpu_session["devices"] == ["nvidia.com/gpu:0"]


async def test_mig_slice_profile():
    spawner = make_spawner(make_config(Cluster()))
    await spawn(spawner, "mig")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        {
            "limits": {"cpu": "2", "memory": str(8 * GIB), "nvidia.com/mig-1g.10gb": "1"},
            "requests": {"cpu": "2", "memory": str(8 * GIB), "nvidia.com/mig-1g.10gb": "1"},
        },
        [Z2JH_TOLERATION, GPU_TOLERATION],
        # the only A100 product that offers the slice
        node_selector={"nvidia.com/gpu.product": A100_80},
    )
    assert gpu_env_of(env)["JUPYTERHUB_GPU_RESOURCE"] == "nvidia.com/mig-1g.10gb"
    assert spawner.gpu_session["devices"] == ["nvidia.com/mig-1g.10gb:0"]


async def test_several_gpus_profile_and_its_ledger_session(tmp_path):
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = make_spawner(make_config(Cluster(), ledger_db_url=ledger_url), groups=["thesis"])
    await spawn(spawner, "a100x2")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        {
            "limits": {"cpu": "16", "memory": str(128 * GIB), "nvidia.com/gpu": "2"},
            "requests": {"cpu": "16", "memory": str(128 * GIB), "nvidia.com/gpu": "2"},
        },
        [Z2JH_TOLERATION, GPU_TOLERATION],
        affinity={
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100_40, A100_80]}
                    ]
                }
            ]
        },
    )
    assert gpu_env_of(env) == expected_gpu_env(
        spawner,
        profile="a100x2",
        name="2× A100",
        model="A100",
        rate="0.5",
        count=2,
        resource="nvidia.com/gpu",
        cpu="16.0",
        mem=str(128 * GIB),
    )
    # the ledger counts the session's GPUs (GPU-hour budgets) from its placeholders
    from jupyterhub_gpu.ledger.store import shared_ledger

    record = shared_ledger(ledger_url).get_session(spawner.gpu_session["session_id"])
    assert (record.user, record.profile, record.gpu_count) == ("alice", "a100x2", 2)
    assert record.gpu_list == ["nvidia.com/gpu:0", "nvidia.com/gpu:1"]


async def test_cpu_only_profile():
    spawner = make_spawner(make_config(Cluster()))
    await spawn(spawner, "cpu")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    # no GPU resource, no GPU toleration, no GPU node selection
    assert pod["spec"] == expected_spec(
        {
            "limits": {"cpu": "500m", "memory": str(4 * GIB)},
            "requests": {"cpu": "500m", "memory": str(4 * GIB)},
        },
        [Z2JH_TOLERATION],
    )
    assert gpu_env_of(env) == expected_gpu_env(
        spawner,
        profile="cpu",
        name="CPU only",
        model="",
        rate="0.01",
        count=0,
        resource="",
        cpu="0.5",
        mem=str(4 * GIB),
    )
    assert spawner.gpu_session["devices"] == []


async def test_admin_extras_cannot_weaken_the_pod():
    c = make_config(Cluster())
    c.KubeSpawner.uid = 0
    c.KubeSpawner.privileged = True
    c.KubeSpawner.extra_resource_limits = {"nvidia.com/gpu": "8"}
    c.KubeSpawner.extra_container_config = {"securityContext": {"privileged": True, "runAsUser": 0}}
    c.KubeSpawner.extra_pod_config = {"hostPID": True, "hostNetwork": True}
    c.KubeSpawner.environment = {"NVIDIA_VISIBLE_DEVICES": "all"}
    c.KubeSpawner.volumes = [{"name": "scratch", "emptyDir": {}}]
    c.KubeSpawner.volume_mounts = [{"name": "scratch", "mountPath": "/scratch"}]
    spawner = make_spawner(c)
    await spawn(spawner, "cpu")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    spec = pod["spec"]
    assert "hostPID" not in spec and "hostNetwork" not in spec
    assert spec["securityContext"] == POD_SECURITY
    container = spec["containers"][0]
    assert container["securityContext"] == CONTAINER_SECURITY
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": str(4 * GIB)}
    assert {e["name"]: e["value"] for e in container["env"]}["NVIDIA_VISIBLE_DEVICES"] == "void"
    # the admin's own extra volume stays, after ours
    assert spec["volumes"] == [*VOLUMES, {"name": "scratch", "emptyDir": {}}]
    assert container["volumeMounts"] == [*MOUNTS, {"name": "scratch", "mountPath": "/scratch"}]


async def test_pvc_manifest_validates():
    spawner = make_spawner(make_config(Cluster(), storage_capacity="20Gi"))
    pvc = serialized(spawner.get_pvc_manifest())
    check_schema(pvc, "V1PersistentVolumeClaim")
    assert (pvc["metadata"]["name"], pvc["spec"]["resources"], pvc["spec"]["accessModes"]) == (
        "claim-alice",
        {"requests": {"storage": "20Gi"}},
        ["ReadWriteOnce"],
    )


async def test_form_counts_come_from_the_cached_cluster_inventory():
    cluster = Cluster()
    c = make_config(cluster, inventory_ttl=60)
    spawner = make_spawner(c, groups=["thesis"])
    # our form, not KubeSpawner's profile_list form, is the one the hub renders
    assert spawner.options_form == spawner._render_gpu_options_form
    assert spawner.options_from_form == spawner._gpu_options_from_form
    forms = [await spawner.options_form(spawner) for _ in range(3)]
    assert cluster.calls == 1  # cached: never an API call per request
    form = forms[-1]
    for line in (
        # each display name once ("1× T4", "CPU only"); the line under it drops what the name already says
        "15 GB — CN¥0.05/min — 2 of 2 free",
        "1× A100 MIG 1g.10gb — CN¥0.04/min — 7 of 7 slices free",
        "40 GB — CN¥0.50/min — 12 of 12 free",
        "CN¥0.01/min",
    ):
        assert line in form
    assert form.count("1× T4") == 1 and form.count("CPU only") == 1
    assert "Simulated" not in form
    # a student outside "thesis" does not see the A100 profile
    assert "2× A100" not in await make_spawner(c, name="bob")._render_gpu_options_form()


async def test_bad_options_are_refused_and_nothing_is_claimed():
    spawner = make_spawner(make_config(Cluster()))
    for options, message in (
        ({"profile": "h100"}, "Unknown profile 'h100'"),
        ({"profile": "a100x2"}, "reserved for other groups"),
        ({"profile": "t4", "image": "evil:latest"}, "Unexpected option"),
        ({"profile": ["t4"]}, "must be a profile name"),
    ):
        spawner.user_options = options
        with pytest.raises(SpawnException, match=message):
            await spawner.run_pre_spawn_hook()
    assert spawner.allocator.held_by(spawner._gpu_key) is None
    assert not hasattr(spawner, "created_pod")


async def test_a_spawn_waits_for_a_free_gpu_in_the_cluster_and_reports_its_place():
    cluster = Cluster()
    cluster.occupy_t4s()
    spawner = make_spawner(make_config(cluster))
    start = asyncio.ensure_future(spawn(spawner, "t4"))
    events = []

    async def follow():
        async for event in spawner.progress():
            events.append(event["message"])

    follower = asyncio.ensure_future(follow())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while "Waiting for a free T4 — position 1 of 1" not in events:
        assert loop.time() < deadline, events
        await asyncio.sleep(0.01)
    assert not start.done()
    cluster.pods = []  # the other job ends: the next refresh shows the GPUs free
    assert await asyncio.wait_for(start, 10) == ("10.0.0.5", 8888)
    await asyncio.wait_for(follower, 5)  # KubeSpawner's events are off here, so progress ends
    assert events[:2] == ["Spawning server...", "Waiting for a free T4 — position 1 of 1"]
    assert events[-1] == "Asking Kubernetes for 1× nvidia.com/gpu on a node with Tesla-T4"
    # the claim is released with the server's state
    assert spawner.allocator.held_by(spawner._gpu_key) is not None
    spawner.clear_state()
    assert spawner.allocator.held_by(spawner._gpu_key) is None


async def test_state_survives_a_hub_restart():
    cluster = Cluster()
    spawner = make_spawner(make_config(cluster))
    await spawn(spawner, "t4")
    state = spawner.get_state()
    assert state["gpu"]["devices"] == ["nvidia.com/gpu:0"] and state["pod_name"] == "jupyter-alice"
    restarted = make_spawner(make_config(cluster))
    restarted.load_state(state)
    assert restarted.gpu_session == spawner.gpu_session


def test_startup_check_needs_no_host_gpu():
    # gpu_backend stays "nvml" by default and there is no GPU here: the check must not read it
    assert GPUKubeSpawner.gpu_check_config(make_config(Cluster())) == []
    bad = Config()
    bad.GPUKubeSpawner.profiles = [{"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": 3}]
    bad.GPUKubeSpawner.profile_list = [{"display_name": "x"}]
    bad.GPUKubeSpawner.gpu_node_products = {"H100": ["NVIDIA-H100-80GB-HBM3"]}
    problems = GPUKubeSpawner.gpu_check_config(bad)
    assert len(problems) == 2
    assert "not KubeSpawner's 'profile_list'" in problems[0]
    assert problems[1].startswith("profile 'a100': ")
    for key, value, message in (
        ("server_uid", 0, "server_uid must be a non-root uid"),
        ("inventory_ttl", 0, "inventory_ttl must be between"),
        ("datasets_claim", "Bad_Name", "datasets_claim must be a Kubernetes object name"),
        ("gpu_node_products", {"A100": []}, "gpu_node_products must map"),
        ("inventory_fetch", "https://k8s.example.edu", "inventory_fetch must be an async function"),
    ):
        c = make_config(Cluster(), **{key: value})
        assert [p for p in GPUKubeSpawner.gpu_check_config(c) if message in p], (key, value)
    unused = make_config(Cluster(), gpu_node_products={"H100": ["NVIDIA-H100-80GB-HBM3"]})
    assert GPUKubeSpawner.gpu_check_config(unused) == ["gpu_node_products names 'H100', which no GPU profile uses"]


def test_the_hub_startup_check_takes_the_kubernetes_check_and_publishes_prices(tmp_path):
    from jupyterhub.app import JupyterHub

    from jupyterhub_gpu.ledger.store import shared_ledger
    from jupyterhub_gpu.spawners.startup import startup_check as _startup_check

    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    app = JupyterHub(config=make_config(Cluster(), ledger_db_url=ledger_url))
    app.spawner_class = GPUKubeSpawner
    _startup_check(app)  # no GPU and no NVML here: a host check would stop the hub
    assert sorted(p["slug"] for p in shared_ledger(ledger_url).pricing()) == ["a100x2", "cpu", "mig", "t4"]
    app = JupyterHub(config=make_config(Cluster(), server_uid=0))
    app.spawner_class = GPUKubeSpawner
    with pytest.raises(SystemExit):
        _startup_check(app)


class TimedOutKubeSpawner(GPUKubeSpawner):
    """KubeSpawner's start built and asked for the pod, then gave up waiting for it (its own timeout)."""

    async def _start(self):
        self.created_pod = await self.get_pod_manifest()
        raise TimeoutError("pod jhub/jupyter-alice did not start in 180 seconds!")


async def test_a_pod_asked_for_by_a_start_that_failed_is_deleted(monkeypatch):
    """The pod would hold its GPU, unbilled, once the hub forgets the spawn: the failed start deletes it."""
    from kubespawner import KubeSpawner

    deleted = []

    async def stop(self, now=False):
        deleted.append((self.pod_name, now))

    monkeypatch.setattr(KubeSpawner, "stop", stop)
    cluster = Cluster()
    spawner = make_spawner(make_config(cluster), cls=TimedOutKubeSpawner)
    with pytest.raises(TimeoutError):
        await spawn(spawner, "t4")
    assert spawner.created_pod is not None
    assert deleted == [("jupyter-alice", True)]
    assert not spawner.gpu_session  # its GPU is back in the cluster's count

    # a start that fails before any pod was built (a refused image) deletes nothing
    class Refused(TimedOutKubeSpawner):
        async def gpu_check_image(self, profile):
            raise SpawnException("no such image", reason="image")

    deleted.clear()
    with pytest.raises(SpawnException):
        await spawn(make_spawner(make_config(cluster), cls=Refused), "t4")
    assert deleted == []
