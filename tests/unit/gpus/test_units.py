"""Units: a whole GPU, a MIG instance or a time-sliced share, and the readings of a shared GPU."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, parse_share_uuid, share_uuid

T4 = GPUDevice("0", "GPU-aaaa", "Simulated T4", 15360, simulated=True)
MIG = GPUDevice("1:0", "MIG-bbbb", "NVIDIA A100-SXM4-40GB MIG 1g.10gb", 9728, parent_uuid="GPU-cccc")


def quarter(i: int) -> GPUDevice:
    return GPUDevice(
        index=T4.index,
        uuid=share_uuid(T4.uuid, i, 4),
        name=T4.name,
        memory_mib=T4.memory_mib // 4,
        simulated=T4.simulated,
        parent_uuid=T4.uuid,
        share_index=i,
        share_count=4,
    )


def test_a_whole_gpu_is_neither_share_nor_mig():
    assert (T4.is_share, T4.is_mig, T4.mig_profile, T4.share_text) == (False, False, None, "")
    assert T4.visible_uuid == "GPU-aaaa"


def test_a_mig_instance_names_its_profile_and_itself():
    assert (MIG.is_share, MIG.is_mig) == (False, True)
    assert MIG.mig_profile == "1g.10gb"
    assert MIG.visible_uuid == "MIG-bbbb"
    assert MIG.share_text == ""


@pytest.mark.parametrize(
    "name, profile",
    [
        ("Simulated A100 MIG 3g.20gb", "3g.20gb"),
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me", "1g.10gb+me"),
        ("NVIDIA H100 80GB HBM3 MIG 7g.80gb", "7g.80gb"),
        ("NVIDIA A100 MIG", None),  # no profile in the name
        ("NVIDIA A100 MIG 9g.10gb", None),
    ],
)
def test_mig_profile_from_the_name(name, profile):
    assert GPUDevice("0", "MIG-x", name, 1, parent_uuid="GPU-x").mig_profile == profile


def test_a_share_shows_its_parent_to_the_container():
    s = quarter(2)
    assert s.uuid == "GPU-aaaa/share-2-of-4"
    assert (s.is_share, s.is_mig, s.mig_profile) == (True, False, None)
    assert s.visible_uuid == "GPU-aaaa"
    assert s.share_text == "1/4"
    assert s.memory_mib == 3840


def test_share_uuid_round_trip():
    assert parse_share_uuid(share_uuid("GPU-1234", 0, 4)) == ("GPU-1234", 0, 4)
    assert parse_share_uuid(share_uuid("MIG-x/y", 15, 16)) == ("MIG-x/y", 15, 16)


@pytest.mark.parametrize(
    "text",
    [
        "GPU-1234",
        "",
        "GPU-1/share-4-of-4",
        "GPU-1/share-0-of-0",
        "/share-0-of-2",
        "GPU-1/share-a-of-2",
        # one spelling per share, and only counts a profile may have (saved state is not trusted)
        "GPU-1/share-01-of-4",
        "GPU-1/share-1-of-04",
        "GPU-1/share-0-of-1",
        "GPU-1/share-0-of-17",
        "GPU-1/share-0-of-99",
    ],
)
def test_parse_share_uuid_refuses_other_texts(text):
    assert parse_share_uuid(text) is None


def test_to_dict_and_from_dict_keep_the_share_fields():
    for d in (T4, MIG, quarter(3)):
        data = d.to_dict()
        assert {"share_index", "share_count", "parent_uuid"} <= set(data)
        assert GPUDevice.from_dict(data) == d
    assert quarter(3).to_dict()["share_index"] == 3
    assert quarter(3).to_dict()["share_count"] == 4
    # an old record without the new fields still reads
    assert GPUDevice.from_dict({"index": 0, "uuid": "GPU-1", "name": "T4", "memory_mib": "100"}) == GPUDevice(
        "0", "GPU-1", "T4", 100
    )


def test_old_code_builds_readings_and_devices_as_before():
    r = GPUReading("0", "GPU-1", "T4", 10, 100, 16384, 40, 30.0)
    assert r.scope == "gpu"
    assert (r.gpu_utilization_percent, r.gpu_memory_used_mib, r.gpu_memory_total_mib) == (None, None, None)
    assert (r.shared_by, r.processes) == (None, None)
    data = r.to_dict()
    assert data["scope"] == "gpu" and data["shared_by"] is None and data["utilization_percent"] == 10


def test_a_shared_reading_carries_own_and_whole_gpu_figures():
    r = GPUReading(
        "0",
        share_uuid("GPU-1", 0, 4),
        "T4",
        45,
        1024,
        3840,
        None,
        None,
        scope="own",
        gpu_utilization_percent=90,
        gpu_memory_used_mib=2048,
        gpu_memory_total_mib=15360,
        shared_by=2,
        processes=1,
    )
    data = r.to_dict()
    assert (data["scope"], data["gpu_utilization_percent"], data["shared_by"], data["processes"]) == ("own", 90, 2, 1)
    assert data["gpu_memory_total_mib"] == 15360


# -- simulated MIG instances ---------------------------------------------------------


def test_a_simulated_mig_gpu_is_listed_as_its_instances():
    from jupyterhub_gpu.gpus.simulated import simulated_inventory

    plain = simulated_inventory([{"model": "T4", "count": 1}, {"model": "A100", "count": 1, "memory_gb": 40}])
    devices = simulated_inventory(
        [
            {"model": "T4", "count": 1},
            {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb", "1g.10gb"]},
            {"model": "L4", "count": 1, "memory_gb": 24},
        ]
    )
    t4, big, small1, small2, l4 = devices
    assert t4 == plain[0]  # the GPUs around a MIG-enabled one keep their uuids
    assert [d.name for d in devices[1:4]] == [
        "Simulated A100 MIG 3g.20gb",
        "Simulated A100 MIG 1g.10gb",
        "Simulated A100 MIG 1g.10gb",
    ]
    assert [d.mig_profile for d in devices[1:4]] == ["3g.20gb", "1g.10gb", "1g.10gb"]
    assert {d.parent_uuid for d in devices[1:4]} == {plain[1].uuid}
    assert all(d.uuid.startswith("MIG-") and d.is_mig and d.simulated for d in devices[1:4])
    assert len({d.uuid for d in devices}) == 5
    assert [d.memory_mib for d in devices[1:4]] == [20480, 10240, 10240]
    assert [d.index for d in devices] == ["0", "1:0", "1:1", "1:2", "2"]
    assert small1.visible_uuid == small1.uuid != small2.uuid
    assert l4.parent_uuid is None and not l4.is_mig
    again = simulated_inventory(
        [
            {"model": "T4", "count": 1},
            {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb", "1g.10gb"]},
            {"model": "L4", "count": 1, "memory_gb": 24},
        ]
    )
    assert again == devices  # stable across restarts
    assert big.memory_gb == 20


@pytest.mark.parametrize(
    "mig, message",
    [
        ([], "simulated_gpus #1: 'mig' must be a non-empty list of MIG profiles such as ['1g.10gb'], got []"),
        ("1g.10gb", "simulated_gpus #1: 'mig' must be a non-empty list of MIG profiles"),
        (["1g.10gb", "2g"], "simulated_gpus #1: 'mig' has '2g', which is not a MIG profile such as '1g.10gb'"),
        (["8g.80gb"], "simulated_gpus #1: 'mig' has '8g.80gb', which is not a MIG profile"),
        ([1], "simulated_gpus #1: 'mig' has 1, which is not a MIG profile"),
        (
            ["4g.20gb", "4g.20gb"],
            "simulated_gpus #1: 'mig' uses 8 compute slices (4g.20gb, 4g.20gb) but one A100 has 7",
        ),
        (["7g.80gb"], "simulated_gpus #1: 'mig' uses 80 GB (7g.80gb) but the GPU has 40 GB ('memory_gb')"),
    ],
)
def test_bad_simulated_mig_is_refused(mig, message):
    from jupyterhub_gpu.gpus.device import InventoryError
    from jupyterhub_gpu.gpus.simulated import simulated_inventory

    with pytest.raises(InventoryError) as info:
        simulated_inventory([{"model": "A100", "memory_gb": 40, "mig": mig}])
    assert str(info.value).startswith(message)


def test_a_static_mig_instance_may_name_its_parent():
    from jupyterhub_gpu.gpus.device import InventoryError
    from jupyterhub_gpu.gpus.static import static_inventory

    (mig,) = static_inventory(
        [{"uuid": "MIG-1234", "name": "NVIDIA A100-SXM4-40GB MIG 1g.10gb", "memory_gb": 10, "parent_uuid": "GPU-99"}]
    )
    assert (mig.parent_uuid, mig.is_mig, mig.mig_profile) == ("GPU-99", True, "1g.10gb")
    with pytest.raises(InventoryError, match=r"static_gpus #1: 'parent_uuid' is only for MIG instances"):
        static_inventory([{"uuid": "GPU-1", "name": "T4", "parent_uuid": "GPU-99"}])
    with pytest.raises(InventoryError, match=r"static_gpus #1: 'parent_uuid' must look like 'GPU-…', got 'x'"):
        static_inventory([{"uuid": "MIG-1", "name": "A100 MIG 1g.10gb", "parent_uuid": "x"}])
