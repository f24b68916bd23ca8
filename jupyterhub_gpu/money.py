"""The one money type: prices, rates and amounts as :class:`decimal.Decimal`, stored as integer micro-units.

Money is never a float. Prices come from configuration as decimal strings
(``"3.00"``) or integers; a float is refused because ``0.1 + 0.2`` is not
``0.3``. A rate per minute must be exact to six decimal places, so that
charging ``n`` minutes is an exact multiplication with no rounding.

Currencies are ISO 4217 codes checked against the currencies in use today
(Babel's copy of the Unicode CLDR data, which also gives each currency's
minor-unit digits and each locale's symbol and number format): ``Currency.format``
writes ``CN¥1,234.50`` in English and ``¥1,234.50`` in Simplified Chinese, and
an admin's ``currency_symbol`` replaces the locale's symbol in every language.
"""

from __future__ import annotations

import copy
import difflib
import functools
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal, InvalidOperation

import babel.numbers
from babel import Locale, UnknownLocaleError
from babel.core import get_global

#: Rates per minute are kept exact to this many decimal places.
RATE_PLACES = 6
_RATE_QUANTUM = Decimal(1).scaleb(-RATE_PLACES)
#: Micro-units per currency unit: the ledger keeps every amount as an integer of millionths.
MICROS = 1_000_000
#: No single price or amount reaches this (it would overflow the arithmetic of a bill).
MAX_AMOUNT = Decimal(10) ** 15
#: The locale of texts that have no reader's language (the CLI, mails, logs, the spawn form): English.
DEFAULT_LOCALE = "en"
#: The longest ``currency_symbol`` an admin may set.
MAX_SYMBOL_LENGTH = 8
#: What people write for a currency that is not its ISO 4217 code (hints only; the codes come from Babel).
COMMON_MISTAKES = {"RMB": "CNY", "YEN": "JPY", "NTD": "TWD", "UKP": "GBP", "STG": "GBP", "EURO": "EUR"}


class MoneyError(ValueError):
    """A price or amount that cannot be used as money."""


def to_micros(amount: Decimal) -> int:
    """Exact micro-units of a Decimal; ValueError if it has more than six decimal places."""
    micros = amount * MICROS
    if micros != micros.to_integral_value():
        raise ValueError(f"{amount} has more than six decimal places")
    return int(micros)


def from_micros(micros: int) -> Decimal:
    """The Decimal of an amount of micro-units, without trailing zeros (``0`` for zero)."""
    return (Decimal(micros) / MICROS).normalize() if micros else Decimal(0)


# -- currencies (ISO 4217 through Babel) ------------------------------------------------------


@functools.cache
def currencies_in_use(today: date | None = None) -> frozenset[str]:
    """The ISO 4217 codes that are legal tender somewhere on ``today`` (CLDR's territory currencies)."""
    today = today or date.today()
    codes: set[str] = set()
    for territory in get_global("territory_currencies"):
        codes.update(babel.numbers.get_territory_currencies(territory, today))
    return frozenset(codes)


def _successors(code: str) -> list[str]:
    """The currencies in use today where the former currency ``code`` was legal tender (DEM -> EUR)."""
    found: set[str] = set()
    for territory, entries in get_global("territory_currencies").items():
        if any(entry[0] == code for entry in entries):
            found.update(babel.numbers.get_territory_currencies(territory, date.today()))
    return sorted(found)


def _code_hint(code: str) -> str:
    """``; did you mean 'CNY' (Chinese Yuan)?`` for a code that is not one in use, or ""."""
    upper = code.upper()
    if upper in COMMON_MISTAKES:
        guesses = [COMMON_MISTAKES[upper]]
    elif upper in babel.numbers.list_currencies():
        guesses = _successors(upper)
    else:
        close = difflib.get_close_matches(upper, sorted(currencies_in_use()), n=3, cutoff=0.6)
        guesses = sorted(close, key=lambda g: sorted(g) != sorted(upper))[:2]  # "UDS": USD (its letters) first
    named = [f"{g!r} ({babel.numbers.get_currency_name(g, locale=DEFAULT_LOCALE)})" for g in guesses]
    return f"; did you mean {' or '.join(named)}?" if named else ""


def check_currency_code(code: object, what: str = "currency") -> str:
    """``code`` if it is the ISO 4217 code of a currency in use today, else MoneyError naming ``what`` and the fix.

    Codes are written in capitals: ``"cny"`` is refused with "write it 'CNY'", so
    that the hub, the service and the ledger all spell a currency one way.
    """
    if not isinstance(code, str) or not (len(code) == 3 and code.isascii() and code.isalpha()):
        hint = _code_hint(code) if isinstance(code, str) and code.upper() in COMMON_MISTAKES else ""
        raise MoneyError(f"{what} must be a three-letter ISO 4217 code such as 'CNY' or 'USD', got {code!r}{hint}")
    upper = code.upper()
    if upper in currencies_in_use():
        if code != upper:
            raise MoneyError(f"{what} is an ISO 4217 code, written in capitals: use {upper!r}, not {code!r}")
        return code
    if upper in babel.numbers.list_currencies():
        name = babel.numbers.get_currency_name(upper, locale=DEFAULT_LOCALE)
        if not _successors(upper):  # never a territory's money: a fund, a metal or a test code
            raise MoneyError(f"{what} {code!r} ({name}) is an ISO 4217 code, but not of a currency in use")
        raise MoneyError(f"{what} {code!r} ({name}) is a former ISO 4217 currency, not in use today{_code_hint(upper)}")
    raise MoneyError(f"{what} {code!r} is not an ISO 4217 currency code{_code_hint(upper)}")


def check_currency_symbol(symbol: object, what: str = "currency_symbol") -> str | None:
    """An admin's currency symbol (``"¥"``, ``"RMB "``), None for the locale's own, or MoneyError."""
    if symbol is None or symbol == "":
        return None
    if not isinstance(symbol, str):
        raise MoneyError(f"{what} must be a string such as '¥', got {symbol!r}")
    if len(symbol) > MAX_SYMBOL_LENGTH or not symbol.strip() or not symbol.isprintable():
        raise MoneyError(
            f"{what} must be 1 to {MAX_SYMBOL_LENGTH} printable characters such as '¥' or 'RMB ', got {symbol!r}"
        )
    return symbol


@functools.cache
def babel_locale(name: str) -> Locale:
    """A Babel locale from ``"en"``, ``"zh-CN"`` or ``"zh_CN"``; English when the name is unknown."""
    try:
        return Locale.parse(name.replace("-", "_"))
    except (UnknownLocaleError, ValueError, TypeError):
        return Locale.parse(DEFAULT_LOCALE)


@functools.cache
def _pattern(locale: str, places: int):
    """The locale's currency pattern with exactly ``places`` decimals."""
    pattern = copy.copy(babel_locale(locale).currency_formats["standard"])
    pattern.frac_prec = (places, places)
    return pattern


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 code and the admin's symbol (None: each locale shows its own, as Babel writes it)."""

    code: str
    symbol: str | None = None

    @classmethod
    def from_config(cls, code: str, symbol: str | None = None, what: str = "currency") -> Currency:
        """Build a currency from a code (``"CNY"``) and an optional symbol; MoneyError names ``what`` and the fix."""
        code = check_currency_code(code, what)
        return cls(code=code, symbol=check_currency_symbol(symbol, f"{what}_symbol"))

    @property
    def minor_digits(self) -> int:
        """Decimals of the currency's minor unit: 2 for CNY and USD, 0 for JPY, 3 for BHD."""
        return babel.numbers.get_currency_precision(self.code)

    def symbol_in(self, locale: str = DEFAULT_LOCALE) -> str:
        """The symbol shown in ``locale``: the admin's, else the locale's (``CN¥`` in English, ``¥`` in Chinese)."""
        return (
            self.symbol
            if self.symbol is not None
            else babel.numbers.get_currency_symbol(self.code, babel_locale(locale))
        )

    def name(self, locale: str = DEFAULT_LOCALE) -> str:
        """The currency's name in ``locale`` ("Chinese Yuan", "人民币")."""
        return babel.numbers.get_currency_name(self.code, locale=babel_locale(locale))

    def format(self, amount: Decimal, places: int | None = None, locale: str = DEFAULT_LOCALE) -> str:
        """``CN¥0.05`` (``¥0.05`` in zh-CN): the amount rounded half-up to ``places`` for display only."""
        places = self.minor_digits if places is None else places
        shown = Decimal(amount).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        if shown == 0:
            shown = abs(shown)  # never "-¥0.00"
        pattern = _pattern(locale, places)
        if self.symbol is None:
            return pattern.apply(shown, babel_locale(locale), currency=self.code, currency_digits=False)
        return pattern.apply(shown, babel_locale(locale), currency_digits=False).replace("¤", self.symbol).strip()

    def format_rate(self, rate: Decimal, locale: str = DEFAULT_LOCALE) -> str:
        """A per-minute rate: minor units, or more digits (up to six) when the rate needs them."""
        places = self.minor_digits
        exponent = Decimal(rate).normalize().as_tuple().exponent
        if isinstance(exponent, int) and -exponent > places:
            places = min(-exponent, RATE_PLACES)
        return self.format(rate, places, locale)


def parse_amount(value: object, what: str = "amount") -> Decimal:
    """A non-negative Decimal from a decimal string or an int; floats are refused."""
    if isinstance(value, bool) or isinstance(value, float):
        raise MoneyError(
            f"{what} must be a decimal string such as '3.00' (not the float {value!r}: money is never a float)"
        )
    if isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, Decimal):
        amount = value
    elif isinstance(value, str):
        try:
            amount = Decimal(value.strip())
        except InvalidOperation:
            raise MoneyError(f"{what} must be a decimal number such as '3.00', got {value!r}") from None
    else:
        raise MoneyError(f"{what} must be a decimal string such as '3.00', got {value!r}")
    if not amount.is_finite():
        raise MoneyError(f"{what} must be a finite number, got {value!r}")
    if amount < 0:
        raise MoneyError(f"{what} must not be negative, got {value!r}")
    if amount >= MAX_AMOUNT:
        raise MoneyError(f"{what} must be less than {MAX_AMOUNT:,}, got {value!r}")
    return amount


def _plain(value: Decimal) -> Decimal:
    """``value`` without trailing zeros and never in exponent form (``10``, not ``1E+1``)."""
    value = value.normalize()
    exponent = value.as_tuple().exponent
    return value.quantize(Decimal(1)) if isinstance(exponent, int) and exponent > 0 else value


#: An hourly price is exact per minute when it is a whole number of these micro-units (60 × 0.000001).
_EXACT_HOURLY_MICROS = 60


def exact_prices_near(
    price: Decimal, per: int = 1, plus: Decimal = Decimal(0), places: int = RATE_PLACES
) -> tuple[Decimal | None, Decimal | None]:
    """The nearest prices ``p`` below and above ``price`` with ``places`` decimals whose ``per × p + plus`` is exact.

    Exact means a whole number of 0.000001 per minute, as :func:`rate_per_minute`
    needs. ``per`` is the GPU count a price per GPU-hour is multiplied by, ``plus``
    the rest of the hourly price. None where there is none (below: a price above 0).
    """
    step = 10 ** (RATE_PLACES - places)  # micro-units of one step at ``places`` decimals
    rest = plus * MICROS
    if rest != rest.to_integral_value():
        return None, None
    rest = int(rest)
    units = price * MICROS / step

    def exact(n: int) -> bool:
        return (per * n * step + rest) % _EXACT_HOURLY_MICROS == 0

    # per × n × step mod 60 repeats within 60 steps: a solution, if any, is at most 60 steps away
    low = int(units.to_integral_value(rounding=ROUND_FLOOR))
    high = int(units.to_integral_value(rounding=ROUND_CEILING))
    below = next((n for n in range(low, max(low - 61, 0), -1) if n > 0 and exact(n) and n < units), None)
    above = next((n for n in range(high, high + 61) if exact(n) and n > units), None)
    return tuple(None if n is None else _plain(Decimal(n * step) / MICROS) for n in (below, above))


def price_advice(price: Decimal, per: int = 1, plus: Decimal = Decimal(0), minor_digits: int = 2) -> str:
    """What to write instead of an inexact price: ``use 0.99996 or 1.00002, or a round price such as 0.99 or 1.02``.

    The one place that words the suggestion, for configured profiles, admins' price
    edits and :func:`rate_per_minute`: the nearest exact prices, then the nearest
    exact ones at the currency's minor unit (``minor_digits``).
    """
    nearest = [p for p in exact_prices_near(price, per, plus) if p is not None]
    rounded = [p for p in exact_prices_near(price, per, plus, minor_digits) if p is not None and p not in nearest]
    if not nearest:
        return "change the other price of the profile so that the hourly total is divisible by 60 at six places"
    text = f"use {' or '.join(f'{p:f}' for p in nearest)}"
    if rounded and minor_digits < RATE_PLACES:
        text += f", or a round price such as {' or '.join(f'{p:.{minor_digits}f}' for p in rounded)}"
    return text


def _not_exact(hourly: Decimal, rate: Decimal) -> str:
    return f"{hourly:f}/hour is not a whole number of {_RATE_QUANTUM} per minute ({hourly:f}/60 = {rate:.10f}...)"


def _rate_or_none(price_per_hour: Decimal) -> tuple[Decimal, bool]:
    """(the per-minute rate quantized to six places, whether that is exact)."""
    try:
        rate = price_per_hour / 60
        exact = rate.quantize(_RATE_QUANTUM)
    except InvalidOperation:  # more digits than the decimal context holds
        raise MoneyError(f"{price_per_hour:f}/hour is too large to be a price") from None
    return (exact, True) if exact * 60 == price_per_hour else (rate, False)


def rate_per_minute(price_per_hour: Decimal, minor_digits: int = 2) -> Decimal:
    """The exact per-minute rate of an hourly price, or MoneyError saying which prices would be exact."""
    rate, exact = _rate_or_none(price_per_hour)
    if not exact:
        raise MoneyError(
            f"{_not_exact(price_per_hour, rate)}; {price_advice(price_per_hour, 1, Decimal(0), minor_digits)}"
        )
    return _plain(rate)


#: No profile costs more than this per minute: a year of it stays far inside the ledger's 64-bit micro-units.
MAX_RATE_PER_MINUTE = Decimal(10) ** 6


def profile_rate(
    gpu_count: int, price_per_gpu_hour: Decimal, price_per_hour: Decimal, currency: Currency | None = None
) -> Decimal:
    """The one rate of a profile: ``(gpu_count × price per GPU-hour + price per hour) / 60``, exact, per minute.

    The spawner (configured and admin-edited profiles) and the service (``GET
    pricing``, the admin form's check) all price a profile with this function, so
    that what is shown is what is charged. MoneyError when the rate is not exact
    to six places (naming the field to change and the nearest exact prices, at six
    places and at the ``currency``'s minor unit) or more than ``MAX_RATE_PER_MINUTE``.
    """
    hourly = price_per_gpu_hour * gpu_count + price_per_hour
    rate, exact = _rate_or_none(hourly)
    if not exact:
        digits = currency.minor_digits if currency is not None else 2
        flat = f"{price_per_hour:f}"
        if gpu_count and exact_prices_near(price_per_gpu_hour, gpu_count, price_per_hour) != (None, None):
            total = f"{price_per_gpu_hour:f}/hour" if gpu_count == 1 else f"{gpu_count} GPUs × {price_per_gpu_hour:f}"
            total += f" + price_per_hour {flat}" if price_per_hour else ""
            advice = price_advice(price_per_gpu_hour, gpu_count, price_per_hour, digits)
            field = "price_per_gpu_hour"
        else:
            field, plus = "price_per_hour", price_per_gpu_hour * gpu_count
            total = f"{flat}/hour" + (f" + {gpu_count} GPUs × {price_per_gpu_hour:f}" if plus else "")
            advice = price_advice(price_per_hour, 1, plus, digits)
        if total != f"{hourly:f}/hour":
            total += f" = {hourly:f}/hour"
        reason = _not_exact(hourly, rate).replace(f"{hourly:f}/hour", total, 1)
        raise MoneyError(f"{field}: {reason}; {advice}")
    if rate > MAX_RATE_PER_MINUTE:
        raise MoneyError(f"{hourly:f}/hour is more than {MAX_RATE_PER_MINUTE:,f} per minute, too large to be a price")
    return _plain(rate)
