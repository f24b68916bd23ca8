"""The one JupyterHub REST API client of the service (tornado's AsyncHTTPClient).

No other module of the service builds a hub URL: each request the service makes
of the hub is a method here (users, groups, start, stop and remove a server).
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

PAGINATION = "application/jupyterhub-pagination+json"
#: The hub's API when the hub does not say (``JUPYTERHUB_API_URL``, set for every managed service).
DEFAULT_API_URL = "http://127.0.0.1:8081/hub/api"


class HubAPIError(RuntimeError):
    """The hub answered with an error, or could not be reached."""

    def refusal(self) -> tuple[int, str]:
        """The status and message of the hub's refusal (e.g. a budget that cannot pay, an unknown profile).

        A 4xx of the hub keeps its status and the hub's own message; anything else is a 502.
        """
        cause = self.__cause__
        response = getattr(cause, "response", None)
        code = getattr(cause, "code", 502) or 502
        message = str(self)
        if response is not None and response.body:
            try:
                message = json.loads(response.body).get("message") or message
            except (ValueError, AttributeError):
                pass
        return (code if 400 <= code < 500 else 502), message


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

    async def request(self, method: str, path: str, body=None, params=None, accept="application/json"):
        url = f"{self.api_url}{path}"
        if params:
            url += "?" + urlencode(params)
        request = HTTPRequest(
            url,
            method=method,
            headers={"Authorization": f"token {self.token}", "Accept": accept, "Content-Type": "application/json"},
            body=json.dumps(body) if body is not None else (b"" if method in ("POST", "PUT", "PATCH") else None),
            allow_nonstandard_methods=True,
            request_timeout=self.timeout,
        )
        self.requests += 1
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as e:
            if e.code == 404:
                return None
            raise HubAPIError(f"{method} {path}: {e}") from e
        except OSError as e:
            raise HubAPIError(f"{method} {path}: {e}") from e
        return json.loads(response.body) if response.body else None

    async def active_servers(self, page_size: int = 200) -> list[dict]:
        """Every active server as ``{"user", "name", "groups", "server"}``, page by page."""
        servers = []
        offset = 0
        while True:
            page = await self.request(
                "GET", "/users", params={"state": "active", "offset": offset, "limit": page_size}, accept=PAGINATION
            )
            items = page["items"] if isinstance(page, dict) else (page or [])
            for user in items:
                for name, server in (user.get("servers") or {}).items():
                    servers.append(
                        {"user": user["name"], "name": name, "groups": user.get("groups", []), "server": server}
                    )
            nxt = page.get("_pagination", {}).get("next") if isinstance(page, dict) else None
            if not nxt or not items:
                return servers
            offset = nxt["offset"]

    async def user(self, name: str) -> dict | None:
        return await self.request("GET", f"/users/{quote(name, safe='')}")

    async def stop_server(self, user: str, server_name: str = "") -> None:
        await self.request("DELETE", _server_path(user, server_name))

    async def remove_server(self, user: str, server_name: str) -> None:
        """Stop a named server and delete it, as a job's server is when the job is over."""
        await self.request("DELETE", _server_path(user, server_name), body={"remove": True})

    async def group(self, name: str) -> dict | None:
        """A group's model, or None when the hub has no such group."""
        return await self.request("GET", f"/groups/{quote(name, safe='')}")

    async def start_server(self, user: str, server_name: str, user_options: dict, display_name: str = "") -> None:
        """Ask the hub to start a named server with these options (the spawner's budget and queue checks apply)."""
        body: dict = {"user_options": user_options}
        if display_name:
            body["display_name"] = display_name
        await self.request("POST", _server_path(user, server_name), body=body)


def _server_path(user: str, server_name: str = "") -> str:
    """The API path of a user's default server (``""``) or of a named one."""
    if not server_name:
        return f"/users/{quote(user, safe='')}/server"
    return f"/users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}"
