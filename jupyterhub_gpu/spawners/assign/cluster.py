"""The GPUs of a Kubernetes cluster: free/total counts for the form, and the hub's wait queue.

On Kubernetes the NVIDIA device plugin assigns the GPUs, so the hub never picks
a device. What the hub does know, from the Kubernetes API, is each node's
allocatable GPUs (``status.allocatable``) and GPU product (the
``nvidia.com/gpu.product`` label), and what the pods scheduled there request.

- :mod:`.cluster_snapshot` turns the raw node and pod lists into a
  :class:`~.cluster_snapshot.ClusterSnapshot` and counts free and total GPUs
  for a profile: pure functions, tested without a cluster.
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
from dataclasses import dataclass, replace

from jupyterhub_gpu.gpus.backends import SHARED_RESOURCE, get_backend
from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.gpus.names import memory_from_name
from jupyterhub_gpu.spawners.assign.cluster_snapshot import (
    ClusterSnapshot,
    UnitRequest,
    cluster_counts,
    largest_node,
    matching_nodes,
    node_memory_mib,
    node_replicas,
    products_for,
    take_snapshot,
    unit_memory_mib,
    unit_request,
)
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, Allocator
from jupyterhub_gpu.spawners.assign.queue import FairQueue, Waiter, wait_limit_text
from jupyterhub_gpu.spawners.kube.objects import SHARED_PRODUCT_SUFFIX
from jupyterhub_gpu.spawners.messages import Phrase

log = logging.getLogger("jupyterhub_gpu.kube_inventory")

#: ``async fetch() -> (nodes, pods)``: raw Node and Pod objects as the API's JSON (camelCase dicts).
Fetch = Callable[[], Awaitable[tuple[list[dict], list[dict]]]]


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
        domains: tuple[str, ...] = (),
    ):
        self.fetch = fetch
        self.ttl = ttl
        self.clock = clock
        self.resources = tuple(resources)  # resources kept besides nvidia.com/* (take_snapshot)
        self.domains = tuple(domains)  # and the GPU backend's domains of resources
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
            self.snapshot = take_snapshot(nodes, pods, self.resources, self.domains)
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


def _label(model: str, request, mig: str | None) -> str:
    """What a unit is called in the session's devices: the model, or its MIG slice."""
    return f"{model} MIG {request.mig}" if mig else model


def _placeholders(claim: Claim, label: str, snapshot) -> list[GPUDevice]:
    """The placeholders of a claim's units (granted, or admitted by Kueue), with one unit's memory from the
    snapshot (a share's: its cap; 0 when the cluster could not be read)."""
    memory = 0
    if snapshot and claim.unit is not None:
        memory = unit_memory_mib(snapshot, claim.unit, claim.products, claim.gpu_model)
    elif snapshot:
        memory = node_memory_mib(snapshot, claim.resource, claim.products, claim.shared)
    return placeholder_devices(claim.resource, claim.count, label, memory, simulated=simulated_products(claim.products))


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
        backend: str = "nvml",
    ):
        super().__init__()
        self.inventory = inventory
        self.products_override = {k: tuple(sorted(v)) for k, v in (products_override or {}).items()}
        self.shared_resource = shared_resource
        self.backend = backend  # the GPU backend that names a unit's extended resource
        self.devices: list[GPUDevice] = []  # the hub names no device on a cluster: the device plugin picks them
        self._claims: dict[str, Claim] = {}
        self._poller: asyncio.Task | None = None
        inventory.listeners.append(self._drain)

    # -- reading -----------------------------------------------------------
    def request(self, gpu_model: str, *, share: int | None = None, mig: str | None = None) -> UnitRequest:
        """What one unit of a profile asks for (:func:`unit_request` with this hub's shared resource and backend)."""
        return unit_request(gpu_model, share=share, mig=mig, shared_resource=self.shared_resource, backend=self.backend)

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
        label = _label(model, request, mig)
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

    async def unclaimed(
        self, model: str, count: int, *, share: int | None = None, mig: str | None = None
    ) -> list[GPUDevice]:
        """The placeholders of a spawn whose GPUs another scheduler admits (Kueue mode): what :meth:`acquire`
        hands out, without a claim or a wait. The session's GPU count is read from them (GPU-hour budgets,
        GPU-aware culling, the server's sampler), so they must be there even though the hub holds nothing."""
        if count <= 0:
            return []
        request = self.request(model, share=share, mig=mig)
        label = _label(model, request, mig)
        try:
            snapshot = await self.inventory.get()
        except Exception:  # the memory is a nicety; the count is what must be right
            log.warning("the cluster's GPUs could not be read for a Kueue spawn's memory figure", exc_info=True)
            snapshot = None
        resource, products, shared = self.kind(model, share=share, mig=mig)
        claim = Claim(resource, products, count, shared=shared, unit=request, gpu_model=model)
        return _placeholders(claim, label, snapshot)

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
        return _placeholders(claim, waiter.model, self.inventory.snapshot)

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
    fetch, ttl: float, products: dict, shared_resource: str = SHARED_RESOURCE, backend: str = "nvml"
) -> ClusterAllocator:
    """The hub-wide :class:`ClusterAllocator` for this configuration, created on first use; ``backend`` is the
    GPU backend whose device plugin's resources the pods ask for and the snapshot counts."""
    key = (fetch, ttl, repr(sorted(products.items())), shared_resource, backend)
    if key not in _ALLOCATORS:
        domains = get_backend(backend).resource_domains
        inventory = ClusterInventory(fetch, ttl, resources=(shared_resource,), domains=domains)
        _ALLOCATORS[key] = ClusterAllocator(inventory, products, shared_resource, backend)
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
