"""The server extension runs inside every user's server: it imports only the pure core, never the hub side.

Checked in a fresh interpreter, so that no other test's imports count: loading
the extension's modules (and calling what they import on first use) must not
pull in the hub (``jupyterhub.app``, ``jupyterhub.spawner``, ``jupyterhub.orm``),
the spawners, the service or the ledger.
"""

from __future__ import annotations

import json
import subprocess
import sys

SERVEREXT_MODULES = (
    "jupyterhub_gpu.serverext",
    "jupyterhub_gpu.serverext.extension",
    "jupyterhub_gpu.serverext.sampler",
    "jupyterhub_gpu.serverext.jobs",
    "jupyterhub_gpu.serverext.stopwhendone",
    "jupyterhub_gpu.serverext.startup",
    "jupyterhub_gpu.serverext.language",
    "jupyterhub_gpu.keras",
    "jupyterhub_gpu.keras.budget",
    "jupyterhub_gpu.tensorboard",
)
FORBIDDEN = ("jupyterhub.app", "jupyterhub.spawner", "jupyterhub.orm")
FORBIDDEN_PACKAGES = ("jupyterhub_gpu.spawners", "jupyterhub_gpu.service", "jupyterhub_gpu.ledger")
#: The jupyterhub.* modules a single-user server may load through the extension (none today; the
#: extension once loaded about 40 through ``spawners.inventory`` and ``service.metering``).
MAX_JUPYTERHUB_MODULES = 5

PROBE = f"""
import importlib, json, sys
from datetime import datetime, timezone
for name in {SERVEREXT_MODULES!r}:
    importlib.import_module(name)
from jupyterhub_gpu.serverext import extension
# what the extension does at run time: the cost so far, and the GPUs from the environment (NVML on Kubernetes)
extension.session_cost({{"started": "2026-01-01T00:00:00Z", "rate_per_minute": "0.5"}}, datetime.now(timezone.utc))
extension.devices_from_env({{"JUPYTERHUB_GPU_DEVICE_DISCOVERY": "nvml"}})
extension.budget_summary({{"budgets": [{{"unit": "money", "remaining": "1"}}]}}, {{"rate_per_minute": "0.5"}})
print(json.dumps(sorted(sys.modules)))
"""


def loaded_modules() -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_server_extension_imports_nothing_of_the_hub_side():
    modules = loaded_modules()
    assert [m for m in modules if _under(m, FORBIDDEN)] == []
    assert [m for m in modules if _under(m, FORBIDDEN_PACKAGES)] == []
    jupyterhub = [m for m in modules if _under(m, ("jupyterhub",))]
    print(f"jupyterhub.* modules loaded by the server extension: {len(jupyterhub)} {jupyterhub}")
    assert len(jupyterhub) <= MAX_JUPYTERHUB_MODULES, jupyterhub
    # of this package, only the pure core and the user-side modules themselves
    user_side = ("clock", "money", "billing", "session", "env", "gpus", "i18n", "serverext", "keras", "tensorboard")
    ours = [m for m in modules if m.startswith("jupyterhub_gpu.")]
    assert [m for m in ours if not _under(m, [f"jupyterhub_gpu.{p}" for p in user_side])] == []
