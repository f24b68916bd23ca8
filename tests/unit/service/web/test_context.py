"""The web context's reading of the hub's base URL from the service's prefix (where the language cookie goes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jupyterhub_gpu.service.web.context import WebContext


@pytest.mark.parametrize(
    ("prefix", "base_url"),
    [
        ("/services/gpu/", "/"),
        ("/jupyter/services/gpu/", "/jupyter/"),
        ("/labservices/services/gpu/", "/labservices/"),  # a base URL that holds "services": the last one
        ("/services/x/services/gpu/", "/services/x/"),
    ],
)
def test_the_hub_s_base_url_is_the_prefix_before_its_last_services(prefix, base_url):
    assert WebContext.base_url.fget(SimpleNamespace(prefix=prefix)) == base_url
