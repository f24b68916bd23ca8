"""The service's registration and roles as docs/service-api.md documents them, and as the reference configs set them."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from jupyterhub.app import JupyterHub
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from tests.docs.docs_config import probe, run_snippet
from tests.docs.docs_text import ROOT, blocks

ROLES_PAGE = ROOT / "docs" / "service-api.md"
#: the roles every deployment needs, by name; the users of gpu-admins are the site's own
NEEDED_ROLES = ("gpu-service", "user", "gpu-admins")


def documented_block():
    """The one block that registers the service and grants its roles (under "Roles to grant")."""
    found = [b for b in blocks(ROLES_PAGE) if b.lang == "python" and '"name": "gpu-service"' in b.body]
    assert len(found) == 1, [b.where for b in found]
    return found[0]


def documented() -> Config:
    block = documented_block()
    return run_snippet(block.body, block.where)


def reference_configs(state: Path) -> dict[str, Config]:
    """The hub's Config of each reference configuration (the Kubernetes one as the chart builds it)."""
    configs = {}
    for name in ("demo_config.py", "docker_host_config.py"):
        configs[name] = run_loader(name, state)
    values = yaml.safe_load((ROOT / "config" / "kubernetes" / "values.yaml").read_text())
    hub = values["hub"]
    kube = Config({"JupyterHub": dict(hub["config"]["JupyterHub"])})
    kube.JupyterHub.load_roles = [{**role, "name": name} for name, role in hub["loadRoles"].items()]
    kube.JupyterHub.services = []
    extra = "\n".join(hub["extraConfig"][k] for k in sorted(hub["extraConfig"]))
    ran = run_snippet(extra, "config/kubernetes/values.yaml hub.extraConfig", {"JUPYTERHUB_GPU_DB_URL": "sqlite://"})
    kube.merge(ran)
    configs["kubernetes/values.yaml"] = kube
    return configs


def run_loader(name: str, state: Path) -> Config:
    saved = os.environ.get("JUPYTERHUB_GPU_DEMO_STATE")
    os.environ["JUPYTERHUB_GPU_DEMO_STATE"] = str(state)
    try:
        return PyFileConfigLoader(name, path=str(ROOT / "config")).load_config()
    finally:
        if saved is None:
            os.environ.pop("JUPYTERHUB_GPU_DEMO_STATE")
        else:
            os.environ["JUPYTERHUB_GPU_DEMO_STATE"] = saved


def hub_settings(config: Config) -> dict:
    """What the roles comparison looks at, from the JupyterHub object the config makes."""
    hub = probe(JupyterHub, config)
    roles = {r["name"]: r for r in hub.load_roles}
    gpu = [s for s in hub.services if s.get("name") == "gpu"]
    return {
        "roles": roles,
        "gpu": gpu[0] if gpu else None,
        "custom_scopes": dict(hub.custom_scopes),
        "allow_named_servers": hub.allow_named_servers,
        "named_server_limit_per_user": hub.named_server_limit_per_user,
    }
