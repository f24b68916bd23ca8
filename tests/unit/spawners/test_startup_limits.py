"""The start-up check's warnings about servers' limits: above what the host has, or set where nothing reads them."""

from __future__ import annotations

from traitlets.config import Config

from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.profiles import parse_profiles
from jupyterhub_gpu.spawners.startup import limit_warnings, local_resources, resource_warnings

GIB = 1024**3


def profiles(*limits):
    raw = [
        {"slug": f"p{i}", "gpu_count": 0, "price_per_hour": "0.60", **extra}  # 0.01 a minute
        for i, extra in enumerate(limits)
    ]
    return parse_profiles(raw, require_image=False)


def test_a_limit_above_the_host_names_the_profile_the_value_and_the_hosts_figure():
    found = limit_warnings(
        profiles({"cpu_limit": 8, "mem_limit": "16G"}, {"cpu_limit": 64}, {"mem_limit": "40G"}), 16, 32 * GIB
    )
    assert found == [
        "profile 'p1': cpu_limit 64 is more than the 16 CPUs of this host: a server cannot use more (Docker refuses"
        " such a container: its spawns fail); set the profile's cpu_limit to 16 or less",
        "profile 'p2': mem_limit 40.0 GiB is more than the 32.0 GiB of memory of this host: it limits nothing;"
        " set the profile's mem_limit below 32.0 GiB",
    ]


def test_limits_at_the_hosts_figures_or_without_figures_warn_of_nothing():
    within = profiles({"cpu_limit": 16, "mem_limit": "32G"}, {})
    assert limit_warnings(within, 16, 32 * GIB) == []
    assert limit_warnings(profiles({"cpu_limit": 64, "mem_limit": "1T"}), None, None) == []


def test_the_hub_config_is_checked_against_this_machine():
    cpus, memory = local_resources()
    assert cpus >= 1 and memory > 64 * 1024**2
    config = Config()
    config.GPULocalSpawner.gpu_backend = "simulated"
    config.GPULocalSpawner.profiles = [
        {"slug": "fits", "gpu_count": 0, "price_per_hour": "0.60", "cpu_limit": 1, "mem_limit": "64M"},
        {"slug": "greedy", "gpu_count": 0, "price_per_hour": "0.60", "cpu_limit": cpus + 1},
    ]
    config.GPULocalSpawner.mem_limit = "8G"  # the spawner's own limit: no server reads it
    found = resource_warnings(config, GPULocalSpawner)
    assert len(found) == 2, found
    assert found[0].startswith("GPULocalSpawner.mem_limit = 8.0 GiB limits no server: each profile's mem_limit does")
    assert found[1].startswith(f"profile 'greedy': cpu_limit {cpus + 1:g} is more than the {cpus:g} CPUs")

    config.GPULocalSpawner.mem_limit = None
    config.GPULocalSpawner.profiles = config.GPULocalSpawner.profiles[:1]
    assert resource_warnings(config, GPULocalSpawner) == []
