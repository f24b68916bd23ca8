"""A starting point for a lab server with NVIDIA GPUs, Docker and the NVIDIA container runtime.

Copy this file to /etc/jupyterhub/jupyterhub_config.py, read every commented
line, and adapt profiles, prices, the authenticator and the image. See
docs/admin.md for the whole walk-through.

Prerequisites on the host (checked by `docker run --rm --gpus all IMAGE nvidia-smi`):
- the NVIDIA driver (nvidia-smi works on the host),
- Docker and the NVIDIA Container Toolkit (`nvidia-ctk runtime configure --runtime=docker`),
- the single-user image built with `make image` (images/tensorflow/Dockerfile).
"""

c = get_config()  # noqa: F821

# -- JupyterHub itself ------------------------------------------------------
c.JupyterHub.bind_url = "http://:8000"  # put TLS in front (nginx, traefik) or set ssl_cert/ssl_key
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"  # PostgreSQL for larger labs
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"
# Keep servers (and the GPU assignments in their state) running across hub restarts and upgrades.
c.JupyterHub.cleanup_servers = False
# The hub's own pages (login, home, spawn, errors) in English and Chinese, as the reader's browser asks
# or as chosen with the switch on every page (docs/admin.md, Languages), with a "GPU usage" link on home.
import jupyterhub_gpu.hubpages  # noqa: E402

c.JupyterHub.template_paths = jupyterhub_gpu.hubpages.template_paths()

# Servers run on their own Docker network, isolated from each other: a bridge with
# inter-container communication disabled (enable_icc=false), internal (no way out
# but the host). The hub creates it at startup if missing (dockerd must run with
# iptables enabled, its default: Docker enforces the isolation with iptables rules).
# The hub and the gpu service listen on its gateway, the only host address the servers
# need; no server can reach another's Jupyter port, kernels or TensorBoard.
# Never use network_name = "host" on a shared machine: every server would share the
# host's loopback (docs/admin.md, Networking).
import ipaddress  # noqa: E402

NETWORK_SUBNET = "10.213.0.0/24"  # pick a range your campus network does not use
GATEWAY = str(next(ipaddress.IPv4Network(NETWORK_SUBNET).hosts()))  # 10.213.0.1
c.JupyterHub.hub_ip = GATEWAY

# Log in with your university's identity provider (oauthenticator, ldapauthenticator...).
# c.JupyterHub.authenticator_class = "generic-oauth"
c.Authenticator.admin_users = {"labadmin"}
# Groups decide who may use which profile; they can come from the identity provider.
c.JupyterHub.load_groups = {
    "cs231n": {"users": []},
    "thesis": {"users": []},
}

# -- GPU profiles -------------------------------------------------------------
c.JupyterHub.spawner_class = "gpu-docker"

# The GPUs come from NVML (nvidia-ml-py) on this host; MIG instances are listed by their own UUIDs.
c.GPUDockerSpawner.gpu_backend = "nvml"
# Or declare them (for example when the hub runs in a container without NVML):
# c.GPUDockerSpawner.gpu_backend = "static"
# c.GPUDockerSpawner.static_gpus = [
#     {"index": 0, "uuid": "GPU-8f6e...", "name": "Tesla T4", "memory_gb": 16},
# ]

c.GPUDockerSpawner.currency = "CNY"  # shown as ¥; prices are decimal strings, never floats
IMAGE = "jupyterhub-gpu/tensorflow:2.15"
c.GPUDockerSpawner.profiles = [
    {
        "slug": "t4",
        "display_name": "1× T4 16 GB",
        "description": "Coursework and small models.",
        "gpu_model": "T4",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "3.00",  # ¥0.05 per minute
        "cpu_limit": 4,
        "mem_limit": "16G",
        "default": True,
    },
    {
        "slug": "a100",
        "display_name": "1× A100 40 GB",
        "description": "Large models; thesis students only.",
        "gpu_model": "A100",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "15.00",  # ¥0.25 per minute
        "cpu_limit": 8,
        "mem_limit": "64G",
        "allowed_groups": ["thesis"],
    },
    {
        "slug": "cpu",
        "display_name": "CPU only",
        "description": "Editing notebooks and reading results.",
        "gpu_count": 0,
        "image": IMAGE,
        "price_per_hour": "0.60",  # ¥0.01 per minute
        "cpu_limit": 2,
        "mem_limit": "4G",
    },
]

# A spawn waits this long in the queue for a free GPU before it fails with a message.
c.GPUDockerSpawner.queue_timeout = 30 * 60

# -- Containers ---------------------------------------------------------------
c.GPUDockerSpawner.network_name = "jupyterhub-gpu"
c.GPUDockerSpawner.network_subnet = NETWORK_SUBNET
c.GPUDockerSpawner.network_internal = True  # False lets servers reach the internet (pip), still not each other
c.GPUDockerSpawner.work_volume_template = "jupyterhub-gpu-user-{username}"  # at /home/jovyan/work
c.GPUDockerSpawner.datasets_volume = "/srv/datasets"  # read-only at /home/jovyan/datasets; "" for none
c.GPUDockerSpawner.container_user = "1000:100"  # jovyan; root is refused
c.GPUDockerSpawner.pids_limit = 2048
c.Spawner.start_timeout = 180  # the queue wait and an image's pull come before it, on top
# At its start the hub pulls the profiles' images that are missing, in the background, and logs each result;
# a spawn waiting on a pull shows its layers and bytes (docs/images.md). To turn the start-up pull off:
# c.GPUDockerSpawner.prepull_images = False
c.GPUDockerSpawner.image_pull_timeout = 30 * 60  # a spawn's wait for its image's pull
c.Spawner.http_timeout = 120
c.Spawner.default_url = "/lab"

# -- Billing: the ledger and the hub-managed "gpu" service (docs/service.md) ----------
import sys  # noqa: E402

from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES  # noqa: E402

LEDGER = "sqlite:////srv/jupyterhub/jupyterhub_gpu.sqlite"  # PostgreSQL for larger labs
c.GPUDockerSpawner.ledger_db_url = LEDGER
c.GPUDockerSpawner.budget_timezone = "Asia/Shanghai"
c.GPUDockerSpawner.budget_min_minutes = 10  # a spawn needs budget for at least this many minutes
# how the servers' extension reaches the service (samples, budget and notices for JupyterLab)
c.GPUDockerSpawner.gpu_service_url = f"http://{GATEWAY}:10101/services/gpu/"

c.JupyterHub.custom_scopes = CUSTOM_SCOPES
c.JupyterHub.services = [
    {
        "name": "gpu",
        "url": f"http://{GATEWAY}:10101",  # on the gateway: the servers push their samples here
        "command": [
            sys.executable,
            "-m",
            "jupyterhub_gpu.service",
            f"--db-url={LEDGER}",
            "--currency=CNY",
            "--timezone=Asia/Shanghai",
            # SMTP, webhook, thresholds...: --config=/etc/jupyterhub/gpu_service_config.py
        ],
        "oauth_no_confirm": True,
        "oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES),
        "display": True,
    }
]
c.JupyterHub.allow_named_servers = True  # notebook jobs run in named servers job-<id>
c.JupyterHub.named_server_limit_per_user = 4  # notebook jobs count (c.Jobs.max_concurrent is 2); docs/admin.md
c.JupyterHub.load_roles = [
    {
        "name": "gpu-service",
        "services": ["gpu"],
        # start:servers: notebook jobs run in named servers the service starts (docs/jobs.md), and a server
        # asking to restart on a bigger profile is started again on it (docs/user.md)
        "scopes": ["list:users", "read:users", "read:groups", "read:servers", "delete:servers", "start:servers"],
    },
    {"name": "user", "scopes": ["self", "access:services!service=gpu"]},
    {"name": "gpu-admins", "users": ["labadmin"], "scopes": sorted(CUSTOM_SCOPES)},
]
