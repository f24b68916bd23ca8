"""Advice may suggest a share of a GPU: "A quarter of a T4 would very likely have served: ¥1.50 instead of ¥6.00"."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings, SessionUsage, advise, catalogue
from jupyterhub_gpu.service.feeds.advice import advice_json, store
from jupyterhub_gpu.session import SessionFacts

CNY = Currency.from_config("CNY")
GB = 1024
PRICING = [  # the demo's T4 at 3.00 an hour and its quarter at 0.75
    {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05",
     "gpu_memory_mib": 16_384},
    {"slug": "t4-quarter", "display_name": "¼ T4 (simulated)", "gpu_model": "T4", "gpu_count": 1,
     "rate_per_minute": "0.0125", "gpu_share": 4, "gpu_memory_mib": 4096},
    {"slug": "t4-half", "display_name": "½ T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.025",
     "gpu_share": 2, "gpu_memory_mib": 8192, "allowed_groups": ["thesis"]},
    {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25",
     "gpu_memory_mib": 40_960},
]  # fmt: skip
OPTIONS = catalogue(PRICING, AdviceSettings())


def t4_session(minutes: int = 120, final: bool = True, groups=("cs101",), profile="t4", rate=50_000) -> SessionFacts:
    return SessionFacts(
        id="s1", user="ann", profile=profile, gpu_count=1, rate_micros=rate, currency="CNY", minutes=minutes,
        groups=groups, gpu_model="T4", final=final,
    )  # fmt: skip


def usage(peak_gb: float, p50: float = 5.0, p95: float = 15.0, minutes: int = 120) -> SessionUsage:
    peak = int(peak_gb * GB)
    return SessionUsage(minutes, peak, peak, 16 * GB, p50, p95, 0.1)


def test_a_light_session_on_a_whole_t4_is_told_a_quarter_would_have_served():
    advice = advise(t4_session(), usage(2.1), OPTIONS, currency=CNY)
    assert advice.suggested.slug == "t4-quarter" and advice.confidence == "high"
    assert (advice.cost_micros, advice.counterfactual_micros) == (6_000_000, 1_500_000)  # 120 min: ¥6.00 and ¥1.50
    assert advice.message == (
        "Peak 2.1 GB of 16 GB GPU memory, busy 10% of the time."
        " A quarter of a T4 would very likely have served: CN¥1.50 instead of CN¥6.00"
        " (the ¼ T4 (simulated) profile, CN¥0.0125/min instead of CN¥0.05/min)."
    )


def test_a_share_must_hold_the_peak_with_headroom_and_its_part_of_the_compute():
    # 3.5 GB + 20% is more than a quarter's 4 GB; nothing else is cheaper
    assert advise(t4_session(), usage(3.5), OPTIONS, currency=CNY).reason == "nothing_cheaper"
    # a quarter gets a quarter of the GPU when all four are busy: 30% at the 95th percentile does not fit it
    busy = advise(t4_session(), usage(2.1, p50=10.0, p95=30.0), OPTIONS, currency=CNY)
    assert busy.suggested.slug == "t4-quarter" and busy.confidence == "medium"
    assert " A quarter of a T4 would likely have served: CN¥1.50 instead of CN¥6.00" in busy.message
    assert advise(t4_session(), usage(2.1, p50=30.0, p95=60.0), OPTIONS, currency=CNY).reason == "nothing_cheaper"


def test_a_share_the_user_may_not_use_is_never_suggested_and_half_a_gpu_is_worded_so():
    # the thesis group may use half a T4 too; the quarter stays cheaper where it fits
    assert advise(t4_session(groups=("thesis",)), usage(2.1), OPTIONS, currency=CNY).suggested.slug == "t4-quarter"
    half = advise(t4_session(groups=("thesis",)), usage(5.0, p95=30.0), OPTIONS, currency=CNY)
    assert half.suggested.slug == "t4-half"
    assert " Half a T4 would very likely have served: CN¥3.00 instead of CN¥6.00 (the ½ T4 profile," in half.message
    assert advise(t4_session(), usage(5.0, p95=30.0), OPTIONS, currency=CNY).reason == "nothing_cheaper"


def test_a_share_is_judged_on_its_own_part_of_the_gpu_when_it_is_the_current_profile():
    # on half a T4, a quarter has half the compute: p95 15% (of the half's 50) with 20% headroom fits 25%
    advice = advise(t4_session(profile="t4-half", rate=25_000, groups=("thesis",)), usage(2.1), OPTIONS, currency=CNY)
    assert advice.suggested.slug == "t4-quarter" and advice.confidence == "high"


def test_the_stored_advice_says_so_in_both_languages_while_running_and_at_the_end(ledger):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    live = advise(t4_session(final=False), usage(2.1), OPTIONS, currency=CNY)
    store(ledger, t4_session(final=False), live, now)
    row = advice_of(ledger, ["s1"])["s1"]
    assert row.suggested_gpu_share == 4 and row.suggested_gpu_model == "T4"
    shown = advice_json(row, CNY)
    assert shown["suggested_gpu_share"] == 4
    assert " A quarter of a T4 would very likely have served so far: CN¥1.50 instead of CN¥6.00" in shown["message"]
    store(ledger, t4_session(), advise(t4_session(), usage(2.1), OPTIONS, currency=CNY), now)
    chinese = advice_json(advice_of(ledger, ["s1"])["s1"], CNY, "zh-CN")["message"]
    assert "四分之一块 T4很可能就够用了：费用为 ¥1.50，而不是 ¥6.00（¼ T4 (simulated) 配置，每分钟 ¥0.0125" in chinese
    # an advice of a whole profile keeps its words
    a100 = SessionFacts(
        id="s2", user="ann", profile="a100", gpu_count=1, rate_micros=250_000, currency="CNY", minutes=120,
        groups=("cs101",), gpu_model="A100", final=True,
    )  # fmt: skip
    whole = advise(a100, usage(12.0, p95=60.0), OPTIONS, currency=CNY)
    assert whole.suggested.slug == "t4" and "would likely have served. This session would have cost" in whole.message
    store(ledger, a100, whole, now)
    assert advice_json(advice_of(ledger, ["s2"])["s2"], CNY)["suggested_gpu_share"] is None


def test_a_share_whose_server_could_not_measure_its_memory_is_not_advised_on_a_peak_of_0():
    # a share in a container: NVML names processes by the host's ids, so the server says its memory is unknown;
    # a peak of 0 would advise an even smaller share that the session may not fit in
    unknown = replace(usage(0.0), memory_unknown=True)
    session = t4_session(profile="t4-half", rate=25_000, groups=("thesis",))
    assert advise(session, unknown, OPTIONS, currency=CNY).reason == "unknown_memory"
    assert advise(session, usage(0.0), OPTIONS, currency=CNY).suggested.slug == "t4-quarter"  # measured: advised
