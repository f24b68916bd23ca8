"""The budget at Kueue's admission, on the test cluster: a spawn that passed the budget check waits gated while the
budget is spent elsewhere; when Kueue admits its pod the budget is checked again, the pod is deleted and the spawn
fails with the budget's message, and nothing is billed.

A real hub in Kueue mode, the real gpu service and Kueue v0.17 with the example department (tests/k8s/kueue.py);
the budget and the spending are the ledger's own rows (the hub's sqlite ledger).
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart, StopReason
from tests.conftest import wait_for
from tests.k8s.kueue import gated, set_gpu_quota
from tests.k8s.test_kueue_spawn import add_pause_pods, group, kueue_config, sessions, user_pod

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(600)]


def test_a_budget_spent_while_gated_is_refused_at_kueues_admission_and_nothing_is_billed(kube, kube_hub, department):
    dept = department
    ns = dept.namespace
    queue = dept.local_queue("cs231n")
    set_gpu_quota(kube, dept.cluster_queue("cs231n"), borrowing_limit=0)
    add_pause_pods(kube, ns, queue, "cs-a", "cs-b")  # the course's 2 GPUs are taken
    hub = kube_hub(kueue_config(dept))
    group(hub, "cs231n", "ann")
    ledger = Ledger(f"sqlite:///{hub.ledger_path}")
    # 1.00 a month: the first 10 minutes of a T4 (0.50) are paid for
    ledger.set_budget(BudgetRule("user", "ann", "month", "money", Decimal("1.00")), utcnow())

    assert hub.start_server("ann").status_code in (201, 202)
    hub.progress_events("ann", lambda e: "position 1 of 1" in e.get("message", ""), timeout=90)
    pod = user_pod(kube, ns, "ann")
    assert gated(pod)
    # meanwhile ann's other server ran 30 minutes of a T4 (1.50)
    now = utcnow()
    other = SessionStart(
        "elsewhere-1", "ann", "other", ("cs231n",), "t4", ("GPU-0",), 50_000, "CNY", now - timedelta(minutes=30)
    )
    ledger.record_start(other)
    ledger.record_stop("elsewhere-1", now, StopReason.STOPPED)

    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/cs-a")  # a GPU of the course frees: Kueue admits ann's
    events = hub.progress_events("ann", lambda e: e.get("failed") or e.get("ready"), timeout=180)
    assert events[-1].get("failed") and "Budget used up" in events[-1]["message"], events[-1]
    wait_for(lambda: user_pod(kube, ns, "ann") is None, timeout=90, what="ann's admitted pod to be deleted")
    assert [s.id for s in sessions(hub, "ann")] == ["elsewhere-1"]  # nothing billed for the refused start
    wait_for(lambda: hub.server("ann") is None, timeout=60, what="ann's server to be gone from the hub")
