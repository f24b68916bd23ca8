"""A GPU profile on Kubernetes: the unit it asks for, its line in the form, what the device plugin cannot give.

:func:`kube_unit_problems` refuses at hub start a MIG profile the NVIDIA device plugin cannot serve;
:func:`start_replica_check` reads the cluster once in the background and logs what
:func:`~jupyterhub_gpu.spawners.assign.cluster.replica_warnings` finds in the share and MIG profiles.
"""

from __future__ import annotations

import asyncio

from jupyterhub_gpu.gpus.backends import MIG_RESOURCE_PREFIX
from jupyterhub_gpu.gpus.names import mig_request
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners.assign.cluster import replica_warnings
from jupyterhub_gpu.spawners.form import profile_line
from jupyterhub_gpu.spawners.profiles import Profile


def unit_of(profile: Profile) -> dict:
    """The allocator's keywords for one unit of a profile: ``{"share": 4}``, ``{"mig": "1g.10gb"}`` or none."""
    return {"share": getattr(profile, "gpu_share", None), "mig": getattr(profile, "mig", None)}


def describe_kube_profile(profile: Profile, counts: dict | None, currency: Currency, lang: str = "en") -> str:
    """The form's one-line summary on Kubernetes, e.g. ``1× A100 40 GB — ¥0.25/min — 3 of 8 free``.

    ``counts`` are the cluster allocator's (None for a CPU-only profile); the memory is what GPU
    Feature Discovery reports for the nodes (a share's: its cap, ``share 1/4 of a T4 4 GB — … — 3 of 8
    shares free``).
    """
    sized = counts and counts.get("unit", "gpu") != "mig"  # a slice's name says its memory
    memory = f" {round(counts['memory_mib'] / 1024)} GB" if sized and counts.get("memory_mib") else ""
    return profile_line(profile, currency, counts, profile.gpu_model, memory, "cluster", lang)


def kube_unit_problems(profiles) -> list[str]:
    """What the device plugin cannot give a profile's ``mig`` slice on Kubernetes (the hub refuses to start)."""
    problems = []
    for p in profiles:
        mig = getattr(p, "mig", None)
        if not mig:
            continue
        if "+" in mig:
            # the device plugin advertises a +me instance under the plain slice's resource (no way to ask for one)
            base = mig.split("+", 1)[0]
            problems.append(
                f"profile {p.slug!r}: 'mig' {mig!r} cannot be asked for on Kubernetes: the device plugin"
                f" advertises such instances as {MIG_RESOURCE_PREFIX}{base}, together with the plain {base}"
                f" ones; set 'mig' to {base!r}"
            )
        named = mig_request(p.gpu_model)[0]
        if named and named != mig.lower():
            problems.append(
                f"profile {p.slug!r}: 'mig' is {mig!r} but 'gpu_model' {p.gpu_model!r} names the slice {named!r};"
                f" name the GPU in 'gpu_model' (e.g. 'A100') and the slice in 'mig'"
            )
    return problems


#: The hub-start replica checks in flight (kept so that the loop does not drop them).
_START_CHECKS: set[asyncio.Task] = set()


def start_replica_check(probe, profiles) -> asyncio.Task | None:
    """At hub start, read the cluster once and log :func:`.replica_warnings` (in the background).

    The startup check itself runs before the hub serves and must not wait on the
    API server; a cluster that cannot be read is said so, and the spawns say it too.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None  # no event loop (a check run by hand): nothing to read the cluster with
    allocator = probe.allocator
    log = probe.log

    async def check():
        try:
            snapshot = await allocator.inventory.get()
        except Exception as e:  # never let this check break the hub
            log.warning("jupyterhub-gpu: could not check the share and MIG profiles against the cluster: %s", e)
            return
        if snapshot is None:
            log.warning(
                "jupyterhub-gpu: could not check the share and MIG profiles against the cluster (%s)",
                allocator.inventory.error,
            )
            return
        for warning in replica_warnings(profiles, allocator):
            log.warning("jupyterhub-gpu: %s", warning)

    task = loop.create_task(check())
    _START_CHECKS.add(task)
    task.add_done_callback(_START_CHECKS.discard)
    return task
