"""Kueue mode, the pure part: which LocalQueue a spawn goes to, the pod's labels, what a Workload says.

In Kueue mode (docs/kubernetes.md, "With Kueue") the hub's own wait queue, fair share and preemption are off
for a profile: its pod is created at once with the labels below, Kueue's webhook gates it
(``schedulingGates``) until its Workload is admitted, and Kueue orders, admits and preempts. These functions
take plain values (the admin's option, a profile, the API's JSON) and return plain values; the API calls are
in :mod:`.kueue_wait`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from jupyterhub_gpu.spawners.messages import Phrase

#: The label Kueue's pod integration reads: the pod's LocalQueue (in the pod's namespace).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: The label that names the pod's WorkloadPriorityClass.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: The scheduling gate Kueue's webhook adds to a pod of a LocalQueue, removed at admission.
ADMISSION_GATE = "kueue.x-k8s.io/admission"
#: The label of a Workload that names the uid of the object it stands for (here: the pod).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"

#: The keys of ``c.GPUKubeSpawner.kueue`` as a dict.
KUEUE_KEYS = ("groups", "profiles", "default")

#: A LocalQueue or WorkloadPriorityClass name: a DNS label (it is also a label value: at most 63).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class KueueConfigError(ValueError):
    """``c.GPUKubeSpawner.kueue`` (or a profile's ``kueue_queue``) is not valid; the message names the option."""


def name_problem(value: object) -> str | None:
    """Why ``value`` cannot name a LocalQueue or a WorkloadPriorityClass, or None."""
    if not isinstance(value, str) or len(value) > 63 or not _NAME.fullmatch(value):
        return (
            "must be a Kubernetes object name (lowercase letters, digits and '-', at most 63 characters),"
            f" got {value!r}"
        )
    return None


def check_kueue_option(value: object, option: str = "c.GPUKubeSpawner.kueue") -> dict:
    """The ``kueue`` option's dict, checked: ``{"groups": {group: queue}, "profiles": {slug: queue}, "default":
    queue}``, each part optional; KueueConfigError names what is wrong."""
    if not isinstance(value, dict):
        raise KueueConfigError(f"{option} must be a dict or a callable, got {value!r}")
    unknown = sorted(set(value) - set(KUEUE_KEYS), key=str)
    if unknown:
        raise KueueConfigError(
            f"{option} has unknown key(s) {', '.join(map(repr, unknown))}; its keys are {', '.join(KUEUE_KEYS)}"
        )
    for part in ("groups", "profiles"):
        mapping = value.get(part, {})
        if not isinstance(mapping, dict):
            raise KueueConfigError(f"{option}[{part!r}] must map a name to a LocalQueue, got {mapping!r}")
        for key, queue in mapping.items():
            if not isinstance(key, str) or not key:
                raise KueueConfigError(f"{option}[{part!r}] has a key that is not a name: {key!r}")
            problem = name_problem(queue)
            if problem:
                raise KueueConfigError(f"{option}[{part!r}][{key!r}] {problem}")
    if value.get("default", "") != "":  # "": no LocalQueue for everyone else
        problem = name_problem(value["default"])
        if problem:
            raise KueueConfigError(f"{option}['default'] {problem}")
    return value


def check_priority_class(value: object, option: str) -> str:
    """A WorkloadPriorityClass option: "" (none) or a name."""
    if value == "":
        return value
    problem = name_problem(value)
    if problem:
        raise KueueConfigError(f"{option} {problem}")
    return value


def kueue_profile_problems(kueue: object, profiles) -> list[str]:
    """What the hub's start refuses: a ``kueue`` dict naming a profile that does not exist, a Kueue profile
    without a GPU (Kueue mode is for GPU profiles), a profile's ``kueue_queue`` that is not a name."""
    problems = []
    slugs = {p.slug for p in profiles}
    if isinstance(kueue, dict):
        for slug in sorted(set(kueue.get("profiles") or {}) - slugs):
            problems.append(f"c.GPUKubeSpawner.kueue['profiles'] names {slug!r}, which is not a profile")
    for p in profiles:
        queue = getattr(p, "kueue_queue", None)
        if queue is None:
            continue
        if not p.gpu_count:
            problems.append(f"profile {p.slug!r}: 'kueue_queue' is for GPU profiles (Kueue admits GPUs here)")
    return problems


@dataclass(frozen=True)
class KueueTarget:
    """Where a spawn goes in Kueue mode: its LocalQueue and its WorkloadPriorityClass ("" for Kueue's default)."""

    queue: str
    priority_class: str = ""


def in_kueue_mode(kueue: object, profile) -> bool:
    """Whether the profile runs in Kueue mode: a GPU profile, with the ``kueue`` option set or its own
    ``kueue_queue``. A CPU-only profile never does (it waits for no GPU)."""
    if not profile.gpu_count:
        return False
    return bool(kueue) or getattr(profile, "kueue_queue", None) is not None


def queue_of(kueue: object, profile, pool: str | None) -> str | None:
    """The LocalQueue of a spawn from the ``kueue`` dict (a callable's answer is taken as it is): the profile's
    own ``kueue_queue``, then ``profiles[slug]``, then the paying group's (``groups[pool]``), then ``default``;
    None if nothing names one. Never another of the user's groups': its quota (and the bookings it keeps) would
    serve a server that group does not pay for."""
    own = getattr(profile, "kueue_queue", None)
    if own:
        return own
    if not isinstance(kueue, dict):
        return None
    by_profile = kueue.get("profiles") or {}
    if profile.slug in by_profile:
        return by_profile[profile.slug]
    by_group = kueue.get("groups") or {}
    if pool and pool in by_group:
        return by_group[pool]
    return kueue.get("default") or None


def kueue_labels(target: KueueTarget | None) -> dict[str, str]:
    """The labels that put a pod in Kueue: its LocalQueue and, when set, its WorkloadPriorityClass."""
    if target is None:
        return {}
    labels = {QUEUE_LABEL: target.queue}
    if target.priority_class:
        labels[PRIORITY_LABEL] = target.priority_class
    return labels


def gated(pod: dict | None) -> bool:
    """Whether Kueue still holds the pod back (its admission gate is on the pod)."""
    gates = ((pod or {}).get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == ADMISSION_GATE for g in gates)


def workload_of(workloads: Iterable[dict], pod_uid: str) -> dict | None:
    """The Workload Kueue made for the pod of ``pod_uid`` (owned by it), among the namespace's Workloads."""
    for w in workloads:
        owners = (w.get("metadata") or {}).get("ownerReferences") or []
        if any(o.get("uid") == pod_uid and o.get("kind") == "Pod" for o in owners):
            return w
    return None


def _condition(workload: dict | None, kind: str) -> dict | None:
    for c in ((workload or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def admitted(workload: dict | None) -> bool:
    """Whether Kueue admitted the Workload (its ``Admitted`` condition is True)."""
    c = _condition(workload, "Admitted")
    return bool(c) and c.get("status") == "True"


def why_waiting(workload: dict | None) -> str:
    """What Kueue says about a pending Workload (the ``QuotaReserved`` condition's message, else the
    ``Admitted`` one's: quota used, a borrowing limit, an inadmissible request), or ""."""
    for kind in ("QuotaReserved", "Admitted"):
        c = _condition(workload, kind)
        if c and c.get("status") != "True" and (c.get("message") or "").strip():
            return c["message"].strip()
    return ""


def position_in(pending: dict | None, workload_name: str) -> tuple[int, int] | None:
    """``(position from 1, how many wait)`` of a Workload in the VisibilityOnDemand API's answer for its
    LocalQueue (``pendingworkloads``), or None if it is not among them."""
    items = (pending or {}).get("items") or []
    for item in items:
        if (item.get("metadata") or {}).get("name") == workload_name:
            return int(item.get("positionInLocalQueue", 0)) + 1, len(items)
    return None


# -- what the student reads ------------------------------------------------------------


def waiting_phrase(queue: str, place: tuple[int, int] | None, reason: str) -> Phrase:
    """``Waiting in the cs231n queue (Kueue) — position 3 of 7``, and Kueue's reason when it gives one."""
    if place is not None:
        waiting = Phrase(
            "Waiting in the {queue} queue (Kueue) — position {position} of {length}",
            queue=queue,
            position=place[0],
            length=place[1],
        )
    else:
        waiting = Phrase("Waiting in the {queue} queue (Kueue)", queue=queue)
    if not reason:
        return waiting
    return Phrase("{waiting}. Kueue says: {reason}", waiting=waiting, reason=reason)


def admitted_phrase(queue: str) -> Phrase:
    return Phrase("Admitted by Kueue from the {queue} queue; the server is starting", queue=queue)


def timeout_phrase(queue: str, limit: Phrase) -> Phrase:
    return Phrase(
        "Kueue did not admit this server from the {queue} queue within {limit}; nothing was started."
        " Try again later or choose another profile.",
        queue=queue,
        limit=limit,
    )


def missing_queue_phrase(queue: str, namespace: str) -> Phrase:
    return Phrase(
        "The Kueue queue {queue} does not exist in the namespace {namespace}; nothing was started."
        " Please tell your administrator.",
        queue=queue,
        namespace=namespace,
    )


def no_queue_phrase(pool: str | None = None) -> Phrase:
    """No LocalQueue for this spawn; ``pool``: the group that pays has none (nor is there one for everyone)."""
    if pool:
        return Phrase(
            "No Kueue queue is set for the group {group} that pays for this server, nor for everyone; nothing was"
            " started. Choose another group to pay, or tell your administrator.",
            group=pool,
        )
    return Phrase(
        "No Kueue queue is set for your groups and this profile; nothing was started. Please tell your administrator."
    )


def unreachable_phrase(queue: str) -> Phrase:
    return Phrase(
        "Kueue cannot be asked about the queue {queue} right now; nothing was started. Try again later.",
        queue=queue,
    )
