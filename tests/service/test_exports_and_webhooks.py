"""User-controlled text is inert in every CSV export and every Slack-style webhook (issue 14 s7, last two cases).

CSV: every text cell a spreadsheet would run as a formula (``= + - @``, tab, CR)
is quoted away in every export: usage, culling, and the pages' tables (the
budgets table's subject was not). Webhooks: every notice in the Slack format
(budget alerts, idle warnings, finished jobs) escapes ``& < >`` and mentions;
the job notice is sent by the real service code to a real HTTP peer.
"""

from __future__ import annotations

import asyncio
import csv
import io
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job, update_job
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.domain.jobs import JobRequest
from jupyterhub_gpu.service.domain.notices import AlertSettings
from jupyterhub_gpu.service.domain.savings import culling_report
from jupyterhub_gpu.service.notify import slack_text, webhook_body
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


def test_slack_messages_escape_markup_and_mentions():
    text = slack_text("job 1 (work/<!channel>.ipynb) failed: @here @alice <http://evil|click> & more", "Job <x>")
    assert "<" not in text and ">" not in text and "&amp;" in text
    assert "@here" not in text and "@alice" not in text and "@\u200bhere" in text
    assert text.startswith("*Job &lt;x&gt;*\n")
    slack = AlertSettings(webhook_url="https://hooks.example.edu/x", webhook_format="slack")
    assert webhook_body(slack, {"event": "idle_warning", "text": "@channel <b>"}) == {
        "text": "@\u200bchannel &lt;b&gt;"
    }
    plain = AlertSettings(webhook_url="https://hooks.example.edu/x")
    assert webhook_body(plain, {"event": "e", "text": "<b>"}) == {"event": "e", "text": "<b>"}  # JSON is data


def test_a_job_notice_on_a_slack_webhook_is_escaped(tmp_path, webhook):
    """The service's own announce_run, to a real HTTP server: the notebook path and error are the user's text."""
    from jupyterhub_gpu.money import Currency
    from jupyterhub_gpu.service.app import GPUService

    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    # the service's own method, on what it reads of the service (no hub to register with here)
    service = SimpleNamespace(
        alert_settings=AlertSettings(webhook_url=webhook.url, webhook_format="slack"),
        currency_info=Currency.from_config("CNY"),
        ledger=ledger,
    )
    now = datetime(2026, 11, 29, 20, 0, tzinfo=UTC)
    job = create_job(ledger, "alice", JobRequest("work/<!channel>.ipynb", "cpu", {}, 600), "cpu", now)
    update_job(ledger, job.id, state="failed", finished=now, error="ValueError: <@U024BE7LH> @here &")
    ledger.record_start(SessionStart("s1", "alice", job.server_name, (), "cpu", (), 10_000, "CNY", now))
    ledger.record_stop("s1", now + timedelta(minutes=2), "job_finished")
    asyncio.run(GPUService.announce_run(service, ledger.get_session("s1"), get_job(ledger, job.id), "webhook"))
    ((body,),) = [webhook.bodies]
    assert list(body) == ["text"]
    assert "<" not in body["text"] and ">" not in body["text"] and "@here" not in body["text"]
    assert "&lt;!channel&gt;" in body["text"] and "&lt;@\u200bU024BE7LH&gt;" in body["text"]
