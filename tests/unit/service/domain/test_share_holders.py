"""How many open sessions hold a share of one GPU: from the ledger's unit uuids, never from a server."""

from __future__ import annotations

from datetime import datetime, timezone

from jupyterhub_gpu.gpus.device import share_uuid
from jupyterhub_gpu.ledger.queries.samples import share_holders
from jupyterhub_gpu.session import SessionStart

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def start(ledger, sid: str, *gpus: str) -> None:
    ledger.record_start(SessionStart(sid, f"u-{sid}", "", (), "t4-quarter", gpus, 12_500, "CNY", T0))


def test_open_sessions_on_shares_of_each_gpu_are_counted(ledger):
    start(ledger, "a", share_uuid("GPU-1", 0, 4))
    start(ledger, "b", share_uuid("GPU-1", 1, 4))
    start(ledger, "c", share_uuid("GPU-1", 2, 4))
    start(ledger, "d", share_uuid("GPU-10", 0, 4))  # another GPU whose uuid starts with the first one's
    start(ledger, "e", "GPU-1")  # a whole GPU is no share (the allocator never gives both at once)
    start(ledger, "f", share_uuid("GPU_x%y", 0, 2))  # LIKE's wildcards in a uuid are matched as themselves
    start(ledger, "g", share_uuid("GPU-xzy", 0, 2))
    ledger.record_stop("c", T0.replace(hour=11), "stopped")  # a stopped session holds nothing
    assert share_holders(ledger, ["GPU-1", "GPU-10", "GPU_x%y", "GPU-2"]) == {
        "GPU-1": 2,
        "GPU-10": 1,
        "GPU_x%y": 1,
        "GPU-2": 0,
    }
    assert share_holders(ledger, []) == {}
