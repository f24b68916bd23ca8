"""GPUKubeSpawner in Kueue mode without a cluster: the real spawner of a real JupyterHub ``User`` through the hub's
spawn sequence, with the pod's labels, the hub's queue skipped, the gated wait's progress in English and
Chinese, its time limit (the pod deleted), the start_timeout that covers it, and a LocalQueue that does not
exist refused before any pod.

What stands in for the cluster is named for it: :class:`StandInCluster` holds the pods (as KubeSpawner's pod
reflector would), the Workloads and the visibility API's answers that Kueue would give, and answers the few
calls the spawner makes (Kueue's objects through ``CustomObjectsApi``, the pod's creation and deletion). The
real-cluster tests are tests/k8s/test_kueue_spawn.py.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace

import pytest
from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.client.rest import ApiException

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import DEVICE_INFO
from jupyterhub_gpu.scheduler.texts import KueueWhy
from jupyterhub_gpu.session import SessionStart, StopReason
from jupyterhub_gpu.spawners.kube.kueue import ADMISSION_GATE
from jupyterhub_gpu.spawners.progress import SPAWN_LANGUAGES
from tests.unit.spawners.kube.test_kube_spawner import (  # noqa: F401  (kubeconfig: KubeSpawner needs a client config)
    Cluster,
    RecordingKubeSpawner,
    kubeconfig,
    make_config,
    make_spawner,
    serialized,
    spawn,
)

pytestmark = pytest.mark.timeout(60)

KUEUE = {"groups": {"cs231n": "cs231n-q"}, "default": "shared-q"}


class StandInCluster:
    """What the API server and Kueue would answer, for one namespace."""

    def __init__(self, queues=("cs231n-q", "shared-q")):
        self.queues = set(queues)
        self.pods: dict[str, dict] = {}  # "namespace/name" -> Pod JSON
        self.workloads: list[dict] = []
        self.pending: dict | None = {"items": []}  # the visibility API's answer; None: not served
        self.deleted: list[str] = []
        self.start_delay = 0.0  # seconds the admitted pod takes to run (its image pulled, its server up)
        self.api_client = self

    # CustomObjectsApi
    async def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        assert (group, version, plural) == ("kueue.x-k8s.io", "v1beta2", "localqueues")
        if name not in self.queues:
            raise ApiException(status=404, reason="Not Found")
        return {"metadata": {"name": name}}

    async def list_namespaced_custom_object(self, group, version, namespace, plural, label_selector=""):
        assert plural == "workloads" and label_selector.startswith("kueue.x-k8s.io/job-uid=")
        return {"items": list(self.workloads)}

    # CoreV1Api: the events Kueue left on pods, as (involvedObject.uid, reason, first time, message)
    events: list[tuple] = []

    async def list_namespaced_event(self, namespace, field_selector=""):
        wanted = dict(part.split("=", 1) for part in field_selector.split(","))
        items = [
            SimpleNamespace(first_timestamp=at, last_timestamp=at, message=message)
            for uid, reason, at, message in self.events
            if wanted == {"involvedObject.uid": uid, "reason": reason}
        ]
        return SimpleNamespace(items=items)

    async def call_api(self, path, method, **kwargs):
        assert path.endswith("/pendingworkloads") and "/localqueues/" in path
        if self.pending is None:
            raise ApiException(status=404, reason="Not Found")
        return self.pending

    # Kueue's decisions
    def wait(self, position=None, length=None, reason=""):
        (uid,) = [p["metadata"]["uid"] for p in self.pods.values()]
        condition = {"type": "QuotaReserved", "status": "False", "message": reason}
        self.workloads = [
            {
                "metadata": {"name": "pod-w", "ownerReferences": [{"kind": "Pod", "uid": uid}]},
                "status": {"conditions": [condition]},
            }
        ]
        if self.pending is not None and position:
            others = [{"metadata": {"name": f"x{i}"}, "positionInLocalQueue": i} for i in range(length)]
            others[position - 1] = {"metadata": {"name": "pod-w"}, "positionInLocalQueue": position - 1}
            self.pending = {"items": others}

    def admit(self):
        for pod in self.pods.values():
            pod["spec"].pop("schedulingGates", None)


class KueueSpawner(RecordingKubeSpawner):
    """The real GPUKubeSpawner; only its calls to the API server reach :class:`StandInCluster` instead."""

    cluster: StandInCluster

    def _kueue_api(self):
        return self.cluster

    async def _start_watching_pods(self, replace=False):
        return None

    @property
    def pod_reflector(self):
        return self

    @property
    def pods(self):  # the reflector's pods
        return self.cluster.pods

    async def _start(self):
        """KubeSpawner's start: the pod created (Kueue's webhook gates it), then waited for until it runs."""
        self.created_pod = serialized(await self.get_pod_manifest())
        pod = {
            "metadata": {**self.created_pod["metadata"], "uid": "uid-1", "namespace": self.namespace},
            "spec": {**self.created_pod["spec"], "schedulingGates": [{"name": ADMISSION_GATE}]},
            "status": {"phase": "Pending"},
        }
        key = f"{self.namespace}/{self.pod_name}"
        self.cluster.pods[key] = pod
        while "schedulingGates" in self.cluster.pods[key]["spec"]:  # noqa: ASYNC110  (Kueue ungates it)
            await asyncio.sleep(0.02)
        await asyncio.sleep(self.cluster.start_delay)
        return ("10.0.0.5", 8888)

    async def _make_delete_pod_request(self, name, options, grace, timeout):
        self.cluster.deleted.append(name)
        self.cluster.pods.pop(f"{self.namespace}/{name}", None)
        return True


def kueue_spawner(cluster: StandInCluster, groups=("cs231n",), **options):
    gpus = Cluster()
    gpus.occupy_t4s()  # the hub's own queue would wait: every T4 of the cluster is taken
    config = make_config(gpus, **{"kueue": KUEUE, "kueue_poll_interval": 0.5, "queue_timeout": 60, **options})
    spawner = make_spawner(config, groups=groups, cls=KueueSpawner)
    spawner.cluster = cluster
    return spawner


def messages(spawner) -> list[str]:
    return [e["message"] for e in spawner._gpu_events]


async def test_the_pod_carries_its_queue_and_priority_and_skips_the_hubs_queue():
    cluster = StandInCluster()
    spawner = kueue_spawner(
        cluster, kueue_priority_class="notebook-normal", kueue_preemptible_priority_class="notebook-low"
    )
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    labels = spawner.created_pod["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "cs231n-q"
    assert labels["kueue.x-k8s.io/priority-class"] == "notebook-normal"
    assert labels["jupyterhub-gpu/profile"] == "t4"
    assert spawner.allocator.waiting("T4") == 0  # in no queue of the hub
    cluster.admit()
    assert await task == ("10.0.0.5", 8888)
    assert "Admitted by Kueue from the cs231n-q queue; the server is starting" in messages(spawner)
    assert not any(m.startswith("Assigned") for m in messages(spawner))  # Kueue admits; the hub assigns no GPU
    # the hub's start_timeout covers the gated wait: JupyterHub reads it after the pre-spawn hook
    assert spawner.start_timeout == 60 + 60
    # the hub holds no claim, but the session has its GPU all the same: the ledger counts it (GPU-hour budgets),
    # culling judges its use and the server samples it
    assert spawner.gpu_session["devices"] == ["nvidia.com/gpu:0"]
    assert [d["uuid"] for d in json.loads(spawner._gpu_env[DEVICE_INFO])] == ["nvidia.com/gpu:0"]  # the sampler's


async def test_a_spawn_without_kueue_keeps_the_hubs_queue_and_its_pod_has_no_kueue_label():
    spawner = make_spawner(make_config(Cluster()), groups=["cs231n"])
    await spawn(spawner, "t4")
    pod = serialized(spawner.created_pod)
    assert not any(k.startswith("kueue.x-k8s.io/") for k in pod["metadata"]["labels"])
    assert spawner.start_timeout == 60
    assert spawner.gpu_session["devices"]  # a claim of the hub's cluster allocator


async def test_the_gated_wait_shows_kueues_position_and_reason_in_chinese_too():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster)
    SPAWN_LANGUAGES[spawner._gpu_key] = "zh-CN"
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.wait(3, 7, "insufficient unused quota for nvidia.com/gpu in flavor sim-gpu, 1 more needed")
    await wait_until(lambda: any("第 3 位，共 7 位" in m for m in messages(spawner)))
    cluster.wait(1, 7, "insufficient unused quota for nvidia.com/gpu in flavor sim-gpu, 1 more needed")
    await wait_until(lambda: any("第 1 位，共 7 位" in m for m in messages(spawner)))
    cluster.admit()
    await task
    shown = messages(spawner)
    assert (
        "在 cs231n-q 队列（Kueue）中等待——第 3 位，共 7 位。Kueue 说明：insufficient unused quota for nvidia.com/gpu"
        " in flavor sim-gpu, 1 more needed"
    ) in shown
    assert shown[-1] == "Kueue 已从 cs231n-q 队列准入，服务器正在启动"


async def test_without_the_visibility_api_the_workloads_reason_is_shown():
    cluster = StandInCluster()
    cluster.pending = None
    spawner = kueue_spawner(cluster, groups=("other",))  # the default queue
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.wait(reason="borrowing limit for nvidia.com/gpu in flavor sim-gpu exceeded")
    await wait_until(lambda: "borrowing" in messages(spawner)[-1])
    assert messages(spawner)[-1] == (
        "Waiting in the shared-q queue (Kueue). Kueue says: borrowing limit for nvidia.com/gpu in flavor sim-gpu"
        " exceeded"
    )
    cluster.admit()
    await task


async def test_the_wait_is_bounded_by_the_queue_timeout_and_its_pod_is_deleted():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster, queue_timeout=1)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.wait(2, 2, "")
    with pytest.raises(SpawnException) as e:
        await task
    assert e.value.jupyterhub_message == (
        "Kueue did not admit this server from the cs231n-q queue within 1 seconds; nothing was started."
        " Try again later or choose another profile."
    )
    assert cluster.deleted == [spawner.pod_name] and not cluster.pods
    assert spawner.gpu_session == {}


async def test_a_stop_while_gated_deletes_the_pod():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    task.cancel()  # JupyterHub's stop of a pending spawn cancels it, and stops it if it is not pending a second later
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 0.5)  # at once: the pod's deletion does not hold the cancellation up
    assert spawner.gpu_session == {}  # never recorded: JupyterHub's stop that follows records nothing
    await wait_until(lambda: not cluster.pods)  # deleted as the start unwinds
    assert cluster.deleted == [spawner.pod_name]
    await wait_until(lambda: spawner.gpu_session == {})


async def test_a_local_queue_that_does_not_exist_is_refused_before_any_pod():
    cluster = StandInCluster(queues=("shared-q",))
    spawner = kueue_spawner(cluster)
    with pytest.raises(SpawnException) as e:
        await spawn(spawner, "t4")
    assert e.value.jupyterhub_message == (
        "The Kueue queue cs231n-q does not exist in the namespace default; nothing was started."
        " Please tell your administrator."
    )
    assert not cluster.pods and not hasattr(spawner, "created_pod")


async def test_a_spawn_no_queue_names_is_refused():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster, kueue={"groups": {"cs231n": "cs231n-q"}}, groups=("other",))
    with pytest.raises(SpawnException, match="No Kueue queue is set for the group other that pays for this server"):
        await spawn(spawner, "t4")
    assert not cluster.pods
    spawner = kueue_spawner(cluster, kueue=lambda spawner: "", groups=("other",))
    with pytest.raises(SpawnException, match="No Kueue queue is set for your groups and this profile"):
        await spawn(spawner, "t4")
    assert not cluster.pods


async def spawn_paid_by(spawner, profile: str, pool: str):
    spawner.user_options = {"profile": profile, "pool": pool}
    await spawner.run_pre_spawn_hook()
    return await spawner.start()


async def test_a_paying_group_without_a_local_queue_takes_the_default_not_another_groups():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster, groups=("cs231n", "hobby"))  # cs231n has a LocalQueue, hobby pays
    task = asyncio.ensure_future(spawn_paid_by(spawner, "t4", "hobby"))
    await wait_until(lambda: cluster.pods)
    assert spawner.created_pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "shared-q"
    assert spawner._gpu_pool == "hobby"
    cluster.admit()
    await task


async def test_a_paying_group_without_a_local_queue_and_no_default_is_refused():
    cluster = StandInCluster()
    spawner = kueue_spawner(cluster, kueue={"groups": {"cs231n": "cs231n-q"}}, groups=("cs231n", "hobby"))
    with pytest.raises(SpawnException) as e:
        await spawn_paid_by(spawner, "t4", "hobby")
    assert e.value.jupyterhub_message == (
        "No Kueue queue is set for the group hobby that pays for this server, nor for everyone; nothing was started."
        " Choose another group to pay, or tell your administrator."
    )
    assert not cluster.pods and not hasattr(spawner, "created_pod")
    # the group with the LocalQueue, paying, goes to its own
    spawner = kueue_spawner(cluster, kueue={"groups": {"cs231n": "cs231n-q"}}, groups=("cs231n", "hobby"))
    task = asyncio.ensure_future(spawn_paid_by(spawner, "t4", "cs231n"))
    await wait_until(lambda: cluster.pods)
    assert spawner.created_pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "cs231n-q"
    cluster.admit()
    await task


async def test_a_callable_names_the_queue_and_a_profile_key_wins():
    cluster = StandInCluster(queues=("from-callable", "own-q"))
    seen = []

    def choose(spawner):
        seen.append(spawner.gpu_chosen_profile.slug)
        return "from-callable"

    spawner = kueue_spawner(cluster, kueue=choose)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    assert spawner.created_pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "from-callable"
    assert seen == ["t4"]
    cluster.admit()
    await task


def spend_while_gated(ledger_url: str) -> None:
    """alice's other server ran 30 minutes of a T4 meanwhile (1.50 of her 1.00 budget), recorded and closed."""
    from jupyterhub_gpu.ledger.store import shared_ledger

    ledger = shared_ledger(ledger_url)
    now = utcnow()
    other = SessionStart(
        "other-1", "alice", "other", ("cs231n",), "t4", ("GPU-0",), 50_000, "CNY", now - timedelta(minutes=30)
    )
    ledger.record_start(other)
    ledger.record_stop("other-1", now, StopReason.STOPPED)


def budgeted_spawner(cluster: StandInCluster, tmp_path, **options):
    """A Kueue spawner whose user has 1.00 CNY a month: enough for the first 10 minutes of a T4 (0.50)."""
    from jupyterhub_gpu.ledger.store import shared_ledger

    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    rule = BudgetRule("user", "alice", "month", "money", Decimal("1.00"))
    shared_ledger(ledger_url).set_budget(rule, utcnow())
    return kueue_spawner(cluster, ledger_db_url=ledger_url, **options), ledger_url


def alices_sessions(ledger_url: str) -> list:
    from jupyterhub_gpu.ledger.store import shared_ledger

    return [s for s in shared_ledger(ledger_url).sessions(user="alice") if s.server_name == ""]


REFUSED = "Budget used up: CN¥1.50 of CN¥1.00 (your budget) spent in"


@pytest.mark.parametrize("seen_by", ["the watch", "the start"])
async def test_the_budget_is_checked_again_at_kueues_admission_and_a_refusal_deletes_the_pod(tmp_path, seen_by):
    cluster = StandInCluster()
    if seen_by == "the watch":
        cluster.start_delay = 30  # its server would take long to come up: the watch sees the admission first
        spawner, ledger_url = budgeted_spawner(cluster, tmp_path)
    else:
        spawner, ledger_url = budgeted_spawner(cluster, tmp_path, kueue_poll_interval=60)  # the start sees it first
    task = asyncio.ensure_future(spawn(spawner, "t4"))  # the budget pays its first 10 minutes: the pod is made
    await wait_until(lambda: cluster.pods)
    cluster.wait(2, 2, "insufficient unused quota for nvidia.com/gpu in flavor sim-gpu, 1 more needed")
    await wait_until(lambda: any(m.startswith("Waiting in the cs231n-q queue") for m in messages(spawner)))
    spend_while_gated(ledger_url)
    cluster.admit()  # "the start": the watch looked once and sleeps its interval
    with pytest.raises(SpawnException) as e:
        await asyncio.wait_for(task, 10)  # not the 30 s the pod would take to run
    assert REFUSED in e.value.jupyterhub_message, e.value.jupyterhub_message
    await wait_until(lambda: not cluster.pods)
    assert cluster.deleted == [spawner.pod_name]
    assert alices_sessions(ledger_url) == []  # never recorded, never billed
    assert spawner.gpu_session == {}
    assert not any(m.startswith("Admitted by Kueue") for m in messages(spawner))


async def test_a_budget_that_still_pays_at_admission_starts_the_server(tmp_path):
    cluster = StandInCluster()
    spawner, ledger_url = budgeted_spawner(cluster, tmp_path)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.admit()
    assert await task == ("10.0.0.5", 8888)
    (session,) = alices_sessions(ledger_url)
    assert session.id == spawner.gpu_session["session_id"]


async def test_a_restarted_hub_finds_an_eviction_whose_pod_is_gone_from_its_workload(tmp_path):
    from jupyterhub_gpu.ledger.queries.schedule import stop_orders
    from jupyterhub_gpu.ledger.store import shared_ledger

    cluster = StandInCluster()
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = kueue_spawner(cluster, ledger_db_url=ledger_url)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.admit()
    await task
    state = spawner.get_state()
    assert state["kueue_pod_uid"] == "uid-1"  # the pod's uid, which its Workload names
    session_id = spawner.gpu_session["session_id"]
    await asyncio.sleep(1.1)  # Kubernetes' times have whole seconds: the eviction comes after the start
    evicted_at = utcnow().replace(microsecond=0)
    # the hub is down; Kueue evicts the pod (reclaiming borrowed quota) and lets it go; its Workload stays a while
    cluster.pods.clear()
    message = (
        "Preempted to accommodate a workload (UID: w2, JobUID: j2) due to reclamation within the cohort;"
        " preemptor path: /lab/cs231n; preemptee path: /lab/thesis"
    )
    cluster.workloads = [
        {
            "metadata": {"name": "pod-w", "ownerReferences": [{"kind": "Pod", "uid": "uid-1"}]},
            "status": {
                "conditions": [
                    {
                        "type": "Evicted",
                        "status": "True",
                        "reason": "Preempted",
                        "message": message,
                        "lastTransitionTime": evicted_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    }
                ]
            },
        }
    ]
    await asyncio.sleep(2)  # the hub comes back later: billing must still end at the eviction
    restarted = kueue_spawner(cluster, ledger_db_url=ledger_url)
    restarted.load_state(state)
    assert await restarted.poll() == 1
    ledger = shared_ledger(ledger_url)
    session = ledger.get_session(session_id)
    assert session.stop_reason == StopReason.PREEMPTED
    assert session.stopped == evicted_at.replace(tzinfo=None)  # billed to the eviction, not to the poll
    (order,) = stop_orders(ledger, pending=False)
    assert (order.kind, order.reason_key, order.stop_at) == ("preempted", "stop.kueue.save", evicted_at)
    assert order.cause == "kueue:WorkloadEvictedDueToPreempted"


async def test_a_restarted_hub_finds_an_eviction_whose_pod_and_workload_are_gone_from_kueues_event(tmp_path):
    from jupyterhub_gpu.ledger.queries.schedule import stop_orders
    from jupyterhub_gpu.ledger.store import shared_ledger

    cluster = StandInCluster()
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = kueue_spawner(cluster, ledger_db_url=ledger_url)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.admit()
    await task
    state, session_id = spawner.get_state(), spawner.gpu_session["session_id"]
    await asyncio.sleep(1.1)
    evicted_at = utcnow().replace(microsecond=0)
    # the hub is down; Kueue evicts the pod; the pod and its Workload are gone; Kueue's events stay (an hour)
    cluster.pods.clear()
    cluster.workloads = []
    cluster.events = [
        ("uid-1", "Stopped", evicted_at, "Preempted to accommodate a workload (UID: w2, JobUID: j2) due to"
         " prioritization in the ClusterQueue; preemptor path: /lab/cs231n; preemptee path: /lab/cs231n"),
        ("uid-other", "Stopped", evicted_at, "Preempted to accommodate a workload (another pod's)"),
    ]  # fmt: skip
    await asyncio.sleep(2)
    restarted = kueue_spawner(cluster, ledger_db_url=ledger_url)
    restarted.api = cluster  # KubeSpawner's CoreV1Api: the events are read through it
    restarted.load_state(state)
    assert await restarted.poll() == 1
    ledger = shared_ledger(ledger_url)
    session = ledger.get_session(session_id)
    assert session.stop_reason == StopReason.PREEMPTED
    assert session.stopped == evicted_at.replace(tzinfo=None)
    (order,) = stop_orders(ledger, pending=False)
    assert (order.reason_key, order.values["why"]) == ("stop.kueue.save", KueueWhy("priority", "Preempted"))


async def test_a_restarted_hub_whose_pod_and_workload_are_gone_bills_as_before(tmp_path):
    from jupyterhub_gpu.ledger.store import shared_ledger

    cluster = StandInCluster()
    ledger_url = f"sqlite:///{tmp_path}/ledger.sqlite"
    spawner = kueue_spawner(cluster, ledger_db_url=ledger_url)
    task = asyncio.ensure_future(spawn(spawner, "t4"))
    await wait_until(lambda: cluster.pods)
    cluster.admit()
    await task
    state, session_id = spawner.get_state(), spawner.gpu_session["session_id"]
    cluster.pods.clear()
    cluster.workloads = []
    # Kueue's event of a stop that is no eviction (its Workload deleted) does not make it one
    cluster.events = [("uid-1", "Stopped", utcnow().replace(microsecond=0), "Workload is deleted")]
    restarted = kueue_spawner(cluster, ledger_db_url=ledger_url)
    restarted.api = cluster  # KubeSpawner's CoreV1Api: the events are read through it
    restarted.load_state(state)
    assert await restarted.poll() == 1
    assert shared_ledger(ledger_url).get_session(session_id).stop_reason == StopReason.EXITED


async def wait_until(predicate, timeout=10):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)
