"""The ClusterQueues of the cluster, read and written for a booked window's quota (the plan is :mod:`.plan`).

Each ClusterQueue whose quota the service moves carries, in the annotation :data:`ANNOTATION`, the admin's
values of what it moved (per flavor: nominal quota and lending limit) and the bookings it was moved for. The
annotation is the record: a service restarted in the middle of a window reads it back and plans from the
admin's values, so applying the plan again changes nothing (idempotent), and after the window the quotas go
back to exactly the values recorded, and the annotation goes. The record also keeps the values the service set,
so that an admin's later edit of a moved quota is told apart and becomes the admin's value (:meth:`.Queue.base`),
and the hub whose service moved it: another hub's service leaves it alone. Every write is a JSON merge patch of
the whole ``spec.resourceGroups`` with the ``resourceVersion`` read, so an admin's edit made between the read
and the write is never overwritten (the write is refused, and the next tick plans again from the edit).

Kueue API ``kueue.x-k8s.io/v1beta2`` (v0.17: ``spec.cohortName``; ``spec.cohort`` of v1beta1 is read too).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence

from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.service.kueue.plan import Queue, Quota, QuotaConfig, Target, changed, plan

log = logging.getLogger("jupyterhub_gpu.service")

#: The record of a ClusterQueue's quota moved for a booking (the admin's values, JSON).
ANNOTATION = "jupyterhub-gpu/quota-moved"
QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"


class QuotaError(Exception):
    """A ClusterQueue that cannot be planned or written (a quota that is not a whole number, the API refused:
    ``status``, its HTTP status)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _whole(value, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise QuotaError(f"{what} is not a whole number of GPUs: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise QuotaError(f"{what} is not a whole number of GPUs: {value!r}")


def queue_of(obj: dict, resource: str) -> Queue:
    """A ClusterQueue (the API's JSON) as the plan reads it: its cohort, each flavor's quota of ``resource``, and
    the values recorded before a move. QuotaError for a quota that is not a whole number or a record unread."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    name = meta.get("name", "")
    quotas: dict[str, Quota] = {}
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") != resource:
                    continue
                what = f"ClusterQueue {name}, flavor {flavor.get('name')}"
                nominal = _whole(res.get("nominalQuota", 0), f"{what}: nominalQuota")
                quotas[flavor.get("name", "")] = Quota(
                    nominal or 0, _whole(res.get("lendingLimit"), f"{what}: lendingLimit")
                )
    recorded: dict[str, Quota] = {}
    written: dict[str, Quota] = {}
    raw = (meta.get("annotations") or {}).get(ANNOTATION)
    if raw:
        try:
            record = json.loads(raw)
            for part, values in (("original", recorded), ("set", written)):
                for flavor, q in (record.get(part) or {}).items():
                    values[flavor] = Quota(int(q["nominal"]), None if q.get("lending") is None else int(q["lending"]))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise QuotaError(
                f"ClusterQueue {name}: its {ANNOTATION} annotation cannot be read ({e}): {raw!r}"
            ) from None
    return Queue(name, spec.get("cohortName") or spec.get("cohort") or None, quotas, recorded, written)


def moved_by(obj: dict) -> str | None:
    """The hub whose service moved a ClusterQueue's quota (its record's ``hub``), or None: not moved, or moved
    by a service that did not say (an older one)."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    try:
        hub = json.loads(raw).get("hub") if raw else None
    except (ValueError, AttributeError):
        return None
    return hub if isinstance(hub, str) else None


def _quotas_json(quotas: dict[str, Quota]) -> dict:
    return {f: {"nominal": q.nominal, "lending": q.lending} for f, q in sorted(quotas.items())}


def patch_for(obj: dict, target: Target, resource: str, hub: str | None = None) -> dict:
    """The merge patch that gives a ClusterQueue its target: the whole ``spec.resourceGroups`` with the quotas
    set, the record written (the admin's values, the ones set, the bookings and the ``hub`` whose service moved
    them; or removed when nothing stays moved), under the ``resourceVersion`` read."""
    groups = copy.deepcopy((obj.get("spec") or {}).get("resourceGroups") or [])
    for group in groups:
        for flavor in group.get("flavors") or []:
            quota = target.quotas.get(flavor.get("name", ""))
            if quota is None:
                continue
            for res in flavor.get("resources") or []:
                if res.get("name") != resource:
                    continue
                res["nominalQuota"] = str(quota.nominal)
                if quota.lending is None:
                    res.pop("lendingLimit", None)
                else:
                    res["lendingLimit"] = str(quota.lending)
    record = None
    if target.recorded:
        record = json.dumps(
            {
                "original": _quotas_json(target.recorded),
                "set": _quotas_json(target.written),
                "for": list(target.reasons),
                **({"hub": hub} if hub is not None else {}),
            },
            sort_keys=True,
        )
    meta = obj.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {ANNOTATION: record}},
        "spec": {"resourceGroups": groups},
    }


async def _call(api, path: str, method: str, body: dict | None = None, timeout: float = 10):
    # optional heavy dependency: the Kubernetes client, installed with the kubernetes extra only
    from kubernetes_asyncio.client.rest import ApiException

    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json"
    try:
        response = await api.call_api(
            path,
            method,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            _request_timeout=timeout,
        )
        return json.loads(await response.read())
    except ApiException as e:
        raise QuotaError(f"{method} {path}: {e.status} {e.reason}: {(e.body or b'')[:300]!r}", e.status) from None


async def sync_quotas(api, config: QuotaConfig, bookings: Sequence[Reservation], hub: str | None = None) -> list[str]:
    """Give the ClusterQueues the quotas the ``bookings`` in force need (and give back what no booking needs
    any more): the names of the ClusterQueues written. Raises QuotaError when the cluster cannot be read; a
    write that is refused is logged and tried again at the next call. A ClusterQueue whose quota the service of
    another hub moved is left to it (``hub``: this service's)."""
    listing = await _call(api, QUEUES_PATH, "GET")
    objects = {o["metadata"]["name"]: o for o in (listing or {}).get("items") or []}
    queues = []
    for obj in objects.values():
        owner = moved_by(obj)
        if owner is not None and hub is not None and owner != hub:
            log.info(
                "Kueue reservations: ClusterQueue %s is moved by hub %s; left to it", obj["metadata"]["name"], owner
            )
            continue
        try:
            queue = queue_of(obj, config.resource)
        except QuotaError as e:
            log.error("Kueue reservations: %s; that ClusterQueue is left as it is", e)
            continue
        for flavor in sorted(f for f in queue.recorded if queue.edited(f)):
            log.warning(
                "Kueue reservations: ClusterQueue %s, flavor %s was edited during its window (%s, set %s): taken as"
                " the admin's value",
                queue.name,
                flavor,
                queue.quotas[flavor],
                queue.written[flavor],
            )
        queues.append(queue)
    for group, name in sorted(config.queues.items()):
        if name not in objects:
            log.error(
                "Kueue reservations: ClusterQueue %s of group %s does not exist (c.Kueue.cluster_queues)", name, group
            )
    written = []
    by_name = {q.name: q for q in queues}
    for target in plan(queues, config, bookings):
        if target.short:
            log.warning(
                "Kueue reservations: ClusterQueue %s lacks %d GPUs of its bookings: its cohort has no more to move",
                target.queue,
                target.short,
            )
        queue = by_name[target.queue]
        if not changed(queue, target):
            continue
        try:
            await _call(
                api,
                f"{QUEUES_PATH}/{target.queue}",
                "PATCH",
                patch_for(objects[target.queue], target, config.resource, hub),
            )
        except QuotaError as e:
            log.warning("Kueue reservations: %s; tried again at the next tick", e)
            continue
        quotas = ", ".join(f"{f}: {q.nominal}" for f, q in sorted(target.quotas.items()))
        if target.recorded:
            log.info("Kueue reservations: ClusterQueue %s now %s (%s)", target.queue, quotas, "; ".join(target.reasons))
        else:
            log.info("Kueue reservations: ClusterQueue %s back to %s", target.queue, quotas)
        written.append(target.queue)
    return written
