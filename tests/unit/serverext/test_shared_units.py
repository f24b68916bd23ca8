"""The server extension on a share: the shared reader is chosen from the environment, and the stats name the share."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from jupyterhub_gpu import env as gpu_env
from jupyterhub_gpu.gpus.device import GPUDevice, GPUReading, share_uuid
from jupyterhub_gpu.gpus.shared_sim import SharedSimReader
from jupyterhub_gpu.gpus.simulated import KernelActivity, SimulatedReader
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.serverext.extension import GPUExtension, GPUStats
from jupyterhub_gpu.session import SessionStart

PARENT = "GPU-11111111-2222-3333-4444-555555555555"
UNIT = GPUDevice("0", share_uuid(PARENT, 2, 4), "Simulated T4", 4096, True, PARENT, 2, 4)


def spawn_env(monkeypatch, tmp_path, unit: GPUDevice):
    for name in gpu_env.NAMES:
        monkeypatch.delenv(name, raising=False)
    written = gpu_env.make_gpu_env(
        SessionStart(
            id="sess-q",
            user="",
            server_name="",
            groups=(),
            profile="t4-quarter",
            gpus=tuple([unit.visible_uuid]),
            visible_gpus=tuple([unit.visible_uuid]),
            rate_micros=to_micros(Decimal("0.0125")),
            currency="CNY",
            started=datetime(2026, 1, 1, tzinfo=timezone.utc),
            simulated=True,
        ),
        reader="simulated",
        devices=[unit.to_dict()],
        gpu_model="T4",
        memory_limit_mib=gpu_env.memory_limit_of([unit]),
        share=gpu_env.share_label([unit]),
    )
    for name, value in {**written, gpu_env.SIM_STATE_DIR: str(tmp_path)}.items():
        monkeypatch.setenv(name, value)


def test_a_simulated_share_is_read_by_the_shared_reader_and_named_in_the_stats(monkeypatch, tmp_path):
    spawn_env(monkeypatch, tmp_path, UNIT)
    ext = GPUExtension(None, GPUStats())
    try:
        assert isinstance(ext.sampler.reader, SharedSimReader) and ext.sampler.reader.state_dir == tmp_path
        ext.activity = KernelActivity(kernels=1, busy=1)
        ext.sampler.sample_once()
        [gpu] = ext.stats(with_history=False)["gpus"]
        assert gpu["uuid"] == UNIT.uuid and gpu["share"] == "1/4" and gpu["scope"] == "own"
        assert (gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["shared_by"]) == (1024, 4096, 1)
        assert (tmp_path / PARENT / "share-2-of-4.json").exists()
    finally:
        ext.stop()
    assert not (tmp_path / PARENT / "share-2-of-4.json").exists()  # closed with the server
    ext.stop()  # again (atexit after an explicit stop) is harmless


def test_shared_by_comes_from_the_service_where_the_reader_does_not_know_it(monkeypatch, tmp_path):
    spawn_env(monkeypatch, tmp_path, UNIT)
    ext = GPUExtension(None, GPUStats())
    try:
        nvml_like = GPUReading("0", UNIT.uuid, "Tesla T4", 30, 2000, 4096, 50, 70.0, scope="gpu", processes=1)
        assert ext._gpu_json(nvml_like)["shared_by"] is None
        ext.service_me = {"active_sessions": [{"id": "other", "shared_by": 4}, {"id": "sess-q", "shared_by": 3}]}
        assert ext._gpu_json(nvml_like)["shared_by"] == 3
        ext.service_me = {"active_sessions": [{"id": "sess-q", "shared_by": "lots"}]}
        assert ext._gpu_json(nvml_like)["shared_by"] is None  # nothing but a count is believed
    finally:
        ext.stop()


def test_a_whole_simulated_gpu_keeps_the_simulated_reader(monkeypatch, tmp_path):
    spawn_env(monkeypatch, tmp_path, GPUDevice("0", PARENT, "Simulated T4", 16384, True))
    ext = GPUExtension(None, GPUStats())
    try:
        assert type(ext.sampler.reader) is SimulatedReader
        ext.sampler.sample_once()
        [gpu] = ext.stats(with_history=False)["gpus"]
        assert gpu["share"] == "" and gpu["scope"] == "gpu" and gpu["memory_total_mib"] == 16384
    finally:
        ext.stop()
