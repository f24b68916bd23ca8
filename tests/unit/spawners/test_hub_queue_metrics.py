"""The hub's queue metrics (/hub/metrics): read from a real allocator's queue, in the default registry."""

from __future__ import annotations

import asyncio
import gc

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.protocol import QueueCancelled, QueueTimeout

MODEL = "RTX6000"  # a model no other unit test asks for, so other allocators in this process add nothing


def samples() -> dict:
    """Every sample of the default registry as JupyterHub's /hub/metrics exposes it: {(name, labels): value}."""
    found = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def value(name: str, **labels) -> float | None:
    return samples().get((name, tuple(sorted(labels.items()))))


def wait_count(outcome: str) -> float:
    return value("jupyterhub_gpu_queue_wait_seconds_count", model=MODEL, outcome=outcome) or 0.0


async def test_queue_length_oldest_wait_and_time_limit_by_model():
    gc.collect()
    alloc = GPUAllocator(simulated_inventory([{"model": MODEL, "count": 1, "memory_gb": 48}]))
    assert value("jupyterhub_gpu_queue_length", model=MODEL) is None  # never asked for: not shown
    await alloc.acquire("a/", MODEL, 1)
    assert value("jupyterhub_gpu_queue_length", model=MODEL) == 0  # asked for once: 0 while none waits
    assert value("jupyterhub_gpu_queue_oldest_wait_seconds", model=MODEL) == 0
    assert value("jupyterhub_gpu_queue_timeout_seconds", model=MODEL) is None
    for outcome in ("granted", "timeout", "cancelled"):  # from the first request on, so a first one is an increase
        assert value("jupyterhub_gpu_queue_wait_seconds_count", model=MODEL, outcome=outcome) is not None
    granted_before = wait_count("granted")

    b = asyncio.create_task(alloc.acquire("b/", MODEL, 1, timeout=600))
    await asyncio.sleep(0.3)
    c = asyncio.create_task(alloc.acquire("c/", MODEL, 1, timeout=900))
    await asyncio.sleep(0)
    assert value("jupyterhub_gpu_queue_length", model=MODEL) == 2
    assert 0.3 <= value("jupyterhub_gpu_queue_oldest_wait_seconds", model=MODEL) < 30
    assert value("jupyterhub_gpu_queue_timeout_seconds", model=MODEL) == 600  # the oldest waiter's limit

    alloc.release("a/")
    await b
    assert wait_count("granted") == granted_before + 1
    assert value("jupyterhub_gpu_queue_length", model=MODEL) == 1
    alloc.cancel("c/")
    try:
        await c
    except QueueCancelled:
        pass
    assert wait_count("cancelled") >= 1
    assert value("jupyterhub_gpu_queue_length", model=MODEL) == 0
    alloc.release("b/")


async def test_a_timed_out_wait_is_observed_with_its_length():
    gc.collect()
    alloc = GPUAllocator(simulated_inventory([{"model": MODEL, "count": 1, "memory_gb": 48}]))
    await alloc.acquire("a/", MODEL, 1)
    before = wait_count("timeout")
    sum_before = value("jupyterhub_gpu_queue_wait_seconds_sum", model=MODEL, outcome="timeout") or 0.0
    try:
        await alloc.acquire("late/", MODEL, 1, timeout=0.2)
    except QueueTimeout:
        pass
    else:
        raise AssertionError("the wait should have timed out")
    assert wait_count("timeout") == before + 1
    waited = value("jupyterhub_gpu_queue_wait_seconds_sum", model=MODEL, outcome="timeout") - sum_before
    assert 0.2 <= waited < 5
    # the histogram's buckets are cumulative: a 0.2 s wait is under 1 s
    assert value("jupyterhub_gpu_queue_wait_seconds_bucket", model=MODEL, outcome="timeout", le="1.0") >= before + 1
    alloc.release("a/")
