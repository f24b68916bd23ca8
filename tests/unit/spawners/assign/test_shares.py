"""Shared GPUs on a host: time-sliced shares and MIG instances, on a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.gpus.device import parse_share_uuid, share_uuid
from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, AssignmentConflict, QueueCancelled, QueueTimeout


def make_allocator(t4: int = 2, mig: list[str] | None = None) -> GPUAllocator:
    spec = [{"model": "T4", "count": t4, "memory_gb": 16}] if t4 else []
    if mig:
        spec.append({"model": "A100", "count": 1, "memory_gb": 40, "mig": mig})
    return GPUAllocator(simulated_inventory(spec))


def physical(alloc: GPUAllocator) -> list[str]:
    return [d.uuid for d in alloc.matching("T4")]


def check_invariants(alloc: GPUAllocator) -> dict[str, list[str]]:
    """No unit is held twice; a GPU is held whole or split in one count; the maps agree."""
    assignments = alloc.assignments()
    held = [u for uuids in assignments.values() for u in uuids]
    assert len(held) == len(set(held)), f"a unit is held twice: {assignments}"
    whole, split = set(), {}
    for key, uuids in assignments.items():
        assert uuids and [d.uuid for d in alloc.held_by(key)] == uuids
        for u in uuids:
            assert alloc.holder(u) == key
            parsed = parse_share_uuid(u)
            if parsed:
                parent, _, k = parsed
                assert split.setdefault(parent, k) == k, f"{parent} split in two counts"
            else:
                whole.add(u)
    assert not whole & set(split), f"a GPU is held whole and in shares: {assignments}"
    return assignments


async def settle(rounds: int = 5) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


# -- shares ------------------------------------------------------------------------


async def test_ten_concurrent_spawns_over_two_gpus_in_quarters():
    alloc = make_allocator(t4=2)
    positions: dict[str, list[tuple[int, int]]] = {}

    def report(key):
        positions[key] = []
        return lambda p, n: positions[key].append((p, n))

    keys = [f"user{i}/" for i in range(10)]
    tasks = {k: asyncio.ensure_future(alloc.acquire(k, "T4", 1, on_position=report(k), share=4)) for k in keys}
    await settle()
    granted = {k: t.result() for k, t in tasks.items() if t.done()}
    assert sorted(granted) == keys[:8]
    pairs = {(d.parent_uuid, d.share_index) for (d,) in granted.values()}
    assert len(pairs) == 8
    assert pairs == {(p, i) for p in physical(alloc) for i in range(4)}
    for (d,) in granted.values():
        assert d.is_share and d.share_count == 4 and d.memory_mib == 16 * 1024 // 4
        assert d.visible_uuid == d.parent_uuid and d.name == "Simulated T4" and d.simulated
        assert d.share_text == "1/4"
    # packing: the first four fill the first GPU before the second is split
    assert {granted[k][0].parent_uuid for k in keys[:4]} == {physical(alloc)[0]}
    assert [alloc.position(k) for k in keys[8:]] == [(1, 2), (2, 2)]
    assert positions["user8/"][-1] == (1, 2) and positions["user9/"][-1] == (2, 2)
    assert alloc.counts("T4", share=4) == {"free": 0, "total": 8, "waiting": 2, "unit": "share"}
    check_invariants(alloc)

    # a share freed goes to the head of the queue, with the same (GPU, share)
    freed = granted["user5/"][0]
    alloc.release("user5/")
    await settle()
    (got,) = tasks["user8/"].result()
    assert (got.parent_uuid, got.share_index) == (freed.parent_uuid, freed.share_index)
    assert alloc.position("user9/") == (1, 1)
    check_invariants(alloc)
    alloc.cancel("user9/")
    with pytest.raises(QueueCancelled):
        await tasks["user9/"]


async def test_a_split_gpu_counts_free_shares_and_is_not_free_whole():
    alloc = make_allocator(t4=2)
    (s,) = await alloc.acquire("a/", "T4", 1, share=4)
    assert alloc.counts("T4", share=4) == {"free": 7, "total": 8, "waiting": 0, "unit": "share"}
    assert alloc.counts("T4") == {"free": 1, "total": 2, "waiting": 0, "unit": "gpu"}
    # a share request of another count never lands on a GPU split in four
    (h,) = await alloc.acquire("b/", "T4", 1, share=2)
    assert h.parent_uuid != s.parent_uuid and h.share_count == 2
    assert alloc.counts("T4", share=4) == {"free": 3, "total": 8, "waiting": 0, "unit": "share"}
    assert alloc.counts("T4", share=2) == {"free": 1, "total": 4, "waiting": 0, "unit": "share"}
    assert alloc.counts("T4") == {"free": 0, "total": 2, "waiting": 0, "unit": "gpu"}
    with pytest.raises(QueueTimeout):
        await alloc.acquire("c/", "T4", 1, timeout=0.05, share=3)
    check_invariants(alloc)


async def test_a_whole_request_waits_until_the_last_share_goes():
    alloc = make_allocator(t4=1)
    await alloc.acquire("a/", "T4", 1, share=2)
    await alloc.acquire("b/", "T4", 1, share=2)
    whole = asyncio.ensure_future(alloc.acquire("w/", "T4", 1))
    await settle()
    assert not whole.done() and alloc.position("w/") == (1, 1)
    alloc.release("a/")
    await settle()
    assert not whole.done(), "a GPU with a share held is never handed out whole"
    alloc.release("b/")
    await settle()
    (d,) = whole.result()
    assert d.uuid == physical(alloc)[0] and not d.is_share
    assert alloc.counts("T4", share=2) == {"free": 0, "total": 2, "waiting": 0, "unit": "share"}
    check_invariants(alloc)
    alloc.release("w/")
    assert alloc.counts("T4", share=2)["free"] == 2


async def test_a_waiting_whole_request_blocks_a_later_share_request():
    alloc = make_allocator(t4=1)
    await alloc.acquire("a/", "T4", 1, share=4)
    whole = asyncio.ensure_future(alloc.acquire("w/", "T4", 1))
    await settle()
    # three shares of this GPU are free, but the whole request came first: strict FIFO
    later = asyncio.ensure_future(alloc.acquire("s/", "T4", 1, share=4))
    await settle()
    assert not later.done()
    assert alloc.position("s/") == (2, 2)
    assert alloc.waiting("T4", share=4) == alloc.waiting("T4") == 2
    alloc.release("a/")
    await settle()
    assert whole.done() and not later.done()
    alloc.release("w/")
    await settle()
    (d,) = later.result()
    assert d.share_count == 4 and d.share_index == 0
    check_invariants(alloc)


async def test_a_key_keeps_its_share_and_gives_it_back_for_another_profile():
    alloc = make_allocator(t4=1)
    first = await alloc.acquire("a/", "T4", 1, share=4)
    assert await alloc.acquire("a/", "T4", 1, share=4) == first
    (whole,) = await alloc.acquire("a/", "T4", 1)  # the same server, now a whole-GPU profile
    assert not whole.is_share
    assert alloc.assignments() == {"a/": [whole.uuid]}
    (again,) = await alloc.acquire("a/", "T4", 1, share=2)
    assert again.share_count == 2
    check_invariants(alloc)


async def test_a_share_of_a_model_the_host_lacks_fails_at_once():
    alloc = make_allocator(t4=1)
    with pytest.raises(AllocationError) as info:
        await alloc.acquire("a/", "V100", 1, share=4)
    assert "1× V100" in str(info.value) and "has 0" in str(info.value)


async def test_a_share_count_of_one_is_a_whole_gpu():
    alloc = make_allocator(t4=1)
    (d,) = await alloc.acquire("a/", "T4", 1, share=1)
    assert not d.is_share


# -- restore -----------------------------------------------------------------------


async def test_shares_are_restored_after_a_hub_restart():
    before = make_allocator(t4=2)
    saved = {}
    for k in ("a/", "b/", "c/"):
        saved[k] = [d.uuid for d in await before.acquire(k, "T4", 1, share=4)]
    after = make_allocator(t4=2)  # a new hub: same inventory, nothing held
    for k, uuids in saved.items():
        assert after.restore(k, uuids) == uuids
    assert after.assignments() == before.assignments()
    assert [d.to_dict() for d in after.held_by("a/")] == [d.to_dict() for d in before.held_by("a/")]
    assert after.counts("T4", share=4) == before.counts("T4", share=4)
    assert after.counts("T4") == {"free": 1, "total": 2, "waiting": 0, "unit": "gpu"}
    # the restored split packs the next share onto the same GPU
    (d,) = await after.acquire("d/", "T4", 1, share=4)
    assert d.parent_uuid == after.held_by("a/")[0].parent_uuid and d.share_index == 3
    check_invariants(after)


def test_restore_conflicts():
    alloc = make_allocator(t4=2)
    gpu0, gpu1 = physical(alloc)
    alloc.restore("whole/", [gpu0])
    alloc.restore("quarter/", [share_uuid(gpu1, 0, 4)])
    cases = [
        ("x/", [share_uuid(gpu0, 1, 4)]),  # a share of a GPU held whole
        ("x/", [share_uuid(gpu1, 0, 2)]),  # split in another count
        ("x/", [share_uuid(gpu1, 0, 4)]),  # the very share another key holds
        ("x/", [gpu1]),  # whole, while a share of it is held
    ]
    for key, uuids in cases:
        with pytest.raises(AssignmentConflict):
            alloc.restore(key, uuids)
    assert alloc.assignments() == {"whole/": [gpu0], "quarter/": [share_uuid(gpu1, 0, 4)]}
    # one key's own saved state cannot claim a GPU whole and in shares, or in two counts
    fresh = make_allocator(t4=1)
    (g,) = physical(fresh)
    for uuids in ([g, share_uuid(g, 0, 2)], [share_uuid(g, 0, 2), g], [share_uuid(g, 0, 2), share_uuid(g, 1, 4)]):
        with pytest.raises(AssignmentConflict):
            fresh.restore("y/", uuids)
    assert fresh.assignments() == {}
    # another share of the same split is fine
    assert alloc.restore("q2/", [share_uuid(gpu1, 3, 4)]) == [share_uuid(gpu1, 3, 4)]
    check_invariants(alloc)


def test_restore_skips_shares_of_a_gpu_gone_from_the_host(caplog):
    alloc = make_allocator(t4=1)
    gone = share_uuid("GPU-00000000-gone", 0, 4)
    assert alloc.restore("a/", [gone]) == []
    assert alloc.assignments() == {}
    assert "not in the inventory any more" in caplog.text


async def test_restore_replacing_a_share_frees_it_for_a_waiter():
    alloc = make_allocator(t4=1)
    (g,) = physical(alloc)
    alloc.restore("a/", [share_uuid(g, 0, 2)])
    alloc.restore("b/", [share_uuid(g, 1, 2)])
    waiter = asyncio.ensure_future(alloc.acquire("w/", "T4", 1, share=2))
    await settle()
    assert not waiter.done()
    alloc.restore("a/", [])
    await settle()
    (d,) = waiter.result()
    assert d.uuid == share_uuid(g, 0, 2)
    check_invariants(alloc)


# -- MIG ---------------------------------------------------------------------------


async def test_mig_instances_are_handed_out_by_uuid_never_twice():
    alloc = make_allocator(t4=1, mig=["3g.20gb", "1g.10gb", "1g.10gb"])
    small = [d.uuid for d in alloc.matching("A100", mig="1g.10gb")]
    assert len(small) == 2 and all(u.startswith("MIG-") for u in small)
    assert alloc.counts("A100", mig="1g.10gb") == {"free": 2, "total": 2, "waiting": 0, "unit": "mig"}
    assert alloc.matching("A100") == []  # a whole-A100 request never gets a slice
    assert alloc.matching("T4", mig="1g.10gb") == []
    got = [await alloc.acquire(k, "A100", 1, mig="1g.10gb") for k in ("a/", "b/")]
    assert sorted(d.uuid for (d,) in got) == sorted(small)
    assert all(d.visible_uuid == d.uuid and d.mig_profile == "1g.10gb" for (d,) in got)
    # the free 3g.20gb slice is never handed out for a 1g.10gb request
    third = asyncio.ensure_future(alloc.acquire("c/", "A100", 1, mig="1g.10gb"))
    await settle()
    assert not third.done() and alloc.position("c/") == (1, 1)
    assert alloc.counts("A100", mig="1g.10gb") == {"free": 0, "total": 2, "waiting": 1, "unit": "mig"}
    assert alloc.counts("A100", mig="3g.20gb") == {"free": 1, "total": 1, "waiting": 0, "unit": "mig"}
    (big,) = await alloc.acquire("d/", "A100", 1, mig="3g.20gb")
    assert big.mig_profile == "3g.20gb"
    alloc.release("a/")
    await settle()
    assert third.result()[0].uuid == got[0][0].uuid
    check_invariants(alloc)


async def test_a_mig_slice_the_host_lacks_fails_at_once():
    alloc = make_allocator(t4=1, mig=["1g.10gb"])
    with pytest.raises(AllocationError) as info:
        await alloc.acquire("a/", "A100", 1, mig="2g.20gb")
    assert str(info.value) == (
        "This profile needs a MIG 2g.20gb slice of A100 but this host has 0. Ask your administrator to fix the profile."
    )


async def test_mig_restore_and_conflict():
    alloc = make_allocator(t4=0, mig=["1g.10gb", "1g.10gb"])
    a, b = (d.uuid for d in alloc.matching("A100", mig="1g.10gb"))
    assert alloc.restore("x/", [a]) == [a]
    with pytest.raises(AssignmentConflict):
        alloc.restore("y/", [a])
    (d,) = await alloc.acquire("z/", "A100", 1, mig="1g.10gb")
    assert d.uuid == b
    assert await alloc.acquire("x/", "A100", 1, mig="1g.10gb") == alloc.held_by("x/")


async def test_a_legacy_mig_model_still_gets_nvml_style_instances():
    # before the mig field a profile named the slice in gpu_model ("A100 MIG 1g.10gb"); that still works
    alloc = make_allocator(t4=0, mig=["1g.10gb", "1g.10gb"])
    assert len(alloc.matching("A100 MIG 1g.10gb")) == 2
    assert alloc.counts("A100 MIG 1g.10gb") == {"free": 2, "total": 2, "waiting": 0, "unit": "gpu"}
    first = await alloc.acquire("a/", "A100 MIG 1g.10gb", 1)
    assert first[0].is_mig
    assert await alloc.acquire("a/", "A100 MIG 1g.10gb", 1) == first  # kept, not given back
    # nothing of it can be time-sliced
    assert alloc.matching("A100 MIG 1g.10gb", share=2) == []
    with pytest.raises(AllocationError):
        await alloc.acquire("b/", "A100", 1, share=2)


def test_restore_of_a_share_spelled_twice_or_of_a_count_no_profile_has_leaks_nothing():
    # saved state is not trusted: "share-01-of-4" is not a second spelling of share 1, and a share of 1, 17 or
    # 99 is no share: each is skipped as an unknown unit, and releasing the key leaves the GPU whole
    [gpu] = simulated_inventory([{"model": "T4", "count": 1, "memory_gb": 16}])
    allocator = GPUAllocator([gpu])
    one = share_uuid(gpu.uuid, 1, 4)
    forged = [one, f"{gpu.uuid}/share-01-of-4", f"{gpu.uuid}/share-0-of-1", f"{gpu.uuid}/share-0-of-99"]
    assert allocator.restore("alice/", forged) == [one]
    assert allocator.counts("T4", share=4)["free"] == 3
    allocator.release("alice/")
    assert allocator.counts("T4", share=4)["free"] == 4 and allocator.counts("T4")["free"] == 1


def test_an_assignment_that_conflicts_half_way_records_nothing():
    # a conflict found at the second unit must not leave the first held by a key that holds nothing
    [gpu] = simulated_inventory([{"model": "T4", "count": 1, "memory_gb": 16}])
    allocator = GPUAllocator([gpu])
    allocator.restore("bob/", [share_uuid(gpu.uuid, 2, 4)])
    with pytest.raises(AssignmentConflict):
        allocator.restore("alice/", [share_uuid(gpu.uuid, 1, 4), share_uuid(gpu.uuid, 2, 4)])
    with pytest.raises(AssignmentConflict):
        allocator.restore("carol/", [share_uuid(gpu.uuid, 0, 4), gpu.uuid])  # a share and the GPU whole
    assert allocator.assignments() == {"bob/": [share_uuid(gpu.uuid, 2, 4)]}
    assert allocator.counts("T4", share=4)["free"] == 3
