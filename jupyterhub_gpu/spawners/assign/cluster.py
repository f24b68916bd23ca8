"""The GPUs of a Kubernetes cluster: free/total counts for the form, and the hub's wait queue.

On Kubernetes the NVIDIA device plugin assigns the GPUs, so the hub never picks
a device. What the hub does know, from the Kubernetes API, is each node's
allocatable GPUs (``status.allocatable``) and GPU product (the
``nvidia.com/gpu.product`` label), and what the pods scheduled there request.

- :func:`take_snapshot` turns the raw node and pod lists into a
  :class:`ClusterSnapshot`, and :func:`cluster_counts` counts free and total
  GPUs for a profile: pure functions, tested without a cluster.
- :class:`ClusterInventory` fetches the lists with an injectable coroutine and
  caches the snapshot for ``ttl`` seconds: the form never costs an API call per
  request, and one fetch serves every concurrent caller.
- :class:`ClusterAllocator` keeps the hub's own claims (spawns whose pod is not
  scheduled yet) and a first-come, first-served queue per GPU kind (the
  :class:`.queue.FairQueue` the host allocator uses too). Like
  :class:`.host.GPUAllocator` it implements :class:`.protocol.Allocator`, what
  the mixin uses; the "devices" it hands out are placeholders that only count
  GPUs (``nvidia.com/gpu:0``), never device UUIDs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.gpus.names import model_matches
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, Allocator
from jupyterhub_gpu.spawners.assign.queue import FairQueue, Waiter, wait_limit_text
from jupyterhub_gpu.spawners.kube.objects import MEMORY_LABEL, PRODUCT_LABEL, SESSION_LABEL, gpu_resource_for
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.kube_inventory")

#: ``async fetch() -> (nodes, pods)``: raw Node and Pod objects as the API's JSON (camelCase dicts).
Fetch = Callable[[], Awaitable[tuple[list[dict], list[dict]]]]

_TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class NodeGPUs:
    """One schedulable node's GPU resources."""

    name: str
    product: str
    memory_mib: int
    allocatable: dict[str, int]
    used: dict[str, int]

    def free(self, resource: str) -> int:
        return max(self.allocatable.get(resource, 0) - self.used.get(resource, 0), 0)


@dataclass(frozen=True)
class ClusterSnapshot:
    """The cluster's GPU nodes and the hub's sessions whose pods are already scheduled."""

    nodes: tuple[NodeGPUs, ...]
    scheduled_sessions: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Claim:
    """GPUs this hub has let a spawn create a pod for."""

    resource: str
    products: tuple[str, ...] | None  # None: any node with the resource
    count: int
    session_id: str = ""


def parse_quantity(value) -> int:
    """Whole units of an extended resource or a count (``"2"``, ``2``); fractional or bad values are 0."""
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return 0
    return int(number) if number >= 0 and number == int(number) else 0


def _node_ready(node: dict) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def pod_requests(pod: dict) -> dict[str, int]:
    """A pod's effective GPU-like requests: the larger of its containers' sum and any init container.

    Extended resources must set a limit, and their request defaults to it.
    """

    def of(container: dict) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: parse_quantity(v) for k, v in merged.items() if "/" in k}

    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, 0), v)
    return total


def take_snapshot(nodes: list[dict], pods: list[dict]) -> ClusterSnapshot:
    """The GPU nodes that can take pods, what is used on each, and our scheduled sessions."""
    used: dict[str, dict[str, int]] = {}
    scheduled: set[str] = set()
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        node = spec.get("nodeName")
        if not node or status.get("phase") in _TERMINAL_PHASES:
            continue
        for k, v in pod_requests(pod).items():
            used.setdefault(node, {})[k] = used.get(node, {}).get(k, 0) + v
        session = ((pod.get("metadata") or {}).get("labels") or {}).get(SESSION_LABEL)
        if session:
            scheduled.add(session)
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        allocatable = {
            k: parse_quantity(v)
            for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
            if k.startswith("nvidia.com/") and parse_quantity(v) > 0
        }
        if not allocatable or not _node_ready(node):
            continue
        labels = meta.get("labels") or {}
        out.append(
            NodeGPUs(
                name=meta.get("name", ""),
                product=labels.get(PRODUCT_LABEL, ""),
                memory_mib=parse_quantity(labels.get(MEMORY_LABEL, 0)),
                allocatable=allocatable,
                used=dict(used.get(meta.get("name", ""), {})),
            )
        )
    out.sort(key=lambda n: n.name)
    return ClusterSnapshot(tuple(out), frozenset(scheduled))


def matching_nodes(snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None) -> list[NodeGPUs]:
    """Nodes that have ``resource`` and, unless ``products`` is None, one of those products."""
    return [
        n for n in snapshot.nodes if n.allocatable.get(resource, 0) > 0 and (products is None or n.product in products)
    ]


def products_for(snapshot: ClusterSnapshot, gpu_model: str) -> tuple[str, ...] | None:
    """The ``nvidia.com/gpu.product`` values a profile's ``gpu_model`` names in this cluster.

    Matched word by word like the host inventory ("A100" matches
    ``NVIDIA-A100-SXM4-40GB``, not ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``); an
    empty tuple when no node has such a product. None for a MIG model with no
    product words: any node that offers the slice will do.
    """
    resource, words = gpu_resource_for(gpu_model)
    if not words:
        return None
    found = {
        n.product
        for n in snapshot.nodes
        if n.allocatable.get(resource, 0) > 0 and n.product and model_matches(words, n.product)
    }
    return tuple(sorted(found))


def cluster_counts(
    snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None, pending: int = 0
) -> dict[str, int]:
    """``{"free", "total", "largest_free"}`` GPUs of one kind, less ``pending`` claims not yet scheduled.

    ``largest_free`` is the most free on one node: a pod's GPUs all come from
    one node, so a request for more than that cannot be scheduled now.
    """
    nodes = matching_nodes(snapshot, resource, products)
    total = sum(n.allocatable[resource] for n in nodes)
    frees = [n.free(resource) for n in nodes]
    free = max(sum(frees) - pending, 0)
    return {"free": free, "total": total, "largest_free": min(max(frees, default=0), free)}


def largest_node(snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None) -> int:
    """The most GPUs of this kind any one node has in all (the biggest request that can ever fit)."""
    return max((n.allocatable[resource] for n in matching_nodes(snapshot, resource, products)), default=0)


def node_memory_mib(snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None) -> int:
    """The GPU memory GFD reports for these nodes (the smallest, if they differ); 0 if unknown."""
    values = [n.memory_mib for n in matching_nodes(snapshot, resource, products) if n.memory_mib]
    return min(values, default=0)


class ClusterInventory:
    """A cached :class:`ClusterSnapshot`, refreshed at most every ``ttl`` seconds.

    One fetch at a time serves every caller. A failed fetch keeps the last
    snapshot (and records the error) so that a brief API outage does not empty
    the form.
    """

    def __init__(self, fetch: Fetch, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.fetch = fetch
        self.ttl = ttl
        self.clock = clock
        self.snapshot: ClusterSnapshot | None = None
        self.error: str | None = None
        self.fetched_at: float | None = None
        self.fetches = 0
        self._inflight: asyncio.Future | None = None
        self.listeners: list[Callable[[], None]] = []

    def stale(self) -> bool:
        return self.fetched_at is None or self.clock() - self.fetched_at >= self.ttl

    async def get(self, force: bool = False) -> ClusterSnapshot | None:
        """The snapshot, fetched first when it is older than ``ttl`` (or ``force``)."""
        if not force and not self.stale():
            return self.snapshot
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
        inflight = self._inflight
        try:
            await asyncio.shield(inflight)
        finally:
            if self._inflight is inflight and inflight.done():
                self._inflight = None
        return self.snapshot

    async def _refresh(self) -> None:
        self.fetches += 1
        try:
            nodes, pods = await self.fetch()
            self.snapshot = take_snapshot(nodes, pods)
            self.error = None
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("could not read the cluster's GPUs: %s", self.error)
        finally:
            # a failed fetch is retried after ttl too, not on every request
            self.fetched_at = self.clock()
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("inventory listener failed")


def placeholder_devices(resource: str, count: int, name: str, memory_mib: int) -> list[GPUDevice]:
    """What the mixin records as a session's "devices" on Kubernetes: one placeholder per GPU.

    The ledger counts a session's GPUs from this list (GPU-hour budgets); the
    real device UUIDs are known only inside the pod.
    """
    return [GPUDevice(index=str(i), uuid=f"{resource}:{i}", name=name, memory_mib=memory_mib) for i in range(count)]


class ClusterAllocator(FairQueue, Allocator):
    """The hub's claims on the cluster's GPUs and a FIFO wait queue per GPU kind.

    A spawn for ``count`` GPUs goes ahead (its pod is created) when the cached
    snapshot shows that many free on one node, after the claims of this hub's
    other spawns whose pods are not scheduled yet. Otherwise it waits in the
    queue of its kind (resource and products); the queue is re-checked when a
    claim is released and whenever the snapshot is refreshed, which happens every
    ``ttl`` while anyone waits. Strict FIFO per kind, as on a single host.

    The scheduler has the last word: other workloads can take a GPU between the
    snapshot and the pod's creation, and then the pod stays Pending (the spawn
    page shows Kubernetes' reason) until a GPU frees or the start times out.
    """

    log = log

    def __init__(self, inventory: ClusterInventory, products_override: dict[str, list[str]] | None = None):
        super().__init__()
        self.inventory = inventory
        self.products_override = {k: tuple(sorted(v)) for k, v in (products_override or {}).items()}
        self.devices: list[GPUDevice] = []  # none is ever simulated; the mixin reads this
        self._claims: dict[str, Claim] = {}
        self._poller: asyncio.Task | None = None
        inventory.listeners.append(self._drain)

    # -- reading -----------------------------------------------------------
    def kind(self, gpu_model: str) -> tuple[str, tuple[str, ...] | None]:
        """``(resource, products)`` of a profile's model, from ``gpu_node_products`` or the snapshot."""
        resource, words = gpu_resource_for(gpu_model)
        if gpu_model in self.products_override:
            return resource, self.products_override[gpu_model]
        snapshot = self.inventory.snapshot
        if snapshot is None:
            return resource, None if not words else ()
        return resource, products_for(snapshot, gpu_model)

    def pending(self, resource: str, products: tuple[str, ...] | None) -> int:
        """GPUs of this kind claimed by spawns whose pods the snapshot does not show scheduled yet."""
        snapshot = self.inventory.snapshot
        scheduled = snapshot.scheduled_sessions if snapshot else frozenset()
        return sum(
            c.count
            for c in self._claims.values()
            if c.resource == resource
            and (c.products is None or products is None or set(c.products) & set(products))
            and not (c.session_id and c.session_id in scheduled)
        )

    def matching(self, model: str) -> list[GPUDevice]:
        return []

    def waiting(self, model: str) -> int:
        return len(self._queues.get(self.kind(model), []))

    def counts(self, model: str) -> dict:
        """Free, total and waiting GPUs of a profile's model for the form; ``known`` is False without a snapshot."""
        resource, products = self.kind(model)
        snapshot = self.inventory.snapshot
        waiting = len(self._queues.get((resource, products), []))
        if snapshot is None:
            return {"free": 0, "total": 0, "largest_free": 0, "waiting": waiting, "known": False, "memory_mib": 0}
        counts = cluster_counts(snapshot, resource, products, self.pending(resource, products))
        memory = node_memory_mib(snapshot, resource, products)
        return {**counts, "waiting": waiting, "known": True, "memory_mib": memory}

    def held_by(self, key: str) -> Claim | None:
        return self._claims.get(key)

    # -- changing ----------------------------------------------------------
    async def acquire(
        self,
        key: str,
        model: str,
        count: int,
        timeout: float | None = None,
        on_position: Callable[[int, int], None] | None = None,
    ) -> list[GPUDevice]:
        """Claim ``count`` GPUs of ``model``, waiting in the queue until the cluster has them free."""
        if count <= 0:
            return []
        if key in self._claims:
            c = self._claims[key]
            return placeholder_devices(c.resource, c.count, model, 0)
        snapshot = await self.inventory.get()
        resource, products = self.kind(model)
        if snapshot is None:
            raise AllocationError(
                "The cluster's GPUs cannot be read right now; nothing was started. Try again in a minute,"
                " or tell your administrator."
            )
        biggest = largest_node(snapshot, resource, products)
        if biggest < count:
            if biggest:
                raise AllocationError(
                    "This profile needs {count}× {model} on one node, but no node has {count}× {model}."
                    " Ask your administrator to fix the profile.",
                    count=count,
                    model=model,
                )
            raise AllocationError(
                "This profile needs {count}× {model} on one node, but the cluster has no {model}."
                " Ask your administrator to fix the profile.",
                count=count,
                model=model,
            )
        return await self._take_turn(
            key,
            (resource, products),
            model,
            count,
            claim=Claim(resource, products, count),
            timeout=timeout,
            on_position=on_position,
            timeout_message=Phrase(
                "No {model} became free in the cluster within {limit}; nothing was started. Try again later or"
                " choose another profile.",
                model=model,
                limit=wait_limit_text(timeout),
            ),
        )

    def attach(self, key: str, session_id: str) -> None:
        """Note the session id of a claim's pod: once the snapshot shows it scheduled, it stops being pending."""
        claim = self._claims.get(key)
        if claim is not None:
            self._claims[key] = Claim(claim.resource, claim.products, claim.count, session_id)

    def release(self, key: str) -> list[str]:
        claim = self._claims.pop(key, None)
        if claim is None:
            return []
        log.info("%s released its claim on %d× %s", key, claim.count, claim.resource)
        self._drain()
        return [f"{claim.resource}:{i}" for i in range(claim.count)]

    def restore(self, key: str, uuids: list[str]) -> list[str]:
        """After a hub restart: the pod is running and the snapshot counts its GPUs; nothing to record."""
        return list(uuids)

    # -- queue -------------------------------------------------------------
    def _fits(self, waiter: Waiter) -> bool:
        claim = waiter.claim
        snapshot = self.inventory.snapshot
        if snapshot is None:
            return False
        counts = cluster_counts(snapshot, claim.resource, claim.products, self.pending(claim.resource, claim.products))
        return counts["largest_free"] >= claim.count

    def _grant(self, waiter: Waiter) -> list[GPUDevice]:
        claim = waiter.claim
        self._claims[waiter.key] = claim
        snapshot = self.inventory.snapshot
        memory = node_memory_mib(snapshot, claim.resource, claim.products) if snapshot else 0
        return placeholder_devices(claim.resource, claim.count, waiter.model, memory)

    def _on_wait(self) -> None:
        """While anyone waits, refresh the snapshot every ``ttl`` (GPUs freed by others show up)."""
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll_while_waiting())

    async def _poll_while_waiting(self) -> None:
        while any(self._queues.values()):
            await asyncio.sleep(max(self.inventory.ttl, 0.05))
            await self.inventory.get(force=True)


# One allocator per inventory configuration per hub process, shared by every spawner.
_ALLOCATORS: dict[tuple, ClusterAllocator] = {}


def shared_cluster_allocator(fetch, ttl: float, products: dict) -> ClusterAllocator:
    """The hub-wide :class:`ClusterAllocator` for this configuration, created on first use."""
    key = (fetch, ttl, repr(sorted(products.items())))
    if key not in _ALLOCATORS:
        _ALLOCATORS[key] = ClusterAllocator(ClusterInventory(fetch, ttl), products)
    return _ALLOCATORS[key]


async def fetch_with_kubernetes_asyncio(api=None, request_timeout: float = 10) -> tuple[list[dict], list[dict]]:
    """The default fetch: every node, and every running or pending pod of the cluster, as API JSON.

    Two list calls per refresh (``list_node``, ``list_pod_for_all_namespaces``
    without terminal pods). Needs a ClusterRole that may ``list`` nodes and pods
    (config/kubernetes/hub-gpu-inventory-rbac.yaml).
    """
    if api is None:
        from kubespawner.clients import shared_client  # optional heavy dependency: kubernetes_asyncio's client

        api = shared_client("CoreV1Api")
    nodes = await api.list_node(_request_timeout=request_timeout, _preload_content=False)
    pods = await api.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed",
        _request_timeout=request_timeout,
        _preload_content=False,
    )
    node_list = json.loads(await nodes.read())
    pod_list = json.loads(await pods.read())
    return node_list.get("items") or [], pod_list.get("items") or []
