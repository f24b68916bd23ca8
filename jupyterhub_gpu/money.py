"""The one money type: prices, rates and amounts as :class:`decimal.Decimal`, stored as integer micro-units.

Money is never a float. Prices come from configuration as decimal strings
(``"3.00"``) or integers; a float is refused because ``0.1 + 0.2`` is not
``0.3``. A rate per minute must be exact to six decimal places, so that
charging ``n`` minutes is an exact multiplication with no rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation

#: Rates per minute are kept exact to this many decimal places.
RATE_PLACES = 6
_RATE_QUANTUM = Decimal(1).scaleb(-RATE_PLACES)
#: Micro-units per currency unit: the ledger keeps every amount as an integer of millionths.
MICROS = 1_000_000
#: No single price or amount reaches this (it would overflow the arithmetic of a bill).
MAX_AMOUNT = Decimal(10) ** 15

#: Symbols and minor-unit digits of common currencies; others take their code.
KNOWN_CURRENCIES: dict[str, tuple[str, int]] = {
    "CNY": ("¥", 2),
    "USD": ("$", 2),
    "EUR": ("€", 2),
    "GBP": ("£", 2),
    "JPY": ("¥", 0),
    "KRW": ("₩", 0),
    "HKD": ("HK$", 2),
    "TWD": ("NT$", 2),
    "SGD": ("S$", 2),
    "INR": ("₹", 2),
    "CHF": ("CHF ", 2),
    "AUD": ("A$", 2),
    "CAD": ("C$", 2),
}


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


@dataclass(frozen=True)
class Currency:
    """An ISO 4217 code, the symbol shown to users, and its minor-unit digits."""

    code: str
    symbol: str
    minor_digits: int = 2

    @classmethod
    def from_config(cls, code: str, symbol: str | None = None) -> Currency:
        """Build a currency from a code (``"CNY"``) and an optional symbol."""
        if not isinstance(code, str) or not (len(code) == 3 and code.isascii() and code.isalpha()):
            raise MoneyError(f"currency must be a three-letter ISO 4217 code such as 'CNY' or 'USD', got {code!r}")
        code = code.upper()
        known_symbol, digits = KNOWN_CURRENCIES.get(code, (code + " ", 2))
        if symbol is not None and not isinstance(symbol, str):
            raise MoneyError(f"currency symbol must be a string, got {symbol!r}")
        return cls(code=code, symbol=symbol or known_symbol, minor_digits=digits)

    def format(self, amount: Decimal, places: int | None = None) -> str:
        """``¥0.05``: the amount rounded half-up for display only."""
        places = self.minor_digits if places is None else places
        quantum = Decimal(1).scaleb(-places)
        shown = amount.quantize(quantum, rounding="ROUND_HALF_UP")
        sign = "-" if shown < 0 else ""
        return f"{sign}{self.symbol}{abs(shown):,.{places}f}"

    def format_rate(self, rate: Decimal) -> str:
        """A per-minute rate: minor units, or more digits when the rate needs them."""
        places = self.minor_digits
        normal = rate.normalize()
        exponent = normal.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > places:
            places = min(-exponent, RATE_PLACES)
        return self.format(rate, places)


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


def rate_per_minute(price_per_hour: Decimal) -> Decimal:
    """The exact per-minute rate of an hourly price, or MoneyError if it is not exact."""
    try:
        rate = price_per_hour / 60
        exact = rate.quantize(_RATE_QUANTUM)
    except InvalidOperation:  # more digits than the decimal context holds
        raise MoneyError(f"{price_per_hour:f}/hour is too large to be a price") from None
    if exact * 60 != price_per_hour:
        nearest = {
            _plain(rate.quantize(_RATE_QUANTUM, rounding=rounding) * 60) for rounding in (ROUND_FLOOR, ROUND_CEILING)
        }
        suggestions = " or ".join(f"{p:f}" for p in sorted(nearest) if p > 0)
        raise MoneyError(
            f"{price_per_hour:f}/hour is not a whole number of {_RATE_QUANTUM} per minute"
            f" ({price_per_hour:f}/60 = {rate:.10f}...); choose an hourly price divisible by 60"
            f" at {RATE_PLACES} decimal places, e.g. {suggestions}"
        )
    return _plain(exact)


#: No profile costs more than this per minute: a year of it stays far inside the ledger's 64-bit micro-units.
MAX_RATE_PER_MINUTE = Decimal(10) ** 6


def profile_rate(gpu_count: int, price_per_gpu_hour: Decimal, price_per_hour: Decimal) -> Decimal:
    """The one rate of a profile: ``(gpu_count × price per GPU-hour + price per hour) / 60``, exact, per minute.

    The spawner (configured and admin-edited profiles) and the service (``GET
    pricing``, the admin form's check) all price a profile with this function, so
    that what is shown is what is charged. MoneyError when the rate is not exact
    to six places or more than ``MAX_RATE_PER_MINUTE``.
    """
    hourly = price_per_gpu_hour * gpu_count + price_per_hour
    rate = rate_per_minute(hourly)
    if rate > MAX_RATE_PER_MINUTE:
        raise MoneyError(f"{hourly:f}/hour is more than {MAX_RATE_PER_MINUTE:,f} per minute, too large to be a price")
    return rate
