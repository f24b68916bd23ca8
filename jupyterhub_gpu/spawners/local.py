"""GPULocalSpawner: GPU profiles over local processes, for the embedded demo and fast tests.

Servers run as the hub's own user, each in its own home directory, like
JupyterHub's SimpleLocalProcessSpawner: there is no isolation between users, so
this spawner is for demos and tests, never for a shared machine.
"""

import os

from jupyterhub.spawner import SimpleLocalProcessSpawner
from traitlets import default

from .mixin import GPUSpawnerMixin


class GPULocalSpawner(GPUSpawnerMixin, SimpleLocalProcessSpawner):
    """Local-process servers with GPU profiles (demo and tests; no isolation)."""

    _require_image = False

    @default("gpu_backend")
    def _default_backend(self):
        return "simulated"

    async def gpu_prepare(self, profile, devices):
        # the same layout as the containers: persistent work under ~/work
        os.makedirs(os.path.join(self.home_dir, "work"), mode=0o755, exist_ok=True)
