"""The "GPU memory high" notice names the next bigger profile the user may use, with its price."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.samples import Push, record_samples
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings, catalogue
from jupyterhub_gpu.rules.moves import Chosen
from jupyterhub_gpu.rules.samples import Sample
from jupyterhub_gpu.service import tick
from jupyterhub_gpu.service.domain.culling import bigger_profile, memory_message
from jupyterhub_gpu.session import SessionStart

CNY = Currency.from_config("CNY")

PRICING = [
    {"slug": "t4", "display_name": "T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
    {"slug": "t4x2", "display_name": "2 × T4", "gpu_model": "T4", "gpu_count": 2, "rate_per_minute": "0.10"},
    {"slug": "a100", "display_name": "A100 40GB", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25",
     "gpu_memory_mib": 40960},
    {"slug": "a100-80", "display_name": "A100 80GB", "gpu_model": "A100-80GB", "gpu_count": 1,
     "rate_per_minute": "0.40", "allowed_groups": ["thesis"]},
    {"slug": "mystery", "display_name": "Mystery", "gpu_model": "X9", "gpu_count": 8, "rate_per_minute": "0.01"},
    {"slug": "cpu", "display_name": "CPU", "gpu_model": "", "gpu_count": 0, "rate_per_minute": "0.01"},
]  # fmt: skip
OPTIONS = catalogue(PRICING, AdviceSettings())


def session(profile: str, groups=("cs231n",), user="stu1") -> SessionRecord:
    started = datetime(2026, 12, 1, 10, 0)
    return SessionRecord(
        id=f"s-{profile}", user=user, server_name="", profile=profile, groups=json.dumps(list(groups)),
        gpu_count=1, rate_micros=50_000, currency="CNY", started=started,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("current", "groups", "expected"),
    [
        ("t4", ["cs231n"], "t4x2"),  # more GPUs of the same memory is the cheapest bigger one
        ("t4x2", ["cs231n"], None),  # an A100 has more memory per GPU but fewer GPUs: not bigger
        ("a100", ["cs231n"], None),  # the 80 GB A100 is the thesis group's only
        ("a100", ["thesis"], "a100-80"),
        ("a100-80", ["thesis"], None),  # the biggest there is
        ("cpu", ["cs231n"], None),  # no GPU: nothing to grow
        ("mystery", ["cs231n"], None),  # its memory is unknown: never judged
        ("gone", ["cs231n"], None),  # a profile no longer published
    ],
)
def test_the_next_bigger_profile_is_the_cheapest_one_the_user_may_use(current, groups, expected):
    found = bigger_profile(OPTIONS, Chosen(current, groups=tuple(groups)))
    assert (found.slug if found else None) == expected


def test_an_unknown_memory_is_never_offered_even_when_cheapest():
    # "mystery" (8 GPUs at 0.01/min) would be cheapest of all if its memory were known
    assert bigger_profile(OPTIONS, Chosen("t4", groups=("cs231n",))).slug == "t4x2"
    known = catalogue(PRICING, AdviceSettings(profile_memory_gb={"mystery": 16}))
    assert bigger_profile(known, Chosen("t4", groups=("cs231n",))).slug == "mystery"


def test_the_notice_names_the_profile_and_its_price_per_minute_in_both_languages():
    message, once = memory_message(session("a100", ["thesis"]), 0.9, 10, OPTIONS, CNY)
    assert message.kind == "bigger:a100-80"  # the Lab's button restarts on this slug
    assert message.text == (
        "GPU memory has been above 90% for 10 minutes: a bigger instance may help."
        " A100 80GB (1 × 80 GB GPU memory) costs CN¥0.40/min."
    )
    assert once.key == "session:s-a100"
    chinese = message.words("zh-CN")
    assert chinese.kind == "bigger:a100-80" and chinese.lang == "zh-CN"
    assert (
        chinese.text
        == "GPU 显存已连续 10 分钟高于 90%：更大的实例可能有帮助。A100 80GB（1 × 80 GB 显存）每分钟 ¥0.40。"
    )


def test_without_a_bigger_profile_the_notice_says_so_and_offers_no_button():
    message, _ = memory_message(session("a100", ["cs231n"]), 0.95, 15, OPTIONS, CNY)
    assert message.kind == "advice"
    assert message.text.startswith("GPU memory has been above 95% for 15 minutes, and no profile with more GPU")
    assert "is open to you" in message.text
    assert message.words("zh-CN").text.startswith("GPU 显存已连续 15 分钟高于 95%，而您没有可用的")


def test_a_display_name_is_a_value_never_a_message_id():
    # an admin's display name that happens to be a catalogue id is shown as written, in both languages
    pricing = [dict(p) for p in PRICING]
    pricing[1]["display_name"] = "plateau"
    message, _ = memory_message(session("t4"), 0.9, 10, catalogue(pricing, AdviceSettings()), CNY)
    assert " plateau (2 × 16 GB GPU memory) costs CN¥0.10/min." in message.text
    assert "plateau（2 × 16 GB 显存）每分钟 ¥0.10" in message.words("zh-CN").text


def test_a_slug_too_long_for_the_notice_kind_gets_the_text_without_the_button():
    pricing = [dict(p) for p in PRICING]
    pricing[1]["slug"] = "t4-times-two-for-the-long-courses"
    message, _ = memory_message(session("t4"), 0.9, 10, catalogue(pricing, AdviceSettings()), CNY)
    assert message.kind == "advice" and "2 × T4" in message.text


def test_without_the_catalogue_the_notice_is_the_plain_one():
    message, _ = memory_message(session("t4"), 0.9, 10)
    assert message.kind == "advice" and "GPU memory has been above 90% for 10 minutes" in message.text


def test_the_culling_tick_sends_the_bigger_profile_notice_from_the_published_pricing(ledger):
    """A real sqlite ledger: 12 minutes of GPU memory above 90% on a T4 give one Lab notice naming 2 × T4."""
    now = datetime(2026, 12, 1, 12, 0, 30, tzinfo=timezone.utc)
    ledger.set_pricing(PRICING, "CNY", now - timedelta(hours=1))
    start = SessionStart(
        "s1", "stu1", "", ("cs231n",), "t4", ("GPU-sim-t4-0",), 50_000, "CNY", now - timedelta(minutes=13)
    )
    ledger.record_start(start)
    pushes = []
    for m in range(12, 0, -1):
        at = now - timedelta(minutes=m) + timedelta(seconds=20)
        sample = Sample("s1", at, 15, 40.0, 15_500, 16_384, 1, 1, None, None, (("GPU-sim-t4-0", 40.0, 15_500),))
        pushes.append(Push("stu1", sample))
    record_samples(ledger, pushes)

    class Hub:
        async def stop_server(self, user, name):
            raise AssertionError("a memory notice never stops a server")

    for _ in range(2):  # once per session
        asyncio.run(tick.enforce_culling(tick.TickContext(ledger=ledger, hub=Hub(), currency=CNY), now))
    (notice,) = ledger.notices("stu1")
    assert notice.kind == "bigger:t4x2" and notice.session_id == "s1"
    assert notice.message.endswith("2 × T4 (2 × 16 GB GPU memory) costs CN¥0.10/min.")
