"""The job runner inside a job's server: run one notebook top to bottom, keep its output, stop the server.

A server the gpu service started for a notebook job has ``JUPYTERHUB_GPU_JOB_ID``
in its environment. Once the server is up, the runner:

1. reads the job from the service (``GET jobs/<id>``: notebook, parameters,
   time limit) with the server's own token, and reports the start;
2. injects the parameters papermill's way (a cell tagged
   ``injected-parameters`` after the cell tagged ``parameters``) and executes
   the notebook with nbclient in a kernel of this server's own kernel manager
   (so its activity counts as the server's activity);
3. writes the executed notebook after every cell, and a log, to
   ``~/work/jobs/<id>/`` (the notebook's own folder is the kernel's working
   folder, as when it is run by hand);
4. ends at the last cell, at the first error, or at the time limit
   (the kernel is shut down), reports the end to the service (the ledger's stop
   reason becomes ``job_finished``), and asks the hub to stop and remove this
   server with the server's own token. Billing ends there.

If the service cannot be reached the server still stops: the service's tick
marks the job failed when it sees the server gone.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path, PurePosixPath

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import HTTPClientError

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.env import job_id_from_env
from jupyterhub_gpu.serverext.stopwhendone import stop_own_server


class JobLog:
    """``job.log``: one timestamped line per event, flushed at once (read while the job runs)."""

    def __init__(self, path: Path):
        self.file = open(path, "a", encoding="utf-8")

    def __call__(self, message: str) -> None:
        self.file.write(f"{isoformat(utcnow())} {message}\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def cell_outputs_text(cell) -> str:
    """The text a cell printed (streams and plain-text results), for the log."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            parts.append(output.get("data", {}).get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output.get('ename')}: {output.get('evalue')}")
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts if p)


def home_path(serverapp, relative: str) -> Path:
    """A path under the server's root folder (the user's home)."""
    return Path(serverapp.root_dir).expanduser() / relative


def output_dir(serverapp, job_id: str) -> Path:
    """``~/work/jobs/<id>/``, created."""
    out = home_path(serverapp, f"work/jobs/{job_id}")
    out.mkdir(parents=True, exist_ok=True)
    return out


def read_notebook(path: Path):
    import nbformat  # optional heavy dependency: only a job's server reads notebooks

    return nbformat.read(path, as_version=4) if path.is_file() else None


async def execute_notebook(serverapp, spec: dict, out_dir: Path, log: JobLog) -> tuple[str, str | None]:
    """Execute the job's notebook; (state, error) with state succeeded, failed or timed_out."""
    # optional heavy dependencies: nbformat and nbclient, only in a job's server
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    source = home_path(serverapp, spec["notebook"])
    nb = read_notebook(source)
    if nb is None:
        return "failed", f"The notebook ~/{spec['notebook']} does not exist."
    if spec.get("parameters"):
        from papermill.parameterize import parameterize_notebook  # optional heavy dependency: only with parameters

        for cell in nb.cells:  # papermill reads every cell's tags, and its own metadata
            cell.metadata.setdefault("tags", [])
        nb.metadata.setdefault("papermill", {})
        nb = parameterize_notebook(nb, spec["parameters"])
        log(f"parameters: {spec['parameters']}")
    output = out_dir / source.name
    kernel_name = (nb.metadata.get("kernelspec") or {}).get("name") or "python3"
    mkm = serverapp.kernel_manager
    parent = str(PurePosixPath(spec["notebook"]).parent)
    api_dir = "" if parent == "." else parent
    kernel_id = await mkm.start_kernel(kernel_name=kernel_name, path=api_dir)
    log(f"kernel {kernel_name} started ({kernel_id})")
    started = time.monotonic()

    def save() -> None:
        nbformat.write(nb, output)

    def on_cell_executed(cell, cell_index, execute_reply):
        text = cell_outputs_text(cell)
        status = (execute_reply or {}).get("content", {}).get("status", "ok")
        log(f"cell {cell_index} {status} after {time.monotonic() - started:.1f}s" + (f"\n{text}" if text else ""))
        save()

    client = NotebookClient(
        nb,
        km=mkm.get_kernel(kernel_id),
        timeout=None,  # the job's time limit covers the whole run, not each cell
        allow_errors=False,
        on_cell_executed=on_cell_executed,
        resources={"metadata": {"path": str(source.parent)}},
    )
    limit = spec["time_limit_seconds"]
    try:
        await asyncio.wait_for(client.async_execute(), timeout=limit)
        state, error = "succeeded", None
    except asyncio.TimeoutError:
        state, error = "timed_out", f"The run passed its time limit of {limit} s and was stopped."
    except CellExecutionError as e:
        state, error = "failed", f"{e.ename}: {e.evalue}"
    except Exception as e:  # the kernel died, a bad notebook...
        state, error = "failed", f"{type(e).__name__}: {e}"
        if time.monotonic() - started >= limit:  # nbclient reports the cancelled wait as a dead kernel
            state, error = "timed_out", f"The run passed its time limit of {limit} s and was stopped."
    finally:
        save()
        try:
            await mkm.shutdown_kernel(kernel_id, now=True)
        except Exception as e:
            log(f"kernel shutdown: {e}")
    return state, error


async def run_job(serverapp, gpu, job_id: str) -> str:
    """The whole job, from reading it to stopping this server; returns the final state."""
    out_dir = output_dir(serverapp, job_id)
    log = JobLog(out_dir / "job.log")
    state, error = "failed", None
    session_id = (gpu.session or {}).get("id")
    try:
        if not gpu.config.service_url or not session_id:
            raise RuntimeError("this server has no gpu service or session to run a job with")
        spec = await gpu._service("GET", f"api/v1/jobs/{job_id}")
        log(f"job {job_id}: {spec['notebook']} on {spec['profile']}, time limit {spec['time_limit_minutes']} min")
        spec["time_limit_seconds"] = round(float(spec["time_limit_minutes"]) * 60)
        await gpu._service("POST", f"api/v1/jobs/{job_id}/started", {"session_id": session_id})
        state, error = await execute_notebook(serverapp, spec, out_dir, log)
    except Exception as e:  # whatever happens, the server must stop and billing end
        error = f"The job could not run: {type(e).__name__}: {e}"
        serverapp.log.exception("jupyterhub-gpu: job %s could not run", job_id)
    log(f"end: {state}" + (f": {error}" if error else ""))
    if gpu.config.service_url and session_id:
        try:
            body = {"session_id": session_id, "state": state, "error": error}
            await gpu._service("POST", f"api/v1/jobs/{job_id}/finished", body)
        except (HTTPClientError, OSError, ValueError) as e:
            log(f"the gpu service did not take the end: {e}")
    log("stopping this server")
    log.close()
    await stop_own_server(serverapp.log, remove=True)
    return state


def start(serverapp, gpu) -> None:
    """Run the job of this server, if it is a job's server (``JUPYTERHUB_GPU_JOB_ID``)."""
    job_id = job_id_from_env()
    if not job_id:
        return None
    serverapp.log.info("jupyterhub-gpu: this server runs job %s", job_id)
    serverapp.io_loop.add_callback(run_job, serverapp, gpu, job_id)


class JobsProxyHandler(APIHandler):
    """The Lab's way to the service's jobs API: ``GET``/``POST`` below ``gpu/api/v1/jobs`` and ``pricing``.

    The Lab has no credentials for the service itself; this server calls it with
    its own token, which acts for the same user (the service applies the same
    permission rules as to any call).
    """

    @property
    def gpu(self):
        return self.settings["jupyterhub_gpu"]

    async def _forward(self, method: str, path: str, body=None) -> None:
        if not self.gpu.config.service_url:
            raise web.HTTPError(404, "No gpu service is configured for this server.")
        try:
            data = await self.gpu._service(method, f"api/v1/{path}", body)
        except HTTPClientError as e:
            message = str(e)
            if e.response is not None and e.response.body:
                try:
                    message = json.loads(e.response.body).get("message") or message
                except (ValueError, AttributeError):
                    pass
            raise web.HTTPError(e.code if 400 <= e.code < 500 else 502, message) from None
        except OSError as e:
            raise web.HTTPError(502, f"The gpu service is unreachable: {e}") from None
        self.finish(json.dumps(data))

    @web.authenticated
    async def get(self, path: str):
        if path not in ("jobs", "pricing") and not re.fullmatch(r"jobs/[0-9a-f]{12}", path):
            raise web.HTTPError(404)
        await self._forward("GET", path)

    @web.authenticated
    async def post(self, path: str):
        if path != "jobs" and not re.fullmatch(r"jobs/[0-9a-f]{12}/cancel", path):
            raise web.HTTPError(404)
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, "The body must be JSON.") from None
        await self._forward("POST", path, body)


def load_handlers(serverapp) -> None:
    """``gpu/api/v1/jobs…`` and ``gpu/api/v1/pricing`` for the Lab."""
    base = url_path_join(serverapp.web_app.settings["base_url"], "gpu/api/v1")
    serverapp.web_app.add_handlers(".*$", [(url_path_join(base, r"((?:jobs|pricing)(?:/[^?]*)?)"), JobsProxyHandler)])
