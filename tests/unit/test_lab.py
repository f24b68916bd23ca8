"""The lab's settings: what the hub publishes, how the service agrees with it, and the currency-change warning."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest
from traitlets.config import Config

from jupyterhub_gpu import lab
from jupyterhub_gpu.money import Currency

HUB = {
    "currency": "CNY",
    "currency.source": "c.GPUDockerSpawner.currency",
    "currency_symbol": "",
    "currency_symbol.source": "the default of c.GPUDockerSpawner.currency_symbol",
    "timezone": "Asia/Shanghai",
    "timezone.source": "c.GPUDockerSpawner.budget_timezone",
}
UNSET = {"currency": None, "currency_symbol": None, "timezone": None}


class Spawner:
    pass


class GPUDockerSpawner(Spawner):
    pass


def test_option_source_names_the_config_section_that_sets_it():
    config = Config()
    config.Spawner.budget_timezone = "Asia/Shanghai"
    config.GPUDockerSpawner.currency = "CNY"
    assert lab.option_source(GPUDockerSpawner, config, "currency") == "c.GPUDockerSpawner.currency"
    assert lab.option_source(GPUDockerSpawner, config, "timezone") == "c.Spawner.budget_timezone"
    assert lab.option_source(GPUDockerSpawner, config, "currency_symbol") == (
        "the default of c.GPUDockerSpawner.currency_symbol"
    )
    assert "Other" not in config  # looking did not add a section


def test_published_rows_hold_each_value_and_its_source():
    rows = lab.published_rows(
        {"currency": "CNY", "currency_symbol": None, "timezone": "UTC"}, {"currency": "c.X.currency"}
    )
    assert rows == {
        "currency": "CNY",
        "currency.source": "c.X.currency",
        "currency_symbol": "",
        "currency_symbol.source": "",
        "timezone": "UTC",
        "timezone.source": "",
    }


def test_an_unset_service_takes_the_hubs_settings():
    agreement = lab.agree(UNSET, HUB)
    assert not agreement.conflicts and not agreement.warnings
    assert agreement.currency == Currency("CNY", None)
    assert agreement.timezone == ZoneInfo("Asia/Shanghai")


def test_a_service_that_says_the_same_agrees():
    agreement = lab.agree({"currency": "CNY", "currency_symbol": None, "timezone": "Asia/Shanghai"}, HUB)
    assert not agreement.conflicts and agreement.settings["currency"] == "CNY"


def test_a_service_that_says_otherwise_is_refused_naming_both_and_where():
    agreement = lab.agree({"currency": "USD", "currency_symbol": "$", "timezone": None}, HUB)
    assert agreement.conflicts == [
        "GPUService.currency is 'USD' but the hub's spawner publishes 'CNY' (c.GPUDockerSpawner.currency):"
        " set one of them (c.GPUDockerSpawner.currency = 'USD' in the hub's config), or remove"
        " GPUService.currency so the service takes the hub's",
        "GPUService.currency_symbol is '$' but the hub's spawner publishes '' (the default of"
        " c.GPUDockerSpawner.currency_symbol): set one of them (c.GPUDockerSpawner.currency_symbol = '$' in"
        " the hub's config), or remove GPUService.currency_symbol so the service takes the hub's",
    ]


def test_a_time_zone_that_differs_is_refused():
    (conflict,) = lab.agree({**UNSET, "timezone": "UTC"}, HUB).conflicts
    assert conflict.startswith("GPUService.timezone is 'UTC' but the hub's spawner publishes 'Asia/Shanghai'")
    assert "c.GPUDockerSpawner.budget_timezone" in conflict


def test_nothing_published_runs_on_the_services_own_settings_with_a_warning():
    agreement = lab.agree({**UNSET, "currency": "EUR"}, {})
    assert agreement.settings == {"currency": "EUR", "currency_symbol": "", "timezone": "UTC"}
    assert not agreement.conflicts
    (warning,) = agreement.warnings
    assert "has not published" in warning and "currency 'EUR'" in warning and "timezone 'UTC'" in warning


def test_a_published_value_that_cannot_be_used_is_a_conflict():
    (conflict,) = lab.agree(UNSET, {**HUB, "timezone": "Mars/Olympus"}).conflicts
    assert "Mars/Olympus" in conflict and "restart the hub" in conflict
    (conflict,) = lab.agree(UNSET, {**HUB, "currency": "RMB"}).conflicts
    assert "did you mean 'CNY'" in conflict


def test_changed_lists_what_the_hub_now_publishes_otherwise():
    running = lab.agree(UNSET, HUB).settings
    assert lab.changed(running, HUB) == []
    assert lab.changed(running, {**HUB, "currency": "USD"}) == ["currency 'CNY' -> 'USD'"]
    assert lab.changed(running, {}) == []  # nothing published (yet): nothing to compare


@pytest.mark.parametrize(
    ("counts", "warned"), [({}, False), ({"CNY": 4}, False), ({"CNY": 4, "USD": 0}, False), ({"USD": 2}, True)]
)
def test_other_currencies_warning(counts, warned):
    warning = lab.other_currencies_warning("CNY", counts, "c.GPUDockerSpawner.currency")
    assert (warning is not None) == warned
    if warned:
        assert warning.startswith(
            "c.GPUDockerSpawner.currency is 'CNY' but the ledger already holds sessions charged in another currency"
            " (2 in USD)"
        )
        assert "money budgets count every session's charge at face value" in warning
