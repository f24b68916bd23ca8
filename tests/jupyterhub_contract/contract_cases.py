# ruff: noqa: F811
"""Our own cases of JupyterHub's Spawner contract, run with JupyterHub's fixtures.

Run by ``test_jupyterhub_contract.py`` in the same pytest as JupyterHub's own tests (``MockHub``, its
proxy and database; ``gpu_contract_plugin`` puts GPULocalSpawner under ``MockSpawner``). Here the
spawner has one simulated T4, so that a second spawn waits in the queue.
"""

from __future__ import annotations

import asyncio
import types
from datetime import timedelta
from unittest import mock

import pytest
from jupyterhub.spawner import SpawnException
from jupyterhub.tests import mocking

# JupyterHub's fixtures (MockHub as ``app``, the clean-up of servers and users after each test);
# the tests take ``app`` as a fixture argument, which shadows the import (ruff's F811)
from jupyterhub.tests.conftest import app, cleanup_after, no_patience, slow_spawn, ssl_tmpdir, tmp_cwd  # noqa: F401
from jupyterhub.tests.utils import add_user, api_request
from traitlets import default

from jupyterhub_gpu.clock import aware_utc, utcnow


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
    # the ledger: the session stopped while it was starting is closed at its stop, not left open (billed
    # time with no server) for the service's reconciliation
    (first,) = spawner.ledger.sessions(user=user.name)
    assert first.stopped is not None and first.stop_reason == "stopped"
    # start after stop is fine, and it starts
    r = await api_request(app, "users", user.name, "server", method="post")
    assert r.status_code == 202
    await until(lambda: user.running, timeout=60)
    assert spawner.allocator.held_by(spawner._gpu_key) != []
    assert [s.id for s in spawner.ledger.open_sessions() if s.user == user.name] != [first.id]


@types.coroutine
def _counted(coro, on_suspend):
    """Run ``coro``, calling ``on_suspend(coro)`` each time it suspends (at each of its awaits that waits).

    When ``on_suspend`` returns a future, ``coro`` is held at that await, once what it awaited is done, until
    the future is: what happens meanwhile (the hub cancelling the spawn) reaches ``coro`` at that await.
    """
    it = coro.__await__()
    send, throw = None, None
    while True:
        try:
            yielded = it.throw(throw) if throw is not None else it.send(send)
        except StopIteration as e:
            return e.value
        gate = on_suspend(coro)
        try:
            send, throw = (yield yielded), None
        except BaseException as e:  # a cancellation thrown into the waiting coroutine goes on into it
            send, throw = None, e
        if gate is not None and throw is None:
            try:
                yield from gate.__await__()
            except BaseException as e:
                throw = e


def _where(coro) -> str:
    """The chain of awaits a coroutine is suspended in: ``start:943 > _gpu_record_start:999 > ...``."""
    chain = []
    while coro is not None and getattr(coro, "cr_frame", None) is not None:
        chain.append(f"{coro.cr_code.co_name}:{coro.cr_frame.f_lineno}")
        coro = coro.cr_await
    return " > ".join(chain)


class SuspensionsSpawner(mocking.MockSpawner):
    """MockSpawner (over GPULocalSpawner) that counts the suspensions of its pre-spawn hook and start, and at the
    ``stop_at``-th one has the hub stop it (the REST API's DELETE, as ``test_start_stop_race``) while it waits
    there."""

    stop_at: int | None = None
    suspensions = 0
    stop_asked = None
    where = ""
    stops: set = set()

    def _suspended(self, coro):
        cls = type(self)
        cls.suspensions += 1
        if cls.suspensions != cls.stop_at or cls.stop_asked is not None:
            return None
        cls.stop_asked, cls.where = utcnow(), _where(coro)
        gate = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(api_request(self.hub_app, "users", self.user.name, "server", method="delete"))
        cls.stops.add(task)
        task.add_done_callback(lambda t: (cls.stops.discard(t), gate.done() or gate.set_result(None)))
        return gate

    async def run_pre_spawn_hook(self):
        return await _counted(super().run_pre_spawn_hook(), self._suspended)

    async def start(self):
        return await _counted(super().start(), self._suspended)


async def test_a_stop_at_any_await_of_a_start_leaves_no_session_open(app, no_patience):
    """The hub is asked to stop the server at the 1st, 2nd, ... suspension of its pre-spawn hook and start
    (the ledger's reads, the budget check, the queue, the launch, the ledger's write of the start), and the
    spawn is held there until the stop has reached it: afterwards the ledger holds no open session of it, a
    session that was recorded is closed at the stop, and no GPU stays held."""
    SuspensionsSpawner.hub_app = app
    with mock.patch.dict(app.tornado_settings, {"spawner_class": SuspensionsSpawner}):
        # a start without a stop: how many times it suspends
        SuspensionsSpawner.stop_at, SuspensionsSpawner.suspensions = None, 0
        user = add_user(app.db, app, name="await-count")
        r = await api_request(app, "users", user.name, "server", method="post")
        assert r.status_code in (201, 202)
        await until(lambda: user.running, timeout=60)
        total = SuspensionsSpawner.suspensions
        assert total >= 5, total
        await user.stop()
        for k in range(1, total + 1):
            SuspensionsSpawner.stop_at, SuspensionsSpawner.suspensions = k, 0
            SuspensionsSpawner.stop_asked = None
            user = add_user(app.db, app, name=f"await-stop-{k}")
            spawner = user.spawner
            r = await api_request(app, "users", user.name, "server", method="post")
            assert r.status_code in (201, 202), r.text
            await until(lambda u=user: SuspensionsSpawner.stop_asked is not None or u.running, timeout=60)
            await until(lambda s=spawner: not SuspensionsSpawner.stops and not s.active, timeout=60)
            where = SuspensionsSpawner.where
            if SuspensionsSpawner.stop_asked is None:  # this start suspended fewer times: stopped once it runs
                SuspensionsSpawner.stop_asked, where = utcnow(), "running"
                await user.stop()
            done = utcnow()
            assert [s.id for s in spawner.ledger.open_sessions() if s.user == user.name] == [], (k, where)
            for session in spawner.ledger.sessions(user=user.name):
                stopped = aware_utc(session.stopped)
                assert SuspensionsSpawner.stop_asked - timedelta(seconds=1) <= stopped <= done, (k, where, session)
            assert spawner.allocator.held_by(spawner._gpu_key) == [], (k, where)
