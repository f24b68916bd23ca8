"""Spawners with GPU profiles: the mixin and its Docker and local-process forms.

Importing this package inside a starting JupyterHub schedules a check of the
GPU configuration (profiles, currency, inventory): a bad profile stops the hub
at startup with a message naming it, instead of failing a student's spawn later.
"""

from .mixin import GPUSpawnerMixin, check_config, config_probe

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

    from ..clock import utcnow
    from ..money import Currency
    from .profiles import parse_profiles

    probe = config_probe(app.config, spawner_class)
    if not probe.ledger_db_url or callable(probe.profiles):
        return
    from ..service.ledger import shared_ledger

    profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image)
    currency = Currency.from_config(probe.currency, probe.currency_symbol).code
    count = shared_ledger(probe.ledger_db_url).set_pricing([asdict(p) for p in profiles], currency, utcnow())
    app.log.info("jupyterhub-gpu: published %d profiles and their prices to the ledger", count)


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
        return await original(self)

    init_spawners._jupyterhub_gpu_check = True
    JupyterHub.init_spawners = init_spawners


_install_startup_check()
