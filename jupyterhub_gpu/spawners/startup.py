"""What the GPU spawners do when the hub starts: check the configuration, publish prices, reap orphans.

JupyterHub imports spawner entry points before it reads its config file and
offers no startup hook to spawner classes, so :func:`install_startup_check`
wraps ``JupyterHub.init_spawners`` (once), where the config is complete:

- :func:`startup_check` stops a hub whose GPU configuration is invalid (a bad
  profile stops the hub with a message naming it, instead of failing a
  student's spawn later), then :func:`publish_pricing` writes the profiles and
  their rates to the ledger;
- after the hub has loaded its spawners, :func:`reap_orphans` stops the
  servers a hub killed in the middle of a spawn left behind.

``jupyterhub.app`` is imported here at module level: it imports no spawner
module itself (it loads the configured spawner class by entry point when it
reads its config), so there is no circle.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict

from jupyterhub import orm
from jupyterhub.app import JupyterHub
from traitlets import TraitError
from traitlets.config import Configurable

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.device import InventoryError
from jupyterhub_gpu.ledger.store import shared_ledger
from jupyterhub_gpu.money import Currency, MoneyError
from jupyterhub_gpu.spawners.assign.host import shared_allocator
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles


def config_probe(config, spawner_class):
    """A spawner object holding only the hub's configuration (no user): for startup checks."""
    probe = spawner_class.__new__(spawner_class)
    Configurable.__init__(probe, config=config)
    return probe


def probe_and_check(config, spawner_class) -> tuple[object | None, list[str]]:
    """A :func:`config_probe` and the problems every backend checks first: option values, currency.

    The probe is None when an option's value is invalid.
    """
    try:
        probe = config_probe(config, spawner_class)
    except (TraitError, ValueError) as e:
        return None, [f"{spawner_class.__name__}: {e}"]
    problems = []
    try:
        Currency.from_config(probe.currency, probe.currency_symbol)
    except MoneyError as e:
        problems.append(str(e))
    return probe, problems


def check_config(config, spawner_class) -> list[str]:
    """Validate a hub's GPU configuration at startup; returns the problems found.

    Profiles given as a callable can only be checked at spawn time.
    """
    probe, problems = probe_and_check(config, spawner_class)
    if probe is None:
        return problems
    profiles = []
    if not callable(probe.profiles):
        try:
            profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image)
        except ProfileError as e:
            problems.append(str(e))
    try:
        allocator = shared_allocator(probe.gpu_backend, probe.static_gpus, probe.simulated_gpus)
    except InventoryError as e:
        problems.append(str(e))
    else:
        names = sorted({d.name for d in allocator.devices})
        for p in profiles:
            total = len(allocator.matching(p.gpu_model)) if p.gpu_count else 0
            if p.gpu_count and total < p.gpu_count:
                problems.append(
                    f"profile {p.slug!r}: needs {p.gpu_count}× {p.gpu_model!r} but this host has {total}"
                    f" (its GPUs: {', '.join(names) or 'none'})"
                )
    return problems


def _is_gpu_spawner(spawner_class) -> bool:
    return isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)


def startup_check(app) -> None:
    """Stop a starting hub whose GPU spawner has an invalid configuration."""
    spawner_class = app.spawner_class
    if not _is_gpu_spawner(spawner_class):
        return
    # a spawner without a host inventory (Kubernetes) brings its own check
    own_check = getattr(spawner_class, "gpu_check_config", None)
    problems = own_check(app.config) if own_check else check_config(app.config, spawner_class)
    if problems:
        for problem in problems:
            app.log.critical("jupyterhub-gpu configuration error: %s", problem)
        app.exit(1)
    app.log.info("jupyterhub-gpu: the GPU configuration of %s is valid", spawner_class.__name__)
    publish_pricing(app, spawner_class)


def publish_pricing(app, spawner_class) -> None:
    """Write the static profiles and their rates to the ledger, for the service's ``GET pricing``."""
    probe = config_probe(app.config, spawner_class)
    if not probe.ledger_db_url or callable(probe.profiles):
        return
    profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image)
    currency = Currency.from_config(probe.currency, probe.currency_symbol).code
    rows = [asdict(p) for p in profiles]
    try:  # one GPU's memory per profile from the host inventory, for right-sizing advice (never a server's report)
        allocator = shared_allocator(probe.gpu_backend, probe.static_gpus, probe.simulated_gpus)
        for row, p in zip(rows, profiles, strict=True):
            devices = allocator.matching(p.gpu_model) if p.gpu_count else []
            row["gpu_memory_mib"] = min((d.memory_mib for d in devices), default=None) or None
    except Exception as e:  # no host inventory (Kubernetes): the advice takes memory from the profile
        app.log.debug("jupyterhub-gpu: no GPU inventory to publish memory sizes from: %s", e)
    count = shared_ledger(probe.ledger_db_url).set_pricing(rows, currency, utcnow())
    app.log.info("jupyterhub-gpu: published %d profiles and their prices to the ledger", count)


def known_sessions(app) -> set[str]:
    """The GPU sessions the hub knows: in its spawners' saved states and in the spawners it has loaded."""
    known = set()
    for orm_spawner in app.db.query(orm.Spawner):
        session = ((orm_spawner.state or {}).get("gpu") or {}).get("session_id")
        if session:
            known.add(session)
    for user in list(app.users.values()):
        for spawner in list(user.spawners.values()):
            session = (getattr(spawner, "_gpu_session", None) or {}).get("session_id")
            if session:
                known.add(session)
    return known


async def reap_orphans(app) -> list[str]:
    """Stop the servers this hub launched but does not know, once, when it has loaded its spawners.

    A hub killed in the middle of a spawn (after the server was launched, before the hub saved the
    spawner's state) leaves a server behind that neither the hub nor the ledger knows, holding GPUs that
    no saved assignment names and that the restarted hub would give out again. The backend lists its
    servers of this hub (by the hub's API URL in their environment); those whose session no spawner
    names are stopped. The list is read before the known sessions, so a spawn that starts meanwhile is
    known by then (a spawner names its session before it launches anything).
    """
    spawner_class = app.spawner_class
    if not _is_gpu_spawner(spawner_class):
        return []
    try:
        probe = config_probe(app.config, spawner_class)
        api_url = app.hub.api_url
        running = await asyncio.to_thread(spawner_class.gpu_orphans, probe, api_url)
        known = known_sessions(app)
        reaped = []
        for session, what, handle in running:
            if session in known:
                continue
            app.log.warning(
                "jupyterhub-gpu: stopping %s of session %s: it runs, but no server of this hub names it"
                " (the hub was stopped in the middle of its spawn)",
                what,
                session,
            )
            await asyncio.to_thread(spawner_class.gpu_reap, probe, handle)
            reaped.append(what)
        return reaped
    except Exception:  # never keep the hub from starting for this
        app.log.exception("jupyterhub-gpu: could not look for servers left by an interrupted spawn")
        return []


def install_startup_check() -> None:
    """Run :func:`startup_check` when the hub initialises its spawners, and :func:`reap_orphans` after."""
    original = JupyterHub.init_spawners
    if getattr(original, "_jupyterhub_gpu_check", False):
        return

    async def init_spawners(self):
        startup_check(self)
        result = await original(self)
        await reap_orphans(self)
        return result

    init_spawners._jupyterhub_gpu_check = True
    JupyterHub.init_spawners = init_spawners
