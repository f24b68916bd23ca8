"""The cluster's GPU counts (pure), their cache, and the hub's FIFO queue on Kubernetes.

The nodes and pods are the Kubernetes API's JSON as a real cluster returns it;
the fetch coroutine is the injectable part that a hub reads the API with.
"""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.spawners.assign.cluster import ClusterAllocator, ClusterInventory, replica_warnings
from jupyterhub_gpu.spawners.assign.cluster_snapshot import (
    ClusterSnapshot,
    NodeGPUs,
    cluster_counts,
    pod_requests,
    products_for,
    take_snapshot,
    unit_request,
)
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, QueueCancelled, QueueTimeout

A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"


def node(name, product, allocatable, ready="True", unschedulable=False, memory=None, labels=None):
    labels = {"kubernetes.io/hostname": name, **(labels or {})}
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
        "unit": "gpu",
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


# -- shared GPUs: time-sliced replicas and MIG slices ------------------------------------

SHARED = "nvidia.com/gpu.shared"


def time_sliced(name, gpus, replicas, product=T4, resource=SHARED, memory=15360):
    """A node the GPU Operator time-slices: GFD's labels and the replicas it advertises (GPUs × replicas).

    With ``renameByDefault: true`` (``resource`` nvidia.com/gpu.shared) the node's nvidia.com/gpu drops to 0;
    with ``false`` the replicas keep the name nvidia.com/gpu and the product label gets ``-SHARED``.
    """
    allocatable = {resource: str(gpus * replicas)}
    if resource == SHARED:
        allocatable["nvidia.com/gpu"] = "0"
    labels = {"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.count": str(gpus)}
    return node(name, product, allocatable, memory=memory, labels=labels)


def shared_cluster():
    """Two T4 nodes time-sliced 4 ways (renamed resource), one whole-T4 node, and a MIG node (mixed strategy)."""
    nodes = [
        time_sliced("t4-ts-1", 1, 4),
        time_sliced("t4-ts-2", 1, 4),
        node("t4-whole", T4, {"nvidia.com/gpu": "2"}, memory=15360),
        node(
            "a100-mig",
            A100_80,
            {"nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "1"},
            labels={"nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig.strategy": "mixed"},
        ),
    ]
    pods = [
        pod("share-a", "t4-ts-1", 3, resource=SHARED),  # three students of another hub on the first T4
        pod("share-b", "t4-ts-2", 2, resource=SHARED),
        pod("mig-a", "a100-mig", 1, resource="nvidia.com/mig-1g.10gb"),
    ]
    return Cluster(nodes, pods)


async def test_shares_are_counted_from_the_replicas_the_nodes_advertise():
    alloc = ClusterAllocator(ClusterInventory(shared_cluster(), ttl=30))
    await alloc.inventory.get()
    assert alloc.counts("T4", share=4) == {
        "free": 3,
        "total": 8,
        "largest_free": 2,
        "waiting": 0,
        "known": True,
        "memory_mib": 3840,  # the node's 15360 MiB T4 in 4
        "unit": "share",
        "replicas": (4,),
    }
    # a whole T4 is counted only where nvidia.com/gpu is not time-sliced
    assert alloc.counts("T4") == {
        "free": 2,
        "total": 2,
        "largest_free": 2,
        "waiting": 0,
        "known": True,
        "memory_mib": 15360,
        "unit": "gpu",
    }
    assert alloc.kind("T4", share=4) == (SHARED, (T4,), None)
    assert alloc.unit_facts("T4", share=4) == (3840, "1/4")
    assert alloc.unit_facts("T4") == (None, "")
    # shares this hub claimed whose pods are not scheduled yet are taken off
    (device,) = await alloc.acquire("alice/", "T4", 1, share=4)
    assert (device.uuid, device.name, device.memory_mib) == (f"{SHARED}:0", "T4", 3840)  # one share: its cap
    assert alloc.counts("T4", share=4)["free"] == 2


async def test_without_renaming_shares_are_nvidia_gpu_on_shared_nodes_and_whole_gpus_stay_off_them():
    nodes = [
        time_sliced("t4-ts", 2, 4, product=f"{T4}-SHARED", resource="nvidia.com/gpu", memory=None),
        node("t4-whole", T4, {"nvidia.com/gpu": "2"}, memory=15360),
    ]
    cluster = Cluster(nodes, [pod("other", "t4-ts", 5)])
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30), shared_resource="nvidia.com/gpu")
    await alloc.inventory.get()
    assert alloc.kind("T4", share=4) == ("nvidia.com/gpu", (f"{T4}-SHARED",), True)
    assert alloc.kind("T4") == ("nvidia.com/gpu", (T4,), False)
    shares, whole = alloc.counts("T4", share=4), alloc.counts("T4")
    assert (shares["free"], shares["total"], shares["replicas"]) == (3, 8, (4,))
    assert (whole["free"], whole["total"]) == (2, 2)
    # no GFD memory label: the cap comes from the model's known memory (a T4 has 16 GB)
    assert alloc.unit_facts("T4", share=4) == (4096, "1/4")
    # gpu_node_products pins a model for both kinds: each takes its own products from the list
    pinned = ClusterAllocator(alloc.inventory, {"T4": [T4, f"{T4}-SHARED"]}, shared_resource="nvidia.com/gpu")
    assert pinned.kind("T4") == ("nvidia.com/gpu", (T4,), False)
    assert pinned.kind("T4", share=4) == ("nvidia.com/gpu", (f"{T4}-SHARED",), True)


async def test_mig_slices_are_their_own_resources_with_the_memory_gfd_reports():
    alloc = ClusterAllocator(ClusterInventory(shared_cluster(), ttl=30))
    await alloc.inventory.get()
    counts = alloc.counts("A100", mig="1g.10gb")
    assert (counts["free"], counts["total"], counts["unit"], counts["memory_mib"]) == (6, 7, "mig", 9728)
    assert alloc.kind("A100", mig="1g.10gb") == ("nvidia.com/mig-1g.10gb", (A100_80,), None)
    assert alloc.unit_facts("A100", mig="1g.10gb") == (9728, "mig:1g.10gb")
    # no memory label for this slice: the memory its name says
    assert alloc.unit_facts("A100", mig="3g.40gb") == (40960, "mig:3g.40gb")
    # the older spelling inside gpu_model asks for the same resource
    assert unit_request("A100 MIG 1g.10gb") == unit_request("A100", mig="1g.10gb")
    assert alloc.counts("A100 MIG 1g.10gb") == counts
    devices = await alloc.acquire("alice/", "A100", 1, mig="1g.10gb")
    assert [(d.uuid, d.name) for d in devices] == [("nvidia.com/mig-1g.10gb:0", "A100 MIG 1g.10gb")]
    assert alloc.counts("A100", mig="1g.10gb")["free"] == 5
    with pytest.raises(AllocationError, match=r"the cluster has no H100 MIG 1g\.10gb"):
        await alloc.acquire("bob/", "H100", 1, mig="1g.10gb")
    # a whole A100 is not a slice: the MIG node offers none
    assert alloc.counts("A100")["total"] == 0


async def test_a_share_nobody_offers_is_refused_at_once():
    alloc = ClusterAllocator(ClusterInventory(small_cluster(), ttl=30))
    with pytest.raises(
        AllocationError,
        match=r"needs a share of a time-sliced A100 GPU, but no node of the cluster offers one \(nvidia\.com/gpu\.sh",
    ):
        await alloc.acquire("alice/", "A100", 1, share=4)
    assert alloc.held_by("alice/") is None


async def test_the_queue_when_every_share_is_taken():
    """One T4 in 4 shares: four spawns go ahead, the next ones wait first come first served."""
    cluster = Cluster([time_sliced("t4-ts", 1, 4)], [])
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=0.05))
    for name in ("a/", "b/", "c/", "d/"):
        assert [d.uuid for d in await alloc.acquire(name, "T4", 1, share=4)] == [f"{SHARED}:0"]
    positions = {"e/": [], "f/": []}
    e = asyncio.ensure_future(
        alloc.acquire("e/", "T4", 1, timeout=5, on_position=lambda p, n: positions["e/"].append((p, n)), share=4)
    )
    await until(lambda: alloc.position("e/"))
    f = asyncio.ensure_future(
        alloc.acquire("f/", "T4", 1, timeout=5, on_position=lambda p, n: positions["f/"].append((p, n)), share=4)
    )
    await until(lambda: alloc.position("f/"))
    counts = alloc.counts("T4", share=4)
    assert (counts["free"], counts["total"], counts["waiting"]) == (0, 4, 2)
    # a whole-GPU profile of the same model is another kind on a cluster: it neither waits behind them nor blocks
    cluster.nodes.append(node("t4-whole", T4, {"nvidia.com/gpu": "1"}))
    await alloc.inventory.get(force=True)
    assert len(await asyncio.wait_for(alloc.acquire("whole/", "T4", 1), 2)) == 1
    assert not e.done() and not f.done()
    # a share given back by this hub goes to the head of the queue at once
    alloc.release("b/")
    assert len(await e) == 1
    assert not f.done()
    # the four claimed pods are scheduled and run; one of them ends: the next refresh lets f in
    cluster.pods = [pod(f"jupyter-{k}", "t4-ts", 1, resource=SHARED, session=f"s-{k}") for k in "acd"]
    for k in "acd":
        alloc.attach(f"{k}/", f"s-{k}")
    alloc.release("a/")
    cluster.pods = cluster.pods[1:]
    assert len(await asyncio.wait_for(f, 2)) == 1
    assert positions == {"e/": [(1, 1), (1, 2)], "f/": [(2, 2), (1, 1)]}


async def test_a_share_that_waits_too_long_says_it_waited_for_a_share():
    cluster = Cluster([time_sliced("t4-ts", 1, 2)], [pod("x", "t4-ts", 2, resource=SHARED)])
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=0.05))
    with pytest.raises(
        QueueTimeout, match=r"No share of a time-sliced T4 GPU became free in the cluster within 0\.2 s"
    ):
        await alloc.acquire("alice/", "T4", 1, timeout=0.2, share=2)
    assert alloc.counts("T4", share=2)["waiting"] == 0 and alloc.held_by("alice/") is None


async def test_a_shared_resource_renamed_outside_nvidia_com_is_kept_in_the_snapshot():
    custom = "example.edu/t4-share"
    cluster = Cluster([time_sliced("t4-ts", 1, 4, resource=custom)], [pod("x", "t4-ts", 1, resource=custom)])
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30, resources=(custom,)), shared_resource=custom)
    await alloc.inventory.get()
    counts = alloc.counts("T4", share=4)
    assert (counts["free"], counts["total"]) == (3, 4)
    # without naming it, the inventory keeps only nvidia.com/* resources: no GPU node at all
    assert take_snapshot(cluster.nodes, cluster.pods).nodes == ()


class Share:
    """A share or MIG profile as the startup check reads it (slug, model, count, gpu_share, mig)."""

    def __init__(self, slug, gpu_model, gpu_share=None, mig=None):
        self.slug, self.gpu_model, self.gpu_count, self.gpu_share, self.mig = slug, gpu_model, 1, gpu_share, mig


async def test_replica_warnings_say_where_the_node_decides_otherwise_and_where_no_node_offers_shares():
    cluster = shared_cluster()
    cluster.nodes.append(time_sliced("t4-ts-8", 1, 8))
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30))
    profiles = [
        Share("t4-quarter", "T4", 4),
        Share("v100-half", "V100", 2),
        Share("a100-slice", "A100", mig="1g.10gb"),
        Share("h100-slice", "H100", mig="1g.10gb"),
    ]
    assert replica_warnings(profiles, alloc) == []  # nothing read yet: nothing to say
    await alloc.inventory.get()
    warnings = replica_warnings(profiles, alloc)
    assert len(warnings) == 3, warnings
    assert warnings[0].startswith("profile 't4-quarter': 'gpu_share' is 4, but the node decides on Kubernetes")
    assert "t4-ts-8 (8 replicas)" in warnings[0] and "t4-ts-1" not in warnings[0]
    assert warnings[1].startswith("profile 'v100-half': no V100 node of the cluster offers nvidia.com/gpu.shared")
    assert warnings[2].startswith("profile 'h100-slice': no H100 node of the cluster offers nvidia.com/mig-1g.10gb")
    # where nodes differ, a server is told the smallest cap and the most replicas
    assert alloc.unit_facts("T4", share=4) == (1920, "1/8")
    assert replica_warnings([Share("t4-quarter", "T4", 4)], ClusterAllocator(ClusterInventory(shared_cluster()))) == []


async def test_a_simulated_node_product_makes_the_units_simulated_and_a_real_one_does_not():
    """The k8s test layer's node (``Simulated-T4``): the form, the queue and the session say simulated."""
    cluster = Cluster([node("sim", "Simulated-T4", {"nvidia.com/gpu": "4"}, memory=15360)], [])
    alloc = ClusterAllocator(ClusterInventory(cluster, ttl=30))
    assert alloc.simulated() is False  # nothing read yet
    await alloc.inventory.get(force=True)
    assert alloc.simulated() and alloc.simulated("T4")
    (device,) = await alloc.acquire("alice/", "T4", 1)
    assert device.simulated and device.uuid == "nvidia.com/gpu:0" and device.memory_mib == 15360

    real = ClusterAllocator(ClusterInventory(Cluster(NODES, []), ttl=30))
    await real.inventory.get(force=True)
    assert not real.simulated() and not real.simulated("A100")
    (device,) = await real.acquire("bob/", "A100", 1)
    assert not device.simulated
    # a model on both kinds of node is not simulated: a student could land on a real GPU
    mixed = ClusterAllocator(
        ClusterInventory(Cluster([*NODES, node("sim", "Simulated-A100", {"nvidia.com/gpu": "1"})], []), ttl=30)
    )
    await mixed.inventory.get(force=True)
    assert not mixed.simulated("A100") and not mixed.simulated()
