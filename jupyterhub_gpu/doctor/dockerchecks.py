"""The doctor's Docker checks: the engine reachable, GPU device requests served, the servers isolated from each
other, the shared datasets there, and every profile's image holding what a server needs.

What Docker's settings say is not taken on trust where the property can be tried: a GPU device request is
made (:func:`jupyterhub_gpu.spawners.docker.engine.gpu_request_problem`), two probe containers try to
connect to each other on the servers' network (:func:`.probes.isolation_probe`), and the image is asked
to import NVML and to ``pip check`` itself (:func:`.probes.image_gpu_probe`). Each probe container is
short-lived, labelled ``jupyterhub-gpu.doctor``, and removed whatever happens.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from jupyterhub_gpu import __version__
from jupyterhub_gpu.doctor import docker as engine
from jupyterhub_gpu.doctor import probes
from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN, Result, Unavailable
from jupyterhub_gpu.spawners.docker.engine import (
    GPU_RUNTIME_FIX,
    IPTABLES_FIX,
    engine_iptables,
    gpu_request_problem,
    present_image,
)
from jupyterhub_gpu.spawners.docker.objects import network_gateway
from jupyterhub_gpu.spawners.docker.spawner import (
    GPUDockerSpawner,
    loopback_problems,
    missing_images,
    network_problem,
)
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles

PROBE_SECONDS = 20  # at least, for each probe container (a busy engine takes seconds to start one)


def _docker_probe(setup: Setup):
    probe = setup.need_probe()
    if not isinstance(probe, GPUDockerSpawner):
        raise Unavailable(f"{type(probe).__name__} runs no Docker containers")
    return probe


def _profile_images(probe, gpu_only: bool = False) -> list[str]:
    """The profiles' images (GPU profiles' first), each once; none for profiles given as a callable."""
    if callable(probe.profiles):
        return []
    try:
        profiles = parse_profiles(probe.profiles, require_image=type(probe)._require_image)
    except ProfileError:
        return []
    ordered = sorted(profiles, key=lambda p: not p.gpu_count)
    return list(dict.fromkeys(p.image or probe.image for p in ordered if p.gpu_count or not gpu_only))


def check_docker(setup: Setup) -> Iterator[Result]:
    """Docker reachable, GPU device requests served, the servers' network isolating, the datasets there."""
    probe = _docker_probe(setup)
    try:
        version = engine.engine_version(probe.client)
        info = probe.client.info()
    except Exception as e:
        yield Result(
            "docker",
            FAIL,
            f"cannot reach the Docker engine: {e}",
            "start dockerd, and run the hub as a user in the docker group (or set DOCKER_HOST)",
        )
        return
    yield Result("docker", PASS, f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')})")
    local = not str(probe.client.base_url).startswith(("http://", "https://", "tcp://"))
    yield from _gpu_runtime(setup, probe, info, local)
    yield from _network(setup, probe, info, local)
    yield from _datasets(probe, local)


def _gpu_runtime(setup: Setup, probe, info: dict, local: bool) -> Iterator[Result]:
    """Whether the engine serves a GPU device request: tried with a short-lived container where an image is."""
    ok, how = engine.has_nvidia_runtime(info, local)
    gpu_images = _profile_images(probe, gpu_only=True)
    cls = type(probe).__name__
    if probe.omit_device_requests:
        yield Result(
            "nvidia-runtime",
            WARN,
            f"omit_device_requests is on: containers get no GPU (a test-only switch; {how})",
            f"on a GPU host install the NVIDIA Container Toolkit and set c.{cls}.omit_device_requests = False",
        )
        return
    image = present_image(probe.client, gpu_images) if gpu_images else None
    if image is None:
        why = "no GPU profile" if not gpu_images else "not tried: no GPU profile's image is on this host yet"
        if ok:
            yield Result("nvidia-runtime", PASS, f"Docker can give containers GPUs: {how} ({why})")
        else:
            yield Result(
                "nvidia-runtime",
                FAIL if gpu_images else WARN,
                f"Docker has no NVIDIA runtime ({how}; {why}): a GPU profile's container fails with 'could not"
                " select device driver'",
                GPU_RUNTIME_FIX,
            )
        return
    try:
        error = gpu_request_problem(probe.client, image, timeout=max(setup.timeout, PROBE_SECONDS))
    except Exception as e:  # the engine refused the probe container itself
        yield Result(
            "nvidia-runtime",
            WARN,
            f"could not try a GPU device request with {image}: {e}",
            "run the doctor again; if it persists, check the engine's log",
        )
        return
    if error:
        yield Result(
            "nvidia-runtime",
            FAIL,
            f"Docker refuses a GPU device request ({error}): every GPU profile's spawn fails; students are told"
            " the lab's GPU runtime is not set up",
            GPU_RUNTIME_FIX,
        )
    else:
        yield Result("nvidia-runtime", PASS, f"a container of {image} with a GPU device request started")


def _network(setup: Setup, probe, info: dict, local: bool) -> Iterator[Result]:
    name = probe.network_name
    cls = type(probe).__name__
    if name == "host":
        yield Result(
            "network",
            WARN,
            "servers run on the host network: every server shares the host's loopback, so any user can reach every"
            " other user's Jupyter port, kernels and TensorBoard",
            f"remove c.{cls}.network_name = 'host' (the default isolating network is made at the hub's start)",
        )
        return
    network = engine.inspect_network(probe.client, name)
    for problem in loopback_problems(setup.hub.config, probe, network_gateway(network or {})):
        yield Result("network", FAIL, problem, "the hub and the service listen where the servers reach them")
    if network is None:
        subnet = f" on {probe.network_subnet}" if probe.network_subnet else ""
        yield Result("network", PASS, f"Docker network {name!r} does not exist yet: the hub creates it{subnet}")
    else:
        problem = network_problem(network, probe.network_subnet)
        if problem and not probe.allow_shared_network:
            yield Result(
                "network",
                FAIL,
                f"{problem}: the hub refuses to start",
                f"remove that network (docker network rm {name}) so the hub makes an isolating one, or set"
                f" c.{cls}.network_name to another name (docs/admin.md, Networking)",
            )
            return
        if problem:
            yield Result(
                "network", WARN, f"{problem} (allow_shared_network is on)", f"set c.{cls}.allow_shared_network = False"
            )
            return
    yield from _isolation(setup, probe, info, local)


def _isolation(setup: Setup, probe, info: dict, local: bool) -> Iterator[Result]:
    """Two probe containers on the servers' network: PASS only when one cannot connect to the other."""
    name = probe.network_name
    iptables = engine_iptables(info) if local else None
    off = (
        "the Docker engine runs with iptables disabled (--iptables=false): Docker enforces the network's"
        " isolation with iptables rules, so the servers on it reach each other's Jupyter port, kernels and"
        " TensorBoard"
    )
    image = present_image(probe.client, [*_profile_images(probe), probe.image])
    if image is None:
        if iptables is False:
            yield Result("network", FAIL, f"{off} (not tried: no profile's image is on this host)", IPTABLES_FIX)
        else:
            yield Result(
                "network",
                WARN,
                f"whether the servers on {name!r} are isolated from each other was not tried: no profile's image"
                " is on this Docker host yet",
                "build or pull the profiles' images, then run the doctor again",
            )
        return
    try:
        seen = probes.isolation_probe(
            probe.client,
            name,
            image,
            subnet=probe.network_subnet,
            internal=probe.network_internal,
            user=probe.container_user,
            timeout=max(setup.timeout, PROBE_SECONDS),
        )
    except engine.ProbeError as e:
        status, text = (FAIL, off) if iptables is False else (WARN, f"whether the servers on {name!r} are isolated")
        yield Result("network", status, f"{text}; the probe containers could not tell: {e}", IPTABLES_FIX)
        return
    where = f"a throwaway network made as {name!r} will be" if seen.throwaway else f"network {name!r}"
    if seen.reached:
        yield Result(
            "network",
            FAIL,
            f"SERVERS ARE NOT ISOLATED: a probe container on {where} connected to another's port {probes.PORT}"
            f" at {seen.listener_ip}"
            + (f"; {off}" if iptables is False else ": the engine does not enforce enable_icc=false"),
            IPTABLES_FIX,
        )
    else:
        yield Result(
            "network",
            PASS,
            f"Docker network {name!r} isolates the servers from each other: a probe container on {where} could not"
            f" connect to another's port {probes.PORT} ({seen.answer})",
        )


def _datasets(probe, local: bool) -> Iterator[Result]:
    """The shared datasets (``datasets_volume``): a host path that exists, or a named volume on the engine."""
    source = probe.datasets_volume
    if not source:
        return
    setting = f"c.{type(probe).__name__}.datasets_volume"
    if source.startswith("/"):
        if not local:
            yield Result(
                "datasets",
                WARN,
                f"{setting} = {source!r}: a host path on the remote Docker host, not checked from here",
                f"check that {source} exists on the Docker host",
            )
        elif not Path(source).is_dir():
            what = "is not a folder" if Path(source).exists() else "does not exist"
            yield Result(
                "datasets",
                FAIL,
                f"{setting} = {source!r}: the host path {what}: Docker would mount an empty folder it makes (or"
                " fail the spawn), and students find no datasets",
                f"mkdir -p {source} and put the shared datasets there (read-only to the servers), or correct"
                f' {setting} ("" for none)',
            )
        else:
            yield Result("datasets", PASS, f"shared datasets {source} (read-only at {probe.datasets_dir})")
        return
    try:
        probe.client.inspect_volume(source)
    except Exception as e:
        yield Result(
            "datasets",
            WARN,
            f"{setting} = {source!r}: no such Docker volume ({type(e).__name__}): Docker makes it empty at the"
            " first spawn, and students find no datasets",
            f"docker volume create {source} and fill it, or give a host path",
        )
        return
    yield Result("datasets", PASS, f"shared datasets in the volume {source} (read-only at {probe.datasets_dir})")


def _images(probe) -> dict[str, list[str]]:
    """Each image the profiles use, with the profiles that use it."""
    images: dict[str, list[str]] = {}
    for profile in parse_profiles(probe.profiles, require_image=type(probe)._require_image):
        images.setdefault(profile.image or probe.image, []).append(profile.slug)
    return images


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def check_images(setup: Setup) -> Iterator[Result]:
    """Every profile's image is on the Docker host, with JupyterHub, JupyterLab and jupyterhub-gpu inside."""
    probe = _docker_probe(setup)
    if callable(probe.profiles):
        raise Unavailable("profiles is a callable: its images are known only at spawn time")
    try:
        images = _images(probe)
    except ProfileError as e:
        raise Unavailable(f"the profiles do not parse ({e})") from None
    try:
        probe.client.ping()
    except Exception as e:
        raise Unavailable(f"Docker is not reachable ({e})") from None
    missing = missing_images(probe.client, images)  # the spawner's own test, as at each spawn
    hub_version = setup.hub.version
    lab_url = str(probe.default_url or "").startswith("/lab")
    for image, slugs in images.items():
        which = f"image {image} (profiles {', '.join(slugs)})"
        if image in missing:
            yield Result(
                "images",
                FAIL,
                f"{which} is not on this Docker host: a student's spawn of it fails",
                f"build it (make image, images/tensorflow/Dockerfile) or `docker pull {image}`, or change the"
                " profiles' image",
            )
            continue
        try:
            found = engine.image_packages(probe.client, image, probe.container_user, timeout=max(setup.timeout, 60))
        except engine.ProbeError as e:
            yield Result("images", FAIL, f"{which}: {e}", "the image needs python3 with jupyterhub and jupyterlab")
            continue
        missing = []
        if not found["jupyterhub"]:
            missing.append(("jupyterhub", FAIL, "no jupyterhub-singleuser: the server cannot start"))
        if not found["jupyterlab"]:
            status = FAIL if lab_url else WARN
            why = "c.Spawner.default_url = '/lab' answers 404" if lab_url else "students get the classic page only"
            missing.append(("jupyterlab", status, why))
        if not found["jupyterhub-gpu"]:
            missing.append(("jupyterhub-gpu", FAIL, "no cost or GPU panel in JupyterLab, no samples for GPU culling"))
        for package, status, why in missing:
            yield Result(
                "images",
                status,
                f"{which} has no {package}: {why}",
                f"install {package} in the image (images/tensorflow/Dockerfile installs all three) and rebuild it",
            )
        gpu_problems = list(_image_gpu(probe, image, which, bool(found["jupyterhub-gpu"]), setup.timeout))
        yield from gpu_problems
        if missing or gpu_problems:
            continue
        versions = ", ".join(f"{name} {found[name]}" for name in engine.IMAGE_PACKAGES)
        if found["jupyterhub-gpu"] != __version__:
            yield Result(
                "images",
                WARN,
                f"{which}: jupyterhub-gpu {found['jupyterhub-gpu']} inside, {__version__} in the hub",
                "rebuild the image with the hub's jupyterhub-gpu version",
            )
        elif hub_version and _version_tuple(found["jupyterhub"])[:1] != _version_tuple(hub_version)[:1]:
            yield Result(
                "images",
                WARN,
                f"{which}: jupyterhub {found['jupyterhub']} inside, {hub_version} in the hub",
                "install the hub's JupyterHub major version in the image",
            )
        else:
            yield Result("images", PASS, f"{which}: {versions}")


def _image_gpu(probe, image: str, which: str, has_package: bool, timeout: float) -> Iterator[Result]:
    """The image can read a GPU (pynvml and the server side's NVML module import) and ``pip check`` passes."""
    try:
        found = probes.image_gpu_probe(probe.client, image, probe.container_user, timeout=max(timeout, 120))
    except engine.ProbeError as e:
        yield Result("images", FAIL, f"{which}: {e}", "the image needs python3 with pip")
        return
    if found.get("nvml") and has_package:
        package = probes.missing_distribution(found)
        yield Result(
            "images",
            FAIL,
            f"{which} cannot read a GPU: `import pynvml, jupyterhub_gpu.gpus.nvml` fails ({found['nvml']}): {package}"
            " is missing; JupyterLab shows no GPU use and GPU culling gets no samples",
            f"install {package} in the image (pip install {package}; images/tensorflow/Dockerfile) and rebuild it",
        )
    report = (found.get("pip_check") or "").strip()
    if found.get("pip_rc") and "No module named pip" in report:
        yield Result("images", WARN, f"{which}: no pip in the image: its packages were not checked", "")
    elif found.get("pip_rc"):
        lines = [line for line in report.splitlines() if line.strip()]
        yield Result(
            "images",
            FAIL,
            f"{which}: `pip check` fails: {'; '.join(lines[:6])}" + (" ..." if len(lines) > 6 else ""),
            "install the packages it names in the image (the versions it asks for) and rebuild it",
        )
