"""The shipped configurations load and pass the startup check."""

from pathlib import Path

from traitlets.config.loader import PyFileConfigLoader

from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.startup import check_config

CONFIG = Path(__file__).resolve().parents[3] / "config"


def load(name: str):
    return PyFileConfigLoader(name, path=str(CONFIG)).load_config()


def test_demo_config_is_valid_and_simulated(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_GPU_DEMO_STATE", str(tmp_path))
    c = load("demo_config.py")
    assert c.JupyterHub.spawner_class == "gpu-local"
    assert c.GPULocalSpawner.gpu_backend == "simulated"
    assert check_config(c, GPULocalSpawner) == []
    slugs = {p["slug"] for p in c.GPULocalSpawner.profiles}
    assert slugs == {"t4", "a100", "t4x2", "t4-quarter", "t4-preemptible", "cpu"}
    assert str(tmp_path) in c.JupyterHub.db_url


def test_docker_host_config_is_valid_once_its_gpus_are_known():
    c = load("docker_host_config.py")
    assert c.JupyterHub.spawner_class == "gpu-docker"
    assert c.GPUDockerSpawner.gpu_backend == "nvml"
    # this machine has no GPU: NVML fails with a message that says what to do
    problems = check_config(c, GPUDockerSpawner)
    assert len(problems) == 1 and "NVML could not start" in problems[0] and "static" in problems[0]
    c.GPUDockerSpawner.gpu_backend = "static"
    c.GPUDockerSpawner.static_gpus = [
        {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000001", "name": "Tesla T4", "memory_gb": 16},
        {"index": 1, "uuid": "GPU-00000000-0000-0000-0000-000000000002", "name": "NVIDIA A100-SXM4-40GB"},
    ]
    assert check_config(c, GPUDockerSpawner) == []
