"""The pages' Kueue section: a group's ClusterQueue with its quota, its notebooks and its batch Jobs together.

The page handlers are the real ones (the harness of test_schedule_pages.py); the reader is the real
:class:`KueueStatus` with the real Kubernetes client, over a kubeconfig pointing at a stand-in API server on
loopback that answers Kueue's list calls with objects as Kueue v0.17 writes them (a ClusterQueue using its
2 GPUs: a notebook's pod and a training Job; a third workload waiting). tests/k8s/test_kueue_doctor.py reads
the real Kueue. A cluster that cannot be read leaves the page as it is, with a note.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyterhub_gpu.service.feeds.kueue import (
    NOTEBOOK_PODS,
    KueueReadError,
    KueueStatus,
    get_json,
    kueue_api_client,
    notebook_pods,
    queue_usage,
)
from tests.unit.service.web import test_schedule_pages as harness
from tests.unit.service.web.test_schedule_pages import ALICE, PROF, call, section, shown

API = "/apis/kueue.x-k8s.io/v1beta2"
ledger, ctx = harness.ledger, harness.ctx  # the pages harness's fixtures: a real ledger, the web context


def cluster_queue(name, nominal="2", used="2", borrowed="0"):
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": "department",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
                    "flavors": [
                        {
                            "name": "sim-gpu",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": nominal, "borrowingLimit": "2"},
                                {"name": "cpu", "nominalQuota": "32"},
                                {"name": "memory", "nominalQuota": "128Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
        "status": {
            "conditions": [{"type": "Active", "status": "True", "reason": "Ready"}],
            "flavorsUsage": [
                {"name": "sim-gpu", "resources": [{"name": "nvidia.com/gpu", "total": used, "borrowed": borrowed}]}
            ],
        },
    }


def workload(name, ns, queue, owner_kind, owner, gpus, admitted_to=None, message=""):
    conditions = []
    if admitted_to:
        conditions += [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
    else:
        conditions.append({"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message})
    return {
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [{"kind": owner_kind, "name": owner}]},
        "spec": {
            "queueName": queue,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "notebook"},
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "resources": {
                                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "500m", "memory": "2Gi"}
                                    },
                                }
                            ]
                        },
                    },
                }
            ],
        },
        "status": {"conditions": conditions, **({"admission": {"clusterQueue": admitted_to}} if admitted_to else {})},
    }


def user_pod(name, user, ns="jhub"):
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"component": "singleuser-server", "hub.jupyter.org/username": user},
        }
    }


OBJECTS = {
    f"{API}/clusterqueues": {"items": [cluster_queue("cs231n"), cluster_queue("thesis", used="0")]},
    f"{API}/localqueues": {
        "items": [
            {"metadata": {"name": "cs231n", "namespace": "jhub"}, "spec": {"clusterQueue": "cs231n"}},
            {"metadata": {"name": "cs231n", "namespace": "training"}, "spec": {"clusterQueue": "cs231n"}},
            {"metadata": {"name": "thesis", "namespace": "jhub"}, "spec": {"clusterQueue": "thesis"}},
        ]
    },
    f"{API}/workloads": {
        "items": [
            workload("pod-jupyter-alice-1", "jhub", "cs231n", "Pod", "jupyter-alice", 1, "cs231n"),
            workload("job-resnet-7", "training", "cs231n", "Job", "resnet", 1, "cs231n"),
            workload(
                "pod-jupyter-bob-2",
                "jhub",
                "cs231n",
                "Pod",
                "jupyter-bob",
                1,
                message="couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu",
            ),
            workload("job-other-1", "other", "thesis", "Job", "other", 4, "thesis"),
            workload("pod-stray-1", "jhub", "cs231n", "Pod", "stray", 1, "cs231n"),  # a pod that is no server
        ]
    },
    "/api/v1/pods": {"items": [user_pod("jupyter-alice", "alice"), user_pod("jupyter-bob", "bob")]},
}


class StandInAPI(BaseHTTPRequestHandler):
    requests: list[str] = []

    def do_GET(self):
        StandInAPI.requests.append(self.path)
        path, _, query = self.path.partition("?")
        body = OBJECTS.get(path)
        if path == "/api/v1/pods" and query != "labelSelector=component%3Dsingleuser-server":
            body = None  # only the user servers' pods are asked for
        if path == "/forbidden":
            self.answer(403, {"kind": "Status", "message": 'clusterqueues is forbidden: User "hub" cannot list'})
            return
        if body is None:
            self.answer(404, {"kind": "Status", "reason": "NotFound"})
            return
        self.answer(200, body)

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def kubeconfig(path, port: int) -> str:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return str(path)


@pytest.fixture
def api_server():
    StandInAPI.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def kueue_ctx(ctx, tmp_path, api_server, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    status = KueueStatus({"cs231n": "cs231n", "thesis": "thesis"}, kubeconfig(tmp_path / "kubeconfig", api_server))
    return dataclasses.replace(ctx, kueue=status)


def test_the_group_page_shows_its_cluster_queues_notebooks_and_jobs_with_the_quota(kueue_ctx):
    page = call(kueue_ctx, PROF, "GET", "/services/gpu/groups/cs231n")
    assert page.code == 200
    part = shown(section(page.text, "kueue"))
    assert 'data-cluster-queue="cs231n"' in part and 'data-cluster-queue="thesis"' not in part
    assert "<td>sim-gpu</td><td>nvidia.com/gpu</td><td>2</td><td>2</td><td>0</td><td>2</td>" in part
    assert (
        "<td>notebook</td><td>alice</td><td>jhub/pod-jupyter-alice-1</td><td>cs231n</td><td>admitted</td><td>1</td>"
        in part
    )
    assert (
        "<td>batch Job</td><td>resnet</td><td>training/job-resnet-7</td><td>cs231n</td><td>admitted</td><td>1</td>"
        in part
    )
    assert "<td>notebook</td><td>bob</td><td>jhub/pod-jupyter-bob-2</td><td>cs231n</td><td>waiting</td>" in part
    assert "insufficient unused quota for nvidia.com/gpu" in part
    assert "<td>pod</td><td>stray</td><td>jhub/pod-stray-1</td>" in part  # a plain pod is not a notebook
    assert "Notebooks: 2" in part and "Batch jobs: 1" in part


def test_the_section_is_in_the_readers_language(kueue_ctx):
    page = call(kueue_ctx, PROF, "GET", "/services/gpu/groups/cs231n?lang=zh-CN")
    part = shown(section(page.text, "kueue"))
    assert "Kueue：笔记本与批处理作业共用一份配额" in part
    assert "<td>笔记本</td>" in part and "<td>批处理作业</td>" in part and "<td>已准入</td>" in part


def test_pages_read_the_cluster_once_per_cache_period(kueue_ctx):
    for _ in range(3):
        assert call(kueue_ctx, PROF, "GET", "/services/gpu/groups/cs231n").code == 200
    assert kueue_ctx.kueue.reads == 1
    assert sorted(StandInAPI.requests) == sorted(
        [*(f"{API}/{p}" for p in ("clusterqueues", "workloads", "localqueues")), NOTEBOOK_PODS]
    )


def test_a_cluster_that_cannot_be_read_is_a_note_and_the_page_is_as_always(ctx, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    status = KueueStatus({"cs231n": "cs231n"}, kubeconfig(tmp_path / "kubeconfig", closed), timeout=2)
    page = call(dataclasses.replace(ctx, kueue=status), PROF, "GET", "/services/gpu/groups/cs231n")
    assert page.code == 200
    note = shown(section(page.text, "kueue"))
    assert "Kueue's queues could not be read from the cluster" in note and "Cannot connect" in note
    assert 'id="sessions"' in page.text  # the rest of the page is there


def test_a_group_without_a_cluster_queue_has_no_section_and_costs_no_read(kueue_ctx):
    page = call(kueue_ctx, PROF, "GET", "/services/gpu/groups/ml101")
    assert page.code in (200, 403)
    assert 'id="kueue"' not in page.text
    assert kueue_ctx.kueue.reads == 0


def test_a_student_gets_the_403_before_the_cluster_is_read(kueue_ctx):
    assert call(kueue_ctx, ALICE, "GET", "/services/gpu/groups/cs231n").code == 403
    assert kueue_ctx.kueue.reads == 0


def test_a_configured_cluster_queue_missing_from_the_cluster_is_said(ctx, tmp_path, api_server, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    status = KueueStatus({"cs231n": "cs231n-gone"}, kubeconfig(tmp_path / "kubeconfig", api_server))
    part = shown(
        section(call(dataclasses.replace(ctx, kueue=status), PROF, "GET", "/services/gpu/groups/cs231n").text, "kueue")
    )
    assert "The ClusterQueue cs231n-gone of group cs231n does not exist in the cluster." in part


def test_usage_counts_a_jobs_pods_and_only_the_queues_workloads():
    usage = queue_usage(
        cluster_queue("cs231n"),
        [*OBJECTS[f"{API}/workloads"]["items"]],
        OBJECTS[f"{API}/localqueues"]["items"],
        notebook_pods(OBJECTS["/api/v1/pods"]["items"]),
    )
    assert [(w.kind, w.owner, w.state) for w in usage.workloads] == [
        ("job", "resnet", "admitted"),
        ("notebook", "alice", "admitted"),
        ("pod", "stray", "admitted"),
        ("notebook", "bob", "pending"),
    ]
    (quota,) = [q for q in usage.quotas if q.resource == "nvidia.com/gpu"]
    assert [w.gpus for w in usage.workloads] == [1, 1, 1, 1]  # GPUs only: not its cpu and memory
    assert (quota.nominal, quota.used, quota.borrowed, quota.borrowing_limit) == (2, 2, 0, 2)


def test_get_json_answers_none_for_a_404_and_says_a_refusal(tmp_path, api_server, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    async def go():
        async with await kueue_api_client(kubeconfig(tmp_path / "kubeconfig", api_server)) as api:
            found = await get_json(api, f"{API}/clusterqueues")
            missing = await get_json(api, f"{API}/namespaces/jhub/localqueues/nope")
            with pytest.raises(KueueReadError) as refused:
                await get_json(api, "/forbidden")
            return found, missing, str(refused.value)

    found, missing, refused = asyncio.run(go())
    assert [q["metadata"]["name"] for q in found["items"]] == ["cs231n", "thesis"]
    assert missing is None
    assert refused == 'GET /forbidden: 403 clusterqueues is forbidden: User "hub" cannot list'
