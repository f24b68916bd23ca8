"""The CLI's one client of the gpu service's REST API: requests with the token, refusals in words."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlencode, urlsplit


class APIError(Exception):
    """The service answered with an error, or could not be reached."""


class Client:
    def __init__(self, url: str, token: str, timeout: float = 30):
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.timeout = timeout

    def _open(self, method: str, url: str, data=None):
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(request, timeout=self.timeout)

    def request(self, method: str, path: str, body=None, params=None) -> tuple[int, bytes, str]:
        url = self.url + "api/v1/" + path
        if params:
            url += "?" + urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        try:
            with self._open(method, url, data) as response:
                return response.status, response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            raise self.refusal(e) from None
        except (urllib.error.URLError, OSError) as e:
            raise APIError(self.unreachable(getattr(e, "reason", e))) from None

    def json(self, method: str, path: str, body=None, params=None):
        _status, raw, kind = self.request(method, path, body, params)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:  # a login page, a web server's index: something else answers at this URL
            raise APIError(
                f"the answer from {self.url} is not the gpu service's JSON ({kind or 'no Content-Type'}):"
                f" {self.not_the_service()}"
            ) from None

    def refusal(self, error: urllib.error.HTTPError) -> APIError:
        """What an HTTP error of the service (or of whatever answers at the URL) means, and what to do."""
        code, raw = error.code, error.read()
        try:
            message = json.loads(raw).get("message")
            page = ""
        except (ValueError, AttributeError):
            message = None  # not the service's JSON: a proxy's or web server's page
            page = raw.decode("utf-8", "replace").strip()[:200]
        message = message.strip() if isinstance(message, str) else ""
        if code in (401, 403) and (not message or message.startswith(("Authentication required", "The token was"))):
            return APIError(
                f"the token was refused (HTTP {code}): JupyterHub does not know it (mistyped, expired or revoked);"
                f" make a new one on the hub's token page ({self.hub_url()}token) and pass it with --token or"
                " $JUPYTERHUB_API_TOKEN"
            )
        if code == 404 and not (message and self.is_the_service()):
            return APIError(f"{self.not_the_service()} (HTTP 404)")
        said = message or page or error.reason
        if code in (502, 503, 504):
            return APIError(
                f"the gpu service did not answer (HTTP {code}: {said}): it is not running, or still starting;"
                " the hub's log says why (the service's own output is in it)"
            )
        if code >= 500:
            return APIError(f"the gpu service failed (HTTP {code}): {said}; the hub's log has the service's output")
        return APIError(f"{said} (HTTP {code})")

    def unreachable(self, reason) -> str:
        """Why the service could not be reached: refused, unknown host, TLS, time-out."""
        where = f"the gpu service at {self.url}"
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (
                f"cannot reach {where}: its TLS certificate is not trusted ({reason.verify_message}): give the"
                " certificate authority's bundle in $SSL_CERT_FILE"
            )
        if isinstance(reason, ssl.SSLError):
            return f"cannot reach {where}: TLS failed ({reason}): does it serve https:// on this port, or http://?"
        if isinstance(reason, TimeoutError):
            return f"{where} did not answer within {self.timeout:g} s"
        if isinstance(reason, ConnectionRefusedError):
            return f"cannot reach {where}: connection refused: is the hub running, and are this host and port its own?"
        if isinstance(reason, socket.gaierror):
            return f"cannot reach {where}: unknown host {urlsplit(self.url).hostname!r}"
        return f"cannot reach {where}: {reason}"

    def is_the_service(self) -> bool:
        """Whether the gpu service answers at the URL: its API description is public."""
        try:
            with self._open("GET", self.url + "api/v1/openapi.yaml") as response:
                return response.status == 200 and b"openapi" in response.read(4096)
        except (urllib.error.URLError, OSError):
            return False

    def hub_url(self) -> str:
        """The hub's own URL (``.../hub/``), from the service's."""
        parts = urlsplit(self.url)
        path = parts.path
        for marker in ("/services/", "/hub/"):
            if marker in path:
                path = path[: path.index(marker) + 1]
                break
        return f"{parts.scheme}://{parts.netloc}{path}hub/"

    def not_the_service(self) -> str:
        """What to use instead of a URL where the service does not answer."""
        expected = self.hub_url()[: -len("hub/")] + "services/gpu/"
        if expected == self.url:
            return (
                f"no gpu service answers at {self.url}: is it in c.JupyterHub.services (named gpu) and running?"
                " The hub's log says why not"
            )
        return f"this is not the gpu service: use {expected} (the hub's URL followed by services/gpu/)"
