"""A session's pod evicted by Kueue: found on the pod, billed to the eviction, told and put back as a preemption.

Kueue (v0.17, its plain-pod integration) stops a pod whose Workload it evicts (a higher priority in the
ClusterQueue, quota reclaimed by its lender in the cohort, a stopped queue) in two steps: it patches the pod's
status with the condition ``TerminationTarget`` (status ``True``, reason ``WorkloadEvictedDueTo<why>``, such
as ``WorkloadEvictedDueToPreempted``, its message the Workload's ``Evicted`` message and
``lastTransitionTime`` the moment it stopped it), then deletes the pod with its grace period. The kubelet sends
the container SIGTERM as for the hub's own stop: the server interrupts its kernels and ``CheckpointAndResume``
saves. Kueue's finalizer keeps the pod object until its container has ended, which is when the spawner's
watch (:class:`EvictionWatch`, the pod reflector's copy every :data:`CHECK_EVERY` seconds) and its polls see
the condition.

What the hub does with it (docs/kubernetes.md, "Preemption through Kueue"): the session's stop reason becomes
``preempted`` and a stop order of kind ``preempted`` is written at the eviction's moment, so the gpu service
tells the student as it tells today's preemption (even when the server has ended before its tick) and, if they
asked for it, puts the server back in the queue (in Kueue mode a new spawn that waits in Kueue). Billing stops
at the eviction (:meth:`Eviction.at`), not when the container has ended. A hub that was down while it happened
may find the pod gone at its first poll: the eviction is then read from the pod's Workload, or from the event
Kueue left on the pod (:func:`check_gone_pod`, by the pod's uid kept in the spawner's state).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.queries.schedule import PREEMPTED, order_stop
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.scheduler.snapshot import PREEMPTIBLE
from jupyterhub_gpu.scheduler.texts import KueueWhy
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.spawners import stopping
from jupyterhub_gpu.spawners.kube.kueue import QUEUE_LABEL
from jupyterhub_gpu.spawners.kube.pods import kube_time

log = logging.getLogger("jupyterhub_gpu.spawners")

#: The condition Kueue's pod integration puts on a pod it stops.
TERMINATION_TARGET = "TerminationTarget"
#: The start of its reason when the pod's Workload was evicted (``WorkloadEvictedDueToPreempted``...); the
#: other reasons (``WorkloadDeleted``, ``NotAdmitted``, ``NoMatchingWorkload``) are no eviction.
EVICTED_PREFIX = "WorkloadEvicted"
#: Seconds between two looks at a watched pod (the reflector's copy: no API call).
CHECK_EVERY = 1.0
#: The grace a pod gets when its manifest names none (Kubernetes' default).
DEFAULT_GRACE = 30
#: Kueue's eviction reasons (its Workload's ``Evicted`` reason) by the kind of :class:`KueueWhy` they are told as.
WHY_BY_REASON = {
    "ClusterQueueStopped": "stopped",
    "LocalQueueStopped": "stopped",
    "PodsReadyTimeout": "ready",
}
#: What a preemption's message says of its cause (Kueue's ``preemptionMessage``: "Preempted to accommodate a
#: workload ... due to <cause>; ..."), first match wins; any other preemption is by priority in its ClusterQueue.
PREEMPTED_BECAUSE = (
    ("due to reclamation within the cohort", "reclaim"),
    ("due to fair sharing within the cohort", "fair_sharing"),
)


@dataclass(frozen=True)
class Eviction:
    """Kueue's stop of a session's pod: when (``at``, billing stops here), why (the condition's reason and
    message), and the grace the pod had to end in (its ``terminationGracePeriodSeconds``)."""

    at: datetime
    reason: str
    message: str = ""
    grace: timedelta = timedelta(seconds=DEFAULT_GRACE)

    @property
    def why(self) -> str:
        """The Workload's eviction reason (``Preempted``, ``PodsReadyTimeout``...), or ``""``."""
        return self.reason[len(EVICTED_PREFIX) :].removeprefix("DueTo")

    @property
    def cause(self) -> str:
        """The stop order's cause as the ledger keeps it: ``kueue:<reason>``."""
        return f"kueue:{self.reason}"

    @property
    def told(self) -> KueueWhy:
        """Why Kueue stopped it, as the student is told (:func:`kueue_why`)."""
        return kueue_why(self.why, self.message)


def kueue_why(reason: str, message: str = "") -> KueueWhy:
    """What the student is told of a Workload's eviction from its ``Evicted`` reason and message: ``Preempted``
    for a higher priority, for its group's borrowed quota taken back or for fair sharing (the message says
    which), its queue stopped, the pods-ready timeout; any other reason is named as Kueue gives it."""
    if reason == "Preempted":
        said = message.lower()
        for words, kind in PREEMPTED_BECAUSE:
            if words in said:
                return KueueWhy(kind, reason)
        return KueueWhy("priority", reason)
    return KueueWhy(WHY_BY_REASON.get(reason, "other"), reason)


def kueue_managed(pod: dict | None) -> bool:
    """Whether a pod (the API's JSON) is in a Kueue LocalQueue."""
    return bool(pod) and QUEUE_LABEL in ((pod.get("metadata") or {}).get("labels") or {})


def pod_eviction(pod: dict | None) -> Eviction | None:
    """Kueue's eviction of ``pod`` (the API's Pod JSON), or None: no ``TerminationTarget`` condition that is
    ``True`` with an eviction's reason. A condition without a readable time takes the pod's deletion time less
    its grace (the moment it was deleted), else None is returned: a time cannot be guessed for billing."""
    if not pod:
        return None
    spec = pod.get("spec") or {}
    grace = spec.get("terminationGracePeriodSeconds")
    grace = timedelta(seconds=grace if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE)
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") != TERMINATION_TARGET or condition.get("status") != "True":
            continue
        reason = condition.get("reason") or ""
        if not reason.startswith(EVICTED_PREFIX):
            return None
        at = kube_time(condition.get("lastTransitionTime"))
        if at is None:
            deleted = kube_time((pod.get("metadata") or {}).get("deletionTimestamp"))
            at = deleted - grace if deleted is not None else None
        if at is None:
            return None
        return Eviction(at=at, reason=reason, message=condition.get("message") or "", grace=grace)
    return None


def workload_eviction(workload: dict | None) -> Eviction | None:
    """Kueue's eviction as the pod's Workload keeps it (the API's JSON: its ``Evicted`` condition, True), for a
    pod that is already gone; None without one, or without its time (not guessed for billing). The grace is
    not known there: the default."""
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Evicted" or condition.get("status") != "True":
            continue
        at = kube_time(condition.get("lastTransitionTime"))
        if at is None:
            return None
        reason = f"{EVICTED_PREFIX}DueTo{condition.get('reason') or ''}"
        return Eviction(at=at, reason=reason, message=condition.get("message") or "")
    return None


#: The reason of the event Kueue leaves on a pod it stops (its job framework's ``Stopped``); its message is the
#: Workload's ``Evicted`` message when the stop is an eviction.
STOPPED_EVENT = "Stopped"
#: How Kueue v0.17's eviction messages begin, by the ``Evicted`` reason they come with. The ``Stopped`` event is
#: also left for stops that are no eviction ("Workload is deleted", "Not admitted by cluster queue"): a message
#: not known here is not taken for one.
EVICTION_MESSAGES = (
    ("Preempted to accommodate a workload", "Preempted"),
    ("Exceeded the PodsReady timeout", "PodsReadyTimeout"),
    ("The ClusterQueue is stopped", "ClusterQueueStopped"),
    ("The LocalQueue is stopped", "LocalQueueStopped"),
)


def event_eviction(events) -> Eviction | None:
    """Kueue's eviction from the ``Stopped`` events it left on the pod (``(time, message)`` pairs, the first
    time of each), for a pod whose Workload is gone too: the first whose message is a known eviction's, at its
    time (Kueue stops the pod the moment it records it; whole seconds). None without one."""
    for at, message in sorted((e for e in events if e[0] is not None), key=lambda e: e[0]):
        for start, reason in EVICTION_MESSAGES:
            if (message or "").startswith(start):
                return Eviction(at=at, reason=f"{EVICTED_PREFIX}DueTo{reason}", message=message)
    return None


async def check_gone_pod(spawner) -> Eviction | None:
    """A poll that finds the session's pod gone (a hub restarted after Kueue evicted it, and Kueue let the pod go
    before this poll): its eviction read from its Workload, found by the pod's uid that the spawner's state
    keeps, else from the event Kueue left on the pod (events outlive the objects they are about, an hour by
    default; the Workload goes with its pod); noted if there is one. None when nothing says it was evicted."""
    uid = getattr(spawner, "_kueue_pod_uid", None)
    if spawner._gpu_eviction is not None or not uid or spawner.gpu_pod() is not None:
        return spawner._gpu_eviction
    eviction = workload_eviction(await spawner._kueue_workload(uid))
    if eviction is None:
        eviction = event_eviction(await spawner._kueue_pod_events(uid))
    if eviction is not None:
        await note_eviction(spawner, eviction)
    return spawner._gpu_eviction


def record_eviction(ledger: Ledger, session_id: str, eviction: Eviction) -> bool:
    """Write a session's eviction to the ledger (blocking; run it in a thread): its stop reason becomes
    ``preempted`` (the one precedence rule: a budget stop or the student's own stop already under way stays),
    and a ``preempted`` stop order at the eviction's moment, for the gpu service to tell the student and put
    the server back in the queue. Its reason says what happened, after the fact, with Kueue's reason:
    ``stop.kueue`` for a session that checkpoints (a preemptible profile's, as the hub's own preemption judges
    it), ``stop.kueue.save`` (its unsaved work may be lost) for any other. Whether the order was written (False:
    the session has closed, or its stop keeps another reason)."""
    kept = ledger.claim_stop_reason(session_id, StopReason.PREEMPTED)
    if kept != StopReason.PREEMPTED:
        return False
    session = ledger.get_session(session_id)
    if session is None:
        return False
    key = "stop.kueue" if session.tier == PREEMPTIBLE else "stop.kueue.save"
    values = {"at": eviction.at, "why": eviction.told}
    return order_stop(ledger, session, PREEMPTED, eviction.at, key, values, now=eviction.at, cause=eviction.cause)


async def note_eviction(spawner, eviction: Eviction) -> bool:
    """The spawner's part once its pod is found evicted: the eviction kept (its moment ends the billing) and
    written to the ledger, once per session. Whether it was new."""
    session = spawner._gpu_session
    if session is None or spawner._gpu_eviction is not None:
        return False
    spawner._gpu_eviction = eviction
    spawner.log.warning(
        "%s: its pod was evicted by Kueue at %s (%s: %s); billed to then",
        spawner._log_name,
        eviction.at,
        eviction.reason,
        eviction.message,
    )
    ledger = spawner.ledger
    if ledger is None or not session.id:
        return True
    try:
        await asyncio.to_thread(record_eviction, ledger, session.id, eviction)
    except Exception as e:
        spawner.log.error("jupyterhub-gpu: cannot record the eviction of %s: %s", spawner._log_name, e)
    return True


async def check_pod(spawner) -> Eviction | None:
    """Look at the spawner's pod (the reflector's copy) once: its eviction, noted if new, or None."""
    pod = spawner.gpu_pod()
    if not kueue_managed(pod):
        return spawner._gpu_eviction
    eviction = pod_eviction(pod)
    if eviction is not None:
        await note_eviction(spawner, eviction)
    return spawner._gpu_eviction


def eviction_end(spawner, finished: datetime | None) -> datetime | None:
    """When the session of an evicted pod stops being billed: the eviction, if it came before the container's
    end (``finished``); else ``finished``."""
    eviction = spawner._gpu_eviction
    if eviction is None:
        return finished
    if finished is None:
        return min(eviction.at, utcnow())
    return min(eviction.at, finished)


async def ended_if_evicted(spawner, status):
    """A poll's status once Kueue has evicted the pod: ended (1), its stop recorded now and billed to the
    eviction, although the container may still be saving in its grace period. JupyterHub stops only a server
    its poll finds running, so a status left ``None`` here would have the stop billed to whenever the pod is
    gone (or to the hub's stop, which the service asks for at once)."""
    session = spawner._gpu_session
    if status is not None or spawner._gpu_eviction is None or session is None or spawner._gpu_launching:
        return status
    return await stopping.after_poll(spawner, session, 1)


async def wait_gone(spawner, every: float = CHECK_EVERY) -> bool:
    """Before a start: wait while a pod of this server's name is still being deleted (a pod Kueue evicted ends
    in its grace period, and a resumed server is started at once). KubeSpawner would otherwise find it, stop the
    server to remove it, and so end the new start. At most its grace and a minute; whether one was waited for."""
    pod = spawner.gpu_pod()
    if not pod or not (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    limit = (grace if isinstance(grace, int) and grace >= 0 else DEFAULT_GRACE) + 60
    spawner.log.info("%s: waiting for its last pod to end before starting a new one", spawner._log_name)
    waited = 0.0
    while spawner.gpu_pod() is not None and waited < limit:
        await asyncio.sleep(every)
        waited += every
    return True


class EvictionWatch:
    """Looks at one session's pod every :data:`CHECK_EVERY` seconds while that session runs, so an eviction
    is noted before Kueue's finalizer lets the pod go (a poll every 30 s can miss it). One task per running
    server in a LocalQueue; a look is a dictionary read of the reflector's copy."""

    def __init__(self, spawner, session_id: str, every: float = CHECK_EVERY):
        self.spawner = spawner
        self.session_id = session_id
        self.every = every
        self.task = asyncio.ensure_future(self._run())

    def _current(self) -> bool:
        session = self.spawner._gpu_session
        return session is not None and session.id == self.session_id

    async def _run(self) -> None:
        while self._current():
            try:
                if await check_pod(self.spawner) is not None:
                    return
            except Exception:
                log.exception("the eviction watch of %s failed once", self.spawner._log_name)
            await asyncio.sleep(self.every)

    def cancel(self) -> None:
        self.task.cancel()


def watch(spawner) -> EvictionWatch | None:
    """Start watching the spawner's pod for an eviction when it is in a Kueue LocalQueue (else None); any
    earlier watch of this spawner ends."""
    old = getattr(spawner, "_gpu_eviction_watch", None)
    if old is not None:
        old.cancel()
    spawner._gpu_eviction_watch = None
    session = spawner._gpu_session
    if session is None or not kueue_managed(spawner.gpu_pod()):
        return None
    spawner._gpu_eviction_watch = EvictionWatch(spawner, session.id)
    return spawner._gpu_eviction_watch
