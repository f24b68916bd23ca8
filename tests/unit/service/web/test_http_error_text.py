"""The message of an HTTPError as the API and the pages show it: a ``%`` in it is shown once."""

import pytest
from tornado import web

from jupyterhub_gpu.service.web.auth import http_error_text


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        (web.HTTPError(409, "cs231n may hold at most 50% of the T4s"), "cs231n may hold at most 50% of the T4s"),
        (web.HTTPError(400, "%s of the pool", "50%"), "50% of the pool"),
        (web.HTTPError(400, "%d%% of the pool", 50), "50% of the pool"),
        (web.HTTPError(404), "Not Found"),
    ],
)
def test_a_percent_sign_is_shown_once(error, shown):
    assert http_error_text(error) == shown
