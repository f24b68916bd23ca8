"""Right-sizing advice on crafted aggregates: the pure function, the summary of minutes, storage and the report."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.gpus.names import memory_from_name
from jupyterhub_gpu.ledger.models import UsageMinute
from jupyterhub_gpu.ledger.queries.advice import advice_of
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.rules.advice import (
    AdviceError,
    AdviceSettings,
    GPUUse,
    ProfileOption,
    SessionUsage,
    advise,
    catalogue,
    compute_ratio,
    summarize,
)
from jupyterhub_gpu.service.feeds.advice import advice_json, summary
from jupyterhub_gpu.service.tick import TickContext, update_advice
from jupyterhub_gpu.session import SessionFacts, SessionStart

CNY = Currency.from_config("CNY")
GB = 1024


def rate(per_minute: str) -> int:
    return to_micros(Decimal(per_minute))


T4 = ProfileOption("t4", "1× T4", "T4", 1, rate("0.05"), 16 * GB)
T4X2 = ProfileOption("t4x2", "2× T4", "T4", 2, rate("0.10"), 16 * GB)
A100 = ProfileOption("a100", "1× A100", "A100", 1, rate("0.25"), 40 * GB)
MIG1 = ProfileOption("a100-1g", "A100 slice 1g.5gb", "A100 MIG 1g.5gb", 1, rate("0.04"), 5 * GB)
MIG3 = ProfileOption("a100-3g", "A100 slice 3g.20gb", "A100 MIG 3g.20gb", 1, rate("0.12"), 20 * GB)
CPU = ProfileOption("cpu", "CPU only", "", 0, rate("0.01"), None)
CATALOGUE = [T4, A100, T4X2, CPU]


def session(profile: ProfileOption, minutes: int, final: bool = True, groups=()) -> SessionFacts:
    return SessionFacts(
        id="s1",
        user="stu",
        profile=profile.slug,
        gpu_count=profile.gpu_count,
        rate_micros=profile.rate_micros,
        currency="CNY",
        minutes=minutes,
        groups=tuple(groups),
        gpu_model=profile.gpu_model,
        final=final,
    )


def light(peak_gb: float, total_gb: int, minutes: int, busy_share=0.12, p50=0.0, p95=30.0, gpus=()) -> SessionUsage:
    return SessionUsage(
        sampled_minutes=minutes,
        peak_memory_mib=int(peak_gb * GB),
        p95_memory_mib=int(peak_gb * GB),
        memory_total_mib=total_gb * GB,
        util_p50=p50,
        util_p95=p95,
        busy_share=busy_share,
        gpus=tuple(gpus),
    )


# -- the done-when cases ------------------------------------------------------------------------


def test_peak_3_gb_on_a_40_gb_a100_is_advised_the_t4_profile():
    advice = advise(session(A100, 120), light(3.1, 40, 120), CATALOGUE, currency=CNY)
    assert advice.advised and advice.suggested.slug == "t4"
    assert advice.confidence == "high"
    assert advice.cost_micros == to_micros(Decimal("30.00"))
    assert advice.counterfactual_micros == to_micros(Decimal("6.00"))
    assert advice.saving_micros == to_micros(Decimal("24.00"))
    assert advice.message == (
        "Peak 3.1 GB of 40 GB GPU memory, busy 12% of the time. The 1× T4 profile (CN¥0.05/min instead of"
        " CN¥0.25/min) would very likely have served. This session would have cost CN¥6.00 instead of CN¥30.00."
    )


def test_peak_14_gb_on_a_16_gb_t4_gets_no_advice():
    # even with a cheaper 16 GB profile on offer, 14 GB + 20% does not fit 16 GB
    cheaper_t4 = ProfileOption("t4-cheap", "1× T4 spot", "T4", 1, rate("0.03"), 16 * GB)
    advice = advise(session(T4, 120), light(14, 16, 120), [*CATALOGUE, cheaper_t4, MIG1], currency=CNY)
    assert not advice.advised and advice.reason == "nothing_cheaper" and advice.message == ""
    # 13 GB + 20% = 15.6 GB fits
    assert advise(session(T4, 120), light(13, 16, 120), [*CATALOGUE, cheaper_t4], currency=CNY).advised


def test_two_gpus_with_one_idle_are_advised_one_gpu():
    gpus = (GPUUse("GPU-a", 5 * GB, 40), GPUUse("GPU-b", 0, 0))
    usage = light(5, 32, 100, busy_share=0.4, p50=20, p95=40, gpus=gpus)
    advice = advise(session(T4X2, 100), usage, CATALOGUE, currency=CNY)
    assert advice.advised and advice.suggested.slug == "t4" and advice.gpus_used == 1
    # the same model, one GPU: its compute is known to suffice (the working GPU stays as busy)
    assert advice.confidence == "high"
    assert "1 GPU would have done" in advice.message
    assert advice.message.startswith("1 of 2 GPUs did work (peak 5 GB), busy 40% of the time.")
    assert advice.counterfactual_micros == 100 * rate("0.05")


def test_two_busy_gpus_are_not_told_one_would_do():
    gpus = (GPUUse("GPU-a", 5 * GB, 40), GPUUse("GPU-b", 5 * GB, 38))
    advice = advise(session(T4X2, 100), light(10, 32, 100, 0.4, 40, 80, gpus), CATALOGUE, currency=CNY)
    assert not advice.advised and advice.gpus_used == 2


def test_a_five_minute_session_gets_no_advice():
    advice = advise(session(A100, 5), light(1, 40, 5), CATALOGUE, currency=CNY)
    assert not advice.advised and advice.reason == "too_short"
    # the threshold is a setting
    assert advise(session(A100, 5), light(1, 40, 5), CATALOGUE, AdviceSettings(min_minutes=5), CNY).advised


# -- the rules around them ----------------------------------------------------------------------


def test_headroom_is_configurable():
    usage = light(13.5, 40, 60)  # 13.5 × 1.2 = 16.2 GB > 16 GB; × 1.1 = 14.85 fits
    assert not advise(session(A100, 60), usage, CATALOGUE, currency=CNY).advised
    assert advise(session(A100, 60), usage, CATALOGUE, AdviceSettings(headroom_percent=10), CNY).advised


def test_a_busy_gpu_is_not_advised_a_different_model():
    busy = light(3, 40, 60, busy_share=0.9, p50=70, p95=95)
    advice = advise(session(A100, 60), busy, CATALOGUE, currency=CNY)
    assert not advice.advised and advice.reason == "nothing_cheaper"
    medium = advise(session(A100, 60), light(3, 40, 60, busy_share=0.4, p95=70), CATALOGUE, currency=CNY)
    assert medium.confidence == "medium" and "would likely have served" in medium.message


def test_mig_slices_are_considered_with_their_share_of_compute():
    options = [*CATALOGUE, MIG1, MIG3]
    # 3 GB, GPU at most 10% busy: a 1g slice (1/7 of an A100 = 14%) with 20% headroom (12%) serves
    advice = advise(session(A100, 60), light(3, 40, 60, busy_share=0.3, p50=5, p95=10), options, currency=CNY)
    assert advice.suggested.slug == "a100-1g" and advice.confidence == "high"
    # 3 GB at 40% busy: the 1g slice is too small in compute, the 3g slice (43%) holds the median only
    advice = advise(session(A100, 60), light(3, 40, 60, busy_share=0.9, p50=30, p95=40), options, currency=CNY)
    assert advice.suggested.slug == "a100-3g" and advice.confidence == "medium"
    # 6 GB does not fit a 5 GB slice
    advice = advise(session(A100, 60), light(6, 40, 60, busy_share=0.1, p50=1, p95=5), options, currency=CNY)
    assert advice.suggested.slug == "t4"
    assert compute_ratio("A100", "A100 MIG 1g.5gb") == pytest.approx(1 / 7)
    assert compute_ratio("A30", "A30 MIG 2g.12gb") == pytest.approx(2 / 4)
    assert compute_ratio("A100", "T4") is None


def test_only_profiles_the_user_may_use_are_advised():
    thesis_t4 = ProfileOption("t4", "1× T4", "T4", 1, rate("0.05"), 16 * GB, ("thesis",))
    options = [thesis_t4, A100]
    assert not advise(session(A100, 60, groups=["cs231n"]), light(3, 40, 60), options, currency=CNY).advised
    assert advise(session(A100, 60, groups=["thesis"]), light(3, 40, 60), options, currency=CNY).advised


def test_too_few_samples_and_unknown_memory_give_no_advice():
    sparse = light(3, 40, 20)
    assert advise(session(A100, 60), sparse, CATALOGUE, currency=CNY).reason == "few_samples"
    unknown = ProfileOption("x", "Mystery GPU", "Mystery", 1, rate("0.01"), None)
    assert advise(session(A100, 60), light(3, 40, 60), [unknown, A100], currency=CNY).reason == "unknown_memory"
    assert advise(session(CPU, 60), light(0, 0, 60), CATALOGUE, currency=CNY).reason == "no_gpu"


def test_partial_coverage_lowers_the_confidence():
    advice = advise(session(A100, 100), light(3, 40, 60), CATALOGUE, currency=CNY)
    assert advice.confidence == "medium"


def test_live_advice_speaks_of_the_cost_so_far():
    advice = advise(session(A100, 40, final=False), light(3, 40, 40), CATALOGUE, currency=CNY)
    assert "So far this session would have cost CN¥2.00 instead of CN¥10.00" in advice.message


def test_bad_settings_are_refused_with_the_setting_named():
    for kwargs, name in (
        ({"headroom_percent": -1}, "^headroom_percent must be"),
        ({"min_minutes": 0}, "^min_minutes must be"),
        ({"live_after_minutes": "30"}, "^live_after_minutes must be"),
        ({"profile_memory_gb": {"t4": 0}}, r"^profile_memory_gb\['t4'\] must be"),
    ):
        with pytest.raises(AdviceError, match=name):
            AdviceSettings(**kwargs)


def test_memory_comes_from_settings_the_inventory_or_the_name():
    assert memory_from_name("A100 MIG 1g.5gb") == 5 * GB
    assert memory_from_name("NVIDIA A100-SXM4-80GB") == 80 * GB
    assert memory_from_name("T4") == 16 * GB
    assert memory_from_name("", "1× L4 24 GB") == 24 * GB
    assert memory_from_name("Mystery") is None
    pricing = [
        {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
        # the hub's inventory (published with the profile) says 80 GB
        {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"}
        | {"gpu_memory_mib": 80 * GB},
        {"slug": "v100", "display_name": "1× V100", "gpu_model": "V100", "gpu_count": 1, "rate_per_minute": "0.1"},
    ]
    options = catalogue(pricing, AdviceSettings(profile_memory_gb={"v100": 32}))
    assert [o.memory_mib for o in options] == [16 * GB, 80 * GB, 32 * GB]
    assert options[0].rate_micros == 50_000


def test_summarize_reads_the_per_minute_rows():
    def minute(util: float, mem: int, gpus: dict) -> UsageMinute:
        return UsageMinute(
            samples=2,
            utilization_tenths_sum=round(util * 10 * 2),
            memory_used_max_mib=mem,
            memory_total_mib=32 * GB,
            busy_kernels_max=0,
            gpus=json.dumps(gpus),
        )

    rows = [minute(0, 1024, {"a": {"utilization_max": 0, "memory_used_max_mib": 1024}})] * 8
    rows += [minute(45, 3 * GB, {"a": {"utilization_max": 90, "memory_used_max_mib": 3 * GB}, "b": {}})] * 2
    rows.append(UsageMinute(samples=0, utilization_tenths_sum=0, memory_used_max_mib=0, memory_total_mib=0, gpus="{}"))
    usage = summarize(rows)
    assert usage.sampled_minutes == 10
    assert usage.peak_memory_mib == 3 * GB and usage.p95_memory_mib == 3 * GB
    assert usage.util_p50 == 0 and usage.util_p95 == 45
    assert usage.busy_share == pytest.approx(0.2)
    assert usage.gpus == (GPUUse("a", 3 * GB, 2), GPUUse("b", 0, 0))


# -- stored in the ledger, summed in the report ---------------------------------------------------


def test_closed_sessions_get_final_advice_and_the_report_sums_their_savings(ledger):
    ledger.set_pricing(
        [
            {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
            {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
        ],
        "CNY",
        datetime.now(timezone.utc),
    )
    t0 = datetime(2026, 11, 2, 8, 0, tzinfo=timezone.utc)
    plan = [
        ("a", "a100", 60, 2048, ["cs231n"]),
        ("b", "a100", 30, 3072, ["cs231n", "thesis"]),
        ("c", "a100", 30, 30 * GB, ["thesis"]),
        ("d", "t4", 60, 1024, ["cs231n"]),
        ("e", "a100", 5, 10, []),
    ]
    for sid, profile, minutes, mem, groups in plan:
        r = rate("0.25") if profile == "a100" else rate("0.05")
        ledger.record_start(SessionStart(sid, f"u{sid}", "", tuple(groups), profile, ("GPU-x",), r, "CNY", t0))
        with ledger.Session() as db:
            for i in range(minutes):
                db.add(
                    UsageMinute(
                        session_id=sid,
                        minute=(t0 + timedelta(minutes=i)).replace(tzinfo=None),
                        user=f"u{sid}",
                        pushes=1,
                        samples=2,
                        utilization_tenths_sum=0 if i % 5 else 2 * 600,
                        memory_used_max_mib=mem,
                        memory_total_mib=(40 if profile == "a100" else 16) * GB,
                        kernels_max=1,
                        busy_kernels_max=0,
                        gpus="{}",
                    )
                )
            db.commit()
        ledger.record_stop(sid, t0 + timedelta(minutes=minutes), "user")
    now = t0 + timedelta(hours=3)
    result = update_advice(TickContext(ledger=ledger, currency=CNY), now)
    assert result == {"final": 5, "live": 0, "advised": 2}
    rows = advice_of(ledger, ["a", "b", "c", "d", "e"])
    assert {k: v.reason for k, v in rows.items()} == {
        "a": "advised",
        "b": "advised",
        "c": "nothing_cheaper",
        "d": "nothing_cheaper",
        "e": "too_short",
    }
    a = advice_json(rows["a"], CNY)
    assert a["suggested_profile"] == "t4" and a["saving"] == "12" and a["busy_percent"] == 20
    # each advised user got one Lab notice with the message
    assert [n.message for n in ledger.notices("ua")] == [rows["a"].message]
    # a second pass changes nothing and sends nothing again
    assert update_advice(TickContext(ledger=ledger, currency=CNY), now + timedelta(minutes=1))["final"] == 0

    report = summary(ledger, None, None, None, CNY)
    assert report["total"]["potential_saving"] == str(Decimal("12") + Decimal("6"))
    assert sum(Decimal(s["saving"]) for s in report["sessions"]) == Decimal(report["total"]["potential_saving"])
    assert report["total"]["sessions_judged"] == 4  # the 5-minute session was not judged
    groups = {g["group"]: g for g in report["by_group"]}
    # b (cs231n and thesis) paid from cs231n, its default pool: counted there only, so the groups add up
    assert groups["cs231n"]["potential_saving"] == "18" and groups["thesis"]["potential_saving"] == "0"
    profiles = {p["profile"]: p for p in report["by_profile"]}
    assert profiles["a100"]["sessions_advised"] == 2 and profiles["a100"]["oversized"] is True
    assert profiles["a100"]["suggested"] == {"t4": 2}
    assert summary(ledger, None, None, "thesis", CNY)["total"]["potential_saving"] == "0"
    assert summary(ledger, None, None, "cs231n", CNY)["total"]["potential_saving"] == "18"


def test_the_service_refuses_bad_advice_settings_at_startup(tmp_path, monkeypatch, capsys):
    from jupyterhub_gpu.service.app import GPUService

    monkeypatch.chdir(tmp_path)
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize([db, "--GPUService.advice_headroom_percent=-5"])
    assert exit_info.value.code == 1
    assert "GPUService.advice_headroom_percent must be a whole number from 0 to 400, got -5" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize([db, "--GPUService.advice_digest_weekday=funday"])
    assert exit_info.value.code == 1
    assert "advice_digest_weekday must be empty or one of monday" in capsys.readouterr().err
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing was created
