"""The one JupyterHub REST API client of the service (tornado's AsyncHTTPClient).

No other module of the service builds a hub URL: each request the service makes
of the hub is a method here (users, groups, start, stop and remove a server).
Each says what it needs of the service's role, so that a refusal names the
missing scope and where to add it (:func:`refusal_message`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyterhub_gpu.i18n import LANGUAGES

PAGINATION = "application/jupyterhub-pagination+json"
#: The hub's API when the hub does not say (``JUPYTERHUB_API_URL``, set for every managed service).
DEFAULT_API_URL = "http://127.0.0.1:8081/hub/api"
#: Where the service's scopes are granted, as a refusal names it.
ROLE_HINT = (
    'add it to the scopes of the service\'s role (c.JupyterHub.load_roles, the role with "services": ["gpu"],'
    " docs/service.md) and restart the hub"
)
#: JupyterHub's 403 names the scopes it wanted: "... requires any of [list:users]"
_REQUIRES_RE = re.compile(r"requires any of \[([^\]]*)\]")


def refusal_message(method: str, path: str, code: int | None, hub_message: str, needs: tuple[str, ...], purpose: str):
    """What a failed hub request means and what to do about it, from its status and the hub's own message.

    ``needs`` are the scopes the request takes and ``purpose`` what the service makes it for; the scopes
    the hub names in its refusal win over ``needs`` (the hub knows which it checked).
    """
    said = f"{method} {path}: HTTP {code}" + (f" ({hub_message})" if hub_message else "")
    if code == 403:
        named = _REQUIRES_RE.search(hub_message or "")
        missing = [x.strip() for x in named.group(1).split(",") if x.strip()] if named else list(needs)
        if not named and "credentials" in (hub_message or "").lower():
            return (
                f"{said}: the hub refused the gpu service's token, needed {purpose}. A managed service gets its"
                " token from the hub ($JUPYTERHUB_API_TOKEN); an external one's must be the api_token of its entry"
                " in c.JupyterHub.services"
            )
        return f"{said}: the gpu service's role lacks the scope {' or '.join(missing)}, needed {purpose}: {ROLE_HINT}"
    if code == 401:
        return f"{said}: the hub does not know the gpu service's token ($JUPYTERHUB_API_TOKEN), needed {purpose}"
    if code is not None and code >= 500:
        return f"{said}: the hub failed {purpose}; its log says why"
    return f"{said} ({purpose})"


class HubAPIError(RuntimeError):
    """The hub answered with an error, or could not be reached (the message says which, and what to do)."""

    def refusal(self) -> tuple[int, str]:
        """The status and message of the hub's refusal (e.g. a budget that cannot pay, an unknown profile).

        A 4xx of the hub keeps its status and the hub's own message; anything else is a 502, and so is
        the hub's refusal of the service itself (its token or its role: the caller can do nothing about
        it), with this error's message, which names the fix for the administrator.
        """
        cause = self.__cause__
        code = getattr(cause, "code", 502) or 502
        hub_message = _hub_message(cause) if isinstance(cause, HTTPClientError) else ""
        if code in (401, 403) and (_REQUIRES_RE.search(hub_message) or "credentials" in hub_message.lower()):
            return 502, str(self)
        return (code if 400 <= code < 500 else 502), hub_message or str(self)


@dataclass(frozen=True)
class ActiveListing:
    """What the hub lists as running (:meth:`HubClient.active_listing`)."""

    #: each active server as ``{"user", "name", "groups", "server"}``
    servers: list[dict]
    #: the users it lists as active with no server shown. JupyterHub lists a user as active when a server of
    #: theirs is in its database, and shows the servers of the spawners it has loaded: a hub whose start is
    #: not over may not have loaded them yet. Their servers are unknown, not gone.
    unshown: frozenset[str] = frozenset()


class HubClient:
    def __init__(self, api_url: str, token: str, timeout: float = 30):
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.requests = 0

    @classmethod
    def from_env(cls, timeout: float = 30) -> HubClient:
        """The client of a hub-managed service: ``JUPYTERHUB_API_URL`` and the service's ``JUPYTERHUB_API_TOKEN``."""
        return cls(
            os.environ.get("JUPYTERHUB_API_URL", DEFAULT_API_URL), os.environ.get("JUPYTERHUB_API_TOKEN", ""), timeout
        )

    async def request(
        self,
        method: str,
        path: str,
        body=None,
        params=None,
        accept="application/json",
        needs: tuple[str, ...] = (),
        purpose: str = "by the gpu service",
        language: str | None = None,
    ):
        """The hub's JSON answer; None for a 404 of a GET or DELETE (no such user, group or server).

        Raises :class:`HubAPIError` naming what the refusal means (``needs``: the scopes of the service's
        role the request takes; ``purpose``: what for), or that the hub could not be reached.
        """
        url = f"{self.api_url}{path}"
        if params:
            url += "?" + urlencode(params)
        request = HTTPRequest(
            url,
            method=method,
            headers={
                "Authorization": f"token {self.token}",
                "Accept": accept,
                "Content-Type": "application/json",
                # the language of the user a request acts for (a spawn on their behalf speaks it)
                **({"Accept-Language": language} if language else {}),
            },
            body=json.dumps(body) if body is not None else (b"" if method in ("POST", "PUT", "PATCH") else None),
            allow_nonstandard_methods=True,
            request_timeout=self.timeout,
        )
        self.requests += 1
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            if e.code == 404 and method in ("GET", "DELETE"):
                return None
            if e.code == 599:  # tornado's own: a time-out or a connection closed without an answer
                raise HubAPIError(f"{method} {path}: the hub did not answer at {self.api_url}: {e}") from e
            raise HubAPIError(refusal_message(method, path, e.code, _hub_message(e), needs, purpose)) from e
        except OSError as e:
            raise HubAPIError(f"{method} {path}: the hub cannot be reached at {self.api_url}: {e}") from e
        return json.loads(response.body) if response.body else None

    async def active_servers(self, page_size: int = 200) -> list[dict]:
        """Every active server as ``{"user", "name", "groups", "server"}``, page by page."""
        return (await self.active_listing(page_size)).servers

    async def active_listing(self, page_size: int = 200) -> ActiveListing:
        """The hub's active servers (:meth:`active_servers`) and the users it lists without them, page by page."""
        servers, unshown = [], set()
        offset = 0
        while True:
            page = await self.request(
                "GET",
                "/users",
                params={"state": "active", "offset": offset, "limit": page_size},
                accept=PAGINATION,
                needs=LIST_SERVERS,
                purpose="to list the running servers (reconciliation with the ledger)",
            )
            items = page["items"] if isinstance(page, dict) else (page or [])
            if any("servers" not in user for user in items):
                # every user listed as active has a server: without read:servers the hub leaves them out, and
                # every open session would look stopped
                raise HubAPIError(
                    "GET /users: the hub lists active users without their servers: the gpu service's role lacks"
                    f" the scope read:servers, needed to see which servers run: {ROLE_HINT}"
                )
            for user in items:
                if not user.get("servers"):
                    unshown.add(user["name"])
                for name, server in (user.get("servers") or {}).items():
                    servers.append(
                        {"user": user["name"], "name": name, "groups": user.get("groups", []), "server": server}
                    )
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt or not items:
                return ActiveListing(servers, frozenset(unshown))
            offset = nxt["offset"]

    async def user(self, name: str) -> dict | None:
        """A user's model (groups, servers), or None when the hub has no such user."""
        path = f"/users/{quote(name, safe='')}"
        model = await self.request("GET", path, needs=("read:users",), purpose="to read a user's groups and servers")
        # the hub leaves out what the token may not read: a user without groups or servers is not what it says
        for key, scope in (("groups", "read:users"), ("servers", "read:servers")):
            if model is not None and key not in model:
                raise HubAPIError(
                    f"GET {path}: the hub answers without the user's {key}: the gpu service's role lacks the scope"
                    f" {scope}, needed to read a user's groups and servers: {ROLE_HINT}"
                )
        return model

    async def stop_server(self, user: str, server_name: str = "") -> None:
        await self.request(
            "DELETE",
            _server_path(user, server_name),
            needs=("delete:servers",),
            purpose="to stop a server (budget, culling, jobs)",
        )

    async def remove_server(self, user: str, server_name: str) -> None:
        """Stop a named server and delete it, as a job's server is when the job is over."""
        await self.request(
            "DELETE",
            _server_path(user, server_name),
            body={"remove": True},
            needs=("delete:servers",),
            purpose="to stop and remove a job's server",
        )

    async def group(self, name: str) -> dict | None:
        """A group's model, or None when the hub has no such group."""
        return await self.request(
            "GET", f"/groups/{quote(name, safe='')}", needs=("read:groups",), purpose="to check that a group exists"
        )

    async def start_server(
        self, user: str, server_name: str, user_options: dict, display_name: str = "", language: str | None = None
    ) -> None:
        """Ask the hub to start a named server with these options (the spawner's budget and queue checks apply).

        ``language``: the user's (``en`` or ``zh-CN``), sent as the request's ``Accept-Language``, so that the
        spawn, and the notices of its session, speak the user's language and not the service's default.

        A 4xx keeps the hub's own message (:meth:`HubAPIError.refusal`): a budget that cannot pay, an
        unknown profile, named servers that are off (``c.JupyterHub.allow_named_servers``).
        """
        body: dict = {"user_options": user_options}
        if display_name:
            body["display_name"] = display_name
        await self.request(
            "POST",
            _server_path(user, server_name),
            body=body,
            needs=("start:servers",),
            purpose="to start a server (a notebook job's, one restarted on a bigger profile, or one preempted)",
            language=language if language in LANGUAGES else None,
        )


#: What listing the running servers takes of the service's role.
LIST_SERVERS = ("list:users", "read:servers")


def _hub_message(error: HTTPClientError) -> str:
    """The ``message`` of the hub's JSON error answer, or its text, or ''."""
    response = error.response
    if response is None or not response.body:
        return ""
    try:
        return str(json.loads(response.body).get("message") or "")
    except (ValueError, AttributeError):
        return response.body.decode("utf-8", "replace").strip()[:200]


def _server_path(user: str, server_name: str = "") -> str:
    """The API path of a user's default server (``""``) or of a named one."""
    if not server_name:
        return f"/users/{quote(user, safe='')}/server"
    return f"/users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}"
