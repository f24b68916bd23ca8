"""The container builder keeps its hardening whatever the admin's extras ask for (no Docker needed).

The same property as tests/security/test_container_hardening.py, on the pure
builder's output, for every subset of the dangerous extras.
"""

from __future__ import annotations

import itertools

import pytest

from jupyterhub_gpu.spawners.docker.objects import make_container_spec

DANGEROUS = {
    "privileged": True,
    "cap_add": ["SYS_ADMIN"],
    "pid_mode": "host",
    "ipc_mode": "container:another-users-server",
    "uts_mode": "host",
    "userns_mode": "host",
    "devices": ["/dev/nvidia0:/dev/nvidia0:rwm"],
    "volumes_from": ["jupyter-bob"],
    "mounts": [{"Target": "/var/run/docker.sock", "Source": "/var/run/docker.sock", "Type": "bind"}],
    "binds": {"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
    "device_requests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
    "cap_drop": [],
    # Docker applies the last of conflicting options, so each of these must be gone
    "security_opt": [
        "no-new-privileges=false",
        "no-new-privileges:false",
        "seccomp=unconfined",
        "apparmor=unconfined",
        "systempaths=unconfined",
        "label=disable",
        "label:disable",
    ],
    "cgroupns": "host",
    "cgroup_parent": "/",
    "device_cgroup_rules": ["c *:* rmw"],
    "links": {"jupyter-bob": "bob"},
    "publish_all_ports": True,
    "port_bindings": {8888: ("0.0.0.0", 8888)},
    "oom_kill_disable": True,
    "group_add": ["0", "root"],
    "sysctls": {"net.ipv6.conf.all.disable_ipv6": "0"},  # IPv6 around the IPv4 isolation rules
}


def spec(extra_host):
    return make_container_spec(
        name="jupyter-alice",
        image="img",
        command=["jupyterhub-singleuser"],
        env={},
        labels={},
        container_user="1000:100",
        port=8888,
        network_mode="host",
        binds={"work-alice": {"bind": "/home/jovyan/work", "mode": "rw"}},
        device_uuids=["GPU-1"],
        extra_host=extra_host,
    )


@pytest.mark.parametrize("size", [1, 2, len(DANGEROUS)])
def test_no_subset_of_dangerous_extras_reaches_the_container(size):
    for keys in itertools.combinations(sorted(DANGEROUS), size):
        _, host = spec({k: DANGEROUS[k] for k in keys})
        assert host["cap_drop"] == ["ALL"] and "no-new-privileges" in host["security_opt"], keys
        assert host["binds"] == {"work-alice": {"bind": "/home/jovyan/work", "mode": "rw"}}, keys
        assert host["device_requests"] == [
            {"Driver": "", "Count": 0, "DeviceIDs": ["GPU-1"], "Capabilities": [["gpu"]], "Options": {}}
        ], keys
        leaked = set(host) & {"privileged", "cap_add", "pid_mode", "ipc_mode", "uts_mode", "userns_mode"}
        leaked |= set(host) & {"devices", "volumes_from", "mounts"}
        assert host["cgroupns"] == "private", keys
        leaked |= set(host) & {"cgroup_parent", "device_cgroup_rules", "links", "publish_all_ports"}
        leaked |= set(host) & {"port_bindings", "oom_kill_disable", "group_add", "sysctls"}
        assert not leaked, (keys, leaked)
        assert host["security_opt"] == ["no-new-privileges"], keys
