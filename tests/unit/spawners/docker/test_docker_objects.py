"""Pure builders of a server's environment and container arguments, compared as whole dicts."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.clock import isoformat, utcnow
from jupyterhub_gpu.env import make_gpu_env
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.docker.objects import (
    make_container_spec,
    make_device_requests,
    make_labels,
    make_network_spec,
    make_volume_binds,
    network_gateway,
    network_isolation_problem,
    parse_container_user,
    screen_extras,
    screen_security_opt,
)

U0 = "GPU-11111111-2222-3333-4444-555555555555"
U1 = "GPU-66666666-7777-8888-9999-000000000000"
STARTED = datetime(2026, 11, 29, 19, 46, 4, 123456, tzinfo=timezone.utc)


# -- clock -------------------------------------------------------------------------------


def test_isoformat_is_utc_with_z():
    assert isoformat(STARTED) == "2026-11-29T19:46:04.123456Z"
    east = STARTED.astimezone(timezone(timedelta(hours=8)))
    assert isoformat(east) == "2026-11-29T19:46:04.123456Z"


def test_utcnow_is_aware_utc():
    now = utcnow()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)


# -- make_gpu_env ------------------------------------------------------------------------


def test_gpu_env_for_two_gpus():
    env = make_gpu_env(
        SessionStart(
            id="0123456789abcdef",
            user="",
            server_name="",
            groups=(),
            profile="t4x2",
            gpus=tuple([U0, U1]),
            visible_gpus=tuple([U0, U1]),
            rate_micros=to_micros(Decimal("0.1")),
            currency="CNY",
            started=STARTED,
            simulated=True,
        ),
        devices=[
            {"index": "0", "uuid": U0, "name": "Simulated T4", "memory_mib": 16384},
            {"index": "1", "uuid": U1, "name": "Simulated T4", "memory_mib": 16384},
        ],
        gpu_model="T4",
        profile_name="2× T4",
        currency_symbol="¥",
        service_url="http://127.0.0.1:10101/services/gpu/",
        reader="simulated",
    )
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": f"{U0},{U1}",
        "CUDA_VISIBLE_DEVICES": f"{U0},{U1}",
        "JUPYTERHUB_GPU_PROFILE": "t4x2",
        "JUPYTERHUB_GPU_DEVICES": f"{U0},{U1}",
        "JUPYTERHUB_GPU_RATE_PER_MINUTE": "0.1",
        "JUPYTERHUB_GPU_CURRENCY": "CNY",
        "JUPYTERHUB_GPU_SESSION_ID": "0123456789abcdef",
        "JUPYTERHUB_GPU_STARTED": "2026-11-29T19:46:04.123456Z",
        "JUPYTERHUB_GPU_SIMULATED": "1",
        "JUPYTERHUB_GPU_READER": "simulated",
        "JUPYTERHUB_GPU_DEVICE_INFO": (
            f'[{{"index": "0", "memory_mib": 16384, "name": "Simulated T4", "uuid": "{U0}"}}, '
            f'{{"index": "1", "memory_mib": 16384, "name": "Simulated T4", "uuid": "{U1}"}}]'
        ),
        "JUPYTERHUB_GPU_MODEL": "T4",
        "JUPYTERHUB_GPU_PROFILE_NAME": "2× T4",
        "JUPYTERHUB_GPU_CURRENCY_SYMBOL": "¥",
        "JUPYTERHUB_GPU_LANGUAGE": "en",
        "JUPYTERHUB_GPU_SERVICE_URL": "http://127.0.0.1:10101/services/gpu/",
    }


def test_gpu_env_for_cpu_only():
    env = make_gpu_env(
        SessionStart(
            id="s",
            user="",
            server_name="",
            groups=(),
            profile="cpu",
            gpus=tuple([]),
            visible_gpus=tuple([]),
            rate_micros=to_micros(Decimal(0)),
            currency="USD",
            started=STARTED,
            simulated=False,
        )
    )
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": "void",  # hides every GPU from the NVIDIA runtime
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTERHUB_GPU_PROFILE": "cpu",
        "JUPYTERHUB_GPU_DEVICES": "",
        "JUPYTERHUB_GPU_RATE_PER_MINUTE": "0",
        "JUPYTERHUB_GPU_CURRENCY": "USD",
        "JUPYTERHUB_GPU_SESSION_ID": "s",
        "JUPYTERHUB_GPU_STARTED": "2026-11-29T19:46:04.123456Z",
        "JUPYTERHUB_GPU_SIMULATED": "0",
        "JUPYTERHUB_GPU_READER": "nvml",
        "JUPYTERHUB_GPU_DEVICE_INFO": "[]",
        "JUPYTERHUB_GPU_MODEL": "",
        "JUPYTERHUB_GPU_PROFILE_NAME": "cpu",
        "JUPYTERHUB_GPU_CURRENCY_SYMBOL": "",
        "JUPYTERHUB_GPU_LANGUAGE": "en",
    }


def test_gpu_env_values_are_strings():
    env = make_gpu_env(
        SessionStart(
            id="s",
            user="",
            server_name="",
            groups=(),
            profile="x",
            gpus=tuple([U0]),
            visible_gpus=tuple([U0]),
            rate_micros=to_micros(Decimal("0.25")),
            currency="USD",
            started=STARTED,
            simulated=False,
        )
    )
    assert all(isinstance(v, str) for v in env.values())


# -- device requests, labels, binds ------------------------------------------------------


def test_device_requests_name_exactly_the_assigned_gpus():
    assert make_device_requests([U0, U1]) == [
        {"Driver": "", "Count": 0, "DeviceIDs": [U0, U1], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert make_device_requests([]) == []


def test_device_requests_copy_the_list():
    uuids = [U0]
    request = make_device_requests(uuids)
    uuids.append(U1)
    assert request[0]["DeviceIDs"] == [U0]


def test_labels():
    assert make_labels(user="alice", server_name="", profile_slug="t4", session_id="abc", device_uuids=[U0, U1]) == {
        "jupyterhub-gpu.managed": "true",
        "jupyterhub-gpu.user": "alice",
        "jupyterhub-gpu.server": "",
        "jupyterhub-gpu.profile": "t4",
        "jupyterhub-gpu.session-id": "abc",
        "jupyterhub-gpu.gpus": f"{U0},{U1}",
    }
    assert (
        make_labels(user="bob", server_name="big", profile_slug="cpu", session_id="d", device_uuids=[])[
            "jupyterhub-gpu.gpus"
        ]
        == ""
    )


def test_volume_binds_with_datasets_read_only():
    assert make_volume_binds(
        work_volume="jupyterhub-gpu-user-alice",
        work_dir="/home/jovyan/work",
        datasets_volume="/srv/datasets",
        datasets_dir="/home/jovyan/datasets",
    ) == {
        "jupyterhub-gpu-user-alice": {"bind": "/home/jovyan/work", "mode": "rw"},
        "/srv/datasets": {"bind": "/home/jovyan/datasets", "mode": "ro"},
    }


@pytest.mark.parametrize("datasets", [None, ""])
def test_volume_binds_without_datasets(datasets):
    assert make_volume_binds(
        work_volume="vol", work_dir="/home/jovyan/work", datasets_volume=datasets, datasets_dir="/home/jovyan/datasets"
    ) == {"vol": {"bind": "/home/jovyan/work", "mode": "rw"}}


# -- make_container_spec -------------------------------------------------------------------

ENV = {"JUPYTERHUB_API_TOKEN": "secret", "NVIDIA_VISIBLE_DEVICES": f"{U0},{U1}"}
LABELS = {"jupyterhub-gpu.managed": "true", "jupyterhub-gpu.gpus": f"{U0},{U1}"}
BINDS = {
    "jupyterhub-gpu-user-alice": {"bind": "/home/jovyan/work", "mode": "rw"},
    "/srv/datasets": {"bind": "/home/jovyan/datasets", "mode": "ro"},
}
GPU_REQUEST = {"Driver": "", "Count": 0, "DeviceIDs": [U0, U1], "Capabilities": [["gpu"]], "Options": {}}


def gpu_spec(**overrides):
    kwargs = dict(
        name="jupyter-alice",
        image="jupyterhub-gpu/tensorflow:2.15",
        command=["jupyterhub-singleuser", "--port=8888"],
        env=ENV,
        labels=LABELS,
        container_user="1000:100",
        port=8888,
        network_mode="host",
        binds=BINDS,
        device_uuids=[U0, U1],
        mem_limit=16 * 1024**3,
        cpu_limit=4.0,
        pids_limit=1024,
    )
    kwargs.update(overrides)
    return make_container_spec(**kwargs)


EXPECTED_CREATE = {
    "image": "jupyterhub-gpu/tensorflow:2.15",
    "name": "jupyter-alice",
    "command": ["jupyterhub-singleuser", "--port=8888"],
    "environment": ENV,
    "labels": LABELS,
    "volumes": ["/home/jovyan/work", "/home/jovyan/datasets"],
    "user": "1000:100",
}

EXPECTED_HOST = {
    "binds": BINDS,
    "network_mode": "host",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "auto_remove": False,
    "cgroupns": "private",
    "device_requests": [GPU_REQUEST],
    "mem_limit": 16 * 1024**3,
    "cpu_period": 100_000,
    "cpu_quota": 400_000,
    "pids_limit": 1024,
}


def test_container_spec_gpu_profile_on_host_network():
    create, host = gpu_spec()
    assert create == EXPECTED_CREATE
    assert host == EXPECTED_HOST


def test_container_spec_without_device_requests_records_them_in_a_label():
    create, host = gpu_spec(include_device_requests=False)
    assert create == {
        **EXPECTED_CREATE,
        "labels": {**LABELS, "jupyterhub-gpu.device-requests": json.dumps([GPU_REQUEST], sort_keys=True)},
    }
    assert host == {k: v for k, v in EXPECTED_HOST.items() if k != "device_requests"}
    assert json.loads(create["labels"]["jupyterhub-gpu.device-requests"]) == [GPU_REQUEST]


def test_container_spec_cpu_only_on_a_bridge_network():
    cpu_env = {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
    create, host = make_container_spec(
        name="jupyter-bob-cpu",
        image="jupyterhub-gpu/base:1",
        command=["jupyterhub-singleuser"],
        env=cpu_env,
        labels={"jupyterhub-gpu.gpus": ""},
        container_user="1000:100",
        port=8888,
        network_mode="jupyterhub-gpu",
        binds={"vol-bob": {"bind": "/home/jovyan/work", "mode": "rw"}},
        device_uuids=[],
        include_device_requests=False,
        cpu_limit=0.5,
    )
    assert create == {
        "image": "jupyterhub-gpu/base:1",
        "name": "jupyter-bob-cpu",
        "command": ["jupyterhub-singleuser"],
        "environment": cpu_env,
        "labels": {"jupyterhub-gpu.gpus": ""},  # no device-request label without GPUs
        "volumes": ["/home/jovyan/work"],
        "user": "1000:100",
        "ports": {"8888/tcp": None},
    }
    assert host == {
        "binds": {"vol-bob": {"bind": "/home/jovyan/work", "mode": "rw"}},
        "network_mode": "jupyterhub-gpu",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "auto_remove": False,
        "cgroupns": "private",
        "port_bindings": {8888: ("127.0.0.1",)},
        "cpu_period": 100_000,
        "cpu_quota": 50_000,
    }


def test_container_spec_admin_extras_cannot_weaken_the_hardening():
    create, host = gpu_spec(
        device_uuids=[U0],
        mem_limit=None,
        extra_create={
            "user": "root",
            "image": "evil:latest",
            "environment": {"NVIDIA_VISIBLE_DEVICES": "all"},
            "labels": {"team": "vision", "jupyterhub-gpu.gpus": "all"},
            "hostname": "lab",
        },
        extra_host={
            "cap_add": ["SYS_ADMIN"],
            "privileged": True,
            "cap_drop": [],
            "security_opt": ["seccomp=unconfined"],
            "auto_remove": True,
            "network_mode": "bridge",
            "binds": {"/": {"bind": "/host", "mode": "rw"}},
            "device_requests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
            "shm_size": "1g",
            "mem_limit": "8g",
        },
    )
    assert create == {
        "image": "jupyterhub-gpu/tensorflow:2.15",
        "name": "jupyter-alice",
        "command": ["jupyterhub-singleuser", "--port=8888"],
        "environment": ENV,
        "labels": {"team": "vision", **LABELS},
        "volumes": ["/home/jovyan/work", "/home/jovyan/datasets"],
        "user": "1000:100",
        "hostname": "lab",  # harmless extras are kept
    }
    assert host == {
        "binds": BINDS,
        "network_mode": "host",
        "cap_drop": ["ALL"],
        # seccomp=unconfined would weaken the container: dropped (the spawner logs it)
        "security_opt": ["no-new-privileges"],
        "auto_remove": False,
        "cgroupns": "private",
        # only the assigned GPU, never the all-GPU request of the extras
        "device_requests": [{**GPU_REQUEST, "DeviceIDs": [U0]}],
        "shm_size": "1g",
        "mem_limit": "8g",  # the admin's default stands when the profile sets none
        "cpu_period": 100_000,
        "cpu_quota": 400_000,
        "pids_limit": 1024,
    }


@pytest.mark.parametrize(("device_uuids", "include"), [([], True), ([], False), ([U0], False)])
def test_container_spec_extras_cannot_add_a_device_request(device_uuids, include):
    # a CPU-only server, or one whose request is only recorded in a label, gets no GPU from the extras
    _, host = gpu_spec(
        device_uuids=device_uuids,
        include_device_requests=include,
        extra_host={"device_requests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]},
    )
    assert "device_requests" not in host


def test_container_spec_profile_limits_override_extras():
    _, host = gpu_spec(extra_host={"mem_limit": "100g", "pids_limit": 1_000_000, "cpu_quota": 10_000_000})
    assert (host["mem_limit"], host["pids_limit"], host["cpu_quota"]) == (16 * 1024**3, 1024, 400_000)


def test_container_spec_does_not_mutate_its_inputs():
    env, labels, binds = dict(ENV), dict(LABELS), {k: dict(v) for k, v in BINDS.items()}
    extra_create = {"labels": {"team": "vision"}}
    extra_host = {"cap_add": ["SYS_ADMIN"], "security_opt": ["seccomp=unconfined"]}
    create, host = gpu_spec(
        env=env,
        labels=labels,
        binds=binds,
        include_device_requests=False,
        extra_create=extra_create,
        extra_host=extra_host,
    )
    assert (env, labels, binds) == (ENV, LABELS, BINDS)
    assert extra_create == {"labels": {"team": "vision"}}
    assert extra_host == {"cap_add": ["SYS_ADMIN"], "security_opt": ["seccomp=unconfined"]}
    create["environment"]["X"] = "1"
    host["cap_drop"].append("X")
    assert "X" not in ENV
    assert gpu_spec()[1]["cap_drop"] == ["ALL"]


# -- what extras may not weaken ------------------------------------------


@pytest.mark.parametrize(
    "weak",
    [
        "no-new-privileges=false",
        "no-new-privileges:false",
        "no-new-privileges=0",
        "seccomp=unconfined",
        "seccomp:unconfined",
        'seccomp={"defaultAction": "SCMP_ACT_ALLOW"}',
        "apparmor=unconfined",
        "apparmor:unconfined",
        "APPARMOR = Unconfined",
        "systempaths=unconfined",
        "label=disable",
        "label:disable",
        "label=type:spc_t",
        "unknown-option",
    ],
)
def test_security_opt_that_weakens_the_defaults_is_dropped(weak):
    # Docker applies the last of conflicting options: wherever the weak one stands, it must be gone
    for extras in ([weak], [weak, "no-new-privileges"], ["no-new-privileges", weak], [weak, "apparmor=lab"]):
        _, host = gpu_spec(extra_host={"security_opt": extras})
        assert weak not in host["security_opt"], extras
        assert host["security_opt"][-1] == "no-new-privileges"
        assert host["security_opt"].count("no-new-privileges") == 1
    assert screen_security_opt([weak]) == ([], [weak])


def test_security_opt_that_only_tightens_is_kept_before_ours():
    kept, dropped = screen_security_opt(["apparmor=lab-profile", "label=level:s0:c100,c200", "no-new-privileges:true"])
    assert kept == ["apparmor=lab-profile", "label=level:s0:c100,c200"] and dropped == []
    _, host = gpu_spec(extra_host={"security_opt": ["apparmor=lab-profile"]})
    assert host["security_opt"] == ["apparmor=lab-profile", "no-new-privileges"]


def test_screen_extras_names_everything_it_drops():
    create, host, dropped = screen_extras(
        {"user": "0", "networking_config": {"EndpointsConfig": {"host": {}}}, "hostname": "lab"},
        {
            "privileged": True,
            "cap_add": ["NET_RAW"],
            "cgroupns": "host",
            "cgroup_parent": "/",
            "device_cgroup_rules": ["c *:* rmw"],
            "links": {"jupyter-bob": "bob"},
            "publish_all_ports": True,
            "port_bindings": {8888: ("0.0.0.0", 8888)},
            "oom_kill_disable": True,
            "group_add": ["0", "video"],
            "security_opt": ["seccomp=unconfined", "apparmor=lab"],
            "shm_size": "1g",
            "sysctls": {"net.ipv6.conf.all.disable_ipv6": "0", "kernel.shmmax": "1073741824"},
        },
    )
    assert create == {"hostname": "lab"}
    assert host == {
        "group_add": ["video"],
        "security_opt": ["apparmor=lab"],
        "shm_size": "1g",
        "sysctls": {"kernel.shmmax": "1073741824"},
    }
    text = "\n".join(dropped)
    for name in ("'user'", "networking_config", "privileged", "cap_add", "cgroupns", "cgroup_parent"):
        assert name in text
    for name in ("device_cgroup_rules", "links", "publish_all_ports", "port_bindings", "oom_kill_disable"):
        assert name in text
    assert "group_add" in text and "seccomp=unconfined" in text and "apparmor=lab" not in text
    assert "net.ipv6.conf.all.disable_ipv6" in text and "kernel.shmmax" not in text
    assert "mac_address" in "\n".join(screen_extras({"mac_address": "02:42:0a:d5:00:03"}, {})[2])
    # the same as ours is not worth a warning
    assert screen_extras({}, {"cap_drop": ["ALL"], "privileged": False, "security_opt": ["no-new-privileges"]})[2] == []


@pytest.mark.parametrize(
    "value", ["0:100", "00", "000:100", "00:00", "1000:0", "1000:000", "root", "jovyan", "1000", "-1:100",
              "+1000:100", "1_000:100", "\u0661\u0660\u0660\u0660:100", "1000:100:1", "", " : "]
)  # fmt: skip
def test_container_user_must_be_a_numeric_non_root_uid_and_gid(value):
    with pytest.raises(ValueError, match="container_user"):
        parse_container_user(value)
    with pytest.raises(ValueError, match="container_user"):
        gpu_spec(container_user=value)


def test_container_user_is_normalised_as_docker_reads_it():
    assert parse_container_user("01000:0100") == (1000, 100)
    create, _ = gpu_spec(container_user="01000:0100")
    assert create["user"] == "1000:100"


def test_container_spec_on_an_isolated_network_publishes_nothing():
    create, host = gpu_spec(
        network_mode="jupyterhub-gpu",
        publish_port=False,
        extra_create={"ports": {"8888/tcp": None}},
        extra_host={"port_bindings": {8888: ("0.0.0.0", 8888)}, "publish_all_ports": True},
    )
    assert create == EXPECTED_CREATE
    assert host == {**EXPECTED_HOST, "network_mode": "jupyterhub-gpu"}


# -- the isolated network -----------------------------------------------


def test_network_spec_isolates_and_names_its_gateway():
    assert make_network_spec(name="jupyterhub-gpu", subnet="10.213.0.0/24", bridge_name="jhgpu0") == {
        "name": "jupyterhub-gpu",
        "driver": "bridge",
        "options": {"com.docker.network.bridge.enable_icc": "false", "com.docker.network.bridge.name": "jhgpu0"},
        "internal": True,
        "check_duplicate": True,
        "labels": {"jupyterhub-gpu.managed": "true"},
        "ipam": {
            "Driver": "default",
            "Config": [{"Subnet": "10.213.0.0/24", "Gateway": "10.213.0.1"}],
            "Options": {},
        },
    }
    spec = make_network_spec(name="n", internal=False)
    assert "ipam" not in spec and spec["internal"] is False
    for bad in ("10.213.0.1/24", "10.213.0.0/30", "fd00::/64", "lab", ""):
        if bad:
            with pytest.raises(ValueError, match="subnet"):
                make_network_spec(name="n", subnet=bad)
    with pytest.raises(ValueError, match="bridge name"):
        make_network_spec(name="n", bridge_name="a-very-long-bridge-name")


def test_network_isolation_problem():
    isolated = {
        "Name": "jupyterhub-gpu",
        "Driver": "bridge",
        "Options": {"com.docker.network.bridge.enable_icc": "false"},
        "IPAM": {"Config": [{"Subnet": "10.213.0.0/24", "Gateway": "10.213.0.1"}]},
    }
    assert network_isolation_problem(isolated) is None
    assert network_gateway(isolated) == "10.213.0.1"
    default_bridge = {"Name": "bridge", "Driver": "bridge", "Options": {"com.docker.network.bridge.enable_icc": "true"}}
    assert "enable_icc=false" in network_isolation_problem(default_bridge)
    assert "enable_icc=false" in network_isolation_problem({"Name": "lab", "Driver": "bridge", "Options": {}})
    assert "only a bridge" in network_isolation_problem({"Name": "host", "Driver": "host"})
    assert "only a bridge" in network_isolation_problem({"Name": "mv", "Driver": "macvlan"})
    assert network_gateway({"IPAM": {"Config": [{"Subnet": "10.0.0.0/24"}]}}) == ""


@pytest.mark.parametrize("value", ["00", "000:100", "0:0", "1000:0", "root", "1000"])
def test_a_root_container_user_stops_the_hub_at_startup_with_a_clear_message(value):
    from traitlets.config import Config

    from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner

    c = Config()
    c.GPUDockerSpawner.network_name = "host"  # no Docker engine needed for this check
    c.GPUDockerSpawner.container_user = value
    (problem,) = GPUDockerSpawner.gpu_check_config(c)
    assert problem.startswith("GPUDockerSpawner: ") and "container_user" in problem and repr(value) in problem
    c.GPUDockerSpawner.container_user = "01000:0100"
    c.GPUDockerSpawner.gpu_backend = "simulated"
    c.GPUDockerSpawner.profiles = [{"slug": "cpu", "gpu_count": 0, "image": "img:1", "price_per_hour": "0.60"}]
    assert GPUDockerSpawner.gpu_check_config(c) == []


def test_gpu_env_names_the_reader_and_refuses_an_unknown_one():
    session = SessionStart(
        id="s",
        user="",
        server_name="",
        groups=(),
        profile="x",
        gpus=(U0,),
        rate_micros=1_000_000,
        currency="USD",
        started=STARTED,
        simulated=True,
        visible_gpus=(U0,),
    )
    env = make_gpu_env(session)
    # the stand-in driver's GPUs are simulated, but read with NVML like real ones
    assert (env["JUPYTERHUB_GPU_SIMULATED"], env["JUPYTERHUB_GPU_READER"]) == ("1", "nvml")
    with pytest.raises(ValueError, match="reader must be one of nvml, simulated"):
        make_gpu_env(session, reader="cuda")
