"""Every notice, mail and advice in the reader's language: each message kind in English and in Chinese, and the
gateway's choice of language per reader (the user's latest spawn, recorded in a real sqlite ledger, else the
lab's default; a group's and the admins' channels the default), mails through a real SMTP server (aiosmtpd)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from jupyterhub_gpu.ledger.models import JobRecord, SessionRecord
from jupyterhub_gpu.ledger.queries.sessions import last_language
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger, make_engine
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.rules.advice import Advice, ProfileOption, SessionUsage
from jupyterhub_gpu.rules.advice_text import advice_text
from jupyterhub_gpu.rules.culling import Decision, evaluate
from jupyterhub_gpu.rules.cullrules import CullRule
from jupyterhub_gpu.rules.signals import MinuteSignal
from jupyterhub_gpu.service.channels import configured_channel
from jupyterhub_gpu.service.domain.advice import advice_message, digest_text
from jupyterhub_gpu.service.domain.alerts import BudgetAlert, budget_message
from jupyterhub_gpu.service.domain.culling import cull_message
from jupyterhub_gpu.service.domain.jobs import run_notice
from jupyterhub_gpu.service.domain.notices import AlertSettings, ChannelConfig, Message
from jupyterhub_gpu.service.notify import (
    Notifier,
    Target,
    check_language,
    lab_notice,
    user_language,
)
from jupyterhub_gpu.session import SessionStart, StopReason
from tests.service.conftest import SMTPServer

CNY = Currency.from_config("CNY")
SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


def alert(threshold: int, unit: str = "money", scope: str = "user") -> BudgetAlert:
    subject = "alice" if scope == "user" else "cs231n"
    return BudgetAlert(
        user="alice",
        groups=("cs231n",),
        budget_key=f"{scope}:{subject}",
        scope=scope,
        subject=subject,
        threshold=threshold,
        used=Decimal("80.5"),
        limit=Decimal("100"),
        unit=unit,
        period_start=datetime(2026, 10, 31, 16, tzinfo=timezone.utc),
        period_end=datetime(2026, 11, 30, 16, tzinfo=timezone.utc),
        currency=CNY if unit == "money" else None,
        grace_seconds=300,
        tz=SHANGHAI,
    )


# -- budget alerts --------------------------------------------------------------------------


@pytest.mark.parametrize("threshold", [80, 95, 100])
def test_budget_alert_in_english_and_chinese(threshold):
    en = budget_message(alert(threshold), AlertSettings())
    zh = en.worded("zh-CN")
    assert en.lang == "en" and zh.lang == "zh-CN"
    assert "2026-11-01 to 2026-11-30" in en.body and "CN¥80.50" in en.body
    assert not has_chinese(en.text + en.subject + en.body)
    # every part in Chinese: the Lab notice, the mail's subject and body, the chat's paragraph
    for part in (zh.text, zh.subject, zh.body, zh.payload["text"], zh.payload["title"]):
        assert has_chinese(part), part
    assert "2026年11月1日至2026年11月30日" in zh.body and "¥80.50" in zh.text and "您好" in zh.body
    assert "5 分钟后" in zh.text if threshold == 100 else "%" in zh.text
    # the payload's facts do not depend on the language
    facts = {k: v for k, v in en.payload.items() if k not in ("title", "text")}
    assert facts == {k: v for k, v in zh.payload.items() if k not in ("title", "text")}
    assert (zh.event, zh.level, zh.groups, zh.user) == (en.event, en.level, en.groups, en.user)


def test_budget_alert_in_gpu_hours_and_for_a_group_in_chinese():
    zh = budget_message(alert(80, unit="gpu_hours", scope="group"), AlertSettings(), "zh-CN")
    assert "80.50 GPU 小时" in zh.text and "cs231n 组的预算" in zh.text
    assert zh.worded("en").text.startswith("You have used 80.50 GPU-hours of 100.00 GPU-hours of the cs231n group")


def test_a_name_with_braces_is_a_value_in_both_languages():
    """A user or group name is put into the text, never read as its template (nor formatted again)."""
    named = BudgetAlert(
        **{**alert(95, scope="group").__dict__, "user": "{limit}", "subject": "{0}", "budget_key": "group:{0}"}
    )
    for lang in ("en", "zh-CN"):
        message = budget_message(named, AlertSettings(), lang)
        assert "{limit}" in message.subject and "{0}" in message.subject


# -- idle warnings --------------------------------------------------------------------------


def idle_decision(warned: datetime | None = None) -> Decision:
    rule = CullRule(StopReason.GPU_IDLE, minutes=30, warn_minutes=5)
    started = NOW - timedelta(hours=1)
    signals = [MinuteSignal(at=NOW - timedelta(minutes=m), gpu_util=0.0, gpu_mem_frac=0.1) for m in range(60, 0, -1)]
    return evaluate([rule], started, NOW, signals, has_gpu=True, warned=warned, tz=SHANGHAI)


def test_idle_warning_in_english_and_chinese():
    decision = idle_decision()
    assert decision.action == "warn"
    record = SimpleNamespace(user="alice", server_name="", id="s1")
    en = cull_message(record, decision, AlertSettings())
    zh = en.worded("zh-CN")
    assert en.text == decision.message and en.text.startswith("Your GPU has been idle")
    assert en.subject == "Your GPU server will be stopped"
    assert zh.subject == "您的 GPU 服务器将被停止" and zh.text.startswith("您的 GPU 已空闲")
    # the same stop time in both
    stop = decision.stop_at.astimezone(SHANGHAI).strftime("%H:%M")
    assert stop in en.text and stop in zh.text and zh.payload["text"] == zh.text


def test_cancelled_warning_in_chinese():
    decision = evaluate(
        [CullRule(StopReason.GPU_IDLE, minutes=30, warn_minutes=5)],
        NOW - timedelta(hours=1),
        NOW,
        [MinuteSignal(at=NOW - timedelta(minutes=1), gpu_util=90.0)],
        warned=NOW - timedelta(minutes=2),
    )
    assert decision.action == "cancel"
    zh = cull_message(SimpleNamespace(user="alice", server_name="", id="s1"), decision, AlertSettings(), "zh-CN")
    assert zh.text == "您又在使用服务器了：它不会被停止。" and zh.subject == "空闲停止已取消"
    assert decision.worded("en") == decision.message == "You are using your server again: it will not be stopped."


def test_max_age_durations_in_chinese():
    rule = CullRule(StopReason.MAX_AGE, minutes=24 * 60, warn_minutes=30)
    decision = evaluate([rule], NOW - timedelta(hours=23, minutes=40), NOW, [], tz=SHANGHAI)
    assert decision.action == "warn"
    assert "1 day" not in decision.message and "24 hours" in decision.message
    assert "24 小时" in decision.worded("zh-CN") and "23 小时" not in decision.worded("zh-CN")


# -- finished runs --------------------------------------------------------------------------


def run_session(reason: str, minutes: int = 2) -> SessionRecord:
    return SessionRecord(
        id="s1",
        user="alice",
        server_name="",
        profile="t4",
        rate_micros=to_micros(Decimal("0.05")),
        currency="CNY",
        started=NOW,
        stopped=NOW,
        stop_reason=reason,
        minutes=minutes,
        cost_micros=minutes * to_micros(Decimal("0.05")),
    )


def test_stop_when_done_in_english_and_chinese():
    en = run_notice(run_session("stop_when_done"), None, CNY, AlertSettings())
    assert en.text == "Your server (default) stopped when its running cells finished: 2 minutes billed, CN¥0.10."
    zh = en.worded("zh-CN")
    assert zh.text == "您的服务器 （默认） 在正在运行的单元格结束后停止：计费 2 分钟，¥0.10。"
    assert zh.subject == "[GPU] 您的服务器已在单元格运行完后停止" and zh.payload["text"] == zh.text
    one = run_notice(run_session("stop_when_done", minutes=1), None, CNY, AlertSettings(), "zh-CN")
    assert "计费 1 分钟" in one.text


def test_plateau_stop_in_chinese():
    zh = run_notice(run_session("plateau"), None, CNY, AlertSettings(), "zh-CN")
    assert "训练停滞" in zh.text and "检查点" in zh.text and "¥0.10" in zh.text


@pytest.mark.parametrize(
    ("state", "english", "chinese"),
    [
        ("succeeded", "finished", "已完成"),
        ("failed", "failed", "失败"),
        ("timed_out", "was stopped at its time limit", "已到时限被停止"),
        ("cancelled", "was cancelled", "已取消"),
        ("running", "ended", "已结束"),
    ],
)
def test_job_outcomes_in_english_and_chinese(state, english, chinese):
    job = JobRecord(id="j1", user="alice", server_name="job-j1", notebook="nb/{x}.ipynb", state=state, error=None)
    en = run_notice(run_session("job_finished"), job, CNY, AlertSettings())
    zh = en.worded("zh-CN")
    assert en.subject == f"[GPU] Job j1 {english}: nb/{{x}}.ipynb"
    assert f"作业 j1（nb/{{x}}.ipynb）{chinese}" in zh.text and "~/work/jobs/j1/{x}.ipynb" in zh.text
    assert zh.level == en.level


# -- right-sizing advice ----------------------------------------------------------------------


T4 = ProfileOption("t4", "1× T4", "T4", 1, to_micros(Decimal("0.05")), 16 * 1024)


def figures(**changes):
    values = dict(
        busy_permille=120,
        gpus_used=1,
        gpu_count=1,
        suggested_gpu_count=1,
        suggested_display_name="1× T4",
        suggested_profile="t4",
        suggested_rate_micros=to_micros(Decimal("0.05")),
        rate_micros=to_micros(Decimal("0.25")),
        peak_memory_mib=3174,
        memory_total_mib=40 * 1024,
        confidence="high",
        final=True,
        counterfactual_micros=to_micros(Decimal("6")),
        cost_micros=to_micros(Decimal("30")),
    )
    return SimpleNamespace(**{**values, **changes})


def test_advice_in_english_and_chinese():
    assert advice_text(figures(), CNY) == (
        "Peak 3.1 GB of 40 GB GPU memory, busy 12% of the time. The 1× T4 profile (CN¥0.05/min instead of"
        " CN¥0.25/min) would very likely have served. This session would have cost CN¥6.00 instead of CN¥30.00."
    )
    assert advice_text(figures(), CNY, "zh-CN") == (
        "GPU 显存峰值 3.1 GB（共 40 GB），12% 的时间处于忙碌状态。1× T4 配置（每分钟 ¥0.05，而不是 ¥0.25）"
        "很可能就能满足需要。本次会话本可只花 ¥6.00，而不是 ¥30.00。"
    )


def test_advice_of_fewer_gpus_live_and_medium_in_chinese():
    text = advice_text(
        figures(gpus_used=1, gpu_count=2, suggested_gpu_count=1, confidence="medium", final=False), CNY, "zh-CN"
    )
    assert text.startswith("2 块 GPU 中只有 1 块在工作（峰值 3.1 GB）")
    assert "1 块 GPU 就够了。" in text and "可能就能满足需要" in text and "很可能" not in text
    assert "到目前为止" in text


def test_advice_notice_is_worded_for_its_reader():
    usage = SessionUsage(sampled_minutes=120, peak_memory_mib=3174, p95_memory_mib=3000, memory_total_mib=40 * 1024)
    advice = Advice(
        reason="advised",
        usage=usage,
        gpus_used=1,
        suggested=T4,
        confidence="high",
        cost_micros=to_micros(Decimal("30")),
        counterfactual_micros=to_micros(Decimal("6")),
    )
    record = run_session("stopped", minutes=120)
    record.gpu_count, record.rate_micros = 1, to_micros(Decimal("0.25"))
    en = advice_message(record, advice, CNY)
    assert en.text.startswith("Peak 3.1 GB of 40 GB GPU memory") and en.kind == "advice"
    assert en.worded("zh-CN").text.startswith("GPU 显存峰值 3.1 GB（共 40 GB）")


def test_digest_in_chinese():
    report = {
        "total": {"sessions_judged": 4, "sessions_advised": 3, "potential_saving_display": "¥12.00"},
        "by_profile": [
            {
                "display_name": "1× A100",
                "sessions_advised": 3,
                "sessions_judged": 4,
                "potential_saving_display": "¥12.00",
                "oversized": True,
            }
        ],
        "sessions": [{"user": "alice", "started": "2026-11-17T01:00:00Z", "message": "GPU 显存峰值……"}],
    }
    since, until = datetime(2026, 11, 16, tzinfo=SHANGHAI), datetime(2026, 11, 23, tzinfo=SHANGHAI)
    subject, body = digest_text("cs231n", report, since, until, SHANGHAI, "zh-CN")
    assert subject == "cs231n 的 GPU 规格建议：本可节省 ¥12.00（2026年11月16日至2026年11月22日）"
    assert (
        "已评估 4 个会话，其中 3 个" in body and "（长期超出所需）" in body and "- alice，2026-11-17 01:00 UTC" in body
    )
    en_subject, _ = digest_text("cs231n", report, since, until, SHANGHAI)
    assert en_subject == "GPU right-sizing for cs231n: ¥12.00 could have been saved (2026-11-16 to 2026-11-22)"


# -- the message and the gateway's choice of language ---------------------------------------


def test_a_message_without_its_words_or_in_an_unknown_language_stays_as_it_is():
    m = Message(user="alice", kind="test", text="hello")
    assert m.worded("zh-CN") is m
    worded = budget_message(alert(80), AlertSettings())
    assert worded.worded("fr") is worded and worded.worded("en") is worded


def start(session_id: str, user: str, started: datetime, language: str | None) -> SessionStart:
    return SessionStart(
        id=session_id,
        user=user,
        server_name="",
        groups=("cs231n",),
        profile="t4",
        gpus=("GPU-1",),
        rate_micros=50_000,
        currency="CNY",
        started=started,
        language=language,
    )


def test_a_users_language_is_their_latest_spawns(ledger):
    assert last_language(ledger, "alice") is None and user_language(ledger, "alice", "zh-CN") == "zh-CN"
    ledger.record_start(start("a1", "alice", NOW - timedelta(days=2), "en"))
    ledger.record_start(start("a2", "alice", NOW - timedelta(days=1), "zh-CN"))
    ledger.record_start(start("a3", "alice", NOW, None))  # a session of before the upgrade says nothing
    ledger.record_start(start("b1", "bob", NOW, "en"))
    assert user_language(ledger, "alice") == "zh-CN" and user_language(ledger, "bob", "zh-CN") == "en"
    assert user_language(ledger, "group:cs231n", "zh-CN") == "zh-CN"
    with ledger.Session() as db:
        assert db.get(SessionRecord, "a2").language == "zh-CN"


def test_the_spawners_state_carries_only_a_known_language():
    base = {
        "session_id": "s",
        "profile": "t4",
        "rate_per_minute": "0.05",
        "currency": "CNY",
        "started": "2026-11-20T02:00:00Z",
    }
    assert SessionStart.from_spawner_state("alice", "", (), {**base, "language": "zh-CN"}).language == "zh-CN"
    assert SessionStart.from_spawner_state("alice", "", (), {**base, "language": "xx"}).language is None
    assert SessionStart.from_spawner_state("alice", "", (), base).language is None


def test_the_default_language_is_checked():
    assert check_language("zh-CN") == "zh-CN"
    for bad in ("zh", "cn", "", None, "EN"):
        with pytest.raises(ValueError, match="default_language must be one of 'en', 'zh-CN'"):
            check_language(bad)


def test_lab_notices_speak_each_users_language(ledger):
    ledger.record_start(start("a1", "alice", NOW, "zh-CN"))
    ledger.record_start(start("b1", "bob", NOW, "en"))
    for user in ("alice", "bob", "carol"):
        lab_notice(ledger, budget_message(BudgetAlert(**{**alert(95).__dict__, "user": user}), AlertSettings()), NOW)
    lab_notice(
        ledger, budget_message(BudgetAlert(**{**alert(95).__dict__, "user": "dave"}), AlertSettings()), NOW, "zh-CN"
    )
    (alice,), (bob,), (carol,), (dave,) = (ledger.notices(user) for user in ("alice", "bob", "carol", "dave"))
    assert alice.message.startswith("您在 2026年11月1日至2026年11月30日 期间已用掉您的预算中的 ¥80.50")
    assert bob.message.startswith("You have used CN¥80.50 of CN¥100.00 of your budget")
    assert carol.message == bob.message.replace("bob", "carol")  # no spawn recorded: the default, English
    assert dave.message == alice.message  # no spawn recorded, and the lab's default is Chinese


def test_each_channel_reads_its_readers_language(ledger):
    ledger.record_start(start("a1", "alice", NOW, "zh-CN"))
    notifier = Notifier(ledger, AlertSettings(), default_language="en")
    message = budget_message(alert(95), AlertSettings())
    own = Target(ChannelConfig(url="json://x/{username}", owner_kind="user", owner="{username}"), "json://x/alice")
    group = Target(ChannelConfig(url="json://x/g", owner_kind="group", owner="cs231n"), "json://x/g")
    admins = Target(ChannelConfig(url="json://x/a", owner_kind="admin"), "json://x/a")
    legacy = Target(ChannelConfig(url="mailto://x", owner_kind="admin", legacy_mail=True), "mailto://x")
    assert notifier.language_of(own, message) == "zh-CN" and notifier.language_of(legacy, message) == "zh-CN"
    assert notifier.language_of(group, message) == "en" and notifier.language_of(admins, message) == "en"
    chinese = Notifier(ledger, AlertSettings(), default_language="zh-CN")
    assert chinese.language_of(group, message) == "zh-CN"
    with pytest.raises(ValueError, match="default_language"):
        Notifier(ledger, AlertSettings(), default_language="fr")


def test_mails_through_a_real_smtp_server_are_worded_per_reader(ledger):
    """alice spawned in Chinese, bob in English: each one's own mail channel speaks their language; the group's
    channel (its instructors) speaks the lab's default."""
    smtp = SMTPServer()
    smtp.controller.start()
    try:
        ledger.record_start(start("a1", "alice", NOW, "zh-CN"))
        ledger.record_start(start("b1", "bob", NOW, "en"))
        base = f"mailto://127.0.0.1:{smtp.port}?from=gpu@lab.example.edu&mode=insecure"
        events = {"events": ["budget.95"]}
        channels = (
            configured_channel(
                {"url": base + "&to={username}@students.example.edu", **events},
                "user",
                "{username}",
                "notify_user_url_template",
            ),
            configured_channel(
                {"url": base + "&to=prof@example.edu", **events}, "group", "cs231n", "notify_group_urls"
            ),
        )
        notifier = Notifier(ledger, AlertSettings(channels=channels), stored=False, default_language="en")
        for user in ("alice", "bob"):
            group_alert = BudgetAlert(**{**alert(95, scope="group").__dict__, "user": user})
            asyncio.run(notifier.send(budget_message(group_alert, notifier.settings), ("apprise",), now=NOW))
        notifier.close()
        got = {(tuple(to), str(m["Subject"])): m.get_content() for _, to, m in smtp.messages}
        by_to = {}
        for (to, subject), body in got.items():
            by_to.setdefault(to, []).append((subject, body))
        ((alice_subject, alice_body),) = by_to[("alice@students.example.edu",)]
        ((bob_subject, bob_body),) = by_to[("bob@students.example.edu",)]
        assert has_chinese(alice_subject) and "您好" in alice_body and "¥80.50" in alice_body
        assert not has_chinese(bob_subject + bob_body) and "CN¥80.50" in bob_body
        assert (
            all(not has_chinese(s + b) for s, b in by_to[("prof@example.edu",)])
            and len(by_to[("prof@example.edu",)]) == 2
        )
    finally:
        smtp.controller.stop()


def test_migration_0012_keeps_old_sessions_and_gives_them_no_language(tmp_path):
    """Sessions recorded before 0012 have no language (the lab's default applies); the downgrade drops it again."""
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "0011")
        connection.execute(
            text(
                "INSERT INTO gpu_sessions (id, user, server_name, groups, profile, gpus, gpu_count, simulated,"
                " rate_micros, currency, started) VALUES ('old', 'ann', '', '[]', 't4', '[]', 1, 0, 50000,"
                " 'CNY', '2026-11-01 00:00:00')"
            )
        )
    engine.dispose()
    ledger = Ledger(url)  # upgrades to the head
    try:
        (old,) = ledger.sessions()
        assert old.id == "old" and old.language is None and user_language(ledger, "ann", "zh-CN") == "zh-CN"
        ledger.record_start(start("new", "ann", NOW, "zh-CN"))
        assert user_language(ledger, "ann") == "zh-CN"
    finally:
        ledger.close()
    engine = make_engine(url)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.downgrade(cfg, "0011")
        assert "language" not in {c["name"] for c in inspect(connection).get_columns("gpu_sessions")}
        assert connection.execute(text("SELECT count(*) FROM gpu_sessions")).scalar_one() == 2
    engine.dispose()
