"""Each stop order the hub gives is told once, and each withdrawal of one is told once, in words that are true.

The hub's scheduler derives its orders again every cycle (docs/scheduling.md, "Orders: derived again every
cycle"): an order can be withdrawn and then given again for the same time, and withdrawn again. The real tick
step (:func:`enforce_schedule`) runs against a real sqlite ledger, the real gateway (Lab notices in the ledger)
and the real hub client talking to a stand-in of the hub's REST API; the clock is moved, never waited for.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import update

from jupyterhub_gpu.ledger.models import ScheduleOrder
from jupyterhub_gpu.ledger.queries.schedule import (
    PREEMPTED,
    RESERVED,
    Draft,
    add_reservation,
    delete_reservation,
    order_stop,
    stop_orders,
    withdraw_order,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.schedule import withdrawn_message
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import ScheduleFollow
from tests.service.conftest import WebhookServer
from tests.unit.service.test_schedule_orders import (
    END_VALUES,
    PRICING,
    SHANGHAI,
    T0,
    HubDouble,
    notices,
    order,
    start,
    tick,
)


@pytest.fixture
def hub():
    server = HubDouble()
    yield server
    server.close()


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ledger.set_pricing(PRICING, "CNY", T0 - timedelta(days=1))
    yield ledger
    ledger.close()


@pytest.fixture
def notifier(ledger):
    webhook = WebhookServer()
    notifier = Notifier(ledger, AlertSettings(webhook_url=webhook.url), stored=False)
    yield notifier
    notifier.close()
    webhook.close()


OFF = "The stop of this server at 13:02 is off: the GPU is no longer needed."


def at(seconds: int):
    return T0 + timedelta(seconds=seconds)


def forget_mark(ledger, **columns):
    """As if the service had died after sending, before it marked the order (its claims in ``gpu_alerts`` stay)."""
    with ledger.Session() as db:
        db.execute(update(ScheduleOrder).values(**columns))
        db.commit()


def test_an_order_withdrawn_then_given_again_for_the_same_time_is_told_again(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session)  # given at 13:00, to stop at 13:02
    assert tick(ledger, hub, notifier, at(1))["noticed"] == ["s1"]
    assert withdraw_order(ledger, "s1", at(10), not_before=at(10))
    assert tick(ledger, hub, notifier, at(20))["withdrawn"] == ["s1"]
    assert order(ledger, session, now=at(30))  # the same stop at 13:02, given again
    assert tick(ledger, hub, notifier, at(40))["noticed"] == ["s1"]
    assert len(notices(ledger)) == 3 and notices(ledger)[-1].startswith("This server will be stopped at 13:0")
    assert withdraw_order(ledger, "s1", at(50), not_before=at(50))
    assert tick(ledger, hub, notifier, at(60))["withdrawn"] == ["s1"]
    assert notices(ledger)[1] == notices(ledger)[3] == OFF and len(notices(ledger)) == 4
    assert tick(ledger, hub, notifier, at(300))["stopped"] == [] and hub.requests == []


def test_a_restarted_service_never_tells_an_order_or_its_withdrawal_twice(ledger, hub, notifier):
    session = start(ledger)
    order(ledger, session)
    tick(ledger, hub, notifier, at(1))
    forget_mark(ledger, noticed_at=None)  # told, not marked: a new service reads it as not told
    again = Notifier(ledger, AlertSettings(), stored=False)
    try:
        assert tick(ledger, hub, again, at(20), ScheduleFollow())["noticed"] == ["s1"]
        assert len(notices(ledger)) == 1
        assert withdraw_order(ledger, "s1", at(30), not_before=at(30))
        tick(ledger, hub, again, at(40))
        forget_mark(ledger, done_at=None)  # told it is off, not marked done
        assert tick(ledger, hub, notifier, at(50), ScheduleFollow())["withdrawn"] == ["s1"]
        assert notices(ledger) == [notices(ledger)[0], OFF]
    finally:
        again.close()


# -- the words of a withdrawal ---------------------------------------------------------------------------------


def test_a_reservation_end_no_longer_needed_does_not_say_the_booking_was_cancelled(ledger, hub, notifier):
    """A T4 freed for the class (another student stopped): the booking stands, and the words say so."""
    booking = add_reservation(
        ledger,
        Draft("cs231n", "T4", 4, T0 + timedelta(hours=1), T0 + timedelta(hours=3), note="CS231N"),
        lambda _: None,
        SHANGHAI,
        T0,
        "prof",
    )
    session = start(ledger)
    cause = f"reservation:{booking.id}"
    order_stop(ledger, session, RESERVED, T0 + timedelta(minutes=55), "end", END_VALUES, T0, cause=cause)
    tick(ledger, hub, notifier, at(1))
    assert withdraw_order(ledger, "s1", at(10), not_before=at(10))
    assert tick(ledger, hub, notifier, at(20))["withdrawn"] == ["s1"]
    assert notices(ledger)[-1] == (
        "The stop of this server at 13:55 is off: the class reservation no longer needs its GPU."
    )
    assert "cancelled" not in notices(ledger)[-1]


def test_a_reservation_end_withdrawn_because_the_booking_was_cancelled_says_so(ledger, hub, notifier):
    booking = add_reservation(
        ledger,
        Draft("cs231n", "T4", 4, T0 + timedelta(hours=1), T0 + timedelta(hours=3), note="CS231N"),
        lambda _: None,
        SHANGHAI,
        T0,
        "prof",
    )
    session = start(ledger, sid="s-li", user="li", server="exp")
    cause = f"reservation:{booking.id}"
    order_stop(ledger, session, RESERVED, T0 + timedelta(minutes=55), "end", END_VALUES, T0, cause=cause)
    tick(ledger, hub, notifier, at(1))
    assert delete_reservation(ledger, booking.id)
    assert withdraw_order(ledger, "s-li", at(10), not_before=at(10))
    assert tick(ledger, hub, notifier, at(20))["withdrawn"] == ["s-li"]
    assert notices(ledger, "li")[-1] == "此服务器原定于 13:55 的停止已取消：该课程预留已被取消。"
    assert stop_orders(ledger) == []


def test_each_withdrawal_cause_exists_in_english_and_chinese():
    for kind, cancelled, english, chinese in (
        (PREEMPTED, False, "is off: the GPU is no longer needed.", "不再需要其 GPU"),
        (RESERVED, False, "is off: the class reservation no longer needs its GPU.", "课程预留不再需要其 GPU"),
        (RESERVED, True, "is off: the class booking was cancelled.", "该课程预留已被取消"),
    ):
        stop = SimpleNamespace(session_id="s1", user="alice", server_name="", kind=kind, stop_at=T0 + timedelta(days=1))
        en = withdrawn_message(stop, SHANGHAI, T0, AlertSettings(), cancelled=cancelled)
        zh = en.worded("zh-CN")
        assert en.text == f"The stop of this server at Wed 2 Dec 13:00 {english}" and chinese in zh.text
        assert not any("\u4e00" <= c <= "\u9fff" for c in en.text + en.subject)
