"""Money: currencies, display, parsing prices, and exact per-minute rates."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from jupyterhub_gpu.money import (
    MAX_AMOUNT,
    Currency,
    MoneyError,
    currencies_in_use,
    exact_prices_near,
    parse_amount,
    price_advice,
    profile_rate,
    rate_per_minute,
)

# -- Currency.from_config ------------------------------------------------------


@pytest.mark.parametrize(("code", "digits"), [("CNY", 2), ("USD", 2), ("JPY", 0), ("EUR", 2), ("BHD", 3), ("KRW", 0)])
def test_currency_from_config_takes_iso_4217_codes_and_their_minor_units(code, digits):
    currency = Currency.from_config(code)
    assert currency == Currency(code, None)
    assert currency.minor_digits == digits


def test_currency_symbol_override_keeps_digits():
    assert Currency.from_config("CNY", "RMB ") == Currency("CNY", "RMB ")
    assert Currency.from_config("JPY", "円").minor_digits == 0
    assert Currency.from_config("CNY", "").symbol is None  # empty: the locale's own


@pytest.mark.parametrize("code", ["", "US", "USDX", "U$D", "123", "ＣＮＹ", None, 840, b"USD"])
def test_currency_bad_codes_rejected(code):
    with pytest.raises(MoneyError, match="three-letter ISO 4217 code") as info:
        Currency.from_config(code)
    assert repr(code) in str(info.value)


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("RMB", "currency 'RMB' is not an ISO 4217 currency code; did you mean 'CNY' (Chinese Yuan)?"),
        ("XYZ", "currency 'XYZ' is not an ISO 4217 currency code"),
        ("UDS", "currency 'UDS' is not an ISO 4217 currency code; did you mean 'USD' (US Dollar)"),
        (
            "DEM",
            "currency 'DEM' (German Mark) is a former ISO 4217 currency, not in use today; did you mean 'EUR' (Euro)?",
        ),
        ("XAU", "currency 'XAU' (Gold) is an ISO 4217 code, but not of a currency in use"),
        ("XTS", "currency 'XTS' (Testing Currency Code) is an ISO 4217 code, but not of a currency in use"),
        ("cny", "currency is an ISO 4217 code, written in capitals: use 'CNY', not 'cny'"),
        ("Usd", "currency is an ISO 4217 code, written in capitals: use 'USD', not 'Usd'"),
    ],
)
def test_a_code_that_is_no_currency_in_use_is_refused_with_a_hint(code, message):
    with pytest.raises(MoneyError) as info:
        Currency.from_config(code)
    assert str(info.value).startswith(message)


def test_the_error_names_the_setting():
    with pytest.raises(MoneyError, match=r"^c.GPUService.currency 'RMB' is not"):
        Currency.from_config("RMB", what="c.GPUService.currency")


def test_currencies_in_use_come_from_babel():
    codes = currencies_in_use()
    assert {"CNY", "USD", "EUR", "JPY", "GBP", "INR"} <= codes
    assert not {"DEM", "FRF", "XAU", "XXX", "XTS", "RMB"} & codes
    assert 140 < len(codes) < 200  # ISO 4217 lists about 180 codes, funds and metals included


@pytest.mark.parametrize("symbol", [5, "x" * 9, "\n", "  ", "¥\n"])
def test_currency_bad_symbol_rejected(symbol):
    with pytest.raises(MoneyError, match="currency_symbol must be"):
        Currency.from_config("USD", symbol)


def test_money_error_is_a_value_error():
    assert issubclass(MoneyError, ValueError)


# -- format / format_rate --------------------------------------------------------

CNY = Currency.from_config("CNY")
USD = Currency.from_config("USD")
JPY = Currency.from_config("JPY")


@pytest.mark.parametrize(
    ("currency", "amount", "shown"),
    [
        (CNY, "0.05", "CN¥0.05"),
        (CNY, "0", "CN¥0.00"),
        (CNY, "-0.001", "CN¥0.00"),  # never "-CN¥0.00"
        (CNY, "3", "CN¥3.00"),
        (CNY, "1234567.891", "CN¥1,234,567.89"),
        (USD, "0.005", "$0.01"),  # half-up, not banker's rounding
        (USD, "0.015", "$0.02"),
        (USD, "0.025", "$0.03"),
        (USD, "-1.5", "-$1.50"),
        (JPY, "12.5", "¥13"),
        (JPY, "1000", "¥1,000"),
    ],
)
def test_format_in_english(currency, amount, shown):
    assert currency.format(Decimal(amount)) == shown


@pytest.mark.parametrize(
    ("currency", "locale", "amount", "shown"),
    [
        (CNY, "zh-CN", "1234.5", "¥1,234.50"),
        (CNY, "zh_CN", "-0.05", "-¥0.05"),
        (USD, "zh-CN", "3", "US$3.00"),  # a Chinese reader is told it is not yuan
        (JPY, "zh-CN", "12.5", "JP¥13"),
        (CNY, "de", "1234.5", "1.234,50\xa0CN¥"),
        (CNY, "xx-unknown", "1", "CN¥1.00"),  # an unknown locale falls back to English
        (Currency.from_config("CNY", "RMB "), "en", "3", "RMB 3.00"),
        (Currency.from_config("CNY", "RMB "), "zh-CN", "3", "RMB 3.00"),
        (Currency.from_config("CNY", "元"), "de", "3", "3,00\xa0元"),
    ],
)
def test_format_in_the_readers_locale(currency, locale, amount, shown):
    assert currency.format(Decimal(amount), locale=locale) == shown


def test_symbol_and_name_in_a_locale():
    assert CNY.symbol_in("en") == "CN¥" and CNY.symbol_in("zh-CN") == "¥"
    assert CNY.name("zh-CN") == "人民币" and CNY.name() == "Chinese Yuan"
    assert Currency.from_config("CNY", "¥").symbol_in("en") == "¥"


def test_format_with_explicit_places():
    assert CNY.format(Decimal("0.0025"), places=4) == "CN¥0.0025"
    assert CNY.format(Decimal("2"), places=0) == "CN¥2"


def test_format_rounding_is_display_only():
    amount = Decimal("0.005")
    CNY.format(amount)
    assert amount == Decimal("0.005")


@pytest.mark.parametrize(
    ("currency", "rate", "shown"),
    [
        (CNY, "0.05", "CN¥0.05"),
        (CNY, "0.050000", "CN¥0.05"),  # trailing zeros do not widen the display
        (CNY, "0.0025", "CN¥0.0025"),  # needs four places
        (CNY, "0.000001", "CN¥0.000001"),
        (CNY, "0.25", "CN¥0.25"),
        (CNY, "10", "CN¥10.00"),
        (CNY, "1E+1", "CN¥10.00"),
        (CNY, "0", "CN¥0.00"),
        (JPY, "5", "¥5"),
        (JPY, "0.5", "¥0.5"),  # a sub-yen rate still shows its digit
        (USD, "0.123456", "$0.123456"),
    ],
)
def test_format_rate(currency, rate, shown):
    assert currency.format_rate(Decimal(rate)) == shown


def test_format_rate_in_chinese_keeps_its_places():
    assert CNY.format_rate(Decimal("0.016667"), locale="zh-CN") == "¥0.016667"


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


def test_rate_per_minute_refuses_inexact_price_and_suggests_some():
    with pytest.raises(MoneyError) as info:
        rate_per_minute(Decimal("2"))
    message = str(info.value)
    assert message == (
        "2/hour is not a whole number of 0.000001 per minute (2/60 = 0.0333333333...);"
        " use 1.99998 or 2.00004, or a round price such as 1.98 or 2.01"
    )
    # the suggestions are themselves exact prices
    for suggestion in ("1.99998", "2.00004", "1.98", "2.01"):
        assert rate_per_minute(Decimal(suggestion)) * 60 == Decimal(suggestion)


def test_rate_per_minute_never_suggests_a_zero_price():
    with pytest.raises(MoneyError) as info:
        rate_per_minute(Decimal("0.0000001"))
    message = str(info.value)
    assert message.startswith("0.0000001/hour is not a whole number")
    assert message.endswith("use 0.00006, or a round price such as 0.03")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (1, "1.00001", "0"),
            "price_per_gpu_hour: 1.00001/hour is not a whole number of 0.000001 per minute"
            " (1.00001/60 = 0.0166668333...); use 0.99996 or 1.00002, or a round price such as 0.99 or 1.02",
        ),
        (
            (2, "1.00001", "0"),
            "price_per_gpu_hour: 2 GPUs × 1.00001 = 2.00002/hour is not a whole number of 0.000001 per minute"
            " (2.00002/60 = 0.0333336667...); use 0.99999 or 1.00002, or a round price such as 0.99 or 1.02",
        ),
        (
            (1, "1.00001", "0.5"),
            "price_per_gpu_hour: 1.00001/hour + price_per_hour 0.5 = 1.50001/hour is not a whole number of"
            " 0.000001 per minute (1.50001/60 = 0.0250001667...); use 1 or 1.00006, or a round price such as"
            " 1.03",  # 1 is round already
        ),
        (
            (0, "0", "1"),
            "price_per_hour: 1/hour is not a whole number of 0.000001 per minute (1/60 = 0.0166666667...);"
            " use 0.99996 or 1.00002, or a round price such as 0.99 or 1.02",
        ),
        (
            # the GPU price cannot fix a flat price that is not in micro-units: the flat price is named
            (2, "1.5", "0.0000001"),
            "price_per_hour: 0.0000001/hour + 2 GPUs × 1.5 = 3.0000001/hour",
        ),
    ],
)
def test_profile_rate_names_the_field_and_suggests_exact_prices(args, message):
    count, gpu, flat = args
    with pytest.raises(MoneyError) as info:
        profile_rate(count, Decimal(gpu), Decimal(flat))
    assert str(info.value).startswith(message)


def test_every_suggested_price_prices_exactly():
    for count, gpu, flat in [(1, "1.00001", "0"), (3, "2.500001", "0.12"), (7, "0.333333", "0"), (64, "9.99", "1.01")]:
        near = exact_prices_near(Decimal(gpu), count, Decimal(flat))
        rounded = exact_prices_near(Decimal(gpu), count, Decimal(flat), places=2)
        for price in [*near, *rounded]:
            assert price is not None
            profile_rate(count, price, Decimal(flat))  # does not raise
        assert near[0] < Decimal(gpu) < near[1] and rounded[0] < Decimal(gpu) < rounded[1]


def test_round_prices_follow_the_currencys_minor_unit():
    with pytest.raises(MoneyError, match=r"or a round price such as 0 or 3$|such as 3$"):
        profile_rate(1, Decimal("1.00001"), Decimal(0), Currency.from_config("JPY"))
    assert price_advice(Decimal("1.00001"), minor_digits=3).endswith("such as 0.999 or 1.002")


def test_rate_per_minute_too_large_is_a_money_error():
    with pytest.raises(MoneyError, match="is too large to be a price"):
        rate_per_minute(Decimal("1e30"))
