"""A pod's moments as the Kubernetes API reports them: when it was bound to a node, when its server ended.

The spawner bills from the binding (its GPUs are held from then on) to the server container's end; these
read the API's Pod JSON and return UTC times, or None where the pod has no such moment yet.
"""

from __future__ import annotations

from datetime import datetime


def kube_time(value) -> datetime | None:
    """A Kubernetes API time (RFC 3339, ``2026-12-01T08:00:00Z``) in UTC, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_bound_at(pod: dict | None) -> datetime | None:
    """When the scheduler bound the pod (the API's Pod JSON) to a node: from then on its GPUs are held.

    The ``PodScheduled`` condition turns True at the binding; a pod without it (an old API server)
    falls back to ``status.startTime``, set when the node's kubelet takes the pod. A pod still waiting
    unscheduled (``PodScheduled`` False, ``Unschedulable``) has no such moment: None.
    """
    status = (pod or {}).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            if condition.get("status") != "True":
                return None
            return kube_time(condition.get("lastTransitionTime"))
    return kube_time(status.get("startTime"))


def pod_finished_at(pod: dict | None, container: str = "notebook") -> datetime | None:
    """When the pod's server container terminated (``state.terminated.finishedAt``), or None while it runs."""
    status = (pod or {}).get("status") or {}
    for c in status.get("containerStatuses") or []:
        if c.get("name") == container:
            return kube_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
    return None
