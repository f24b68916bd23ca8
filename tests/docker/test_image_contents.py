"""What the TensorFlow single-user image (CPU variant) holds: every dependency, every backend, no "Jupyter news".

`make test` builds jupyterhub-gpu/tensorflow:2.15-cpu from images/tensorflow/Dockerfile
(scripts/build-tf-image.sh cpu). These tests start plain containers of it (no hub): `pip check`
over its venv, an import of every module of the package and of each backend it loads lazily
(NVML, Apprise), and JupyterLab's settings as a server in the image serves them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import time
import uuid

import pip
import pytest
import requests

from tests.docker.test_docker_spawner import docker as docker_command

pytestmark = pytest.mark.docker

IMAGE = "jupyterhub-gpu/tensorflow:2.15-cpu"
# TensorFlow in a container is slow to start: three minutes a docker command
docker = functools.partial(docker_command, timeout=180)

# The modules the package loads only when a feature is used: each must import in the image.
BACKENDS = ["pynvml", "apprise", "jupyterhub_gpu.gpus.nvml", "jupyterhub_gpu.serverext", "jupyterhub_gpu.keras"]
# Modules that need an extra the single-user image does not install: the hub side on Kubernetes
# (the wheel's `kubernetes` extra). Nothing else may fail to import.
OPTIONAL = {"jupyterhub_gpu.spawners.kube": ("kubespawner", "kubernetes_asyncio")}


@pytest.fixture(scope="module", autouse=True)
def engine():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup tf-test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"image {IMAGE} missing: run `make tf-test-image`")


def run_python(code: str, *extra: str) -> str:
    return docker("run", "--rm", "--network", "none", *extra, IMAGE, "python", "-c", code)


def test_pip_check_passes_and_the_package_dependencies_are_installed():
    # the image's venv has no pip of its own (the build runs pip from its wheel): lend it this one's
    mount = ["-v", f"{os.path.dirname(pip.__file__)}:/opt/pip-lent/pip:ro", "-e", "PYTHONPATH=/opt/pip-lent"]
    out = docker("run", "--rm", "--network", "none", *mount, IMAGE, "python", "-m", "pip", "check",
                 "--disable-pip-version-check", check=False)  # fmt: skip
    assert out == "No broken requirements found.", out
    requires = json.loads(
        run_python(
            "import json, importlib.metadata as m; print(json.dumps(m.requires('jupyterhub-gpu')))",
        )
    )
    declared = {r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip() for r in requires
                if "extra ==" not in r}  # fmt: skip
    assert {"nvidia-ml-py", "apprise", "dockerspawner", "jupyterhub", "babel"} <= declared
    versions = json.loads(
        run_python(
            "import json, sys, importlib.metadata as m;"
            f"print(json.dumps({{d: m.version(d) for d in {sorted(declared)!r}}}))"
        )
    )
    assert set(versions) == declared  # each one installed (m.version raises otherwise)


def test_every_backend_and_every_module_of_the_package_imports():
    code = f"""
import importlib, json, pkgutil, sys
import jupyterhub_gpu
failed = {{}}
names = {BACKENDS!r} + [m.name for m in pkgutil.walk_packages(jupyterhub_gpu.__path__, "jupyterhub_gpu.",
                                                            onerror=lambda name: None)]
for name in names:
    if ".migrations" in name:  # alembic scripts, run by alembic only
        continue
    try:
        importlib.import_module(name)
    except BaseException as e:
        failed[name] = [type(e).__name__, getattr(e, "name", None), str(e)]
print(json.dumps({{"failed": failed, "count": len(names)}}))
"""
    result = json.loads(run_python(code).splitlines()[-1])
    assert result["count"] > 50
    unexpected = {}
    for name, (kind, missing, text) in result["failed"].items():
        allowed = next((mods for prefix, mods in OPTIONAL.items() if name.startswith(prefix)), ())
        if kind == "ModuleNotFoundError" and missing and missing.split(".")[0] in allowed:
            continue
        unexpected[name] = f"{kind}: {text}"
    assert not unexpected, unexpected


def test_nvml_backend_reports_the_missing_driver_not_a_missing_module():
    # no GPU here: NVML must fail on its library, the way a lab server without a driver does
    out = run_python(
        "import pynvml\n"
        "try:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n    print(type(e).__name__)\n"
        "else:\n    print('initialised')\n"
    )
    assert out in ("NVMLError_LibraryNotFound", "initialised"), out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_jupyterlab_in_the_image_never_asks_about_jupyter_news():
    overrides = json.loads(docker("run", "--rm", "--network", "none", IMAGE, "cat",
                                  "/opt/venv/share/jupyter/lab/settings/overrides.json"))  # fmt: skip
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"

    # the settings JupyterLab's page reads from a server of the image
    port, token = free_port(), uuid.uuid4().hex
    name = f"jhgpu-news-{uuid.uuid4().hex[:6]}"
    docker("run", "-d", "--name", name, "--network", "host", IMAGE, "jupyter", "lab", "--no-browser",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--IdentityProvider.token={token}")  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/apputils-extension:notification"
        deadline, answer = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            try:
                answer = requests.get(url, headers={"Authorization": f"token {token}"}, timeout=5)
                if answer.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(1)
        assert answer is not None and answer.status_code == 200, docker("logs", name, check=False)
        # the Lab's value of a setting is the user's (none here), else the schema's default, which
        # the server has overridden from the image's overrides.json
        setting = answer.json()
        assert "fetchNews" not in setting["settings"]
        assert setting["schema"]["properties"]["fetchNews"]["default"] == "false"
        assert setting["schema"]["properties"]["checkForUpdates"]["default"] is False
    finally:
        docker("rm", "-f", name, check=False)
