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


def _process_image(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of ``pid`` from ``/proc/<pid>/stat``; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]  # the state, and the start time in clock ticks since boot
    except (OSError, IndexError):
        return None


def _has_ended(pid: int, started: str | None = None) -> bool:
    """Whether ``pid`` has ended: gone, a zombie nobody has reaped yet, or its pid now another process's."""
    image = _process_image(pid)
    return image is None or image[0] in ("Z", "X") or (started is not None and image[1] != started)


def _wait_ended(pid: int, timeout: float, started: str | None = None) -> bool:
    """Wait until ``pid`` has ended (:func:`_has_ended`); False on time-out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _has_ended(pid, started):
            return True
        time.sleep(0.05)
    return False


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
        session_id = self._gpu_session.id if self._gpu_session is not None else None
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # already gone: its end is unknown, the stop is recorded when it is found
        image = _process_image(pid)
        if image is None:
            os.close(fd)
            return  # ended just now: as above
        started = image[1]  # this process's start time: a pid reused later is another process
        loop = asyncio.get_event_loop()
        log = self.log

        def ended(at):
            session = self._gpu_session
            if self._gpu_watched_pid != pid or session is None or session.id != session_id:
                return  # a later server of this spawner is watched now
            self._gpu_exited_at = at
            if not self._gpu_stopping and not self._gpu_launching:
                log.info("jupyterhub-gpu: %s (pid %d, session %s) ended at %s", self._log_name, pid, session_id, at)
                # record the exact end now: a hub killed before its next poll would lose it
                self._gpu_exit_record = loop.create_task(self._gpu_record_stop(session, at, StopReason.EXITED))

        def wait():
            try:
                poller = select.poll()  # not select.select: a hub with many open files has pidfds above 1023
                poller.register(fd, select.POLLIN)
                poller.poll()
                at = utcnow()
                if not _has_ended(pid, started):
                    # the pidfd said "ended" while the process runs on (CI saw a stop billed 35 s before the
                    # server ended): never bill on that word alone; watch /proc until it has really ended
                    log.warning("jupyterhub-gpu: pid %d woke its exit watch but still runs; watching /proc", pid)
                    while not _wait_ended(pid, 3600, started):
                        pass
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
                    raw = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
            except OSError:
                continue  # gone, or not ours to read
            env = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
            session = env.get(SESSION_ID, "")
            if session and env.get("JUPYTERHUB_API_URL", "") == api_url:
                found.append((session, f"process {entry.name}", int(entry.name), env))
        return found

    @classmethod
    def gpu_reap(cls, probe, pid):
        """SIGTERM, then SIGKILL after 5 s; returns once the process has ended (or 5 s after the SIGKILL)."""
        try:
            os.kill(pid, signal.SIGTERM)
            if not _wait_ended(pid, 5):
                os.kill(pid, signal.SIGKILL)
                _wait_ended(pid, 5)
        except ProcessLookupError:
            pass

    async def gpu_stopped_at(self):
        return self._gpu_exited_at

    async def gpu_prepare(self, profile, devices):
        # the same layout as the containers: persistent work under ~/work
        os.makedirs(os.path.join(self.home_dir, "work"), mode=0o755, exist_ok=True)
