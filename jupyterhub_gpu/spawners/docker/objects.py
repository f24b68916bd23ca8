"""Pure builders: the environment and the Docker container arguments of a GPU server.

Like kubespawner's ``objects.py``, these functions take plain values and return
plain dicts, and the tests compare whole dicts. The spawner classes only gather
the values and call them.
"""

from __future__ import annotations

import ipaddress
import json
import re

from jupyterhub_gpu.gpus.backends import get_backend
from jupyterhub_gpu.gpus.device import parse_share_uuid

LABEL_PREFIX = "jupyterhub-gpu"
HARDENED_CAP_DROP = ["ALL"]
HARDENED_SECURITY_OPT = ["no-new-privileges"]
#: the Docker network option that stops containers of one bridge network from reaching each other
ICC_OPTION = "com.docker.network.bridge.enable_icc"

#: host-config keys an admin's ``extra_host_config`` may not set: each one would undo the isolation, the
#: exclusive GPU assignment or the limits (the host's or another container's namespaces, host devices,
#: extra mounts such as the Docker socket or another user's volume, ports published on the host, links
#: through the network isolation, a cgroup outside the limits). The builder sets the ones it needs itself.
FORBIDDEN_HOST_KEYS = (
    "privileged",
    "cap_add",
    "cap_drop",
    "pid_mode",
    "ipc_mode",
    "uts_mode",
    "userns_mode",
    "cgroupns",
    "cgroup_parent",
    "devices",
    "device_cgroup_rules",
    "device_requests",
    "volumes_from",
    "mounts",
    "binds",
    "links",
    "port_bindings",
    "publish_all_ports",
    "network_mode",
    "oom_kill_disable",
)
#: ``extra_create_kwargs`` keys the builder owns: the user, the networks and ports, the host config
FORBIDDEN_CREATE_KEYS = ("user", "networking_config", "host_config", "ports", "volumes", "mac_address")

_CONTAINER_USER = re.compile(r"([0-9]+):([0-9]+)")
_NO_NEW_PRIVILEGES_ON = {"no-new-privileges", "no-new-privileges=true", "no-new-privileges:true"}


def parse_container_user(value: str) -> tuple[int, int]:
    """``"uid:gid"`` as two integers, both above 0; anything else is a ``ValueError`` naming the value.

    Docker reads the uid as a decimal number, so ``"00"`` or ``"000:100"`` would be root: the value
    is parsed here as Docker parses it, not compared as text. A name (``"jovyan"``) is refused, since
    the image decides which uid it means; a missing gid would be the image's (or 0).
    """
    m = _CONTAINER_USER.fullmatch(str(value).strip())
    if not m:
        raise ValueError(f"container_user must be a numeric 'uid:gid' (like '1000:100'), got {value!r}")
    uid, gid = int(m.group(1)), int(m.group(2))
    if uid <= 0 or gid <= 0:
        raise ValueError(f"container_user must not be root: uid and gid must be above 0, got {value!r}")
    return uid, gid


def screen_security_opt(options) -> tuple[list[str], list[str]]:
    """``(kept, dropped)`` of an admin's ``security_opt`` entries.

    Docker applies the last of conflicting options, so an ``no-new-privileges=false`` (or ``:false``)
    anywhere would undo ours: an entry is kept only if it can only tighten the defaults, an AppArmor
    profile other than ``unconfined`` or an SELinux ``label=level:``. Everything else
    (``seccomp=unconfined`` or a custom seccomp profile, ``apparmor=unconfined``,
    ``systempaths=unconfined``, ``label=disable``/``label:disable``, other label types,
    ``no-new-privileges=false``, anything unknown) is dropped. ``no-new-privileges`` itself is dropped
    quietly: the builder adds its own, last.
    """
    kept: list[str] = []
    dropped: list[str] = []
    if isinstance(options, str):
        options = [options]
    for option in options or []:
        text = str(option).strip()
        if text.lower() in _NO_NEW_PRIVILEGES_ON:
            continue
        m = re.match(r"([^=:]*)[=:](.*)", text, re.DOTALL)
        key, value = (m.group(1).strip().lower(), m.group(2).strip()) if m else (text.lower(), "")
        if key == "apparmor" and value and value.lower() != "unconfined":
            kept.append(text)
        elif key == "label" and value.lower().startswith("level:"):
            kept.append(text)
        else:
            dropped.append(text)
    return kept, dropped


def _is_root_group(group) -> bool:
    """Whether a ``group_add`` entry is gid 0: runc parses a number as Go's ``ParseInt`` does (``00``, ``+0``)."""
    text = str(group).strip()
    if text.lower() == "root":
        return True
    try:
        return int(text, 10) == 0
    except ValueError:
        return False


def screen_extras(extra_create: dict | None, extra_host: dict | None) -> tuple[dict, dict, list[str]]:
    """The admin's extras without anything that could weaken a container, and what was dropped.

    Returns ``(create, host, dropped)``; ``dropped`` names each option taken out, for the log.
    """
    create = dict(extra_create or {})
    host = dict(extra_host or {})
    dropped: list[str] = []
    for key in FORBIDDEN_CREATE_KEYS:
        if key in create:
            dropped.append(f"extra_create_kwargs[{key!r}]={create.pop(key)!r}")
    for key in FORBIDDEN_HOST_KEYS:
        if key not in host:
            continue
        value = host.pop(key)
        if key == "cap_drop" and list(value or []) == HARDENED_CAP_DROP:
            continue  # the same as ours
        if key == "privileged" and not value:
            continue
        dropped.append(f"extra_host_config[{key!r}]={value!r}")
    if "group_add" in host:
        groups = [g for g in host["group_add"] or [] if not _is_root_group(g)]
        if len(groups) != len(host["group_add"] or []):
            dropped.append(f"extra_host_config['group_add'] root group in {host['group_add']!r}")
        host["group_add"] = groups
        if not groups:
            host.pop("group_add")
    if "sysctls" in host:
        # net.* sysctls of the container's namespace could open a path around the network isolation
        # (net.ipv6.conf.all.disable_ipv6=0: link-local IPv6 to the other containers, which the
        # IPv4-only isolation rules do not see)
        sysctls = dict(host.pop("sysctls") or {})
        # runc reads '/' as '.' ("net/ipv6/conf/all/disable_ipv6" is the same sysctl): judge the dotted name
        for key in [k for k in sysctls if str(k).strip().replace("/", ".").startswith("net.")]:
            dropped.append(f"extra_host_config['sysctls'] {key}={sysctls.pop(key)!r}")
        if sysctls:
            host["sysctls"] = sysctls
    if "security_opt" in host:
        kept, weak = screen_security_opt(host.pop("security_opt"))
        dropped += [f"extra_host_config['security_opt'] {o!r}" for o in weak]
        host["security_opt"] = kept
    return create, host, dropped


def make_network_spec(*, name: str, subnet: str = "", internal: bool = True, bridge_name: str = "") -> dict:
    """Keyword arguments of docker-py's ``create_network`` for a network that isolates its servers.

    A bridge network with inter-container communication disabled (``enable_icc=false``): each
    container reaches the host (the hub and the gpu service listen on the network's gateway) and
    the host reaches each container, but no container reaches another. ``internal`` also keeps the
    containers from reaching anything beyond the host. Docker enforces both with iptables rules,
    so dockerd must run with iptables enabled (its default). With ``subnet`` the gateway is its
    first address (for ``hub_ip``); without it Docker picks both.
    """
    options = {ICC_OPTION: "false"}
    if bridge_name:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", bridge_name):
            raise ValueError(f"bridge name must be 1-15 letters, digits, '.', '_' or '-', got {bridge_name!r}")
        options["com.docker.network.bridge.name"] = bridge_name
    spec = {
        "name": name,
        "driver": "bridge",
        "options": options,
        "internal": bool(internal),
        "check_duplicate": True,
        "labels": {f"{LABEL_PREFIX}.managed": "true"},
    }
    if subnet:
        net = parse_subnet(subnet)
        spec["ipam"] = {
            "Driver": "default",
            "Config": [{"Subnet": str(net), "Gateway": str(next(net.hosts()))}],
            "Options": {},
        }
    return spec


def parse_subnet(subnet: str) -> ipaddress.IPv4Network:
    """An IPv4 subnet with room for the gateway and some servers (``/29`` or larger)."""
    try:
        net = ipaddress.IPv4Network(str(subnet).strip(), strict=True)
    except ValueError as e:
        raise ValueError(f"network subnet must be an IPv4 network like '10.213.0.0/24', got {subnet!r}: {e}") from None
    if net.prefixlen > 29:
        raise ValueError(f"network subnet {subnet!r} is too small: use a /29 or larger")
    return net


def network_gateway(info: dict) -> str:
    """The gateway address of an inspected network (where the hub and the service listen), or ''."""
    for config in (info.get("IPAM") or {}).get("Config") or []:
        if config.get("Gateway"):
            return str(config["Gateway"]).split("/")[0]
    return ""


def network_isolation_problem(info: dict) -> str | None:
    """Why the inspected Docker network would let its containers reach each other, or None.

    Only a bridge network with ``enable_icc=false`` isolates: the host network shares one loopback,
    the default ``bridge`` and any other bridge let containers talk, and other drivers (macvlan,
    overlay...) connect containers directly.
    """
    name = info.get("Name", "?")
    if info.get("Driver") != "bridge":
        return f"Docker network {name!r} has driver {info.get('Driver')!r}: only a bridge network isolates"
    icc = str((info.get("Options") or {}).get(ICC_OPTION, "true")).strip().lower()
    if icc not in {"false", "0", "f"}:
        return f"Docker network {name!r} lets containers reach each other: it needs {ICC_OPTION}=false"
    if info.get("EnableIPv6"):
        # enable_icc=false is an iptables (IPv4) rule: without ip6tables rules (Docker 20.10 has none by
        # default) the containers of an IPv6 network reach each other's IPv6 addresses unhindered
        return (
            f"Docker network {name!r} has IPv6 enabled: {ICC_OPTION}=false does not stop its containers"
            " from reaching each other over IPv6; use a network without IPv6"
        )
    return None


def visible_device_ids(unit_uuids: list[str]) -> list[str]:
    """The GPUs a container's device request names for its units, each once, in order.

    A whole GPU and a MIG slice by their own UUIDs (the NVIDIA runtime takes ``MIG-...`` ones); a
    time-sliced share (``<GPU uuid>/share-<i>-of-<k>``, :func:`~jupyterhub_gpu.gpus.device.share_uuid`) by its
    physical GPU's, the :attr:`~jupyterhub_gpu.gpus.device.GPUDevice.visible_uuid`: the runtime knows no
    shares, so the containers of one GPU's shares all name that GPU. A share's uuid never reaches Docker.
    """
    ids = []
    for uuid in unit_uuids:
        share = parse_share_uuid(uuid)
        ids.append(share[0] if share else uuid)
    return list(dict.fromkeys(ids))


def make_device_requests(device_uuids: list[str], gpu_backend: str = "nvml") -> list[dict]:
    """Docker ``DeviceRequests`` naming exactly the assigned GPUs (none for CPU-only), as the GPU backend asks
    for them (:meth:`jupyterhub_gpu.gpus.backends.GPUBackend.device_requests`: NVIDIA's ``gpu`` capability for
    the backends of this package).

    ``device_uuids`` are what the container sees (:func:`visible_device_ids` of its units).
    """
    return get_backend(gpu_backend).device_requests(list(device_uuids))


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
    gpu_backend: str = "nvml",
    include_device_requests: bool = True,
    mem_limit: int | None = None,
    cpu_limit: float | None = None,
    pids_limit: int | None = None,
    extra_create: dict | None = None,
    extra_host: dict | None = None,
    publish_port: bool = True,
) -> tuple[dict, dict]:
    """``(create_kwargs, host_config_kwargs)`` for docker-py's ``create_container``.

    The hardening (non-root user, no capabilities, no-new-privileges, limits) is
    applied over the admin's extras, and :func:`screen_extras` first takes out of
    them everything that could weaken it. The GPUs (``device_uuids``, :func:`visible_device_ids` of the
    units) are asked for by the device request of ``gpu_backend`` (:mod:`jupyterhub_gpu.gpus.backends`;
    none for CPU-only). With ``include_device_requests=False`` (a
    test-only switch for hosts without the NVIDIA runtime) the device request is
    left out of the host config and recorded in the ``jupyterhub-gpu.device-requests``
    label instead. On a network other than the host's, ``publish_port`` publishes the
    server's port on the host's 127.0.0.1; without it nothing is published and the hub
    reaches the server at its address on the network.
    """
    uid, gid = parse_container_user(container_user)
    device_requests = make_device_requests(device_uuids, gpu_backend)
    labels = dict(labels)
    if device_requests and not include_device_requests:
        labels[f"{LABEL_PREFIX}.device-requests"] = json.dumps(device_requests, sort_keys=True)
    create, host, _ = screen_extras(extra_create, extra_host)

    create.update(
        image=image,
        name=name,
        command=list(command),
        environment=dict(env),
        labels={**create.get("labels", {}), **labels},
        volumes=[b["bind"] for b in binds.values()],
        user=f"{uid}:{gid}",
    )
    if network_mode != "host" and publish_port:
        create["ports"] = {f"{port}/tcp": None}

    host.update(
        binds=dict(binds),
        network_mode=network_mode,
        cap_drop=list(HARDENED_CAP_DROP),
        # ours last: Docker applies the last of conflicting options
        security_opt=[o for o in host.get("security_opt", []) if o not in HARDENED_SECURITY_OPT]
        + list(HARDENED_SECURITY_OPT),
        auto_remove=False,
        # the daemon's default on cgroup v1 is the host's cgroup namespace: the host's cgroup tree in /proc
        cgroupns="private",
    )
    if network_mode != "host" and publish_port:
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
