"""The hub's and the gpu service's configurations, loaded the way the hub and the service load them.

The hub's file goes through ``JupyterHub.load_config_file`` (traitlets' Python loader, as
``jupyterhub -f`` does); the spawner's settings are read from a probe holding that configuration
(:func:`~jupyterhub_gpu.spawners.startup.config_probe`, what the hub's own start-up check reads). The
service's settings come from its command line in ``c.JupyterHub.services`` (parsed by ``GPUService``'s
own aliases), then its config file, as :meth:`GPUService.initialize` reads them; nothing is started.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from jupyterhub.app import JupyterHub
from traitlets import TraitError

from jupyterhub_gpu.doctor.results import Unavailable
from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.startup import config_probe

SERVICE_NAME = "gpu"
SERVICE_MODULE = "jupyterhub_gpu.service"


@dataclass
class Setup:
    """What the checks read: each part is None with the reason when it did not load."""

    hub_config: Path
    hub: JupyterHub | None = None
    hub_problem: str = ""
    probe: object | None = None  # the spawner class holding the hub's config (no user)
    probe_problem: str = ""
    service_spec: dict | None = None  # the gpu service's entry in c.JupyterHub.services
    service_argv: list[str] | None = None  # its command's arguments after ``-m jupyterhub_gpu.service``
    service: GPUService | None = None
    service_config: Path | None = None  # the service's config file, loaded when it exists
    service_config_loaded: bool = False
    service_problem: str = ""
    timeout: float = 10.0
    send_test: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def spawner_class(self):
        return self.need_hub().spawner_class

    def need_hub(self) -> JupyterHub:
        if self.hub is None:
            raise Unavailable(f"the hub's config did not load ({self.hub_problem})")
        return self.hub

    def need_probe(self):
        self.need_hub()
        if self.probe is None:
            raise Unavailable(self.probe_problem or "the spawner's settings did not load")
        return self.probe

    def need_service(self) -> GPUService:
        self.need_hub()
        if self.service is None:
            raise Unavailable(f"the gpu service's settings did not load ({self.service_problem})")
        return self.service


def is_gpu_spawner(spawner_class) -> bool:
    return isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)


def find_service(services: list[dict]) -> dict | None:
    """The gpu service's entry: named "gpu", else the one whose command runs ``jupyterhub_gpu.service``."""
    for spec in services:
        if spec.get("name") == SERVICE_NAME:
            return spec
    for spec in services:
        if service_arguments(spec) is not None:
            return spec
    return None


def service_arguments(spec: dict) -> list[str] | None:
    """The arguments the hub passes to the service (after ``-m jupyterhub_gpu.service``), or None."""
    command = [str(part) for part in spec.get("command") or []]
    if SERVICE_MODULE in command:
        return command[command.index(SERVICE_MODULE) + 1 :]
    return None


def load_hub(path: Path) -> JupyterHub:
    """A JupyterHub application holding the file's configuration (nothing initialised or started)."""
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    hub = JupyterHub(log_level=logging.CRITICAL)  # the doctor reports errors itself, without tracebacks
    hub.load_config_file(str(path))
    return hub


def load_service(argv: list[str], config_file: str | None, cwd: str | None = None) -> tuple[GPUService, Path, bool]:
    """The service's settings from its command line and config file, read by the service's own loader.

    ``config_file`` (the doctor's ``--service-config``) is passed as ``--config=`` after the command's own
    arguments; the service reads a relative path in ``cwd`` (its ``cwd`` in the hub's config, else the
    hub's working directory, which is the doctor's). Returns the application, the config file's path and
    whether it exists (and was loaded). Raises what the service would stop on (ValueError, TraitError).
    """
    if config_file:
        argv = [*argv, f"--config={Path(config_file).absolute()}"]
    service = GPUService(log_level=logging.CRITICAL)
    here = os.getcwd()
    try:
        if cwd:
            os.chdir(cwd)
        service.parse_command_line(list(argv))
        service.load_service_config()
        service.load_settings()
        path = Path(os.path.abspath(service.config_file))
    finally:
        os.chdir(here)
    return service, path, path.is_file()


def load_setup(hub_config: str, service_config: str | None = None, timeout: float = 10.0, send_test=False) -> Setup:
    """Load what the checks read; a part that fails to load is recorded with its reason, never raised."""
    setup = Setup(hub_config=Path(hub_config).absolute(), timeout=timeout, send_test=send_test)
    try:
        setup.hub = load_hub(setup.hub_config)
    except Exception as e:  # a config file is Python: anything can go wrong in it
        setup.hub_problem = f"{type(e).__name__}: {e}"
        return setup
    spawner_class = setup.hub.spawner_class
    if is_gpu_spawner(spawner_class):
        if hasattr(spawner_class, "_client"):
            # DockerSpawner keeps one client per class, made from the first config it saw: this config's
            # engine (client_kwargs, DOCKER_HOST) is the one to check, also when the doctor runs twice in a process
            spawner_class._client = None
        try:
            setup.probe = config_probe(setup.hub.config, spawner_class)
        except (TraitError, ValueError) as e:
            setup.probe_problem = f"{spawner_class.__name__}: {e}"
    else:
        setup.probe_problem = f"c.JupyterHub.spawner_class is {getattr(spawner_class, '__name__', spawner_class)}"
    setup.service_spec = find_service(setup.hub.services)
    if setup.service_spec is None:
        setup.service_problem = "no gpu service in c.JupyterHub.services"
        if not service_config:
            return setup
    setup.service_argv = service_arguments(setup.service_spec or {})
    if setup.service_argv is None:
        setup.notes.append("the gpu service is not started by the hub (no command): its command line is unknown")
    try:
        setup.service, setup.service_config, setup.service_config_loaded = load_service(
            setup.service_argv or [], service_config, (setup.service_spec or {}).get("cwd")
        )
        setup.service_problem = ""
    except Exception as e:  # a refused setting (TraitError) or an error in the service's config file
        setup.service_problem = f"{type(e).__name__}: {e}"
    return setup
