"""Pure builders: the pieces of a GPU server's pod on Kubernetes.

Like kubespawner's ``objects.py`` (and our Docker :mod:`.objects`), these
functions take plain values and return plain dicts in the Kubernetes API's own
camelCase shape; the tests compare whole dicts. :class:`.kube.GPUKubeSpawner`
only gathers the values, hands the pieces to KubeSpawner's traits, and checks
the finished pod with :func:`enforce_pod_policy`.

On Kubernetes the device plugin picks the GPUs: a pod asks for a count of the
extended resource its GPU backend names (:meth:`.GPUBackend.pod_resource`;
NVIDIA's by default: ``nvidia.com/gpu``, a MIG slice such as
``nvidia.com/mig-1g.10gb``, or a time-sliced replica such as
``nvidia.com/gpu.shared``) and is steered to nodes of the right GPU product by
the ``nvidia.com/gpu.product`` label of GPU Feature Discovery.
"""

from __future__ import annotations

import re
from decimal import Decimal

from jupyterhub_gpu.env import MEMORY_LIMIT_MIB, SHARE, nvml_discovery_env
from jupyterhub_gpu.gpus.backends import GPU_RESOURCE, MIG_RESOURCE_PREFIX, SHARED_RESOURCE, get_backend

PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
#: GPU Feature Discovery: how many time-sliced replicas each GPU of the node has (1, or absent: not shared).
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
#: With ``renameByDefault: false`` GPU Feature Discovery appends this to a time-sliced node's product label.
SHARED_PRODUCT_SUFFIX = "-SHARED"
LABEL_PREFIX = "jupyterhub-gpu"
SESSION_LABEL = f"{LABEL_PREFIX}/session-id"
PROFILE_LABEL = f"{LABEL_PREFIX}/profile"
MANAGED_LABEL = f"{LABEL_PREFIX}/managed"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

#: Environment the device plugin sets itself for a GPU pod; a value from us would be wrong
#: (we do not know which GPUs it picks) and, with the envvar strategy, could widen access.
DEVICE_PLUGIN_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def gpu_resource_for(gpu_model: str, backend: str = "nvml") -> tuple[str, str]:
    """``(extended resource, product words)`` for a profile's ``gpu_model`` of whole units (no share, no ``mig``).

    With NVIDIA's device plugin, ``"A100"`` asks for whole GPUs (``nvidia.com/gpu``) on A100 nodes; a model
    naming a MIG slice (``"1g.10gb"``, ``"A100 MIG 1g.10gb"``) asks for that slice
    (``nvidia.com/mig-1g.10gb``, the device plugin's "mixed" MIG strategy), on
    nodes of the product named by the remaining words, if any.
    """
    return unit_resource(gpu_model, backend=backend)


def mig_memory_label(mig_slice: str) -> str:
    """GPU Feature Discovery's label of a MIG slice's memory in MiB: ``nvidia.com/mig-1g.10gb.memory`` (mixed)."""
    return f"{MIG_RESOURCE_PREFIX}{mig_slice}.memory"


def unit_resource(
    gpu_model: str,
    *,
    share: int | None = None,
    mig: str | None = None,
    shared_resource: str = SHARED_RESOURCE,
    backend: str = "nvml",
) -> tuple[str, str]:
    """``(extended resource, product words)`` one unit of a profile asks for: as the GPU ``backend`` says
    (:meth:`.GPUBackend.pod_resource`; NVIDIA's device plugin unless the backend has its own).

    With NVIDIA's: a MIG profile (``mig: "1g.10gb"``) asks for ``nvidia.com/mig-1g.10gb`` on
    nodes of ``gpu_model``'s product; a time-sliced share (``gpu_share: 4``) for
    one replica of ``shared_resource``; anything else as :func:`gpu_resource_for`
    says (whole GPUs, or a MIG slice spelled inside ``gpu_model``).
    """
    return get_backend(backend).pod_resource(gpu_model, share=share, mig=mig, shared_resource=shared_resource)


#: An extended resource name: ``domain/name`` (a DNS subdomain, then a label-like name).
_RESOURCE_NAME = re.compile(
    r"^(?P<domain>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/"
    r"(?P<name>[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$"
)


def resource_name_problem(value: object) -> str | None:
    """Why ``value`` cannot be an extended resource a pod asks for (``nvidia.com/gpu.shared``), or None."""
    if not isinstance(value, str):
        return f"must be a string such as {SHARED_RESOURCE!r}, got {value!r}"
    m = _RESOURCE_NAME.fullmatch(value)
    if not m or len(m.group("domain")) > 253 or len(m.group("name")) > 63:
        return f"must be an extended resource name 'domain/name' such as {SHARED_RESOURCE!r}, got {value!r}"
    domain = m.group("domain")
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return f"must not be in the kubernetes.io domain (extended resources are not), got {value!r}"
    if value.startswith(MIG_RESOURCE_PREFIX):
        return f"names a MIG slice ({value!r}); a MIG profile sets 'mig' instead"
    return None


def format_cpu(cpus: float) -> str:
    """A CPU quantity: ``4`` -> ``"4"``, ``0.5`` -> ``"500m"``."""
    millis = int(Decimal(str(cpus)) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def make_resources(
    *, gpu_resource: str, gpu_count: int, cpu_limit: float | None, mem_limit: int | None
) -> dict[str, dict[str, str]]:
    """The notebook container's ``resources``: limits equal requests (Guaranteed QoS).

    A billed session must not be evicted or throttled below what its profile
    promises, so CPU and memory are requested as much as they are limited. GPUs
    are whole devices (or whole MIG slices): an extended resource has no
    overcommit, and Kubernetes requires its request to equal its limit.
    """
    limits: dict[str, str] = {}
    if cpu_limit is not None:
        limits["cpu"] = format_cpu(cpu_limit)
    if mem_limit is not None:
        limits["memory"] = str(int(mem_limit))
    if gpu_count:
        limits[gpu_resource] = str(gpu_count)
    return {"limits": dict(limits), "requests": dict(limits)}


def make_scheduling(
    *, gpu_resource: str, gpu_count: int, products: list[str], extra_tolerations: list[dict] | None = None
) -> dict:
    """Node selection and tolerations: ``{"node_selector", "node_affinity_required", "tolerations"}``.

    One GPU product: a node selector on ``nvidia.com/gpu.product``; several (the
    profile's model names more than one product, e.g. "A100" for the 40 and 80 GB
    cards): a required node affinity ``In`` them. A GPU pod tolerates the
    ``nvidia.com/gpu`` taint that GPU nodes usually carry; a CPU-only pod does
    not, so it stays off tainted GPU nodes.
    """
    node_selector: dict[str, str] = {}
    affinity: list[dict] = []
    tolerations: list[dict] = []
    if gpu_count:
        chosen = sorted(set(products))
        if len(chosen) == 1:
            node_selector[PRODUCT_LABEL] = chosen[0]
        elif chosen:
            affinity.append({"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": chosen}]})
        tolerations.append(dict(GPU_TOLERATION))
        for t in extra_tolerations or []:
            if t not in tolerations:
                tolerations.append(dict(t))
    return {"node_selector": node_selector, "node_affinity_required": affinity, "tolerations": tolerations}


def make_security_contexts(*, uid: int, gid: int, fs_gid: int) -> tuple[dict, dict]:
    """``(pod securityContext, container securityContext)``: non-root, no escalation, no capabilities."""
    if uid <= 0:
        raise ValueError(f"the server must run as a non-root uid, got {uid}")
    pod = {
        "runAsUser": uid,
        "runAsGroup": gid,
        "runAsNonRoot": True,
        "fsGroup": fs_gid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "runAsUser": uid,
        "runAsGroup": gid,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


def make_storage(
    *, pvc_name: str, work_dir: str, datasets_claim: str | None, datasets_dir: str
) -> tuple[list[dict], list[dict]]:
    """``(volumes, volumeMounts)``: the owner's PVC read-write at ``work_dir``, shared datasets read-only."""
    volumes = [{"name": "work", "persistentVolumeClaim": {"claimName": pvc_name}}]
    mounts = [{"name": "work", "mountPath": work_dir}]
    if datasets_claim:
        volumes.append({"name": "datasets", "persistentVolumeClaim": {"claimName": datasets_claim, "readOnly": True}})
        mounts.append({"name": "datasets", "mountPath": datasets_dir, "readOnly": True})
    return volumes, mounts


def make_pod_labels(*, profile_slug: str, session_id: str) -> dict[str, str]:
    """Labels that let the inventory tell this hub's pods apart and an admin find them."""
    labels = {MANAGED_LABEL: "true", PROFILE_LABEL: profile_slug, SESSION_LABEL: session_id}
    for key, value in labels.items():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise ValueError(f"label {key}={value!r} is not a valid Kubernetes label value")
    return labels


def make_kube_env(
    env: dict[str, str],
    *,
    gpu_count: int,
    gpu_resource: str,
    memory_limit_mib: int | None = None,
    share: str = "",
) -> dict[str, str]:
    """The server's environment on Kubernetes, from :func:`jupyterhub_gpu.env.make_gpu_env`'s.

    For a GPU pod the device plugin chooses the GPUs and sets
    ``NVIDIA_VISIBLE_DEVICES`` itself, so the hub's placeholders are dropped and
    the server extension is told to discover its GPUs with NVML inside the
    container (which sees only those GPUs). A CPU-only pod keeps
    ``NVIDIA_VISIBLE_DEVICES=void``: without a GPU limit, an image with
    ``NVIDIA_VISIBLE_DEVICES=all`` would otherwise see every GPU of its node.

    A time-sliced share or a MIG slice carries its memory cap
    (``JUPYTERHUB_GPU_MEMORY_LIMIT_MIB``) and what it is (``JUPYTERHUB_GPU_SHARE``:
    ``"1/4"``, ``"mig:1g.10gb"``); a whole GPU carries neither.
    """
    out = dict(env)
    if gpu_count:
        for name in DEVICE_PLUGIN_ENV:
            out.pop(name, None)
    else:
        out["NVIDIA_VISIBLE_DEVICES"] = "void"
        out["CUDA_VISIBLE_DEVICES"] = ""
    out.update(nvml_discovery_env(gpu_count, gpu_resource))
    out.pop(MEMORY_LIMIT_MIB, None)
    out.pop(SHARE, None)
    if gpu_count and memory_limit_mib:
        out[MEMORY_LIMIT_MIB] = str(int(memory_limit_mib))
    if gpu_count and share:
        out[SHARE] = share
    return out


#: securityContext keys an admin's extras may not bring: each could only weaken the defaults
#: (Unmasked /proc, a Windows host process, an SELinux type such as spc_t, an unconfined AppArmor or
#: seccomp profile at the container level, which would override the pod's RuntimeDefault).
_WEAKENING_CONTEXT_KEYS = ("procMount", "windowsOptions", "seLinuxOptions", "appArmorProfile", "seccompProfile")


def harden_security_context(existing: dict | None, required: dict) -> dict:
    """``existing`` with every key of ``required`` forced; an admin's extras cannot weaken it.

    Keys that could only weaken the defaults are removed (unless ``required`` sets them), and
    ``supplementalGroups`` loses group 0.
    """
    merged = {k: v for k, v in (existing or {}).items() if k not in _WEAKENING_CONTEXT_KEYS}
    if "supplementalGroups" in merged:
        groups = [g for g in merged["supplementalGroups"] or [] if g != 0]
        merged["supplementalGroups"] = groups
        if not groups:
            merged.pop("supplementalGroups")
    merged.update(required)
    return merged


def strip_gpu_resources(
    resources: dict | None, gpu_resources: tuple[str, ...] = (), gpu_domains: tuple[str, ...] = ()
) -> dict:
    """A container's ``resources`` without any ``nvidia.com/*`` entry, nor ``gpu_resources``, nor any of the GPU
    backend's ``gpu_domains`` (sidecars get no GPU)."""
    resources = resources or {}
    domains = ("nvidia.com/", *gpu_domains)
    return {
        part: {
            k: v for k, v in (resources.get(part) or {}).items() if not k.startswith(domains) and k not in gpu_resources
        }
        for part in ("limits", "requests")
        if resources.get(part) is not None
    }


#: pod spec fields that share the node's or another container's namespaces, or attach containers that
#: escape the policy below: removed whatever an admin's extras say
_FORBIDDEN_POD_FIELDS = ("hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "ephemeralContainers")


def _harden_container(
    c: dict,
    container_security: dict,
    host_paths: set[str],
    resources: dict | None,
    gpu_resources: tuple[str, ...] = (),
    gpu_domains: tuple[str, ...] = (),
) -> dict:
    c = dict(c)
    c["securityContext"] = harden_security_context(c.get("securityContext"), container_security)
    c["resources"] = (
        {p: dict(v) for p, v in resources.items()}
        if resources
        else strip_gpu_resources(c.get("resources"), gpu_resources, gpu_domains)
    )
    if c.get("volumeMounts"):
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m.get("name") not in host_paths]
    if c.get("volumeDevices"):
        c["volumeDevices"] = [d for d in c["volumeDevices"] if d.get("name") not in host_paths]
    if c.get("ports"):
        # a hostPort opens the server on the node's own address, outside the network policy
        c["ports"] = [{k: v for k, v in port.items() if k not in ("hostPort", "hostIP")} for port in c["ports"]]
    return c


def enforce_pod_policy(
    pod: dict,
    *,
    pod_security: dict,
    container_security: dict,
    resources: dict,
    gpu_resources: tuple[str, ...] = (),
    gpu_domains: tuple[str, ...] = (),
) -> dict:
    """The serialized pod with our security contexts and GPU resources forced.

    Admin hooks (``extra_pod_config``, ``extra_container_config``,
    ``extra_containers``, ``init_containers``, ``volumes``) are applied by KubeSpawner
    after its own fields; this re-applies the hardening over them, like the Docker
    builder does, so that no extra can add privileges or a GPU the profile does not
    pay for: every container, init containers included, gets the notebook's
    securityContext; the node's namespaces, a shared process namespace, ephemeral
    containers, ``hostPath`` volumes (and their mounts) and host ports are removed;
    the service-account token is not mounted (a user could call the Kubernetes API
    with it). Sidecars and init containers lose every ``nvidia.com/*`` resource, ``gpu_resources`` (a
    shared resource renamed outside that domain) and those of ``gpu_domains`` (the GPU backend's
    :attr:`~.GPUBackend.resource_domains`).
    """
    pod = dict(pod)
    spec = dict(pod.get("spec") or {})
    for flag in _FORBIDDEN_POD_FIELDS:
        spec.pop(flag, None)
    spec["automountServiceAccountToken"] = False
    spec["securityContext"] = harden_security_context(spec.get("securityContext"), pod_security)
    # volumes that reach the node (hostPath) or carry a service-account token (projected)
    host_paths = {
        v.get("name")
        for v in spec.get("volumes") or []
        if "hostPath" in v
        or any("serviceAccountToken" in src for src in ((v.get("projected") or {}).get("sources") or []))
    }
    if "volumes" in spec:
        spec["volumes"] = [v for v in spec["volumes"] or [] if v.get("name") not in host_paths]
    spec["containers"] = [
        _harden_container(c, container_security, host_paths, resources if i == 0 else None, gpu_resources, gpu_domains)
        for i, c in enumerate(spec.get("containers") or [])
    ]  # the first is the notebook container: exactly the profile's resources
    if spec.get("initContainers"):
        spec["initContainers"] = [
            _harden_container(c, container_security, host_paths, None, gpu_resources, gpu_domains)
            for c in spec["initContainers"]
        ]
    pod["spec"] = spec
    return pod


# -- checking objects against the Kubernetes API schema -------------------------------


class SchemaError(ValueError):
    """An object does not fit the Kubernetes API schema; the message names the path."""


_PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float)}


def validate_object(data: object, kind: str = "V1Pod") -> object:
    """Check a serialized object against the Kubernetes API models and build the model.

    The models of ``kubernetes_asyncio`` (generated from the API's OpenAPI
    schema, and installed with kubespawner) give every field's name and type.
    Unknown fields, wrong types and missing required fields raise
    :class:`SchemaError` naming the path; the model's own client-side
    validation checks required values and enums as it is built.
    """
    from kubernetes_asyncio.client import models  # optional heavy dependency: the Kubernetes API models

    return _check(data, kind, kind, models)


def _check(data, typ: str, path: str, models):
    if data is None:
        return None
    if typ in _PRIMITIVES:
        ok = isinstance(data, _PRIMITIVES[typ]) and not (typ != "bool" and isinstance(data, bool))
        if not ok:
            raise SchemaError(f"{path}: expected {typ}, got {type(data).__name__} {data!r}")
        return data
    if typ in ("object", "datetime", "date"):
        return data
    if typ.startswith("list["):
        if not isinstance(data, list):
            raise SchemaError(f"{path}: expected a list, got {type(data).__name__}")
        inner = typ[5:-1]
        return [_check(v, inner, f"{path}[{i}]", models) for i, v in enumerate(data)]
    if typ.startswith("dict("):
        if not isinstance(data, dict):
            raise SchemaError(f"{path}: expected a map, got {type(data).__name__}")
        inner = typ[typ.index(",") + 1 : -1].strip()
        for k in data:
            if not isinstance(k, str):
                raise SchemaError(f"{path}: map keys must be strings, got {k!r}")
        return {k: _check(v, inner, f"{path}.{k}", models) for k, v in data.items()}
    klass = getattr(models, typ, None)
    if klass is None:
        raise SchemaError(f"{path}: unknown type {typ}")
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected a {typ} object, got {type(data).__name__}")
    by_json = {v: k for k, v in klass.attribute_map.items()}
    kwargs = {}
    for key, value in data.items():
        if key not in by_json:
            raise SchemaError(f"{path}: unknown field {key!r} for {typ}")
        attr = by_json[key]
        kwargs[attr] = _check(value, klass.openapi_types[attr], f"{path}.{key}", models)
    try:
        return klass(**kwargs)
    except ValueError as e:
        raise SchemaError(f"{path}: {e}") from None
