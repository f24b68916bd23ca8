"""While a starting hub restores its GPU assignments, spawns wait; outside a start nothing waits."""

from __future__ import annotations

import asyncio

import pytest

from jupyterhub_gpu.spawners.assign import restore


@pytest.fixture(autouse=True)
def not_restoring():
    yield
    restore.end_restore()


async def test_nothing_waits_outside_a_hub_start():
    told = []
    await asyncio.wait_for(restore.wait_restored(lambda: told.append(1)), 1)
    assert told == [] and not restore.restoring()


async def test_a_spawn_waits_until_the_restore_ends_and_is_told_once():
    told = []
    restore.begin_restore()
    waiting = asyncio.ensure_future(restore.wait_restored(lambda: told.append(1)))
    await asyncio.sleep(restore.POLL * 3)
    assert not waiting.done() and told == [1]
    restore.end_restore()
    await asyncio.wait_for(waiting, restore.POLL * 5)
    assert told == [1]
