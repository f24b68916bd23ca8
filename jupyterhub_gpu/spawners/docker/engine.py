"""What the Docker engine itself must provide, asked by the hub at start and by ``jupyterhub-gpu doctor``.

Two properties of the engine decide whether a lab server's first hour works, and neither shows in a
container's or a network's settings:

- **iptables.** Docker enforces the servers' isolated network (``enable_icc=false``, ``internal``) with
  iptables rules; a dockerd started with ``--iptables=false`` (or ``"iptables": false`` in its
  ``daemon.json``) accepts that network and its containers then reach each other. :func:`engine_iptables`
  reads the local dockerd's command line and config file (cheap: the hub asks it once at start); the
  doctor also checks the property itself, with two probe containers.
- **GPU device requests.** A container with a GPU device request starts only where the NVIDIA Container
  Toolkit registered its driver (``could not select device driver "" with capabilities: [[gpu]]``
  otherwise). :func:`gpu_request_problem` starts one short-lived container with such a request.

:func:`report_engine_at_start` logs what is wrong, once per hub process, with the fix. The helpers of the
spawner's network and image checks (pure, or blocking calls on docker-py's APIClient) live here too.
"""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub_gpu.spawners.docker.objects import (
    LABEL_PREFIX,
    make_network_spec,
    network_isolation_problem,
    parse_subnet,
)

#: The engine's answer to a GPU device request where no NVIDIA driver is registered.
GPU_DRIVER_ERROR = "could not select device driver"
GPU_RUNTIME_FIX = (
    "install the NVIDIA Container Toolkit (nvidia-container-toolkit), run `nvidia-ctk runtime configure"
    " --runtime=docker` and restart dockerd (docs/admin.md, Install)"
)
IPTABLES_FIX = (
    "start dockerd with iptables enabled (its default: remove --iptables=false from its command line and"
    ' "iptables": false from /etc/docker/daemon.json) and restart it (docs/admin.md, Networking)'
)
#: What a student reads when their GPU container cannot start for want of the NVIDIA runtime.
GPU_RUNTIME_MESSAGE = (
    "The lab's GPU runtime is not set up on this server yet, so GPU profiles cannot start; the admin has been"
    " told. A profile without a GPU can start meanwhile."
)
PROBE_LABEL = f"{LABEL_PREFIX}.probe"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"

log = logging.getLogger("jupyterhub_gpu.docker")

#: What this hub process has logged at error level already (each problem once).
_reported: set[str] = set()


def _docker_py():
    import docker as docker_py  # optional heavy dependency: docker-py (DockerSpawner's client)

    return docker_py


# -- the servers' network ----------------------------------------------------------------------------


def network_problem(info: dict, subnet: str = "") -> str | None:
    """Why an inspected network is not the isolated one the spawner needs (or has another subnet), or None."""
    problem = network_isolation_problem(info)
    if problem:
        return problem
    subnets = [c.get("Subnet") for c in (info.get("IPAM") or {}).get("Config") or []]
    if subnet and str(parse_subnet(subnet)) not in subnets:
        return f"Docker network {info.get('Name')!r} has subnet {', '.join(map(str, subnets)) or 'none'}, not {subnet}"
    return None


def loopback_problems(config, probe, gateway: str = "") -> list[str]:
    """The hub or the service on a loopback address, which servers on a Docker network cannot reach.

    A server's 127.0.0.1 is its own: the hub and the service must be on an address it reaches (the
    network's ``gateway``). Pure: the startup check and the doctor ask it.
    """
    gateway = gateway or "the network's gateway"
    hub = config.JupyterHub
    hub_host = urlparse(hub.get("hub_connect_url", "")).hostname or hub.get("hub_connect_ip") or hub.get("hub_ip")
    wanted = {
        "c.JupyterHub.hub_ip": hub_host or "127.0.0.1",
        "c.GPUDockerSpawner.gpu_service_url": urlparse(probe.gpu_service_url).hostname,
    }
    return [
        f"{type(probe).__name__}: servers on the Docker network {probe.network_name!r} cannot reach {host}"
        f" (their own loopback): put {setting} on {gateway} (docs/admin.md, Networking)"
        for setting, host in wanted.items()
        if host in ("127.0.0.1", "localhost", "::1")
    ]


def ensure_isolated_network(client, name: str, subnet: str = "", *, internal: bool = True) -> dict:
    """Create the Docker network that isolates the servers if it is missing; the inspected network.

    Blocking (docker-py's APIClient). Raises ``ValueError`` if the network there does not isolate
    or has another subnet than ``subnet``.
    """
    errors = _docker_py().errors
    try:
        info = client.inspect_network(name)
    except errors.NotFound:
        try:
            client.create_network(**make_network_spec(name=name, subnet=subnet, internal=internal))
        except errors.APIError as e:
            if getattr(e, "status_code", None) != 409:  # created meanwhile by another process
                raise
        info = client.inspect_network(name)
    problem = network_problem(info, subnet)
    if problem:
        raise ValueError(f"{problem}: remove it (docker network rm {name}) or set another network_name")
    return info


# -- images ------------------------------------------------------------------------------------------------

#: What a student is told when their profile's image is not on the host (the admin's log says which and the fix).
MISSING_IMAGE_MESSAGE = "This profile's image is not available on the server yet; the admin has been told."

#: The images whose absence this hub process has logged, each once (a spawn of each retries the check).
_reported_missing: set[str] = set()


def missing_images(client, images) -> list[str]:
    """Those of ``images`` the Docker engine does not have, in order, each once (blocking; docker-py's APIClient).

    Errors other than "no such image" (the engine unreachable) propagate. The doctor checks every
    profile's image with this; the spawner with each spawn's.
    """
    errors = _docker_py().errors
    missing = []
    for image in dict.fromkeys(images):
        try:
            client.inspect_image(image)
        except errors.NotFound:  # ImageNotFound included
            missing.append(image)
    return missing


def missing_image_problem(image: str, profiles) -> str:
    """The admin's line for an image missing from the host: which profiles need it, and the fix."""
    slugs = ", ".join(repr(p.slug) for p in profiles if p.image == image) or "none"
    return (
        f"the image {image!r} of profile(s) {slugs} is not on this Docker host, so their spawns fail: pull it"
        f" (docker pull {image}) or build it (docs/images.md)"
    )


def report_missing_image(log, image: str, profiles) -> None:
    """Log a missing image at error level, once per image for this hub process."""
    if image not in _reported_missing:
        _reported_missing.add(image)
        log.error("jupyterhub-gpu: %s", missing_image_problem(image, profiles))


def docker_time(value) -> datetime | None:
    """A Docker API time (``2026-12-01T08:00:00.123456789Z``, nanoseconds) in UTC, or None when unset."""
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    try:
        return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")
    except ValueError:
        return None


# -- iptables ------------------------------------------------------------------------------------------------


def _dockerd_command_lines(proc: str = "/proc"):
    """``(pid, argv)`` of the dockerd processes this process can see."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            raw = Path(proc, entry, "cmdline").read_bytes()
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if argv and os.path.basename(argv[0]) == "dockerd":
            yield entry, argv


def _option(argv: list[str], *names: str) -> str | None:
    """The last value of a ``--name=value`` / ``--name value`` option; ``"true"`` for a bare boolean flag."""
    found = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
            elif arg == name:
                following = argv[i + 1] if i + 1 < len(argv) else ""
                found = following if following and not following.startswith("-") else "true"
    return found


def _local_dockerd(info: dict, proc: str = "/proc") -> tuple[str, list[str], dict] | None:
    """``(pid, argv, daemon.json)`` of the local dockerd whose data root ``docker info`` names, or None.

    Its config file is ``--config-file``, by default ``/etc/docker/daemon.json``; None for an engine on
    another host or out of this process's sight.
    """
    root = info.get("DockerRootDir")
    if not root:
        return None
    for pid, argv in _dockerd_command_lines(proc):
        config_file = _option(argv, "--config-file") or "/etc/docker/daemon.json"
        try:
            daemon = json.loads(Path(config_file).read_text())
        except (OSError, ValueError):
            daemon = {}
        if not isinstance(daemon, dict):
            daemon = {}
        data_root = _option(argv, "--data-root", "--graph", "-g") or daemon.get("data-root") or "/var/lib/docker"
        if os.path.realpath(data_root) == os.path.realpath(root):
            return pid, argv, daemon
    return None


def engine_iptables(info: dict, proc: str = "/proc") -> bool | None:
    """Whether the local dockerd whose data root ``docker info`` names manages iptables; None when unknown.

    Read from the daemon's command line (``--iptables``) and its config file (:func:`_local_dockerd`).
    """
    found = _local_dockerd(info, proc)
    if found is None:
        return None
    _pid, argv, daemon = found
    flag = _option(argv, "--iptables")
    if flag is None:
        flag = daemon.get("iptables", True)
    return str(flag).strip().lower() not in ("false", "0", "no")


def engine_path(info: dict, proc: str = "/proc") -> str | None:
    """The PATH that local dockerd started with (it registers its ``nvidia`` device driver when the NVIDIA hook
    is on it); None when unknown (another host, or its environment out of this process's sight)."""
    found = _local_dockerd(info, proc)
    if found is None:
        return None
    try:
        environ = Path(proc, found[0], "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"PATH="):
            return item[len(b"PATH=") :].decode("utf-8", "replace")
    return ""


def iptables_problem(client, network: str) -> str | None:
    """The hub's start-up line when the engine runs without iptables (the servers then reach each other)."""
    if engine_iptables(client.info()) is not False:
        return None
    return (
        f"SERVERS ARE NOT ISOLATED: the Docker engine runs with iptables disabled (--iptables=false), so the"
        f" containers on the network {network!r} can connect to each other's Jupyter port, kernels and"
        f" TensorBoard (Docker enforces enable_icc=false and internal with iptables rules) — fix: {IPTABLES_FIX}"
    )


# -- GPU device requests ---------------------------------------------------------------------------------------


def is_gpu_driver_error(error: BaseException) -> bool:
    """Whether a Docker error is the engine's refusal of a GPU device request (no NVIDIA driver registered)."""
    text = f"{getattr(error, 'explanation', '') or ''} {error}"
    return GPU_DRIVER_ERROR in text


def present_image(client, images) -> str | None:
    """The first of ``images`` that is on the engine (for a probe container), or None."""
    for image in dict.fromkeys(i for i in images if i):
        if not missing_images(client, [image]):
            return image
    return None


def remove_probe(client, cid: str, tries: int = 5) -> None:
    """Remove a probe container; a busy engine may refuse once ("removal in progress", a time-out): try again."""
    errors = _docker_py().errors
    for attempt in range(tries):
        try:
            client.remove_container(cid, force=True)
            return
        except errors.NotFound:
            return
        except Exception as e:  # the engine is busy: the next attempt, then a warning naming the container
            if attempt == tries - 1:
                log.warning("could not remove the probe container %s: %s", cid[:12], e)
                return
            time.sleep(0.5 * (attempt + 1))


def gpu_request_problem(client, image: str, timeout: float = 30) -> str | None:
    """Start a short-lived container of ``image`` with a request for one GPU; the engine's error, or None.

    None when the engine accepted the request (the container started, or failed for a reason that is not
    the request's: ``python3`` missing from the image). No network, no capabilities, removed at once.
    """
    docker_py = _docker_py()
    host_config = client.create_host_config(
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        mem_limit="256m",
        pids_limit=64,
        device_requests=[docker_py.types.DeviceRequest(count=1, capabilities=[["gpu"]])],
    )
    container = client.create_container(
        image,
        command=["-c", "pass"],
        entrypoint=["python3"],
        network_disabled=True,
        labels={PROBE_LABEL: "gpu-request"},
        host_config=host_config,
    )
    cid = container["Id"]
    try:
        client.start(cid)
        client.wait(cid, timeout=timeout)
    except docker_py.errors.APIError as e:
        text = str(e.explanation or e)
        if is_gpu_driver_error(e) or "nvidia" in text.lower():
            return text
        return None  # the request was served; the image's command is another matter
    finally:
        remove_probe(client, cid)
    return None


def gpu_runtime_problem(client, images, timeout: float = 30) -> str | None:
    """The hub's start-up line when a GPU device request fails on this engine (None: it works, or no image)."""
    image = present_image(client, images)
    if image is None:
        return None
    error = gpu_request_problem(client, image, timeout)
    if error is None:
        return None
    return (
        f"GPU profiles cannot start: the Docker engine refuses a GPU device request ({error}); students see"
        f" that the lab's GPU runtime is not set up — fix: {GPU_RUNTIME_FIX}"
    )


def report_once(log, problem: str | None) -> None:
    """Log ``problem`` at error level, once for this hub process."""
    if problem and problem not in _reported:
        _reported.add(problem)
        log.error("jupyterhub-gpu: %s", problem)


def report_engine_at_start(probe, profiles) -> None:
    """At the hub's start: log, once, an engine without iptables and one that refuses GPU device requests.

    Never raises: what it cannot ask (the engine unreachable) the start-up checks report on their own.
    """
    try:
        if probe.network_name != "host":
            report_once(probe.log, iptables_problem(probe.client, probe.network_name))
        gpu_images = [p.image or probe.image for p in profiles if p.gpu_count]
        if gpu_images and not probe.omit_device_requests:
            report_once(probe.log, gpu_runtime_problem(probe.client, gpu_images))
    except Exception as e:  # never keep the hub from starting for this
        probe.log.warning("jupyterhub-gpu: could not check the Docker engine's iptables and GPU runtime: %s", e)
