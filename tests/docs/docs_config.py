"""Load a configuration snippet of the docs the way JupyterHub and the gpu service would, and say what is wrong.

A snippet is run as a config file (``c`` and ``get_config`` given, in a fake environment), then every section
must be a configurable class the project's configs use, every key a configurable trait of it, and every value
one that class accepts: the GPU spawners through the hub's own startup checks (``probe_and_check``, the profile
parser, the static inventory), the gpu service through its own ``initialize`` (every check it makes at start),
JupyterHub's roles through JupyterHub's scope check, its services through the service fields JupyterHub knows.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path

from jupyterhub import scopes as hub_scopes
from jupyterhub.app import JupyterHub
from jupyterhub.auth import Authenticator, DummyAuthenticator
from jupyterhub.proxy import ConfigurableHTTPProxy
from jupyterhub.services.auth import HubOAuth
from jupyterhub.services.service import Service
from jupyterhub.spawner import LocalProcessSpawner, Spawner
from traitlets import TraitError
from traitlets.config import Config, Configurable

from jupyterhub_gpu.gpus.device import InventoryError
from jupyterhub_gpu.serverext.extension import GPUStats
from jupyterhub_gpu.serverext.startup import StartupScript
from jupyterhub_gpu.serverext.stopwhendone import GPUStopWhenDone
from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.service.kueue.settings import Kueue
from jupyterhub_gpu.service.settings import DEPRECATED, SETTINGS_CLASSES
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES
from jupyterhub_gpu.spawners.assign.host import shared_allocator
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles
from jupyterhub_gpu.spawners.startup import probe_and_check

#: every class a snippet of the docs may configure
CLASSES = {
    cls.__name__: cls
    for cls in (
        JupyterHub,
        Spawner,
        LocalProcessSpawner,
        Authenticator,
        DummyAuthenticator,
        ConfigurableHTTPProxy,
        GPUDockerSpawner,
        GPULocalSpawner,
        GPUKubeSpawner,
        GPUService,
        GPUStats,
        GPUStopWhenDone,
        StartupScript,
        *SETTINGS_CLASSES,  # the gpu service's settings by concern (c.Budgets, c.Notify, ...)
        Kueue,  # the gpu service's class reservations kept by Kueue (c.Kueue)
    )
}

#: what a snippet that reads the environment finds there (a Kubernetes pod's, a hub-managed service's)
FAKE_ENV = {
    "POD_IP": "10.0.0.5",
    "JUPYTERHUB_GPU_LEDGER_URL": "postgresql+psycopg://gpu:secret@postgres.db.svc:5432/jupyterhub_gpu",
    "JUPYTERHUB_API_TOKEN": "service-token",
    "JUPYTERHUB_CLIENT_ID": "service-gpu",
    "JUPYTERHUB_API_URL": "http://127.0.0.1:1/hub/api",
    "JUPYTERHUB_SERVICE_PREFIX": "/services/gpu/",
}

#: stands in for the GPUs of a host without NVML, so that a snippet with gpu_backend = "nvml" is checked too
STAND_IN_GPUS = [
    {"model": "T4", "count": 4, "memory_gb": 16},
    {"model": "A100", "count": 2, "memory_gb": 40},
    {"model": "A100 MIG 1g.10gb", "count": 2, "memory_gb": 10},
]


def run_snippet(code: str, where: str, environ: dict[str, str] | None = None) -> Config:
    """The Config that ``code`` leaves, run as a config file would be, with ``environ`` as ``os.environ``."""
    config = Config()
    namespace = {"c": config, "get_config": lambda: config, "__file__": where}
    saved = os.environ.copy()
    os.environ.update(FAKE_ENV | (environ or {}))
    try:
        exec(compile(code, where, "exec"), namespace)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return config


def probe(cls, config: Config):
    """An object of ``cls`` holding only ``config``: each value goes through the trait's own validation."""
    obj = cls.__new__(cls)
    Configurable.__init__(obj, config=config)
    for name in config.get(cls.__name__, {}):
        getattr(obj, name)  # a lazy value (load_roles.append(...)) is applied here
    return obj


def problems_of(config: Config, workdir: Path) -> list[str]:
    """Everything JupyterHub, the spawners or the service would refuse in ``config``, in words."""
    problems = []
    for section in config:
        cls = CLASSES.get(section)
        if cls is None:
            problems.append(f"c.{section}: no such configurable class in jupyterhub or jupyterhub-gpu")
            continue
        known = cls.class_traits(config=True)
        if cls is GPUService:
            known = {**known, **dict.fromkeys(DEPRECATED)}  # the flat names of earlier releases still work
        for name in config[section]:
            if name not in known:
                problems.append(f"c.{section}.{name}: {section} has no such option")
        if issubclass(cls, GPUSpawnerMixin):
            problems += _spawner_problems(config, cls)
        elif cls is GPUService or cls in SETTINGS_CLASSES:
            if not any(p.startswith("c.GPUService:") for p in problems):  # the service reads all its sections
                problems += _service_problems(config, workdir)
        else:
            try:
                obj = probe(cls, config)
            except (TraitError, ValueError) as e:
                problems.append(f"c.{section}: {e}")
                continue
            if cls is JupyterHub:
                problems += _hub_problems(obj, config)
    return problems


def _spawner_problems(config: Config, cls) -> list[str]:
    section = config[cls.__name__]
    trial = copy.deepcopy(config)  # a copy the stand-in GPUs can go into
    if cls is not GPUKubeSpawner and section.get("gpu_backend", "nvml") == "nvml":
        trial[cls.__name__]["gpu_backend"] = "simulated"
        trial[cls.__name__]["simulated_gpus"] = STAND_IN_GPUS
    obj, problems = probe_and_check(trial, cls)
    problems = [f"c.{cls.__name__}: {p}" for p in problems]
    if obj is None:
        return problems
    if cls is GPUKubeSpawner:
        return problems + [f"c.{cls.__name__}: {p}" for p in cls.gpu_check_config(trial)]
    if "profiles" in section and not callable(obj.profiles):
        try:
            parse_profiles(obj.profiles, require_image=cls._require_image)
        except ProfileError as e:
            problems.append(f"c.{cls.__name__}.profiles: {e}")
    try:
        shared_allocator(obj.gpu_backend, obj.static_gpus, obj.simulated_gpus)
    except InventoryError as e:
        problems.append(f"c.{cls.__name__}: {e}")
    return problems


def _service_problems(config: Config, workdir: Path) -> list[str]:
    """Start the service's initialize on the snippet (its own ledger in ``workdir``: no database is reached)."""
    service = GPUService()
    said = _Said()
    service.log.addHandler(said)
    saved = os.environ.copy()
    os.environ.update(FAKE_ENV)
    try:
        sections = ("GPUService", *(cls.__name__ for cls in SETTINGS_CLASSES))
        service.update_config(Config({name: config[name] for name in sections if name in config}))
        service.initialize([f"--GPUService.db_url=sqlite:///{workdir / 'ledger.sqlite'}"])
    except SystemExit:
        return [f"c.GPUService: the service refused to start: {' / '.join(said.messages) or '(nothing logged)'}"]
    except (TraitError, ValueError) as e:
        return [f"c.GPUService: {e}"]
    finally:
        service.log.removeHandler(said)
        os.environ.clear()
        os.environ.update(saved)
        HubOAuth.clear_instance()
        GPUService.clear_instance()
    return [f"c.GPUService: the service logged at start: {m}" for m in said.messages]


class _Said(logging.Handler):
    """The service's errors while it starts (each names the setting)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _hub_problems(hub: JupyterHub, config: Config) -> list[str]:
    problems = []
    custom = dict(hub.custom_scopes)
    # the gpu service's scopes count as declared: a snippet that adds one role relies on the roles page's setup
    defined = {**hub_scopes.scope_definitions, **CUSTOM_SCOPES, **custom}
    for scope in custom:
        if not scope.startswith("custom:"):
            problems.append(f"c.JupyterHub.custom_scopes: {scope!r} must start with 'custom:'")
    services = {}
    for spec in hub.services:
        service = Service()
        for key, value in spec.items():
            if key not in Service.class_traits():
                problems.append(f"c.JupyterHub.services[{spec.get('name')!r}]: JupyterHub has no service field {key!r}")
                continue
            try:
                setattr(service, key, value)
            except TraitError as e:
                problems.append(f"c.JupyterHub.services[{spec.get('name')!r}].{key}: {e}")
        services[spec.get("name")] = spec
    for role in hub.load_roles:
        where = f"c.JupyterHub.load_roles[{role.get('name')!r}]"
        extra = set(role) - {"name", "description", "scopes", "users", "services", "groups"}
        if extra:
            problems.append(f"{where}: JupyterHub has no role field {sorted(extra)}")
        saved = hub_scopes.scope_definitions
        hub_scopes.scope_definitions = defined
        try:
            hub_scopes._check_scopes_exist(role.get("scopes", []), who_for=f"role {role.get('name')}")
        except hub_scopes.ScopeNotFound as e:
            problems.append(f"{where}: {e}")
        finally:
            hub_scopes.scope_definitions = saved
        if "services" in config["JupyterHub"] and "services" in role:
            for name in set(role["services"]) - set(services):
                problems.append(f"{where}: names the service {name!r}, which the snippet does not register")
    for name, spec in services.items():
        for scope in spec.get("oauth_client_allowed_scopes", []):
            if scope.partition("!")[0] not in defined:
                problems.append(f"c.JupyterHub.services[{name!r}].oauth_client_allowed_scopes: no scope {scope!r}")
    return problems
