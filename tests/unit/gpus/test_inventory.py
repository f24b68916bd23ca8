"""GPU inventory: model matching, simulated, static and NVML backends."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from types import SimpleNamespace

import pytest

from jupyterhub_gpu.gpus.backends import UnknownBackend, backend_names, get_backend
from jupyterhub_gpu.gpus.device import GPUDevice, InventoryError
from jupyterhub_gpu.gpus.names import model_matches
from jupyterhub_gpu.gpus.nvml import nvml_inventory
from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.gpus.static import static_inventory

# -- model_matches ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("A100", "NVIDIA A100-SXM4-40GB"),
        ("a100", "NVIDIA A100-SXM4-40GB"),
        ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        ("A100 SXM4", "NVIDIA A100-SXM4-40GB"),
        ("T4", "Tesla T4"),
        ("Tesla T4", "Tesla T4"),
        ("L4", "NVIDIA L4"),
        ("L40S", "NVIDIA L40S"),
        ("H100 80GB", "NVIDIA H100 80GB HBM3"),
        ("T4", "Simulated T4"),
        ("Simulated T4", "Simulated T4"),
        # MIG instances: the profile may name the slice profile ...
        ("1g.5gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
        ("MIG 1g.5gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
        ("A100 MIG 3g.20gb", "NVIDIA A100 MIG 3g.20gb"),
        ("A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
    ],
)
def test_model_matches(model, name):
    assert model_matches(model, name)


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("L4", "NVIDIA L40S"),
        ("L4", "NVIDIA L40"),
        ("T4", "Tesla T40"),
        ("A10", "NVIDIA A100-SXM4-40GB"),
        ("A100", "NVIDIA A10"),
        ("A100 40GB", "NVIDIA A100-SXM4-40GB"),  # words must be consecutive
        ("SXM4 A100", "NVIDIA A100-SXM4-40GB"),  # and in order
        ("1g.5gb", "NVIDIA A100-SXM4-40GB MIG 2g.10gb"),
        # a whole-GPU model never matches a MIG slice of that GPU
        ("A100", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
        ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
        ("1g", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),  # the dot does not split a word
        ("5gb", "NVIDIA A100-SXM4-40GB MIG 1g.5gb"),
        ("H100 80GB PCIe", "NVIDIA H100 80GB HBM3"),
        ("", "Tesla T4"),
        ("  - ", "Tesla T4"),
        ("T4", ""),
    ],
)
def test_model_does_not_match(model, name):
    assert not model_matches(model, name)


# -- simulated_inventory -------------------------------------------------------------

SIM_SPEC = [{"model": "T4", "count": 2, "memory_gb": 16}, {"model": "A100", "count": 1, "memory_gb": 40}]


def test_simulated_inventory():
    devices = simulated_inventory(SIM_SPEC)
    assert [(d.index, d.name, d.memory_mib, d.simulated, d.parent_uuid) for d in devices] == [
        ("0", "Simulated T4", 16 * 1024, True, None),
        ("1", "Simulated T4", 16 * 1024, True, None),
        ("2", "Simulated A100", 40 * 1024, True, None),
    ]
    assert all(d.name.startswith("Simulated ") for d in devices)
    assert all(d.uuid.startswith("GPU-") for d in devices)
    assert len({d.uuid for d in devices}) == 3
    assert devices[2].memory_gb == 40


def test_simulated_uuids_are_stable_across_calls():
    first = simulated_inventory(SIM_SPEC)
    second = simulated_inventory([dict(e) for e in SIM_SPEC])
    assert [d.uuid for d in first] == [d.uuid for d in second]
    assert first == second


def test_simulated_defaults_and_stripping():
    (device,) = simulated_inventory([{"model": "  L4  "}])
    assert device.name == "Simulated L4"
    assert device.memory_mib == 16 * 1024


def test_simulated_empty_list_has_no_devices():
    assert simulated_inventory([]) == []


def test_simulated_devices_match_their_model():
    devices = simulated_inventory(SIM_SPEC)
    assert [d.index for d in devices if model_matches("T4", d.name)] == ["0", "1"]
    assert [d.index for d in devices if model_matches("A100", d.name)] == ["2"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"model": "T4"}, "simulated_gpus must be a list of {'model', 'count', 'memory_gb'} dicts"),
        ("T4", "simulated_gpus must be a list"),
        (
            ["T4"],
            "simulated_gpus #1 must be a dict with keys model, count, memory_gb (and mig for MIG instances); got 'T4'",
        ),
        ([{"model": "T4", "uuid": "GPU-1"}], "simulated_gpus #1 must be a dict with keys model, count, memory_gb"),
        ([{"count": 1}], "simulated_gpus #1: 'model' must be a non-empty string"),
        ([{"model": " "}], "simulated_gpus #1: 'model' must be a non-empty string"),
        ([{"model": "T4"}, {"model": 4}], "simulated_gpus #2: 'model' must be a non-empty string"),
        ([{"model": "T4", "count": 0}], "simulated_gpus #1: 'count' must be an integer from 1 to 256"),
        ([{"model": "T4", "count": 257}], "simulated_gpus #1: 'count' must be an integer from 1 to 256"),
        ([{"model": "T4", "count": True}], "simulated_gpus #1: 'count' must be an integer from 1 to 256"),
        ([{"model": "T4", "count": "2"}], "simulated_gpus #1: 'count' must be an integer from 1 to 256"),
        ([{"model": "T4", "memory_gb": 0}], "simulated_gpus #1: 'memory_gb' must be a positive integer"),
        ([{"model": "T4", "memory_gb": 16.0}], "simulated_gpus #1: 'memory_gb' must be a positive integer"),
        ([{"model": "T4", "memory_gb": False}], "simulated_gpus #1: 'memory_gb' must be a positive integer"),
    ],
)
def test_simulated_validation(spec, message):
    with pytest.raises(InventoryError) as info:
        simulated_inventory(spec)
    assert str(info.value).startswith(message)


# -- static_inventory ----------------------------------------------------------------

T4_UUID = "GPU-5d4f6c2a-1111-2222-3333-444455556666"
A100_UUID = "GPU-0a1b2c3d-aaaa-bbbb-cccc-ddddeeeeffff"
MIG_UUID = "MIG-9f8e7d6c-1234-5678-9abc-def012345678"


def test_static_inventory():
    devices = static_inventory(
        [
            {"index": 0, "uuid": T4_UUID, "name": " Tesla T4 ", "memory_gb": 16},
            {"uuid": A100_UUID, "name": "NVIDIA A100-SXM4-40GB", "memory_mib": 40960},
            {"index": "1:0", "uuid": MIG_UUID, "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "memory_mib": 4864},
            {"index": 3, "uuid": "GPU-x", "name": "Unknown"},
        ]
    )
    assert devices == [
        GPUDevice(index="0", uuid=T4_UUID, name="Tesla T4", memory_mib=16384),
        GPUDevice(index="1", uuid=A100_UUID, name="NVIDIA A100-SXM4-40GB", memory_mib=40960),
        GPUDevice(index="1:0", uuid=MIG_UUID, name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", memory_mib=4864),
        GPUDevice(index="3", uuid="GPU-x", name="Unknown", memory_mib=0),
    ]
    assert not any(d.simulated for d in devices)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "static_gpus must be a non-empty list"),
        (None, "static_gpus must be a non-empty list"),
        ({"uuid": T4_UUID, "name": "T4"}, "static_gpus must be a non-empty list"),
        (
            ["GPU-1"],
            "static_gpus #1 must be a dict with keys"
            " ['index', 'memory_gb', 'memory_mib', 'name', 'parent_uuid', 'uuid']",
        ),
        ([{"uuid": T4_UUID, "name": "T4", "model": "T4"}], "static_gpus #1 must be a dict with keys"),
        (
            [{"uuid": "5d4f6c2a", "name": "T4"}],
            "static_gpus #1: 'uuid' must look like 'GPU-…' or 'MIG-…', got '5d4f6c2a'",
        ),
        ([{"uuid": "gpu-5d4f", "name": "T4"}], "static_gpus #1: 'uuid' must look like"),
        ([{"uuid": "GPU-", "name": "T4"}], "static_gpus #1: 'uuid' must look like"),
        ([{"uuid": "GPU-5d4f 6c2a", "name": "T4"}], "static_gpus #1: 'uuid' must look like"),
        ([{"uuid": "GPU-5d4f\n", "name": "T4"}], "static_gpus #1: 'uuid' must look like"),
        ([{"uuid": "GPU-5d4f,GPU-6c2a", "name": "T4"}], "static_gpus #1: 'uuid' must look like"),
        ([{"name": "T4"}], "static_gpus #1: 'uuid' must look like 'GPU-…' or 'MIG-…', got None"),
        ([{"uuid": T4_UUID}], "static_gpus #1: 'name' must be a non-empty string"),
        ([{"uuid": T4_UUID, "name": ""}], "static_gpus #1: 'name' must be a non-empty string"),
        ([{"uuid": T4_UUID, "name": "T4", "index": True}], "static_gpus #1: 'index' must be an integer or string"),
        ([{"uuid": T4_UUID, "name": "T4", "index": 0.5}], "static_gpus #1: 'index' must be an integer or string"),
        ([{"uuid": T4_UUID, "name": "T4", "memory_gb": -1}], "static_gpus #1: memory must be a non-negative integer"),
        ([{"uuid": T4_UUID, "name": "T4", "memory_gb": 16.0}], "static_gpus #1: memory must be a non-negative"),
        ([{"uuid": T4_UUID, "name": "T4", "memory_gb": True}], "static_gpus #1: memory must be a non-negative"),
        ([{"uuid": T4_UUID, "name": "T4", "memory_mib": "16G"}], "static_gpus #1: memory must be a non-negative"),
        ([{"uuid": T4_UUID, "name": "T4", "memory_mib": False}], "static_gpus #1: memory must be a non-negative"),
    ],
)
def test_static_validation(spec, message):
    with pytest.raises(InventoryError) as info:
        static_inventory(spec)
    assert str(info.value).startswith(message)


def test_static_error_names_the_position():
    with pytest.raises(InventoryError, match=r"^static_gpus #2: 'uuid' must look like"):
        static_inventory([{"uuid": T4_UUID, "name": "T4"}, {"uuid": "bad", "name": "T4"}])


def test_static_duplicate_uuid():
    with pytest.raises(InventoryError, match=f"^GPU {T4_UUID} is listed twice$"):
        static_inventory([{"uuid": T4_UUID, "name": "Tesla T4"}, {"uuid": T4_UUID, "name": "Tesla T4"}])


# -- nvml_inventory ------------------------------------------------------------------


def test_nvml_without_a_driver_raises_a_clear_error():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - a host with an NVIDIA driver
        pynvml.nvmlShutdown()
        pytest.skip("this host has an NVIDIA driver")
    with pytest.raises(InventoryError) as info:
        nvml_inventory()
    message = str(info.value)
    assert message.startswith("NVML could not start (NVMLError")
    assert "Is the NVIDIA driver installed?" in message
    assert "gpu_backend = 'static'" in message and "'simulated'" in message
    with pytest.raises(InventoryError, match="NVML could not start"):
        get_backend("nvml").inventory()


class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """A stand-in for the pynvml module: the driver boundary, and the only thing faked.

    Each GPU is a dict with ``name``, ``uuid``, ``mib`` and ``mig``: None for a GPU
    that is not MIG-capable, False for MIG-capable but disabled, or a list of MIG
    slots (None for an empty slot, else a dict with ``name``, ``uuid``, ``mib``).
    """

    NVML_DEVICE_MIG_ENABLE = 1
    NVML_DEVICE_MIG_DISABLE = 0

    def __init__(self, gpus, fail=None):
        self.gpus = gpus
        self.fail = fail or {}
        self.calls = []

    def _maybe_fail(self, name):
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]

    def nvmlInit(self):
        self._maybe_fail("nvmlInit")

    def nvmlShutdown(self):
        self._maybe_fail("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        self._maybe_fail("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def _info(self, handle):
        if handle[0] == "gpu":
            return self.gpus[handle[1]]
        return self.gpus[handle[1]]["mig"][handle[2]]

    def nvmlDeviceGetName(self, handle):
        return self._info(handle)["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle):
        return self._info(handle)["uuid"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self._info(handle)["mib"] * 1024**2, free=0, used=0)

    def nvmlDeviceGetMigMode(self, handle):
        mig = self.gpus[handle[1]]["mig"]
        if mig is None:
            raise FakeNVMLError("Not Supported")
        if mig is False:
            return (self.NVML_DEVICE_MIG_DISABLE, self.NVML_DEVICE_MIG_DISABLE)
        return (self.NVML_DEVICE_MIG_ENABLE, self.NVML_DEVICE_MIG_ENABLE)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return len(self.gpus[handle[1]]["mig"])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, j):
        if self.gpus[handle[1]]["mig"][j] is None:
            raise FakeNVMLError("Not Found")
        return ("mig", handle[1], j)


A100_PARENT = "GPU-a100a100-0000-0000-0000-000000000001"
MIG_A = "MIG-11111111-2222-3333-4444-555555555555"
MIG_B = "MIG-66666666-7777-8888-9999-000000000000"


def fake_host() -> FakeNVML:
    return FakeNVML(
        [
            {"name": "Tesla T4", "uuid": "GPU-t4-0", "mib": 15360, "mig": None},
            {"name": "Tesla T4", "uuid": "GPU-t4-1", "mib": 15360, "mig": None},
            {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-a100-plain", "mib": 40960, "mig": False},
            {
                "name": "NVIDIA A100-SXM4-40GB",
                "uuid": A100_PARENT,
                "mib": 40960,
                "mig": [
                    {"name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "uuid": MIG_A, "mib": 4864},
                    None,
                    {"name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "uuid": MIG_B, "mib": 19968},
                ],
            },
        ]
    )


def test_nvml_plain_and_mig_gpus():
    nvml = fake_host()
    devices = nvml_inventory(nvml)
    assert devices == [
        GPUDevice(index="0", uuid="GPU-t4-0", name="Tesla T4", memory_mib=15360),
        GPUDevice(index="1", uuid="GPU-t4-1", name="Tesla T4", memory_mib=15360),
        GPUDevice(index="2", uuid="GPU-a100-plain", name="NVIDIA A100-SXM4-40GB", memory_mib=40960),
        # the MIG-enabled GPU itself is not schedulable: its instances are, by their own UUIDs
        GPUDevice(
            index="3:0", uuid=MIG_A, name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", memory_mib=4864, parent_uuid=A100_PARENT
        ),
        GPUDevice(
            index="3:2", uuid=MIG_B, name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", memory_mib=19968, parent_uuid=A100_PARENT
        ),
    ]
    assert A100_PARENT not in {d.uuid for d in devices}
    assert not any(d.simulated for d in devices)
    assert nvml.calls[0] == "nvmlInit"
    assert nvml.calls[-1] == "nvmlShutdown"
    assert [d.uuid for d in devices if model_matches("1g.5gb", d.name)] == [MIG_A]


def test_nvml_no_gpus():
    nvml = FakeNVML([])
    assert nvml_inventory(nvml) == []
    assert nvml.calls == ["nvmlInit", "nvmlDeviceGetCount", "nvmlShutdown"]


def test_nvml_init_failure():
    nvml = FakeNVML([], fail={"nvmlInit": FakeNVMLError("Driver Not Loaded")})
    with pytest.raises(InventoryError) as info:
        nvml_inventory(nvml)
    assert str(info.value).startswith("NVML could not start (FakeNVMLError: Driver Not Loaded).")
    assert isinstance(info.value.__cause__, FakeNVMLError)


def test_nvml_failure_while_listing_is_an_inventory_error_and_shuts_down():
    nvml = FakeNVML([], fail={"nvmlDeviceGetCount": FakeNVMLError("GPU is lost")})
    with pytest.raises(InventoryError, match=r"^NVML could not list the GPUs \(FakeNVMLError: GPU is lost\)$"):
        nvml_inventory(nvml)
    assert nvml.calls[-1] == "nvmlShutdown"


def test_nvml_shutdown_failure_is_ignored():
    nvml = fake_host()
    nvml.fail["nvmlShutdown"] = FakeNVMLError("oops")
    assert len(nvml_inventory(nvml)) == 5


def test_nvml_duplicate_uuid():
    nvml = FakeNVML(
        [
            {"name": "Tesla T4", "uuid": "GPU-same", "mib": 15360, "mig": None},
            {"name": "Tesla T4", "uuid": "GPU-same", "mib": 15360, "mig": None},
        ]
    )
    with pytest.raises(InventoryError, match="GPU GPU-same is listed twice"):
        nvml_inventory(nvml)


# -- the backends' inventories and GPUDevice ------------------------------------------


def test_the_backends_list_their_inventories():
    assert {"nvml", "static", "simulated"} <= set(backend_names())
    assert get_backend("simulated").inventory(SIM_SPEC) == simulated_inventory(SIM_SPEC)
    spec = [{"uuid": T4_UUID, "name": "Tesla T4", "memory_gb": 16}]
    assert get_backend("static").inventory(spec) == static_inventory(spec)
    assert get_backend("Static").inventory(spec) == static_inventory(spec)  # any case, as gpu_backend
    assert get_backend("simulated").inventory() == []
    with pytest.raises(InventoryError, match="static_gpus must be a non-empty list"):
        get_backend("static").inventory()


@pytest.mark.parametrize("backend", ["cuda", "", "NVML ", None])
def test_an_unknown_backend_is_refused_naming_the_known_ones(backend):
    with pytest.raises(UnknownBackend) as info:
        get_backend(backend)
    assert str(info.value) == f"gpu_backend must be one of {', '.join(backend_names())}, got {backend!r}"
    assert "nvml, simulated, static" in str(info.value)


def test_gpu_device_to_dict_and_memory_gb():
    device = GPUDevice(index="3:0", uuid=MIG_A, name="MIG 1g.5gb", memory_mib=4864, parent_uuid=A100_PARENT)
    assert device.to_dict() == {
        "index": "3:0",
        "uuid": MIG_A,
        "name": "MIG 1g.5gb",
        "memory_mib": 4864,
        "simulated": False,
        "parent_uuid": A100_PARENT,
        "share_index": None,
        "share_count": None,
    }
    assert device.memory_gb == 5
    assert GPUDevice(index="0", uuid="GPU-1", name="T4", memory_mib=15360).memory_gb == 15
    with pytest.raises(FrozenInstanceError):
        device.uuid = "GPU-other"


def test_a_static_mig_enabled_gpu_is_listed_only_by_its_instances():
    # listed whole beside its instances, the GPU (and shares of it) would be handed out while a slice is held
    parent = "GPU-aaaa-1111"
    spec = [
        {"index": 0, "uuid": parent, "name": "NVIDIA A100-SXM4-40GB", "memory_gb": 40},
        {"index": "0:0", "uuid": "MIG-bbbb-1", "name": "NVIDIA A100-SXM4-40GB MIG 1g.10gb", "memory_gb": 10,
         "parent_uuid": parent},
    ]  # fmt: skip
    with pytest.raises(InventoryError, match=r"static_gpus #2: its 'parent_uuid' GPU-aaaa-1111 is listed as a GPU"):
        static_inventory(spec)
    assert [d.uuid for d in static_inventory(spec[1:])] == ["MIG-bbbb-1"]
