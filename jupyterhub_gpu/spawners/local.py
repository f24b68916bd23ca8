"""GPULocalSpawner: GPU profiles over local processes, for the embedded demo and fast tests.

Servers run as the hub's own user, each in its own home directory, like
JupyterHub's SimpleLocalProcessSpawner: there is no isolation between users, so
this spawner is for demos and tests, never for a shared machine.
"""

import asyncio
import os
import select
import signal
import threading
import time

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import default

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import SESSION_ID
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin


class GPULocalSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """Local-process servers with GPU profiles (demo and tests; no isolation)."""

    _require_image = False

    @default("gpu_backend")
    def _default_backend(self):
        return "simulated"

    _gpu_exited_at = None
    _gpu_watched_pid = None

    def _gpu_watch_exit(self, pid) -> None:
        """Note the moment the server process ends, for exact billing.

        A thread waits on a pidfd and stamps the time as the process ends: the hub's event loop can be
        busy for a second on a loaded machine, and the stop must not be billed late by that much.
        """
        if not pid or pid == self._gpu_watched_pid or not hasattr(os, "pidfd_open"):
            return
        # an earlier server's stamp must never close this session, even if this one cannot be watched
        self._gpu_watched_pid = pid
        self._gpu_exited_at = None
        session_id = self._gpu_session.get("session_id")
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # already gone: its end is unknown, the stop is recorded when it is found
        loop = asyncio.get_event_loop()

        def ended(at):
            if self._gpu_watched_pid != pid or self._gpu_session.get("session_id") != session_id:
                return  # a later server of this spawner is watched now
            self._gpu_exited_at = at
            session = dict(self._gpu_session)
            if session and not self._gpu_stopping and not self._gpu_launching:
                # record the exact end now: a hub killed before its next poll would lose it
                self._gpu_exit_record = loop.create_task(self._gpu_record_stop(session, at, StopReason.EXITED))

        def wait():
            try:
                select.select([fd], [], [])
                at = utcnow()
            finally:
                os.close(fd)
            try:
                loop.call_soon_threadsafe(ended, at)
            except RuntimeError:
                pass  # the hub is shutting down

        threading.Thread(target=wait, name=f"jupyterhub-gpu-exit-{pid}", daemon=True).start()

    async def start(self):
        self._gpu_exited_at = None  # the stamp of the previous server, if any, is not this one's
        self._gpu_watched_pid = None
        return await super().start()

    async def gpu_confirm_start(self):
        # watch the process from the moment it runs, before the start is recorded: an exit at once is seen
        self._gpu_watch_exit(self.pid)
        await super().gpu_confirm_start()

    def load_state(self, state):
        super().load_state(state)
        if self._gpu_session and self.pid:
            try:
                self._gpu_watch_exit(self.pid)
            except RuntimeError:  # no event loop yet
                pass

    @classmethod
    def gpu_orphans(cls, probe, api_url):
        """Server processes of this hub: those whose environment names its API URL and a session."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            except OSError:
                continue  # gone, or not ours to read
            session = env.get(SESSION_ID.encode(), b"").decode()
            if session and env.get(b"JUPYTERHUB_API_URL", b"").decode() == api_url:
                found.append((session, f"process {entry.name}", int(entry.name)))
        return found

    @classmethod
    def gpu_reap(cls, probe, pid):
        """SIGTERM, then SIGKILL after 5 s."""
        try:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    async def gpu_stopped_at(self):
        return self._gpu_exited_at

    async def gpu_prepare(self, profile, devices):
        # the same layout as the containers: persistent work under ~/work
        os.makedirs(os.path.join(self.home_dir, "work"), mode=0o755, exist_ok=True)
