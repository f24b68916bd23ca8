"""The one list of ``JUPYTERHUB_GPU_*`` environment variables: written by the spawners, read by the server side.

The spawners put a session's facts in its server's environment with
:func:`make_gpu_env` (Docker and local processes as they are;
:func:`nvml_discovery_env` on Kubernetes, where the device plugin picks the
GPUs); the server extension, the Keras callbacks, TensorBoard and the startup
script read them back here. No other module names one of these variables.

Not in this list: the deployment's own variables, read only by the configuration
files in ``config/`` (``JUPYTERHUB_GPU_DB_URL``, ``JUPYTERHUB_GPU_DEMO_*``), the
image's build argument ``JUPYTERHUB_GPU_VERSION``, the tests' ``JUPYTERHUB_GPU_TEST_*``,
and JupyterHub's own variables (``JUPYTERHUB_API_TOKEN``, ``JUPYTERHUB_SERVICE_URL``, ...).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.gpus.backends import backend_names
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError, share_uuid
from jupyterhub_gpu.gpus.nvml import nvml_inventory
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.session import SessionStart, known_language, known_tier, parse_started

PREFIX = "JUPYTERHUB_GPU_"

# -- what the spawner writes (one session) --------------------------------------------------
#: The ledger's id of the session; its presence means "started by jupyterhub-gpu".
SESSION_ID = "JUPYTERHUB_GPU_SESSION_ID"
#: The profile's slug, display name and GPU model.
PROFILE = "JUPYTERHUB_GPU_PROFILE"
PROFILE_NAME = "JUPYTERHUB_GPU_PROFILE_NAME"
MODEL = "JUPYTERHUB_GPU_MODEL"
#: When the server started (ISO 8601, UTC), and the exact rate per minute as a decimal string.
STARTED = "JUPYTERHUB_GPU_STARTED"
RATE_PER_MINUTE = "JUPYTERHUB_GPU_RATE_PER_MINUTE"
CURRENCY = "JUPYTERHUB_GPU_CURRENCY"
CURRENCY_SYMBOL = "JUPYTERHUB_GPU_CURRENCY_SYMBOL"
#: "1" when the GPUs are simulated (the demo and the tests).
SIMULATED = "JUPYTERHUB_GPU_SIMULATED"
#: How the server reads its GPUs, a GPU backend's name (:mod:`jupyterhub_gpu.gpus.backends`): "nvml" (the
#: driver library: a real one, or the stand-in driver of jupyterhub_gpu/gpus/standin.py) or "simulated" (the
#: Python-level simulation of the embedded demo, :mod:`jupyterhub_gpu.gpus.simulated`). Absent (a server
#: started by an older hub): "simulated" when SIMULATED.
READER = "JUPYTERHUB_GPU_READER"
#: The assigned GPUs: their UUIDs (comma-separated) and their index, uuid, name and memory (JSON).
DEVICES = "JUPYTERHUB_GPU_DEVICES"
DEVICE_INFO = "JUPYTERHUB_GPU_DEVICE_INFO"
#: A shared unit (docs/admin.md): the share's memory cap in MiB (a MIG slice's memory; absent for a whole GPU),
#: and "1/4" for a time-sliced share or "mig:1g.10gb" for a MIG slice (absent for a whole GPU).
MEMORY_LIMIT_MIB = "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"
SHARE = "JUPYTERHUB_GPU_SHARE"
#: Kubernetes: "nvml" when the server lists its GPUs itself (with NVML, which sees only the GPUs the device
#: plugin gave the pod), how many it has, and the extended resource.
DEVICE_DISCOVERY = "JUPYTERHUB_GPU_DEVICE_DISCOVERY"
COUNT = "JUPYTERHUB_GPU_COUNT"
RESOURCE = "JUPYTERHUB_GPU_RESOURCE"
#: The gpu service's URL as the server reaches it (where the hub's config gives one).
SERVICE_URL = "JUPYTERHUB_GPU_SERVICE_URL"
#: The notebook job this server runs (servers the service starts for a job, docs/jobs.md).
JOB_ID = "JUPYTERHUB_GPU_JOB_ID"
#: The language the user chose when the server was spawned ("en", "zh-CN": :mod:`jupyterhub_gpu.i18n`),
#: for the Lab's own language and the server's texts.
LANGUAGE = "JUPYTERHUB_GPU_LANGUAGE"
#: What else the student chose with the session: the group that pays, the tier ("preemptible"; absent: full price)
#: and whether to be put back in the queue when preempted ("1"), so that a hub that restarts without the
#: spawner's state (an orphan: spawners/startup.py) records the session as it was started.
POOL = "JUPYTERHUB_GPU_POOL"
TIER = "JUPYTERHUB_GPU_TIER"
RESUME = "JUPYTERHUB_GPU_RESUME"

# -- what an admin or a user may set in the server's environment ------------------------------
#: Path of TensorBoard for the Lab's button, and the directory TensorBoard reads.
TENSORBOARD_URL = "JUPYTERHUB_GPU_TENSORBOARD_URL"
TENSORBOARD_LOGDIR = "JUPYTERHUB_GPU_TENSORBOARD_LOGDIR"
#: Seconds the user's startup script may run.
STARTUP_TIMEOUT = "JUPYTERHUB_GPU_STARTUP_TIMEOUT"
#: The gpu service's URL for the ``jupyterhub-gpu`` command line.
CLI_URL = "JUPYTERHUB_GPU_URL"
#: Simulated shared GPUs: the directory the servers of one machine share (:mod:`jupyterhub_gpu.gpus.shared_sim`).
SIM_STATE_DIR = "JUPYTERHUB_GPU_SIM_STATE_DIR"
#: The identity a hub gives the services it starts (its gpu service): :func:`jupyterhub_gpu.ledger.hubs.hub_identity`.
HUB_ID = "JUPYTERHUB_GPU_HUB_ID"
#: The stand-in NVIDIA driver (tools/nvml-sim, :mod:`jupyterhub_gpu.gpus.standin`): its state file and the
#: directory of its device nodes, for a process on the host (in a container: /run/nvidia-sim and /dev).
NVML_STATE = "JUPYTERHUB_GPU_NVML_STATE"
NVML_DEV_DIR = "JUPYTERHUB_GPU_NVML_DEV_DIR"

#: Every variable of this list.
NAMES = (
    SESSION_ID,
    PROFILE,
    PROFILE_NAME,
    MODEL,
    STARTED,
    RATE_PER_MINUTE,
    CURRENCY,
    CURRENCY_SYMBOL,
    SIMULATED,
    READER,
    DEVICES,
    DEVICE_INFO,
    MEMORY_LIMIT_MIB,
    SHARE,
    DEVICE_DISCOVERY,
    COUNT,
    RESOURCE,
    SERVICE_URL,
    JOB_ID,
    LANGUAGE,
    TENSORBOARD_URL,
    TENSORBOARD_LOGDIR,
    STARTUP_TIMEOUT,
    CLI_URL,
    SIM_STATE_DIR,
    NVML_STATE,
    NVML_DEV_DIR,
)

# -- written by the spawners ----------------------------------------------------------------


def server_file_name(server_name: str) -> str:
    """A named server's name as one file name component, distinct for distinct names: characters other than
    letters, digits, ``.``, ``_`` and ``-`` become ``_``, and a name that this changed (or cut, or that would
    read as ``.`` or ``..``) gets 8 hex digits of its hash, so "a b" and "a_b" never share a file."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", server_name)[:64]
    if safe != server_name or not safe.strip("."):
        safe = f"{safe}-{hashlib.sha256(server_name.encode()).hexdigest()[:8]}"
    return safe


def make_gpu_env(
    session: SessionStart,
    *,
    devices: list[dict] | None = None,
    gpu_model: str = "",
    profile_name: str = "",
    currency_symbol: str = "",
    service_url: str = "",
    memory_limit_mib: int | None = None,
    share: str = "",
    reader: str = "nvml",
) -> dict[str, str]:
    """The environment that tells a server its session (the one way a :class:`SessionStart` goes there), its
    GPUs and how to show them; :func:`session_from_env` reads the session back.

    The server sees ``session.visible_gpus`` (a share's physical GPU, a MIG slice's uuid). ``devices`` (index,
    uuid, name, memory_mib of each assigned unit) lets the server extension label and size the GPUs it reads;
    ``gpu_model``, ``profile_name`` (in the spawn's language) and ``currency_symbol`` ("": the Lab writes its
    language's) are for the Lab's display. For a share or MIG slice ``memory_limit_mib`` is its cap and
    ``share`` its :func:`share_label` ("1/4", "mig:1g.10gb"). ``reader``: :data:`READER` (a GPU backend's
    name, :mod:`jupyterhub_gpu.gpus.backends`). The pool, tier and resume choice travel too, so that a hub
    that restarts without the spawner's state (an orphan) records the session as it was started.
    """
    if reader not in backend_names():
        raise ValueError(f"reader must be one of {', '.join(backend_names())}, got {reader!r}")
    visible = ",".join(dict.fromkeys(session.visible_gpus))
    env = {
        # "void" hides every GPU from the NVIDIA runtime for a CPU-only profile;
        # base images set NVIDIA_VISIBLE_DEVICES=all otherwise.
        "NVIDIA_VISIBLE_DEVICES": visible or "void",
        "CUDA_VISIBLE_DEVICES": visible,
        PROFILE: session.profile,
        DEVICES: visible,
        RATE_PER_MINUTE: session.rate_text,
        CURRENCY: session.currency,
        SESSION_ID: session.id,
        STARTED: isoformat(session.started),
        SIMULATED: "1" if session.simulated else "0",
        READER: reader,
        DEVICE_INFO: json.dumps(devices or [], sort_keys=True),
        MODEL: gpu_model,
        PROFILE_NAME: profile_name or session.profile,
        CURRENCY_SYMBOL: currency_symbol,
        LANGUAGE: session.language or "en",
    }
    if service_url:
        env[SERVICE_URL] = service_url
    if memory_limit_mib is not None:
        env[MEMORY_LIMIT_MIB] = str(int(memory_limit_mib))
    if share:
        env[SHARE] = share
    if session.pool:
        env[POOL] = session.pool
    if session.tier:
        env[TIER] = session.tier
    if session.resume:
        env[RESUME] = "1"
    return env


def share_label(devices: list[GPUDevice]) -> str:
    """What :data:`SHARE` says of these units: "1/4" for a share, "mig:1g.10gb" for a MIG slice, else ""."""
    for d in devices:
        if d.is_share:
            return d.share_text
        if d.is_mig and d.mig_profile:
            return f"mig:{d.mig_profile}"
    return ""


def memory_limit_of(devices: list[GPUDevice]) -> int | None:
    """What :data:`MEMORY_LIMIT_MIB` says of these units: the cap of a share or slice, None for whole GPUs."""
    shared = [d for d in devices if d.is_share or d.is_mig]
    if not shared:
        return None
    return sum(d.memory_mib for d in shared)


def nvml_discovery_env(gpu_count: int, gpu_resource: str) -> dict[str, str]:
    """What changes on Kubernetes: a GPU pod lists the GPUs the device plugin gave it with NVML; a CPU pod has none.

    NVML inside the pod sees only the GPUs the plugin chose (NVIDIA's plugin and container toolkit mount only
    their device nodes; on the test cluster, the simulated plugin does the same with the stand-in driver's,
    tools/nvml-sim), so the pod never trusts a GPU named by an environment variable.
    """
    if not gpu_count:
        return {COUNT: "0"}
    return {
        DEVICES: "",
        DEVICE_INFO: "[]",
        DEVICE_DISCOVERY: "nvml",
        READER: "nvml",
        COUNT: str(gpu_count),
        RESOURCE: gpu_resource,
    }


# -- read by the server side ----------------------------------------------------------------


def reader_from_env(env: Mapping[str, str] = os.environ) -> str:
    """How this server reads its GPUs: a GPU backend's name, "nvml" or "simulated" (:data:`READER`)."""
    value = env.get(READER, "").strip()
    if value in backend_names():
        return value
    return "simulated" if env.get(SIMULATED) == "1" else "nvml"


def session_from_env(env: Mapping[str, str] = os.environ) -> SessionStart | None:
    """The session the spawner wrote to a server's environment (:func:`make_gpu_env`), or None: outside
    jupyterhub-gpu, or an environment whose session cannot be read (no start, or no valid rate or currency).

    The user and server name are JupyterHub's own variables; the units are the listed devices (never
    discovered: a hub reads an orphan's environment with this). A currency not given is "USD", a rate "0".
    The pool is the environment's word only: a hub that bills from it checks it against the user's groups.
    """
    if SESSION_ID not in env:
        return None
    try:
        return SessionStart(
            id=env[SESSION_ID],
            user=env.get("JUPYTERHUB_USER", ""),
            server_name=env.get("JUPYTERHUB_SERVER_NAME", ""),
            groups=(),
            profile=env.get(PROFILE, ""),
            gpus=tuple(d.uuid for d in listed_devices(env)),
            rate_micros=to_micros(Decimal(env.get(RATE_PER_MINUTE, "0"))),
            currency=Currency.from_config(env.get(CURRENCY, "USD"), None).code,
            started=parse_started(env.get(STARTED, "")),
            simulated=env.get(SIMULATED) == "1",
            pool=env.get(POOL) or None,
            language=known_language(env.get(LANGUAGE)),
            tier=known_tier(env.get(TIER)),
            resume=env.get(RESUME) == "1",
            visible_gpus=tuple(u for u in env.get(DEVICES, "").split(",") if u),
        )
    except (ValueError, ArithmeticError):
        return None


def lab_session_from_env(env: Mapping[str, str] = os.environ) -> dict | None:
    """What the Lab shows of the session (the stats' ``session``): :func:`session_from_env`'s record with the
    names, model and currency symbol the spawner wrote for display; None outside jupyterhub-gpu."""
    session = session_from_env(env)
    if session is None:
        return None
    currency = Currency.from_config(session.currency, env.get(CURRENCY_SYMBOL) or None)
    return {
        "id": session.id,
        "profile": session.profile,
        "display_name": env.get(PROFILE_NAME, session.profile),
        "gpu_model": env.get(MODEL, ""),
        "started": isoformat(session.started),
        "rate_per_minute": session.rate_text,
        "currency": currency.code,
        "currency_symbol": currency.symbol or "",  # the admin's; "": each reader's locale writes its own
        "simulated": session.simulated,
        "language": env.get(LANGUAGE),
        "pool": session.pool,
        "tier": session.tier,
        "resume": session.resume,
    }


def listed_devices(env: Mapping[str, str] = os.environ) -> list[GPUDevice]:
    """The units the spawner listed in the environment (none where the server discovers its GPUs)."""
    info = env.get(DEVICE_INFO)
    if info:
        return [GPUDevice.from_dict(d) for d in json.loads(info)]
    uuids = [u for u in env.get(DEVICES, "").split(",") if u]
    return [GPUDevice(str(i), u, u, 0) for i, u in enumerate(uuids)]


def devices_from_env(env: Mapping[str, str] = os.environ) -> list[GPUDevice]:
    """The GPUs assigned to this server: listed by the spawner, or (Kubernetes) found with NVML."""
    if env.get(DEVICE_DISCOVERY) == "nvml":
        # Kubernetes: the device plugin chose the GPUs and made only those visible to this pod
        try:
            found = nvml_inventory()
        except InventoryError:
            return []
        return [pod_unit(d, env) for d in found]
    return listed_devices(env)


def pod_unit(device: GPUDevice, env: Mapping[str, str]) -> GPUDevice:
    """A GPU a time-sliced pod sees whole as the share it holds (the pod's ``SHARE`` "1/k" and cap): so that the
    readers attribute only its own processes' memory to it, never its neighbours'. The device plugin
    does not say which replica the pod got: it is share 0 of ``k`` here."""
    share = share_from_env(env)
    if device.parent_uuid is not None or not share.startswith("1/"):
        return device  # a whole GPU, or a MIG instance (NVML lists it as such)
    try:
        count = int(share[2:])
    except ValueError:
        return device
    if not 1 < count <= 16:
        return device
    cap = memory_limit_from_env(env) or device.memory_mib // count
    return replace(
        device,
        uuid=share_uuid(device.uuid, 0, count),
        memory_mib=cap,
        parent_uuid=device.uuid,
        share_index=0,
        share_count=count,
    )


def gpu_count_from_env(env: Mapping[str, str] = os.environ) -> int:
    """How many GPUs this server has: the count the spawner wrote, else the number of listed devices."""
    return int(env.get(COUNT) or 0) or len(json.loads(env.get(DEVICE_INFO, "[]")))


def memory_limit_from_env(env: Mapping[str, str] = os.environ) -> int | None:
    """The memory cap of this server's share or MIG slice in MiB, or None (a whole GPU, or not set)."""
    text = env.get(MEMORY_LIMIT_MIB, "").strip()
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def share_from_env(env: Mapping[str, str] = os.environ) -> str:
    """ "1/4" for a time-sliced share, "mig:1g.10gb" for a MIG slice, "" for a whole GPU."""
    return env.get(SHARE, "").strip()


def sim_state_dir_from_env(env: Mapping[str, str] = os.environ) -> str:
    """Where simulated shared GPUs keep their servers' state, or "" for the default (<tempdir>/jupyterhub-gpu-sim)."""
    return env.get(SIM_STATE_DIR, "").strip()


def service_url_from_env(env: Mapping[str, str] = os.environ) -> str:
    """The gpu service's URL as this server reaches it, or ""."""
    return env.get(SERVICE_URL, "")


def tensorboard_url_from_env(env: Mapping[str, str] = os.environ) -> str:
    """The path of TensorBoard an admin set for the Lab's button, or ""."""
    return env.get(TENSORBOARD_URL, "")


def tensorboard_logdir_from_env(env: Mapping[str, str] = os.environ) -> str:
    """The directory TensorBoard should read, as set, or ""."""
    return env.get(TENSORBOARD_LOGDIR) or ""


def job_id_from_env(env: Mapping[str, str] = os.environ) -> str | None:
    """The notebook job this server runs, or None for an interactive server."""
    return env.get(JOB_ID) or None


def language_from_env(env: Mapping[str, str] = os.environ) -> str:
    """The language the user chose for the spawn, as written (``"en"``, ``"zh-CN"``), or ""."""
    return env.get(LANGUAGE, "").strip()


def startup_timeout_from_env(env: Mapping[str, str] = os.environ) -> str:
    """The startup script's time limit as set (seconds, text), or ""."""
    return env.get(STARTUP_TIMEOUT, "").strip()
