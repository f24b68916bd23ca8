"""The pages' Kueue section: a group's ClusterQueue with its quota and the notebooks and batch Jobs that use it.

In Kueue mode a training Job submitted to a group's ClusterQueue counts against the same quota as the group's
notebooks (docs/kubernetes.md, "With Kueue"): the group page shows its ClusterQueue, the admin page every
configured one, each with its quota per flavor and resource (nominal, used, borrowed, from the ClusterQueue's
status) and its Workloads, admitted or waiting, whatever made them. The figures come from
:class:`~jupyterhub_gpu.service.feeds.kueue.KueueStatus` (cached); a cluster that cannot be read is a note
in the section, and the rest of the page is as always.
"""

from __future__ import annotations

from decimal import Decimal

from jupyterhub_gpu.service.feeds.kueue import QueueUsage


def amount(value: Decimal) -> str:
    """A quantity as a person writes it: ``2``, ``0.5``, never ``2E+1``."""
    return f"{value.normalize():f}" if value else "0"


def queue_view(group: str, usage: QueueUsage, _) -> dict:
    """What the template shows of one ClusterQueue, its words in the reader's language."""
    kinds = {"notebook": _("notebook"), "job": _("batch Job")}
    states = {"admitted": _("admitted"), "pending": _("waiting"), "evicted": _("evicted")}
    return {
        "group": group,
        "name": usage.name,
        "cohort": usage.cohort,
        "active": usage.active,
        "quotas": [
            {
                "flavor": q.flavor,
                "resource": q.resource,
                "nominal": amount(q.nominal),
                "used": amount(q.used),
                "borrowed": amount(q.borrowed),
                "limit": "" if q.borrowing_limit is None else amount(q.borrowing_limit),
            }
            for q in usage.quotas
        ],
        "workloads": [
            {
                "kind": kinds.get(w.kind, w.kind),
                "owner": w.owner,
                "namespace": w.namespace,
                "name": w.name,
                "queue": w.queue,
                "state": states.get(w.state, w.state),
                "gpus": amount(w.gpus),
                "priority": w.priority_class,
                "reason": w.reason,
            }
            for w in usage.workloads
        ],
        "notebooks": sum(1 for w in usage.workloads if w.kind == "notebook"),
        "jobs": sum(1 for w in usage.workloads if w.kind == "job"),
    }


async def kueue_section(status, groups: list[str] | None, _) -> dict | None:
    """The section for these groups (None: every configured one), or None when Kueue is not configured for them."""
    if status is None:
        return None
    wanted = {g: cq for g, cq in status.queues.items() if groups is None or g in groups}
    if not wanted:
        return None
    reading = await status.get()
    section = {"error": reading.error, "queues": [], "missing": []}
    for group, name in sorted(wanted.items()):
        if name in reading.queues:
            section["queues"].append(queue_view(group, reading.queues[name], _))
        elif not reading.error:
            section["missing"].append({"group": group, "name": name})
    return section
