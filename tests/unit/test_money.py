"""Money: currencies, display, parsing prices, and exact per-minute rates."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from jupyterhub_gpu.money import MAX_AMOUNT, Currency, MoneyError, parse_amount, rate_per_minute

# -- Currency.from_config ------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("CNY", Currency("CNY", "¥", 2)),
        ("USD", Currency("USD", "$", 2)),
        ("JPY", Currency("JPY", "¥", 0)),
        ("EUR", Currency("EUR", "€", 2)),
        ("cny", Currency("CNY", "¥", 2)),
        # an unknown but well-formed code is shown by its code, with two digits
        ("XYZ", Currency("XYZ", "XYZ ", 2)),
    ],
)
def test_currency_from_config(code, expected):
    assert Currency.from_config(code) == expected


def test_currency_symbol_override_keeps_digits():
    assert Currency.from_config("CNY", "RMB ") == Currency("CNY", "RMB ", 2)
    assert Currency.from_config("JPY", "円") == Currency("JPY", "円", 0)


@pytest.mark.parametrize("code", ["", "US", "USDX", "U$D", "123", "ＣＮＹ", None, 840, b"USD"])
def test_currency_bad_codes_rejected(code):
    with pytest.raises(MoneyError, match="three-letter ISO 4217 code") as info:
        Currency.from_config(code)
    assert repr(code) in str(info.value)


def test_currency_bad_symbol_rejected():
    with pytest.raises(MoneyError, match="currency symbol must be a string"):
        Currency.from_config("USD", 5)


def test_money_error_is_a_value_error():
    assert issubclass(MoneyError, ValueError)


# -- format / format_rate --------------------------------------------------------

CNY = Currency.from_config("CNY")
USD = Currency.from_config("USD")
JPY = Currency.from_config("JPY")


@pytest.mark.parametrize(
    ("currency", "amount", "shown"),
    [
        (CNY, "0.05", "¥0.05"),
        (CNY, "0", "¥0.00"),
        (CNY, "3", "¥3.00"),
        (CNY, "1234567.891", "¥1,234,567.89"),
        (USD, "0.005", "$0.01"),  # half-up, not banker's rounding
        (USD, "0.015", "$0.02"),
        (USD, "0.025", "$0.03"),
        (USD, "-1.5", "-$1.50"),
        (JPY, "12.5", "¥13"),
        (JPY, "1000", "¥1,000"),
    ],
)
def test_format(currency, amount, shown):
    assert currency.format(Decimal(amount)) == shown


def test_format_with_explicit_places():
    assert CNY.format(Decimal("0.0025"), places=4) == "¥0.0025"
    assert CNY.format(Decimal("2"), places=0) == "¥2"


def test_format_rounding_is_display_only():
    amount = Decimal("0.005")
    CNY.format(amount)
    assert amount == Decimal("0.005")


@pytest.mark.parametrize(
    ("currency", "rate", "shown"),
    [
        (CNY, "0.05", "¥0.05"),
        (CNY, "0.050000", "¥0.05"),  # trailing zeros do not widen the display
        (CNY, "0.0025", "¥0.0025"),  # needs four places
        (CNY, "0.000001", "¥0.000001"),
        (CNY, "0.25", "¥0.25"),
        (CNY, "10", "¥10.00"),
        (CNY, "1E+1", "¥10.00"),
        (CNY, "0", "¥0.00"),
        (JPY, "5", "¥5"),
        (JPY, "0.5", "¥0.5"),  # a sub-yen rate still shows its digit
        (USD, "0.123456", "$0.123456"),
    ],
)
def test_format_rate(currency, rate, shown):
    assert currency.format_rate(Decimal(rate)) == shown


# -- parse_amount ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, Decimal(0)),
        (3, Decimal(3)),
        ("3.00", Decimal("3.00")),
        (" 3.00 ", Decimal("3.00")),
        ("0.1", Decimal("0.1")),
        ("15", Decimal(15)),
        (Decimal("2.5"), Decimal("2.5")),
    ],
)
def test_parse_amount_accepts_ints_and_decimal_strings(value, expected):
    amount = parse_amount(value)
    assert isinstance(amount, Decimal)
    assert amount == expected


def test_parse_amount_keeps_decimal_exact():
    assert parse_amount("0.1") + parse_amount("0.2") == parse_amount("0.3")


@pytest.mark.parametrize("value", [0.1, 3.0, float("nan"), float("inf")])
def test_parse_amount_refuses_floats(value):
    with pytest.raises(MoneyError) as info:
        parse_amount(value, "price_per_gpu_hour")
    message = str(info.value)
    assert message.startswith("price_per_gpu_hour must be a decimal string such as '3.00'")
    assert "money is never a float" in message
    assert repr(value) in message


@pytest.mark.parametrize("value", [True, False])
def test_parse_amount_refuses_bools(value):
    with pytest.raises(MoneyError, match=re.escape("decimal string such as '3.00'")) as info:
        parse_amount(value, "price")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", [-1, "-0.01", Decimal("-3")])
def test_parse_amount_refuses_negatives(value):
    with pytest.raises(MoneyError, match=r"price must not be negative, got "):
        parse_amount(value, "price")


@pytest.mark.parametrize("value", ["abc", "", "  ", "3,00", "1.2.3", "¥3"])
def test_parse_amount_refuses_non_numbers(value):
    with pytest.raises(MoneyError, match=re.escape("must be a decimal number such as '3.00'")) as info:
        parse_amount(value, "price")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", ["NaN", "nan", "sNaN", "Infinity", "-Infinity", "inf", Decimal("NaN")])
def test_parse_amount_refuses_non_finite(value):
    with pytest.raises(MoneyError, match="price must be a finite number"):
        parse_amount(value, "price")


@pytest.mark.parametrize("value", [None, [3], {"amount": 3}, b"3.00"])
def test_parse_amount_refuses_other_types(value):
    with pytest.raises(MoneyError, match=re.escape("must be a decimal string such as '3.00'")):
        parse_amount(value)


@pytest.mark.parametrize("value", ["1e15", 10**15, "9e999999"])
def test_parse_amount_refuses_absurd_amounts(value):
    with pytest.raises(MoneyError, match="must be less than 1,000,000,000,000,000"):
        parse_amount(value, "price")
    assert parse_amount(MAX_AMOUNT - 1) == MAX_AMOUNT - 1


# -- rate_per_minute -------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_hour", "per_minute"),
    [
        ("3.00", "0.05"),
        ("3", "0.05"),
        ("15.00", "0.25"),
        ("0.06", "0.001"),
        ("0.00006", "0.000001"),
        ("60", "1"),
        ("7.2", "0.12"),
        ("0", "0"),
        ("0.00", "0"),
    ],
)
def test_rate_per_minute_exact(per_hour, per_minute):
    rate = rate_per_minute(Decimal(per_hour))
    assert rate == Decimal(per_minute)
    assert str(rate) == per_minute
    assert rate * 60 == Decimal(per_hour)


@pytest.mark.parametrize(("per_hour", "shown"), [("600", "10"), ("6000", "100"), ("1200.00", "20")])
def test_rate_per_minute_is_never_in_exponent_form(per_hour, shown):
    # the rate goes into the environment and the saved state as str(rate)
    assert str(rate_per_minute(Decimal(per_hour))) == shown


def test_rate_per_minute_refuses_inexact_price_and_suggests_one():
    with pytest.raises(MoneyError) as info:
        rate_per_minute(Decimal("2"))
    message = str(info.value)
    assert message.startswith("2/hour is not a whole number of 0.000001 per minute")
    assert "choose an hourly price divisible by 60" in message
    assert "e.g. 1.99998 or 2.00004" in message
    # the suggestions are themselves exact prices
    for suggestion in ("1.99998", "2.00004"):
        assert rate_per_minute(Decimal(suggestion)) * 60 == Decimal(suggestion)


def test_rate_per_minute_never_suggests_a_zero_price():
    with pytest.raises(MoneyError) as info:
        rate_per_minute(Decimal("0.0000001"))
    message = str(info.value)
    assert message.startswith("0.0000001/hour is not a whole number")
    assert message.endswith("e.g. 0.00006")


def test_rate_per_minute_too_large_is_a_money_error():
    with pytest.raises(MoneyError, match="is too large to be a price"):
        rate_per_minute(Decimal("1e30"))
