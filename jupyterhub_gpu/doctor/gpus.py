"""The doctor's GPU checks: the inventory the spawner schedules, and a static one against the host's GPUs.

Each check asks the spawner's GPU backend (:mod:`jupyterhub_gpu.gpus.backends`) what to do, by its name. A
static inventory (``gpu_backend = "static"``) is what the admin says the host has; nothing else checks it:
:func:`check_gpu_host` lists the host's GPUs with the backend its :attr:`~GPUBackend.host_check` names (NVML)
and compares them by UUID, so a copied config (two T4s on a host with none) fails here, not at a student's
first spawn.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, SKIP, WARN, Result
from jupyterhub_gpu.gpus.backends import GPUBackend, get_backend
from jupyterhub_gpu.gpus.device import InventoryError
from jupyterhub_gpu.spawners.assign.host import shared_allocator


def _inventory(probe):
    return shared_allocator(probe.gpu_backend, probe.static_gpus, probe.simulated_gpus)


def _inventory_problem(probe) -> str | None:
    if not hasattr(probe, "gpu_backend") or _is_kube(probe):
        return None
    try:
        _inventory(probe)
    except InventoryError as e:
        return str(e)
    return None


def _is_kube(probe) -> bool:
    """Kubernetes: no host inventory (told by its trait, without importing the Kubernetes clients)."""
    return probe.has_trait("gpu_node_products")


def check_gpus(setup: Setup) -> Iterator[Result]:
    """The GPU inventory: NVML, static or simulated (labelled so), MIG instances by their parent."""
    probe = setup.need_probe()
    if _is_kube(probe):
        yield Result("gpus", SKIP, "Kubernetes: the cluster's GPUs are read from its nodes at spawn time")
        return
    backend = probe.gpu_backend
    chosen = get_backend(backend)
    try:
        devices = _inventory(probe).devices
    except InventoryError as e:
        yield Result("gpus", FAIL, f"{backend} inventory: {e}", chosen.inventory_fix(type(probe).__name__))
        return
    by_parent: dict[str, int] = {}
    for d in devices:
        if d.parent_uuid:
            by_parent[d.parent_uuid] = by_parent.get(d.parent_uuid, 0) + 1
    listed = ", ".join(f"{d.index}: {d.name} ({d.memory_gb} GB)" for d in devices) or "none"
    mig = "; MIG: " + ", ".join(f"{parent} in {n} instances" for parent, n in by_parent.items()) if by_parent else ""
    if chosen.reads_mig_mode and not by_parent:
        mig = "; MIG off on every GPU"
    if chosen.simulated:
        yield Result(
            "gpus",
            WARN,
            f"SIMULATED inventory, no real GPU: {listed}",
            f'for a lab with GPUs set c.{type(probe).__name__}.gpu_backend = "nvml" (or "static")',
        )
    elif not devices:
        yield Result("gpus", WARN, f"{backend} inventory: no GPU on this host", "only CPU profiles can start")
    else:
        yield Result("gpus", PASS, f"{len(devices)} GPU(s) from {backend}: {listed}{mig}")


def _option(probe, backend: GPUBackend):
    """The value of the spawner option that lists the backend's GPUs (None where it has none)."""
    return getattr(probe, backend.option, None) if backend.option else None


def _remote_engine(probe) -> str | None:
    """The Docker engine's address when it is on another host (its GPUs are not this host's), else None."""
    if not hasattr(probe, "client_kwargs"):
        return None  # not a Docker spawner: the servers run on this host
    base = str((probe.client_kwargs or {}).get("base_url") or os.environ.get("DOCKER_HOST", ""))
    return base if base.startswith(("tcp://", "http://", "https://", "ssh://")) else None


def check_gpu_host(setup: Setup) -> Iterator[Result]:
    """A declared inventory against the GPUs NVML lists on this host (backends with a ``host_check``: static)."""
    probe = setup.need_probe()
    if _is_kube(probe) or not getattr(probe, "gpu_backend", None):
        return
    chosen = get_backend(probe.gpu_backend)
    if chosen.host_check is None:
        return
    cls = type(probe).__name__
    try:
        declared = chosen.inventory(_option(probe, chosen))
    except InventoryError:
        return  # check_gpus names what is wrong in the list itself
    remote = _remote_engine(probe)
    if remote:
        yield Result(
            "gpus",
            WARN,
            f"static inventory: the Docker engine is at {remote}, so this host's NVML cannot check its GPUs",
            f"run the doctor on the Docker host, or compare c.{cls}.static_gpus with `nvidia-smi -L` there",
        )
        return
    said = ", ".join(f"{d.uuid} ({d.name})" for d in declared)
    omitted = bool(getattr(probe, "omit_device_requests", False))
    try:
        host = get_backend(chosen.host_check).inventory()
    except InventoryError as e:
        yield Result(
            "gpus",
            WARN if omitted else FAIL,
            f"static inventory of {len(declared)} GPU(s) ({said}), but this host has none that NVML can see: {e}"
            + (" (omit_device_requests is on: a test setup, containers get no GPU)" if omitted else ""),
            "install the NVIDIA driver on this host (nvidia-smi must list the GPUs), or correct"
            f" c.{cls}.static_gpus to the host's GPUs (`nvidia-smi -L` gives their UUIDs);"
            f' c.{cls}.gpu_backend = "nvml" reads them itself',
        )
        return
    have = {d.uuid: d for d in host}
    missing = [d for d in declared if d.uuid not in have]
    unused = [
        d
        for d in host
        if d.uuid not in {x.uuid for x in declared} and d.uuid not in {x.parent_uuid for x in declared if x.parent_uuid}
    ]
    listed = ", ".join(f"{d.uuid} ({d.name})" for d in host) or "none"
    if missing:
        yield Result(
            "gpus",
            WARN if omitted else FAIL,
            f"c.{cls}.static_gpus names {', '.join(f'{d.uuid} ({d.name})' for d in missing)}, which this host"
            f" does not have: NVML lists {listed}",
            f'correct c.{cls}.static_gpus to the UUIDs `nvidia-smi -L` prints, or use c.{cls}.gpu_backend = "nvml"',
        )
        return
    if unused:
        yield Result(
            "gpus",
            WARN,
            f"this host has GPU(s) that c.{cls}.static_gpus does not list: {', '.join(d.uuid for d in unused)}"
            " (no student gets them)",
            f"add them to c.{cls}.static_gpus if students should use them",
        )
        return
    yield Result("gpus", PASS, f"every GPU of the static inventory is on this host (NVML): {said}")
