"""The lab's settings, one source of truth: the currency, its symbol and the time zone, as the hub publishes them.

The hub's spawner (``c.GPUDockerSpawner.currency``, ``currency_symbol``,
``budget_timezone``) prices and records every session, so its values are the
lab's: the hub publishes them to the ledger when it starts
(:func:`published_rows`, ``Ledger.set_lab_settings``), and the gpu service takes
them at its start (:func:`agree`). A service option that is not set takes the
hub's value; one that is set and says otherwise stops the service with a message
naming both values and where each is set, so that an amount is never shown in
one currency on a page and charged in another.

A managed service always finds them: JupyterHub (6.1, ``JupyterHub.initialize``)
runs ``init_spawners``, where the hub publishes before loading any spawner
(:mod:`.spawners.startup`), and starts its managed services only later, in
``JupyterHub.start``. Only where the hub has never published (no ``ledger_db_url``
on the spawner, or an unmanaged service started before its hub's first start)
does the service run on its own options, with a warning; it compares on every
tick and stops when the hub publishes others, so that its restart takes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub_gpu.money import Currency, MoneyError, check_currency_symbol

CURRENCY = "currency"
SYMBOL = "currency_symbol"
TIMEZONE = "timezone"
#: Every published setting, in the order messages name them.
NAMES = (CURRENCY, SYMBOL, TIMEZONE)
#: The spawner's option for each setting, and the service's.
SPAWNER_OPTIONS = {CURRENCY: "currency", SYMBOL: "currency_symbol", TIMEZONE: "budget_timezone"}
SERVICE_OPTIONS = {CURRENCY: "currency", SYMBOL: "currency_symbol", TIMEZONE: "timezone"}
#: The defaults of both sides' options ("" for the symbol: each locale's own).
DEFAULTS = {CURRENCY: "USD", SYMBOL: "", TIMEZONE: "UTC"}
#: The published row that says where a setting was set: ``currency.source``.
SOURCE = ".source"
#: Published beside them, not compared: the spawner's ``budget_min_minutes``, with which the gpu service checks
#: a restart on another profile as the spawn's budget check will (rules/moves.py).
MIN_MINUTES = "budget_min_minutes"


class LabSettingsError(ValueError):
    """The service's settings disagree with what the hub published (the message names both and the fix)."""


def option_source(spawner_class: type, config, name: str) -> str:
    """Where the hub's config sets a spawner option: ``c.GPUDockerSpawner.currency``, or its default."""
    option = SPAWNER_OPTIONS[name]
    for cls in spawner_class.__mro__:
        section = config.get(cls.__name__) if hasattr(config, "get") else None
        if section is not None and hasattr(section, "keys") and option in section.keys():
            return f"c.{cls.__name__}.{option}"
    return f"the default of c.{spawner_class.__name__}.{option}"


def published_rows(values: dict[str, str | None], sources: dict[str, str]) -> dict[str, str]:
    """What the hub writes with ``Ledger.set_lab_settings``: each setting and where it is set (``NAME.source``)."""
    rows = {}
    for name in NAMES:
        rows[name] = values.get(name) or ""
        rows[name + SOURCE] = sources.get(name, "")
    return rows


@dataclass
class Agreement:
    """The settings the service runs with, the conflicts that stop it, and what it should warn of."""

    settings: dict[str, str]
    conflicts: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def currency(self) -> Currency:
        return Currency.from_config(self.settings[CURRENCY], self.settings[SYMBOL] or None)

    @property
    def timezone(self) -> ZoneInfo:
        return ZoneInfo(self.settings[TIMEZONE])


def _check(name: str, value: str, what: str) -> None:
    """MoneyError / LabSettingsError when a published or configured value cannot be used."""
    if name == CURRENCY:
        Currency.from_config(value, what=what)
    elif name == SYMBOL:
        check_currency_symbol(value, what)
    else:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise LabSettingsError(f"{what} must be an IANA time zone such as 'Asia/Shanghai', got {value!r}") from None


def agree(own: dict[str, str | None], hub: dict[str, str], service: str = "GPUService") -> Agreement:
    """The service's settings from its own options (None: not set) and the hub's published ones (may be empty).

    An option the service does not set takes the hub's value; one it sets must equal
    the hub's, else a conflict naming both values, where each is set, and the fix.
    Nothing published: the service's own options, or the defaults, with a warning.
    """
    settings, conflicts, warnings = {}, [], []
    if not hub.get(CURRENCY):
        chosen = {n: own.get(n) if own.get(n) is not None else DEFAULTS[n] for n in NAMES}
        shown = ", ".join(f"{n} {chosen[n]!r}" for n in NAMES if chosen[n])
        warnings.append(
            "the hub has not published the lab's currency and time zone to this ledger yet (it does each time it"
            " starts with the spawner's ledger_db_url set to this database): the service runs on its own"
            f" {service} options ({shown}) until it does, and stops if the hub then publishes others"
        )
        return Agreement(chosen, conflicts, warnings)
    for name in NAMES:
        theirs = hub.get(name, "")
        source = hub.get(name + SOURCE) or f"the hub's {SPAWNER_OPTIONS[name]}"
        mine = own.get(name)
        option = f"{service}.{SERVICE_OPTIONS[name]}"
        if mine is None or (mine or "") == theirs:
            settings[name] = theirs
            continue
        spawner_option = source.removeprefix("the default of ")
        conflicts.append(
            f"{option} is {mine!r} but the hub's spawner publishes {theirs!r} ({source}): set one of them"
            f" ({spawner_option} = {mine!r} in the hub's config), or remove {option} so the service takes the hub's"
        )
        settings[name] = theirs
    if not conflicts:
        for name in NAMES:
            try:
                if settings[name] or name != SYMBOL:
                    _check(name, settings[name], f"the hub's published {name}")
            except (MoneyError, LabSettingsError) as e:
                conflicts.append(f"{e} (written by {hub.get(name + SOURCE) or 'the hub'}; restart the hub to publish)")
    return Agreement(settings, conflicts, warnings)


def changed(running: dict[str, str], hub: dict[str, str]) -> list[str]:
    """The settings the hub now publishes otherwise than the service runs with (``"currency 'CNY' -> 'USD'"``)."""
    if not hub.get(CURRENCY):
        return []
    return [
        f"{name} {running.get(name, '')!r} -> {hub.get(name, '')!r}"
        for name in NAMES
        if (running.get(name) or "") != (hub.get(name) or "")
    ]


def other_currencies_warning(currency: str, sessions_by_currency: dict[str, int], where: str) -> str | None:
    """A warning when the ledger holds sessions charged in currencies other than the lab's ``currency``, or None.

    Each session keeps the currency it was charged in (pages and reports show it in
    that currency, and sum only the lab's); a money budget's limit and spend are plain
    amounts, read in the lab's currency now.
    """
    others = {code: n for code, n in sorted(sessions_by_currency.items()) if code != currency and n}
    if not others:
        return None
    listed = ", ".join(f"{n} in {code}" for code, n in others.items())
    return (
        f"{where} is {currency!r} but the ledger already holds sessions charged in another currency ({listed}):"
        f" those keep their currency on the pages and in reports, whose totals in {currency} leave them out;"
        f" but money budgets count every session's charge at face value, whatever its currency, and their"
        f" limits are now read as {currency}."
        f" If the change is a mistake, set {where} back; if it is meant, check the budgets"
        " (jupyterhub-gpu budget list) and set them again in the new currency"
    )
