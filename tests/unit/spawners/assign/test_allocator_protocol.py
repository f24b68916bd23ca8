"""Both allocators implement the Allocator protocol the spawner mixin uses, with the same signatures."""

from __future__ import annotations

import inspect

import pytest

from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.spawners.assign.cluster import ClusterAllocator, ClusterInventory
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.protocol import Allocator

ALLOCATORS = [GPUAllocator, ClusterAllocator]
#: the protocol's methods (its one data member, ``devices``, is checked on instances)
METHODS = sorted(
    name for name, value in vars(Allocator).items() if inspect.isfunction(value) and not name.startswith("_")
)


async def no_cluster():
    return [], []


def instances():
    return [
        GPUAllocator(simulated_inventory([{"model": "T4", "count": 1, "memory_gb": 16}])),
        ClusterAllocator(ClusterInventory(no_cluster)),
    ]


def test_the_protocol_names_what_the_mixin_calls():
    assert METHODS == [
        "acquire", "cancel", "counts", "matching", "park", "position", "release", "restore", "simulated", "waiting",
    ]  # fmt: skip


@pytest.mark.parametrize("cls", ALLOCATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", METHODS)
def test_each_allocator_implements_each_method_with_the_protocol_signature(cls, name):
    implementation = getattr(cls, name)
    assert implementation is not getattr(Allocator, name), f"{cls.__name__}.{name} is only the protocol's stub"
    assert inspect.iscoroutinefunction(implementation) == inspect.iscoroutinefunction(getattr(Allocator, name))
    wanted = inspect.signature(getattr(Allocator, name))
    got = inspect.signature(implementation)
    assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == [
        (p.name, p.kind, p.default) for p in wanted.parameters.values()
    ]


async def test_instances_satisfy_the_runtime_checkable_protocol():
    for allocator in instances():
        assert isinstance(allocator, Allocator)
        assert isinstance(allocator.devices, list)


def test_an_object_missing_a_method_is_not_an_allocator():
    class Partial:
        devices: list = []

        def matching(self, model):
            return []

    assert not isinstance(Partial(), Allocator)
