"""Container hardening, checked on real containers that a real hub started with GPUDockerSpawner.

Inside every process of each user's container: the effective UID is not 0, there
are no capabilities at all (effective, permitted, bounding, ambient) and
no-new-privileges is set. From outside: no Docker socket anywhere, the owner's
volume is the only writable mount, the shared datasets are read-only, no other
user's volume is mounted, no host namespace is shared, and the GPUs requested are
exactly the assigned ones.

The hub is configured the way an admin who copies common DockerSpawner recipes
might configure it: ``extra_host_config`` asks for privileged mode, added
capabilities, the Docker socket (as a bind and as a mount), every GPU, a host
device node, the host's PID, IPC and cgroup namespaces, and every ``security_opt``
that weakens Docker's defaults (``no-new-privileges=false`` after ours,
``seccomp=unconfined``...: Docker applies the last of conflicting options);
``extra_create_kwargs`` asks for root. The spawner drops all of that, with a
warning in the hub's log naming each option, so none of it may reach a container.

The GPUs are the stand-in NVIDIA driver's (tools/nvml-sim): the engine gets the real device request and
the stand-in hook serves it (see tests/docker/).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid

import pytest

from tests.docker.test_docker_spawner import GPUS, IMAGE, config, docker, remove_by_prefix, seed_datasets

pytestmark = pytest.mark.docker

HOSTILE_EXTRAS = """
c.GPUDockerSpawner.extra_host_config = {
    "privileged": True,
    "cap_add": ["SYS_ADMIN", "NET_ADMIN"],
    "binds": {"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
    "device_requests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
    "pid_mode": "host",
    "ipc_mode": "host",
    "devices": ["/dev/null:/dev/nvidia0:rwm"],
    "mounts": [__import__("docker").types.Mount("/var/run/docker.sock", "/var/run/docker.sock", type="bind")],
    "cgroupns": "host",
    "security_opt": [
        "no-new-privileges",
        "no-new-privileges=false",
        "no-new-privileges:false",
        "seccomp=unconfined",
        "apparmor=unconfined",
        "systempaths=unconfined",
        "label=disable",
        "label:disable",
    ],
}
c.GPUDockerSpawner.extra_create_kwargs = {"user": "0:0"}
"""
WEAK_SECURITY_OPT = [
    "no-new-privileges=false",
    "no-new-privileges:false",
    "seccomp=unconfined",
    "apparmor=unconfined",
    "systempaths=unconfined",
    "label=disable",
    "label:disable",
]


@pytest.fixture(scope="module", autouse=True)
def engine():
    r = subprocess.run(["docker", "info"], capture_output=True)
    if r.returncode:
        pytest.fail("no Docker engine: run `make test` (or `make docker-setup test-image`)")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        pytest.fail(f"test image {IMAGE} missing: run `make test-image`")


@pytest.fixture
def hardened_hub(make_hub):
    prefix = f"jhgpu-harden-{uuid.uuid4().hex[:6]}"
    datasets = f"{prefix}-datasets"
    seed_datasets(datasets)
    hub = make_hub(config(datasets, prefix) + HOSTILE_EXTRAS)
    hub.prefix, hub.datasets = prefix, datasets
    yield hub
    hub.cleanup()
    remove_by_prefix(prefix)


def process_status(cid: str) -> dict[str, dict[str, str]]:
    """``/proc/PID/status`` of every process in the container, read from inside it."""
    script = 'for p in /proc/[0-9]*; do echo "== $p"; cat "$p/status" 2>/dev/null; done'
    out = docker("exec", cid, "sh", "-c", script)
    found: dict[str, dict[str, str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = found.setdefault(line[3:], {})
        elif current is not None and ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
    return {pid: fields for pid, fields in found.items() if fields}


def test_every_container_is_hardened_even_against_the_admins_extras(hardened_hub):
    hub = hardened_hub
    hub.create_users("alice", "bob")
    assert hub.start_server("alice", {"profile": "t4x2"}).status_code in (201, 202)
    assert hub.start_server("bob", {"profile": "t4"}).status_code in (201, 202)
    assigned = {
        "alice": hub.wait_ready("alice", timeout=120)["state"]["gpu"]["devices"],
        "bob": hub.wait_ready("bob", timeout=120)["state"]["gpu"]["devices"],
    }
    assert not set(assigned["alice"]) & set(assigned["bob"])
    problems: list[str] = []
    for user, devices in assigned.items():
        other = "bob" if user == "alice" else "alice"
        info = json.loads(docker("inspect", hub.server(user)["state"]["object_id"]))[0]
        cid, host, cfg = info["Id"], info["HostConfig"], info["Config"]

        # -- inside: every process ---------------------------------------------------------------
        statuses = process_status(cid)
        assert statuses, f"{user}: no process seen in the container"
        for pid, fields in statuses.items():
            uids = fields.get("Uid", "0").split()
            if "0" in uids:
                problems.append(f"{user} {pid}: a UID is 0 ({fields.get('Uid')})")
            for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
                if int(fields.get(cap, "0"), 16) != 0:
                    problems.append(f"{user} {pid}: {cap} = {fields[cap]}")
            if fields.get("NoNewPrivs") != "1":
                problems.append(f"{user} {pid}: NoNewPrivs = {fields.get('NoNewPrivs')}")
            if fields.get("Seccomp") == "0":
                problems.append(f"{user} {pid}: no seccomp filter")
        if docker("exec", cid, "id", "-u") == "0":
            problems.append(f"{user}: a process started in the container runs as root")

        # -- no Docker socket, no host namespaces, no privilege ---------------------------------------
        sockets = docker(
            "exec", cid, "sh", "-c",
            "for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do"
            ' test -e "$s" && echo "$s"; done; true',
        )  # fmt: skip
        if sockets:
            problems.append(f"{user}: Docker/containerd socket visible: {sockets}")
        if any("docker.sock" in (m.get("Source") or "") for m in info["Mounts"]):
            problems.append(f"{user}: the Docker socket is mounted")
        if host.get("Privileged"):
            problems.append(f"{user}: privileged")
        if host.get("CapAdd"):
            problems.append(f"{user}: CapAdd {host['CapAdd']}")
        if host.get("CapDrop") != ["ALL"]:
            problems.append(f"{user}: CapDrop {host.get('CapDrop')}")
        for mode in ("PidMode", "IpcMode", "UsernsMode", "UTSMode", "NetworkMode"):
            if host.get(mode) == "host" and mode != "NetworkMode":  # host networking is the loopback test setup
                problems.append(f"{user}: {mode} is host")
        opts = host.get("SecurityOpt") or []
        if opts != ["no-new-privileges"]:
            problems.append(f"{user}: SecurityOpt {opts} (only no-new-privileges, and last)")
        if host.get("CgroupnsMode") == "host":
            problems.append(f"{user}: CgroupnsMode is host")
        if any(o.endswith("=unconfined") or o.endswith(":unconfined") or o == "label=disable" for o in opts):
            problems.append(f"{user}: an unconfined security profile: {opts}")
        if host.get("Devices"):
            problems.append(f"{user}: host devices passed in: {host['Devices']}")

        # -- storage: only the owner's volume is writable; shared data read-only ---------------------------------
        mounts = {m["Destination"]: m for m in info["Mounts"]}
        writable = sorted(d for d, m in mounts.items() if m.get("RW"))
        if writable != ["/home/jovyan/work"]:
            problems.append(f"{user}: writable mounts {writable}")
        if mounts.get("/home/jovyan/work", {}).get("Name") != f"{hub.prefix}-work-{user}":
            problems.append(f"{user}: the work volume is {mounts.get('/home/jovyan/work')}")
        if any(m.get("Name") == f"{hub.prefix}-work-{other}" for m in info["Mounts"]):
            problems.append(f"{user}: {other}'s volume is mounted")
        if mounts.get("/home/jovyan/datasets", {}).get("RW") is not False:
            problems.append(f"{user}: datasets not read-only: {mounts.get('/home/jovyan/datasets')}")
        write = docker(
            "exec", cid, "sh", "-c",
            "for d in /home/jovyan/work /home/jovyan/datasets / /etc /usr /home/jovyan; do"
            ' if touch "$d/.probe" 2>/dev/null; then echo "$d"; rm -f "$d/.probe"; fi; done; true',
        )  # fmt: skip
        writable_dirs = write.split()
        if "/home/jovyan/work" not in writable_dirs:
            problems.append(f"{user}: cannot write to their own volume")
        for forbidden in ("/home/jovyan/datasets", "/", "/etc", "/usr"):
            if forbidden in writable_dirs:
                problems.append(f"{user}: can write to {forbidden}")
        if docker("exec", cid, "cat", "/home/jovyan/datasets/readme.txt") != "shared":
            problems.append(f"{user}: cannot read the shared datasets")

        # -- GPUs: exactly the assigned ones --------------------------------------------------------------------
        env = dict(e.split("=", 1) for e in cfg["Env"])
        visible = ",".join(devices)
        if env.get("NVIDIA_VISIBLE_DEVICES") != visible or env.get("CUDA_VISIBLE_DEVICES") != visible:
            problems.append(f"{user}: visible devices {env.get('NVIDIA_VISIBLE_DEVICES')} != assigned {visible}")
        # the one device request the engine got (the stand-in NVIDIA hook served it): the assigned GPUs by UUID,
        # never the admin's "all GPUs" (Count -1) request
        requested = host.get("DeviceRequests") or []
        ids = [i for r in requested for i in r.get("DeviceIDs") or []]
        if ids != devices or any(r.get("Count") not in (0, None) or r.get("Driver") for r in requested):
            problems.append(f"{user}: device request {requested} != the assigned {devices}")
        nodes = docker("exec", cid, "sh", "-c", "ls /dev | grep '^nvidia[0-9]' || true").split()
        if len(nodes) != len(devices):
            problems.append(f"{user}: device nodes {nodes} for the assigned {devices}")
        if not set(devices) <= set(GPUS):
            problems.append(f"{user}: unknown GPUs {devices}")
        if cfg["Labels"].get("jupyterhub-gpu.user") != user or not cfg["Labels"].get("jupyterhub-gpu.session-id"):
            problems.append(f"{user}: labels {cfg['Labels']}")
        if not re.fullmatch(r"[0-9]+:[0-9]+", cfg.get("User") or "") or cfg["User"].startswith("0:"):
            problems.append(f"{user}: container user {cfg.get('User')!r}")
    # the hub says what it dropped, naming each option
    log = hub.log_text()
    for option in [*WEAK_SECURITY_OPT, "'privileged'", "'cap_add'", "'pid_mode'", "'cgroupns'", "'user'"]:
        if option not in log:
            problems.append(f"the hub's log does not name the dropped {option}")
    if "it would weaken the container's isolation" not in log:
        problems.append("no warning about the dropped extras in the hub's log")
    if "INSECURE" not in log or "host network" not in log:
        problems.append("no warning about host networking in the hub's log")
    assert not problems, "\n".join(problems)
