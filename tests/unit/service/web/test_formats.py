"""What the pages and the API write of money and time: the reader's date format, a session's own currency."""

from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.web.pages.series import day_text, moment_text
from jupyterhub_gpu.service.web.views import currency_of

SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize(
    ("lang", "day", "moment"),
    [
        ("en", "Nov 1, 2026", "Nov 1, 2026 08:05"),
        ("zh-CN", "2026年11月1日", "2026年11月1日 08:05"),
        ("xx", "Nov 1, 2026", "Nov 1, 2026 08:05"),  # a language Babel does not know: English
    ],
)
def test_days_and_moments_in_the_readers_format_and_the_labs_time_zone(lang, day, moment):
    assert day_text(date(2026, 11, 1), lang) == day
    # 00:05 UTC is 08:05 in Shanghai
    assert moment_text(datetime(2026, 11, 1, 0, 5, tzinfo=timezone.utc), SHANGHAI, lang) == moment


def test_a_moment_just_before_local_midnight_is_on_its_local_day():
    assert moment_text(datetime(2026, 11, 30, 15, 59, tzinfo=timezone.utc), SHANGHAI, "en") == "Nov 30, 2026 23:59"
    assert moment_text(datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc), SHANGHAI, "en") == "Dec 1, 2026 00:00"


def test_an_amount_is_shown_in_the_currency_it_was_charged_in():
    lab = Currency.from_config("CNY", "¥")
    assert currency_of("CNY", lab) is lab  # the admin's symbol
    assert currency_of("USD", lab).format_rate(1) == "$1.00"  # charged before the lab changed its currency
    assert currency_of("usd", lab).format(1) == "usd 1.00"  # a code stored before codes were checked
