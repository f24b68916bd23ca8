"""Budget alerts against real parts: an aiosmtpd SMTP server, local HTTP servers, a sqlite ledger.

Every channel but the Lab notice goes through Apprise: mail (``mailto://``, the deprecated ``smtp_*``
settings mapped onto it) to aiosmtpd, ``json://`` and ``form://`` to a local HTTP server, and a chat
service pointed at it (Mattermost's ``mmost://`` takes any host; DingTalk's fixed host is replaced by
the local server's for the test).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import threading
import time
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from aiosmtpd.smtp import AuthResult, LoginPassword
from apprise.plugins.dingtalk import NotifyDingTalk

from jupyterhub_gpu.billing import BudgetRule, BudgetStatus
from jupyterhub_gpu.ledger.queries.channels import add_channel
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service import channels, notify
from jupyterhub_gpu.service.channels import DEFAULT_USER_SCHEMES, ChannelError, configured_channel, describe
from jupyterhub_gpu.service.domain import alerts
from jupyterhub_gpu.service.domain.alerts import (
    BudgetAlert,
    alert_text,
    budget_message,
    budget_once,
    budget_payload,
    lab_text,
    recipients,
)
from jupyterhub_gpu.service.domain.notices import DEFAULT_EVENTS, EVENTS, AlertSettings, Message
from jupyterhub_gpu.service.notify import Notifier
from jupyterhub_gpu.service.tick import deliver
from tests.conftest import wait_for
from tests.service.conftest import SMTPServer, WebhookServer

CNY = Currency.from_config("CNY")
NOV = datetime(2026, 10, 31, 16, 0, tzinfo=timezone.utc)  # 1 November, Asia/Shanghai
DEC = datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc)
JAN = datetime(2026, 12, 31, 16, 0, tzinfo=timezone.utc)
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
SHANGHAI = ZoneInfo("Asia/Shanghai")
YUAN_80, YUAN_100 = CNY.format(Decimal("80.50")), CNY.format(Decimal(100))


def make_alert(**changes) -> BudgetAlert:
    alert = BudgetAlert(
        user="alice",
        groups=("cs231n", "nlp"),
        budget_key="user:alice",
        scope="user",
        subject="alice",
        threshold=80,
        used=Decimal("80.50"),
        limit=Decimal("100"),
        unit="money",
        period_start=NOV,
        period_end=DEC,
        currency=CNY,
        grace_seconds=300,
        tz=SHANGHAI,
    )
    return replace(alert, **changes)


def assert_no_floats(value, path="$"):
    assert not isinstance(value, float), f"float at {path}: {value!r}"
    if isinstance(value, dict):
        for k, v in value.items():
            assert_no_floats(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            assert_no_floats(v, f"{path}[{i}]")


# -- real servers --------------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger("sqlite:///" + str(tmp_path / "l.sqlite"))
    yield ledger
    ledger.close()


def all_channels(smtp_server, webhook, **changes) -> AlertSettings:
    settings = dict(
        smtp_host="127.0.0.1",
        smtp_port=smtp_server.port,
        mail_from="gpu@example.edu",
        user_email_template="{username}@example.edu",
        instructor_emails={"cs231n": ["ta@example.edu"], "nlp": ["prof@example.edu"]},
        admin_emails=["admin@example.edu"],
        webhook_url=webhook.url,
        timeout=5,
    )
    settings.update(changes)
    return AlertSettings(**settings)


# -- settings ------------------------------------------------------------------------


def test_default_settings_are_valid_and_turn_email_and_webhook_off():
    settings = AlertSettings()
    assert not settings.email_enabled
    assert not settings.webhook_enabled
    assert "secret" not in repr(AlertSettings(smtp_username="u", smtp_password="secret"))


@pytest.mark.parametrize(
    "kwargs, setting",
    [
        ({"smtp_port": 0}, "smtp_port"),
        ({"smtp_port": 70000}, "smtp_port"),
        ({"smtp_port": "25"}, "smtp_port"),
        ({"smtp_port": True}, "smtp_port"),
        ({"smtp_starttls": "yes"}, "smtp_starttls"),
        ({"smtp_host": "mail.example.edu"}, "mail_from"),
        ({"smtp_host": "mail.example.edu", "mail_from": "gpu"}, "mail_from"),
        ({"smtp_password": "secret"}, "smtp_password"),
        ({"smtp_username": "gpu"}, "smtp_username"),
        ({"webhook_format": "xml"}, "webhook_format"),
        ({"webhook_url": "ftp://hooks.example.edu/x"}, "webhook_url"),
        ({"webhook_url": "hooks.example.edu:8000/x"}, "webhook_url"),
        ({"webhook_url": "https://"}, "webhook_url"),
        ({"admin_emails": ["admin"]}, "admin_emails"),
        ({"admin_emails": "admin@example.edu"}, "admin_emails"),
        ({"admin_emails": ["Admin <admin@example.edu>"]}, "admin_emails"),
        ({"instructor_emails": {"cs231n": ["ta.example.edu"]}}, "instructor_emails"),
        ({"instructor_emails": ["ta@example.edu"]}, "instructor_emails"),
        ({"user_email_template": "{user}@example.edu"}, "user_email_template"),
        ({"user_email_template": "students@example.edu"}, "user_email_template"),
        ({"user_email_template": "{username}"}, "user_email_template"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": "10"}, "timeout"),
    ],
)
def test_bad_settings_name_the_setting(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        AlertSettings(**kwargs)


def test_settings_normalise_address_lists():
    settings = AlertSettings(instructor_emails={"cs231n": ["ta@example.edu"]}, admin_emails=["a@example.edu"])
    assert settings.instructor_emails == {"cs231n": ("ta@example.edu",)}
    assert settings.admin_emails == ("a@example.edu",)


# -- alerts, text, recipients, payloads --------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"threshold": 101},
        {"used": 80.5},
        {"limit": 100.0},
        {"unit": "dollars"},
        {"currency": None},
        {"budget_key": "group:cs231n"},
        {"scope": "lab", "budget_key": "lab:alice"},
        {"grace_seconds": -1},
    ],
)
def test_bad_alerts_are_refused(changes):
    with pytest.raises(ValueError):
        make_alert(**changes)


def test_alert_from_budget_status():
    rule = BudgetRule(scope="group", subject="cs231n", period="month", unit="gpu_hours", limit=Decimal(10))
    status = BudgetStatus(rule=rule, period_start=NOV, period_end=DEC, used=Decimal("9.5"), limit=Decimal(10))
    alert = BudgetAlert.from_status("alice", ["cs231n"], status, 95, grace_seconds=60)
    assert (alert.budget_key, alert.scope, alert.subject, alert.unit) == (
        "group:cs231n",
        "group",
        "cs231n",
        "gpu_hours",
    )
    assert alert.groups == ("cs231n",)
    assert (alert.used, alert.limit, alert.threshold) == (Decimal("9.5"), Decimal(10), 95)


def test_alert_text_80_in_yuan():
    subject, body = alert_text(make_alert())
    assert subject == "[GPU] alice has used 80% of the personal budget of alice"
    assert (
        f"alice has used {YUAN_80} of {YUAN_100} of the personal budget of alice for 2026-11-01 to 2026-11-30" in body
    )
    assert "stop servers that are not in use" in body
    assert lab_text(make_alert()).startswith(f"You have used {YUAN_80} of {YUAN_100} of your budget for 2026-11-01")
    assert YUAN_80.endswith("¥80.50")  # as the currency formats yuan in English


def test_alert_text_100_says_when_the_server_stops():
    subject, body = alert_text(make_alert(threshold=100, used=Decimal("100.02")))
    assert subject == "[GPU] Budget used up: the personal budget of alice (alice)"
    assert "will be stopped in 5 minutes" in body
    assert "Your server will be stopped in 5 minutes." in lab_text(make_alert(threshold=100))
    assert "stopped in 1 minute," in alert_text(make_alert(threshold=100, grace_seconds=60))[1]
    assert "stopped in 90 seconds" in alert_text(make_alert(threshold=100, grace_seconds=90))[1]
    assert "stopped now" in alert_text(make_alert(threshold=100, grace_seconds=0))[1]


def test_alert_text_group_budget_in_gpu_hours():
    alert = make_alert(
        scope="group",
        subject="cs231n",
        budget_key="group:cs231n",
        threshold=95,
        unit="gpu_hours",
        currency=None,
        used=Decimal(57) / 6,
        limit=Decimal(10),
    )
    subject, body = alert_text(alert)
    assert subject == "[GPU] alice has used 95% of the cs231n group budget"
    assert "9.50 GPU-hours of 10.00 GPU-hours of the cs231n group budget" in body
    assert "of the cs231n group budget" in lab_text(alert)


def test_messages_can_be_translated_in_one_place(monkeypatch):
    monkeypatch.setitem(alerts.MESSAGES, "subject.80", "[GPU] {user} 已用 {budget} 的 {threshold}%")
    monkeypatch.setitem(alerts.MESSAGES, "budget.user", "{user} 的个人预算")
    assert alert_text(make_alert())[0] == "[GPU] alice 已用 alice 的个人预算 的 80%"


def test_recipients_of_a_user_budget_are_the_student_instructors_of_all_their_groups_and_admins():
    settings = AlertSettings(
        user_email_template="{username}@example.edu",
        instructor_emails={
            "cs231n": ["ta@example.edu", "prof@example.edu"],
            "nlp": ["prof@example.edu"],
            "other": ["x@example.edu"],
        },
        admin_emails=["admin@example.edu", "prof@example.edu"],
    )
    assert recipients(make_alert(), settings) == [
        "admin@example.edu",
        "alice@example.edu",
        "prof@example.edu",
        "ta@example.edu",
    ]


def test_recipients_of_a_group_budget_are_that_groups_instructors():
    settings = AlertSettings(
        instructor_emails={"cs231n": ["ta@example.edu"], "nlp": ["prof@example.edu"]},
        admin_emails=["admin@example.edu"],
    )
    alert = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n")
    assert recipients(alert, settings) == ["admin@example.edu", "ta@example.edu"]


def test_recipients_without_a_template_or_with_a_name_that_makes_no_address(caplog):
    assert recipients(make_alert(), AlertSettings()) == []
    settings = AlertSettings(user_email_template="{username}@example.edu")
    assert recipients(make_alert(), settings) == ["alice@example.edu"]
    with caplog.at_level(logging.WARNING, "jupyterhub_gpu.alerts"):
        assert recipients(make_alert(user="bob <x@evil.example>"), settings) == []
    assert "No email for user" in caplog.text


def test_json_payload_is_documented_and_has_no_floats():
    payload = budget_payload(make_alert(threshold=100))
    assert payload["event"] == "budget_threshold"
    assert payload["user"] == "alice"
    assert payload["groups"] == ["cs231n", "nlp"]
    assert (payload["budget"], payload["scope"], payload["threshold"]) == ("user:alice", "user", 100)
    assert (payload["used"], payload["limit"], payload["unit"], payload["currency"]) == ("80.50", "100", "money", "CNY")
    assert payload["period_start"] == "2026-10-31T16:00:00Z"
    assert payload["period_end"] == "2026-11-30T16:00:00Z"
    assert payload["stop_in_seconds"] == 300
    assert "¥80.50" in payload["text"]
    assert_no_floats(json.loads(json.dumps(payload)))


def test_json_payload_of_gpu_hours_keeps_exact_decimal_strings():
    alert = make_alert(unit="gpu_hours", currency=None, used=Decimal(1) / 3, limit=Decimal("1E+1"))
    payload = budget_payload(alert)
    assert payload["limit"] == "10"
    assert Decimal(payload["used"]) == Decimal(1) / 3
    assert payload["currency"] is None and payload["stop_in_seconds"] is None
    assert_no_floats(json.loads(json.dumps(payload)))


def test_budget_messages_name_their_event_and_groups():
    assert budget_message(make_alert(), AlertSettings()).event == "budget.80"
    assert budget_message(make_alert(threshold=97), AlertSettings()).event == "budget.95"
    assert budget_message(make_alert(threshold=100), AlertSettings()).event == "budget.100"
    # a personal budget's alert reaches no group's channel (a course chat would show it to classmates)
    assert budget_message(make_alert(), AlertSettings()).groups == ()
    group = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n")
    assert budget_message(group, AlertSettings()).groups == ("cs231n",)


# -- delivery through the deprecated settings (mapped onto Apprise URLs) --------------------


async def test_legacy_mail_goes_over_real_smtp_in_utf8(smtp_server, ledger, monkeypatch):
    monkeypatch.setitem(alerts.MESSAGES, "subject.80", "[GPU] {user} 已用 {budget} 的 {threshold}%")
    settings = AlertSettings(
        smtp_host="127.0.0.1",
        smtp_port=smtp_server.port,
        mail_from="gpu@example.edu",
        admin_emails=["admin@example.edu", "ta@example.edu"],
    )
    sent = await deliver(make_alert(), settings, ledger, NOW)
    assert sent == {"lab": True, "email": True}
    messages = sorted(smtp_server.messages, key=lambda m: m[1])
    assert [(sender, rcpt) for sender, rcpt, _ in messages] == [
        ("gpu@example.edu", ["admin@example.edu"]),
        ("gpu@example.edu", ["ta@example.edu"]),
    ]
    for _, rcpt, message in messages:
        assert message["Subject"] == "[GPU] alice 已用 the personal budget of alice 的 80%"
        assert message["To"] == rcpt[0]  # each recipient their own mail: no one sees the others' addresses
        assert f"{YUAN_80} of {YUAN_100}" in message.get_body(preferencelist=("plain",)).get_content()


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
async def test_legacy_mail_logs_in_when_configured(ledger):
    logins = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        assert isinstance(auth_data, LoginPassword)
        logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"s3cret", handled=False)

    server = SMTPServer(authenticator=authenticator, auth_require_tls=False, auth_required=True)
    server.controller.start()
    try:
        settings = AlertSettings(
            smtp_host="127.0.0.1",
            smtp_port=server.port,
            mail_from="gpu@example.edu",
            smtp_username="gpu",
            smtp_password="s3cret",
            user_email_template="{username}@example.edu",
        )
        assert (await deliver(make_alert(), settings, ledger, NOW))["email"]
        assert logins[0] == (b"gpu", b"s3cret")
        assert len(server.messages) == 1
        wrong = replace(settings, smtp_password="wrong")
        assert not (await deliver(make_alert(threshold=95), wrong, ledger, NOW))["email"]
        assert len(server.messages) == 1
    finally:
        server.controller.stop()


async def test_starttls_is_never_skipped(smtp_server, ledger):
    settings = AlertSettings(
        smtp_host="127.0.0.1",
        smtp_port=smtp_server.port,
        mail_from="gpu@example.edu",
        smtp_starttls=True,
        user_email_template="{username}@example.edu",
    )
    assert not (await deliver(make_alert(), settings, ledger, NOW))["email"]
    assert smtp_server.messages == []


def channels_of(ledger):
    return sorted((a.budget_key, a.threshold, a.channel) for a in ledger.alerts("alice") if a.channel != "apprise")


async def test_deliver_sends_every_channel_once(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    alert = make_alert()
    assert await deliver(alert, settings, ledger, NOW) == {"lab": True, "email": True, "webhook": True}
    assert await deliver(alert, settings, ledger, NOW) == {"lab": False, "email": False, "webhook": False}

    [notice] = ledger.notices("alice")
    assert (notice.kind, notice.level) == ("budget", "info")
    assert notice.message == lab_text(alert)
    rcpts = sorted(rcpt for _, [rcpt], _ in smtp_server.messages)
    assert rcpts == ["admin@example.edu", "alice@example.edu", "prof@example.edu", "ta@example.edu"]
    for _, _, message in smtp_server.messages:
        assert message["Subject"] == alert_text(alert)[0]
        assert f"{YUAN_80} of {YUAN_100}" in message.get_content()
    [body] = webhook.bodies
    # Apprise's JSON body, with the documented payload's fields beside it
    assert (body["version"], body["type"], body["title"]) == ("1.0", "info", alert_text(alert)[0])
    assert body["message"] == budget_payload(alert)["text"]
    assert {k: v for k, v in body.items() if k not in ("version", "type", "message", "attachments")} == budget_payload(
        alert
    )
    assert_no_floats(body)
    assert channels_of(ledger) == [("user:alice", 80, c) for c in ("email", "lab", "webhook")]


async def test_concurrent_deliveries_send_once(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    results = await asyncio.gather(*(deliver(make_alert(), settings, ledger, NOW) for _ in range(4)))
    for channel in ("lab", "email", "webhook"):
        assert sum(r[channel] for r in results) == 1
    assert (len(ledger.notices("alice")), len(smtp_server.messages), len(webhook.bodies)) == (1, 4, 1)


async def test_each_threshold_and_each_period_is_alerted_separately(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    sent_all = {"lab": True, "email": True, "webhook": True}
    assert await deliver(make_alert(threshold=80), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=95), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=100), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=95), settings, ledger, NOW) == dict.fromkeys(sent_all, False)
    december = make_alert(threshold=80, period_start=DEC, period_end=JAN)
    assert await deliver(december, settings, ledger, DEC) == sent_all

    assert [n.level for n in ledger.notices("alice")] == ["info", "warning", "error", "info"]
    assert len(smtp_server.messages) == 4 * 4  # four alerts, each to its four recipients
    assert [b["threshold"] for b in webhook.bodies] == [80, 95, 100, 80]
    assert "in 5 minutes" in webhook.bodies[2]["message"]
    assert "2026-12-01 to 2026-12-31" in webhook.bodies[3]["message"]


async def test_a_user_and_a_group_budget_are_separate_alerts(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    group = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n")
    assert (await deliver(make_alert(), settings, ledger, NOW))["email"]
    before = len(smtp_server.messages)
    assert (await deliver(group, settings, ledger, NOW))["email"]
    rcpts = sorted(rcpt for _, [rcpt], _ in smtp_server.messages[before:])
    assert rcpts == ["admin@example.edu", "alice@example.edu", "ta@example.edu"]


async def test_webhook_500_is_logged_and_retried_without_resending_the_rest(smtp_server, webhook, ledger, caplog):
    settings = all_channels(smtp_server, webhook)
    webhook.status = 500
    with caplog.at_level(logging.WARNING, "jupyterhub_gpu.alerts"):
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True, "email": True, "webhook": False}
    assert "500" in caplog.text and "will retry" in caplog.text
    assert ("user:alice", 80, "webhook") not in channels_of(ledger)

    webhook.status = 204
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": False, "webhook": True}
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": False, "webhook": False}
    assert len(webhook.bodies) == 2  # the refused one and the retry
    assert (len(smtp_server.messages), len(ledger.notices("alice"))) == (4, 1)


async def test_smtp_down_is_logged_and_retried(webhook, ledger, caplog):
    down = SMTPServer()  # not started yet: its port refuses connections
    settings = all_channels(down, webhook)
    with caplog.at_level(logging.WARNING, "jupyterhub_gpu.alerts"):
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True, "email": False, "webhook": True}
    assert "by E-Mail mailto://127.0.0.1" in caplog.text and "failed, will retry" in caplog.text

    down.controller.start()
    try:
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": True, "webhook": False}
        assert len(down.messages) == 4
    finally:
        down.controller.stop()


async def test_channels_that_are_off_or_have_no_recipients_claim_nothing(smtp_server, ledger):
    settings = AlertSettings(smtp_host="127.0.0.1", smtp_port=smtp_server.port, mail_from="gpu@example.edu")
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True}
    assert channels_of(ledger) == [("user:alice", 80, "lab")]
    assert smtp_server.messages == []


async def test_release_alert_undoes_a_claim(ledger):
    assert ledger.claim_alert("alice", "user:alice", NOV, 80, "email", NOW)
    assert not ledger.claim_alert("alice", "user:alice", NOV, 80, "email", NOW)
    assert ledger.release_alert("alice", "user:alice", NOV, 80, "email")
    assert not ledger.release_alert("alice", "user:alice", NOV, 80, "email")
    assert ledger.claim_alert("alice", "user:alice", NOV, 80, "email", NOW)


def test_alert_accepts_naive_utc_periods():
    alert = make_alert(period_start=NOV.replace(tzinfo=None), period_end=DEC.replace(tzinfo=None))
    assert alert.period_start == NOV
    assert budget_payload(alert)["period_start"] == "2026-10-31T16:00:00Z"
    assert date(2026, 11, 1).isoformat() in alert_text(alert)[1]


async def test_once_key_of_an_alert_is_its_budget_period_threshold_and_revision():
    key = budget_once(make_alert(revision="r2"))
    assert (key.user, key.key, key.period_start, key.threshold, key.revision) == ("alice", "user:alice", NOV, 80, "r2")


# -- Apprise channels: configured and stored, routed by event and owner --------------------------


def json_channel(server, path: str, owner_kind: str = "admin", owner: str = "", events=None):
    port = server.url.split(":")[2].split("/")[0]
    spec = {"url": f"json://127.0.0.1:{port}/{path}", "events": events}
    return configured_channel(spec, owner_kind, owner)


def cull_notice(user="alice") -> Message:
    return Message(user=user, kind="cull", text="idle", subject="Idle", event="cull", what="idle notice")


async def test_form_and_json_channels_get_the_alert_and_their_events_decide(webhook, ledger):
    port = webhook.url.split(":")[2].split("/")[0]
    form = configured_channel(f"form://127.0.0.1:{port}/form", "admin")  # admins' defaults: 95 and 100
    only_100 = json_channel(webhook, "json100", events=["budget.100"])
    notifier = Notifier(ledger, AlertSettings(channels=(form, only_100), timeout=5))
    sent = await notifier.send(
        budget_message(make_alert(threshold=95), notifier.settings), once=budget_once(make_alert(threshold=95))
    )
    assert sent == {"lab": True, form.claim: True}  # only the channels that want the event
    [body] = webhook.bodies
    assert webhook.paths == ["/form"] and webhook.headers[0]["Content-Type"] == "application/x-www-form-urlencoded"
    assert body["title"] == alert_text(make_alert(threshold=95))[0] and "95%" in body["message"]
    await notifier.send(
        budget_message(make_alert(threshold=100), notifier.settings), once=budget_once(make_alert(threshold=100))
    )
    # the second alert goes to both channels at once: in either order
    assert webhook.paths[0] == "/form" and sorted(webhook.paths[1:]) == ["/form", "/json100"]


async def test_personal_events_go_to_the_users_own_channels_and_never_to_a_groups(webhook, ledger):
    now = NOW
    add_channel(
        ledger,
        "user",
        "alice",
        json_channel(webhook, "alice").url,
        "JSON",
        "json://alice",
        DEFAULT_EVENTS["user"],
        now,
        "alice",
    )
    add_channel(
        ledger,
        "user",
        "bob",
        json_channel(webhook, "bob").url,
        "JSON",
        "json://bob",
        DEFAULT_EVENTS["user"],
        now,
        "bob",
    )
    group_events = (*DEFAULT_EVENTS["group"], "cull", "job")  # even when a group asks for them
    add_channel(
        ledger, "group", "cs231n", json_channel(webhook, "cs231n").url, "JSON", "json://c", group_events, now, "admin"
    )
    add_channel(
        ledger, "group", "other", json_channel(webhook, "other").url, "JSON", "json://o", group_events, now, "admin"
    )
    notifier = Notifier(ledger, AlertSettings(timeout=5, user_hosts=("127.0.0.1",)))
    await notifier.send(budget_message(make_alert(), notifier.settings), once=budget_once(make_alert()))
    # alice's groups are cs231n and nlp: her own budget's alert reaches neither group's chat (classmates read it)
    assert webhook.paths == ["/alice"]
    webhook.paths.clear()
    group = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n", user="group:cs231n")
    await notifier.send(budget_message(group, notifier.settings), once=budget_once(group))
    assert webhook.paths == ["/cs231n"]  # the group pool's alert goes to the group's channel
    webhook.paths.clear()
    await notifier.send(replace(cull_notice(), groups=("cs231n",)))
    assert webhook.paths == ["/alice"]


async def test_the_channel_every_user_has_is_filled_with_the_users_name(smtp_server, ledger):
    template = configured_channel(
        f"mailto://127.0.0.1:{smtp_server.port}?from=gpu@example.edu&mode=insecure&to={{username}}@example.edu",
        "user",
        "{username}",
        "GPUService.notify_user_url_template",
    )
    assert template.masked.endswith("{username}%40example.edu") or "{username}" in template.masked
    notifier = Notifier(ledger, AlertSettings(channels=(template,), timeout=5))
    await notifier.send(cull_notice("bob"))
    [(_, rcpt, message)] = smtp_server.messages
    assert rcpt == ["bob@example.edu"] and message["Subject"] == "Idle"


async def test_a_slow_channel_delays_neither_the_others_nor_the_next_messages(webhook, ledger, monkeypatch):
    slow_server = WebhookServer(delay=5)
    try:
        slow = json_channel(slow_server, "slow", events=["cull"])
        fast = json_channel(webhook, "fast", events=["cull"])
        notifier = Notifier(ledger, AlertSettings(channels=(slow, fast), timeout=1))
        started = time.monotonic()
        sent = await notifier.send(cull_notice())
        took = time.monotonic() - started
        assert sent == {"lab": True, slow.claim: False, fast.claim: True}
        assert took < 3, took  # the slow one's time limit, not its 5 s
        assert webhook.times[0] - started < 1  # the fast one did not wait for it
        # the slow one now waits out its backoff: the next message goes to the fast one at once
        started = time.monotonic()
        sent = await notifier.send(cull_notice())
        assert sent == {"lab": True, slow.claim: False, fast.claim: True}
        assert time.monotonic() - started < 1
        assert notifier.counts[("JSON", "failed")] == 1 and notifier.counts[("JSON", "deferred")] == 1
        assert notifier.counts[("JSON", "sent")] == 2
    finally:
        slow_server.close()


async def test_a_failed_channel_is_retried_after_its_backoff_and_its_secret_is_never_logged(
    webhook, ledger, monkeypatch, caplog
):
    monkeypatch.setattr(notify, "BACKOFF", 0.3)
    port = webhook.url.split(":")[2].split("/")[0]
    channel = configured_channel(f"json://gpu:S3cretPassw0rd@127.0.0.1:{port}/retry", "admin")
    notifier = Notifier(ledger, AlertSettings(channels=(channel,), timeout=5))
    alert = make_alert(threshold=100)
    webhook.status = 500
    with caplog.at_level(logging.DEBUG):
        first = await notifier.send(budget_message(alert, notifier.settings), once=budget_once(alert))
        assert first[channel.claim] is False
        # within the backoff: not tried (nothing reaches the server), the claim stays free
        assert (await notifier.send(budget_message(alert, notifier.settings), once=budget_once(alert)))[
            channel.claim
        ] is False
        assert len(webhook.bodies) == 1
        webhook.status = 200
        await asyncio.sleep(0.4)
        assert (await notifier.send(budget_message(alert, notifier.settings), once=budget_once(alert)))[
            channel.claim
        ] is True
        assert (await notifier.send(budget_message(alert, notifier.settings), once=budget_once(alert)))[
            channel.claim
        ] is False
    assert len(webhook.bodies) == 2  # the refused one and the retry, never a third
    assert "will retry" in caplog.text and "S3cretPassw0rd" not in caplog.text
    assert "json://gpu:****@127.0.0.1" in caplog.text


async def test_a_dingtalk_group_bot_gets_its_signed_text_with_no_mention(webhook, ledger, monkeypatch):
    """DingTalk's plugin, its own body and signature, pointed at the local server instead of oapi.dingtalk.com."""
    port = webhook.url.split(":")[2].split("/")[0]
    monkeypatch.setattr(NotifyDingTalk, "notify_url", f"http://127.0.0.1:{port}/robot/send?access_token={{token}}")
    channel = configured_channel("dingtalk://SECsignsecret123@bottoken1234567/", "group", "cs231n")
    notifier = Notifier(ledger, AlertSettings(channels=(channel,), timeout=5))
    alert = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n", user="@all", threshold=100)
    sent = await notifier.send(budget_message(alert, notifier.settings), once=budget_once(alert))
    assert sent[channel.claim] is True
    [body] = webhook.bodies
    path, query = webhook.paths[0].split("?", 1)
    assert path == "/robot/send" and "access_token=bottoken1234567" in query and "sign=" in query
    assert body["msgtype"] == "text" and body["at"]["isAtAll"] is False
    assert "@all" not in body["text"]["content"] and "@\u200ball" in body["text"]["content"]
    assert "cs231n" in body["text"]["content"]


def test_urls_are_described_by_service_and_masked_target():
    assert describe("tgram://123456789:AAHsecret_token_x/987654") == ("Telegram", "tgram://1...x/987654")
    service, masked = describe("dingtalk://SECsignsecret123@bottoken1234567/")
    assert service == "DingTalk" and "SECsignsecret123" not in masked and "bottoken1234567" not in masked
    service, masked = describe("wecombot://BOTKEYabcdef123456")
    assert service == "WeCom Bot" and "BOTKEYabcdef123456" not in masked
    service, masked = describe("mailtos://gpu:pw1234567@smtp.example.edu?from=gpu@example.edu&to=ta@example.edu")
    assert service == "E-Mail" and "pw1234567" not in masked and "ta%40example.edu" in masked
    with pytest.raises(ChannelError, match="Unparseable Telegram URL"):
        describe("tgram://bad")
    with pytest.raises(ChannelError, match="not among the services"):
        describe("json://127.0.0.1/x", schemes=DEFAULT_USER_SCHEMES)


def test_the_deprecated_settings_map_onto_apprise_urls_or_stop_the_service_with_the_reason(ledger):
    mail = AlertSettings(smtp_host="smtp.example.edu", smtp_port=587, smtp_starttls=True, mail_from="gpu@example.edu")
    slack = "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"
    settings = replace(mail, webhook_url=slack, webhook_format="slack", smtp_username="gpu", smtp_password="pw12345678")
    email, webhook = Notifier(ledger, settings).configured
    assert (email.claim, email.service, email.events) == ("email", "E-Mail", EVENTS)
    assert email.masked.startswith("mailtos://gpu:****@smtp.example.edu") and "pw12345678" not in email.masked
    assert (webhook.claim, webhook.service) == ("webhook", "Slack") and "TIiajkdnlazkcOXrIdevi7FQ" not in webhook.masked
    assert "digest" not in webhook.events  # the webhook never carried the digest
    json_hook = Notifier(ledger, AlertSettings(webhook_url="https://hooks.example.edu/gpu?x=1")).configured[0]
    assert json_hook.url == "jsons://hooks.example.edu/gpu?x=1" and json_hook.service == "JSON"
    with pytest.raises(ChannelError, match=r"LegacyMail\.webhook_url: Apprise cannot use this URL"):
        Notifier(ledger, AlertSettings(webhook_url="https://chat.example.edu/hooks/gpu", webhook_format="slack"))


# -- what a user's own channel may do ---------------------------------------------


def test_the_default_user_schemes_name_no_host_the_service_connects_to():
    """Every default scheme's plugin connects to its service's own host: its URL holds a token, never a host."""
    assert DEFAULT_USER_SCHEMES and not [s for s in DEFAULT_USER_SCHEMES if channels.takes_host(s)]
    for scheme in ("bark", "workflow", "workflows", "ntfys", "mailto", "mailtos", "json"):
        assert channels.takes_host(scheme), scheme
        with pytest.raises(ChannelError, match="not among the services"):
            describe(f"{scheme}://127.0.0.1:8000/key", schemes=DEFAULT_USER_SCHEMES)


@pytest.mark.parametrize(
    "url, fragment",
    [
        ("json://localhost:8000/x", "loopback"),
        ("json://127.0.0.2/x", "loopback"),
        ("json://[::1]:8000/x", "loopback"),
        ("json://[::ffff:127.0.0.1]/x", "loopback"),
        ("json://169.254.169.254/latest/meta-data", "link-local"),
        ("json://10.0.0.25/x", "private"),
        ("json://192.168.1.1/x", "private"),
        ("json://224.0.0.1/x", "multicast"),
        ("json://0.0.0.0:8000/x", "address"),
        ("bark://nowhere.invalid/devkey", "cannot be resolved"),
        ("mailto://gpu:pw@university.edu?smtp=10.0.0.25&to=a@example.org", "'smtp'"),
        ("mailto://gpu:pw@10.0.0.25?to=a@example.org", "private"),
        ("mailto://u@example.org?from=dean@university.edu&to=a@example.org", "'from'"),
        ("mailto://u@example.org?to=a@example.org&bcc=b@example.org", "'bcc'"),
        ("mailto://u@example.org?to=a@example.org&cc=b@example.org", "'cc'"),
        ("mailto://u@example.org?to=a@example.org,b@example.org", "several recipients"),
        ("mailto://u:p@10.0.0.25/a@example.org/b@example.org", "several recipients"),
        ("mailto://u@example.org?to=a@example.org&pgppub=/etc/passwd", "'pgppub'"),
        ("tgram://123456789:AAHtoken/987654?rto=300&cto=300", "'rto'"),
        ("json://127.0.0.1/x?redirect=yes", "'redirect'"),
    ],
)
def test_a_users_url_may_not_reach_the_labs_network_nor_widen_its_delivery(url, fragment):
    with pytest.raises(ChannelError, match=re.escape(fragment)):
        channels.check_user_url(url, trusted=())


def test_a_host_the_admins_trust_by_name_is_allowed_and_only_that_name():
    channels.check_user_url("json://127.0.0.1:8000/x", trusted=("127.0.0.1",))
    with pytest.raises(ChannelError, match="loopback"):
        channels.check_user_url("json://localhost:8000/x", trusted=("127.0.0.1",))


def test_the_admins_masked_view_shows_where_mail_really_goes():
    service, masked = describe("mailto://gpu:pw12345@university.edu?smtp=10.0.0.25&from=a@b.org&to=c@d.org")
    assert service == "E-Mail" and "via 10.0.0.25" in masked and "pw12345" not in masked


async def test_a_stored_users_channel_is_checked_again_when_sent(webhook, ledger):
    """A row written before these rules (or a name that now resolves inside): refused at send time, never sent."""
    add_channel(ledger, "user", "alice", json_channel(webhook, "inside").url, "JSON", "json://x", ("cull",), NOW, "a")
    notifier = Notifier(ledger, AlertSettings(timeout=5))
    sent = await notifier.send(cull_notice())
    assert not any(ok for claim, ok in sent.items() if claim != "lab") and webhook.paths == []
    notifier = Notifier(ledger, AlertSettings(timeout=5, user_hosts=("127.0.0.1",)))  # trusted by the admins
    await notifier.send(cull_notice())
    assert webhook.paths == ["/inside"]


async def test_one_users_silent_channels_do_not_stop_another_users_channel(webhook, ledger):
    """8 channels to a server that accepts and never answers, with rto/cto of 300 s: bob's still arrives."""
    tarpit = socket.socket()
    tarpit.bind(("127.0.0.1", 0))
    tarpit.listen(100)
    held = []
    threading.Thread(target=lambda: [held.append(tarpit.accept()[0]) for _ in iter(int, 1)], daemon=True).start()
    port = tarpit.getsockname()[1]
    try:
        for i in range(8):
            url = f"json://127.0.0.1:{port}/k{i}?rto=300&cto=300"  # a row stored before the rules refused rto
            add_channel(ledger, "user", "mallory", url, "JSON", f"json://k{i}", ("cull",), NOW, "mallory")
        add_channel(ledger, "user", "bob", json_channel(webhook, "bob").url, "JSON", "json://b", ("cull",), NOW, "b")
        notifier = Notifier(ledger, AlertSettings(timeout=2, user_hosts=("127.0.0.1",)))
        started = time.monotonic()
        mallory = asyncio.ensure_future(notifier.send(cull_notice("mallory")))
        await asyncio.sleep(0.3)
        bob = await notifier.send(cull_notice("bob"))
        assert webhook.paths == ["/bob"] and [ok for c, ok in bob.items() if c != "lab"] == [True]
        assert webhook.times[0] - started < 2.5, webhook.times[0] - started  # not after mallory's timeouts
        await mallory
        # the plugin's own 300 s were clamped to the 2 s limit: every held connection was closed by the client
        assert held
        await asyncio.to_thread(wait_for, lambda: all(_closed(c) for c in held), 10, what="the client to hang up")
        notifier.close()
    finally:
        tarpit.close()


def _closed(conn: socket.socket) -> bool:
    conn.setblocking(False)
    try:
        return conn.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.parametrize("name", ["bob smith", "mallory,victim@evil.org,x", "a@evil.org", "x;y", "", "-x"])
async def test_the_channel_every_user_has_is_not_filled_with_an_unsafe_name(smtp_server, ledger, name):
    template = configured_channel(
        f"mailto://127.0.0.1:{smtp_server.port}?from=gpu@example.edu&mode=insecure&to={{username}}@example.edu",
        "user",
        "{username}",
        "GPUService.notify_user_url_template",
    )
    notifier = Notifier(ledger, AlertSettings(channels=(template,), timeout=5))
    assert notifier.targets(cull_notice(name)) == []
    await notifier.send(cull_notice(name))
    assert smtp_server.messages == []


def test_a_refused_channel_setting_names_its_keys_never_its_values():
    url = "mailtos://gpu:Pa55wordNeverShown@smtp.example.edu?to=a@example.edu"
    with pytest.raises(ValueError) as refused:
        configured_channel({"url": url, "event": ["budget.100"]}, "admin", "", "Notify.admin_urls[0]")
    assert "['event', 'url']" in str(refused.value) and "Pa55word" not in str(refused.value)
    with pytest.raises(ValueError) as refused:
        configured_channel(["mailtos://gpu:Pa55wordNeverShown@x"], "admin")
    assert "Pa55word" not in str(refused.value) and "a list" in str(refused.value)


def test_the_scrubber_forgets_a_deleted_channels_secrets_and_stays_small(ledger):
    baseline = len(channels.SCRUBBER.secrets)
    for i in range(300):
        row = add_channel(
            ledger,
            "user",
            "alice",
            f"tgram://123456789:AAHtok{i:04d}en/987654",
            "Telegram",
            "tgram://1...n/987654",
            ("cull",),
            NOW,
            "alice",
        )
        channels.stored_channel(row)
        assert channels.SCRUBBER.scrub(f"x AAHtok{i:04d}en y") == "x **** y"
        channels.forget_channel(row.id)
    assert len(channels.SCRUBBER.secrets) <= baseline  # (ids of other tests' ledgers may have been reused)
    assert channels.SCRUBBER.scrub("x AAHtok0299en y") == "x AAHtok0299en y"  # no longer anyone's secret


def test_the_labs_mail_server_for_users_addresses_names_no_recipient_and_a_user_gives_one_address():
    assert channels.check_mail_url("mailtos://gpu:pw1234@smtp.example.edu?from=gpu@example.edu")
    for url, fragment in (
        ("json://smtp.example.edu/x", "mailto:// or mailtos://"),
        ("mailtos://gpu:pw1234@smtp.example.edu?from=gpu@example.edu&to=a@example.edu", "no to, cc, bcc"),
    ):
        with pytest.raises(ValueError, match=re.escape(fragment)):
            channels.check_mail_url(url)
    assert channels.lab_mail_channel("mailto:alice@example.edu")[0] == "labmail://alice@example.edu"
    for bad in ("a@x.org,b@y.org", "a@x.org&to=b@y.org", "a@x.org/b@y.org", "a@x.org?bcc=b@y.org", "a b@x.org"):
        with pytest.raises(ChannelError, match="not one e-mail address"):
            channels.lab_mail_channel(bad)
