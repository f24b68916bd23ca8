"""Budget alerts against real parts: an aiosmtpd SMTP server, an HTTP webhook server, a sqlite ledger."""

from __future__ import annotations

import asyncio
import json
import logging
import smtplib
from dataclasses import replace
from datetime import date, datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from aiosmtpd.smtp import AuthResult, LoginPassword

from jupyterhub_gpu.billing import BudgetRule, BudgetStatus
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.domain import alerts
from jupyterhub_gpu.service.domain.alerts import BudgetAlert, alert_text, lab_text, recipients
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.notify import WebhookError, post_webhook, send_email
from jupyterhub_gpu.service.tick import deliver, webhook_payload
from tests.service.conftest import SMTPServer

CNY = Currency.from_config("CNY")
NOV = datetime(2026, 10, 31, 16, 0, tzinfo=timezone.utc)  # 1 November, Asia/Shanghai
DEC = datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc)
JAN = datetime(2026, 12, 31, 16, 0, tzinfo=timezone.utc)
NOW = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)
SHANGHAI = ZoneInfo("Asia/Shanghai")


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
    assert "alice has used ¥80.50 of ¥100.00 of the personal budget of alice for 2026-11-01 to 2026-11-30" in body
    assert "stop servers that are not in use" in body
    assert lab_text(make_alert()).startswith("You have used ¥80.50 of ¥100.00 of your budget for 2026-11-01")


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
    payload = webhook_payload(make_alert(threshold=100), AlertSettings())
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
    payload = webhook_payload(alert, AlertSettings())
    assert payload["limit"] == "10"
    assert Decimal(payload["used"]) == Decimal(1) / 3
    assert payload["currency"] is None and payload["stop_in_seconds"] is None
    assert_no_floats(json.loads(json.dumps(payload)))


def test_slack_payload_is_text_only_and_escaped():
    settings = AlertSettings(webhook_url="https://hooks.slack.com/services/T/B/X", webhook_format="slack")
    payload = webhook_payload(make_alert(scope="group", subject="a<b>&c", budget_key="group:a<b>&c"), settings)
    assert list(payload) == ["text"]
    assert payload["text"].startswith("*[GPU] alice has used 80% of the a&lt;b&gt;&amp;c group budget*\n")
    assert "<" not in payload["text"]


# -- senders -------------------------------------------------------------------------


async def test_send_email_over_real_smtp_in_utf8(smtp_server):
    settings = AlertSettings(smtp_host="127.0.0.1", smtp_port=smtp_server.port, mail_from="gpu@example.edu")
    to = ["alice@example.edu", "ta@example.edu"]
    await send_email(settings, to, "预算 ¥80.50", "Used ¥80.50 of ¥100.00.\n")
    [(sender, rcpt, message)] = smtp_server.messages
    assert sender == "gpu@example.edu"
    assert rcpt == to
    assert message["Subject"] == "预算 ¥80.50"
    assert message["To"] == "alice@example.edu, ta@example.edu"
    assert message.get_content_charset() == "utf-8"
    assert message.get_content().replace("\r\n", "\n") == "Used ¥80.50 of ¥100.00.\n"
    assert message["Message-ID"].endswith("@example.edu>")


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
async def test_send_email_logs_in_when_configured():
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
        )
        await send_email(settings, ["alice@example.edu"], "s", "b")
        assert logins == [(b"gpu", b"s3cret")]
        assert len(server.messages) == 1
        with pytest.raises(smtplib.SMTPAuthenticationError):
            await send_email(replace(settings, smtp_password="wrong"), ["alice@example.edu"], "s", "b")
        assert len(server.messages) == 1
    finally:
        server.controller.stop()


async def test_starttls_is_never_skipped(smtp_server):
    settings = AlertSettings(
        smtp_host="127.0.0.1", smtp_port=smtp_server.port, mail_from="gpu@example.edu", smtp_starttls=True
    )
    with pytest.raises(Exception, match="STARTTLS"):
        await send_email(settings, ["alice@example.edu"], "s", "b")
    assert smtp_server.messages == []


async def test_post_webhook_sends_json_and_raises_on_non_2xx(webhook):
    settings = AlertSettings(webhook_url=webhook.url)
    await post_webhook(settings, {"text": "¥1"})
    assert webhook.bodies == [{"text": "¥1"}]
    assert webhook.headers[0]["Content-Type"] == "application/json; charset=utf-8"
    webhook.status = 500
    with pytest.raises(WebhookError, match="HTTP 500"):
        await post_webhook(settings, {"text": "x"})
    webhook.status = 302
    with pytest.raises(WebhookError, match="HTTP 302"):
        await post_webhook(settings, {"text": "x"})


# -- delivery ------------------------------------------------------------------------


def channels_of(ledger):
    return sorted((a.budget_key, a.threshold, a.channel) for a in ledger.alerts("alice"))


async def test_deliver_sends_every_channel_once(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    alert = make_alert()
    assert await deliver(alert, settings, ledger, NOW) == {"lab": True, "email": True, "webhook": True}
    assert await deliver(alert, settings, ledger, NOW) == {"lab": False, "email": False, "webhook": False}

    [notice] = ledger.notices("alice")
    assert (notice.kind, notice.level) == ("budget", "info")
    assert notice.message == lab_text(alert)
    [(_, rcpt, message)] = smtp_server.messages
    assert rcpt == ["admin@example.edu", "alice@example.edu", "prof@example.edu", "ta@example.edu"]
    assert message["Subject"] == alert_text(alert)[0]
    assert "¥80.50 of ¥100.00" in message.get_content()
    [body] = webhook.bodies
    assert body == webhook_payload(alert, settings)
    assert_no_floats(body)
    assert channels_of(ledger) == [("user:alice", 80, c) for c in ("email", "lab", "webhook")]


async def test_concurrent_deliveries_send_once(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    results = await asyncio.gather(*(deliver(make_alert(), settings, ledger, NOW) for _ in range(4)))
    for channel in ("lab", "email", "webhook"):
        assert sum(r[channel] for r in results) == 1
    assert (len(ledger.notices("alice")), len(smtp_server.messages), len(webhook.bodies)) == (1, 1, 1)


async def test_each_threshold_and_each_period_is_alerted_separately(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook, webhook_format="slack")
    sent_all = {"lab": True, "email": True, "webhook": True}
    assert await deliver(make_alert(threshold=80), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=95), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=100), settings, ledger, NOW) == sent_all
    assert await deliver(make_alert(threshold=95), settings, ledger, NOW) == dict.fromkeys(sent_all, False)
    december = make_alert(threshold=80, period_start=DEC, period_end=JAN)
    assert await deliver(december, settings, ledger, DEC) == sent_all

    assert [n.level for n in ledger.notices("alice")] == ["info", "warning", "error", "info"]
    assert len(smtp_server.messages) == 4
    assert [list(b) for b in webhook.bodies] == [["text"]] * 4
    assert "in 5 minutes" in webhook.bodies[2]["text"]
    assert "2026-12-01 to 2026-12-31" in webhook.bodies[3]["text"]


async def test_a_user_and_a_group_budget_are_separate_alerts(smtp_server, webhook, ledger):
    settings = all_channels(smtp_server, webhook)
    group = make_alert(scope="group", subject="cs231n", budget_key="group:cs231n")
    assert (await deliver(make_alert(), settings, ledger, NOW))["email"]
    assert (await deliver(group, settings, ledger, NOW))["email"]
    assert smtp_server.messages[1][1] == ["admin@example.edu", "alice@example.edu", "ta@example.edu"]


async def test_webhook_500_is_logged_and_retried_without_resending_the_rest(smtp_server, webhook, ledger, caplog):
    settings = all_channels(smtp_server, webhook)
    webhook.status = 500
    with caplog.at_level(logging.WARNING, "jupyterhub_gpu.alerts"):
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True, "email": True, "webhook": False}
    assert "HTTP 500" in caplog.text and "will retry" in caplog.text
    assert ("user:alice", 80, "webhook") not in channels_of(ledger)

    webhook.status = 204
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": False, "webhook": True}
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": False, "webhook": False}
    assert len(webhook.bodies) == 2  # the refused one and the retry
    assert (len(smtp_server.messages), len(ledger.notices("alice"))) == (1, 1)


async def test_smtp_down_is_logged_and_retried(webhook, ledger, caplog):
    down = SMTPServer()  # not started yet: its port refuses connections
    settings = all_channels(down, webhook)
    with caplog.at_level(logging.WARNING, "jupyterhub_gpu.alerts"):
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True, "email": False, "webhook": True}
    assert "by email failed, will retry" in caplog.text

    down.controller.start()
    try:
        assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": False, "email": True, "webhook": False}
        assert len(down.messages) == 1
    finally:
        down.controller.stop()


async def test_channels_that_are_off_or_have_no_recipients_claim_nothing(smtp_server, ledger):
    settings = AlertSettings(smtp_host="127.0.0.1", smtp_port=smtp_server.port, mail_from="gpu@example.edu")
    assert await deliver(make_alert(), settings, ledger, NOW) == {"lab": True, "email": False, "webhook": False}
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
    assert webhook_payload(alert, AlertSettings())["period_start"] == "2026-10-31T16:00:00Z"
    assert date(2026, 11, 1).isoformat() in alert_text(alert)[1]
