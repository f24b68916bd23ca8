"""Notices, mails and advice in each user's language, through a real hub, the real gpu service and a real SMTP server.

stu1 starts a server from a Chinese request and stu2 from an English one (the spawn's language, recorded with the
session's start in the ledger); both have a small budget, so the service's tick sends each the 80% alert: the
mail (aiosmtpd) and the Lab notice in Chinese for stu1 and in English for stu2. The usage page's advice is in
Chinese on the Chinese page and in English on the English page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
import requests

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.rules.advice import Advice, ProfileOption, SessionUsage
from jupyterhub_gpu.service.feeds.advice import facts_of, store
from tests.conftest import wait_for
from tests.service.conftest import gpu_hub_config


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in text)


@pytest.mark.hub
def test_each_user_reads_alerts_and_advice_in_the_language_of_their_spawn(make_hub, tmp_path, smtp_server):
    config = gpu_hub_config(tmp_path, smtp_port=smtp_server.port, tick=1, min_minutes=0)
    hub = make_hub(config)
    hub.create_users("stu1", "stu2")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    now = datetime.now(UTC)
    # a T4 minute is ¥0.05: the first billed minute is 83% of ¥0.06, the 80% alert (the 100% stop comes a minute later)
    for user in ("stu1", "stu2"):
        ledger.set_budget(BudgetRule("user", user, "month", "money", Decimal("0.06")), now)
    tokens = {u: hub.api("POST", f"/users/{u}/tokens", json={"note": "t"}).json()["token"] for u in ("stu1", "stu2")}
    for user, language in (("stu1", "zh-CN,zh;q=0.9"), ("stu2", "en-GB,en;q=0.8")):
        r = hub.api("POST", f"/users/{user}/server", json={"profile": "t4"}, headers={"Accept-Language": language})
        assert r.status_code in (201, 202), r.text
    for user in ("stu1", "stu2"):
        hub.wait_ready(user)
    languages = {s.user: s.language for s in ledger.sessions()}
    assert languages == {"stu1": "zh-CN", "stu2": "en"}

    def notices(user: str) -> list[dict]:
        r = requests.get(
            f"{hub.url}/services/gpu/api/v1/me", headers={"Authorization": f"token {tokens[user]}"}, timeout=30
        )
        return [n for n in r.json()["notices"] if n["kind"] == "budget"]

    def mail_to(address: str):
        return [m for _, to, m in smtp_server.messages if address in to]

    wait_for(lambda: notices("stu1") and notices("stu2"), 60, what="both users' budget notices")
    wait_for(
        lambda: mail_to("stu1@students.example.edu") and mail_to("stu2@students.example.edu"), 30, what="both mails"
    )
    (zh_notice,), (en_notice,) = notices("stu1"), notices("stu2")
    assert (
        zh_notice["message"].startswith("您在 ") and "¥0.05" in zh_notice["message"] and "80%" in zh_notice["message"]
    )
    assert en_notice["message"].startswith("You have used CN¥0.05 of CN¥0.06 of your budget")
    (zh_mail,), (en_mail,) = mail_to("stu1@students.example.edu"), mail_to("stu2@students.example.edu")
    assert zh_mail["Subject"] == "[GPU] stu1 已用掉stu1 的个人预算的 80%"
    assert zh_mail.get_content().startswith("您好：") and "¥0.06" in zh_mail.get_content()
    assert en_mail["Subject"] == "[GPU] stu2 has used 80% of the personal budget of stu2"
    assert not has_chinese(en_mail["Subject"] + en_mail.get_content() + en_notice["message"])

    # the usage page: the advice of stu1's session in the page's language
    (session,) = [s for s in ledger.sessions() if s.user == "stu1"]
    a100 = ProfileOption("a100", "1× A100", "A100", 1, to_micros(Decimal("0.25")), 40 * 1024)
    t4 = ProfileOption("t4", "1× T4", "T4", 1, to_micros(Decimal("0.05")), 16 * 1024)
    facts = facts_of(session, now, [t4, a100])
    usage = SessionUsage(sampled_minutes=1, peak_memory_mib=1024, memory_total_mib=16 * 1024, busy_share=0.1)
    advice = Advice(reason="advised", usage=usage, gpus_used=1, suggested=t4, confidence="high", cost_micros=50_000)
    store(ledger, facts, advice, now)
    page = {}
    for lang in ("zh-CN", "en"):
        r = requests.get(
            f"{hub.url}/services/gpu/users/stu1",
            headers={"Authorization": f"token {tokens['stu1']}", "Accept-Language": lang},
            cookies={"jupyterhub-gpu-lang": lang},
            timeout=30,
        )
        assert r.status_code == 200, r.text[:500]
        page[lang] = r.text
    assert "GPU 显存峰值 1 GB（共 16 GB）" in page["zh-CN"] and "很可能就能满足需要" in page["zh-CN"]
    assert "Peak 1 GB of 16 GB GPU memory" in page["en"] and "很可能" not in page["en"]
    ledger.close()
