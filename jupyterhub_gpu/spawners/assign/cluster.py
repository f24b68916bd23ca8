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

Shared GPUs (docs/kubernetes.md#shared-gpus-on-kubernetes): a unit is a whole GPU (``nvidia.com/gpu`` on nodes that
are not time-sliced), a MIG slice (``nvidia.com/mig-1g.10gb``, the device
plugin's mixed strategy) or one time-sliced replica (the GPU Operator's
``nvidia.com/gpu.shared`` with ``renameByDefault: true``; with ``false`` the
replicas keep the name ``nvidia.com/gpu`` and GPU Feature Discovery marks the
node: ``nvidia.com/gpu.replicas`` above 1 and a ``-SHARED`` product). A node
advertises its replicas in ``status.allocatable`` (GPUs × replicas), so shares
are counted as the scheduler counts them; the node, not the profile, decides
how many replicas a GPU has.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.gpus.names import memory_from_name, model_matches
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, Allocator
from jupyterhub_gpu.spawners.assign.queue import FairQueue, Waiter, wait_limit_text
from jupyterhub_gpu.spawners.kube.objects import (
    GPU_RESOURCE,
    MEMORY_LABEL,
    MIG_RESOURCE_PREFIX,
    PRODUCT_LABEL,
    REPLICAS_LABEL,
    SESSION_LABEL,
    SHARED_PRODUCT_SUFFIX,
    SHARED_RESOURCE,
    mig_memory_label,
    unit_resource,
)
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.kube_inventory")

#: ``async fetch() -> (nodes, pods)``: raw Node and Pod objects as the API's JSON (camelCase dicts).
Fetch = Callable[[], Awaitable[tuple[list[dict], list[dict]]]]

_TERMINAL_PHASES = ("Succeeded", "Failed")
#: GPU Feature Discovery: the node's physical GPUs (its allocatable ``nvidia.com/gpu`` counts replicas when shared).
COUNT_LABEL = "nvidia.com/gpu.count"


@dataclass(frozen=True)
class NodeGPUs:
    """One schedulable node's GPU resources."""

    name: str
    product: str
    memory_mib: int
    allocatable: dict[str, int]
    used: dict[str, int]
    #: time-sliced replicas per GPU (``nvidia.com/gpu.replicas``; 1 when absent) and physical GPUs (0: unknown)
    replicas: int = 1
    physical: int = 0
    #: each MIG slice's memory in MiB (GPU Feature Discovery's ``nvidia.com/mig-<slice>.memory``)
    mig_memory_mib: dict[str, int] = field(default_factory=dict)

    def free(self, resource: str) -> int:
        return max(self.allocatable.get(resource, 0) - self.used.get(resource, 0), 0)

    @property
    def time_sliced(self) -> bool:
        """Whether the node's ``nvidia.com/gpu`` are time-sliced replicas (GPU Feature Discovery says so)."""
        return self.replicas > 1 or self.product.endswith(SHARED_PRODUCT_SUFFIX)

    def replicas_of(self, resource: str) -> int:
        """How many replicas each GPU behind ``resource`` has here: the label, else allocatable / physical GPUs."""
        if self.replicas > 1:
            return self.replicas
        if self.physical and self.allocatable.get(resource, 0) > self.physical:
            return self.allocatable[resource] // self.physical
        return 1


@dataclass(frozen=True)
class UnitRequest:
    """What one unit of a profile asks the cluster for."""

    resource: str
    words: str  # the product words a node's product label must match ("" for any)
    unit: str  # "gpu", "share" or "mig"
    #: True: only time-sliced nodes; False: only nodes that are not (a whole GPU); None: any node with the resource
    shared: bool | None
    mig: str | None = None  # the MIG slice ("1g.10gb")


def unit_request(
    gpu_model: str, *, share: int | None = None, mig: str | None = None, shared_resource: str = SHARED_RESOURCE
) -> UnitRequest:
    """The resource, product words and kind of node one unit of a profile needs.

    A whole GPU never lands on a time-sliced node (its ``nvidia.com/gpu`` are
    replicas there); a share asking for the un-renamed ``nvidia.com/gpu``
    (``renameByDefault: false``) lands only on one; a renamed shared resource
    exists only on time-sliced nodes anyway.
    """
    resource, words = unit_resource(gpu_model, share=share, mig=mig, shared_resource=shared_resource)
    if share:
        return UnitRequest(resource, words, "share", True if resource == GPU_RESOURCE else None)
    if resource.startswith(MIG_RESOURCE_PREFIX):
        return UnitRequest(resource, words, "mig", None, resource[len(MIG_RESOURCE_PREFIX) :])
    return UnitRequest(resource, words, "gpu", False)


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
    shared: bool | None = None  # as UnitRequest.shared
    unit: UnitRequest | None = None  # what one unit is (for its memory)
    gpu_model: str = ""


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


def take_snapshot(nodes: list[dict], pods: list[dict], resources: tuple[str, ...] = ()) -> ClusterSnapshot:
    """The GPU nodes that can take pods, what is used on each, and our scheduled sessions.

    A node's ``nvidia.com/*`` resources are kept, and ``resources`` (a shared
    resource an admin renamed outside that domain).
    """
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
            if (k.startswith("nvidia.com/") or k in resources) and parse_quantity(v) > 0
        }
        if not allocatable or not _node_ready(node):
            continue
        labels = meta.get("labels") or {}
        mig_memory = {
            k[len(MIG_RESOURCE_PREFIX) :]: parse_quantity(labels.get(mig_memory_label(k[len(MIG_RESOURCE_PREFIX) :])))
            for k in allocatable
            if k.startswith(MIG_RESOURCE_PREFIX)
        }
        out.append(
            NodeGPUs(
                name=meta.get("name", ""),
                product=labels.get(PRODUCT_LABEL, ""),
                memory_mib=parse_quantity(labels.get(MEMORY_LABEL, 0)),
                allocatable=allocatable,
                used=dict(used.get(meta.get("name", ""), {})),
                replicas=max(parse_quantity(labels.get(REPLICAS_LABEL, 1)), 1),
                physical=parse_quantity(labels.get(COUNT_LABEL, 0)),
                mig_memory_mib={k: v for k, v in mig_memory.items() if v},
            )
        )
    out.sort(key=lambda n: n.name)
    return ClusterSnapshot(tuple(out), frozenset(scheduled))


def matching_nodes(
    snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None, shared: bool | None = None
) -> list[NodeGPUs]:
    """Nodes that have ``resource`` and, unless ``products`` is None, one of those products.

    ``shared`` True keeps only time-sliced nodes, False only the others, None both.
    """
    return [
        n
        for n in snapshot.nodes
        if n.allocatable.get(resource, 0) > 0
        and (products is None or n.product in products)
        and (shared is None or n.time_sliced == shared)
    ]


def products_for(
    snapshot: ClusterSnapshot, gpu_model: str, request: UnitRequest | None = None
) -> tuple[str, ...] | None:
    """The ``nvidia.com/gpu.product`` values a profile's ``gpu_model`` names in this cluster.

    Matched word by word like the host inventory ("A100" matches
    ``NVIDIA-A100-SXM4-40GB``, not ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``; "T4"
    matches a time-sliced ``Tesla-T4-SHARED`` for a share only), among the nodes
    that offer the ``request``'s resource (by default a whole GPU's); an empty
    tuple when no node has such a product. None for a MIG model with no product
    words: any node that offers the slice will do.
    """
    request = request or unit_request(gpu_model)
    if not request.words:
        return None
    found = {
        n.product
        for n in matching_nodes(snapshot, request.resource, None, request.shared)
        if n.product and model_matches(request.words, n.product)
    }
    return tuple(sorted(found))


def cluster_counts(
    snapshot: ClusterSnapshot,
    resource: str,
    products: tuple[str, ...] | None,
    pending: int = 0,
    shared: bool | None = None,
) -> dict[str, int]:
    """``{"free", "total", "largest_free"}`` units of one kind, less ``pending`` claims not yet scheduled.

    ``largest_free`` is the most free on one node: a pod's GPUs all come from
    one node, so a request for more than that cannot be scheduled now. Shares
    are counted as the nodes advertise them (GPUs × replicas).
    """
    nodes = matching_nodes(snapshot, resource, products, shared)
    total = sum(n.allocatable[resource] for n in nodes)
    frees = [n.free(resource) for n in nodes]
    free = max(sum(frees) - pending, 0)
    return {"free": free, "total": total, "largest_free": min(max(frees, default=0), free)}


def largest_node(
    snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None, shared: bool | None = None
) -> int:
    """The most GPUs of this kind any one node has in all (the biggest request that can ever fit)."""
    return max((n.allocatable[resource] for n in matching_nodes(snapshot, resource, products, shared)), default=0)


def node_memory_mib(
    snapshot: ClusterSnapshot, resource: str, products: tuple[str, ...] | None, shared: bool | None = None
) -> int:
    """The GPU memory GFD reports for these nodes (the smallest, if they differ); 0 if unknown."""
    values = [n.memory_mib for n in matching_nodes(snapshot, resource, products, shared) if n.memory_mib]
    return min(values, default=0)


def node_replicas(snapshot: ClusterSnapshot, request: UnitRequest, products: tuple[str, ...] | None) -> dict[str, int]:
    """``{node: replicas per GPU}`` of the nodes that offer a share request's resource."""
    return {
        n.name: n.replicas_of(request.resource)
        for n in matching_nodes(snapshot, request.resource, products, request.shared)
    }


def unit_memory_mib(
    snapshot: ClusterSnapshot, request: UnitRequest, products: tuple[str, ...] | None, gpu_model: str = ""
) -> int:
    """The memory of one unit on these nodes (the smallest where they differ); 0 if unknown.

    A whole GPU: GFD's ``nvidia.com/gpu.memory``. A share: that divided by the
    node's replicas, its cap (or the memory ``gpu_model`` names, divided so).
    A MIG slice: GFD's ``nvidia.com/mig-<slice>.memory``, else the slice's name
    (``1g.10gb``: 10 GiB).
    """
    nodes = matching_nodes(snapshot, request.resource, products, request.shared)
    if request.unit == "mig":
        values = [n.mig_memory_mib[request.mig] for n in nodes if n.mig_memory_mib.get(request.mig)]
        return min(values, default=0) or memory_from_name(request.mig or "") or 0
    if request.unit == "share":
        named = memory_from_name(gpu_model) if gpu_model else None
        values = [
            (n.memory_mib or named or 0) // n.replicas_of(request.resource) for n in nodes if n.memory_mib or named
        ]
        return min(values, default=0)
    return min((n.memory_mib for n in nodes if n.memory_mib), default=0)


class ClusterInventory:
    """A cached :class:`ClusterSnapshot`, refreshed at most every ``ttl`` seconds.

    One fetch at a time serves every caller. A failed fetch keeps the last
    snapshot (and records the error) so that a brief API outage does not empty
    the form.
    """

    def __init__(
        self,
        fetch: Fetch,
        ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        resources: tuple[str, ...] = (),
    ):
        self.fetch = fetch
        self.ttl = ttl
        self.clock = clock
        self.resources = tuple(resources)  # resources kept besides nvidia.com/* (take_snapshot)
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
            self.snapshot = take_snapshot(nodes, pods, self.resources)
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


def placeholder_devices(
    resource: str, count: int, name: str, memory_mib: int, simulated: bool = False
) -> list[GPUDevice]:
    """What the mixin records as a session's "devices" on Kubernetes: one placeholder per GPU.

    The ledger counts a session's GPUs from this list (GPU-hour budgets); the
    real device UUIDs are known only inside the pod. ``simulated``: the nodes'
    GPUs are simulated (the k8s test layer's device plugin), and the session says so.
    """
    return [
        GPUDevice(index=str(i), uuid=f"{resource}:{i}", name=name, memory_mib=memory_mib, simulated=simulated)
        for i in range(count)
    ]


def simulated_products(products: tuple[str, ...] | None) -> bool:
    """Whether every node product a unit may land on is a simulated one (``Simulated-T4``: the test cluster's)."""
    return bool(products) and all(p.lower().startswith("simulated") for p in products)


class ClusterAllocator(FairQueue, Allocator):
    """The hub's claims on the cluster's GPUs and a FIFO wait queue per GPU kind.

    A spawn for ``count`` GPUs goes ahead (its pod is created) when the cached
    snapshot shows that many free on one node, after the claims of this hub's
    other spawns whose pods are not scheduled yet. Otherwise it waits in the
    queue of its kind (resource, products, time-sliced or not); the queue is
    re-checked when a claim is released and whenever the snapshot is refreshed,
    which happens every ``ttl`` while anyone waits. Strict FIFO per kind, as on a
    single host. A share (``share=``) or a MIG slice (``mig=``) is one unit of its
    own resource: whole GPUs, shares and slices of one model are different kinds
    on a cluster (a node is time-sliced or not, a MIG-enabled GPU offers slices
    only), so they never block each other.

    The scheduler has the last word: other workloads can take a GPU between the
    snapshot and the pod's creation, and then the pod stays Pending (the spawn
    page shows Kubernetes' reason) until a GPU frees or the start times out.
    """

    log = log
    shares_pooled = False  # a share is a replica of a time-sliced node's GPU: whole GPUs are on other nodes

    def __init__(
        self,
        inventory: ClusterInventory,
        products_override: dict[str, list[str]] | None = None,
        shared_resource: str = SHARED_RESOURCE,
    ):
        super().__init__()
        self.inventory = inventory
        self.products_override = {k: tuple(sorted(v)) for k, v in (products_override or {}).items()}
        self.shared_resource = shared_resource
        self.devices: list[GPUDevice] = []  # the hub names no device on a cluster: the device plugin picks them
        self._claims: dict[str, Claim] = {}
        self._poller: asyncio.Task | None = None
        inventory.listeners.append(self._drain)

    # -- reading -----------------------------------------------------------
    def request(self, gpu_model: str, *, share: int | None = None, mig: str | None = None) -> UnitRequest:
        """What one unit of a profile asks for (:func:`unit_request` with this hub's shared resource)."""
        return unit_request(gpu_model, share=share, mig=mig, shared_resource=self.shared_resource)

    def kind(
        self, gpu_model: str, *, share: int | None = None, mig: str | None = None
    ) -> tuple[str, tuple[str, ...] | None, bool | None]:
        """``(resource, products, shared)`` of a profile's unit, from ``gpu_node_products`` or the snapshot.

        Pinned products apply to every profile of the model; a whole GPU ignores
        the ``-SHARED`` ones among them and a share of the un-renamed
        ``nvidia.com/gpu`` takes only those.
        """
        request = self.request(gpu_model, share=share, mig=mig)
        if gpu_model in self.products_override:
            pinned = self.products_override[gpu_model]
            if request.shared is not None:
                pinned = tuple(p for p in pinned if p.endswith(SHARED_PRODUCT_SUFFIX) == request.shared)
            return request.resource, pinned, request.shared
        snapshot = self.inventory.snapshot
        if snapshot is None:
            return request.resource, None if not request.words else (), request.shared
        return request.resource, products_for(snapshot, gpu_model, request), request.shared

    def pending(self, resource: str, products: tuple[str, ...] | None, shared: bool | None = None) -> int:
        """GPUs of this kind claimed by spawns whose pods the snapshot does not show scheduled yet."""
        snapshot = self.inventory.snapshot
        scheduled = snapshot.scheduled_sessions if snapshot else frozenset()
        return sum(
            c.count
            for c in self._claims.values()
            if c.resource == resource
            and (c.products is None or products is None or set(c.products) & set(products))
            and (c.shared is None or shared is None or c.shared == shared)
            and not (c.session_id and c.session_id in scheduled)
        )

    def matching(self, model: str, *, share: int | None = None, mig: str | None = None) -> list[GPUDevice]:
        return []

    def simulated(self, model: str | None = None, *, share: int | None = None, mig: str | None = None) -> bool:
        """Whether the nodes a profile would land on (None: any GPU node) have simulated GPUs (``Simulated-T4``)."""
        if model is not None:
            return simulated_products(self.kind(model, share=share, mig=mig)[1])
        snapshot = self.inventory.snapshot
        return bool(snapshot) and simulated_products(tuple(n.product for n in snapshot.nodes if n.product))

    def waiting(self, model: str, *, share: int | None = None, mig: str | None = None) -> int:
        return len(self._queues.get(self.kind(model, share=share, mig=mig), []))

    def counts(self, model: str, *, share: int | None = None, mig: str | None = None) -> dict:
        """Free, total and waiting units of a profile for the form; ``known`` is False without a snapshot.

        ``unit`` is "gpu", "share" or "mig"; ``memory_mib`` is one unit's (a
        share's cap); a share's counts also give the nodes' ``replicas`` per GPU.
        """
        request = self.request(model, share=share, mig=mig)
        resource, products, shared = self.kind(model, share=share, mig=mig)
        snapshot = self.inventory.snapshot
        waiting = len(self._queues.get((resource, products, shared), []))
        out = {"waiting": waiting, "unit": request.unit}
        if snapshot is None:
            out.update(free=0, total=0, largest_free=0, known=False, memory_mib=0)
        else:
            counts = cluster_counts(snapshot, resource, products, self.pending(resource, products, shared), shared)
            out.update(counts, known=True, memory_mib=unit_memory_mib(snapshot, request, products, model))
        if request.unit == "share":
            replicas = node_replicas(snapshot, request, products) if snapshot else {}
            out["replicas"] = tuple(sorted(set(replicas.values())))
        return out

    def unit_facts(self, model: str, *, share: int | None = None, mig: str | None = None) -> tuple[int | None, str]:
        """``(memory cap in MiB or None, share text)`` a server of this profile is told (its environment).

        A share: the smallest cap of the nodes it may land on and ``"1/k"`` with
        their replicas (the most, where they differ; the profile's ``gpu_share``
        while no node is known). A MIG slice: its memory and ``"mig:1g.10gb"``.
        A whole GPU: ``(None, "")``.
        """
        request = self.request(model, share=share, mig=mig)
        if request.unit == "gpu":
            return None, ""
        products = self.kind(model, share=share, mig=mig)[1]
        snapshot = self.inventory.snapshot
        if request.unit == "mig":
            memory = unit_memory_mib(snapshot, request, products) if snapshot else memory_from_name(request.mig)
            return memory or None, f"mig:{request.mig}"
        replicas = node_replicas(snapshot, request, products) if snapshot else {}
        k = max(replicas.values(), default=0) or share or 1
        memory = unit_memory_mib(snapshot, request, products, model) if snapshot else 0
        if not memory:
            named = memory_from_name(model)
            memory = named // k if named else 0
        return memory or None, f"1/{k}"

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
        *,
        share: int | None = None,
        mig: str | None = None,
    ) -> list[GPUDevice]:
        """Claim ``count`` units of ``model``, waiting in the queue until the cluster has them free."""
        if count <= 0:
            return []
        request = self.request(model, share=share, mig=mig)
        label = f"{model} MIG {request.mig}" if mig else model
        if key in self._claims:
            c = self._claims[key]
            return placeholder_devices(c.resource, c.count, label, 0)
        snapshot = await self.inventory.get()
        resource, products, shared = self.kind(model, share=share, mig=mig)
        if snapshot is None:
            raise AllocationError(
                "The cluster's GPUs cannot be read right now; nothing was started. Try again in a minute,"
                " or tell your administrator."
            )
        biggest = largest_node(snapshot, resource, products, shared)
        if biggest < count:
            if request.unit == "share":
                raise AllocationError(
                    "This profile needs a share of a time-sliced {model} GPU, but no node of the cluster offers"
                    " one ({resource}). Ask your administrator to fix the profile.",
                    model=model,
                    resource=resource,
                )
            if biggest:
                raise AllocationError(
                    "This profile needs {count}× {model} on one node, but no node has {count}× {model}."
                    " Ask your administrator to fix the profile.",
                    count=count,
                    model=label,
                )
            raise AllocationError(
                "This profile needs {count}× {model} on one node, but the cluster has no {model}."
                " Ask your administrator to fix the profile.",
                count=count,
                model=label,
            )
        if request.unit == "share":
            timeout_message = Phrase(
                "No share of a time-sliced {model} GPU became free in the cluster within {limit}; nothing was"
                " started. Try again later or choose another profile.",
                model=model,
                limit=wait_limit_text(timeout),
            )
        else:
            timeout_message = Phrase(
                "No {model} became free in the cluster within {limit}; nothing was started. Try again later or"
                " choose another profile.",
                model=label,
                limit=wait_limit_text(timeout),
            )
        return await self._take_turn(
            key,
            (resource, products, shared),
            label,
            count,
            claim=Claim(resource, products, count, shared=shared, unit=request, gpu_model=model),
            timeout=timeout,
            on_position=on_position,
            timeout_message=timeout_message,
        )

    def attach(self, key: str, session_id: str) -> None:
        """Note the session id of a claim's pod: once the snapshot shows it scheduled, it stops being pending."""
        claim = self._claims.get(key)
        if claim is not None:
            self._claims[key] = replace(claim, session_id=session_id)

    def release(self, key: str) -> list[str]:
        claim = self._claims.pop(key, None)
        if claim is None:
            return []
        log.info("%s released its claim on %d× %s", key, claim.count, claim.resource)
        self._drain()
        return [f"{claim.resource}:{i}" for i in range(claim.count)]

    def park(self, key: str, as_key: str) -> list[str]:
        """A pod that may still run holds its GPUs on the cluster, and the snapshot counts them: the claim goes."""
        return self.release(key)

    def restore(self, key: str, uuids: list[str]) -> list[str]:
        """After a hub restart: the pod is running and the snapshot counts its GPUs; nothing to record."""
        return list(uuids)

    # -- queue -------------------------------------------------------------
    def _fits(self, waiter: Waiter) -> bool:
        claim = waiter.claim
        snapshot = self.inventory.snapshot
        if snapshot is None:
            return False
        pending = self.pending(claim.resource, claim.products, claim.shared)
        counts = cluster_counts(snapshot, claim.resource, claim.products, pending, claim.shared)
        return counts["largest_free"] >= claim.count

    def _grant(self, waiter: Waiter) -> list[GPUDevice]:
        claim = waiter.claim
        self._claims[waiter.key] = claim
        snapshot = self.inventory.snapshot
        memory = 0
        if snapshot and claim.unit is not None:
            memory = unit_memory_mib(snapshot, claim.unit, claim.products, claim.gpu_model)  # a share's: its cap
        elif snapshot:
            memory = node_memory_mib(snapshot, claim.resource, claim.products, claim.shared)
        return placeholder_devices(
            claim.resource, claim.count, waiter.model, memory, simulated=simulated_products(claim.products)
        )

    def _on_wait(self) -> None:
        """While anyone waits, refresh the snapshot every ``ttl`` (GPUs freed by others show up)."""
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll_while_waiting())

    async def _poll_while_waiting(self) -> None:
        while any(self._queues.values()):
            await asyncio.sleep(max(self.inventory.ttl, 0.05))
            await self.inventory.get(force=True)


def replica_warnings(profiles, allocator: ClusterAllocator) -> list[str]:
    """What the hub-start check warns of in the share and MIG profiles, against the cluster's snapshot.

    On Kubernetes the node decides how many replicas a GPU has (the GPU
    Operator's ``sharing.timeSlicing.resources[].replicas``): a profile whose
    ``gpu_share`` differs is priced as one share in ``gpu_share`` but gets one in
    the node's replicas; a share or MIG profile no node offers is refused at spawn.
    """
    snapshot = allocator.inventory.snapshot
    if snapshot is None:
        return []
    warnings = []
    for p in profiles:
        share, mig = getattr(p, "gpu_share", None), getattr(p, "mig", None)
        if p.gpu_count and mig:
            resource, products, shared = allocator.kind(p.gpu_model, mig=mig)
            if not matching_nodes(snapshot, resource, products, shared):
                warnings.append(
                    f"profile {p.slug!r}: no {p.gpu_model} node of the cluster offers {resource}: its spawns"
                    f" are refused until one does; partition the GPUs with the GPU Operator's MIG manager"
                    f" (mig.strategy mixed; docs/kubernetes.md, Shared GPUs on Kubernetes)"
                )
        if not p.gpu_count or not share:
            continue
        request = allocator.request(p.gpu_model, share=share)
        resource, products, _ = allocator.kind(p.gpu_model, share=share)
        replicas = node_replicas(snapshot, request, products)
        if not replicas:
            warnings.append(
                f"profile {p.slug!r}: no {p.gpu_model} node of the cluster offers {resource} (time-sliced GPUs):"
                f" its spawns are refused until one does; enable time-slicing in the GPU Operator"
                f" (docs/kubernetes.md, Shared GPUs on Kubernetes) or set GPUKubeSpawner.gpu_shared_resource"
            )
            continue
        other = {name: k for name, k in replicas.items() if k != share}
        if other:
            nodes = ", ".join(f"{name} ({k} replicas)" for name, k in sorted(other.items()))
            warnings.append(
                f"profile {p.slug!r}: 'gpu_share' is {share}, but the node decides on Kubernetes and these nodes"
                f" give each GPU another number of replicas: {nodes}; a server there gets that share of the GPU"
                f" (its memory cap follows the node), at the profile's price. Set 'gpu_share' to the nodes'"
                f" replicas, or change sharing.timeSlicing.resources[].replicas in the GPU Operator's config"
            )
    return warnings


# One allocator per inventory configuration per hub process, shared by every spawner.
_ALLOCATORS: dict[tuple, ClusterAllocator] = {}


def shared_cluster_allocator(
    fetch, ttl: float, products: dict, shared_resource: str = SHARED_RESOURCE
) -> ClusterAllocator:
    """The hub-wide :class:`ClusterAllocator` for this configuration, created on first use."""
    key = (fetch, ttl, repr(sorted(products.items())), shared_resource)
    if key not in _ALLOCATORS:
        inventory = ClusterInventory(fetch, ttl, resources=(shared_resource,))
        _ALLOCATORS[key] = ClusterAllocator(inventory, products, shared_resource)
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
