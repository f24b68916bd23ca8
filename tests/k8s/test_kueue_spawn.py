"""GPUKubeSpawner in Kueue mode on the test cluster: Kueue, not the hub, admits and orders the notebooks' pods.

A real hub (GPUKubeSpawner with ``c.GPUKubeSpawner.kueue``), the real gpu service, and Kueue v0.17 running beside
the test cluster's control plane (scripts/k8s-setup.sh), with the example department of config/kubernetes/kueue/
(two ClusterQueues of 2 GPUs in one cohort, a LocalQueue per group), made per test with the test's own names
(tests/k8s/kueue.py). Everything is read back from the API server: the pods, their scheduling gate, the
Workloads, the ClusterQueues' usage; the ledger is the service's database.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.spawners.kube.pods import kube_time
from tests.conftest import wait_for
from tests.k8s.conftest import running, wait_pod
from tests.k8s.kueue import (
    gated,
    gpu_job,
    gpu_pod,
    gpu_usage,
    set_gpu_quota,
    workload_of,
    workloads,
)

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(900)]


def kueue_config(dept, extra: str = "") -> str:
    groups = {g: dept.local_queue(g) for g in ("cs231n", "thesis")}
    return f"""
c.GPUKubeSpawner.kueue = {{"groups": {groups!r}}}
c.GPUKubeSpawner.kueue_priority_class = {dept.priority_class("notebook")!r}
c.GPUKubeSpawner.kueue_preemptible_priority_class = {dept.priority_class("notebook-preemptible")!r}
c.GPUKubeSpawner.kueue_poll_interval = 1
c.GPUKubeSpawner.queue_timeout = 600
{extra}
"""


def group(hub, name: str, *users: str) -> None:
    hub.create_users(*users)
    r = hub.api("POST", f"/groups/{name}", json={"users": list(users)})
    assert r.status_code in (201, 409), r.text
    if r.status_code == 409:
        r = hub.api("POST", f"/groups/{name}/users", json={"users": list(users)})
        assert r.status_code == 200, r.text


def user_pod(kube, namespace: str, user: str) -> dict | None:
    pods = [p for p in kube.pods(namespace) if p["metadata"]["labels"].get("hub.jupyter.org/username") == user]
    assert len(pods) <= 1, pods
    return pods[0] if pods else None


def sessions(hub, user: str) -> list:
    return sorted(Ledger(f"sqlite:///{hub.ledger_path}").sessions(user=user), key=lambda s: s.started)


def bound_at(pod: dict):
    return kube_time(next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")["lastTransitionTime"])


def utc(value):
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def add_pause_pods(kube, namespace: str, queue: str, *names: str) -> None:
    for name in names:
        kube.create(f"/api/v1/namespaces/{namespace}/pods", gpu_pod(name, queue))
    for name in names:
        wait_pod(kube, namespace, name, timeout=60)


def test_a_third_spawn_waits_in_kueue_with_its_position_and_is_billed_from_its_pods_start(kube, kube_hub, department):
    dept = department
    ns = dept.namespace
    # the course's own 2 GPUs only: no borrowing from the idle thesis group
    set_gpu_quota(kube, dept.cluster_queue("cs231n"), borrowing_limit=0)
    hub = kube_hub(kueue_config(dept))
    group(hub, "cs231n", "u1", "u2", "u3")
    for u in ("u1", "u2"):
        assert hub.start_server(u).status_code in (201, 202)
    for u in ("u1", "u2"):
        hub.wait_ready(u, timeout=240)
        pod = user_pod(kube, ns, u)
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == dept.local_queue("cs231n")
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == dept.priority_class("notebook")
    assert gpu_usage(kube, dept.cluster_queue("cs231n")) == (2, 0)

    # the third: its pod is created at once and Kueue gates it; the spawn page says where it stands, from Kueue
    assert hub.start_server("u3").status_code in (201, 202)
    events = hub.progress_events("u3", lambda e: "position 1 of 1" in e.get("message", ""), timeout=90)
    waiting = [e["message"] for e in events if "(Kueue)" in e["message"]]
    assert waiting[-1].startswith(f"Waiting in the {dept.local_queue('cs231n')} queue (Kueue) — position 1 of 1")
    assert "Kueue says:" in waiting[-1] and "nvidia.com/gpu" in waiting[-1], waiting  # the quota is used
    pod = user_pod(kube, ns, "u3")
    assert gated(pod) and not pod["spec"].get("nodeName")
    seen_gated = datetime.now(timezone.utc)
    assert not sessions(hub, "u3")  # nothing billed while it waits

    # a GPU frees: Kueue admits it, and its bill starts at its pod's binding, not when it was asked for
    asked_to_stop = datetime.now(timezone.utc)
    hub.stop_server("u1")
    hub.wait_stopped("u1", timeout=120)
    hub.wait_ready("u3", timeout=240)
    pod = user_pod(kube, ns, "u3")
    assert not gated(pod) and running(pod)
    (record,) = sessions(hub, "u3")
    # its GPU counts (GPU-hour budgets, GPU-aware culling) though the hub held no claim on it
    assert record.gpu_count == 1 and record.gpu_list == ["nvidia.com/gpu:0"], (record.gpu_count, record.gpus)
    created = kube_time(pod["metadata"]["creationTimestamp"])
    assert abs((utc(record.started) - bound_at(pod)).total_seconds()) <= 2, (record.started, bound_at(pod))
    assert bound_at(pod) > created  # it did wait...
    assert utc(record.started) >= seen_gated - timedelta(seconds=1)  # ...and the wait seen gated is not billed
    # Kueue admits it once u1's pod is going (its Workload finishes as the pod terminates), which can be a
    # moment before the hub has closed u1's session after the pod is gone: so it is ordered after the stop
    # was asked for (the pod's times are whole seconds), and u1 is closed
    (u1,) = sessions(hub, "u1")
    assert u1.stopped is not None
    assert utc(record.started) >= asked_to_stop - timedelta(seconds=1), (record.started, asked_to_stop)


def test_a_batch_job_in_the_same_local_queue_holds_the_quota_a_notebook_then_waits_for(kube, kube_hub, department):
    dept = department
    ns = dept.namespace
    queue = dept.local_queue("cs231n")
    set_gpu_quota(kube, dept.cluster_queue("cs231n"), borrowing_limit=0)
    r = kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json=gpu_job("train", queue, parallelism=2))
    assert r.status_code == 201, r.text
    wait_for(lambda: gpu_usage(kube, dept.cluster_queue("cs231n")) == (2, 0), timeout=60, what="the Job admitted")
    hub = kube_hub(kueue_config(dept))
    group(hub, "cs231n", "ann")
    assert hub.start_server("ann").status_code in (201, 202)
    events = hub.progress_events("ann", lambda e: "position 1 of 1" in e.get("message", ""), timeout=90)
    assert any(f"Waiting in the {queue} queue (Kueue)" in e["message"] for e in events)
    assert gated(user_pod(kube, ns, "ann"))
    # the Job ends: its quota goes to the notebook
    r = kube.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/train", json={"propagationPolicy": "Foreground"})
    assert r.status_code == 200, r.text
    hub.wait_ready("ann", timeout=240)
    assert gpu_usage(kube, dept.cluster_queue("cs231n"))[0] == 1
    (record,) = sessions(hub, "ann")
    assert abs((utc(record.started) - bound_at(user_pod(kube, ns, "ann"))).total_seconds()) <= 2


def test_a_group_borrows_the_idle_others_quota_and_gives_it_back_when_the_other_asks(kube, kube_hub, department):
    dept = department
    ns = dept.namespace
    cs, thesis = dept.cluster_queue("cs231n"), dept.cluster_queue("thesis")
    # the course uses its own 2 GPUs with batch pods; a notebook of the course then borrows an idle thesis GPU
    add_pause_pods(kube, ns, dept.local_queue("cs231n"), "cs-a", "cs-b")
    hub = kube_hub(kueue_config(dept))
    group(hub, "cs231n", "ann")
    assert hub.start_server("ann").status_code in (201, 202)
    hub.wait_ready("ann", timeout=240)
    assert gpu_usage(kube, cs) == (3, 1)
    ann = user_pod(kube, ns, "ann")
    # the thesis group asks for its own 2 GPUs: one is free on the node, the other is the one the course borrowed
    add_pause_pods(kube, ns, dept.local_queue("thesis"), "th-a")
    kube.create(f"/api/v1/namespaces/{ns}/pods", gpu_pod("th-b", dept.local_queue("thesis")))
    wait_pod(kube, ns, "th-b", timeout=180)
    assert gpu_usage(kube, thesis) == (2, 0)
    assert gpu_usage(kube, cs) == (2, 0)
    # Kueue reclaimed the borrowed GPU from the course's most recent workload, the notebook: its pod is gone
    wait_for(
        lambda: (p := user_pod(kube, ns, "ann")) is None or p["metadata"]["uid"] != ann["metadata"]["uid"],
        timeout=120,
        what="ann's borrowing pod to be evicted",
    )
    hub.wait_stopped("ann", timeout=120)
    (record,) = sessions(hub, "ann")
    assert record.stopped is not None


def test_gated_spawns_a_stop_a_hub_restart_and_a_queue_that_does_not_exist_leave_nothing_behind(
    kube, kube_hub, department
):
    dept = department
    ns = dept.namespace
    queue = dept.local_queue("cs231n")
    set_gpu_quota(kube, dept.cluster_queue("cs231n"), borrowing_limit=0)
    add_pause_pods(kube, ns, queue, "cs-a", "cs-b")  # the course's 2 GPUs are taken
    nowhere = """
c.GPUKubeSpawner.profiles = c.GPUKubeSpawner.profiles + [
    {"slug": "nowhere", "gpu_model": "T4", "gpu_count": 1, "image": c.GPUKubeSpawner.profiles[0]["image"],
     "price_per_gpu_hour": "3.00", "mem_limit": "1G", "kueue_queue": "no-such-queue"},
]
"""
    hub = kube_hub(kueue_config(dept, nowhere))
    group(hub, "cs231n", "ann", "bob")

    # a LocalQueue that does not exist: a clear message, and no pod
    r = hub.start_server("bob", {"profile": "nowhere"})
    if r.status_code == 202:
        events = hub.progress_events("bob", lambda e: e.get("failed"), timeout=60)
        message = events[-1]["message"]
    else:
        message = r.json()["message"]
    assert f"The Kueue queue no-such-queue does not exist in the namespace {ns}; nothing was started." in message
    assert user_pod(kube, ns, "bob") is None and not sessions(hub, "bob")

    # a stop while gated: no pod, no Workload, no session
    assert hub.start_server("ann").status_code in (201, 202)
    hub.progress_events("ann", lambda e: "position 1 of 1" in e.get("message", ""), timeout=90)
    pod = user_pod(kube, ns, "ann")
    assert gated(pod) and workload_of(kube, ns, "Pod", pod["metadata"]["name"]) is not None
    hub.stop_server("ann")
    hub.wait_stopped("ann", timeout=120)
    wait_for(lambda: user_pod(kube, ns, "ann") is None, timeout=60, what="ann's gated pod to go")
    wait_for(
        lambda: workload_of(kube, ns, "Pod", pod["metadata"]["name"]) is None, timeout=60, what="its Workload to go"
    )
    assert not sessions(hub, "ann")

    # a hub stopped while a pod is gated: the restarted hub deletes it before it serves, so that it holds no
    # place in Kueue's queue (and no GPU once admitted); the student starts again
    assert hub.start_server("ann").status_code in (201, 202)
    hub.progress_events("ann", lambda e: "position 1 of 1" in e.get("message", ""), timeout=90)
    pod = user_pod(kube, ns, "ann")
    assert gated(pod)
    hub.stop()
    # the hub's shutdown may have ended the spawn, and with it its pod; if not, the pod waits on
    left = kube.pod(ns, pod["metadata"]["name"])
    assert left is None or gated(left)
    hub.start()
    assert kube.pod(ns, pod["metadata"]["name"]) is None  # gone before the hub served
    wait_for(
        lambda: workload_of(kube, ns, "Pod", pod["metadata"]["name"]) is None, timeout=60, what="its Workload to go"
    )
    assert hub.server("ann") is None and not sessions(hub, "ann")
    assert {p["metadata"]["name"] for p in kube.pods(ns)} == {"cs-a", "cs-b"}
    assert [
        w for w in workloads(kube, ns) if not any(o["name"].startswith("cs-") for o in w["metadata"]["ownerReferences"])
    ] == []
    # nothing holds a place: a GPU of the course frees, and a new spawn gets it at once
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/cs-a")
    assert hub.start_server("ann").status_code in (201, 202)
    hub.wait_ready("ann", timeout=240)
    (record,) = sessions(hub, "ann")
    assert record.stopped is None
