# ruff: noqa: F811
"""Our own cases of JupyterHub's Spawner contract, run with JupyterHub's fixtures (issue 14 s10).

Run by ``test_jupyterhub_contract.py`` in the same pytest as JupyterHub's own tests (``MockHub``, its
proxy and database; ``gpu_contract_plugin`` puts GPULocalSpawner under ``MockSpawner``). Here the
spawner has one simulated T4, so that a second spawn waits in the queue.
"""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest
from jupyterhub.spawner import SpawnException
from jupyterhub.tests import mocking

# JupyterHub's fixtures (MockHub as ``app``, the clean-up of servers and users after each test);
# the tests take ``app`` as a fixture argument, which shadows the import (ruff's F811)
from jupyterhub.tests.conftest import app, cleanup_after, no_patience, slow_spawn, ssl_tmpdir, tmp_cwd  # noqa: F401
from jupyterhub.tests.utils import add_user, api_request
from traitlets import default


class OneT4Spawner(mocking.MockSpawner):
    """MockSpawner (over GPULocalSpawner) on a host with a single simulated T4."""

    @default("simulated_gpus")
    def _one_t4(self):
        return [{"model": "T4", "count": 1, "memory_gb": 16}]

    @default("queue_timeout")
    def _long_queue(self):
        return 600


@pytest.fixture
def one_t4(app):
    with mock.patch.dict(app.tornado_settings, {"spawner_class": OneT4Spawner}):
        yield


async def until(predicate, timeout=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def holder_and_waiter(app, prefix):
    """One user holding the only T4, and a second user's spawn waiting for it."""
    holder = add_user(app.db, app, name=f"{prefix}-holder")
    await holder.spawn()
    waiter = add_user(app.db, app, name=f"{prefix}-waiter")
    spawn = asyncio.ensure_future(waiter.spawn())
    waiter.spawner._spawn_future = spawn
    waiter.spawner._spawn_pending = True
    await until(lambda: waiter.spawner.allocator.position(waiter.spawner._gpu_key) is not None)
    return holder, waiter, spawn


async def test_start_timeout_is_not_raised_when_nothing_waits(app, one_t4):
    user = add_user(app.db, app, name="timeout-keeper")
    spawner = user.spawner
    spawner.start_timeout = 1
    spawner.user_options = {}
    await spawner.run_pre_spawn_hook()  # the T4 is free: no wait
    assert spawner.start_timeout == 1  # was 1 + queue_timeout = 601
    spawner.clear_state()
    assert spawner.allocator.held_by(spawner._gpu_key) == []


async def test_user_stop_while_queued_starts_nothing_when_the_gpu_frees(app, one_t4):
    holder, waiter, spawn = await holder_and_waiter(app, "shutdown")
    # JupyterHub's User.stop() without cancelling the spawn (its shutdown clean-up does this): the server
    # does not run yet, so only its state is cleared
    await waiter.stop()
    with pytest.raises(SpawnException, match="stopped while it was starting"):
        await asyncio.wait_for(spawn, 10)
    assert waiter.spawner.allocator.position(waiter.spawner._gpu_key) is None
    await holder.stop()  # the T4 frees: nobody may get it for the stopped spawn
    await asyncio.sleep(0.5)
    assert waiter.spawner.allocator.held_by(waiter.spawner._gpu_key) == []
    assert waiter.spawner.allocator.free("T4")
    assert not waiter.spawner.pid and waiter.spawner.proc is None
    assert waiter.spawner.server is None and not waiter.running


async def test_stop_while_queued_fails_the_spawn_so_jupyterhub_cleans_up(app, one_t4):
    holder, waiter, spawn = await holder_and_waiter(app, "stopper")
    spawner = waiter.spawner
    await spawner.stop()  # Spawner.stop() during the queue wait
    with pytest.raises(SpawnException) as failure:
        await asyncio.wait_for(spawn, 10)
    assert isinstance(failure.value, Exception)  # not CancelledError: JupyterHub's clean-up catches Exception
    assert not spawner.ready and not waiter.running
    assert spawner.server is None  # JupyterHub's failure clean-up ran (it stops and forgets the server)
    await holder.stop()
    await asyncio.sleep(0.3)
    assert spawner.allocator.held_by(spawner._gpu_key) == []


class GatedPrepareSpawner(OneT4Spawner):
    """Holds its launch in ``gpu_prepare`` (after the GPU is assigned, before the process starts)."""

    gate: asyncio.Event | None = None
    entered: asyncio.Event | None = None

    async def gpu_prepare(self, profile, devices):
        await super().gpu_prepare(profile, devices)
        type(self).entered.set()
        await type(self).gate.wait()


async def test_user_stop_while_launching_leaves_no_server_and_frees_the_gpu_only_after(app):
    GatedPrepareSpawner.gate, GatedPrepareSpawner.entered = asyncio.Event(), asyncio.Event()
    with mock.patch.dict(app.tornado_settings, {"spawner_class": GatedPrepareSpawner}):
        user = add_user(app.db, app, name="launch-stopper")
        spawn = asyncio.ensure_future(user.spawn())
        spawner = user.spawner
        spawner._spawn_future, spawner._spawn_pending = spawn, True
        await asyncio.wait_for(GatedPrepareSpawner.entered.wait(), 10)
        await user.stop()  # nothing runs yet: JupyterHub only clears the state
        # the launch still holds its GPU until it has unwound: never handed on while a server may start
        assert spawner.allocator.held_by(spawner._gpu_key) != []
        GatedPrepareSpawner.gate.set()
        with pytest.raises(SpawnException, match="stopped while it was starting"):
            await asyncio.wait_for(spawn, 10)
    assert spawner.allocator.held_by(spawner._gpu_key) == []
    assert spawner.proc is None and not spawner.pid  # nothing was launched
    assert spawner.server is None and not user.running


async def test_start_stop_race_once_the_pre_spawn_hook_returned(app, no_patience, slow_spawn):
    """JupyterHub's ``test_start_stop_race``, with its requests made once our pre-spawn hook has returned.

    JupyterHub's test patches ``start`` right after the spawn request is answered, assuming the hook is
    done by then (the stock hook does nothing); ours reads the ledger first, so the test waits for
    ``start()`` to be entered (``gpu_contract_plugin.REPLACED``). The requests and their answers are
    JupyterHub's.
    """
    user = add_user(app.db, app, name="race-panda")
    spawner = user.spawner
    r = await api_request(app, "users", user.name, "server", method="post")
    assert r.status_code == 202
    assert spawner.pending == "spawn"
    spawn_future = spawner._spawn_future
    # the hook has returned and JupyterHub has called start(): our start has made the session, and
    # SlowSpawner sleeps after it
    await until(lambda: bool(spawner.gpu_session), timeout=30)
    # additional spawns while spawning do not trigger a new spawn
    with mock.patch.object(spawner, "start") as m:
        r = await api_request(app, "users", user.name, "server", method="post")
    assert r.status_code == 202
    assert m.call_count == 0
    # stop while spawning is fine
    spawner.delay = 3
    r = await api_request(app, "users", user.name, "server", method="delete")
    assert r.status_code == 202
    assert spawner.pending == "stop"
    assert spawn_future.cancelled()
    assert spawner._spawn_future is None
    await asyncio.sleep(1)  # past the proxy's route deletion, as JupyterHub's test
    # additional stops while stopping do not trigger a new stop
    with mock.patch.object(spawner, "stop") as m:
        r = await api_request(app, "users", user.name, "server", method="delete")
    assert r.status_code == 202
    assert m.call_count == 0
    # start while stopping is not allowed
    with mock.patch.object(spawner, "start") as m:
        r = await api_request(app, "users", user.name, "server", method="post")
    assert r.status_code == 400
    await until(lambda: not spawner.active, timeout=30)
    # start after stop is fine, and it starts
    r = await api_request(app, "users", user.name, "server", method="post")
    assert r.status_code == 202
    await until(lambda: user.running, timeout=60)
    assert spawner.allocator.held_by(spawner._gpu_key) != []
