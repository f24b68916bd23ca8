"""The container of a time-sliced share or a MIG slice: its device request names the GPU the runtime knows.

Two shares of one GPU must reach the NVIDIA runtime as that same physical GPU (the runtime knows no
shares), a MIG slice as its own ``MIG-...`` UUID; a share's uuid never reaches Docker. The environment
carries the share's cap for the kernels (serverext/memcap.py). The test-only switch that leaves the
request out of the container (no NVIDIA runtime here) records exactly that request in a label.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

from jupyterhub_gpu.env import DEVICE_INFO, DEVICES, MEMORY_LIMIT_MIB, SHARE, make_gpu_env, memory_limit_of, share_label
from jupyterhub_gpu.gpus.device import GPUDevice, share_uuid
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.session import SessionStart
from jupyterhub_gpu.spawners.docker.objects import (
    make_container_spec,
    make_device_requests,
    make_labels,
    visible_device_ids,
)

GPU = "GPU-11111111-2222-3333-4444-555555555555"
OTHER = "GPU-66666666-7777-8888-9999-000000000000"
MIG = "MIG-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"


def share(i: int, k: int = 4, parent: str = GPU) -> GPUDevice:
    return GPUDevice(
        index="0",
        uuid=share_uuid(parent, i, k),
        name="Simulated T4",
        memory_mib=16384 // k,
        simulated=True,
        parent_uuid=parent,
        share_index=i,
        share_count=k,
    )


def request(*ids: str) -> list[dict]:
    return [{"Driver": "", "Count": 0, "DeviceIDs": list(ids), "Capabilities": [["gpu"]], "Options": {}}]


def test_a_share_is_requested_as_its_physical_gpu_and_a_mig_slice_as_itself():
    assert visible_device_ids([GPU, OTHER]) == [GPU, OTHER]  # whole GPUs as before
    assert visible_device_ids([share_uuid(GPU, 2, 4)]) == [GPU]
    assert visible_device_ids([share_uuid(OTHER, 0, 2), GPU]) == [OTHER, GPU]
    assert visible_device_ids([MIG]) == [MIG]
    assert visible_device_ids([share_uuid(GPU, 0, 4), share_uuid(GPU, 1, 4)]) == [GPU]  # each GPU once
    assert visible_device_ids([]) == []
    # the same as the unit type says
    for unit in (share(0), share(3), share(1, 2, OTHER)):
        assert visible_device_ids([unit.uuid]) == [unit.visible_uuid]


def spec_of(unit: GPUDevice, *, include_device_requests: bool, session_id: str) -> tuple[dict, dict]:
    """What GPUDockerSpawner.create_object builds for a server holding ``unit`` (the pure part of it)."""
    env = make_gpu_env(
        SessionStart(
            id=session_id,
            user="",
            server_name="",
            groups=(),
            profile="t4-quarter",
            gpus=tuple([unit.visible_uuid]),
            visible_gpus=tuple([unit.visible_uuid]),
            rate_micros=to_micros(Decimal("0.0125")),
            currency="CNY",
            started=datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc),
            simulated=True,
        ),
        devices=[unit.to_dict()],
        gpu_model="T4",
        memory_limit_mib=memory_limit_of([unit]),
        share=share_label([unit]),
    )
    return make_container_spec(
        name=f"jupyter-{session_id}",
        image="jupyterhub-gpu/tensorflow:2.15",
        command=["jupyterhub-singleuser"],
        env=env,
        labels=make_labels(
            user=session_id,
            server_name="",
            profile_slug="t4-quarter",
            session_id=session_id,
            device_uuids=[unit.uuid],
        ),
        container_user="1000:100",
        port=8888,
        network_mode="host",
        binds={},
        device_uuids=visible_device_ids([unit.uuid]),
        include_device_requests=include_device_requests,
    )


def test_two_shares_of_one_gpu_request_the_same_gpu_and_carry_the_cap():
    (a_create, a_host), (b_create, b_host) = (
        spec_of(share(0), include_device_requests=True, session_id="alice"),
        spec_of(share(1), include_device_requests=True, session_id="bob"),
    )
    assert a_host["device_requests"] == b_host["device_requests"] == request(GPU)
    for create, i in ((a_create, 0), (b_create, 1)):
        env = create["environment"]
        assert env[MEMORY_LIMIT_MIB] == "4096" and env[SHARE] == "1/4"
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == GPU
        assert env[DEVICES] == GPU
        # the share itself is named only where jupyterhub-gpu reads it: the labels and the device info
        assert create["labels"]["jupyterhub-gpu.gpus"] == share_uuid(GPU, i, 4)
        assert [d["uuid"] for d in json.loads(env[DEVICE_INFO])] == [share_uuid(GPU, i, 4)]


def test_the_test_only_switch_records_the_share_s_request_as_its_gpu():
    create, host = spec_of(share(3), include_device_requests=False, session_id="carol")
    assert "device_requests" not in host
    recorded = json.loads(create["labels"]["jupyterhub-gpu.device-requests"])
    assert recorded == request(GPU) == make_device_requests([GPU])
    assert "/share-" not in create["labels"]["jupyterhub-gpu.device-requests"]


def test_a_mig_slice_is_requested_by_its_own_uuid_with_its_memory_as_the_cap():
    mig = GPUDevice(
        index="0", uuid=MIG, name="Simulated A100 MIG 1g.10gb", memory_mib=9728, simulated=True, parent_uuid=GPU
    )
    create, host = spec_of(mig, include_device_requests=True, session_id="dave")
    assert host["device_requests"] == request(MIG)
    env = create["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == MIG
    assert env[MEMORY_LIMIT_MIB] == "9728" and env[SHARE] == "mig:1g.10gb"


def test_a_whole_gpu_carries_no_cap():
    whole = GPUDevice(index="0", uuid=GPU, name="Tesla T4", memory_mib=16384)
    create, host = spec_of(whole, include_device_requests=True, session_id="erin")
    assert host["device_requests"] == request(GPU)
    assert MEMORY_LIMIT_MIB not in create["environment"] and SHARE not in create["environment"]
