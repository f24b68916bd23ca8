"""Stop when done: a flag that stops this server (and its billing) when its running cells finish.

The Lab's toggle (status bar, panel, command palette) sets the flag through
``POST /gpu/api/v1/stop-when-done``. From then on the watcher looks at the
server's own kernels once a second:

``armed``
    waiting for the flagged run: once a kernel has been busy since the flag,
    and every kernel has then been idle for ``settle_seconds`` (cells queued one
    after another leave short idle gaps), the run is over;
``saving``
    the Lab sees this state in its poll, saves the open notebooks and answers
    ``POST stop-when-done/saved``; without an open Lab the stop comes after
    ``save_grace_seconds``;
``stopping``
    the server tells the gpu service (the ledger's stop reason becomes
    ``stop_when_done``) and asks the hub, with its own token, to stop it.

The hub API call is the same one the "Stop my server" button makes: the
server's token holds only the scopes on its own server (``servers!server``).

``POST stop-when-done/now {"reason": "plateau"}`` skips the wait for the run:
``PlateauStop(stop_server=True)`` in a kernel of this server (with the server's
token from the kernel's environment) calls it once its checkpoint is saved. The
server goes to ``saving`` at once (the Lab saves the open notebooks) and then
stops with the ledger's stop reason ``plateau``.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.ioloop import IOLoop, PeriodicCallback
from traitlets import Float
from traitlets.config import Configurable

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.serverext.kernels import count_kernels

STATES = ("off", "armed", "saving", "stopping")
#: The reasons a kernel may give for ``stop-when-done/now`` (the ledger's stop reasons).
NOW_REASONS = ("plateau",)


class GPUStopWhenDone(Configurable):
    """Settings of "stop when done" (``c.GPUStopWhenDone.*`` in the server's config)."""

    settle_seconds = Float(
        5, help="Seconds every kernel must have been idle before the flagged run counts as finished."
    ).tag(config=True)
    save_grace_seconds = Float(15, help="Seconds the Lab has to save the open notebooks before the server stops.").tag(
        config=True
    )
    check_interval = Float(1, help="Seconds between looks at the kernels.").tag(config=True)


def hub_stop_request(remove: bool = False) -> HTTPRequest | None:
    """The hub API request that stops this server with its own token; None when JupyterHub did not start it.

    ``remove`` also deletes a named server (a finished job's).
    """
    api_url = os.environ.get("JUPYTERHUB_API_URL")
    user = os.environ.get("JUPYTERHUB_USER")
    if not api_url or not user:
        return None
    name = os.environ.get("JUPYTERHUB_SERVER_NAME", "")
    path = f"users/{quote(user, safe='')}/server"
    if name:
        path = f"users/{quote(user, safe='')}/servers/{quote(name, safe='')}"
    return HTTPRequest(
        url_path_join(api_url, path),
        method="DELETE",
        headers={"Authorization": f"token {os.environ.get('JUPYTERHUB_API_TOKEN', '')}"},
        body=json.dumps({"remove": True}) if remove else None,
        allow_nonstandard_methods=True,
        request_timeout=30,
    )


async def stop_own_server(log, remove: bool = False) -> bool:
    """Ask the hub to stop this server with the server's own token; True when the hub took the request."""
    request = hub_stop_request(remove)
    if request is None:
        log.error("jupyterhub-gpu: not started by JupyterHub; cannot stop this server through the hub")
        return False
    for _attempt in range(30):
        try:
            await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            if e.code == 599:  # this server went away while the hub stopped it
                return True
            if e.code == 400:  # the hub is still finishing this server's spawn: ask again
                await asyncio.sleep(2)
                continue
            log.error("jupyterhub-gpu: the hub refused to stop this server: %s", e)
            return False
        except OSError:
            return True  # the connection ended with this process
        return True
    log.error("jupyterhub-gpu: the hub kept refusing to stop this server")
    return False


class StopWhenDone:
    """The flag and its watcher, in one server."""

    def __init__(self, serverapp, gpu, config: GPUStopWhenDone):
        self.serverapp = serverapp
        self.gpu = gpu  # the GPUExtension: the session and the gpu service
        self.config = config
        self.state = "off"
        self.flagged_at: datetime | None = None
        self.ran = False  # a kernel was busy (or active) since the flag
        self.deadline: datetime | None = None
        self.reported: bool | None = None  # the service took the stop reason
        self.reason = "stop_when_done"  # the ledger's stop reason of this stop
        self._callback: PeriodicCallback | None = None

    # -- the kernels ---------------------------------------------------------------
    def kernels(self) -> tuple[int, datetime | None]:
        """(busy kernels, the latest kernel activity)."""
        count = count_kernels(self.serverapp.kernel_manager)
        return count.busy, count.last_activity

    # -- the flag --------------------------------------------------------------------
    def flag(self, enabled: bool) -> None:
        if enabled and self.state == "off":
            self.state = "armed"
            self.flagged_at = utcnow()
            busy, _ = self.kernels()
            self.ran = busy > 0
            self._start()
        elif not enabled and self.state in ("armed", "saving"):
            self.state = "off"
            self.flagged_at = self.deadline = None
            self.ran = False

    def stop_now(self, reason: str) -> None:
        """Stop without waiting for a run (a kernel asked: ``reason``); the Lab saves first."""
        if self.state in ("saving", "stopping"):
            return
        self.reason = reason
        self.state = "saving"
        self.flagged_at = utcnow()
        self.deadline = self.flagged_at + _seconds(self.config.save_grace_seconds)
        self.serverapp.log.info(
            "jupyterhub-gpu: a kernel asked to stop this server (%s); saving, then stopping", reason
        )
        self._start()

    def saved(self) -> None:
        """The Lab saved its notebooks: stop now."""
        if self.state == "saving":
            self.deadline = utcnow()
            self.check()

    def _start(self) -> None:
        if self._callback is None:
            self._callback = PeriodicCallback(self.check, self.config.check_interval * 1000)
            self._callback.start()

    def check(self) -> None:
        now = utcnow()
        if self.state == "armed":
            busy, last = self.kernels()
            if busy or (last is not None and last > self.flagged_at):
                self.ran = True
            if self.ran and not busy and (last is None or (now - last).total_seconds() >= self.config.settle_seconds):
                self.state = "saving"
                self.deadline = now + _seconds(self.config.save_grace_seconds)
                self.serverapp.log.info("jupyterhub-gpu: the flagged run finished; saving, then stopping")
        elif self.state == "saving" and now >= self.deadline:
            self.state = "stopping"
            IOLoop.current().add_callback(self.stop)

    async def stop(self) -> None:
        log = self.serverapp.log
        session = self.gpu.session
        if session and self.gpu.config.service_url:
            try:
                body = {"session_id": session["id"]}
                if self.reason != "stop_when_done":
                    body["reason"] = self.reason
                await self.gpu._service("POST", "api/v1/stop-when-done", body)
                self.reported = True
            except (HTTPClientError, OSError, ValueError) as e:
                self.reported = False
                log.warning("jupyterhub-gpu: the gpu service did not take the stop reason: %s", e)
        log.info("jupyterhub-gpu: stop when done (%s): stopping this server", self.reason)
        if not await stop_own_server(log):
            self.state = "off"  # tell the Lab; the user can stop by hand
            self.reason = "stop_when_done"

    def to_dict(self) -> dict:
        busy, _ = self.kernels()
        return {
            "state": self.state,
            "reason": self.reason,
            "flagged_at": isoformat(self.flagged_at) if self.flagged_at else None,
            "run_seen": self.ran,
            "busy_kernels": busy,
            "deadline": isoformat(self.deadline) if self.deadline else None,
            "settle_seconds": self.config.settle_seconds,
            "save_grace_seconds": self.config.save_grace_seconds,
        }


def _seconds(value: float):
    return timedelta(seconds=value)


class StopWhenDoneHandler(APIHandler):
    """``GET``: the flag's state; ``POST {"enabled": true|false}``: set or clear it."""

    @property
    def watcher(self) -> StopWhenDone:
        return self.settings["jupyterhub_gpu_stop_when_done"]

    @web.authenticated
    def get(self):
        self.finish(json.dumps(self.watcher.to_dict()))

    @web.authenticated
    def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            raise web.HTTPError(400, 'The body must be JSON: {"enabled": true} or {"enabled": false}') from None
        if not isinstance(body, dict) or set(body) != {"enabled"} or not isinstance(body["enabled"], bool):
            raise web.HTTPError(400, 'The body must be {"enabled": true} or {"enabled": false}')
        if self.watcher.state == "stopping":
            raise web.HTTPError(409, "This server is already stopping.")
        self.watcher.flag(body["enabled"])
        self.finish(json.dumps(self.watcher.to_dict()))


class StopWhenDoneSavedHandler(StopWhenDoneHandler):
    """``POST saved``: the Lab saved its open notebooks; the server may stop now."""

    @web.authenticated
    def get(self):
        raise web.HTTPError(405)

    @web.authenticated
    def post(self):
        self.watcher.saved()
        self.finish(json.dumps(self.watcher.to_dict()))


class StopNowHandler(StopWhenDoneHandler):
    """``POST now {"reason": "plateau"}``: a kernel of this server asks it to save and stop now."""

    @web.authenticated
    def get(self):
        raise web.HTTPError(405)

    @web.authenticated
    def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or set(body) != {"reason"} or body["reason"] not in NOW_REASONS:
            raise web.HTTPError(400, f'The body must be {{"reason": ...}} with a reason among {", ".join(NOW_REASONS)}')
        if self.watcher.state == "stopping":
            raise web.HTTPError(409, "This server is already stopping.")
        self.watcher.stop_now(body["reason"])
        self.finish(json.dumps(self.watcher.to_dict()))


class RestartBiggerHandler(StopWhenDoneHandler):
    """``POST restart-bigger {"profile": slug}``: restart this server on the bigger profile its notice named.

    The Lab has saved the open notebooks. The gpu service is asked with this server's own token and
    session; it takes only the next bigger profile the user may use, answers 202, then stops this server
    and starts it on that profile (docs/user.md). Its refusal (400, 403, 409) comes back as it is.
    """

    @web.authenticated
    def get(self):
        raise web.HTTPError(405)

    @web.authenticated
    async def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or set(body) != {"profile"} or not isinstance(body["profile"], str):
            raise web.HTTPError(400, 'The body must be {"profile": "<the bigger profile named by the notice>"}')
        gpu = self.watcher.gpu
        if not gpu.config.service_url or not gpu.session:
            raise web.HTTPError(404, "No gpu service is configured for this server.")
        if self.watcher.state == "stopping":
            raise web.HTTPError(409, "This server is already stopping.")
        try:
            answer = await gpu._service(
                "POST", "api/v1/restart-bigger", {"session_id": gpu.session["id"], "profile": body["profile"]}
            )
        except HTTPClientError as e:
            said = _service_message(e)
            raise web.HTTPError(e.code if 400 <= e.code < 500 else 502, f"The gpu service said: {said}") from None
        self.set_status(202)
        self.finish(json.dumps(answer))


def _service_message(error: HTTPClientError) -> str:
    """The ``message`` of the gpu service's JSON error answer, or the error itself."""
    try:
        return str(json.loads(error.response.body)["message"])
    except (AttributeError, TypeError, ValueError, KeyError):
        return str(error)


def load(serverapp, gpu) -> StopWhenDone:
    """Register the handlers under ``gpu/api/v1/stop-when-done``; the watcher starts with the first flag."""
    watcher = StopWhenDone(serverapp, gpu, GPUStopWhenDone(parent=serverapp))
    serverapp.web_app.settings["jupyterhub_gpu_stop_when_done"] = watcher
    base = url_path_join(serverapp.web_app.settings["base_url"], "gpu/api/v1")
    serverapp.web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "stop-when-done"), StopWhenDoneHandler),
            (url_path_join(base, "stop-when-done/saved"), StopWhenDoneSavedHandler),
            (url_path_join(base, "stop-when-done/now"), StopNowHandler),
            (url_path_join(base, "restart-bigger"), RestartBiggerHandler),
        ],
    )
    return watcher
