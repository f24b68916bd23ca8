"""The embedded demo: one machine, no GPU and no Docker needed.

Local-process servers (GPULocalSpawner), a simulated GPU inventory of two
"Simulated T4" and one "Simulated A100", sqlite under .state/demo, and a dummy
login (any user name, password "demo"). Everything else is the real code.

    make demo        # or: .venv/bin/jupyterhub -f config/demo_config.py
"""

import os
import sys

import jupyterhub_gpu.hubpages
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
state = os.environ.get("JUPYTERHUB_GPU_DEMO_STATE", os.path.join(root, ".state", "demo"))
os.makedirs(state, exist_ok=True)
bindir = os.path.dirname(sys.executable)

c = get_config()  # noqa: F821

# ports: the usual ones, movable for a second demo or the test that runs this config
c.JupyterHub.bind_url = os.environ.get("JUPYTERHUB_GPU_DEMO_URL", "http://127.0.0.1:8000")
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ.get("JUPYTERHUB_GPU_DEMO_HUB_PORT", "8081"))
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ.get('JUPYTERHUB_GPU_DEMO_PROXY_API_PORT', '8001')}"
service_port = int(os.environ.get("JUPYTERHUB_GPU_DEMO_SERVICE_PORT", "10101"))
c.JupyterHub.db_url = f"sqlite:///{os.path.join(state, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(state, "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = os.path.join(state, "jupyterhub-proxy.pid")
c.ConfigurableHTTPProxy.command = [os.path.join(bindir, "configurable-http-proxy")]

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "demo"
c.Authenticator.allow_all = True
c.Authenticator.admin_users = {"admin"}
# the hub's pages in English and Chinese (as the browser asks, or the switch), a "GPU usage" link on home
c.JupyterHub.template_paths = jupyterhub_gpu.hubpages.template_paths()
c.JupyterHub.load_groups = {
    "thesis": {"users": ["alice"]},
    "cs231n": {"users": ["bob", "carol"]},
}

c.JupyterHub.spawner_class = "gpu-local"
c.GPULocalSpawner.gpu_backend = "simulated"
c.GPULocalSpawner.simulated_gpus = [
    {"model": "T4", "count": 2, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]
c.GPULocalSpawner.currency = "CNY"
c.GPULocalSpawner.profiles = [
    {
        "slug": "t4",
        "display_name": "1× T4 (simulated)",
        "description": "Coursework and small models.",
        "gpu_model": "T4",
        "gpu_count": 1,
        "price_per_gpu_hour": "3.00",
        "default": True,
    },
    {
        "slug": "a100",
        "display_name": "1× A100 (simulated)",
        "description": "Large models. Only one on this host: you may have to wait.",
        "gpu_model": "A100",
        "gpu_count": 1,
        "price_per_gpu_hour": "15.00",
    },
    {
        "slug": "t4x2",
        "display_name": "2× T4 (simulated)",
        "description": "Multi-GPU experiments; for the thesis group.",
        "gpu_model": "T4",
        "gpu_count": 2,
        "price_per_gpu_hour": "3.00",
        "allowed_groups": ["thesis"],
    },
    {
        # a time-sliced share (docs/scheduling.md): four servers share one T4, each capped at a quarter of its memory
        "slug": "t4-quarter",
        "display_name": {"en": "¼ T4 (simulated)", "zh-CN": "¼ 块 T4（模拟）"},
        "description": "A quarter of a T4, shared with up to three other servers: 4 GB of GPU memory, a quarter"
        " of the price. Plenty for exercises; a busy neighbour slows it down.",
        "gpu_model": "T4",
        "gpu_count": 1,
        "gpu_share": 4,
        "price_per_gpu_hour": "0.75",
    },
    {
        # the cheaper tier: a full-price request that finds no T4 free takes one back after 2 minutes
        "slug": "t4-preemptible",
        "display_name": {"en": "1× T4 preemptible (simulated)", "zh-CN": "1 块 T4 可抢占（模拟）"},
        "description": "40% of the price. May be stopped (after a 2-minute notice) when a full-price request"
        " needs the GPU: use CheckpointAndResume, and tick 'put it back in the queue' to resume on its own.",
        "gpu_model": "T4",
        "gpu_count": 1,
        "price_per_gpu_hour": "3.00",
        "preemptible": True,
        "price_factor": "0.4",
    },
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "Editing notebooks and reading results; no GPU.",
        "gpu_count": 0,
        "price_per_hour": "0.60",
    },
]
c.GPULocalSpawner.queue_timeout = 1800
# docs/scheduling.md: the queue serves groups by fair share (jupyterhub-gpu shares); `make demo` books a
# sample class reservation first (config/demo_reservation.py)
c.GPULocalSpawner.fair_share = True
c.GPULocalSpawner.home_dir_template = os.path.join(state, "home", "{username}")
# -- billing: the ledger and the hub-managed "gpu" service ------------------------
ledger_url = f"sqlite:///{os.path.join(state, 'jupyterhub_gpu.sqlite')}"
c.GPULocalSpawner.ledger_db_url = ledger_url
c.GPULocalSpawner.budget_timezone = "Asia/Shanghai"
c.GPULocalSpawner.gpu_service_url = f"http://127.0.0.1:{service_port}/services/gpu/"  # for the Lab extension
c.JupyterHub.custom_scopes = CUSTOM_SCOPES
c.JupyterHub.services = [
    {
        "name": "gpu",
        "url": f"http://127.0.0.1:{service_port}",
        "command": [
            sys.executable,
            "-m",
            "jupyterhub_gpu.service",
            f"--db-url={ledger_url}",
            "--currency=CNY",
            "--timezone=Asia/Shanghai",
            # the GPUs reservations are checked against (the simulated inventory above)
            "--Scheduling.gpu_pool=T4=2",
            "--Scheduling.gpu_pool=A100=1",
        ],
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": sorted(c.JupyterHub.custom_scopes),
        "display": True,
    }
]
c.JupyterHub.allow_named_servers = True  # notebook jobs run in named servers job-<id>
# at most 4 named servers a user (notebook jobs count: c.Jobs.max_concurrent is 2), docs/admin.md
c.JupyterHub.named_server_limit_per_user = 4
c.JupyterHub.load_roles = [
    {
        "name": "gpu-service",
        "services": ["gpu"],
        # start:servers: notebook jobs run in named servers the service starts (docs/jobs.md), and a server
        # asking to restart on a bigger profile is started again on it (docs/user.md)
        "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
    },
    {"name": "gpu-admins", "users": ["admin"], "scopes": sorted(c.JupyterHub.custom_scopes)},
    # the thesis group's instructor: its usage pages and usage, nothing else (docs/pages.md)
    {"name": "instructors-thesis", "users": ["prof"], "scopes": ["custom:gpu-usage:read!group=thesis"]},
    # every user may open the gpu service's pages and API (their own data only)
    {"name": "user", "scopes": ["self", "access:services!service=gpu"]},
]

c.Spawner.cmd = [os.path.join(bindir, "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
if os.getuid() == 0:
    c.Spawner.args = ["--allow-root"]
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
