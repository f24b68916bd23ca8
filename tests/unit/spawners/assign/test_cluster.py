"""The cluster's GPU counts (pure), their cache, and the hub's FIFO queue on Kubernetes.

The nodes and pods are the Kubernetes API's JSON as a real cluster returns it;
the fetch coroutine is the injectable part that a hub reads the API with.
"""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.spawners.assign.cluster import (
    ClusterAllocator,
    ClusterInventory,
    ClusterSnapshot,
    NodeGPUs,
    cluster_counts,
    pod_requests,
    products_for,
    take_snapshot,
)
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, QueueCancelled, QueueTimeout

A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def node(name, product, allocatable, ready="True", unschedulable=False, memory=None):
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels["nvidia.com/gpu.product"] = product
    if memory:
        labels["nvidia.com/gpu.memory"] = str(memory)
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", **allocatable},
            "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}],
        },
    }


def pod(name, node_name, gpus=0, resource="nvidia.com/gpu", phase="Running", session=None, init_gpus=0):
    containers = [{"name": "main", "resources": {"limits": {resource: str(gpus)}} if gpus else {}}]
    spec = {"containers": containers}
    if node_name:
        spec["nodeName"] = node_name
    if init_gpus:
        spec["initContainers"] = [{"name": "init", "resources": {"limits": {resource: str(init_gpus)}}}]
    labels = {"jupyterhub-gpu/session-id": session} if session else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": {"phase": phase}}


NODES = [
    node("a100-1", A100_40, {"nvidia.com/gpu": "4"}, memory=40960),
    node("a100-2", A100_80, {"nvidia.com/gpu": "8"}, memory=81920),
    node("a100-mig", A100_80, {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "1"}),
    node("t4-1", T4, {"nvidia.com/gpu": "2"}, memory=15360),
    node("t4-down", T4, {"nvidia.com/gpu": "2"}, ready="False"),
    node("t4-cordoned", T4, {"nvidia.com/gpu": "2"}, unschedulable=True),
    node("cpu-1", None, {}),
]
PODS = [
    pod("train-x", "a100-1", 3),  # another team's job
    pod("jupyter-bob", "a100-2", 2, session="s-bob"),
    pod("done", "a100-2", 6, phase="Succeeded"),  # finished pods hold nothing
    pod("pending", None, 1),  # not scheduled: on no node yet
    pod("mig-a", "a100-mig", 1, resource="nvidia.com/mig-1g.10gb"),
    pod("t4-user", "t4-1", 1, init_gpus=2),  # init container's 2 > containers' 1
]


def test_pod_requests_takes_limits_and_the_larger_of_init_and_containers():
    assert pod_requests(PODS[-1]) == {"nvidia.com/gpu": 2}
    both = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}},
                {"resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}},
            ]
        }
    }
    assert pod_requests(both) == {"nvidia.com/gpu": 3}


def test_snapshot_keeps_ready_schedulable_gpu_nodes_and_their_use():
    snap = take_snapshot(NODES, PODS)
    assert snap == ClusterSnapshot(
        nodes=(
            NodeGPUs("a100-1", A100_40, 40960, {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 3}),
            NodeGPUs("a100-2", A100_80, 81920, {"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 2}),
            NodeGPUs(
                "a100-mig",
                A100_80,
                0,
                {"nvidia.com/mig-1g.10gb": 7, "nvidia.com/mig-3g.40gb": 1},
                {"nvidia.com/mig-1g.10gb": 1},
            ),
            NodeGPUs("t4-1", T4, 15360, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 2}),
        ),
        scheduled_sessions=frozenset({"s-bob"}),
    )


def test_products_and_counts_per_profile_model():
    snap = take_snapshot(NODES, PODS)
    assert products_for(snap, "A100") == (A100_40, A100_80)
    assert products_for(snap, "A100-SXM4-80GB") == (A100_80,)  # consecutive words, as on a host
    assert products_for(snap, "T4") == (T4,)
    assert products_for(snap, "H100") == ()
    assert products_for(snap, "1g.10gb") is None  # any node that offers the slice
    assert cluster_counts(snap, "nvidia.com/gpu", (A100_40, A100_80)) == {"free": 7, "total": 12, "largest_free": 6}
    assert cluster_counts(snap, "nvidia.com/gpu", (T4,)) == {"free": 0, "total": 2, "largest_free": 0}
    assert cluster_counts(snap, "nvidia.com/mig-1g.10gb", None) == {"free": 6, "total": 7, "largest_free": 6}
    # claims of this hub whose pods are not scheduled yet are taken off
    assert cluster_counts(snap, "nvidia.com/gpu", (A100_40, A100_80), pending=2) == {
        "free": 5,
        "total": 12,
        "largest_free": 5,
    }
    assert cluster_counts(snap, "nvidia.com/gpu", ()) == {"free": 0, "total": 0, "largest_free": 0}


class Cluster:
    """The fetch coroutine over a cluster whose nodes and pods a test changes; counts its calls."""

    def __init__(self, nodes, pods):
        self.nodes, self.pods = list(nodes), list(pods)
        self.calls = 0
        self.fail = False

    async def __call__(self):
        self.calls += 1
        await asyncio.sleep(0.01)
        if self.fail:
            raise ConnectionError("API server unreachable")
        return list(self.nodes), list(self.pods)


async def until(predicate, timeout=5.0):
    """Yield to the loop until ``predicate()`` holds (no fixed sleeps: the machine may be slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.005)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


async def test_inventory_is_cached_for_ttl_and_one_fetch_serves_concurrent_callers():
    cluster, clock = Cluster(NODES, PODS), Clock()
    inv = ClusterInventory(cluster, ttl=30, clock=clock)
    snaps = await asyncio.gather(*(inv.get() for _ in range(50)))
    assert cluster.calls == 1 and all(s is snaps[0] for s in snaps)
    clock.now += 29
    await inv.get()
    assert cluster.calls == 1
    clock.now += 1
    await inv.get()
    assert cluster.calls == 2


async def test_a_failed_fetch_keeps_the_last_snapshot_and_is_retried_only_after_ttl():
    cluster, clock = Cluster(NODES, PODS), Clock()
    inv = ClusterInventory(cluster, ttl=30, clock=clock)
    good = await inv.get()
    cluster.fail = True
    clock.now += 30
    assert await inv.get() is good
    assert inv.error == "ConnectionError: API server unreachable"
    await inv.get()
    assert cluster.calls == 2  # no retry per request
    cluster.fail = False
    clock.now += 30
    await inv.get()
    assert inv.error is None and cluster.calls == 3


async def test_counts_for_the_form_and_unknown_before_the_first_fetch():
    cluster = Cluster(NODES, PODS)
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30))
    assert alloc.counts("A100")["known"] is False
    await alloc.inventory.get()
    assert alloc.counts("A100") == {
        "free": 7,
        "total": 12,
        "largest_free": 6,
        "waiting": 0,
        "known": True,
        "memory_mib": 40960,
    }
    # an admin can pin a model to some products
    pinned = ClusterAllocator(alloc.inventory, {"A100": [A100_80]})
    assert pinned.counts("A100")["total"] == 8


def small_cluster(free_a100=1):
    """One node with 2 A100s, ``2 - free_a100`` of them used by another workload."""
    used = 2 - free_a100
    return Cluster([node("n1", A100_40, {"nvidia.com/gpu": "2"})], [pod("other", "n1", used)] if used else [])


async def test_requests_that_can_never_fit_fail_at_once():
    alloc = ClusterAllocator(ClusterInventory(small_cluster(), ttl=30))
    with pytest.raises(AllocationError, match="needs 3× A100 on one node, but no node has 3× A100"):
        await alloc.acquire("alice/", "A100", 3)
    with pytest.raises(AllocationError, match="the cluster has no T4"):
        await alloc.acquire("alice/", "T4", 1)
    broken = Cluster([], [])
    broken.fail = True
    alloc = ClusterAllocator(ClusterInventory(broken, ttl=30))
    with pytest.raises(AllocationError, match="cannot be read right now; nothing was started"):
        await alloc.acquire("alice/", "A100", 1)


async def test_claims_count_until_their_pod_is_scheduled_then_the_snapshot_does():
    cluster = small_cluster(free_a100=2)
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=0.05))
    devices = await alloc.acquire("alice/", "A100", 1)
    assert [d.uuid for d in devices] == ["nvidia.com/gpu:0"]
    alloc.attach("alice/", "s-alice")
    assert alloc.counts("A100")["free"] == 1  # pending claim
    cluster.pods.append(pod("jupyter-alice", "n1", 1, session="s-alice"))
    await alloc.inventory.get(force=True)
    assert alloc.counts("A100")["free"] == 1  # now counted once, from the pod
    alloc.release("alice/")
    assert alloc.counts("A100")["free"] == 1  # the pod still runs until the snapshot says otherwise


async def test_fifo_queue_with_positions_released_claims_and_freed_gpus():
    cluster = small_cluster(free_a100=1)
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=0.05))
    await alloc.acquire("alice/", "A100", 1)  # takes the free one
    positions = {"bob/": [], "carol/": []}
    bob = asyncio.ensure_future(
        alloc.acquire("bob/", "A100", 1, timeout=5, on_position=lambda p, n: positions["bob/"].append((p, n)))
    )
    await until(lambda: alloc.position("bob/"))
    carol = asyncio.ensure_future(
        alloc.acquire("carol/", "A100", 1, timeout=5, on_position=lambda p, n: positions["carol/"].append((p, n)))
    )
    await until(lambda: alloc.position("carol/"))
    assert alloc.counts("A100")["waiting"] == 2
    # a GPU freed by a claim of this hub: the head of the queue gets it at once
    alloc.release("alice/")
    assert len(await bob) == 1
    assert not carol.done()
    # a GPU freed by another workload shows up at the next refresh (every ttl while anyone waits)
    cluster.pods.clear()
    assert len(await asyncio.wait_for(carol, 2)) == 1
    assert positions == {"bob/": [(1, 1), (1, 2)], "carol/": [(2, 2), (1, 1)]}


async def test_queue_timeout_and_cancel_leave_nothing_behind():
    alloc = ClusterAllocator(ClusterInventory(small_cluster(free_a100=0), ttl=0.05))
    with pytest.raises(QueueTimeout, match=r"No A100 became free in the cluster within 0\.2 seconds"):
        await alloc.acquire("alice/", "A100", 1, timeout=0.2)
    waiting = asyncio.ensure_future(alloc.acquire("bob/", "A100", 1, timeout=5))
    await until(lambda: alloc.position("bob/"))
    assert alloc.position("bob/") == (1, 1)
    assert alloc.cancel("bob/")
    with pytest.raises(QueueCancelled):
        await waiting
    assert alloc.counts("A100")["waiting"] == 0 and alloc.held_by("bob/") is None


async def test_a_two_gpu_request_at_the_head_is_not_overtaken():
    cluster = small_cluster(free_a100=1)
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30))
    big = asyncio.ensure_future(alloc.acquire("big/", "A100", 2, timeout=5))
    await until(lambda: alloc.position("big/"))
    small = asyncio.ensure_future(alloc.acquire("small/", "A100", 1, timeout=5))
    await until(lambda: alloc.position("small/"))
    assert not big.done() and not small.done()  # one is free, but the head needs two
    cluster.pods.clear()
    await alloc.inventory.get(force=True)
    assert len(await big) == 2
    assert not small.done()
    alloc.release("big/")
    assert len(await small) == 1
