"""The doctor's Kueue checks: when GPUKubeSpawner hands its GPU pods to Kueue, is the cluster ready for them?

In Kueue mode (docs/kubernetes.md, "With Kueue") a profile's pods carry a LocalQueue's name and Kueue
admits them from that queue's ClusterQueue: a queue or quota that is missing leaves a student's pod gated
until the queue timeout. :func:`check_kueue` reads the cluster once, with the credentials the hub uses
(the pod's service account in a cluster, else the kubeconfig), and says for each profile in Kueue mode:

- Kueue's API is served (its CRDs, ``kueue.x-k8s.io``);
- the LocalQueue exists in the servers' namespace, and its ClusterQueue exists and is active;
- that ClusterQueue's resource groups cover the GPU resource the profile's pod asks for (``nvidia.com/gpu``,
  a MIG slice, a time-sliced share), with a flavor that exists and a quota above zero (else the pods only
  ever borrow);
- the WorkloadPriorityClass the profile names exists;
- whether Kueue's VisibilityOnDemand API answers (the spawn page's queue positions need it; without it the
  page still says the pod waits, without a position).

The judging (:func:`findings`) is pure over the API's JSON; :func:`read_cluster` does the GETs, nothing is
written. A configuration the spawner would refuse is one fail line naming the setting, and nothing is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

from jupyterhub_gpu.doctor.gpus import _is_kube
from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN, Result, Unavailable
from jupyterhub_gpu.service.feeds.kueue import (
    KUEUE_API,
    KUEUE_GROUP,
    VISIBILITY_GROUP,
    KueueReadError,
    cluster_queue_quotas,
    condition,
    get_json,
    is_true,
    kueue_api_client,
    served_groups,
)
from jupyterhub_gpu.spawners.kube.kueue import check_kueue_option, in_kueue_mode, kueue_profile_problems
from jupyterhub_gpu.spawners.kube.objects import unit_resource
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles

CHECK = "kueue"
DOCS = "docs/kubernetes.md, With Kueue"


@dataclass(frozen=True)
class QueueUse:
    """One profile in Kueue mode: the LocalQueue its pods name, where, what GPU resource and priority class."""

    profile: str
    local_queue: str
    namespace: str
    resource: str | None  # None: a CPU-only profile
    priority_class: str | None = None


@dataclass
class ClusterObjects:
    """What :func:`read_cluster` found: None for a part that is not there."""

    groups: dict[str, list[str]] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], dict | None] = field(default_factory=dict)
    cluster_queues: dict[str, dict | None] = field(default_factory=dict)
    flavors: dict[str, dict | None] = field(default_factory=dict)
    priority_classes: dict[str, dict | None] = field(default_factory=dict)
    visibility: str | None = ""  # "" when it answered, None when not asked (no LocalQueue), else why not


# -- the spawner's Kueue settings ----------------------------------------------------------------------------


def queue_uses(probe) -> list[QueueUse]:
    """Each GPU profile in Kueue mode with each LocalQueue a spawn of it may go to, from the spawner's settings.

    A profile's own ``kueue_queue`` or ``kueue["profiles"][slug]`` is its one queue; otherwise the queue is
    the user's group's (``kueue["groups"]``) or ``kueue["default"]``, so each of those is checked. Raises
    ValueError naming the setting when the spawner would refuse it, Unavailable when the profiles do not
    parse (the profiles check says why) or the queues are known only at spawn time (a callable).
    """
    cls = type(probe).__name__
    setting = probe.kueue
    if callable(setting) or callable(probe.profiles):
        raise Unavailable(f"c.{cls}.kueue or the profiles are a callable: the queues are known only at spawn time")
    check_kueue_option(setting or {}, f"c.{cls}.kueue")
    try:
        profiles = parse_profiles(probe.profiles, require_image=type(probe)._require_image)
    except ProfileError as e:
        raise Unavailable(f"the profiles do not parse ({e})") from None
    problems = kueue_profile_problems(setting, profiles)
    if problems:
        raise ValueError("; ".join(problems))
    by_profile = (setting or {}).get("profiles") or {}
    shared = sorted(set(((setting or {}).get("groups") or {}).values()) | {(setting or {}).get("default") or ""} - {""})
    uses = []
    for profile in profiles:
        if not in_kueue_mode(setting, profile):
            continue
        own = profile.kueue_queue or by_profile.get(profile.slug)
        resource = unit_resource(
            profile.gpu_model,
            share=getattr(profile, "gpu_share", None),
            mig=getattr(profile, "mig", None),
            shared_resource=probe.gpu_shared_resource,
            backend=probe.gpu_backend,
        )[0]
        priority = probe.kueue_preemptible_priority_class if profile.preemptible else probe.kueue_priority_class
        for queue in [own] if own else shared or [""]:  # "": no queue named, its spawns are refused
            uses.append(QueueUse(profile.slug, queue, probe.namespace, resource, priority or None))
    return uses


def kueue_plan(probe) -> list[QueueUse]:
    """:func:`queue_uses`, or [] when the spawner is not in Kueue mode."""
    if not _is_kube(probe) or not probe.has_trait("kueue"):
        return []
    return queue_uses(probe)


# -- judging what the cluster has ------------------------------------------------------------------------------


def findings(uses: list[QueueUse], found: ClusterObjects) -> list[Result]:
    """One line per thing checked, pure over what :func:`read_cluster` found."""
    results: list[Result] = []
    if KUEUE_GROUP not in found.groups:
        return [
            Result(
                CHECK,
                FAIL,
                f"the cluster does not serve Kueue's API ({KUEUE_GROUP}): every pod in Kueue mode would stay gated",
                "install Kueue (its manifests or Helm chart, v0.17 or later) and wait for its controller to be ready;"
                f" or turn Kueue mode off ({DOCS})",
            )
        ]
    results.append(Result(CHECK, PASS, f"Kueue's API is served ({KUEUE_GROUP} {', '.join(found.groups[KUEUE_GROUP])})"))
    seen_cq: set[str] = set()
    for use in uses:
        if not use.local_queue:
            results.append(
                Result(
                    CHECK,
                    FAIL,
                    f"profile {use.profile!r} is in Kueue mode but no LocalQueue is named for it: its spawns are"
                    " refused ('No Kueue queue is set for your groups and this profile')",
                    "name one: the profile's 'kueue_queue', or c.GPUKubeSpawner.kueue's 'profiles', 'groups' or"
                    f" 'default' ({DOCS})",
                )
            )
            continue
        lq = found.local_queues.get((use.namespace, use.local_queue))
        where = f"profile {use.profile!r}: LocalQueue {use.namespace}/{use.local_queue}"
        if lq is None:
            results.append(
                Result(
                    CHECK,
                    FAIL,
                    f"{where} does not exist: its pods would wait until the queue timeout",
                    f"create the LocalQueue {use.local_queue!r} in the namespace {use.namespace!r} pointing at the"
                    f" group's ClusterQueue (config/kubernetes/kueue/), or name an existing one ({DOCS})",
                )
            )
            continue
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        cq = found.cluster_queues.get(cq_name)
        if cq is None:
            results.append(
                Result(
                    CHECK,
                    FAIL,
                    f"{where} points at the ClusterQueue {cq_name!r}, which does not exist",
                    f"create the ClusterQueue {cq_name!r} (config/kubernetes/kueue/) or point the LocalQueue's"
                    " spec.clusterQueue at an existing one",
                )
            )
            continue
        results.extend(_cluster_queue_lines(use, where, cq_name, cq, found, cq_name not in seen_cq))
        seen_cq.add(cq_name)
    for profile, priority_class in dict.fromkeys((u.profile, u.priority_class) for u in uses if u.priority_class):
        results.append(_priority_line(profile, priority_class, found))
    if found.visibility is None:
        results.append(
            Result(CHECK, PASS, "Kueue's VisibilityOnDemand API is served (not asked: none of the LocalQueues exists)")
        )
    elif found.visibility:
        results.append(
            Result(
                CHECK,
                WARN,
                f"Kueue's VisibilityOnDemand API ({VISIBILITY_GROUP}) does not answer ({found.visibility}): the spawn"
                " page says a pod waits but not its position in the queue",
                "enable Kueue's VisibilityOnDemand feature and make its APIService available (the API server must"
                f" reach Kueue's visibility server: the aggregation layer; {DOCS}, Troubleshooting)",
            )
        )
    elif uses:
        results.append(
            Result(CHECK, PASS, "Kueue's VisibilityOnDemand API answers: the spawn page shows queue positions")
        )
    return results


def _priority_line(profile: str, priority_class: str, found: ClusterObjects) -> Result:
    obj = found.priority_classes.get(priority_class)
    if obj is None:
        return Result(
            CHECK,
            FAIL,
            f"profile {profile!r}: the WorkloadPriorityClass {priority_class!r} does not exist: Kueue refuses its"
            " pods' workloads",
            f"create it (kind WorkloadPriorityClass, {KUEUE_GROUP}; config/kubernetes/kueue/) or correct"
            " c.GPUKubeSpawner.kueue_priority_class (kueue_preemptible_priority_class for a preemptible profile)",
        )
    return Result(CHECK, PASS, f"profile {profile!r}: WorkloadPriorityClass {priority_class!r} ({obj.get('value')})")


def _cluster_queue_lines(use, where, cq_name, cq, found, first) -> list[Result]:
    lines = []
    if not is_true(cq, "Active"):
        why = condition(cq, "Active") or {}
        said = why.get("message") or why.get("reason") or "no Active condition yet"
        lines.append(
            Result(
                CHECK,
                FAIL,
                f"{where}: its ClusterQueue {cq_name!r} is not active ({said}): Kueue admits nothing from it",
                "fix what Kueue names (a missing ResourceFlavor or admission check, a stop policy); `kubectl describe"
                f" clusterqueue {cq_name}`",
            )
        )
    if use.resource is None:
        if first and is_true(cq, "Active"):
            lines.append(Result(CHECK, PASS, f"{where} → ClusterQueue {cq_name!r}, active"))
        return lines
    quotas = [q for q in cluster_queue_quotas(cq) if q.resource == use.resource]
    if not quotas:
        covered = sorted({q.resource for q in cluster_queue_quotas(cq)}) or ["nothing"]
        lines.append(
            Result(
                CHECK,
                FAIL,
                f"{where}: its ClusterQueue {cq_name!r} has no flavor with {use.resource} (it covers"
                f" {', '.join(covered)}): Kueue never admits this profile's pods",
                f"add {use.resource} to a resource group's coveredResources of {cq_name!r} with a flavor and its"
                " nominalQuota (config/kubernetes/kueue/)",
            )
        )
        return lines
    missing = sorted({q.flavor for q in quotas if found.flavors.get(q.flavor) is None})
    if missing:
        lines.append(
            Result(
                CHECK,
                FAIL,
                f"{where}: the ResourceFlavor(s) {', '.join(missing)} of ClusterQueue {cq_name!r} do not exist",
                f"create the ResourceFlavor(s) {', '.join(missing)} (config/kubernetes/kueue/)",
            )
        )
        return lines
    nominal = sum(q.nominal for q in quotas)
    flavors = ", ".join(f"{q.flavor}: {q.nominal:g}" for q in quotas)
    if nominal <= 0:
        lines.append(
            Result(
                CHECK,
                WARN,
                f"{where}: ClusterQueue {cq_name!r} has a nominal quota of 0 {use.resource} ({flavors}): its pods run"
                " only on quota borrowed from the cohort, and are preempted when it is reclaimed",
                f"give {cq_name!r} a nominalQuota of {use.resource} if the group should have GPUs of its own",
            )
        )
    elif is_true(cq, "Active"):
        lines.append(
            Result(
                CHECK,
                PASS,
                f"{where} → ClusterQueue {cq_name!r}, active, {use.resource} nominal quota {flavors}",
            )
        )
    return lines


# -- reading the cluster ---------------------------------------------------------------------------------


async def read_cluster(api, uses: list[QueueUse], timeout: float = 10) -> ClusterObjects:
    """GET what :func:`findings` judges: discovery, the LocalQueues named, their ClusterQueues and flavors."""
    found = ClusterObjects(groups=await served_groups(api, timeout))
    if KUEUE_GROUP not in found.groups:
        return found
    for use in uses:
        if use.priority_class and use.priority_class not in found.priority_classes:
            found.priority_classes[use.priority_class] = await get_json(
                api, f"{KUEUE_API}/workloadpriorityclasses/{use.priority_class}", timeout
            )
        if not use.local_queue:
            continue
        key = (use.namespace, use.local_queue)
        if key not in found.local_queues:
            found.local_queues[key] = await get_json(
                api, f"{KUEUE_API}/namespaces/{use.namespace}/localqueues/{use.local_queue}", timeout
            )
        lq = found.local_queues[key]
        cq_name = (lq or {}).get("spec", {}).get("clusterQueue")
        if cq_name and cq_name not in found.cluster_queues:
            found.cluster_queues[cq_name] = await get_json(api, f"{KUEUE_API}/clusterqueues/{cq_name}", timeout)
            for quota in cluster_queue_quotas(found.cluster_queues[cq_name] or {}):
                if quota.flavor not in found.flavors:
                    found.flavors[quota.flavor] = await get_json(
                        api, f"{KUEUE_API}/resourceflavors/{quota.flavor}", timeout
                    )
    found.visibility = await _visibility(api, found, uses, timeout)
    return found


async def _visibility(api, found: ClusterObjects, uses: list[QueueUse], timeout: float) -> str | None:
    """ "" when the VisibilityOnDemand API answers for a LocalQueue as the spawner asks it, else why not."""
    versions = found.groups.get(VISIBILITY_GROUP)
    if not versions:
        return "not served: no APIService for it"
    use = next((u for u in uses if found.local_queues.get((u.namespace, u.local_queue))), None)
    if use is None:
        return None  # served; no LocalQueue to ask it about
    version = "v1beta2" if "v1beta2" in versions else versions[0]
    path = (
        f"/apis/{VISIBILITY_GROUP}/{version}/namespaces/{use.namespace}/localqueues/{use.local_queue}"
        "/pendingworkloads?limit=1"
    )
    try:
        answer = await get_json(api, path, timeout)
    except KueueReadError as e:
        return str(e)
    return "" if answer is not None else f"GET {path}: 404"


async def _read(probe, uses, timeout: float) -> ClusterObjects:
    api = await kueue_api_client(host=getattr(probe, "k8s_api_host", "") or "")
    async with api:
        return await read_cluster(api, uses, timeout)


def check_kueue(setup: Setup) -> Iterator[Result]:
    """Kueue mode: its API, each profile's LocalQueue, ClusterQueue, flavors, priority class, queue positions."""
    probe = setup.need_probe()
    try:
        uses = kueue_plan(probe)
    except ValueError as e:
        yield Result(CHECK, FAIL, f"Kueue mode: {e}", f"correct the setting it names in {setup.hub_config} ({DOCS})")
        return
    if not uses:
        return
    try:
        found = asyncio.run(_read(probe, uses, setup.timeout))
    except KueueReadError as e:
        yield Result(
            CHECK,
            FAIL,
            f"Kueue mode is on, but the cluster cannot be read: {e}",
            "run the doctor with credentials that reach the cluster and may get Kueue's objects (an admin's"
            " kubeconfig: KUBECONFIG=...; or the hub's account with get of clusterqueues, resourceflavors and"
            f" workloadpriorityclasses besides its own: {DOCS})",
        )
        return
    yield from findings(uses, found)
