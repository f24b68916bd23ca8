"""Shared GPUs on Kubernetes: time-sliced shares and MIG slices through GPUKubeSpawner.

As in test_kube_spawner.py, the spawner is the real GPUKubeSpawner of a real JupyterHub ``User``,
with KubeSpawner's own manifest code; only the API server stands in (the inventory's fetch returns
Node and Pod JSON as the API would, with the labels GPU Feature Discovery sets on time-sliced and
MIG nodes, and ``_start`` records the pod instead of creating it).
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from traitlets.log import get_logger

from jupyterhub_gpu.spawners.kube import profiles as kube_profiles
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner
from tests.unit.spawners.kube.test_kube_spawner import (  # noqa: F401  (kubeconfig: KubeSpawner needs a client config)
    GIB,
    GPU_TOLERATION,
    IMAGE,
    Z2JH_TOLERATION,
    check_schema,
    expected_spec,
    gpu_env_of,
    kubeconfig,
    make_config,
    make_spawner,
    serialized,
    spawn,
    split_env,
)

pytestmark = pytest.mark.timeout(60)

T4 = "Tesla-T4"
A100_80 = "NVIDIA-A100-SXM4-80GB"
SHARED = "nvidia.com/gpu.shared"


def gpu_node(name, product, allocatable, labels=None):
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product, **(labels or {})}},
        "spec": {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def time_sliced(name, gpus, replicas, *, renamed=True, memory=15360):
    """A T4 node the GPU Operator time-slices, as GFD labels it (renameByDefault true or false)."""
    labels = {"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.count": str(gpus)}
    if memory:
        labels["nvidia.com/gpu.memory"] = str(memory)
    if renamed:
        return gpu_node(name, T4, {SHARED: str(gpus * replicas), "nvidia.com/gpu": "0"}, labels)
    return gpu_node(name, f"{T4}-SHARED", {"nvidia.com/gpu": str(gpus * replicas)}, labels)


def running(name, node, resource, count):
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"resources": {"limits": {resource: str(count)}}}]},
        "status": {"phase": "Running"},
    }


class Cluster:
    """Two T4 nodes in 4 shares each (5 shares used by another hub), a whole-T4 node and a MIG node."""

    def __init__(self, renamed=True):
        self.nodes = [
            time_sliced("t4-ts-1", 1, 4, renamed=renamed),
            time_sliced("t4-ts-2", 1, 4, renamed=renamed),
            gpu_node("t4-whole", T4, {"nvidia.com/gpu": "2"}, {"nvidia.com/gpu.memory": "15360"}),
            gpu_node(
                "a100-mig",
                A100_80,
                {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu": "0"},
                {"nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig.strategy": "mixed"},
            ),
        ]
        resource = SHARED if renamed else "nvidia.com/gpu"
        self.pods = [
            running("other-1", "t4-ts-1", resource, 3),
            running("other-2", "t4-ts-2", resource, 2),
            running("other-mig", "a100-mig", "nvidia.com/mig-1g.10gb", 1),
        ]
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        return list(self.nodes), list(self.pods)


PROFILES = [
    {
        "slug": "t4-quarter",
        "display_name": "¼ T4",
        "gpu_model": "T4",
        "gpu_count": 1,
        "gpu_share": 4,
        "image": IMAGE,
        "price_per_gpu_hour": "0.75",
        "cpu_limit": 2,
        "mem_limit": "8G",
        "default": True,
    },
    {
        "slug": "a100-slice",
        "display_name": "A100 slice",
        "gpu_model": "A100",
        "mig": "1g.10gb",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "2.40",
        "cpu_limit": 2,
        "mem_limit": "8G",
    },
    {
        "slug": "t4",
        "display_name": "1× T4",
        "gpu_model": "T4",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "3.00",
        "cpu_limit": 4,
        "mem_limit": "16G",
    },
]


def config(cluster, profiles=PROFILES, **extra):
    c = make_config(cluster, **extra)
    c.GPUKubeSpawner.profiles = profiles
    return c


def resources(cpu, mem_gib, resource):
    limits = {"cpu": cpu, "memory": str(mem_gib * GIB), resource: "1"}
    return {"limits": limits, "requests": dict(limits)}


async def test_a_share_profile_asks_for_one_time_sliced_replica_and_carries_its_cap():
    spawner = make_spawner(config(Cluster()))
    events = []
    spawner._gpu_say = lambda progress, message: events.append(str(message))
    await spawn(spawner, "t4-quarter")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        resources("2", 8, SHARED), [Z2JH_TOLERATION, GPU_TOLERATION], node_selector={"nvidia.com/gpu.product": T4}
    )
    gpu_env = gpu_env_of(env)
    # the device plugin picks the replica and sets NVIDIA_VISIBLE_DEVICES itself
    assert "NVIDIA_VISIBLE_DEVICES" not in gpu_env and "CUDA_VISIBLE_DEVICES" not in gpu_env
    assert {k: gpu_env[k] for k in gpu_env if k.startswith(("JUPYTERHUB_GPU_RESOURCE", "JUPYTERHUB_GPU_MEM"))} == {
        "JUPYTERHUB_GPU_RESOURCE": SHARED,
        "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB": "3840",  # the node's 15360 MiB T4 in its 4 replicas
    }
    assert gpu_env["JUPYTERHUB_GPU_SHARE"] == "1/4"
    assert gpu_env["JUPYTERHUB_GPU_DEVICE_DISCOVERY"] == "nvml" and gpu_env["JUPYTERHUB_GPU_COUNT"] == "1"
    assert spawner.gpu_session["devices"] == [f"{SHARED}:0"]
    assert f"Asking Kubernetes for 1× {SHARED} on a node with {T4}" in events


async def test_a_mig_profile_asks_for_its_slice_on_nodes_of_its_gpu_and_carries_the_slice_memory():
    spawner = make_spawner(config(Cluster()))
    await spawn(spawner, "a100-slice")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        resources("2", 8, "nvidia.com/mig-1g.10gb"),
        [Z2JH_TOLERATION, GPU_TOLERATION],
        node_selector={"nvidia.com/gpu.product": A100_80},
    )
    gpu_env = gpu_env_of(env)
    assert (gpu_env["JUPYTERHUB_GPU_RESOURCE"], gpu_env["JUPYTERHUB_GPU_SHARE"]) == (
        "nvidia.com/mig-1g.10gb",
        "mig:1g.10gb",
    )
    assert gpu_env["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"] == "9728"  # GFD's nvidia.com/mig-1g.10gb.memory
    assert spawner.gpu_session["devices"] == ["nvidia.com/mig-1g.10gb:0"]


async def test_a_whole_gpu_profile_carries_no_cap_and_stays_off_time_sliced_nodes():
    spawner = make_spawner(config(Cluster(renamed=False), gpu_shared_resource="nvidia.com/gpu"))
    await spawn(spawner, "t4")
    pod, env = split_env(serialized(spawner.created_pod))
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": T4}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert not {"JUPYTERHUB_GPU_MEMORY_LIMIT_MIB", "JUPYTERHUB_GPU_SHARE"} & set(env)


async def test_without_renaming_a_share_asks_for_nvidia_gpu_on_the_shared_product():
    """renameByDefault: false: the replicas are nvidia.com/gpu, and GFD names the product Tesla-T4-SHARED."""
    spawner = make_spawner(config(Cluster(renamed=False), gpu_shared_resource="nvidia.com/gpu"))
    await spawn(spawner, "t4-quarter")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    pod, env = split_env(pod)
    assert pod["spec"] == expected_spec(
        resources("2", 8, "nvidia.com/gpu"),
        [Z2JH_TOLERATION, GPU_TOLERATION],
        node_selector={"nvidia.com/gpu.product": f"{T4}-SHARED"},
    )
    assert (env["JUPYTERHUB_GPU_SHARE"], env["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"]) == ("1/4", "3840")


async def test_the_form_counts_shares_from_the_nodes_replicas_and_slices_from_their_allocatable():
    cluster = Cluster()
    spawner = make_spawner(config(cluster, inventory_ttl=60))
    form = await spawner.options_form(spawner)
    for line in (
        # each display name is said once; the line under it drops what the name already says (the model)
        "4 GB — CN¥0.0125/min — 3 of 8 shares free",
        "MIG 1g.10gb of an A100 — CN¥0.04/min — 6 of 7 slices free",  # "A100 slice" does not say which slice
        "15 GB — CN¥0.05/min — 2 of 2 free",
    ):
        assert line in form, line
    # one more share taken by another hub's pod: the next refresh shows it
    cluster.pods.append(running("other-3", "t4-ts-2", SHARED, 1))
    await spawner.allocator.inventory.get(force=True)
    assert "3 of 8 shares free" not in await spawner.options_form(spawner)
    assert "2 of 8 shares free" in await spawner.options_form(spawner)


async def test_a_share_waits_in_the_queue_while_every_replica_is_taken():
    cluster = Cluster()
    cluster.pods += [running("other-3", "t4-ts-1", SHARED, 1), running("other-4", "t4-ts-2", SHARED, 2)]
    spawner = make_spawner(config(cluster))
    events = []

    async def follow():
        async for event in spawner.progress():
            events.append(event["message"])

    start = asyncio.ensure_future(spawn(spawner, "t4-quarter"))
    follower = asyncio.ensure_future(follow())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not any("position 1 of 1" in e for e in events):
        assert loop.time() < deadline, events
        await asyncio.sleep(0.01)
    assert "Waiting for a free share 1/4 of a T4 — position 1 of 1" in events
    assert not start.done()
    cluster.pods.pop()  # one of the other hub's servers stops: its replica is free at the next refresh
    assert await asyncio.wait_for(start, 10) == ("10.0.0.5", 8888)
    await asyncio.wait_for(follower, 5)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gpu_shared_resource": "gpu"}, "gpu_shared_resource must be an extended resource name 'domain/name'"),
        ({"gpu_shared_resource": "nvidia.com/mig-1g.10gb"}, "gpu_shared_resource names a MIG slice"),
        ({"gpu_shared_resource": "x.kubernetes.io/gpu"}, "gpu_shared_resource must not be in the kubernetes.io"),
        ({"a100-slice": {"mig": "1g.10gb+me"}}, "profile 'a100-slice': 'mig' '1g.10gb+me' cannot be asked for on Kube"),
        (
            {"a100-slice": {"gpu_model": "A100 MIG 2g.20gb"}},
            "profile 'a100-slice': 'mig' is '1g.10gb' but 'gpu_model' 'A100 MIG 2g.20gb' names the slice '2g.20gb'",
        ),
        ({"t4-quarter": {"gpu_share": 17}}, "profile 't4-quarter': 'gpu_share' must be an integer from 1 to 16"),
    ],
)
def test_the_startup_check_refuses_what_kubernetes_cannot_give(change, message):
    profiles = [dict(p, **change.get(p["slug"], {})) for p in PROFILES]
    c = config(Cluster(), profiles, **{k: v for k, v in change.items() if k.startswith("gpu_")})
    problems = GPUKubeSpawner.gpu_check_config(c)
    assert any(message in p for p in problems), problems
    assert GPUKubeSpawner.gpu_check_config(config(Cluster())) == []


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


async def test_the_hub_start_warns_of_a_share_count_the_nodes_do_not_have(tmp_path):
    from jupyterhub.app import JupyterHub

    from jupyterhub_gpu.spawners.startup import startup_check

    profiles = [
        dict(PROFILES[0], gpu_share=2),
        dict(PROFILES[0], slug="v100-half", gpu_model="V100", gpu_share=2, default=False),
    ]
    app = JupyterHub(config=config(Cluster(), profiles, ledger_db_url=f"sqlite:///{tmp_path}/ledger.sqlite"))
    app.spawner_class = GPUKubeSpawner
    records = Records()
    logger = get_logger()  # what the spawner's probe logs to (the hub's log in a running hub)
    logger.addHandler(records)
    try:
        startup_check(app)  # valid: the hub starts, and the cluster is read in the background
        await asyncio.wait_for(asyncio.gather(*kube_profiles._START_CHECKS), 10)
    finally:
        logger.removeHandler(records)
    assert len(records.messages) == 2, records.messages
    assert records.messages[0].startswith(
        "jupyterhub-gpu: profile 't4-quarter': 'gpu_share' is 2, but the node decides on Kubernetes"
    )
    assert "t4-ts-1 (4 replicas), t4-ts-2 (4 replicas)" in records.messages[0]
    assert records.messages[1].startswith(
        "jupyterhub-gpu: profile 'v100-half': no V100 node of the cluster offers nvidia.com/gpu.shared"
    )
    # the servers are told what the node gives: a quarter, and its cap
    spawner = make_spawner(config(Cluster(), profiles))
    await spawner.allocator.inventory.get()
    assert spawner.allocator.unit_facts("T4", share=2) == (3840, "1/4")


async def test_the_hub_start_says_when_it_could_not_read_the_cluster_and_still_starts():
    class Unreachable(Cluster):
        async def __call__(self):
            raise ConnectionError("API server unreachable")

    records = Records()
    logger = get_logger()
    logger.addHandler(records)
    try:
        assert GPUKubeSpawner.gpu_check_config(config(Unreachable())) == []  # no problem: the hub starts
        await asyncio.wait_for(asyncio.gather(*kube_profiles._START_CHECKS), 10)
    finally:
        logger.removeHandler(records)
    assert records.messages == [
        "jupyterhub-gpu: could not check the share and MIG profiles against the cluster"
        " (ConnectionError: API server unreachable)"
    ]
