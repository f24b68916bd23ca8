"""A Docker server that ended while the hub was down is billed to its container's real end.

A real hub with GPUDockerSpawner and the managed gpu service over one sqlite ledger; real containers of
the test image (``make test-image``). The hub is killed with SIGKILL while a server runs, the server's
container is stopped from outside (``docker stop``) while the hub is down, and the hub comes back some
seconds later: the ledger closes the session at the container's ``State.FinishedAt`` (to the microsecond
the ledger stores; Docker gives nanoseconds), charged ``ceil(seconds / 60)`` minutes from its start to that
end, never to the moment the hub came back.

A stale exit time of an earlier server can never close a later session: DockerSpawner would reuse a
user's container across sessions with ``remove = False`` (keeping the earlier run's ``FinishedAt``, and its
GPUs, session id and rate in its environment), so the Docker spawner refuses that setting, and for a
running container that carries an earlier run's ``FinishedAt`` it offers no end at all.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.billing import billed_minutes
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from tests.conftest import wait_for
from tests.docker.test_docker_spawner import IMAGE, config, docker, remove_by_prefix
from tests.service.conftest import gpu_hub_config

pytestmark = pytest.mark.docker

DOWN_AFTER_END = 5  # seconds the hub stays down after the container ended


def utc(moment: datetime | None) -> datetime | None:
    """The ledger keeps naive UTC."""
    return moment.replace(tzinfo=timezone.utc) if moment is not None and moment.tzinfo is None else moment


def finished_at(cid: str) -> datetime:
    """The container's ``State.FinishedAt`` cut to microseconds (read here, independently of the spawner)."""
    raw = json.loads(docker("inspect", cid))[0]["State"]["FinishedAt"]
    head, _, frac = raw.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


@pytest.fixture
def prefix():
    prefix = f"jhgpu-bend-{uuid.uuid4().hex[:6]}"
    docker("volume", "create", f"{prefix}-datasets")
    yield prefix
    remove_by_prefix(prefix)


@pytest.mark.timeout(240)
def test_a_container_stopped_while_the_hub_was_down_is_billed_to_its_finished_at(make_hub, tmp_path, prefix):
    db_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    hub = make_hub(
        gpu_hub_config(tmp_path, db_url=db_url, min_minutes=0)
        + config(f"{prefix}-datasets", prefix)
        + f"""
c.JupyterHub.cleanup_servers = False
c.Spawner.poll_interval = 2
c.GPUDockerSpawner.ledger_db_url = {db_url!r}
# the managed service's config names the lab's time zone: the hub's spawner must publish the same one
c.GPUDockerSpawner.budget_timezone = "Asia/Shanghai"
"""
    )
    ledger = Ledger(db_url, migrate=False)
    try:
        hub.create_users("ann")
        assert hub.start_server("ann", {"profile": "t4"}).status_code in (201, 202)
        state = hub.wait_ready("ann", timeout=150)["state"]
        sid, cid = state["gpu"]["session_id"], state["object_id"]
        started = utc(ledger.get_session(sid).started)

        hub.stop(signal.SIGKILL)
        docker("stop", "-t", "5", cid)  # the server ends while no hub watches it
        end = finished_at(cid)
        assert started < end <= datetime.now(timezone.utc)
        time.sleep(DOWN_AFTER_END)  # a known time between the real end and the hub's return
        back = datetime.now(timezone.utc)
        assert back - end >= timedelta(seconds=DOWN_AFTER_END)
        hub.start()

        row = wait_for(lambda: (r := ledger.get_session(sid)) and r.stopped and r, 60, what="ann's session closed")
        assert utc(row.stopped) == end, (row.stopped, end, back)  # Docker's FinishedAt, not the hub's return
        assert row.stop_reason == "exited"
        assert (
            row.minutes
            == billed_minutes(started, end)
            == -(-((end - started) // timedelta(microseconds=1)) // 60_000_000)
        )
        assert row.cost_micros == row.minutes * row.rate_micros
        assert not ledger.open_sessions()
        # the hub has let the server go: no server listed, the exited container removed
        wait_for(lambda: hub.server("ann") is None, 30, what="the restarted hub to drop ann's server")
        wait_for(lambda: docker("ps", "-aq", "--filter", f"id={cid}") == "", 30, what="the exited container removed")
    finally:
        ledger.close()


def test_reusing_a_container_across_sessions_is_refused():
    # DockerSpawner starts a user's existing container again when remove is False: the later session would
    # run in a container that still holds the earlier session's GPUs, session id and rate, and carries its exit
    with pytest.raises(ValueError, match="remove must stay True"):
        GPUDockerSpawner(remove=False)
    assert GPUDockerSpawner().remove is True


def test_the_earlier_exit_of_a_restarted_container_is_never_offered_as_its_end(prefix):
    cid = docker("run", "-d", "--network", "none", "--name", f"{prefix}-reused", "--entrypoint", "sleep", IMAGE, "600")
    try:
        docker("stop", "-t", "0", cid)
        stale = finished_at(cid)
        docker("start", cid)  # a later run of the same container: Docker keeps the earlier run's FinishedAt
        info = json.loads(docker("inspect", cid))[0]["State"]
        assert info["Running"] and finished_at(cid) == stale
        assert datetime.fromisoformat(info["StartedAt"].rstrip("Z")[:26] + "+00:00") > stale

        spawner = GPUDockerSpawner()
        spawner.object_id = cid
        assert asyncio.run(spawner.gpu_stopped_at()) is None  # running: no end, least of all the stale one

        docker("kill", cid)
        end = finished_at(cid)
        assert end > stale
        assert asyncio.run(spawner.gpu_stopped_at()) == end  # its real end once this run is over
    finally:
        docker("rm", "-f", cid, check=False)
