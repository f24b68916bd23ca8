"""``openapi.yaml``, the API's description, and the JSON 404 of every other path under ``api/v1/``."""

from __future__ import annotations

from pathlib import Path

from tornado import web

from jupyterhub_gpu.service.web.auth import BaseHandler

OPENAPI = Path(__file__).parents[1] / "openapi.yaml"


class OpenAPIHandler(BaseHandler):
    """``GET openapi.yaml``: the API description, public like any API documentation."""

    _document: bytes | None = None

    def get(self):
        if OpenAPIHandler._document is None:
            OpenAPIHandler._document = OPENAPI.read_bytes()
        self.set_header("Content-Type", "application/yaml; charset=UTF-8")
        self.finish(OpenAPIHandler._document)


class NotFoundHandler(BaseHandler):
    """Anything else under ``api/v1/``: a JSON 404 that points at the API description."""

    def prepare(self):
        raise web.HTTPError(
            404, f"No such endpoint: {self.request.method} {self.request.path}; see api/v1/openapi.yaml"
        )
