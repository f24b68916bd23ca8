"""The server extension: ``/gpu/api/v1/stats`` and friends, the sampler, and the push to the service.

Everything a student's JupyterLab shows about cost and GPUs comes through
``GET /gpu/api/v1/stats``: the latest GPU sample (never read per request), the
session's cost so far, and the budget and notices the service reported at its
last exchange with this server.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import json
import os
from datetime import datetime, timezone
from decimal import Decimal

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.ioloop import IOLoop, PeriodicCallback
from traitlets import Float, Unicode
from traitlets.config import Configurable

from jupyterhub_gpu.billing import minutes_so_far
from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.env import (
    devices_from_env,
    gpu_count_from_env,
    lab_session_from_env,
    reader_from_env,
    service_url_from_env,
    share_label,
    tensorboard_url_from_env,
)
from jupyterhub_gpu.gpus.backends import reader_backend
from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.gpus.simulated import KernelActivity
from jupyterhub_gpu.serverext import jobs, startup, stopwhendone
from jupyterhub_gpu.serverext.kernels import count_kernels
from jupyterhub_gpu.serverext.sampler import Sampler
from jupyterhub_gpu.serverext.stopwhendone import hub_stop_request
from jupyterhub_gpu.tensorboard import tensorboard_url


class GPUStats(Configurable):
    """Settings of the jupyterhub-gpu server extension (``c.GPUStats.*`` in the server's config)."""

    interval = Float(2.0, help="Seconds between GPU samples.").tag(config=True)
    history_seconds = Float(3600, help="Seconds of samples kept for the panel's charts.").tag(config=True)
    push_interval = Float(30, help="Seconds between pushes of samples to the gpu service.").tag(config=True)
    service_url = Unicode(
        help="The gpu service's URL as this server reaches it (default: $JUPYTERHUB_GPU_SERVICE_URL)."
    ).tag(config=True)
    tensorboard_url = Unicode(
        help="Path of TensorBoard for the Lab button (default: <base_url>tensorboard/ where it is installed)."
    ).tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.service_url:
            self.service_url = service_url_from_env()
        if not self.tensorboard_url:
            self.tensorboard_url = tensorboard_url_from_env() or tensorboard_url(getattr(self.parent, "base_url", "/"))


def session_cost(session: dict, now: datetime) -> tuple[int, Decimal]:
    """(minutes billed, cost so far): every started minute, the first at the start."""
    started = datetime.fromisoformat(session["started"].replace("Z", "+00:00"))
    minutes = minutes_so_far(started, now)
    return minutes, minutes * Decimal(session["rate_per_minute"])


def budget_summary(me: dict | None, session: dict) -> dict:
    """The tightest budget from the service's ``GET me``: remaining, unit, minutes it lasts."""
    if not me or not me.get("budgets"):
        return {"budget_remaining": None, "budget_unit": None, "budget_minutes_left": None}
    rate = Decimal(session["rate_per_minute"])
    gpus = gpu_count_from_env()
    # only the budgets this session draws from: its user's and its pool's, and only while they bind
    mine = [s for s in me.get("active_sessions") or () if s.get("id") == session.get("id")]
    pool = mine[0].get("pool") if mine else None
    best = None
    for b in me["budgets"]:
        if b.get("state", "current") != "current" or (mine and b.get("scope") == "group" and b["subject"] != pool):
            continue
        remaining = Decimal(b["remaining"])
        if b["unit"] == "money":
            minutes = int(remaining / rate) if rate > 0 else None
        else:
            minutes = int(remaining * 60 / gpus) if gpus else None
        key = minutes if minutes is not None else 10**12
        if best is None or key < best[0]:
            best = (key, b, minutes)
    if best is None:
        return {"budget_remaining": None, "budget_unit": None, "budget_minutes_left": None}
    _, b, minutes = best
    return {"budget_remaining": b["remaining"], "budget_unit": b["unit"], "budget_minutes_left": minutes}


#: Pushes kept for the service while it answers 503 (ten minutes at the default 30 s); older ones are dropped.
UNSENT_MAX = 20


def retry_after(value: str | None, default: float = 5.0) -> float:
    """The seconds of a ``Retry-After`` header (1 to 300; ``default`` when absent or not a number)."""
    try:
        seconds = float(value) if value is not None else default
    except ValueError:
        seconds = default
    return min(max(seconds, 1.0), 300.0) if seconds == seconds else default


class GPUExtension:
    """State of the extension in one server: sampler, session, last word from the service."""

    def __init__(self, serverapp, config: GPUStats):
        self.serverapp = serverapp
        self.config = config
        self.session = lab_session_from_env()
        self.devices = devices_from_env()
        self.simulated = bool(self.session and self.session["simulated"])
        self.activity = KernelActivity()
        self.last_kernel_activity: datetime | None = None
        self.reason: str | None = None
        # pushes the service answered 503 (it stored nothing): sent again, oldest first, before the next one
        self.unsent: collections.deque[dict] = collections.deque(maxlen=UNSENT_MAX)
        self._pushing = asyncio.Lock()
        self.service_me: dict | None = None
        self.service_available = False
        self.sampler: Sampler | None = None
        if not self.devices:
            self.reason = (
                "No GPU is assigned to this server (CPU-only profile)."
                if self.session
                else "This server was not started by jupyterhub-gpu: no GPU is assigned to it."
            )
        else:
            # the reader of the spawner's GPU backend (jupyterhub_gpu.gpus.backends): NVML, the simulation, ...
            backend = reader_backend(reader_from_env())
            try:
                reader = backend.open_reader(self.devices, lambda: self.activity, os.environ)
            except Exception as e:
                self.reason = f"{backend.label or backend.name} is unavailable: {type(e).__name__}: {e}"
            else:
                self.sampler = Sampler(reader, config.interval, config.history_seconds)

    def start(self):
        self.update_activity()
        if self.sampler:
            self.sampler.sample_once()
            self.sampler.start()
        self._activity_cb = PeriodicCallback(self.update_activity, self.config.interval * 1000)
        self._activity_cb.start()
        if self.config.service_url and self.session:
            self._push_cb = PeriodicCallback(self.exchange_with_service, self.config.push_interval * 1000)
            self._push_cb.start()
            self.serverapp.io_loop.add_callback(self.exchange_with_service)

    def update_activity(self):
        """Count running and busy kernels (on the event loop, where the kernel manager lives)."""
        count = count_kernels(self.serverapp.kernel_manager)
        self.activity = KernelActivity(kernels=count.running, busy=count.busy)
        if count.last_activity is not None:
            self.last_kernel_activity = count.last_activity

    # -- the service ---------------------------------------------------------------
    async def _service(self, method: str, path: str, body=None):
        url = url_path_join(self.config.service_url, path)
        request = HTTPRequest(
            url,
            method=method,
            headers={
                "Authorization": f"token {os.environ.get('JUPYTERHUB_API_TOKEN', '')}",
                "Content-Type": "application/json",
            },
            body=json.dumps(body) if body is not None else None,
            request_timeout=10,
            follow_redirects=False,
        )
        response = await AsyncHTTPClient().fetch(request)
        return json.loads(response.body) if response.body else None

    def last_activity(self) -> str | None:
        """The server's own last activity (API requests, kernels, terminals), as the hub sees it."""
        try:
            moment = self.serverapp.web_app.last_activity()
        except Exception:
            return None
        return isoformat(moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc))

    def sample_payload(self) -> dict:
        summary = self.sampler.take_aggregate() if self.sampler else {"samples": 0, "gpus": []}
        return {
            "session_id": self.session["id"],
            "sampled_until": isoformat(utcnow()),
            "interval_seconds": self.config.push_interval,
            "kernels": self.activity.kernels,
            "busy_kernels": self.activity.busy,
            "last_kernel_activity": isoformat(self.last_kernel_activity) if self.last_kernel_activity else None,
            "last_activity": self.last_activity(),
            **summary,
        }

    async def push_samples(self) -> None:
        """Send the kept pushes, oldest first. A 503 means the service stored nothing (its writer is behind):
        that push stays, and is sent again after the ``Retry-After`` it names (or with the next push); any
        other answer ends it (a refusal would be refused again)."""
        async with self._pushing:
            while self.unsent:
                try:
                    await self._service("POST", "api/v1/samples", self.unsent[0])
                except HTTPClientError as e:
                    if e.code != 503:
                        self.unsent.popleft()
                        raise
                    retry = retry_after(e.response.headers.get("Retry-After") if e.response else None)
                    if retry < self.config.push_interval:
                        IOLoop.current().call_later(retry, self._push_again)
                    raise
                self.unsent.popleft()

    async def _push_again(self) -> None:
        try:
            await self.push_samples()
        except (HTTPClientError, OSError, ValueError) as e:
            self.serverapp.log.warning("jupyterhub-gpu: the gpu service did not take the samples again: %s", e)

    async def exchange_with_service(self):
        """Push the samples since the last push (after any the service asked for again), and fetch the budget
        and notices."""
        self.unsent.append(self.sample_payload())
        try:
            await self.push_samples()
            self.service_me = await self._service("GET", "api/v1/me")
            self.service_available = True
        except (HTTPClientError, OSError, ValueError) as e:
            self.service_available = False
            self.serverapp.log.warning("jupyterhub-gpu: the gpu service is unreachable: %s", e)

    # -- the stats -----------------------------------------------------------------
    def _history_json(self, sampled_at, history) -> str:
        """The chart history as JSON, formatted once per sample (not once per request)."""
        key = (sampled_at, len(history))
        if self._history_cache[0] != key:
            points = [
                {
                    "t": isoformat(datetime.fromtimestamp(t, timezone.utc)),
                    "utilization_percent": util,
                    "memory_used_mib": used,
                    "memory_total_mib": total,
                }
                for t, util, used, total in history
            ]
            self._history_cache = (key, json.dumps(points))
        return self._history_cache[1]

    _history_cache: tuple = (None, "[]")

    def stats_json(self, with_history: bool = True) -> str:
        """The stats as JSON text; the history (up to an hour of points) is spliced in from its cache."""
        data = self.stats(with_history=False)
        if not with_history:
            return json.dumps(data)
        _, sampled_at, history, _ = self.sampler.snapshot() if self.sampler else ([], None, [], None)
        body = json.dumps(data)
        return body[:-1] + ', "history": ' + self._history_json(sampled_at, history) + "}"

    def stats(self, with_history: bool = True) -> dict:
        now = utcnow()
        readings, sampled_at, history, error = self.sampler.snapshot() if self.sampler else ([], None, [], None)
        session = None
        if self.session:
            minutes, cost = session_cost(self.session, now)
            session = {
                **{k: v for k, v in self.session.items() if k != "simulated"},
                "minutes_billed": minutes,
                "cost": format(cost.normalize(), "f") if cost else "0",  # never "2.4E+4"
                **budget_summary(self.service_me, self.session),
                # live right-sizing advice, as the service serves it with the session (docs/advice.md)
                "advice": (self._service_session() or {}).get("advice"),
            }
        data = {
            "simulated": self.simulated,
            "reason": self.reason or (f"The last GPU reading failed: {error}" if error else None),
            "sampled_at": isoformat(datetime.fromtimestamp(sampled_at, timezone.utc)) if sampled_at else None,
            "interval_seconds": self.config.interval,
            "gpus": [self._gpu_json(r) for r in readings],
            "session": session,
            "kernels": {"running": self.activity.kernels, "busy": self.activity.busy},
            "notices": (self.service_me or {}).get("notices", []),
            "service_available": self.service_available,
            "tensorboard_url": self.config.tensorboard_url or None,
        }
        if with_history:
            data["history"] = json.loads(self._history_json(sampled_at, history))
        return data

    def _gpu_json(self, reading) -> dict:
        """A reading as the stats show it, with its unit's ``share``: "1/4", "mig:1g.10gb" or "" (a whole GPU).

        On a share or slice ``memory_used_mib`` is the server's own and ``memory_total_mib`` its cap;
        ``gpu_utilization_percent`` (and ``gpu_memory_*``) are the whole GPU's; ``scope`` says what
        ``utilization_percent`` measures ("own" processes or the whole "gpu"); ``shared_by`` how many
        servers share the GPU, where the reader knows it.
        """
        unit = self._devices_by_uuid.get(reading.uuid)
        data = {**reading.to_dict(), "share": unit_share_text(unit)}
        if data["shared_by"] is None and unit is not None and unit.is_share:
            # NVML does not know the hub's shares; the service does (its open sessions on this GPU, GET me)
            shared_by = (self._service_session() or {}).get("shared_by")
            if isinstance(shared_by, int) and not isinstance(shared_by, bool) and shared_by > 0:
                data["shared_by"] = shared_by
        return data

    def _service_session(self) -> dict | None:
        """This session as the service's ``GET me`` last listed it, or None."""
        if not self.session:
            return None
        return next(
            (s for s in (self.service_me or {}).get("active_sessions", []) if s.get("id") == self.session["id"]),
            None,
        )

    @property
    def _devices_by_uuid(self) -> dict[str, GPUDevice]:
        return {d.uuid: d for d in self.devices}

    def stop(self):
        if self.sampler:
            sampler, self.sampler = self.sampler, None
            sampler.stop()  # closes the reader: a simulated share's state file goes (its neighbours stop counting it)


def unit_share_text(device: GPUDevice | None) -> str:
    """ "1/4" for a time-sliced share, "mig:1g.10gb" for a MIG slice, "" for a whole GPU (as the spawner says)."""
    return share_label([device]) if device is not None else ""


class BaseGPUHandler(APIHandler):
    @property
    def gpu(self) -> GPUExtension:
        return self.settings["jupyterhub_gpu"]


class StatsHandler(BaseGPUHandler):
    # the Lab extension polls this every few seconds: that is not the user doing anything
    _track_activity = False

    @web.authenticated
    def get(self):
        """The latest sample; ``?history=0`` leaves out the chart history (up to an hour of points)."""
        with_history = self.get_argument("history", "1") not in ("0", "false", "no")
        self.finish(self.gpu.stats_json(with_history))


class DismissNoticeHandler(BaseGPUHandler):
    @web.authenticated
    async def post(self, notice_id):
        if not self.gpu.config.service_url:
            raise web.HTTPError(404, "No gpu service is configured for this server.")
        try:
            await self.gpu._service("POST", f"api/v1/me/notices/{int(notice_id)}/dismiss", {})
        except HTTPClientError as e:
            raise web.HTTPError(e.code if 400 <= e.code < 500 else 502, f"The gpu service said: {e}") from None
        self.gpu.service_me = None
        self.finish(json.dumps({"dismissed": int(notice_id)}))


class StopHandler(BaseGPUHandler):
    """Stop this server (and its billing) through the hub, with the server's own token.

    The answer (202) goes out before the hub is asked: the hub's stop ends this
    very process, which would otherwise cut the request off mid-answer.
    """

    @web.authenticated
    def post(self):
        request = hub_stop_request()
        if request is None:
            raise web.HTTPError(400, "This server was not started by JupyterHub.")
        log = self.log

        async def ask_hub():
            try:
                await AsyncHTTPClient().fetch(request)
            except HTTPClientError as e:
                if e.code != 599:  # 599: this server went away while the hub stopped it
                    log.error("jupyterhub-gpu: the hub refused to stop this server: %s", e)
            except OSError:
                pass

        self.set_status(202)
        self.finish(json.dumps({"stopping": True}))
        IOLoop.current().add_callback(ask_hub)


def load(serverapp) -> GPUExtension:
    config = GPUStats(parent=serverapp)
    extension = GPUExtension(serverapp, config)
    base = url_path_join(serverapp.web_app.settings["base_url"], "gpu/api/v1")
    serverapp.web_app.settings["jupyterhub_gpu"] = extension
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "stats"), StatsHandler),
            (url_path_join(base, r"notices/(\d+)/dismiss"), DismissNoticeHandler),
            (url_path_join(base, "stop"), StopHandler),
        ],
    )
    extension.start()
    atexit.register(extension.stop)  # jupyter_server stops no module extension: close the reader as it exits
    startup.start(serverapp)  # the user's ~/work/.jupyterhub-gpu/startup.sh (docs/images.md)
    stopwhendone.load(serverapp, extension)  # "stop when done" (docs/jobs.md)
    jobs.load_handlers(serverapp)  # the Lab's "Run notebook as a GPU job" and job list
    jobs.start(serverapp, extension)  # a notebook job's server runs its job
    serverapp.log.info(
        "jupyterhub-gpu server extension: %s",
        extension.reason or f"{len(extension.devices)} GPU(s){' (simulated)' if extension.simulated else ''}",
    )
    return extension
