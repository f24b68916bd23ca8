"""Automatic choices of a profile keep every other choice of the student: tier, paying group, unit, budget.

The bigger profile of the GPU-memory and cap notices (and ``POST restart-bigger``), the right-sizing advice
and the restart's options all go through one rule, ``service/domain/moves.py``; these cases are the ways a
choice made on memory and price alone went wrong (a full-price student moved to the preemptible tier, a
session paid by one group moved onto another group's profile, a share "grown" to another share or a MIG
slice, a whole GPU "grown" into a slice, a bigger profile offered that the budget cannot start).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.queries.overrides import save_override
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings, SessionUsage, advise, catalogue
from jupyterhub_gpu.rules.moves import Chosen, affordable_for, bigger_moves, purse_of, restart_options
from jupyterhub_gpu.rules.overrides import Override
from jupyterhub_gpu.service.domain.culling import bigger_profile, cap_message, memory_message
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.session import SessionFacts

CNY = Currency.from_config("CNY")
GB = 1024
UTC = ZoneInfo("UTC")

PRICING = [
    {"slug": "t4-quarter", "display_name": "¼ T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.0125",
     "gpu_share": 4},
    {"slug": "t4-half", "display_name": "½ T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.025",
     "gpu_share": 2},
    {"slug": "t4-spot", "display_name": "T4 (preemptible)", "gpu_model": "T4", "gpu_count": 1,
     "rate_per_minute": "0.02", "tier": "preemptible"},
    {"slug": "t4", "display_name": "T4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
    {"slug": "a100-3g", "display_name": "A100 3g.20gb", "gpu_model": "A100", "gpu_count": 1,
     "rate_per_minute": "0.04", "mig": "3g.20gb"},
    {"slug": "a100-spot", "display_name": "A100 (preemptible)", "gpu_model": "A100", "gpu_count": 1,
     "rate_per_minute": "0.10", "tier": "preemptible"},
    {"slug": "a100-cs", "display_name": "A100 (cs231n)", "gpu_model": "A100", "gpu_count": 1,
     "rate_per_minute": "0.20", "allowed_groups": ["cs231n"]},
    {"slug": "a100", "display_name": "A100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25"},
]  # fmt: skip
OPTIONS = catalogue(PRICING, AdviceSettings())


def record(profile: str, groups=("cs231n", "thesis"), pool=None, tier=None, resume=False) -> SessionRecord:
    return SessionRecord(
        id=f"s-{profile}", user="stu1", server_name="", profile=profile, groups=json.dumps(list(groups)),
        pool=pool, gpu_count=1, rate_micros=12_500, currency="CNY", started=datetime(2026, 12, 1, 10, 0),
        tier=tier, resume=resume, gpus=json.dumps(["GPU-sim-t4-0/share-0-of-4"]),
    )  # fmt: skip


def slug(option) -> str | None:
    return option.slug if option is not None else None


def test_a_full_price_share_near_its_cap_is_offered_a_full_price_whole_gpu_never_the_preemptible_tier():
    # the cheapest bigger profile by memory and price alone is the preemptible T4 (0.02/min)
    session = record("t4-quarter", pool="thesis")
    assert slug(bigger_profile(OPTIONS, session)) == "t4"
    message, _ = cap_message(session, [], OPTIONS, CNY)
    assert message.kind == "bigger:t4"
    assert "The profile 'T4' has 16 GB." in message.text


def test_a_preemptible_session_grows_on_the_preemptible_tier_only():
    assert slug(bigger_profile(OPTIONS, record("t4-spot", tier="preemptible"))) == "a100-spot"
    assert [o.slug for o in bigger_moves(OPTIONS, Chosen("t4-spot", "preemptible", "thesis", ("thesis",)))] == [
        "a100-spot"
    ]


def test_the_group_that_pays_keeps_paying_and_only_its_profiles_are_offered():
    # stu1 is in cs231n too, but thesis pays for this session: cs231n's A100 is not a move for it
    assert slug(bigger_profile(OPTIONS, record("t4", pool="thesis"))) == "a100"
    assert slug(bigger_profile(OPTIONS, record("t4", pool="cs231n"))) == "a100-cs"
    # no pool recorded: the default group pays (the first in sorted order: cs231n)
    assert slug(bigger_profile(OPTIONS, record("t4"))) == "a100-cs"
    # a user in no group: only the profiles open to everyone
    assert slug(bigger_profile(OPTIONS, record("t4", groups=()))) == "a100"
    # a restart asks the hub for the groups now: one who has left thesis cannot have thesis pay again
    assert bigger_moves(OPTIONS, Chosen.of(record("t4", pool="thesis"), groups=("cs231n",))) == []


def test_a_share_grows_to_a_whole_gpu_and_a_whole_gpu_never_into_part_of_one():
    quarter = [o.slug for o in bigger_moves(OPTIONS, Chosen("t4-quarter", pool="thesis", groups=("thesis",)))]
    # not half a T4 (still a share), not a MIG slice, not the preemptible tier, not cs231n's
    assert quarter == ["t4", "a100"]
    whole = [o.slug for o in bigger_moves(OPTIONS, Chosen("t4", pool="thesis", groups=("thesis",)))]
    assert whole == ["a100"]  # the 20 GB MIG slice is cheaper and bigger than a T4, but part of a GPU
    # a MIG slice grows to a whole GPU of its model
    mig = [o.slug for o in bigger_moves(OPTIONS, Chosen("a100-3g", pool="thesis", groups=("thesis",)))]
    assert mig == ["a100"]


def test_a_bigger_profile_the_budget_cannot_start_is_not_offered(ledger):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    ledger.set_lab_settings({"budget_min_minutes": "10"}, now)
    # thesis has 1.00 left: 10 minutes of a T4 (0.50) fit, 10 minutes of an A100 (2.50) do not
    ledger.set_budget(BudgetRule("group", "thesis", "month", "money", Decimal("1.00")), now - timedelta(days=1))
    session = record("t4-quarter", pool="thesis")
    purse = purse_of(ledger, Chosen.of(session), "stu1", now, UTC)
    assert purse.refusal(next(o for o in OPTIONS if o.slug == "t4"), CNY.format) is None
    refusal = purse.refusal(next(o for o in OPTIONS if o.slug == "a100"), CNY.format)
    assert refusal.startswith("Budget too low for 10 minutes of this profile")
    affordable = affordable_for(ledger, session, now, UTC, CNY.format)
    assert slug(bigger_profile(OPTIONS, record("t4", pool="thesis"), affordable)) is None
    message, _ = memory_message(record("t4", pool="thesis"), 0.9, 10, OPTIONS, CNY, affordable=affordable)
    assert message.kind == "advice" and "no profile with more GPU memory or more GPUs is open to you" in message.text


def test_a_group_whose_budget_binds_the_bigger_profile_must_pay_for_it(ledger):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    # cs231n has a budget; thesis has none: the spawner would make cs231n pay for the A100, not thesis
    ledger.set_budget(BudgetRule("group", "cs231n", "month", "money", Decimal("100")), now - timedelta(days=1))
    purse = purse_of(ledger, Chosen.of(record("t4", pool="thesis")), "stu1", now, UTC)
    a100 = next(o for o in OPTIONS if o.slug == "a100")
    assert purse.refusal(a100, CNY.format) == "The group thesis, which pays for this session, cannot pay for A100."
    assert purse.refusal(a100, CNY.format, "zh-CN") == "为此会话付费的组 thesis 无法为 A100 付费。"


def test_the_advice_keeps_the_tier_and_the_paying_group():
    usage = SessionUsage(sampled_minutes=60, peak_memory_mib=2 * GB, p95_memory_mib=2 * GB, util_p95=20.0)
    a100 = next(o for o in OPTIONS if o.slug == "a100")

    def facts(pool, tier=None):
        return SessionFacts(
            id="s1", user="stu1", profile="a100", gpu_count=1, rate_micros=a100.rate_micros, currency="CNY",
            minutes=60, groups=("cs231n", "thesis"), pool=pool, tier=tier, gpu_model="A100",
        )  # fmt: skip

    # the cheapest that fits is the preemptible T4, then the MIG slice (A100 family), then ...: a full-price
    # session paid by thesis is advised a full-price profile thesis may use
    advice = advise(facts("thesis"), usage, OPTIONS, currency=CNY)
    assert advice.advised and not advice.suggested.preemptible
    assert advice.suggested.allows(("thesis",))
    preemptible = advise(facts("thesis", "preemptible"), usage, OPTIONS, currency=CNY)
    assert not preemptible.advised or preemptible.suggested.preemptible


def test_a_restart_keeps_the_paying_group_and_the_resume_choice():
    assert restart_options(record("t4", pool="thesis"), "a100") == {"profile": "a100", "pool": "thesis"}
    assert restart_options(record("t4-spot", pool="thesis", tier="preemptible", resume=True), "a100-spot") == {
        "profile": "a100-spot",
        "pool": "thesis",
        "resume": True,
    }
    assert restart_options(record("t4", groups=()), "a100") == {"profile": "a100"}


def test_the_hub_publishes_each_profiles_tier_for_the_service(ledger):
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    # the spawner publishes its Profile's fields (preemptible: True), the service reads the tier back
    ledger.set_pricing(
        [
            {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05"},
            {"slug": "t4-spot", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.02", "preemptible": True},
        ],
        "CNY",
        now,
    )
    published = catalogue(ledger.pricing(), AdviceSettings())
    assert [(o.slug, o.preemptible) for o in published] == [("t4", False), ("t4-spot", True)]


def test_the_catalogue_every_automatic_choice_reads_has_the_admins_edits(ledger):
    """The advice, the memory and cap notices, ``restart-bigger`` and ``GET me`` read one catalogue: the published
    profiles at the rates and groups the spawner charges and allows, each with its GPU memory."""
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    ledger.set_pricing(
        [
            {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "rate_per_minute": "0.05", "gpu_memory_mib": 15360},
            {"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "rate_per_minute": "0.25",
             "price_per_gpu_hour": "15.00", "price_per_hour": "0"},
        ],
        "CNY",
        now,
    )  # fmt: skip
    edit = Override("a100", price_per_gpu_hour=Decimal("9.00"), allowed_groups=("thesis",))
    save_override(ledger, edit, now, "admin")
    options = {o.slug: o for o in profile_options(ledger)}
    assert (options["a100"].rate_micros, options["a100"].allowed_groups) == (150_000, ("thesis",))
    assert (options["t4"].rate_micros, options["t4"].memory_mib) == (50_000, 15360)
    # the admin's memory figure for a profile comes from the advice's settings
    assert {o.slug: o.memory_mib for o in profile_options(ledger, AdviceSettings(profile_memory_gb={"t4": 8}))}[
        "t4"
    ] == 8 * GB
