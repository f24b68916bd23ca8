"""Spawn races and limits through a real hub: concurrent spawns cannot overrun a budget.

A real JupyterHub with ``gpu-local`` servers over simulated GPUs and a real sqlite ledger: eight named
servers of one user are requested at once on a budget with room for two minimum charges. Every spawn
passes the first check (nothing is recorded yet); the check after the queue wait, which holds each
passing spawn's minimum in the ledger until its start is recorded, lets exactly two start, and once
every spawn has settled no hold is left.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger import holds
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for

pytestmark = pytest.mark.hub

CONFIG = """
c.JupyterHub.spawner_class = "gpu-local"
c.JupyterHub.allow_named_servers = True
c.JupyterHub.named_server_limit_per_user = %(limit)d
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.simulated_gpus = [{"model": "T4", "count": %(t4)d, "memory_gb": 16}]
c.GPULocalSpawner.profiles = [
    {"slug": "t4", "display_name": "One T4", "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00", "default": True},
]
c.GPULocalSpawner.home_dir_template = "%(home)s/{username}"
c.GPULocalSpawner.ledger_db_url = %(db)r
c.GPULocalSpawner.budget_min_minutes = 10
"""


def settled(hub, user: str, names: list[str]):
    """The ready servers once no spawn of ``names`` is pending any more, else None."""
    servers = hub.user(user).get("servers", {})
    if any(servers[n].get("pending") for n in names if n in servers):
        return None
    return sorted(n for n in names if n in servers and servers[n].get("ready"))


def test_eight_concurrent_named_spawns_on_a_budget_with_room_for_two(make_hub, tmp_path):
    db = f"sqlite:///{tmp_path}/ledger.sqlite"
    ledger = Ledger(db)
    # ¥0.05/min × 10 minutes = ¥0.50 per spawn: room for exactly two
    ledger.set_budget(BudgetRule("user", "stu", "month", "money", Decimal("1.00")), utcnow() - timedelta(days=1))
    hub = make_hub(CONFIG % {"limit": 10, "t4": 8, "home": tmp_path / "homes", "db": db})
    hub.create_users("stu")
    names = [f"s{i}" for i in range(8)]
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(lambda n: hub.start_server("stu", {}, server_name=n), names))
    assert all(r.status_code in (201, 202, 403) for r in answers), [(r.status_code, r.text) for r in answers]

    ready = wait_for(lambda: settled(hub, "stu", names), timeout=120, what="every spawn to finish or fail")
    assert len(ready) == 2, ready
    sessions = [s for s in ledger.open_sessions() if s.user == "stu"]
    assert sorted(s.server_name for s in sessions) == ready
    refused = [line for line in hub.log_text().splitlines() if "Not starting stu's server" in line]
    assert len(refused) == 6, refused
    assert all("Budget too low" in line and "held for the first 10 minutes of its servers" in line for line in refused)
    # the started ones' holds ended with their records, the refused ones' with their refusals
    assert holds.held(ledger, utcnow()) == []
    # the refused spawns hold nothing: their GPUs are free for the next spawn
    assert "6 of 8 free" in hub.login("stu").get(f"{hub.url}/hub/spawn/stu/another", timeout=30).text


def test_the_reference_configs_limit_named_servers():
    """Each reference configuration that allows named servers limits them (notebook jobs count too)."""
    import yaml
    from traitlets.config import PyFileConfigLoader

    from tests.conftest import ROOT

    for name in ("demo_config.py", "docker_host_config.py"):
        config = PyFileConfigLoader(name, path=str(ROOT / "config")).load_config()
        assert config.JupyterHub.allow_named_servers is True, name
        assert 3 <= config.JupyterHub.named_server_limit_per_user <= 5, name
    values = yaml.safe_load((ROOT / "config" / "kubernetes" / "values.yaml").read_text())
    hub = values["hub"]["config"]["JupyterHub"]
    assert hub["allow_named_servers"] is True and 3 <= hub["named_server_limit_per_user"] <= 5
