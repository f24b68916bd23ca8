"""The GPU backend registry: a backend defined once is found by the hub, the server, the container and the doctor.

``ToyBackend`` below is the whole of a new backend: one module-level class. No other file names it, yet the
spawner's option accepts it, the hub's allocator lists its GPUs, the server extension opens its reader, the
Docker builder asks for its device request, a Kubernetes pod asks for its device plugin's resource (and its
sidecars may not), and the doctor reports its inventory and its fix.
"""

from __future__ import annotations

import json

import pytest
from traitlets import TraitError

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.doctor import checks
from jupyterhub_gpu.doctor.results import FAIL, PASS
from jupyterhub_gpu.gpus import backends
from jupyterhub_gpu.gpus.backends import GPUBackend, GPUReader, backend_names, get_backend, reader_name
from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, InventoryError
from jupyterhub_gpu.gpus.shared_sim import SharedSimReader
from jupyterhub_gpu.gpus.simulated import KernelActivity, SimulatedReader
from jupyterhub_gpu.serverext.extension import GPUExtension, GPUStats
from jupyterhub_gpu.spawners.assign import host
from jupyterhub_gpu.spawners.docker.objects import make_container_spec, make_device_requests
from jupyterhub_gpu.spawners.kube.objects import unit_resource
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from tests.unit.doctor.test_doctor_checks import doctor, one
from tests.unit.spawners.kube.test_kube_spawner import (  # noqa: F401  (kubeconfig: KubeSpawner needs a client config)
    GIB,
    IMAGE,
    Cluster,
    check_schema,
    kubeconfig,
    make_config,
    make_spawner,
    serialized,
    spawn,
)

TOY_GPUS = [
    GPUDevice(index="0", uuid="TOY-0000", name="Toy Accelerator", memory_mib=8192),
    GPUDevice(index="1", uuid="TOY-0001", name="Toy Accelerator", memory_mib=8192),
]


class ToyReader:
    """Reads the toy GPUs: busy as the server's busy kernels, 100 MiB per running kernel."""

    def __init__(self, devices, activity):
        self.devices = list(devices)
        self.activity = activity
        self.closed = False

    def read(self) -> list[GPUReading]:
        a = self.activity()
        return [
            GPUReading(d.index, d.uuid, d.name, min(100, 10 * a.busy), 100 * a.kernels, d.memory_mib, None, None)
            for d in self.devices
        ]

    def close(self) -> None:
        self.closed = True


#: What the toy's device plugin advertises on a Kubernetes node, one per toy GPU.
TOY_RESOURCE = "toy.example/accelerator"


class ToyBackend(GPUBackend):
    name = "toy"
    label = "The toy driver"
    resource_domains = ("toy.example/",)

    #: set by a test to make the inventory fail, as a host without the toy driver would
    broken = False

    def inventory(self, spec=None):
        if ToyBackend.broken:
            raise InventoryError("the toy driver is not loaded")
        return list(TOY_GPUS)

    def device_requests(self, device_ids):
        return [{"Driver": "toy", "Count": 0, "DeviceIDs": list(device_ids), "Capabilities": [["toy"]], "Options": {}}]

    def open_reader(self, devices, activity, env):
        return ToyReader(devices, activity)

    def pod_resource(self, gpu_model, *, share=None, mig=None, shared_resource=""):
        return TOY_RESOURCE, ""  # any node whose device plugin offers it

    def inventory_fix(self, spawner_class):
        return f"load the toy driver, or set c.{spawner_class}.gpu_backend to another backend"


@pytest.fixture(autouse=True)
def fresh_allocators(monkeypatch):
    monkeypatch.setattr(host, "_ALLOCATORS", {})  # the hub-wide inventory cache: this test's own
    monkeypatch.setattr(ToyBackend, "broken", False)


def test_the_package_backends_and_the_toy_are_registered():
    assert {"nvml", "static", "simulated", "toy"} <= set(backend_names())
    assert isinstance(get_backend("TOY"), ToyBackend)
    assert (reader_name("nvml"), reader_name("static"), reader_name("simulated"), reader_name("toy")) == (
        "nvml",
        "nvml",
        "simulated",
        "toy",
    )
    assert get_backend("simulated").simulated and not get_backend("nvml").simulated


def test_a_second_backend_of_one_name_is_refused():
    with pytest.raises(ValueError, match="'toy' is registered twice"):

        class OtherToy(GPUBackend):
            name = "toy"

    assert isinstance(get_backend("toy"), ToyBackend)


def test_the_spawner_option_accepts_the_toy_and_refuses_an_unknown_name_listing_the_known_ones():
    spawner = GPULocalSpawner(gpu_backend="Toy")
    assert spawner.gpu_backend == "toy"
    assert spawner.allocator.devices == TOY_GPUS  # the hub's inventory
    with pytest.raises(TraitError) as info:
        GPULocalSpawner(gpu_backend="cuda")
    assert "'nvml', 'simulated', 'static', 'toy'" in str(info.value) and "'cuda'" in str(info.value)


def test_the_server_opens_the_toy_reader(monkeypatch):
    for name in gpu_env.NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(gpu_env.READER, reader_name("toy"))
    monkeypatch.setenv(gpu_env.DEVICE_INFO, json.dumps([d.to_dict() for d in TOY_GPUS]))
    ext = GPUExtension(None, GPUStats())
    try:
        assert isinstance(ext.sampler.reader, ToyReader) and isinstance(ext.sampler.reader, GPUReader)
        ext.activity = KernelActivity(kernels=2, busy=3)
        ext.sampler.sample_once()
        gpus = ext.stats(with_history=False)["gpus"]
        assert [(g["uuid"], g["utilization_percent"], g["memory_used_mib"]) for g in gpus] == [
            ("TOY-0000", 30, 200),
            ("TOY-0001", 30, 200),
        ]
    finally:
        ext.stop()
    assert ext.reason is None


def test_a_reader_that_cannot_open_is_the_reason_named_by_its_backend(monkeypatch):
    def refuse(self, devices, activity, env):
        raise OSError("no /dev/toy0")

    monkeypatch.setattr(ToyBackend, "open_reader", refuse)
    for name in gpu_env.NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(gpu_env.READER, "toy")
    monkeypatch.setenv(gpu_env.DEVICE_INFO, json.dumps([TOY_GPUS[0].to_dict()]))
    ext = GPUExtension(None, GPUStats())
    assert ext.sampler is None
    assert ext.reason == "The toy driver is unavailable: OSError: no /dev/toy0"


def test_the_container_asks_for_the_toy_device_request():
    assert make_device_requests(["TOY-0001"], "toy") == [
        {"Driver": "toy", "Count": 0, "DeviceIDs": ["TOY-0001"], "Capabilities": [["toy"]], "Options": {}}
    ]
    assert make_device_requests(["GPU-1"], "nvml")[0]["Capabilities"] == [["gpu"]]
    _, host_config = make_container_spec(
        name="jupyter-alice",
        image="lab:1",
        command=["jupyterhub-singleuser"],
        env={},
        labels={},
        container_user="1000:1000",
        port=8888,
        network_mode="host",
        binds={},
        device_uuids=["TOY-0000"],
        gpu_backend="toy",
    )
    assert host_config["device_requests"][0]["Driver"] == "toy"


def test_the_doctor_reports_the_toy_inventory_and_its_fix(tmp_path):
    result = one(doctor(tmp_path, 'c.GPULocalSpawner.gpu_backend = "toy"\n', only=[checks.check_gpus]), "gpus", PASS)
    assert result.message == "2 GPU(s) from toy: 0: Toy Accelerator (8 GB), 1: Toy Accelerator (8 GB)"
    ToyBackend.broken = True
    host._ALLOCATORS.clear()
    result = one(doctor(tmp_path, 'c.GPULocalSpawner.gpu_backend = "toy"\n', only=[checks.check_gpus]), "gpus", FAIL)
    assert result.message == "toy inventory: the toy driver is not loaded"
    assert result.fix == "load the toy driver, or set c.GPULocalSpawner.gpu_backend to another backend"


def test_the_simulated_backend_reads_whole_gpus_simply_and_shares_through_their_state_dir(tmp_path):
    sim = get_backend("simulated")
    whole = sim.inventory([{"model": "T4", "count": 1}])
    reader = sim.open_reader(whole, KernelActivity, {})
    assert type(reader) is SimulatedReader and isinstance(reader, GPUReader)
    share = GPUDevice("0", f"{whole[0].uuid}/share-0-of-2", "Simulated T4", 8192, True, whole[0].uuid, 0, 2)
    reader = sim.open_reader([share], KernelActivity, {gpu_env.SIM_STATE_DIR: str(tmp_path)})
    assert type(reader) is SharedSimReader and reader.state_dir == tmp_path


def test_the_registry_finds_the_modules_of_the_package_once(monkeypatch):
    monkeypatch.setattr(backends, "_discovered", False)
    assert "static" in backend_names()
    assert backends._discovered


def toy_node(name: str, count: int) -> dict:
    """A Kubernetes node whose toy device plugin advertises ``count`` toy GPUs (no NVIDIA label)."""
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {"allocatable": {TOY_RESOURCE: str(count)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


async def test_a_kubernetes_pod_asks_the_toy_device_plugin_for_its_resource():
    assert unit_resource("Toy Accelerator", backend="toy") == (TOY_RESOURCE, "")
    assert unit_resource("Toy Accelerator")[0] == "nvidia.com/gpu"  # NVIDIA's device plugin by default
    cluster = Cluster()
    cluster.nodes.append(toy_node("toy-1", 2))
    toy = {
        "slug": "toy",
        "display_name": "1× Toy",
        "gpu_model": "Toy Accelerator",
        "gpu_count": 1,
        "image": IMAGE,
        "price_per_gpu_hour": "1.20",
        "cpu_limit": 2,
        "mem_limit": "4G",
    }
    c = make_config(cluster, gpu_backend="toy", profiles=[toy])
    # an admin's sidecar that asks for a toy GPU of its own (and an NVIDIA one): the pod's policy takes both away
    c.KubeSpawner.extra_containers = [
        {"name": "sidecar", "image": IMAGE, "resources": {"limits": {TOY_RESOURCE: "1", "nvidia.com/gpu": "1"}}}
    ]
    spawner = make_spawner(c)
    assert spawner.allocator.counts("Toy Accelerator")["total"] == 0  # not read yet
    assert await spawn(spawner, "toy") == ("10.0.0.5", 8888)
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    notebook, sidecar = pod["spec"]["containers"]
    limits = {"cpu": "2", "memory": str(4 * GIB), TOY_RESOURCE: "1"}
    assert notebook["resources"] == {"limits": limits, "requests": limits}
    assert sidecar["resources"] == {"limits": {}}
    assert "nodeSelector" not in pod["spec"]  # the toy names no product: any node with the resource
    env = {e["name"]: e["value"] for e in notebook["env"]}
    assert env["JUPYTERHUB_GPU_RESOURCE"] == TOY_RESOURCE
    assert spawner.gpu_session["devices"] == [f"{TOY_RESOURCE}:0"]
    counts = spawner.allocator.counts("Toy Accelerator")
    assert (counts["total"], counts["free"]) == (2, 1)  # the toy node's, less this spawn's claim
