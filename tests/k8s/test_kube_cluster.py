"""GPUKubeSpawner on a real cluster: the API server accepts our pods, the scheduler binds them to the GPU node,
the kubelet's device manager hands each its simulated GPU, and the hub, the queue and the ledger follow.

Everything is read back from the cluster (the API server, the kubelet's device checkpoint), never from our
builders. The GPUs are simulated by scripts/k8s-setup.sh's device plugin and labelled so everywhere.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests

from jupyterhub_gpu.gpus.standin import StandIn
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.spawners.kube.pods import kube_time
from tests.conftest import wait_for
from tests.k8s.conftest import K8S_NVML_ROOT, NODE, pod_devices, running, token, wait_pod

pytestmark = pytest.mark.k8s

#: an admin's extras that try to weaken the pod: each must be gone from the pod the API server holds
WEAKENING = """
c.GPUKubeSpawner.extra_pod_config = {"hostPID": True, "hostIPC": True, "shareProcessNamespace": True,
                                     "automountServiceAccountToken": True}
c.GPUKubeSpawner.extra_container_config = {
    "securityContext": {"privileged": True, "runAsUser": 0, "allowPrivilegeEscalation": True,
                        "capabilities": {"add": ["SYS_ADMIN"]}},
}
"""


def pod_of(hub, kube, user: str) -> dict:
    name = hub.server(user)["state"]["pod_name"]
    return kube.pod(hub.namespace, name)


def ledger_sessions(hub, user: str) -> list:
    return sorted(Ledger(f"sqlite:///{hub.ledger_path}").sessions(user=user), key=lambda s: s.started)


def utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def test_a_spawn_is_a_real_pod_on_the_gpu_node_with_the_device_the_kubelet_chose(kube, kube_hub):
    hub = kube_hub(WEAKENING)
    hub.create_users("alice")
    assert hub.start_server("alice").status_code in (201, 202)
    hub.wait_ready("alice", timeout=180)
    pod = pod_of(hub, kube, "alice")
    spec, status = pod["spec"], pod["status"]

    # accepted by the API server as our builders promise, and bound by the scheduler to the GPU node
    assert spec["nodeName"] == NODE
    (notebook,) = [c for c in spec["containers"] if c["name"] == "notebook"]
    assert notebook["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert notebook["resources"]["requests"]["nvidia.com/gpu"] == "1"
    products = spec.get("nodeSelector", {}).get("nvidia.com/gpu.product") or [
        v
        for term in spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        for e in term["matchExpressions"]
        for v in e["values"]
    ]
    assert "Simulated-T4" in products
    assert any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NoSchedule" for t in spec["tolerations"])

    # the admin's weakening extras are gone from the real pod
    for field in ("hostPID", "hostIPC", "shareProcessNamespace"):
        assert not spec.get(field), field
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsUser"] == 1000 and spec["securityContext"]["runAsNonRoot"] is True
    sc = notebook["securityContext"]
    assert sc["runAsUser"] == 1000 and not sc.get("privileged") and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not any(v.get("hostPath") for v in spec.get("volumes", []))

    # the kubelet's device manager gave it one GPU of the node's stand-in driver, and the server names exactly
    # that one, read with NVML in the pod (the plugin mounted the driver and that GPU's device node only)
    devices = wait_for(lambda: pod_devices(pod["metadata"]["uid"]), timeout=10, what="the device checkpoint")
    standin = StandIn(root=K8S_NVML_ROOT)
    assert len(devices) == 1 and devices[0] in set(standin.uuids_in_state())
    headers = token(hub, "alice")
    stats = requests.get(f"{hub.url}/user/alice/gpu/api/v1/stats?history=0", headers=headers, timeout=15).json()
    assert stats["simulated"] is True
    assert [g["uuid"] for g in stats["gpus"]] == devices
    assert stats["gpus"][0]["name"] == "Simulated T4" and stats["reason"] is None
    assert stats["gpus"][0]["memory_total_mib"] == 15360  # as the driver reports it
    # JupyterLab opens through the hub's proxy
    lab = requests.get(f"{hub.url}/user/alice/lab", headers=headers, timeout=30)
    assert lab.status_code == 200 and "JupyterLab" in lab.text

    # billing starts when the scheduler bound the pod, not when it was requested
    (record,) = ledger_sessions(hub, "alice")
    session_id, started, stopped = record.id, record.started, record.stopped
    assert record.simulated
    bound = next(c for c in status["conditions"] if c["type"] == "PodScheduled")["lastTransitionTime"]
    created = pod["metadata"]["creationTimestamp"]
    assert stopped is None
    assert abs((utc(started) - kube_time(bound)).total_seconds()) <= 2, (started, bound, created)
    assert hub.gpu_state("alice")["session_id"] == session_id


def test_five_spawns_over_four_gpus_queue_in_the_hub_and_a_stop_starts_the_next(kube, kube_hub):
    hub = kube_hub()
    users = ["u1", "u2", "u3", "u4", "u5"]
    hub.create_users(*users)
    for u in users[:4]:
        assert hub.start_server(u).status_code in (201, 202)
    for u in users[:4]:
        hub.wait_ready(u, timeout=240)
    # the fifth waits in the hub's queue, with its position; no pod of it is left Pending on the cluster
    assert hub.start_server("u5").status_code in (201, 202)
    events = hub.progress_events("u5", lambda e: "position 1 of 1" in e.get("message", ""), timeout=60)
    assert any("Waiting" in e["message"] for e in events)
    assert not [p for p in kube.pods(hub.namespace) if p["status"].get("phase") == "Pending"]
    assert len(kube.pods(hub.namespace)) == 4

    pods = {u: pod_of(hub, kube, u) for u in users[:4]}
    assert all(running(p) for p in pods.values())
    chosen = {u: tuple(pod_devices(p["metadata"]["uid"])) for u, p in pods.items()}
    assert all(len(d) == 1 for d in chosen.values()), chosen
    assert len(set(chosen.values())) == 4  # four distinct devices
    time.sleep(3)
    assert hub.server("u5") is not None and not hub.server("u5")["ready"]

    # stopping one frees its GPU: the waiting request's pod starts on it
    freed = chosen["u2"]
    hub.stop_server("u2")
    hub.wait_stopped("u2", timeout=90)
    hub.wait_ready("u5", timeout=180)
    p5 = wait_pod(kube, hub.namespace, hub.server("u5")["state"]["pod_name"])
    assert tuple(pod_devices(p5["metadata"]["uid"])) == freed
    # the stopped session's bill ended at its stop
    (record,) = ledger_sessions(hub, "u2")
    assert record.stopped is not None and record.stop_reason == "stopped"


#: the gpu service culls a GPU idle for 2 minutes (warned after 1); the servers push samples every 2 s
CULL = """
c.GPUService.cull_rules = {"default": [{"kind": "gpu_idle", "minutes": 2, "warn_minutes": 1, "util_threshold": 5}]}
"""
FAST_SAMPLES = """
c.Spawner.args = ["--GPUStats.push_interval=2", "--GPUStats.interval=0.5"]
"""


@pytest.mark.timeout(900)  # the idle pod's 2 minutes run beside the rest; a hub restart and 4 pod starts
def test_storage_restart_culling_and_budget_on_real_pods(kube, kube_hub):
    from decimal import Decimal

    from jupyterhub_gpu.billing import BudgetRule

    hub = kube_hub(FAST_SAMPLES, service_extra=CULL)
    ledger = Ledger(f"sqlite:///{hub.ledger_path}")
    hub.create_users("bob", "idle", "poor")
    # the idle one starts first: its 2 idle minutes run while the rest of the test goes on
    assert hub.start_server("idle").status_code in (201, 202)
    assert hub.start_server("bob").status_code in (201, 202)
    hub.wait_ready("idle", timeout=180)
    hub.wait_ready("bob", timeout=180)
    idle_pod = pod_of(hub, kube, "idle")
    # when the idle pod goes, seen as it happens (the cull may come during any of the steps below)
    gone: list[datetime] = []

    def watch_idle_pod():
        while not gone:
            if kube.pod(hub.namespace, idle_pod["metadata"]["name"]) is None:
                gone.append(datetime.now(timezone.utc))
            time.sleep(1)

    watcher = threading.Thread(target=watch_idle_pod, daemon=True)
    watcher.start()

    # the user's PVC binds to a volume of the cluster, and a file written in one session is there in the next
    headers = token(hub, "bob")
    (claim,) = [
        c
        for c in kube.get(f"/api/v1/namespaces/{hub.namespace}/persistentvolumeclaims")["items"]
        if "bob" in c["metadata"]["name"]
    ]
    claim = wait_for(
        lambda: (c := kube.pvc(hub.namespace, claim["metadata"]["name"]))["status"]["phase"] == "Bound" and c,
        timeout=30,
        what="bob's claim bound",
    )
    assert claim["spec"]["storageClassName"] == "jhgpu-local" and claim["spec"]["volumeName"].startswith("jhgpu-pv-")
    r = requests.put(
        f"{hub.url}/user/bob/api/contents/work/kept.txt",
        headers=headers,
        json={"type": "file", "format": "text", "content": "written in session 1"},
        timeout=30,
    )
    assert r.status_code in (200, 201), r.text

    # a hub restart with cleanup_servers = False keeps the pods, the assignments and the billing
    before = {u: (hub.server(u)["state"]["pod_name"], hub.gpu_state(u)["session_id"]) for u in ("bob", "idle")}
    uids = {u: pod_of(hub, kube, u)["metadata"]["uid"] for u in ("bob", "idle")}
    hub.stop()
    assert all(running(kube.pod(hub.namespace, name)) for name, _ in before.values())
    hub.start()
    for u, (name, session_id) in before.items():
        assert hub.server(u)["ready"], u
        assert (hub.server(u)["state"]["pod_name"], hub.gpu_state(u)["session_id"]) == (name, session_id)
        assert pod_of(hub, kube, u)["metadata"]["uid"] == uids[u]
        (record,) = ledger_sessions(hub, u)
        assert record.id == session_id and record.stopped is None

    hub.stop_server("bob")
    hub.wait_stopped("bob", timeout=90)
    assert kube.pvc(hub.namespace, claim["metadata"]["name"])["status"]["phase"] == "Bound"  # kept
    assert hub.start_server("bob").status_code in (201, 202)
    hub.wait_ready("bob", timeout=180)
    headers = token(hub, "bob")
    r = requests.get(f"{hub.url}/user/bob/api/contents/work/kept.txt", headers=headers, timeout=30)
    assert r.status_code == 200 and r.json()["content"] == "written in session 1"
    assert len(ledger_sessions(hub, "bob")) == 2

    # a budget stop on a pod: exactly the first minute of a T4 (CNY 0.05) is the whole budget
    ledger.set_budget(BudgetRule("user", "poor", "week", "money", Decimal("0.05")), datetime.now(timezone.utc))
    assert hub.start_server("poor").status_code in (201, 202)
    wait_for(lambda: ledger.sessions(user="poor"), 180, what="poor's session in the ledger")
    hub.wait_stopped("poor", timeout=180)
    (record,) = ledger_sessions(hub, "poor")
    assert record.stop_reason == "budget" and record.minutes == 1
    wait_for(lambda: not [p for p in kube.pods(hub.namespace) if "poor" in p["metadata"]["name"]], 60, what="gone")

    # the idle pod is warned, then culled: pod deleted, the ledger's reason, the bill ending at the deletion
    hub.wait_stopped("idle", timeout=240)
    watcher.join(timeout=60)
    (gone_at,) = gone
    (record,) = ledger_sessions(hub, "idle")
    assert record.stop_reason == "gpu_idle"
    assert [n for n in ledger.notices("idle") if n.kind == "cull"]  # warned first
    assert abs((gone_at - utc(record.stopped)).total_seconds()) < 20
    # every started minute, to the microsecond: 120.3 s are 3 minutes (the int() this had dropped the 0.3 s)
    assert record.minutes == -(-(utc(record.stopped) - utc(record.started)) // timedelta(minutes=1))


#: the API server failing a stop, injected at the backend while a marker file exists (everything else is real)
STOP_FAILS = """
import pathlib
from kubespawner import KubeSpawner

_STOP_FAILS = pathlib.Path({marker!r})
_stop = KubeSpawner.stop


async def _failing_stop(self, now=False):
    if _STOP_FAILS.exists():
        raise RuntimeError("injected: the API server did not answer the stop")
    return await _stop(self, now=now)


KubeSpawner.stop = _failing_stop
"""


def test_a_pod_whose_stop_fails_is_deleted_by_its_session_and_uid(kube, kube_hub, tmp_path):
    """JupyterHub forgets a server whose stop raised; the pod would run on, unbilled, holding its GPU. The
    spawner deletes it at once by its session label, with its uid as the precondition, so that a new start of
    the same server (a pod of the same name) is never deleted in its place."""
    marker = tmp_path / "stop-fails"
    hub = kube_hub(STOP_FAILS.format(marker=str(marker)))
    hub.create_users("ann")
    assert hub.start_server("ann").status_code in (201, 202)
    hub.wait_ready("ann", timeout=180)
    pod = pod_of(hub, kube, "ann")
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    marker.touch()
    try:
        hub.stop_server("ann")
        hub.wait_stopped("ann", timeout=120)
        wait_for(
            lambda: (p := kube.pod(hub.namespace, name)) is None or p["metadata"]["uid"] != uid,
            60,
            what="the pod deleted",
        )
    finally:
        marker.unlink()
    assert f"deleting pod {name} of session" in hub.log_text()
    (record,) = ledger_sessions(hub, "ann")
    assert record.stopped is not None and record.stop_reason == "stopped"
    # the same server again: a new pod of the same name, which nothing deletes
    assert hub.start_server("ann").status_code in (201, 202)
    hub.wait_ready("ann", timeout=180)
    again = pod_of(hub, kube, "ann")
    assert again["metadata"]["name"] == name and again["metadata"]["uid"] != uid
    time.sleep(3)
    assert (
        running(kube.pod(hub.namespace, name))
        and kube.pod(hub.namespace, name)["metadata"]["uid"] == again["metadata"]["uid"]
    )
