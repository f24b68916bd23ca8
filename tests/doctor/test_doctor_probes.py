"""The doctor tries the properties a lab needs on the engine itself: the servers isolated from each other
(two probe containers), a GPU device request served, a static inventory against the host's NVML, the shared
datasets' host path, and the image reading a GPU.

The suite's dockerd runs with ``--iptables=false`` (scripts/docker-setup.sh): Docker accepts the isolated network
there and enforces nothing. ``own_dockerd`` is a dockerd with iptables (tests/docker/own_dockerd.py). Run with
``-m docker``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import textwrap
import uuid

import docker as docker_py
import pytest

from jupyterhub_gpu.spawners.docker import engine as docker_engine
from tests.conftest import wait_for
from tests.docker import own_dockerd as own
from tests.docker.test_docker_spawner import IMAGE as TEST_IMAGE
from tests.docker.test_docker_spawner import docker, engine, try_gpu_request  # noqa: F401 (engine: fails the module without dockerd)
from tests.doctor.test_doctor_docker import docker_config

pytestmark = pytest.mark.docker

own_dockerd = own.own_dockerd  # the fixture: a dockerd with iptables, the test image loaded

CPU_PROFILE = f'[{{"slug": "cpu", "gpu_count": 0, "image": {TEST_IMAGE!r}, "price_per_hour": "0.60"}}]'
T4_PROFILE = (
    f'[{{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {TEST_IMAGE!r}, "price_per_gpu_hour": "3.00"}}]'
)


def network_lines(subnet, base_url: str = "") -> str:
    lines = [
        f'c.GPUDockerSpawner.network_name = "jhgpu-doctor-iso-{uuid.uuid4().hex[:6]}"',
        f'c.GPUDockerSpawner.network_subnet = "{subnet}"',
        f'c.JupyterHub.hub_ip = "{next(subnet.hosts())}"',
        f'c.GPUDockerSpawner.gpu_service_url = "http://{next(subnet.hosts())}:10101/services/gpu/"',
    ]
    if base_url:
        lines.append(f"c.GPUDockerSpawner.client_kwargs = {{'base_url': {base_url!r}}}")
    return "\n".join(lines)


def gpu_requests_work(*host: str) -> bool:
    """Whether this engine serves a GPU device request (a stand-in NVIDIA hook may make it so)."""
    return try_gpu_request(*host, image=TEST_IMAGE).returncode == 0


def no_probe_left(*host: str) -> None:
    wait_for(
        lambda: subprocess.run(
            ["docker", *host, "ps", "-aq", "--filter", "label=jupyterhub-gpu.probe", "--filter",
             "label=jupyterhub-gpu.doctor"],
            capture_output=True, text=True,
        ).stdout.strip() == "",
        15,
        what="no probe container left",
    )  # fmt: skip
    nets = subprocess.run(
        ["docker", *host, "network", "ls", "-q", "--filter", "label=jupyterhub-gpu.doctor"],
        capture_output=True,
        text=True,
    )
    assert nets.stdout.strip() == "", "a probe network was left"


def test_isolation_fails_on_an_engine_without_iptables_and_passes_on_one_with_them(doctor, own_dockerd):
    subnet = own.unused_subnet()
    # the suite's dockerd: --iptables=false, the network's settings say it isolates, it does not
    report = doctor.run(doctor.config(docker_config(CPU_PROFILE, network_lines(subnet))))
    [line] = [r for r in report.of("network") if r["status"] == "fail" and "NOT ISOLATED" in r["message"]]
    assert "connected to another's port 8888" in line["message"], line
    assert "--iptables=false" in line["message"]  # the engine's command line says why
    assert "iptables enabled" in line["fix"] and "docs/admin.md" in line["fix"]
    assert report.status == 1
    assert not [r for r in report.of("network") if r["status"] == "pass" and "isolates" in r["message"]]
    no_probe_left()

    # a dockerd with iptables: the same configuration passes
    report = doctor.run(doctor.config(docker_config(CPU_PROFILE, network_lines(subnet, own_dockerd.host))))
    [line] = [r for r in report.of("network") if "isolates the servers" in r["message"]]
    assert line["status"] == "pass", report.stdout
    assert "could not connect to another's port 8888" in line["message"]
    assert not [r for r in report.of("network") if r["status"] == "fail"], report.stdout
    no_probe_left("-H", own_dockerd.host)


def test_the_engines_iptables_are_read_from_its_command_line(own_dockerd):
    assert docker_engine.engine_iptables(docker_py.APIClient().info()) is False  # scripts/docker-setup.sh
    assert docker_engine.engine_iptables(docker_py.APIClient(base_url=own_dockerd.host).info()) is True


def test_the_hub_logs_once_at_start_that_servers_are_not_isolated(caplog):
    class Probe:
        network_name = "jupyterhub-gpu"
        omit_device_requests = True
        image = TEST_IMAGE
        client = docker_py.APIClient()
        log = logging.getLogger("test.hub")

    docker_engine._reported.clear()
    with caplog.at_level(logging.ERROR, logger="test.hub"):
        docker_engine.report_engine_at_start(Probe(), [])
        docker_engine.report_engine_at_start(Probe(), [])
    lines = [r for r in caplog.records if "SERVERS ARE NOT ISOLATED" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.ERROR
    assert "iptables" in lines[0].getMessage() and "'jupyterhub-gpu'" in lines[0].getMessage()


def test_a_static_inventory_the_host_does_not_have_and_an_engine_without_the_nvidia_runtime_fail(doctor):
    static = (
        'c.GPUDockerSpawner.static_gpus = [{"index": 0, "uuid": "GPU-1111", "name": "Tesla T4", "memory_gb": 16},'
        ' {"index": 1, "uuid": "GPU-2222", "name": "Tesla T4", "memory_gb": 16}]\n'
        "c.GPUDockerSpawner.omit_device_requests = False\n"
    )
    report = doctor.run(doctor.config(docker_config(T4_PROFILE) + static))
    assert report.status == 1
    assert report.one("gpus", "pass")["message"].startswith("2 GPU(s) from static")  # the list itself is valid
    host = report.one("gpus", "fail")  # ... but this host has no GPU (no NVIDIA driver here)
    assert "static inventory of 2 GPU(s) (GPU-1111 (Tesla T4), GPU-2222 (Tesla T4))" in host["message"]
    assert "NVML could not start" in host["message"]
    assert "nvidia-smi" in host["fix"] and "static_gpus" in host["fix"]
    runtime = report.of("nvidia-runtime")
    if gpu_requests_work():
        assert [r["status"] for r in runtime] == ["pass"], runtime
        assert "with a GPU device request started" in runtime[0]["message"]
    else:
        assert [r["status"] for r in runtime] == ["fail"], runtime
        assert "could not select device driver" in runtime[0]["message"]
        assert "NVIDIA Container Toolkit" in runtime[0]["fix"] and "restart dockerd" in runtime[0]["fix"]
    no_probe_left()


def test_a_datasets_host_path_that_does_not_exist_fails(doctor, tmp_path):
    missing = tmp_path / "no-datasets-here"
    extra = f"c.GPUDockerSpawner.datasets_volume = {str(missing)!r}\n"
    report = doctor.run(doctor.config(docker_config(CPU_PROFILE) + extra))
    line = report.one("datasets", "fail")
    assert f"datasets_volume = {str(missing)!r}: the host path does not exist" in line["message"]
    assert f"mkdir -p {missing}" in line["fix"]
    missing.mkdir()
    assert (
        "shared datasets"
        in doctor.run(doctor.config(docker_config(CPU_PROFILE) + extra)).one("datasets", "pass")["message"]
    )


@pytest.fixture(scope="module")
def image_without_nvml(tmp_path_factory):
    """The test image with a jupyterhub-gpu that needs nvidia-ml-py, which the image lacks (no network needed)."""
    name = f"jupyterhub-gpu/doctor-no-nvml-{uuid.uuid4().hex[:6]}:1"
    folder = tmp_path_factory.mktemp("no-nvml")
    (folder / "Dockerfile").write_text(
        textwrap.dedent(
            f"""
            FROM {TEST_IMAGE}
            USER 0
            COPY site /tmp/site
            RUN d=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && cp -r /tmp/site/. "$d"/
            """
        )
    )
    site = folder / "site"
    (site / "jupyterhub_gpu" / "gpus").mkdir(parents=True)
    (site / "jupyterhub_gpu" / "__init__.py").write_text("")
    (site / "jupyterhub_gpu" / "gpus" / "__init__.py").write_text("")
    (site / "jupyterhub_gpu" / "gpus" / "nvml.py").write_text("import pynvml\n")
    info = site / "jupyterhub_gpu-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: jupyterhub-gpu\nVersion: 0.1.0\nRequires-Dist: nvidia-ml-py\n"
    )
    (info / "RECORD").write_text("")
    (info / "INSTALLER").write_text("pip\n")
    build = ["docker", "build", "--network", "none", "-q", "-t", name, str(folder)]
    done = subprocess.run(
        build, capture_output=True, text=True, timeout=300, env={**os.environ, "DOCKER_BUILDKIT": "0"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    yield name
    docker("rmi", "-f", name, check=False)


def test_an_image_that_cannot_read_a_gpu_fails_naming_the_missing_package(doctor, image_without_nvml):
    profiles = (
        f'[{{"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": {image_without_nvml!r},'
        ' "price_per_gpu_hour": "3.00"}]'
    )
    report = doctor.run(doctor.config(docker_config(profiles)))
    [nvml] = [r for r in report.of("images") if "cannot read a GPU" in r["message"]]
    assert nvml["status"] == "fail"
    assert "No module named 'pynvml'" in nvml["message"] and "nvidia-ml-py is missing" in nvml["message"]
    assert "install nvidia-ml-py in the image" in nvml["fix"]
    [pip] = [r for r in report.of("images") if "`pip check` fails" in r["message"]]
    assert pip["status"] == "fail"
    assert "jupyterhub-gpu 0.1.0 requires nvidia-ml-py, which is not installed" in pip["message"]
    assert not [r for r in report.of("images") if r["status"] == "pass"]
    no_probe_left()
