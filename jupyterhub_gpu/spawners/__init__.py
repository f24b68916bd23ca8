"""Spawners with GPU profiles: the mixin and its Docker and local-process forms.

Importing this package inside a starting JupyterHub schedules a check of the
GPU configuration (profiles, currency, inventory): a bad profile stops the hub
at startup with a message naming it, instead of failing a student's spawn later.
"""

from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin, check_config, config_probe

__all__ = ["GPUDockerSpawner", "GPULocalSpawner", "GPUSpawnerMixin", "check_config"]


def _startup_check(app) -> None:
    """Stop a starting hub whose GPU spawner has an invalid configuration."""
    spawner_class = app.spawner_class
    if not (isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)):
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
    from dataclasses import asdict

    from jupyterhub_gpu.clock import utcnow
    from jupyterhub_gpu.money import Currency
    from jupyterhub_gpu.spawners.profiles import parse_profiles

    probe = config_probe(app.config, spawner_class)
    if not probe.ledger_db_url or callable(probe.profiles):
        return
    from jupyterhub_gpu.ledger.store import shared_ledger

    profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image)
    currency = Currency.from_config(probe.currency, probe.currency_symbol).code
    rows = [asdict(p) for p in profiles]
    try:  # one GPU's memory per profile from the host inventory, for right-sizing advice (never a server's report)
        from jupyterhub_gpu.spawners.assign.host import shared_allocator

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
    from jupyterhub import orm

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
    import asyncio

    spawner_class = app.spawner_class
    if not (isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)):
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


def _install_startup_check() -> None:
    """Run :func:`_startup_check` when the hub initialises its spawners.

    JupyterHub imports spawner entry points before it reads its config file and
    offers no startup hook to spawner classes, so the check wraps
    ``JupyterHub.init_spawners`` (once), where the config is complete.
    """
    try:
        from jupyterhub.app import JupyterHub
    except ImportError:  # pragma: no cover
        return
    original = JupyterHub.init_spawners
    if getattr(original, "_jupyterhub_gpu_check", False):
        return

    async def init_spawners(self):
        _startup_check(self)
        result = await original(self)
        await reap_orphans(self)
        return result

    init_spawners._jupyterhub_gpu_check = True
    JupyterHub.init_spawners = init_spawners


_install_startup_check()
