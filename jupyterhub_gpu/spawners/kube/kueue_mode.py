"""Kueue mode of GPUKubeSpawner: its options, the spawn's wait for admission, and gated pods a hub left behind.

A spawn in Kueue mode (docs/kubernetes.md, "With Kueue") passes the hub's budget check as any other, then its
LocalQueue is checked (a queue that does not exist is refused before anything is created), and the hub's own
queue is skipped (:func:`..queueing.take_gpus`): the pod is created at once, labelled for its LocalQueue and
WorkloadPriorityClass, and Kueue's webhook gates it. While it is gated, :meth:`KueueMode.start` reads where
its Workload stands every ``kueue_poll_interval`` seconds (the VisibilityOnDemand API's position, else the
Workload's own conditions) and says it in the spawn's progress; after ``queue_timeout`` seconds the pod is
deleted and the spawn fails with a message. The hub's ``start_timeout`` is lengthened by ``queue_timeout`` for
that spawn, so that it never cuts short a start that Kueue admitted late. Once Kueue admits the pod, the budget
is checked again before the start is recorded (the budget's other servers ran meanwhile): a refusal deletes the
pod and nothing is billed. Billing starts at the pod's binding (:meth:`.GPUKubeSpawner.gpu_confirm_start`),
which a gated pod has not had.

A hub stopped while a pod is gated leaves a pod whose spawn no server of the restarted hub knows: it is an
orphan of an interrupted spawn (:func:`..startup.reap_orphans`), deleted before the hub serves, so that it
holds no place in Kueue's queue and no GPU. One admitted while the hub was down is billed from its binding.
"""

from __future__ import annotations

import asyncio
import math
import time

from jupyterhub.utils import maybe_future
from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException
from traitlets import Callable, Dict, Float, TraitError, Unicode, Union, validate
from traitlets.config import Configurable

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.env import STARTED
from jupyterhub_gpu.spawners.assign.queue import wait_limit_text
from jupyterhub_gpu.spawners.budget import refusal_of
from jupyterhub_gpu.spawners.kube.eviction import STOPPED_EVENT, kueue_managed
from jupyterhub_gpu.spawners.kube.kueue import (
    GROUP,
    QUEUE_LABEL,
    VERSION,
    VISIBILITY_GROUP,
    VISIBILITY_VERSION,
    KueueConfigError,
    KueueTarget,
    admitted,
    admitted_phrase,
    check_kueue_option,
    check_priority_class,
    gated,
    in_kueue_mode,
    missing_queue_phrase,
    name_problem,
    no_queue_phrase,
    position_in,
    queue_of,
    timeout_phrase,
    unreachable_phrase,
    waiting_phrase,
    why_waiting,
    workload_of,
)
from jupyterhub_gpu.spawners.kube.objects import MANAGED_LABEL, SESSION_LABEL
from jupyterhub_gpu.spawners.kube.pods import pod_bound_at

#: starts cancelled while gated, deleting their pods as they unwind (kept from the collector)
_UNWINDING: set[asyncio.Future] = set()
#: answers of the VisibilityOnDemand API that mean it is not served here (or not to the hub): fall back
_NOT_SERVED = (403, 404, 503)


class KueueMode(Configurable):
    """The Kueue options of GPUKubeSpawner and the spawn's wait for Kueue's admission."""

    kueue = Union(
        [Dict(), Callable()],
        default_value={},
        help="""
        Kueue mode (docs/kubernetes.md, "With Kueue"): the LocalQueue of Kueue each spawn's pod goes to. When
        set, every GPU profile runs in Kueue mode: the hub's own wait queue, fair share and preemption are off
        for it, the pod is created at once with the label ``kueue.x-k8s.io/queue-name``, and Kueue admits,
        orders and preempts; the hub still meters, enforces money budgets (before the pod is created), culls
        and notifies. A dict: ``"profiles"`` (profile slug to LocalQueue) first, then ``"groups"`` (the group
        that pays: never another of the user's groups, whose quota it would use), then ``"default"``; a spawn
        for which none is named is refused. A callable ``f(spawner)`` (may be async) returns the LocalQueue's name
        (``spawner.user``, its groups and the chosen profile ``spawner.gpu_chosen_profile`` are set).
        A profile's own ``"kueue_queue"`` names its LocalQueue before all of these, and puts that profile
        alone in Kueue mode when this option is not set. Empty (the default): no Kueue.

            c.GPUKubeSpawner.kueue = {
                "groups": {"cs231n": "cs231n-notebooks", "thesis": "thesis-notebooks"},
                "default": "shared-notebooks",
            }
        """,
    ).tag(config=True)

    kueue_priority_class = Unicode(
        "",
        help="""
        The WorkloadPriorityClass of the pods of standard (not preemptible) profiles in Kueue mode
        (the label ``kueue.x-k8s.io/priority-class``); empty: Kueue's default priority.

            c.GPUKubeSpawner.kueue_priority_class = "notebook-normal"
        """,
    ).tag(config=True)

    kueue_preemptible_priority_class = Unicode(
        "",
        help="""
        The WorkloadPriorityClass of the pods of preemptible profiles in Kueue mode: a low one, so that Kueue
        evicts them first for a higher priority or to reclaim lent quota; empty: Kueue's default priority.

            c.GPUKubeSpawner.kueue_preemptible_priority_class = "notebook-preemptible"
        """,
    ).tag(config=True)

    kueue_poll_interval = Float(
        3,
        help="""
        Seconds between two readings of a gated pod's place in Kueue's queue (the spawn page's
        "position 3 of 7" and Kueue's reason are refreshed this often), from 0.5 to 60.

            c.GPUKubeSpawner.kueue_poll_interval = 3
        """,
    ).tag(config=True)

    @validate("kueue")
    def _valid_kueue(self, proposal):
        if callable(proposal.value):
            return proposal.value
        try:
            return check_kueue_option(proposal.value)
        except KueueConfigError as e:
            raise TraitError(str(e)) from None

    @validate("kueue_priority_class", "kueue_preemptible_priority_class")
    def _valid_priority_class(self, proposal):
        try:
            return check_priority_class(proposal.value, f"c.GPUKubeSpawner.{proposal.trait.name}")
        except KueueConfigError as e:
            raise TraitError(str(e)) from None

    @validate("kueue_poll_interval")
    def _valid_kueue_poll(self, proposal):
        if not 0.5 <= proposal.value <= 60:
            raise TraitError(
                f"c.GPUKubeSpawner.kueue_poll_interval must be from 0.5 to 60 seconds, got {proposal.value}"
            )
        return proposal.value

    #: where this spawn waits in Kueue (set by the pre-spawn hook), or None: the hub's own queue
    _gpu_kueue: KueueTarget | None = None
    _gpu_kueue_admitted = False
    #: the hub's ``start_timeout`` as configured (a Kueue spawn lengthens it by ``queue_timeout``)
    _kueue_start_timeout: int | None = None
    #: the budget's check at this spawn's admission (:meth:`_kueue_budget_again`), once started
    _kueue_budget: asyncio.Future | None = None
    #: the start has come to that check (its pod runs: :meth:`gpu_confirm_start`)
    _kueue_confirming = False

    @property
    def kueue_settled(self) -> bool:
        """Whether this spawn no longer waits for Kueue (admitted, or not in Kueue mode)."""
        return self._gpu_kueue is None or self._gpu_kueue_admitted

    @property
    def gpu_chosen_profile(self):
        """The profile of the spawn being prepared (for a ``kueue`` callable), or None."""
        return self._gpu_profile

    def _kueue_api(self):
        """Kueue's objects through KubeSpawner's API client (its ``api_client`` also reads the visibility API)."""
        return client.CustomObjectsApi(self.api.api_client)

    async def gpu_kueue_target(self, profile) -> KueueTarget | None:
        """Where this spawn goes in Kueue, or None when its profile is not in Kueue mode; a spawn in Kueue mode
        for which no LocalQueue is named (or a callable names a bad one) is refused."""
        if not in_kueue_mode(self.kueue, profile):
            return None
        queue = getattr(profile, "kueue_queue", None)
        if not queue and callable(self.kueue):
            queue = await maybe_future(self.kueue(self))
            problem = name_problem(queue) if queue else None
            if problem:
                raise self.gpu_refusal(
                    no_queue_phrase(),
                    reason="kueue_config",
                    status_code=500,
                    log_message=f"c.GPUKubeSpawner.kueue returned a bad LocalQueue for {self._gpu_key}: {problem}",
                )
        elif not queue:
            queue = queue_of(self.kueue, profile, self._gpu_pool)
        if not queue:
            paying = self._gpu_pool if isinstance(self.kueue, dict) else None  # a dict names queues by group
            raise self.gpu_refusal(no_queue_phrase(paying), reason="kueue_config", status_code=403)
        priority = self.kueue_preemptible_priority_class if profile.preemptible else self.kueue_priority_class
        return KueueTarget(queue, priority)

    async def gpu_before_queue(self, profile) -> None:
        """Before the hub's queue: a spawn in Kueue mode finds its LocalQueue (refused, nothing created, when it
        does not exist) and takes no place in the hub's queue; its start may take ``queue_timeout`` longer."""
        await super().gpu_before_queue(profile)
        if self._kueue_start_timeout is None:
            self._kueue_start_timeout = self.start_timeout
        self.start_timeout = self._kueue_start_timeout
        self._gpu_kueue, self._gpu_kueue_admitted, self._kueue_budget = None, False, None
        self._kueue_confirming = False
        target = await self.gpu_kueue_target(profile)
        if target is None:
            return
        await self._kueue_check_queue(target.queue)
        self._gpu_kueue = target
        # JupyterHub reads start_timeout after this hook, and KubeSpawner waits that long for the pod: the
        # gated wait (at most queue_timeout) must not eat into the admitted start's own time
        self.start_timeout = self._kueue_start_timeout + math.ceil(self.queue_timeout)

    async def _kueue_check_queue(self, queue: str) -> None:
        try:
            await self._kueue_api().get_namespaced_custom_object(GROUP, VERSION, self.namespace, "localqueues", queue)
        except ApiException as e:
            if e.status == 404:
                raise self.gpu_refusal(
                    missing_queue_phrase(queue, self.namespace),
                    reason="kueue_queue",
                    status_code=503,
                    log_message=f"LocalQueue {self.namespace}/{queue} not found ({e.reason}): {e.body}",
                ) from None
            raise self._kueue_unreachable(queue, e) from None
        except (OSError, asyncio.TimeoutError) as e:
            raise self._kueue_unreachable(queue, e) from None

    def _kueue_unreachable(self, queue: str, error):
        return self.gpu_refusal(
            unreachable_phrase(queue),
            reason="kueue_unreachable",
            status_code=503,
            log_message=f"Kueue's LocalQueue {self.namespace}/{queue} cannot be read: {error}",
        )

    # -- the wait for admission --------------------------------------------------------
    async def start(self):
        """The spawner's start; in Kueue mode, beside it the wait for admission (its progress, its time limit)."""
        started = asyncio.ensure_future(super().start())
        watch = asyncio.ensure_future(self._kueue_watch())
        try:
            done, _ = await asyncio.wait({started, watch}, return_when=asyncio.FIRST_COMPLETED)
            if watch in done and watch.exception() is not None:
                if not self._kueue_start_refused(watch.exception()):
                    started.cancel()  # the start deletes the gated pod as it unwinds
                await asyncio.wait({started})
                raise watch.exception()
            if started not in done:
                await asyncio.wait({started})  # not ``await started``: a cancellation must not wait for it
            result = started.result()
            if self._gpu_kueue is not None and not self._gpu_kueue_admitted:
                self._kueue_note_admitted(self._gpu_kueue)  # it runs: admitted before the watch's next look
            return result
        except asyncio.CancelledError:
            # JupyterHub's stop of a pending spawn cancels it, and stops the server a second later only if the
            # spawn is no longer pending by then: the start unwinds (deleting the gated pod) in the background
            if not started.done():
                if not self._gpu_recorded:
                    # never started, never billed: JupyterHub's stop, which may come before the unwinding is
                    # done, must not record a session that never ran
                    self._gpu_session = None
                started.cancel()
                _UNWINDING.add(started)
                started.add_done_callback(_UNWINDING.discard)
            raise
        finally:
            watch.cancel()

    async def _kueue_watch(self) -> None:
        """Until Kueue admits the pod: its place and Kueue's reason in the progress; a refusal after the time
        limit, or when the server was stopped meanwhile."""
        # the pod's building comes first (KubeSpawner's start, which has no event for it)
        while not self._gpu_pod_built:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        target = self._gpu_kueue
        if target is None:
            return
        deadline = time.monotonic() + self.queue_timeout
        said, visibility = None, True
        while True:
            if self._gpu_abort:
                raise self._gpu_stopped_while_starting()
            pod = self.gpu_pod()
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            workload = await self._kueue_workload(uid) if uid else None
            if (pod is not None and not gated(pod)) or admitted(workload):
                await self._kueue_budget_again()
                self._kueue_note_admitted(target)
                return
            place = None
            if workload is not None and visibility:
                place, visibility = await self._kueue_position(target.queue, workload["metadata"]["name"])
            shown = (place, why_waiting(workload))
            if shown != said:
                said = shown
                self._gpu_say(66, waiting_phrase(target.queue, *shown))
            if time.monotonic() >= deadline:
                raise self.gpu_refusal(
                    timeout_phrase(target.queue, wait_limit_text(self.queue_timeout)),
                    reason="kueue_timeout",
                    status_code=503,
                )
            await asyncio.sleep(min(self.kueue_poll_interval, max(deadline - time.monotonic(), 0.05)))

    async def _kueue_budget_again(self) -> None:
        """Once Kueue has admitted the pod, before its start is recorded: the budget checked again, as after a wait
        in the hub's own queue (the budget's other servers ran while this one was gated). A refusal fails the
        spawn with the budget's message; the pod is deleted as the start unwinds, and nothing is billed. One check
        per spawn: the watch that sees the admission and the start that finds the pod running share it."""
        if self._kueue_budget is None:
            self._kueue_budget = asyncio.ensure_future(self._kueue_check_budget())
            self._kueue_budget.add_done_callback(lambda f: f.cancelled() or f.exception())  # read by its waiters
        await asyncio.shield(self._kueue_budget)  # a cancelled waiter leaves it to the other

    async def _kueue_check_budget(self) -> None:
        refusal = await refusal_of(self, self._gpu_profile, reserve=True)
        if refusal:
            self.log.info("%s: admitted by Kueue, but its budget no longer pays its start", self._log_name)
            raise self.gpu_refusal(refusal, reason="budget", status_code=403)

    async def gpu_confirm_start(self):
        """The budget at Kueue's admission (:meth:`_kueue_budget_again`), if the watch has not checked it yet;
        the pod's uid kept in the state (its Workload tells a restarted hub of an eviction it missed)."""
        if self._gpu_kueue is not None:
            self._kueue_confirming = True
            await self._kueue_budget_again()
        await super().gpu_confirm_start()
        pod = self.gpu_pod()
        self._kueue_pod_uid = ((pod or {}).get("metadata") or {}).get("uid") if kueue_managed(pod) else None

    # -- the state a restarted hub needs ---------------------------------------------
    #: the uid of the running session's pod when it is in a LocalQueue (its Workload names it)
    _kueue_pod_uid: str | None = None

    def get_state(self):
        state = super().get_state()
        if self._kueue_pod_uid:
            state["kueue_pod_uid"] = self._kueue_pod_uid
        return state

    def load_state(self, state):
        super().load_state(state)
        uid = state.get("kueue_pod_uid") if isinstance(state, dict) else None
        self._kueue_pod_uid = uid if isinstance(uid, str) and uid else None

    def clear_state(self):
        super().clear_state()
        self._kueue_pod_uid = None

    def _kueue_start_refused(self, error: BaseException) -> bool:
        """Whether the start is failing on its own with the watch's ``error``: the budget's refusal at admission,
        which both awaited. It then deletes its pod as it unwinds (or has begun to); a cancellation would cut that
        short."""
        check = self._kueue_budget
        return (
            self._kueue_confirming
            and check is not None
            and check.done()
            and not check.cancelled()
            and check.exception() is error
        )

    def _kueue_note_admitted(self, target: KueueTarget) -> None:
        self._gpu_kueue_admitted = True  # before the event that wakes the progress up
        self._gpu_say(68, admitted_phrase(target.queue))

    async def _kueue_workload(self, pod_uid: str) -> dict | None:
        try:
            found = await self._kueue_api().list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={pod_uid}"
            )
        except (ApiException, OSError, asyncio.TimeoutError) as e:
            self.log.warning("%s: cannot read the Workload of its pod: %s", self._log_name, e)
            return None
        return workload_of(found.get("items") or [], pod_uid)

    async def _kueue_pod_events(self, pod_uid: str) -> list[tuple]:
        """The ``Stopped`` events Kueue left on the pod of ``pod_uid`` as ``(first time, message)``; none when
        they cannot be read (logged)."""
        selector = f"involvedObject.uid={pod_uid},reason={STOPPED_EVENT}"
        try:
            found = await self.api.list_namespaced_event(self.namespace, field_selector=selector)
        except (ApiException, OSError, asyncio.TimeoutError) as e:
            self.log.warning("%s: cannot read the events of its pod: %s", self._log_name, e)
            return []
        return [(e.first_timestamp or e.last_timestamp, e.message or "") for e in found.items or []]

    async def _kueue_position(self, queue: str, workload: str) -> tuple[tuple[int, int] | None, bool]:
        """(the Workload's place in its LocalQueue, whether the VisibilityOnDemand API answered)."""
        path = (
            f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{self.namespace}/localqueues/{queue}"
            "/pendingworkloads"
        )
        try:
            pending = await self._kueue_api().api_client.call_api(
                path,
                "GET",
                header_params={"Accept": "application/json"},
                response_types_map={200: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
            )
        except ApiException as e:
            if e.status in _NOT_SERVED:
                self.log.info(
                    "%s: Kueue's visibility API is not served (%s); its Workload's status is shown",
                    self._log_name,
                    e.status,
                )
                return None, False
            self.log.warning("%s: cannot read Kueue's pending workloads: %s", self._log_name, e)
            return None, True
        except (OSError, asyncio.TimeoutError) as e:
            self.log.warning("%s: cannot read Kueue's pending workloads: %s", self._log_name, e)
            return None, True
        return position_in(pending, workload), True

    # -- a hub restarted while a pod was gated ---------------------------------------
    @classmethod
    def gpu_orphans(cls, probe, api_url: str):
        """This hub's pods in Kueue mode (gated or not), as :func:`..startup.reap_orphans` asks; one that was
        never admitted carries no session facts (nothing ran, nothing is billed), an admitted one is billed
        from its binding."""
        if not probe.kueue and not _kueue_profiles(probe.profiles):
            return []  # no Kueue here: no API call at the hub's start
        return asyncio.run(_kueue_pods(probe, api_url))

    @classmethod
    def gpu_reap(cls, probe, handle) -> None:
        asyncio.run(_delete_pod(probe, *handle))


def _kueue_profiles(profiles) -> bool:
    """Whether a profile of the configuration names a LocalQueue (a callable's profiles may: assume so)."""
    return callable(profiles) or any(isinstance(p, dict) and p.get("kueue_queue") for p in profiles or [])


def _load_config(probe) -> None:
    from kubespawner.clients import load_config  # optional heavy dependency: KubeSpawner's client configuration

    load_config(host=probe.k8s_api_host, ssl_ca_cert=probe.k8s_api_ssl_ca_cert, verify_ssl=probe.k8s_api_verify_ssl)


async def _kueue_pods(probe, api_url: str) -> list[tuple[str, str, tuple, dict[str, str]]]:
    _load_config(probe)
    async with client.ApiClient() as api:
        pods = await client.CoreV1Api(api).list_pod_for_all_namespaces(
            label_selector=f"{MANAGED_LABEL}=true,{QUEUE_LABEL}"
        )
        found = []
        for pod in api.sanitize_for_serialization(pods).get("items") or []:
            meta = pod["metadata"]
            containers = pod["spec"].get("containers") or []
            env = (
                {e["name"]: e.get("value", "") for e in (containers[0].get("env") or []) if containers}
                if containers
                else {}
            )
            if env.get("JUPYTERHUB_API_URL") != api_url or meta.get("deletionTimestamp"):
                continue
            if not getattr(probe, "enable_user_namespaces", False) and meta.get("namespace") != probe.namespace:
                # another hub's server (hubs in their own namespaces often share the API URL http://hub:8081)
                continue
            bound = pod_bound_at(pod)
            if gated(pod) or bound is None:
                env = {}  # never admitted: it ran nothing and is not billed
            else:
                env[STARTED] = isoformat(bound)
            what = f"pod {meta['namespace']}/{meta['name']}"
            found.append(
                (meta["labels"].get(SESSION_LABEL, ""), what, (meta["namespace"], meta["name"], meta["uid"]), env)
            )
        return found


async def _delete_pod(probe, namespace: str, name: str, uid: str, wait: float = 60) -> None:
    _load_config(probe)
    async with client.ApiClient() as api:
        core = client.CoreV1Api(api)
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        try:
            await core.delete_namespaced_pod(name=name, namespace=namespace, body=options, grace_period_seconds=0)
        except ApiException as e:
            if e.status not in (404, 409):
                raise
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:  # Kueue's finalizer goes with its Workload
            try:
                pod = await core.read_namespaced_pod(name=name, namespace=namespace)
            except ApiException as e:
                if e.status == 404:
                    return
                raise
            if pod.metadata.uid != uid:
                return
            await asyncio.sleep(0.5)
        raise TimeoutError(f"pod {namespace}/{name} is still there {wait:g} s after its deletion")
