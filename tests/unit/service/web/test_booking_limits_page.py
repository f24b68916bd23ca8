"""The group page's booking form under the booking limits (docs/scheduling.md, "Booking limits"): it says them, in
English and Chinese, before an instructor books, and a booking the group's limits refuse shows the API's message
above the form as it was sent and stores nothing.
"""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.web.context import WebContext
from tests.unit.service.web.test_schedule_pages import (
    ADMIN,
    PREFIX,
    PROF,
    SHANGHAI,
    FakeAuth,
    FakeHub,
    booking_form,
    call,
    section,
    shown,
    tables,
)


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


@pytest.fixture
def ctx(ledger):
    return WebContext(
        ledger=ledger,
        hub=FakeHub(),
        hub_auth=FakeAuth(),
        tz=SHANGHAI,
        currency=Currency("CNY"),
        prefix=PREFIX,
        advice_settings=AdviceSettings(),
        max_concurrent_jobs=2,
        job_time_limit_minutes=60,
        job_time_limit_max_minutes=600,
        gpu_pool={"T4": 4, "A100": 2},
    )


def limits_note(page: str) -> str:
    return shown(re.search(r'id="booking-limits">([^<]*)<', page).group(1))


def test_the_booking_form_says_the_group_s_limits_in_english_and_chinese(ctx: WebContext):
    lab = replace(
        ctx, reservation_max_hours=6, reservation_max_gpu_hours_per_week=40, reservation_max_pool_fraction=0.5
    )
    assert limits_note(call(lab, PROF, "GET", PREFIX + "groups/cs231n").text) == (
        "An instructor books at least 24 hours ahead, and a group holds GPUs of a model for at most 6 hours without"
        " a break (its bookings less than 60 minutes apart count as one). At most 40 GPU-hours a week (Monday to"
        " Sunday) for the group, every model together. At most 50% of each model's GPUs at once. These limits count"
        " every booking of the group, each week of a weekly one; administrators are not limited."
    )
    assert limits_note(call(lab, PROF, "GET", PREFIX + "groups/cs231n?lang=zh-CN").text) == (
        "讲师须至少提前 24 小时预订；一个组连续占用同一型号 GPU 最长 6 小时"
        "（本组相隔不足 60 分钟的预订算作一次连续占用）。"
        "每组每周（周一至周日）合计最多 40 GPU 小时，所有型号一并计算。同一时刻最多占用每种型号 GPU 的 50%。"
        "这些限制计入本组的全部预订（每周重复的预订按每一周计算）；管理员不受限制。"
    )  # fmt: skip
    # a lab that sets none: today's limits, and nothing about weeks or shares of the pool
    assert limits_note(call(ctx, PROF, "GET", PREFIX + "groups/cs231n").text) == (
        "An instructor books at least 24 hours ahead, and a group holds GPUs of a model for at most 4 hours without"
        " a break (its bookings less than 60 minutes apart count as one). These limits count every booking of the"
        " group, each week of a weekly one; administrators are not limited."
    )


def test_a_booking_next_to_the_group_s_shows_the_hold_it_would_make_and_stores_nothing(ctx, ledger):
    assert call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", booking_form()).code == 303
    before = tables(ledger)
    form = booking_form(start="2026-12-08T16:00", end="2026-12-08T18:30", note="second half")
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", form)
    assert r.code == 409, r.text[:300]
    error = html.unescape(re.search(r'id="reservation-error" role="alert">([^<]*)<', r.text).group(1))
    assert error.startswith(
        "The reservation cannot be made: with cs231n's other T4 bookings (its reservation 1) it holds T4 GPUs"
        " without a break for 4.5 hours, Tue 8 Dec 2026 14:00–18:30, and an instructor may book at most 4 hours"
    ), error
    assert 'value="second half"' in section(r.text, "reservations")  # the form as it was sent
    assert tables(ledger) == before
    # an admin books it
    assert call(ctx, ADMIN, "POST", PREFIX + "groups/cs231n/reservations", form).code == 303


def test_a_refused_booking_is_worded_in_the_reader_s_language(ctx, ledger):
    """The page's reader reads why in their language: the refusal's problems are worded from their keys and values
    (a day, a window, the group's other bookings) by the reader's catalog, not sent in English."""
    assert call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", booking_form()).code == 303
    before = tables(ledger)
    form = booking_form(start="2026-12-08T16:00", end="2026-12-08T18:30", note="second half")
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations?lang=zh-CN", form)
    assert r.code == 409, r.text[:300]
    error = html.unescape(re.search(r'id="reservation-error" role="alert">([^<]*)<', r.text).group(1))
    assert error == (
        "无法进行此预留：连同 cs231n 的其他 T4 预订（其预留 1），它连续占用 T4 GPU 4.5 小时，"
        "2026年12月8日 周二 14:00–18:30，而讲师一次最多只能预订 4 小时（c.Scheduling.reservation_max_hours；"
        "同一组相隔不到 60 分钟的预订算作一次连续占用）；管理员可以预订更长的时段"
    ), error  # fmt: skip
    assert tables(ledger) == before
    # a booking the pool cannot hold: the scheduler's own problems, in Chinese too
    r = call(ctx, ADMIN, "POST", PREFIX + "groups/cs231n/reservations?lang=zh-CN", booking_form(count="5"))
    error = html.unescape(re.search(r'id="reservation-error" role="alert">([^<]*)<', r.text).group(1))
    assert error == "无法进行此预留：申请了 5 块 T4，但资源池只有 4 块", error
