"""Pure builders: the environment and the Docker container arguments of a GPU server.

Like kubespawner's ``objects.py``, these functions take plain values and return
plain dicts, and the tests compare whole dicts. The spawner classes only gather
the values and call them.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from ..clock import isoformat

LABEL_PREFIX = "jupyterhub-gpu"
HARDENED_CAP_DROP = ["ALL"]
HARDENED_SECURITY_OPT = ["no-new-privileges"]


def make_gpu_env(
    *,
    profile_slug: str,
    device_uuids: list[str],
    rate_per_minute: Decimal,
    currency: str,
    session_id: str,
    started: datetime,
    simulated: bool,
    devices: list[dict] | None = None,
    gpu_model: str = "",
    profile_name: str = "",
    currency_symbol: str = "",
    service_url: str = "",
) -> dict[str, str]:
    """Environment variables that tell a server its GPUs, profile, rate and session.

    ``devices`` (index, uuid, name, memory_mib of each assigned GPU) lets the
    server extension label and size the GPUs it reads.
    """
    visible = ",".join(device_uuids)
    env = {
        # "void" hides every GPU from the NVIDIA runtime for a CPU-only profile;
        # base images set NVIDIA_VISIBLE_DEVICES=all otherwise.
        "NVIDIA_VISIBLE_DEVICES": visible or "void",
        "CUDA_VISIBLE_DEVICES": visible,
        "JUPYTERHUB_GPU_PROFILE": profile_slug,
        "JUPYTERHUB_GPU_DEVICES": visible,
        "JUPYTERHUB_GPU_RATE_PER_MINUTE": str(rate_per_minute),
        "JUPYTERHUB_GPU_CURRENCY": currency,
        "JUPYTERHUB_GPU_SESSION_ID": session_id,
        "JUPYTERHUB_GPU_STARTED": isoformat(started),
        "JUPYTERHUB_GPU_SIMULATED": "1" if simulated else "0",
        "JUPYTERHUB_GPU_DEVICE_INFO": json.dumps(devices or [], sort_keys=True),
        "JUPYTERHUB_GPU_MODEL": gpu_model,
        "JUPYTERHUB_GPU_PROFILE_NAME": profile_name or profile_slug,
        "JUPYTERHUB_GPU_CURRENCY_SYMBOL": currency_symbol,
    }
    if service_url:
        env["JUPYTERHUB_GPU_SERVICE_URL"] = service_url
    return env


def make_device_requests(device_uuids: list[str]) -> list[dict]:
    """Docker ``DeviceRequests`` naming exactly the assigned GPUs (none for CPU-only)."""
    if not device_uuids:
        return []
    return [
        {
            "Driver": "",
            "Count": 0,
            "DeviceIDs": list(device_uuids),
            "Capabilities": [["gpu"]],
            "Options": {},
        }
    ]


def make_labels(
    *, user: str, server_name: str, profile_slug: str, session_id: str, device_uuids: list[str]
) -> dict[str, str]:
    """Labels that let an admin (and the chaos tests) find and reconcile every container."""
    return {
        f"{LABEL_PREFIX}.managed": "true",
        f"{LABEL_PREFIX}.user": user,
        f"{LABEL_PREFIX}.server": server_name,
        f"{LABEL_PREFIX}.profile": profile_slug,
        f"{LABEL_PREFIX}.session-id": session_id,
        f"{LABEL_PREFIX}.gpus": ",".join(device_uuids),
    }


def make_volume_binds(
    *, work_volume: str, work_dir: str, datasets_volume: str | None, datasets_dir: str
) -> dict[str, dict[str, str]]:
    """The owner's storage read-write at ``work_dir``; shared datasets read-only."""
    binds = {work_volume: {"bind": work_dir, "mode": "rw"}}
    if datasets_volume:
        binds[datasets_volume] = {"bind": datasets_dir, "mode": "ro"}
    return binds


def make_container_spec(
    *,
    name: str,
    image: str,
    command: list[str],
    env: dict[str, str],
    labels: dict[str, str],
    container_user: str,
    port: int,
    network_mode: str,
    binds: dict[str, dict[str, str]],
    device_uuids: list[str],
    include_device_requests: bool = True,
    mem_limit: int | None = None,
    cpu_limit: float | None = None,
    pids_limit: int | None = None,
    extra_create: dict | None = None,
    extra_host: dict | None = None,
) -> tuple[dict, dict]:
    """``(create_kwargs, host_config_kwargs)`` for docker-py's ``create_container``.

    The hardening (non-root user, no capabilities, no-new-privileges, limits) is
    applied after the admin's extras so that extras cannot weaken it. With
    ``include_device_requests=False`` (a test-only switch for hosts without the
    NVIDIA runtime) the device request is left out of the host config and
    recorded in the ``jupyterhub-gpu.device-requests`` label instead.
    """
    device_requests = make_device_requests(device_uuids)
    labels = dict(labels)
    if device_requests and not include_device_requests:
        labels[f"{LABEL_PREFIX}.device-requests"] = json.dumps(device_requests, sort_keys=True)

    create = dict(extra_create or {})
    create.update(
        image=image,
        name=name,
        command=list(command),
        environment=dict(env),
        labels={**create.get("labels", {}), **labels},
        volumes=[b["bind"] for b in binds.values()],
        user=container_user,
    )
    if network_mode != "host":
        create["ports"] = {f"{port}/tcp": None}

    host = dict(extra_host or {})
    host.update(
        binds=dict(binds),
        network_mode=network_mode,
        cap_drop=list(HARDENED_CAP_DROP),
        security_opt=sorted(set(host.get("security_opt", [])) | set(HARDENED_SECURITY_OPT)),
        auto_remove=False,
    )
    host.pop("cap_add", None)
    host.pop("privileged", None)
    # the host's (or another container's) namespaces, host devices and extra mounts (a Docker socket, another
    # user's volume) would undo the isolation and the exclusive GPU assignment; storage comes only from binds
    for key in ("pid_mode", "ipc_mode", "uts_mode", "userns_mode", "devices", "volumes_from", "mounts"):
        host.pop(key, None)
    # GPUs come only from the assignment: a common DockerSpawner recipe puts an
    # all-GPU device request in extra_host_config, which would void exclusivity.
    host.pop("device_requests", None)
    if network_mode != "host":
        host["port_bindings"] = {port: ("127.0.0.1",)}
    if device_requests and include_device_requests:
        host["device_requests"] = device_requests
    if mem_limit is not None:
        host["mem_limit"] = mem_limit
    if cpu_limit is not None:
        host["cpu_period"] = 100_000
        host["cpu_quota"] = int(cpu_limit * 100_000)
    if pids_limit is not None:
        host["pids_limit"] = pids_limit
    return create, host
