"""Kueue's view of the GPUs, read from the cluster: its objects as API JSON, and a ClusterQueue's use for the pages.

When GPUKubeSpawner runs in Kueue mode (docs/kubernetes.md, "With Kueue"), Kueue admits the notebooks' pods
and a group's batch Jobs from the same ClusterQueue: the ledger knows only the notebooks. This module reads
what Kueue knows, with the reader's own Kubernetes credentials (:func:`kueue_api_client`: in the cluster the
pod's service account, else a kubeconfig), through plain GETs of the API server:

- :func:`get_json`: one object or list, as the API returns it (camelCase dicts), or None when it is not there;
- :func:`served_groups`: which API groups the server serves (Kueue's CRDs, its VisibilityOnDemand API);
- :func:`queue_usage`: a ClusterQueue's quota (nominal, used, borrowed per flavor and resource, from its spec
  and status) and its Workloads, notebooks and batch Jobs alike, pure over the JSON;
- :class:`KueueStatus`: what the pages show, read at most every ``ttl`` seconds and failing soft: a cluster
  that cannot be read is a note on the page, never an error page.

The doctor reads the same objects through :func:`get_json` (jupyterhub_gpu/doctor/kueue.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

KUEUE_GROUP = "kueue.x-k8s.io"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
#: The version of Kueue's API read here (Kueue v0.17 serves v1beta1 and v1beta2 and stores v1beta2).
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"/apis/{KUEUE_GROUP}/{KUEUE_VERSION}"
#: The label KubeSpawner puts on every user server's pod; a Workload of such a pod is a notebook.
NOTEBOOK_COMPONENT = "singleuser-server"
#: The label KubeSpawner puts on a user server's pod with its user's (escaped) name.
USER_LABEL = "hub.jupyter.org/username"
#: The user servers' pods, cluster-wide (the hub's account may list pods: its GPU inventory does).
NOTEBOOK_PODS = f"/api/v1/pods?labelSelector=component%3D{NOTEBOOK_COMPONENT}"


class KueueReadError(Exception):
    """The cluster could not be read (unreachable, no credentials, refused): the reason, in one line."""


async def kueue_api_client(kubeconfig: str = "", host: str = ""):
    """A kubernetes_asyncio ApiClient: the pod's service account in a cluster, else ``kubeconfig`` (or $KUBECONFIG).

    The caller closes it (``async with``). ``host`` overrides the API server's address (KubeSpawner's
    ``k8s_api_host``).
    """
    # optional heavy dependency: the Kubernetes client is installed with the kubernetes extra only
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            # $KUBECONFIG read now: the client's own default is the value it had when the client was imported
            where = kubeconfig or os.environ.get("KUBECONFIG") or None
            await config.load_kube_config(config_file=where, client_configuration=configuration)
    except Exception as e:  # the loaders raise ConfigException, FileNotFoundError, yaml errors...
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise KueueReadError(f"no Kubernetes credentials ({where}): {type(e).__name__}: {e}") from None
    if host:
        configuration.host = host
    return client.ApiClient(configuration=configuration)


async def get_json(api, path: str, timeout: float = 10) -> dict | None:
    """GET ``path`` of the API server as JSON; None for a 404 (not there, or not served). Raises KueueReadError."""
    # optional heavy dependency: the Kubernetes client (see kueue_api_client)
    from kubernetes_asyncio.client.rest import ApiException

    try:
        # the raw answer: the client raises for an error status only when it decodes the body itself
        response = await api.call_api(
            path,
            "GET",
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )
        body = await response.read()
        status = response.status
    except ApiException as e:
        status, body = e.status, (e.body or b"")
    except (OSError, asyncio.TimeoutError) as e:
        raise KueueReadError(f"GET {path}: {type(e).__name__}: {e}") from None
    except Exception as e:  # aiohttp's client errors are not OSErrors
        if type(e).__module__.startswith("aiohttp"):
            raise KueueReadError(f"GET {path}: {type(e).__name__}: {e}") from None
        raise
    if status == 404:
        return None
    if not 200 <= status <= 299:
        raise KueueReadError(f"GET {path}: {status} {_status_message(body)}".rstrip())
    try:
        return json.loads(body)
    except ValueError as e:
        raise KueueReadError(f"GET {path}: not JSON ({e})") from None


def _status_message(body) -> str:
    """The API server's own words for a refusal (its Status object's message), else nothing."""
    try:
        return str(json.loads(body).get("message") or "")
    except (ValueError, AttributeError):
        return ""


async def served_groups(api, timeout: float = 10) -> dict[str, list[str]]:
    """The API groups the server serves, each with its versions (the aggregation layer's included)."""
    found = await get_json(api, "/apis", timeout) or {}
    return {g["name"]: [v["version"] for v in g.get("versions") or []] for g in found.get("groups") or []}


# -- a ClusterQueue's use, pure over the API's JSON ---------------------------------------------------------


def quantity(value) -> Decimal:
    """A Kubernetes quantity as a Decimal (``"2"``, ``"500m"``, ``"1Gi"``); 0 for none."""
    if value in (None, ""):
        return Decimal(0)
    text = str(value)
    suffixes = {"m": Decimal("0.001"), "k": Decimal(1000), "M": Decimal(1000) ** 2, "G": Decimal(1000) ** 3}
    binary = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
    try:
        for suffix, factor in binary.items():
            if text.endswith(suffix):
                return Decimal(text[: -len(suffix)]) * factor
        if text[-1] in suffixes:
            return Decimal(text[:-1]) * suffixes[text[-1]]
        return Decimal(text)
    except InvalidOperation:
        return Decimal(0)


def condition(obj: dict, kind: str) -> dict | None:
    """The status condition of that type, or None."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def is_true(obj: dict, kind: str) -> bool:
    found = condition(obj, kind)
    return bool(found and found.get("status") == "True")


@dataclass(frozen=True)
class Quota:
    """One resource of one flavor of a ClusterQueue: what it may use on its own and what it uses now."""

    flavor: str
    resource: str
    nominal: Decimal
    used: Decimal  # admitted workloads' use (status.flavorsUsage)
    borrowed: Decimal  # the part of ``used`` above nominal, lent by the cohort
    borrowing_limit: Decimal | None  # None: no limit


@dataclass(frozen=True)
class WorkloadRow:
    """One Workload of a ClusterQueue: a notebook's pod or a batch Job, admitted or waiting."""

    namespace: str
    name: str
    kind: str  # "notebook", "job" or the owner's kind
    owner: str  # the pod's user (KubeSpawner's label) or the owner's name
    queue: str  # the LocalQueue
    state: str  # "admitted", "pending", "evicted", "finished"
    gpus: Decimal  # what it asks for of the GPU resources, over its pod sets
    priority_class: str
    reason: str  # Kueue's own words for a pending or evicted workload


def cluster_queue_quotas(cq: dict) -> list[Quota]:
    """Each flavor and resource of a ClusterQueue: nominal and limits from its spec, use from its status."""
    usage = {}
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            usage[(flavor.get("name"), res.get("name"))] = (quantity(res.get("total")), quantity(res.get("borrowed")))
    quotas = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                key = (flavor.get("name"), res.get("name"))
                used, borrowed = usage.get(key, (Decimal(0), Decimal(0)))
                limit = res.get("borrowingLimit")
                quotas.append(
                    Quota(
                        key[0],
                        key[1],
                        quantity(res.get("nominalQuota")),
                        used,
                        borrowed,
                        None if limit is None else quantity(limit),
                    )
                )
    return quotas


def _owner(workload: dict, notebooks: Mapping[tuple[str, str], str]) -> tuple[str, str]:
    """``(kind, owner)``: a notebook and its user when the Workload's pod is a user server, else the owner's kind."""
    meta = workload.get("metadata") or {}
    owners = meta.get("ownerReferences") or []
    if not owners:
        return "", meta.get("name", "")
    kind, name = owners[0].get("kind", ""), owners[0].get("name", "")
    if kind == "Pod" and (meta.get("namespace"), name) in notebooks:
        return "notebook", notebooks[(meta.get("namespace"), name)]
    return ("job" if kind == "Job" else kind.lower()), name


def notebook_pods(pods: list[dict]) -> dict[tuple[str, str], str]:
    """The user servers' pods (KubeSpawner's label ``component: singleuser-server``): (namespace, name) -> user.

    Kueue's Workload of a plain pod keeps none of the pod's labels, so a notebook is told by its pod.
    """
    found = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get("component") == NOTEBOOK_COMPONENT:
            found[(meta.get("namespace"), meta.get("name"))] = labels.get(USER_LABEL) or meta.get("name", "")
    return found


def _state(workload: dict) -> tuple[str, str]:
    if is_true(workload, "Finished"):
        return "finished", ""
    if is_true(workload, "Evicted"):
        return "evicted", (condition(workload, "Evicted") or {}).get("message", "")
    if is_true(workload, "Admitted"):
        return "admitted", ""
    pending = condition(workload, "QuotaReserved") or {}
    return "pending", pending.get("message", "")


def is_accelerator(resource: str) -> bool:
    """An extended resource of a device plugin (``nvidia.com/gpu``...), not Kubernetes' own (cpu, memory...)."""
    domain, slash, _ = resource.partition("/")
    return bool(slash) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _gpus(workload: dict, gpu_resources: set[str]) -> Decimal:
    """What the Workload asks of the GPU resources, over its pods (a pod set's count of pods each)."""
    total = Decimal(0)
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        count = int(podset.get("count") or 1)
        for container in ((podset.get("template") or {}).get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
            total += count * sum((quantity(v) for k, v in asked.items() if k in gpu_resources), Decimal(0))
    return total


def workload_rows(
    workloads: list[dict], cq: dict, local_queues: list[dict], notebooks: Mapping[tuple[str, str], str]
) -> list[WorkloadRow]:
    """The Workloads of the ClusterQueue ``cq`` (admitted to it, or waiting in one of its LocalQueues);
    ``notebooks`` are the user servers' pods (:func:`notebook_pods`)."""
    name = (cq.get("metadata") or {}).get("name")
    feeding = {
        ((q.get("metadata") or {}).get("namespace"), (q.get("metadata") or {}).get("name"))
        for q in local_queues
        if (q.get("spec") or {}).get("clusterQueue") == name
    }
    # the quota's accelerators: its extended resources (nvidia.com/gpu, a MIG slice, a share), not cpu or memory
    gpu_resources = {q.resource for q in cluster_queue_quotas(cq) if is_accelerator(q.resource)}
    rows = []
    for w in workloads:
        meta = w.get("metadata") or {}
        spec = w.get("spec") or {}
        admitted_to = ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if admitted_to != name and (meta.get("namespace"), spec.get("queueName")) not in feeding:
            continue
        kind, owner = _owner(w, notebooks)
        state, reason = _state(w)
        if state == "finished":
            continue
        priority = (spec.get("priorityClassRef") or {}).get("name") or spec.get("priorityClassName") or ""
        rows.append(
            WorkloadRow(
                meta.get("namespace", ""),
                meta.get("name", ""),
                kind,
                owner,
                spec.get("queueName", ""),
                state,
                _gpus(w, gpu_resources),
                priority,
                reason,
            )
        )
    order = {"admitted": 0, "evicted": 1, "pending": 2}
    return sorted(rows, key=lambda r: (order.get(r.state, 3), r.kind, r.namespace, r.name))


@dataclass(frozen=True)
class QueueUsage:
    """A ClusterQueue as the pages show it: its quotas and the notebooks and Jobs that hold or wait for them."""

    name: str
    cohort: str
    quotas: list[Quota]
    workloads: list[WorkloadRow]
    active: bool


def queue_usage(
    cq: dict, workloads: list[dict], local_queues: list[dict], notebooks: Mapping[tuple[str, str], str]
) -> QueueUsage:
    return QueueUsage(
        name=(cq.get("metadata") or {}).get("name", ""),
        cohort=(cq.get("spec") or {}).get("cohortName") or (cq.get("spec") or {}).get("cohort") or "",
        quotas=cluster_queue_quotas(cq),
        workloads=workload_rows(workloads, cq, local_queues, notebooks),
        active=is_true(cq, "Active"),
    )


# -- the pages' reader: cached, failing soft ---------------------------------------------------------------


@dataclass
class Reading:
    """The last reading: each ClusterQueue's use (by name), or the reason the cluster could not be read."""

    queues: dict[str, QueueUsage] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)  # configured ClusterQueues the cluster does not have
    error: str = ""
    at: float = 0.0  # time.monotonic() of the reading


class KueueStatus:
    """The use of each group's ClusterQueue (``queues``: group -> ClusterQueue), read at most every ``ttl`` seconds.

    The pages ask :meth:`get`. ``connect`` is an ``async () -> ApiClient`` (default: :func:`kueue_api_client`
    over ``kubeconfig``). A read that fails keeps no stale figures: the page says the cluster could not be
    read, and why.
    """

    def __init__(
        self, queues: Mapping[str, str], kubeconfig: str = "", ttl: float = 30, timeout: float = 5, connect=None
    ):
        self.queues = dict(queues)
        self.ttl = ttl
        self.timeout = timeout
        self.connect = connect or (lambda: kueue_api_client(kubeconfig))
        self.reading: Reading | None = None
        self.reads = 0  # how many times the cluster was read (the cache's test)
        self._lock = asyncio.Lock()

    async def get(self) -> Reading:
        async with self._lock:  # one read for many pages at once
            if self.reading is None or time.monotonic() - self.reading.at >= self.ttl:
                self.reading = await self.read()
            return self.reading

    async def read(self) -> Reading:
        self.reads += 1
        try:
            api = await self.connect()
            async with api:
                return await asyncio.wait_for(self._read(api), self.timeout * 3)
        except KueueReadError as e:
            return Reading(error=str(e), at=time.monotonic())
        except asyncio.TimeoutError:
            return Reading(error=f"the API server did not answer within {self.timeout * 3:g} s", at=time.monotonic())

    async def _read(self, api) -> Reading:
        reading = Reading(at=time.monotonic())
        cqs = await get_json(api, f"{KUEUE_API}/clusterqueues", self.timeout)
        if cqs is None:
            reading.error = f"the cluster does not serve Kueue's API ({KUEUE_GROUP}/{KUEUE_VERSION})"
            return reading
        workloads = (await get_json(api, f"{KUEUE_API}/workloads", self.timeout) or {}).get("items") or []
        local_queues = (await get_json(api, f"{KUEUE_API}/localqueues", self.timeout) or {}).get("items") or []
        try:
            notebooks = notebook_pods((await get_json(api, NOTEBOOK_PODS, self.timeout) or {}).get("items") or [])
        except KueueReadError:
            notebooks = {}  # pods not readable: the notebooks show as the pods they are
        by_name = {(cq.get("metadata") or {}).get("name"): cq for cq in cqs.get("items") or []}
        for name in sorted(set(self.queues.values())):
            if name in by_name:
                reading.queues[name] = queue_usage(by_name[name], workloads, local_queues, notebooks)
            else:
                reading.missing.append(name)
        return reading


#: Seconds the pages' reading of Kueue is kept: the pages cost at most four list calls this often.
PAGE_TTL = 30.0


def status_of(settings) -> KueueStatus | None:
    """The pages' reader for ``c.Kueue`` (its ``cluster_queues`` and ``kubeconfig``), or None when no group has one."""
    queues = getattr(settings, "cluster_queues", None)
    if not queues:
        return None
    return KueueStatus(queues, settings.kubeconfig, ttl=PAGE_TTL)
