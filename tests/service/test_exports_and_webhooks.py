"""User-controlled text is inert in every CSV export and every chat channel.

CSV: every text cell a spreadsheet would run as a formula (``= + - @``, tab, CR)
is quoted away in every export: usage, culling, and the pages' tables (the
budgets table's subject was not). Chats: every notice (budget alerts, idle
warnings, finished jobs) to a chat service gets no mention through and, in
Slack, no ``& < >`` markup, in Markdown chats no Markdown; the job notice is
sent by the real service code to a real HTTP peer standing in for Mattermost.
"""

from __future__ import annotations

import asyncio
import csv
import html
import io
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job, update_job
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.channels import configured_channel
from jupyterhub_gpu.service.domain.jobs import JobRequest
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.savings import culling_report
from jupyterhub_gpu.service.notify import Notifier, chat_text
from jupyterhub_gpu.service.web.views import csv_cell, culling_csv, table_csv, usage_csv
from jupyterhub_gpu.session import SessionStart

UTC = timezone.utc
EVIL = ['=HYPERLINK("http://x")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tx", "\r=1"]


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_every_text_cell_that_could_start_a_formula_is_quoted_in_every_table():
    # the budgets table of the pages: the subject (a group or user name) was not escaped
    rows = [{"scope": "group", "subject": evil, "limit": "10", "remaining": "-3"} for evil in EVIL]
    parsed = cells(table_csv(["scope", "subject", "limit", "remaining"], rows))
    assert [r[1] for r in parsed[1:]] == ["'" + e for e in EVIL]
    assert {r[3] for r in parsed[1:]} == {"-3"}  # a plain (negative) number stays a number
    assert csv_cell("'=already") == "'=already" and csv_cell(5) == 5 and csv_cell(None) == ""


def test_usage_and_culling_csv_quote_every_cell_not_only_the_named_ones(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    t0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    session = {
        "id": "s1",
        "user": "=u",
        "server_name": "@s",
        "profile": "+p",
        "gpus": ["=GPU"],
        "gpu_count": 1,
        "started": "2026-11-02T08:00:00Z",
        "stopped": None,
        "minutes_billed": 1,
        "rate_per_minute": "0.05",
        "cost": "0.05",
        "currency": "-CNY",
        "stop_reason": "=r",
        "running": True,
    }
    (header, row) = cells(usage_csv([session]))
    assert all(cell[:1] not in ("=", "+", "@") for cell in row), row
    assert row[header.index("gpus")] == "'=GPU" and row[header.index("currency")] == "'-CNY"
    # culling: a session stopped for idleness with names of its user's choosing
    start = SessionStart("c1", "=user", "=server", ("cs231n",), "=prof", ("GPU-1",), 50_000, "CNY", t0)
    ledger.record_start(start)
    ledger.record_stop("c1", t0 + timedelta(minutes=30), "gpu_idle")
    from jupyterhub_gpu.ledger.queries.culling import load_culling_inputs

    facts, counts = load_culling_inputs(ledger, None, t0 + timedelta(days=1))
    report = culling_report(facts, counts, None, None, t0 + timedelta(days=1), timedelta(hours=12), None)
    (header, row) = cells(culling_csv(report))
    assert all(cell[:1] not in ("=", "+", "@") for cell in row), row


def test_chat_messages_escape_markup_and_mentions():
    evil = "job 1 (work/<!channel>.ipynb) failed: @here @alice <http://evil|click> [x](http://evil) & more"
    slack = chat_text(evil, "slack")  # Apprise's Slack plugin escapes & < > itself: left to it, mentions only
    assert "<!channel>" in slack and "&amp;" not in slack and "& more" in slack
    assert "@here" not in slack and "@alice" not in slack and "@\u200bhere" in slack
    markdown = chat_text(evil, "mmost")  # Mattermost renders Markdown: no link, no mention
    assert "\\[x\\]\\(http://evil\\)" in markdown and "\\<!channel\\>" in markdown
    assert "@here" not in markdown and "@\u200bhere" in markdown
    for apprise_escapes in ("rocket", "workflows", "gchat"):  # Apprise escapes Markdown for these plugins
        assert chat_text(evil, apprise_escapes) == chat_text(evil, "dingtalk")
    plain = chat_text(evil, "dingtalk")  # a plain-text chat: mentions only
    assert "@here" not in plain and "<!channel>" in plain and "[x](http://evil)" in plain
    for structured in ("json", "form", "mailto"):  # data and mail: the text as it is
        assert chat_text(evil, structured) == evil


def test_each_message_is_escaped_once_by_the_channel_that_needs_it(tmp_path, webhook, smtp_server, monkeypatch):
    """The same notice to Slack (Apprise's own plugin, its webhook pointed at a local server), Mattermost,
    a JSON webhook and an HTML mail: each shows the user's ``< & >`` escaped once, by the channel that needs it,
    or not at all where nothing renders markup."""
    from apprise.plugins.slack import NotifySlack

    from jupyterhub_gpu.service.domain.notices import Message

    port = webhook.url.split(":")[2].split("/")[0]
    monkeypatch.setattr(NotifySlack, "webhook_url", f"http://127.0.0.1:{port}/services")
    urls = {
        "slack": "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ",
        "mmost": f"mmost://127.0.0.1:{port}/hooktoken1234",
        "json": f"json://127.0.0.1:{port}/json",
        "mail": f"mailto://127.0.0.1:{smtp_server.port}?from=gpu@example.edu&mode=insecure&to=ops@example.edu"
        "&format=html",
    }
    channels = tuple(configured_channel({"url": url, "events": ["job"]}, "admin") for url in urls.values())
    notifier = Notifier(Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}"), AlertSettings(channels=channels, timeout=5))
    text = "Job 7 (a<b & c>d.ipynb) failed: x < 1 & y > 2"
    message = Message(user="alice", kind="job", subject="Job <7> & more", payload={"text": text}, event="job")
    sent = asyncio.run(notifier.send(message, channels=("apprise",)))
    assert len(sent) == 4 and all(sent.values()), sent
    by_path = dict(zip(webhook.paths, webhook.bodies, strict=True))
    (slack,) = [b for p, b in by_path.items() if p.startswith("/services/")]
    assert slack["attachments"][0]["text"] == "Job 7 (a&lt;b &amp; c&gt;d.ipynb) failed: x &lt; 1 &amp; y &gt; 2"
    assert slack["attachments"][0]["title"] == "Job &lt;7&gt; &amp; more"
    assert by_path["/json"]["message"] == text and by_path["/json"]["title"] == "Job <7> & more"
    mattermost = by_path["/hooks/hooktoken1234"]["text"]
    assert "a\\<b & c\\>d.ipynb" in mattermost and "&lt;" not in mattermost and "&amp;" not in mattermost
    ((_, _, mail),) = smtp_server.messages
    body = mail.get_body(("html",)).get_content()  # HTML: escaped once (spaces as &nbsp;)
    assert "&lt;" in body and html.unescape(body).replace("\xa0", " ").strip() == text


def test_a_job_notice_on_a_chat_channel_is_escaped(tmp_path, webhook):
    """The service's own announce_run, to a real HTTP server standing in for Mattermost (``mmost://`` takes any
    host): the notebook path and the error are the user's text."""
    from jupyterhub_gpu.money import Currency
    from jupyterhub_gpu.service.app import GPUService
    from jupyterhub_gpu.service.tick import TickContext

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    port = webhook.url.split(":")[2].split("/")[0]
    channel = configured_channel({"url": f"mmost://127.0.0.1:{port}/hooktoken1234", "events": ["job"]}, "admin")
    # the service's own method, on what it reads of the service (no hub to register with here)
    notifier = Notifier(ledger, AlertSettings(channels=(channel,), timeout=5))
    service = SimpleNamespace(
        tick_context=TickContext(ledger=ledger, notifier=notifier, currency=Currency.from_config("CNY"))
    )
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    job = create_job(ledger, "alice", JobRequest("work/<!channel>.ipynb", "cpu", {}, 600), "cpu", now)
    update_job(ledger, job.id, state="failed", finished=now, error="ValueError: <@U024BE7LH> @here &")
    ledger.record_start(SessionStart("s1", "alice", job.server_name, (), "cpu", (), 10_000, "CNY", now))
    ledger.record_stop("s1", now + timedelta(minutes=2), "job_finished")
    asyncio.run(GPUService.announce_run(service, ledger.get_session("s1"), get_job(ledger, job.id), "apprise"))
    ((body,),) = [webhook.bodies]
    assert webhook.paths == ["/hooks/hooktoken1234"]
    assert "@here" not in body["text"] and "@\u200bhere" in body["text"]
    assert "\\<!channel\\>" in body["text"] and "\\<@\u200bU024BE7LH\\>" in body["text"]
    assert f"Job {job.id}" in body["text"]
