"""When is a loss flat: the rule :class:`~jupyterhub_gpu.keras.PlateauStop` applies, without TensorFlow.

Also the request ``PlateauStop(stop_server=True)`` sends once its checkpoint is saved: this
server's own ``POST /gpu/api/v1/stop-when-done/now`` (the jupyterhub-gpu server extension),
with the server's token from the kernel's environment (``$JUPYTERHUB_SERVICE_URL`` and
``$JUPYTERHUB_API_TOKEN``, as :mod:`.budget` reads the stats). The server then saves the open
notebooks and asks the hub to stop it, the ledger's stop reason being ``plateau``.
"""

from __future__ import annotations

import json
import math
import os
import urllib.request


class PlateauTracker:
    """Counts consecutive evaluations that stay within ``min_delta`` of the value that began the run.

    The first value is the anchor. Each later value within ``min_delta`` of the anchor (either
    way) is one flat evaluation; a value further away (or not a number) becomes the new anchor
    and the count starts again. :meth:`update` returns True at the ``patience``-th flat
    evaluation in a row: ``[0.5, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]`` with patience 5 is flat at the
    7th value (0.3 is the anchor, then five flat evaluations).
    """

    def __init__(self, patience: int = 5, min_delta: float = 1e-3):
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a whole number of evaluations >= 1, got {patience!r}")
        if isinstance(min_delta, bool) or not isinstance(min_delta, (int, float)) or not min_delta >= 0:
            raise ValueError(f"min_delta must be a number >= 0, got {min_delta!r}")
        self.patience = patience
        self.min_delta = float(min_delta)
        self.anchor: float | None = None
        self.flat = 0

    def update(self, value: float) -> bool:
        """Take one evaluation; True when it is the ``patience``-th flat one in a row."""
        value = float(value)
        if not math.isfinite(value):
            self.anchor, self.flat = None, 0
            return False
        if self.anchor is None or abs(value - self.anchor) > self.min_delta:
            self.anchor, self.flat = value, 0
            return False
        self.flat += 1
        return self.flat >= self.patience


def stop_server_url(env=os.environ) -> str | None:
    """This server's ``stop-when-done/now`` endpoint, or None outside a JupyterHub server."""
    base = env.get("JUPYTERHUB_SERVICE_URL")
    if not base or not env.get("JUPYTERHUB_API_TOKEN"):
        return None
    return base.rstrip("/") + "/gpu/api/v1/stop-when-done/now"


def request_server_stop(reason: str = "plateau", env=os.environ, timeout: float = 10.0) -> str:
    """Ask this server to save its notebooks and stop (``reason``: the ledger's); what happened, in words.

    Never raises: outside a hub, or when the server refuses, training has stopped all the same
    and the words say that the server (and its billing) goes on.
    """
    url = stop_server_url(env)
    if url is None:
        return "not in a JupyterHub server (no $JUPYTERHUB_SERVICE_URL and server token): only training stopped"
    request = urllib.request.Request(
        url,
        data=json.dumps({"reason": reason}).encode(),
        method="POST",
        headers={"Authorization": f"token {env['JUPYTERHUB_API_TOKEN']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            json.loads(response.read())
    except (OSError, ValueError) as e:
        return (
            f"the server did not take the stop ({type(e).__name__}: {e}); only training stopped:"
            " stop the server from the hub's home page to stop its billing"
        )
    return "the server saves the open notebooks and stops (its GPU is released)"
