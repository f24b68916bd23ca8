"""The REST API of the gpu service under ``/services/gpu/api/v1/``: one module of handlers per resource.

Every handler derives from :class:`~jupyterhub_gpu.service.web.auth.BaseHandler`
and gets the service's :class:`~jupyterhub_gpu.service.web.context.WebContext`;
it parses its input with :mod:`..params`, asks the domain and the ledger, and
answers with :mod:`..views`. Money is always a decimal string in JSON. The
routes are in :mod:`..routes`; the endpoints are described by ``openapi.yaml``
(served at ``api/v1/openapi.yaml``).
"""
