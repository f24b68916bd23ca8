"""The pure core's shared concepts, each in one place: env names, stop reasons, the idle threshold, a session start."""

from __future__ import annotations

import ast
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from jupyterhub_gpu import env
from jupyterhub_gpu.billing import minutes_in_window
from jupyterhub_gpu.gpus.names import mig_request, tokens, words
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.rules.cullrules import DEFAULT_RULES, KINDS, CullRule
from jupyterhub_gpu.rules.idle import IDLE, IDLE_UTIL_PERCENT
from jupyterhub_gpu.session import CULL_REASONS, SessionStart, StopReason

PACKAGE = Path(__file__).resolve().parents[2] / "jupyterhub_gpu"


def test_only_env_names_a_jupyterhub_gpu_variable():
    """A string that is exactly a ``JUPYTERHUB_GPU_*`` name appears in no module but env.py (prose may mention one)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "env.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
                text = node.value.decode() if isinstance(node.value, bytes) else node.value
                if text.startswith("JUPYTERHUB_GPU_") and text.replace("_", "").isalnum():
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {text}")
    assert found == []
    assert all(name.startswith(env.PREFIX) for name in env.NAMES) and len(set(env.NAMES)) == len(env.NAMES)


def test_stop_reasons_are_the_ledgers_strings():
    assert [r.value for r in StopReason] == [
        "stopped",
        "exited",
        "budget",
        "gpu_idle",
        "inactive",
        "max_age",
        "busy_gpu_idle",
        "reconciled",
        "orphaned",
        "job_finished",
        "job_time_limit",
        "job_cancelled",
        "stop_when_done",
        "plateau",
        "preempted",
        "reserved",
    ]
    reason = StopReason.GPU_IDLE
    assert reason == "gpu_idle" and f"{reason}" == str(reason) == "gpu_idle" and json.dumps(reason) == '"gpu_idle"'
    assert {"gpu_idle": 1}[reason] == 1
    assert KINDS == CULL_REASONS == ("gpu_idle", "inactive", "max_age", "busy_gpu_idle")


def test_the_idle_threshold_is_one_number():
    assert IDLE_UTIL_PERCENT == 5 and IDLE.util_percent == 5 and CullRule("gpu_idle", 30, 5).util_threshold == 5.0
    assert [r.util_threshold for r in DEFAULT_RULES if r.kind != StopReason.MAX_AGE] == [5.0, 5.0, 5.0]


def test_a_session_start_from_the_spawner_state():
    gpu = {
        "session_id": "s1",
        "profile": "t4",
        "devices": ["GPU-1"],
        "rate_per_minute": "0.05",
        "currency": "CNY",
        "started": "2026-11-29T10:00:00Z",
        "groups": ["cs231n"],
        "pool": "cs231n",
        "simulated": True,
    }
    start = SessionStart.from_spawner_state("alice", "lab", ["other"], gpu)
    assert start == SessionStart(
        id="s1",
        user="alice",
        server_name="lab",
        groups=("cs231n",),
        profile="t4",
        gpus=("GPU-1",),
        rate_micros=50_000,
        currency="CNY",
        started=datetime(2026, 11, 29, 10, 0, tzinfo=timezone.utc),
        simulated=True,
        pool="cs231n",
    )
    # the state's own groups win; without them, the groups given
    without = {k: v for k, v in gpu.items() if k not in ("groups", "pool", "simulated")}
    assert SessionStart.from_spawner_state("bob", "", ["x", "a"], without).pool_name() == "a"


def test_minutes_in_window_with_open_bounds():
    t0 = datetime(2026, 11, 2, 9, 0, 30, tzinfo=timezone.utc)
    at = lambda m: datetime(2026, 11, 2, 9, m, 30, tzinfo=timezone.utc)  # noqa: E731
    assert minutes_in_window(t0, 10, None, None) == 10
    assert minutes_in_window(t0, 10, None, at(3)) == 3
    assert minutes_in_window(t0, 10, at(3), None) == 7
    assert minutes_in_window(t0, 10, at(5), at(3)) == 0  # an empty window, never negative
    assert minutes_in_window(t0, 0, None, None) == 0


def test_gpu_names_have_one_tokenizer():
    assert words("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == ["NVIDIA", "A100", "SXM4", "40GB", "MIG", "1g.5gb"]
    assert tokens("NVIDIA A100-SXM4-40GB") == ["nvidia", "a100", "sxm4", "40gb"]
    assert mig_request("A100") == (None, "A100")
    assert mig_request("A100 MIG 1G.10GB") == ("1g.10gb", "A100")
    assert mig_request("MIG") == (None, "MIG")


def test_the_kubernetes_environment_changes_only_the_device_variables():
    base = env.make_gpu_env(
        SessionStart(
            id="s",
            user="",
            server_name="",
            groups=(),
            profile="t4",
            gpus=tuple([]),
            visible_gpus=tuple([]),
            rate_micros=to_micros(Decimal("0.05")),
            currency="CNY",
            started=datetime(2026, 11, 29, tzinfo=timezone.utc),
            simulated=False,
        )
    )
    assert env.nvml_discovery_env(0, "") == {env.COUNT: "0"}
    found = env.nvml_discovery_env(2, "nvidia.com/gpu")
    assert found[env.DEVICE_DISCOVERY] == "nvml" and found[env.COUNT] == "2" and set(found) <= set(env.NAMES)
    assert set(base) - {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} <= set(env.NAMES)
