"""GPUKubeSpawner: GPU profiles over KubeSpawner, one hardened pod per session (Zero to JupyterHub).

A profile becomes a pod that asks the NVIDIA device plugin for ``gpu_count`` of
``nvidia.com/gpu`` (or of a MIG slice such as ``nvidia.com/mig-1g.10gb``) on a
node of the right GPU product, tolerates the GPU nodes' taint, mounts its
owner's PVC at ``/home/jovyan/work`` and the shared datasets read-only, and runs
as a non-root user with no privilege escalation and every capability dropped.
The pieces come from the pure builders in :mod:`.objects`, a pod's moments from
:mod:`.pods`, a profile's unit, form line and checks from :mod:`.profiles`; KubeSpawner's
own ``get_pod_manifest()`` assembles them, and the result is checked again so
that no admin extra can weaken it.

The device plugin, not the hub, picks the GPUs. The form's free/total counts
and the wait queue come from :mod:`..assign.cluster` (the nodes' allocatable
GPUs and the running pods, read through the Kubernetes API and cached).

Shared GPUs (docs/kubernetes.md#shared-gpus-on-kubernetes): a profile with ``mig: "1g.10gb"`` asks for one
``nvidia.com/mig-1g.10gb`` on nodes of its ``gpu_model``'s product; one with
``gpu_share: 4`` for one replica of ``gpu_shared_resource`` (the GPU Operator's
time-slicing). Their pods are told their memory cap and share
(``JUPYTERHUB_GPU_MEMORY_LIMIT_MIB``, ``JUPYTERHUB_GPU_SHARE``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from datetime import datetime

from jupyterhub.utils import maybe_future
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from kubespawner import KubeSpawner
from traitlets import Any, Dict, Float, Int, List, TraitError, Unicode, default, validate

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.backends import SHARED_RESOURCE, get_backend
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners.assign.cluster import (
    ClusterAllocator,
    fetch_with_kubernetes_asyncio,
    shared_cluster_allocator,
)
from jupyterhub_gpu.spawners.kube import eviction
from jupyterhub_gpu.spawners.kube.kueue import kueue_labels, kueue_profile_problems
from jupyterhub_gpu.spawners.kube.kueue_mode import KueueMode
from jupyterhub_gpu.spawners.kube.objects import (
    SESSION_LABEL,
    SchemaError,
    enforce_pod_policy,
    make_kube_env,
    make_pod_labels,
    make_resources,
    make_scheduling,
    make_security_contexts,
    make_storage,
    resource_name_problem,
    validate_object,
)
from jupyterhub_gpu.spawners.kube.pods import pod_bound_at, pod_finished_at
from jupyterhub_gpu.spawners.kube.profiles import (
    describe_kube_profile,
    kube_unit_problems,
    start_replica_check,
    unit_of,
)
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.profiles import Profile, ProfileError, parse_profiles
from jupyterhub_gpu.spawners.startup import probe_and_check

_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class GPUKubeSpawner(KueueMode, GPUSpawnerMixin, KubeSpawner):
    """One hardened pod per session asking the NVIDIA device plugin for its profile's GPUs."""

    work_dir = Unicode(
        "/home/jovyan/work",
        help="""
        Where the user's PVC is mounted in the pod.

            c.GPUKubeSpawner.work_dir = "/home/jovyan/work"
        """,
    ).tag(config=True)

    datasets_claim = Unicode(
        "",
        help="""
        Name of a PersistentVolumeClaim (ReadOnlyMany) in the users' namespace
        with shared datasets, mounted read-only at ``datasets_dir``; empty for none.

            c.GPUKubeSpawner.datasets_claim = "lab-datasets"
        """,
    ).tag(config=True)

    datasets_dir = Unicode(
        "/home/jovyan/datasets",
        help="""
        Where the shared datasets are mounted (read-only).

            c.GPUKubeSpawner.datasets_dir = "/home/jovyan/datasets"
        """,
    ).tag(config=True)

    server_uid = Int(
        1000,
        help="""
        The uid the server runs as (``runAsUser``); root (0) is refused.

            c.GPUKubeSpawner.server_uid = 1000
        """,
    ).tag(config=True)

    server_gid = Int(
        100,
        help="""
        The gid the server runs as (``runAsGroup``) and owns its volumes with (``fsGroup``).

            c.GPUKubeSpawner.server_gid = 100
        """,
    ).tag(config=True)

    gpu_tolerations = List(
        Dict(),
        help="""
        Tolerations added to GPU pods besides ``nvidia.com/gpu:NoSchedule``
        (for example your cluster's own taint on GPU nodes). CPU-only pods get none.

            c.GPUKubeSpawner.gpu_tolerations = [
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            ]
        """,
    ).tag(config=True)

    gpu_node_products = Dict(
        help="""
        The ``nvidia.com/gpu.product`` label values each profile ``gpu_model``
        may run on. By default they are found from the nodes' labels (set by GPU
        Feature Discovery): "A100" matches ``NVIDIA-A100-SXM4-40GB`` and
        ``NVIDIA-A100-SXM4-80GB``. Set it to pin a model to some products, or on
        a cluster without GPU Feature Discovery.

            c.GPUKubeSpawner.gpu_node_products = {"A100": ["NVIDIA-A100-SXM4-80GB"]}
        """,
    ).tag(config=True)

    inventory_ttl = Float(
        30,
        help="""
        Seconds the cluster's GPU counts (nodes and pods, two API list calls) are
        cached: the form never costs an API call per request. While a spawn waits
        for a GPU, the counts are refreshed this often.

            c.GPUKubeSpawner.inventory_ttl = 30
        """,
    ).tag(config=True)

    gpu_shared_resource = Unicode(
        SHARED_RESOURCE,
        help="""
        The extended resource a time-sliced share (a profile's ``gpu_share``) asks
        for: one replica of the GPU Operator's time-slicing. The default is what the
        operator advertises with ``renameByDefault: true``; with
        ``renameByDefault: false`` the replicas keep the name ``nvidia.com/gpu``
        (set that here), and the nodes' ``nvidia.com/gpu.replicas`` label and
        ``-SHARED`` product tell them from whole GPUs. The node decides how many
        replicas each GPU has.

            c.GPUKubeSpawner.gpu_shared_resource = "nvidia.com/gpu.shared"
        """,
    ).tag(config=True)

    inventory_fetch = Any(
        None,
        allow_none=True,
        help="""
        ``async fetch() -> (nodes, pods)`` returning the API's Node and Pod JSON
        (camelCase dicts). None: list them with kubernetes_asyncio (needs the
        ClusterRole in config/kubernetes/hub-gpu-inventory-rbac.yaml).
        """,
    ).tag(config=True)

    @default("cmd")
    def _default_cmd(self):
        # an explicit command, so that KubeSpawner passes our arguments (kernel culling)
        return ["jupyterhub-singleuser"]

    @default("storage_pvc_ensure")
    def _default_pvc_ensure(self):
        return True

    @default("storage_capacity")
    def _default_storage_capacity(self):
        return "10Gi"

    @validate("server_uid")
    def _valid_uid(self, proposal):
        if proposal.value <= 0:
            raise TraitError(f"server_uid must be a non-root uid (> 0), got {proposal.value}")
        return proposal.value

    @validate("server_gid")
    def _valid_gid(self, proposal):
        if proposal.value < 0:
            raise TraitError(f"server_gid must not be negative, got {proposal.value}")
        return proposal.value

    @validate("inventory_ttl")
    def _valid_ttl(self, proposal):
        if not 0 < proposal.value <= 3600:
            raise TraitError(f"inventory_ttl must be between 0 and 3600 seconds, got {proposal.value}")
        return proposal.value

    @validate("datasets_claim")
    def _valid_claim(self, proposal):
        if proposal.value and (len(proposal.value) > 253 or not _K8S_NAME.fullmatch(proposal.value)):
            raise TraitError(f"datasets_claim must be a Kubernetes object name, got {proposal.value!r}")
        return proposal.value

    @validate("inventory_fetch")
    def _valid_fetch(self, proposal):
        if proposal.value is not None and not callable(proposal.value):
            raise TraitError(f"inventory_fetch must be an async function or None, got {proposal.value!r}")
        return proposal.value

    @validate("gpu_shared_resource")
    def _valid_shared_resource(self, proposal):
        problem = resource_name_problem(proposal.value)
        if problem:
            raise TraitError(f"gpu_shared_resource {problem}")
        return proposal.value

    @validate("gpu_node_products")
    def _valid_products(self, proposal):
        for model, products in proposal.value.items():
            if (
                not isinstance(model, str)
                or not isinstance(products, list)
                or not products
                or not all(isinstance(p, str) and p for p in products)
            ):
                raise TraitError(
                    "gpu_node_products must map a gpu_model to a non-empty list of nvidia.com/gpu.product"
                    f" values, got {model!r}: {products!r}"
                )
        return proposal.value

    # -- the cluster's GPUs ------------------------------------------------
    @property
    def allocator(self) -> ClusterAllocator:
        fetch = self.inventory_fetch or fetch_with_kubernetes_asyncio
        return shared_cluster_allocator(
            fetch, self.inventory_ttl, self.gpu_node_products, self.gpu_shared_resource, self.gpu_backend
        )

    async def _render_gpu_options_form(self, spawner=None):
        await self.allocator.inventory.get()  # cached for inventory_ttl
        return await super()._render_gpu_options_form(spawner)

    def gpu_profile_summary(self, profile: Profile, currency: Currency, lang: str = "en") -> str:
        counts = self.allocator.counts(profile.gpu_model, **unit_of(profile)) if profile.gpu_count else None
        return describe_kube_profile(profile, counts, currency, lang)

    async def load_user_options(self):
        """Nothing to do: ``run_pre_spawn_hook`` validated and chose our profile (``profile_list`` is unused)."""

    # -- building the pod --------------------------------------------------
    def _gpu_base(self) -> dict:
        """The admin's own KubeSpawner settings, kept once, that each session's pieces are added to."""
        if not hasattr(self, "_gpu_base_config"):
            self._gpu_base_config = {
                name: getattr(self, name) if callable(getattr(self, name)) else copy.deepcopy(getattr(self, name))
                for name in (
                    "node_selector",
                    "node_affinity_required",
                    "tolerations",
                    "volumes",
                    "volume_mounts",
                    "extra_labels",
                    "pod_security_context",
                    "container_security_context",
                )
            }
        return self._gpu_base_config

    def gpu_pod_pieces(self, profile: Profile, session_id: str) -> dict:
        """Every piece our builders contribute to this session's pod, as plain dicts."""
        resource, products, memory_limit, share = "", None, None, ""
        if profile.gpu_count:
            resource, products, _ = self.allocator.kind(profile.gpu_model, **unit_of(profile))
            memory_limit, share = self.allocator.unit_facts(profile.gpu_model, **unit_of(profile))
        pod_sc, container_sc = make_security_contexts(uid=self.server_uid, gid=self.server_gid, fs_gid=self.server_gid)
        volumes, mounts = make_storage(
            pvc_name=self.pvc_name,
            work_dir=self.work_dir,
            datasets_claim=self.datasets_claim or None,
            datasets_dir=self.datasets_dir,
        )
        return {
            "resources": make_resources(
                gpu_resource=resource,
                gpu_count=profile.gpu_count,
                cpu_limit=profile.cpu_limit,
                mem_limit=profile.mem_limit,
            ),
            "scheduling": make_scheduling(
                gpu_resource=resource,
                gpu_count=profile.gpu_count,
                products=list(products or []),
                extra_tolerations=self.gpu_tolerations,
            ),
            "pod_security_context": pod_sc,
            "container_security_context": container_sc,
            "volumes": volumes,
            "volume_mounts": mounts,
            "labels": {
                **make_pod_labels(profile_slug=profile.slug, session_id=session_id),
                **kueue_labels(self._gpu_kueue),  # its LocalQueue and priority in Kueue mode
            },
            "gpu_resource": resource,
            "memory_limit_mib": memory_limit,
            "share": share,
        }

    async def gpu_prepare(self, profile, devices):
        await self.gpu_check_image(profile)
        session_id = self._gpu_session.id
        self.allocator.attach(self._gpu_key, session_id)
        base = self._gpu_base()
        pieces = self.gpu_pod_pieces(profile, session_id)
        self._gpu_pieces = pieces
        self.image = profile.image
        # every resource comes from the builder (strings, requests = limits)
        self.cpu_limit = self.cpu_guarantee = None
        self.mem_limit = self.mem_guarantee = None
        self.extra_resource_limits = pieces["resources"]["limits"]
        self.extra_resource_guarantees = pieces["resources"]["requests"]
        scheduling = pieces["scheduling"]
        self.node_selector = {**base["node_selector"], **scheduling["node_selector"]}
        self.node_affinity_required = list(base["node_affinity_required"]) + scheduling["node_affinity_required"]
        base_tolerations = base["tolerations"]
        if isinstance(base_tolerations, dict):
            base_tolerations = self._sorted_dict_values(base_tolerations)
        self.tolerations = list(base_tolerations) + scheduling["tolerations"]
        ours = {v["name"] for v in pieces["volumes"]}
        self.volumes = pieces["volumes"] + [v for v in self._as_list(base["volumes"]) if v.get("name") not in ours]
        mount_paths = {m["mountPath"] for m in pieces["volume_mounts"]}
        self.volume_mounts = pieces["volume_mounts"] + [
            m
            for m in self._as_list(base["volume_mounts"])
            if m.get("name") not in ours and m.get("mountPath") not in mount_paths
        ]
        self.uid = self.server_uid
        self.gid = self.server_gid
        self.fs_gid = self.server_gid
        self.privileged = False
        self.allow_privilege_escalation = False
        base_psc, base_csc = base["pod_security_context"], base["container_security_context"]
        if callable(base_psc):
            base_psc = await maybe_future(base_psc(self))
        if callable(base_csc):
            base_csc = await maybe_future(base_csc(self))
        self.pod_security_context = {**(base_psc or {}), **pieces["pod_security_context"]}
        self.container_security_context = {**(base_csc or {}), **pieces["container_security_context"]}
        self.extra_labels = {**base["extra_labels"], **pieces["labels"]}
        if profile.gpu_count:
            resource = pieces["gpu_resource"]
            products = scheduling["node_selector"].get("nvidia.com/gpu.product") or ", ".join(
                v
                for term in scheduling["node_affinity_required"]
                for e in term["matchExpressions"]
                for v in e["values"]
            )
            if products:
                message = Phrase(
                    "Asking Kubernetes for {count}× {resource} on a node with {products}",
                    count=profile.gpu_count,
                    resource=resource,
                    products=products,
                )
            else:
                message = Phrase(
                    "Asking Kubernetes for {count}× {resource}", count=profile.gpu_count, resource=resource
                )
        else:
            message = Phrase("Asking Kubernetes for a CPU-only pod")
        self._gpu_pod_requested = True
        self._gpu_say(65, message)

    def _as_list(self, value) -> list:
        if isinstance(value, dict):
            return list(self._sorted_dict_values(value))
        return list(value or [])

    def get_env(self):
        env = super().get_env()
        profile = self._gpu_profile
        if profile is None or not self._gpu_session:
            return env
        pieces = getattr(self, "_gpu_pieces", None) or {}
        if profile.gpu_count and not pieces:
            resource = self.allocator.kind(profile.gpu_model, **unit_of(profile))[0]
            memory_limit, share = self.allocator.unit_facts(profile.gpu_model, **unit_of(profile))
        else:
            resource, memory_limit, share = (pieces.get(k) for k in ("gpu_resource", "memory_limit_mib", "share"))
        env = make_kube_env(
            env,
            gpu_count=profile.gpu_count,
            gpu_resource=resource or "",
            memory_limit_mib=memory_limit,
            share=share or "",
        )
        if profile.mem_limit:
            env["MEM_LIMIT"] = str(profile.mem_limit)
        if profile.cpu_limit:
            env["CPU_LIMIT"] = str(profile.cpu_limit)
        return env

    _gpu_pod_built = False  # KubeSpawner's start built the pod, to create it next

    async def get_pod_manifest(self):
        """KubeSpawner's pod, with our hardening and GPU resources forced over any admin extras."""
        self._gpu_pod_built = True
        pod = await super().get_pod_manifest()
        pieces = getattr(self, "_gpu_pieces", None)
        if not pieces:
            return pod
        from kubernetes_asyncio.client import ApiClient  # optional heavy dependency: KubeSpawner's API client

        data = ApiClient().sanitize_for_serialization(pod)
        data = enforce_pod_policy(
            data,
            pod_security=pieces["pod_security_context"],
            container_security=pieces["container_security_context"],
            resources=pieces["resources"],
            gpu_resources=(self.gpu_shared_resource,),
            gpu_domains=get_backend(self.gpu_backend).resource_domains,
        )
        try:
            return validate_object(data, "V1Pod")
        except SchemaError as e:
            raise self.gpu_refusal(
                Phrase("The server's pod could not be built; please tell your administrator."),
                reason="pod",
                log_message=f"invalid pod manifest: {e}",
                status_code=500,
            ) from e

    # -- spawn progress ----------------------------------------------------
    async def progress(self):
        """The queue position and the request first, then Kubernetes' own events (scheduling, image pull)."""
        # in Kueue mode our events go on while the pod is gated: its place in Kueue's queue, then its admission
        requested = lambda: getattr(self, "_gpu_pod_requested", False)  # noqa: E731
        async for event in self._gpu_progress(lambda: requested() and self.kueue_settled):
            yield event
        async for event in KubeSpawner.progress(self):
            yield event

    def gpu_launch_began(self) -> bool:
        return self._gpu_pod_built

    async def start(self):
        self._gpu_pod_requested = self._gpu_pod_built = False
        self._gpu_pod_finished_at = None
        self._gpu_eviction = None
        await eviction.wait_gone(self)  # a pod Kueue evicted may still end under this name: the new one after it
        return await super().start()

    # -- billing: from the pod's binding to its container's end -----------------
    _gpu_pod_finished_at: datetime | None = None
    _gpu_eviction: eviction.Eviction | None = None  # Kueue evicted this session's pod (billed to then)
    _gpu_eviction_watch: eviction.EvictionWatch | None = None

    def gpu_pod(self) -> dict | None:
        """This server's pod as KubeSpawner's pod reflector holds it (the API's Pod JSON), or None."""
        reflector = self.pod_reflector
        if reflector is None:
            return None
        return reflector.pods.get(f"{self.namespace}/{self.pod_name}")

    async def _gpu_remove_session(self, session_id: str) -> tuple[bool, bool]:
        """This server's pod, if it still runs ``session_id`` (its label), deleted at once (no grace); whether one
        was found, and whether it is still there. Only that pod: its uid is the deletion's precondition, since a
        new start of this server makes a pod of the same name (which a later retry must not delete)."""
        pod = await self._gpu_read_pod()
        if pod is None or (pod.metadata.labels or {}).get(SESSION_LABEL) != session_id:
            return False, False  # gone, or its name is another session's pod now
        uid = pod.metadata.uid
        self.log.warning(
            "jupyterhub-gpu: deleting pod %s of session %s at once: its stop failed", pod.metadata.name, session_id
        )
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        try:
            await self.api.delete_namespaced_pod(
                name=self.pod_name, namespace=self.namespace, body=options, grace_period_seconds=0
            )
        except ApiException as e:
            if e.status not in (404, 409):  # gone, or a pod of another uid by that name now
                raise
        again = await self._gpu_read_pod()
        return True, again is not None and again.metadata.uid == uid

    async def _gpu_read_pod(self):
        """This server's pod as the API server has it now (not the reflector's copy), or None."""
        try:
            return await self.api.read_namespaced_pod(name=self.pod_name, namespace=self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def gpu_confirm_start(self):
        """Billing starts when the pod was bound to a node, the moment its GPUs are held.

        Time the pod waited unscheduled for a GPU (``PodScheduled`` False) is not billed. When the
        binding cannot be read (no pod reflector), the moment the pod was asked for is kept.
        """
        await super().gpu_confirm_start()
        if not self._gpu_session:
            return
        requested = self._gpu_session.started
        now = utcnow()
        bound = pod_bound_at(self.gpu_pod()) or requested
        started = min(max(bound, requested), now)
        if started != requested:
            self.log.info("%s: billed from the pod's binding at %s (asked at %s)", self._log_name, started, requested)
        self._gpu_session = replace(self._gpu_session, started=started)
        eviction.watch(self)  # a pod in a Kueue LocalQueue: its eviction is noted within a second

    async def poll(self):
        # note the container's end before KubeSpawner's poll deletes the stopped pod
        finished = pod_finished_at(self.gpu_pod())
        if finished is not None:
            self._gpu_pod_finished_at = finished
        if self._gpu_session is not None and not self._gpu_launching:
            if await eviction.check_pod(self) is None:  # Kueue's eviction, before the pod is gone
                await eviction.check_gone_pod(self)  # or after it (the hub was down): its Workload's
            if self._gpu_eviction_watch is None and self._gpu_eviction is None:
                eviction.watch(self)  # a hub restarted under a running server
        return await eviction.ended_if_evicted(self, await super().poll())

    async def gpu_stopped_at(self):
        """The server container's termination time, as the pod reported it; Kueue's eviction when it came first."""
        return eviction.eviction_end(self, pod_finished_at(self.gpu_pod()) or self._gpu_pod_finished_at)

    # -- startup check -----------------------------------------------------
    @classmethod
    def gpu_check_config(cls, config) -> list[str]:
        """The startup check on Kubernetes: no host inventory (the cluster's is read at spawn time)."""
        probe, problems = probe_and_check(config, cls)
        if probe is None:
            return problems
        if probe.profile_list:
            problems.append(
                f"{cls.__name__}: set the GPU profiles in 'profiles', not KubeSpawner's 'profile_list'"
                " (it would bypass prices, budgets and the queue)"
            )
        if not callable(probe.profiles):
            try:
                profiles = parse_profiles(probe.profiles, require_image=True)
            except ProfileError as e:
                problems.append(str(e))
            else:
                models = {p.gpu_model for p in profiles if p.gpu_count}
                for model in sorted(set(probe.gpu_node_products) - models):
                    problems.append(f"gpu_node_products names {model!r}, which no GPU profile uses")
                problems.extend(kube_unit_problems(profiles))
                problems.extend(kueue_profile_problems(probe.kueue, profiles))
                if not problems and any(getattr(p, "gpu_share", None) or getattr(p, "mig", None) for p in profiles):
                    start_replica_check(probe, profiles)
        return problems
