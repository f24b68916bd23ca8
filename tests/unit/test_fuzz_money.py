"""Hypothesis on money: prices, rates, micro-units and per-started-minute charges are exact, never float.

Each property draws many inputs; a failure prints the smallest example found.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.billing import billed_minutes, charge
from jupyterhub_gpu.money import (
    MAX_AMOUNT,
    MICROS,
    RATE_PLACES,
    Currency,
    MoneyError,
    from_micros,
    parse_amount,
    rate_per_minute,
    to_micros,
)
from jupyterhub_gpu.service.web.params import BadRequest, parse_limit
from jupyterhub_gpu.service.web.views import money_str

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: A price as an admin may write it: up to 6 decimal places, below MAX_AMOUNT.
prices = st.decimals(min_value=0, max_value=MAX_AMOUNT - 1, places=6, allow_nan=False, allow_infinity=False)
micros = st.integers(min_value=0, max_value=10**18)
moments = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc))
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(min_value=-(10**20), max_value=10**20),
)


@FUZZ
@given(junk)
@example("NaN")
@example("-0.01")
@example("1e400")
@example(" 3.00 ")
@example("Infinity")
def test_parse_amount_returns_a_finite_non_negative_decimal_or_refuses_with_a_message(value):
    try:
        amount = parse_amount(value, "price")
    except MoneyError as e:
        assert str(e).startswith("price must")
        return
    assert isinstance(amount, Decimal) and amount.is_finite()
    assert Decimal(0) <= amount < MAX_AMOUNT
    assert not isinstance(value, (float, bool))


@FUZZ
@given(prices)
def test_rate_per_minute_is_exact_or_refused_with_a_suggestion(price):
    try:
        rate = rate_per_minute(price)
    except MoneyError as e:
        assert "is not a whole number of 0.000001 per minute" in str(e)
        # every price suggested prices exactly
        for suggestion in re.findall(r"\b\d+(?:\.\d+)?(?= or|,|$)", str(e).split("; ", 1)[1]):
            assert rate_per_minute(Decimal(suggestion)) * 60 == Decimal(suggestion)
        # refused only when the hourly price really is not a whole number of micro-units per minute
        assert (price * MICROS) % 60 != 0
        return
    assert rate * 60 == price  # exact: nothing was rounded
    assert -rate.as_tuple().exponent <= RATE_PLACES
    assert "E" not in f"{rate}"  # never exponent form


@FUZZ
@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=10**6))
def test_an_exact_rate_times_minutes_is_an_exact_integer_of_micros(rate_micros, minutes):
    rate = from_micros(rate_micros)
    assert to_micros(rate) == rate_micros
    assert to_micros(rate * minutes) == rate_micros * minutes


@FUZZ
@given(micros)
def test_micros_round_trip_through_decimal_and_the_api_string(amount):
    assert to_micros(from_micros(amount)) == amount
    text = money_str(amount)
    assert "E" not in text and "e" not in text
    assert to_micros(Decimal(text)) == amount


@FUZZ
@given(st.decimals(allow_nan=False, allow_infinity=False, places=7, min_value=0, max_value=10**6))
def test_to_micros_refuses_a_seventh_decimal_place(amount):
    if (amount * MICROS) == (amount * MICROS).to_integral_value():
        assert from_micros(to_micros(amount)) == amount
    else:
        with pytest.raises(ValueError, match="more than six decimal places"):
            to_micros(amount)


@FUZZ
@given(moments, st.integers(min_value=0, max_value=10**12))
def test_billed_minutes_is_ceil_of_seconds_over_60_and_at_least_one(started, elapsed_us):
    ended = started + timedelta(microseconds=elapsed_us)
    minutes = billed_minutes(started, ended)
    assert minutes == max(1, -(-elapsed_us // 60_000_000))
    assert (minutes - 1) * 60_000_000 < max(elapsed_us, 1) <= minutes * 60_000_000


@FUZZ
@given(moments, st.integers(min_value=0, max_value=10**11), st.integers(min_value=0, max_value=10**11))
def test_billed_minutes_never_decreases_and_a_split_session_never_costs_less(started, a_us, b_us):
    middle = started + timedelta(microseconds=a_us)
    end = middle + timedelta(microseconds=b_us)
    assert billed_minutes(started, middle) <= billed_minutes(started, end)
    # per started minute: a session cut in two is charged at least as much as the whole (never a lost minute)
    assert billed_minutes(started, middle) + billed_minutes(middle, end) >= billed_minutes(started, end)
    assert billed_minutes(started, middle) + billed_minutes(middle, end) <= billed_minutes(started, end) + 1


@FUZZ
@given(moments, st.integers(min_value=0, max_value=10**11), st.integers(0, 10**9), st.integers(0, 64))
def test_charge_is_minutes_times_rate_in_integers(started, elapsed_us, rate_micros, gpus):
    c = charge(started, started + timedelta(microseconds=elapsed_us), rate_micros, gpus)
    assert isinstance(c.cost_micros, int) and isinstance(c.gpu_minutes, int)
    assert c.cost_micros == c.minutes * rate_micros
    assert c.gpu_minutes == c.minutes * gpus


@FUZZ
@given(
    st.sampled_from(["CNY", "USD", "JPY", "EUR", "KRW", "BHD"]),
    st.sampled_from(["en", "zh-CN"]),
    st.decimals(-(10**12), 10**12, places=6),
)
def test_currency_format_shows_the_amount_to_its_minor_units(code, locale, amount):
    currency = Currency.from_config(code)
    text = currency.format(amount, locale=locale)
    symbol = currency.symbol_in(locale)
    assert symbol in text
    shown = Decimal(text.replace(symbol, "").replace(",", "").strip())
    step = Decimal(1).scaleb(-currency.minor_digits)
    assert abs(shown - amount) <= step / 2


@FUZZ
@given(st.one_of(junk, prices.map(str), prices.map(lambda d: str(d) + "0000001")))
def test_a_budget_limit_is_an_exact_decimal_or_a_400_message(value):
    try:
        limit = parse_limit(value)
    except BadRequest as e:
        assert str(e)
        return
    assert isinstance(limit, Decimal) and limit >= 0
    assert not isinstance(value, (float, bool))
    to_micros(limit)  # exact to six places


@FUZZ
@given(st.text(max_size=6))
def test_currency_codes_are_three_letters_or_refused(code):
    try:
        currency = Currency.from_config(code)
    except MoneyError as e:
        assert "ISO 4217" in str(e)
        return
    assert len(currency.code) == 3 and currency.code.isupper()
