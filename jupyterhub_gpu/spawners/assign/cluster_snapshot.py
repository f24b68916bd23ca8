"""The GPUs of a Kubernetes cluster as the API reports them: nodes, pods, and the counts the form shows.

Pure functions over the raw Node and Pod JSON, tested without a cluster: :func:`take_snapshot` turns the lists
into a :class:`ClusterSnapshot` (each ready node's allocatable GPUs, product, memory and time-sliced replicas,
and what the pods scheduled there request), :func:`unit_request` says what one unit of a profile asks for (a
whole GPU, a MIG slice or a time-sliced replica), and :func:`cluster_counts` counts free and total units of
it. The allocator over them is :mod:`.cluster`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jupyterhub_gpu.gpus.backends import GPU_RESOURCE, MIG_RESOURCE_PREFIX, SHARED_RESOURCE
from jupyterhub_gpu.gpus.names import memory_from_name, model_matches
from jupyterhub_gpu.spawners.kube.objects import (
    MEMORY_LABEL,
    PRODUCT_LABEL,
    REPLICAS_LABEL,
    SESSION_LABEL,
    SHARED_PRODUCT_SUFFIX,
    mig_memory_label,
    unit_resource,
)

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
    gpu_model: str,
    *,
    share: int | None = None,
    mig: str | None = None,
    shared_resource: str = SHARED_RESOURCE,
    backend: str = "nvml",
) -> UnitRequest:
    """The resource, product words and kind of node one unit of a profile needs (the resource as the GPU
    ``backend`` names it).

    A whole GPU never lands on a time-sliced node (its ``nvidia.com/gpu`` are
    replicas there); a share asking for the un-renamed ``nvidia.com/gpu``
    (``renameByDefault: false``) lands only on one; a renamed shared resource
    exists only on time-sliced nodes anyway.
    """
    resource, words = unit_resource(gpu_model, share=share, mig=mig, shared_resource=shared_resource, backend=backend)
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


def take_snapshot(
    nodes: list[dict], pods: list[dict], resources: tuple[str, ...] = (), domains: tuple[str, ...] = ()
) -> ClusterSnapshot:
    """The GPU nodes that can take pods, what is used on each, and our scheduled sessions.

    A node's ``nvidia.com/*`` resources are kept, those of ``domains`` (the GPU backend's
    :attr:`~jupyterhub_gpu.gpus.backends.GPUBackend.resource_domains`), and ``resources`` (a shared
    resource an admin renamed outside them).
    """
    kept = ("nvidia.com/", *domains)
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
            if (k.startswith(kept) or k in resources) and parse_quantity(v) > 0
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
