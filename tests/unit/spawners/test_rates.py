"""One rate from its parts: the spawner charges what ``GET pricing`` and the admin form say.

The profiles are published to a real ledger as the hub publishes them
(``asdict`` of the parsed profiles), and an admin's edit is applied on both
sides: the spawner's profiles (:func:`apply_overrides`) and the published
pricing (:func:`apply_to_pricing`). The form's check (:func:`parse_override`)
refuses exactly the edits the spawner could not price.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.money import MAX_RATE_PER_MINUTE, Currency, MoneyError, profile_rate
from jupyterhub_gpu.rules.overrides import AccessError, Override, apply_to_pricing, parse_override
from jupyterhub_gpu.spawners.profiles import ProfileError, apply_overrides, parse_profiles

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
CONFIG = [
    {"slug": "t4plus", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "price_per_hour": "0.60"},
    {"slug": "2xa100", "gpu_model": "A100", "gpu_count": 2, "price_per_gpu_hour": "15", "price_per_hour": "1.20"},
    {"slug": "tiny", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "0.000030", "price_per_hour": "0.000030"},
    {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"},
]
EDITS = ["0", "0.000030", "0.000060", "0.6", "1", "2.99", "6.00", "6.000001", "7.20", "12", "999999999999"]


def published(ledger):
    profiles = parse_profiles(CONFIG, require_image=False)
    ledger.set_pricing([asdict(p) for p in profiles], "CNY", NOW)  # as the hub publishes them
    return profiles, {p["slug"]: p for p in ledger.pricing()}


def test_the_issue_case_gpu_price_edited_to_six_is_eleven_cents_on_both_sides(ledger):
    profiles, pricing = published(ledger)
    edit = parse_override(pricing["t4plus"], {"price_per_gpu_hour": "6.00"})
    charged = {p.slug: p.rate_per_minute for p in apply_overrides(profiles, {"t4plus": edit})}
    shown = {p["slug"]: p["rate_per_minute"] for p in apply_to_pricing(list(pricing.values()), {"t4plus": edit})}
    assert charged["t4plus"] == Decimal("0.11") and shown["t4plus"] == "0.11"


@pytest.mark.parametrize("slug", ["t4plus", "2xa100", "tiny", "cpu"])
@pytest.mark.parametrize("field", ["price_per_gpu_hour", "price_per_hour"])
def test_every_edit_is_priced_the_same_by_the_spawner_and_the_pricing_or_refused_at_the_form(ledger, slug, field):
    profiles, pricing = published(ledger)
    for value in EDITS:
        try:
            edit = parse_override(pricing[slug], {field: value})
        except AccessError:
            # refused at the form: the spawner could not have priced it either
            configured = profiles_by(profiles)[slug]
            gpu = Decimal(value) if field == "price_per_gpu_hour" else configured.price_per_gpu_hour
            flat = Decimal(value) if field == "price_per_hour" else configured.price_per_hour
            if field == "price_per_gpu_hour" and not configured.gpu_count:
                continue  # a CPU profile has no GPU price to edit
            with pytest.raises(MoneyError):
                profile_rate(configured.gpu_count, gpu, flat)
            continue
        charged = profiles_by(apply_overrides(profiles, {slug: edit}))[slug].rate_per_minute
        shown = profiles_by_slug(apply_to_pricing(list(pricing.values()), {slug: edit}))[slug]["rate_per_minute"]
        assert Decimal(shown) == charged, (slug, field, value)


def profiles_by(profiles):
    return {p.slug: p for p in profiles}


def profiles_by_slug(rows):
    return {p["slug"]: p for p in rows}


def test_an_edit_that_would_make_the_rate_inexact_is_refused_with_the_rate_message(ledger):
    _, pricing = published(ledger)
    # 0.000060 + the configured 0.000030 = 0.00009/h: 0.0000015 per minute (the old check guessed 0.000001)
    with pytest.raises(AccessError, match=r"0\.000090/hour is not a whole number of 0\.000001 per minute"):
        parse_override(pricing["tiny"], {"price_per_gpu_hour": "0.000060"})
    with pytest.raises(AccessError, match="too large to be a price"):
        parse_override(pricing["2xa100"], {"price_per_gpu_hour": "999999999999"})


@pytest.mark.parametrize(
    ("slug", "values", "message"),
    [
        (
            "t4plus",
            {"price_per_gpu_hour": "3.00001"},
            "price_per_gpu_hour: 3.00001/hour + price_per_hour 0.60 = 3.60001/hour is not a whole number of"
            " 0.000001 per minute (3.60001/60 = 0.0600001667...); use 3 or 3.00006, or a round price such as 3.03",
        ),
        (
            "cpu",
            {"price_per_hour": "1"},
            "price_per_hour: 1/hour is not a whole number of 0.000001 per minute (1/60 = 0.0166666667...);"
            " use 0.99996 or 1.00002, or a round price such as 0.99 or 1.02",
        ),
    ],
)
def test_an_admins_inexact_price_names_the_field_and_suggests_prices_that_price(ledger, slug, values, message):
    _, pricing = published(ledger)
    with pytest.raises(AccessError) as info:
        parse_override(pricing[slug], values, Currency.from_config("CNY"))
    assert str(info.value) == message
    field = next(iter(values))
    for suggestion in re.findall(r"\d+(?:\.\d+)?(?= or|$)", message.split("; ", 1)[1]):
        parse_override(pricing[slug], {field: suggestion})  # every suggestion is accepted


def test_a_stored_edit_that_no_longer_prices_is_ignored_on_both_sides_not_a_failed_spawn(ledger):
    profiles, pricing = published(ledger)
    broken = {"tiny": Override("tiny", price_per_gpu_hour=Decimal("0.000060"), allowed_groups=("thesis",))}
    (tiny,) = [p for p in apply_overrides(profiles, broken) if p.slug == "tiny"]
    assert tiny.rate_per_minute == Decimal("0.000001") and tiny.allowed_groups == ("thesis",)
    shown = profiles_by_slug(apply_to_pricing(list(pricing.values()), broken))["tiny"]
    assert shown["rate_per_minute"] == "0.000001" and shown["allowed_groups"] == ["thesis"]


def test_rows_published_before_the_parts_were_kept_price_as_before(ledger):
    ledger.set_pricing([{"slug": "old", "gpu_count": 2, "rate_per_minute": "0.1"}], "CNY", NOW)
    (row,) = ledger.pricing()
    assert row["price_per_gpu_hour"] is None and row["price_per_hour"] is None
    edit = parse_override(row, {"price_per_hour": "0.60"})  # the rate taken as all GPU price: 2 × 3.00 + 0.60
    assert apply_to_pricing([row], {"old": edit})[0]["rate_per_minute"] == "0.11"


def test_no_profile_rate_overflows_the_ledger():
    assert profile_rate(64, MAX_RATE_PER_MINUTE * 60 / 64, Decimal(0)) == MAX_RATE_PER_MINUTE
    with pytest.raises(MoneyError, match="too large"):
        profile_rate(64, Decimal("999999999999999"), Decimal(0))
    with pytest.raises(ProfileError, match="too large"):
        parse_profiles([{"slug": "x", "gpu_model": "T4", "gpu_count": 64, "price_per_gpu_hour": "60000000000"}], False)


def test_the_advice_prices_profiles_with_the_admins_edits(ledger):
    """The T4 edited to 30/GPU-hour (0.5/min) is no longer cheaper than the A100 (0.25/min): no advice to take it."""
    from datetime import timedelta

    from jupyterhub_gpu.ledger.queries.advice import advice_of
    from jupyterhub_gpu.ledger.queries.overrides import save_override
    from jupyterhub_gpu.ledger.queries.samples import record_sample
    from jupyterhub_gpu.money import Currency
    from jupyterhub_gpu.rules.samples import Sample
    from jupyterhub_gpu.service.tick import TickContext, update_advice
    from jupyterhub_gpu.session import SessionStart

    config = [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"},
        {"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00"},
    ]
    ledger.set_pricing([asdict(p) for p in parse_profiles(config, require_image=False)], "CNY", NOW)
    t0 = NOW - timedelta(hours=2)
    for sid in ("before", "after"):
        ledger.record_start(SessionStart(sid, "u", "", (), "a100", ("GPU-a",), 250_000, "CNY", t0))
        for i in range(20):  # 2 GB on a quiet A100: a T4 would serve it
            record_sample(
                ledger, "u", Sample(sid, t0 + timedelta(minutes=i), 2, 1.0, 2048, 40960, 1, 0, None, None, ())
            )
        ledger.record_stop(sid, t0 + timedelta(minutes=20), "stopped")
        if sid == "before":
            update_advice(TickContext(ledger=ledger, currency=Currency.from_config("CNY")), NOW)
            save_override(ledger, Override("t4", price_per_gpu_hour=Decimal(30)), NOW, "admin")
    update_advice(TickContext(ledger=ledger, currency=Currency.from_config("CNY")), NOW)
    advice = advice_of(ledger, ["before", "after"])
    assert advice["before"].suggested_profile == "t4"
    assert advice["after"].reason == "nothing_cheaper" and advice["after"].suggested_profile is None
