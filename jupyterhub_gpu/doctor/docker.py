"""What the doctor asks the Docker engine: read-only questions, and one throwaway container per image.

The image probe runs ``python3 -c`` in a container with no network that is removed at once, to read
which of JupyterLab, JupyterHub (``jupyterhub-singleuser``) and jupyterhub-gpu the image holds; the
spawner's own hardening (user, no capabilities) applies, so the probe runs as a student's server would.
"""

from __future__ import annotations

import json
import logging
import shutil

from jupyterhub_gpu.spawners.docker.engine import engine_path, remove_probe

IMAGE_PACKAGES = ("jupyterlab", "jupyterhub", "jupyterhub-gpu")
PROBE_CODE = (
    "import json, importlib.metadata as m\n"
    "found = {}\n"
    f"for name in {IMAGE_PACKAGES!r}:\n"
    "    try:\n"
    "        found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        found[name] = None\n"
    "print(json.dumps(found))\n"
)
log = logging.getLogger("jupyterhub_gpu.doctor")
PROBE_LABEL = "jupyterhub-gpu.doctor"
NVIDIA_HOOK = "nvidia-container-runtime-hook"  # dockerd offers the "gpu" capability when this is on its PATH


class ProbeError(RuntimeError):
    """The probe container could not run or said nothing readable."""


def _errors():
    import docker as docker_py  # optional heavy dependency: docker-py (DockerSpawner's client)

    return docker_py.errors


def engine_version(client) -> dict:
    """``docker version`` of the engine the spawner's client reaches (raises when it cannot)."""
    return client.version()


def has_nvidia_runtime(info: dict, local_engine: bool) -> tuple[bool, str]:
    """Whether the engine can give containers GPUs, and what showed it.

    ``nvidia`` among the engine's runtimes (``nvidia-ctk runtime configure``), or, for a local engine, the
    NVIDIA hook on the PATH dockerd started with (it registers its ``gpu`` device driver when it finds the hook
    there: a hook on this shell's PATH that dockerd never saw gives no GPU).
    """
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if "nvidia" in runtimes:
        return True, "the nvidia runtime is registered"
    if local_engine:
        path = engine_path(info)
        hook = shutil.which(NVIDIA_HOOK, path=path) if path is not None else shutil.which(NVIDIA_HOOK)
        if hook:
            return True, f"{hook} is on dockerd's PATH"
    return False, f"runtimes: {', '.join(runtimes) or 'none'}"


def inspect_network(client, name: str) -> dict | None:
    try:
        return client.inspect_network(name)
    except _errors().NotFound:
        return None


def run_python(client, image: str, code: str, *, label: str, user: str = "", timeout: float = 60) -> tuple:
    """``(status, stdout, stderr)`` of ``python3 -c code`` in a throwaway container of ``image``: no network, no
    capabilities, no new privileges, small limits, the doctor's label; removed whatever happens."""
    host_config = client.create_host_config(
        network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"], mem_limit="512m", pids_limit=64
    )
    container = client.create_container(
        image,
        command=["-c", code],
        entrypoint=["python3"],
        user=user or None,
        network_disabled=True,
        labels={PROBE_LABEL: label},
        host_config=host_config,
    )
    cid = container["Id"]
    try:
        client.start(cid)
        status = client.wait(cid, timeout=timeout).get("StatusCode")
        out = client.logs(cid, stdout=True, stderr=False).decode("utf-8", "replace").strip()
        err = client.logs(cid, stdout=False, stderr=True).decode("utf-8", "replace").strip()
    except _errors().APIError as e:
        raise ProbeError(f"python3 did not run in the image: {e.explanation or e}") from None
    except Exception as e:  # the engine's wait timed out
        raise ProbeError(f"the image's probe did not answer in time: {type(e).__name__}: {e}") from None
    finally:
        remove_probe(client, cid)
    return status, out, err


def image_packages(client, image: str, user: str = "", timeout: float = 60) -> dict[str, str | None]:
    """The versions of :data:`IMAGE_PACKAGES` in ``image`` (None: not installed), read in a throwaway container."""
    status, out, err = run_python(client, image, PROBE_CODE, label="image-probe", user=user, timeout=timeout)
    if status != 0:
        raise ProbeError(f"python3 -c exited with {status}: {(err or out)[-300:]}")
    try:
        found = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeError(f"unreadable answer from the image: {out[-300:]!r}") from None
    return {name: found.get(name) for name in IMAGE_PACKAGES}
