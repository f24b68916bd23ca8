"""A server on a share (or MIG slice) whose own memory reaches 90% of the cap gets a Lab notice at once."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.gpus.device import share_uuid
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings, catalogue
from jupyterhub_gpu.rules.samples import parse_sample
from jupyterhub_gpu.rules.signals import MinuteSignal
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.domain.culling import cap_message, cap_reached
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.session import SessionStart

CNY = Currency.from_config("CNY")
UTC = timezone.utc
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
GPU = "GPU-sim-t4-0"
PRICING = [
    {"slug": "t4-quarter", "display_name": "¼ T4 (simulated)", "gpu_model": "T4", "gpu_count": 1,
     "rate_per_minute": "0.0125", "gpu_share": 4, "gpu_memory_mib": 4096},
    {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05",
     "gpu_memory_mib": 16_384},
    {"slug": "t4x2", "display_name": "2× T4", "gpu_model": "T4", "gpu_count": 2, "rate_per_minute": "0.10",
     "gpu_memory_mib": 16_384},
    {"slug": "a100-1g", "display_name": "A100 slice", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.08",
     "mig": "1g.10gb"},
    {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25",
     "gpu_memory_mib": 40_960, "allowed_groups": ["thesis"]},
]  # fmt: skip
OPTIONS = catalogue(PRICING, AdviceSettings())


def record(profile: str, gpus, groups=("cs101",)) -> SessionRecord:
    return SessionRecord(
        id=f"s-{profile}", user="ann", server_name="", profile=profile, groups=json.dumps(list(groups)),
        gpus=json.dumps(list(gpus)), gpu_count=1, rate_micros=12_500, currency="CNY", started=T0.replace(tzinfo=None),
    )  # fmt: skip


def minutes(*fractions) -> list[MinuteSignal]:
    return [MinuteSignal(at=T0 + timedelta(minutes=i), gpu_util=10.0, gpu_mem_frac=f) for i, f in enumerate(fractions)]


QUARTER = record("t4-quarter", [share_uuid(GPU, 1, 4)])


def test_the_catalogue_gives_a_share_its_cap_and_a_slice_its_memory():
    memory = {o.slug: o.memory_mib for o in OPTIONS}
    assert memory["t4-quarter"] == 4096  # the cap the hub published (the T4's 16 GB over 4)
    assert memory["a100-1g"] == 10 * 1024  # the slice's name says it
    # without the inventory's figure, the model's known memory over the share count
    bare = catalogue([{**PRICING[0], "gpu_memory_mib": None}], AdviceSettings())
    assert bare[0].memory_mib == 4096 and bare[0].gpu_share == 4
    # an admin's figure is the unit's own
    set_by_admin = catalogue(PRICING[:1], AdviceSettings(profile_memory_gb={"t4-quarter": 3}))
    assert set_by_admin[0].memory_mib == 3 * 1024


@pytest.mark.parametrize(
    ("session", "fractions", "reached"),
    [
        (QUARTER, (0.5, 0.91), True),
        (QUARTER, (0.95, 0.89), False),  # the latest minute counts: memory freed again
        (QUARTER, (0.92, None), True),  # an unsampled minute says nothing
        (QUARTER, (), False),
        (record("t4", [GPU]), (0.99,), False),  # a whole GPU has no cap: the ten-minute notice is its own
        (record("a100-1g", ["MIG-0b3f6e2a-1111-5222-8333-444455556666"]), (0.9,), True),
    ],
)
def test_the_cap_is_reached_at_90_percent_of_the_latest_minute(session, fractions, reached):
    assert cap_reached(session, minutes(*fractions), 0.9) is reached


def test_the_notice_names_the_cap_what_happens_past_it_and_a_bigger_profile_in_both_languages():
    message, once = cap_message(QUARTER, minutes(0.5, 3.7 / 4), OPTIONS, CNY)
    assert message.text == (
        "Your kernels use 3.7 of your share's 4.0 GB; past it TensorFlow stops with an out-of-memory error."
        " The profile '1× T4' has 16 GB."
    )
    assert message.kind == "bigger:t4" and message.level == "warning" and message.session_id == QUARTER.id
    assert once.key == f"session:{QUARTER.id}"  # the "GPU memory high" notice's: one of the two per session
    chinese = message.words("zh-CN")
    assert chinese.kind == "bigger:t4" and chinese.lang == "zh-CN"
    assert chinese.text == (
        "您的内核已使用您这份 GPU 的 4.0 GB 显存中的 3.7 GB；超过上限时 TensorFlow 会因显存不足而报错停止。"
        "配置“1× T4”有 16 GB 显存。"
    )


def test_a_slice_and_a_user_without_a_bigger_profile_are_told_so():
    slice_session = record("a100-1g", ["MIG-0b3f6e2a-1111-5222-8333-444455556666"])
    message, _ = cap_message(slice_session, minutes(0.95), OPTIONS, CNY)
    assert message.text == (
        "Your kernels use 9.5 of your MIG slice's 10.0 GB; past it TensorFlow stops with an out-of-memory error."
        " The profile '1× T4' has 16 GB."
    )
    a100s = catalogue(PRICING[3:], AdviceSettings())  # the slice and the 40 GB A100, which is the thesis group's
    message, _ = cap_message(slice_session, minutes(0.95), a100s, CNY)
    assert message.text.endswith(
        "out-of-memory error. No profile with more GPU memory is open to you: try a smaller batch size or model."
    )
    assert message.kind == "advice"
    thesis = record("a100-1g", ["MIG-0b3f6e2a-1111-5222-8333-444455556666"], groups=("thesis",))
    assert cap_message(thesis, minutes(0.95), a100s, CNY)[0].kind == "bigger:a100"
    # a profile no longer published: the cap is not known, the share of it is
    gone = record("t4-eighth", [share_uuid(GPU, 0, 8)])
    message, _ = cap_message(gone, minutes(0.93), OPTIONS, CNY)
    assert message.text.startswith("Your kernels use 93% of your share's GPU memory; past it TensorFlow stops")


def test_the_culling_tick_tells_a_share_at_once_and_only_once(ledger, hub):
    """A real ledger: the first minute at 3.7 of 4.0 GB gives one Lab notice; ten more minutes above 90% none."""
    ledger.set_pricing(PRICING, "CNY", T0)
    start = SessionStart("q", "ann", "", ("cs101",), "t4-quarter", (share_uuid(GPU, 1, 4),), 12_500, "CNY", T0)
    ledger.record_start(start)
    notifier = Notifier(ledger)

    def push(minute: int, used_mib: int):
        at = T0 + timedelta(minutes=minute, seconds=30)
        gpu = {"uuid": share_uuid(GPU, 1, 4), "utilization_avg": 40.0, "memory_used_max_mib": used_mib,
               "scope": "own", "processes": 1, "shared_by": 2}  # fmt: skip
        body = {"session_id": "q", "sampled_until": at.isoformat(), "samples": 15, "utilization_avg": 40.0,
                "memory_used_max_mib": used_mib, "memory_total_mib": 4096, "kernels": 1, "busy_kernels": 1,
                "gpus": [gpu]}  # fmt: skip
        record_samples(ledger, [Push("ann", parse_sample(body), 1)])

    def tick_at(minute: int):
        now = T0 + timedelta(minutes=minute, seconds=50)
        asyncio.run(
            tick.enforce_culling(tick.TickContext(ledger=ledger, hub=hub.client, notifier=notifier, currency=CNY), now)
        )

    push(0, 2000)
    tick_at(0)
    assert ledger.notices("ann") == []
    push(1, 3790)  # 92.5% of the cap
    tick_at(1)
    (notice,) = ledger.notices("ann")
    assert notice.kind == "bigger:t4" and notice.session_id == "q"
    assert notice.message.startswith("Your kernels use 3.7 of your share's 4.0 GB;")
    for minute in range(2, 14):  # the "GPU memory high" notice's ten minutes pass too: still one notice
        push(minute, 3900)
        tick_at(minute)
    assert [n.id for n in ledger.notices("ann")] == [notice.id]
    assert hub.stops == []


def test_on_kubernetes_the_published_profile_says_a_placeholder_is_a_share_or_a_slice():
    # the device plugin picks the device: the ledger holds what the pod asked for, not a share's uuid
    from jupyterhub_gpu.service.domain.culling import capped_unit

    share = record("t4-quarter", ["nvidia.com/gpu.shared:0"])
    slice_ = record("a100-1g", ["nvidia.com/mig-1g.10gb:0"])
    whole = record("t4", ["nvidia.com/gpu:0"])
    assert [capped_unit(r, OPTIONS) for r in (share, slice_, whole)] == ["share", "mig", None]
    assert capped_unit(share) is None  # without the catalogue a placeholder says nothing
    assert cap_reached(share, minutes(0.5, 0.95), options=OPTIONS)
    assert not cap_reached(whole, minutes(0.5, 0.95), options=OPTIONS)  # a whole GPU has its own notice
    message, _key = cap_message(share, minutes(0.95), OPTIONS, CNY)
    assert "of your share's 4.0 GB" in message.text
