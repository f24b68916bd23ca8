"""The per-user startup script: ``~/work/.jupyterhub-gpu/startup.sh``, run when the server starts.

A student puts what every session needs there (``git pull``, ``pip install --user ...``,
unpacking a dataset); the server extension runs it once per server start, in the background
(the server is ready meanwhile), as the server's own user, from ``~/work``, under ``bash``,
with a time limit, after which the script and everything it started are killed. Its output goes
to ``~/work/.jupyterhub-gpu/startup.log`` (the previous run's to ``startup.log.1``), which the
student can open in JupyterLab; a named server's (a notebook job's) to ``startup-<server name>.log``.

The script is the user's own code run as the user: it gains nothing. It is still refused when
someone else owns it or may write to it (a shared or badly mounted volume), and the server's
API token is left out of its environment: a ``git pull`` needs none.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import stat
import time
from datetime import datetime, timezone
from pathlib import Path

from traitlets import Bool, Float, Unicode, default
from traitlets.config import Configurable

from jupyterhub_gpu.env import STARTUP_TIMEOUT, server_file_name, startup_timeout_from_env


class StartupScript(Configurable):
    """Settings of the per-user startup script (``c.StartupScript.*`` in the server's config)."""

    enabled = Bool(True, help="Run the user's startup script at server start.").tag(config=True)
    path = Unicode(
        "~/work/.jupyterhub-gpu/startup.sh", help="The script, run with bash; ~ is the server user's home."
    ).tag(config=True)
    log_path = Unicode(
        "~/work/.jupyterhub-gpu/startup.log", help="Where its output goes (the previous run's gets '.1')."
    ).tag(config=True)
    timeout = Float(
        help=f"Seconds the script may run before it and its children are killed (default ${STARTUP_TIMEOUT}, else 120)."
    ).tag(config=True)
    kill_grace = Float(2.0, help="Seconds between SIGTERM and SIGKILL at the time limit.").tag(config=True)

    @default("timeout")
    def _default_timeout(self):
        value = startup_timeout_from_env()
        if not value:
            return 120.0
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        # an unusable value must not run the script unlimited: mark it, run() refuses it
        return seconds if 0 < seconds < float("inf") else float("nan")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def refusal(script: Path, timeout: float) -> str | None:
    """Why ``script`` must not run (someone else's, writable by others, no usable limit), or None."""
    try:
        info = script.lstat()
    except OSError as e:
        return f"cannot read {script}: {e}"
    if not stat.S_ISREG(info.st_mode):
        return f"{script} is not a regular file"
    if info.st_uid != os.getuid():
        return f"{script} belongs to uid {info.st_uid}, not to this server's user (uid {os.getuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write to {script} (mode {stat.filemode(info.st_mode)}): chmod go-w it"
    if not (timeout > 0):
        return f"the startup time limit is not a positive number of seconds (${STARTUP_TIMEOUT}?)"
    return None


def server_log(log_file: Path, server_name: str) -> Path:
    """The log of one server: ``startup.log`` for the default server, ``startup-<name>.log`` for a named one
    (:func:`~jupyterhub_gpu.env.server_file_name`).

    ``~/work`` is one volume for all of a user's servers (named servers, notebook jobs): started at once, they
    would rotate one log under each other, and the second's output would land in the first's."""
    if not server_name:
        return log_file
    return log_file.with_name(f"{log_file.stem}-{server_file_name(server_name)}{log_file.suffix}")


def open_log(log_file: Path):
    """The log, opened for this run; the previous run's moves to ``<log>.1``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    except FileNotFoundError:
        pass  # a first run (or another process moved it first): nothing to keep
    return open(log_file, "wb")


async def run_startup_script(config: StartupScript, log=None, server_name: str | None = None) -> dict | None:
    """Run the script once (if there is one): ``{"status": ..., "returncode": ..., "seconds": ...}``.

    Its output goes to :func:`server_log` of ``config.log_path`` for ``server_name`` (default: this server's,
    ``$JUPYTERHUB_SERVER_NAME``).

    ``status`` is ``"finished"`` (with its exit code), ``"killed"`` (the time limit) or
    ``"refused"``; None when there is no script. Never raises: the server must start anyway.
    """
    if not config.enabled:
        return None
    script, log_file = Path(os.path.expanduser(config.path)), Path(os.path.expanduser(config.log_path))  # noqa: ASYNC240
    if server_name is None:
        server_name = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
    log_file = server_log(log_file, server_name)
    if not os.path.lexists(script):  # noqa: ASYNC240  (a stat of a local file)
        return None
    error = refusal(script, config.timeout)
    shell = shutil.which("bash") or "/bin/sh"
    try:
        out = open_log(log_file)
    except OSError as e:
        if log:
            log.error("jupyterhub-gpu: cannot write the startup log %s: %s", log_file, e)
        return {"status": "refused", "returncode": None, "seconds": 0.0, "error": str(e)}

    with out:
        if error:
            out.write(f"[jupyterhub-gpu] {_now()} not running the startup script: {error}\n".encode())
            if log:
                log.warning("jupyterhub-gpu: not running the startup script: %s", error)
            return {"status": "refused", "returncode": None, "seconds": 0.0, "error": error}

        out.write(
            f"[jupyterhub-gpu] {_now()} running {script} as uid {os.getuid()}"
            f" (time limit {config.timeout:g} s)\n".encode()
        )
        out.flush()
        env = {k: v for k, v in os.environ.items() if k not in ("JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN")}
        workdir = script.parent.parent if script.parent.name == ".jupyterhub-gpu" else script.parent
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                shell,
                str(script),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=str(workdir),
                env=env,
                start_new_session=True,  # its own process group: the limit kills its children too
            )
        except OSError as e:
            out.write(f"[jupyterhub-gpu] {_now()} cannot start the startup script: {e}\n".encode())
            return {"status": "refused", "returncode": None, "seconds": 0.0, "error": str(e)}
        # a server that exits first takes the script's process group with it
        cleanup = atexit.register(_kill_group, proc.pid, signal.SIGKILL)
        status = "finished"
        try:
            await asyncio.wait_for(proc.wait(), config.timeout)
        except asyncio.TimeoutError:
            status = "killed"
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), config.kill_grace)
            except asyncio.TimeoutError:
                _kill_group(proc.pid, signal.SIGKILL)
                await proc.wait()
        finally:
            atexit.unregister(cleanup)
        seconds = time.monotonic() - started
        if status == "killed":
            line = f"killed at the time limit of {config.timeout:g} s"
        else:
            line = f"finished with exit code {proc.returncode} after {seconds:.1f} s"
        out.write(f"\n[jupyterhub-gpu] {_now()} startup script {line}\n".encode())
    if log:
        (log.warning if status == "killed" or proc.returncode else log.info)("jupyterhub-gpu: startup script %s", line)
    return {"status": status, "returncode": proc.returncode, "seconds": round(seconds, 3)}


def start(serverapp) -> None:
    """Run the startup script in the background of ``serverapp``'s event loop (the server hook)."""
    config = StartupScript(parent=serverapp)
    serverapp.io_loop.add_callback(run_startup_script, config, serverapp.log)
