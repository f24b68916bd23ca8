"""The ``jupyterhub-gpu`` CLI against a recording HTTP server: what it sends, and what it refuses to send."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jupyterhub_gpu import cli


class FakeService:
    """Records every request and answers with the next canned (status, body) or 200 ``{}``."""

    def __init__(self):
        self.requests = []
        self.answers = []
        self.content_type = "application/json"
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(body) if body else None,
                    }
                )
                status, payload = owner.answers.pop(0) if owner.answers else (200, {})
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", owner.content_type)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_PUT = do_DELETE = do_POST = _answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/services/gpu/"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def service(monkeypatch):
    server = FakeService()
    monkeypatch.setenv("JUPYTERHUB_GPU_URL", server.url)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-token")
    yield server
    server.close()


BUDGET = {
    "scope": "group",
    "subject": "cs231n",
    "period": "month",
    "unit": "money",
    "limit": "5000",
    "spent": "12.5",
    "remaining": "4987.5",
    "percent_used": 0.3,
    "period_start": "2026-10-31T16:00:00Z",
    "period_end": "2026-11-30T16:00:00Z",
    "term_start": None,
    "term_end": None,
    "updated": "2026-11-29T20:00:00Z",
    "currency": "CNY",
}


def run(*argv) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(list(argv), out=out), out.getvalue()


def test_budget_set_sends_the_limit_as_a_decimal_string(service):
    service.answers.append((201, BUDGET))
    code, out = run("budget", "set", "--group", "cs231n", "--limit", "5000", "--period", "month")
    assert code == 0
    assert service.requests == [
        {
            "method": "PUT",
            "path": "/services/gpu/api/v1/budgets/group/cs231n",
            "auth": "token secret-token",
            "body": {"limit": "5000", "unit": "money", "period": "month"},
        }
    ]
    assert "group cs231n: CN¥5,000.00 per month" in out


def test_a_term_budget_of_a_user_with_options_after_the_subcommand(service, monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN")
    monkeypatch.delenv("JUPYTERHUB_GPU_URL")
    term = {**BUDGET, "scope": "user", "subject": "a b", "period": "term", "unit": "gpu_hours", "limit": "40"}
    term.update(term_start="2026-09-01", term_end="2027-01-15")
    service.answers.append((201, term))
    code, out = run(
        "budget", "set", "--user", "a b", "--limit", "40", "--unit", "gpu_hours", "--period", "term",
        "--term-start", "2026-09-01", "--term-end", "2027-01-15", "--url", service.url.rstrip("/"), "--token", "t2",
    )  # fmt: skip
    assert code == 0
    (request,) = service.requests
    assert request["path"] == "/services/gpu/api/v1/budgets/user/a%20b"
    assert request["auth"] == "token t2"
    assert request["body"] == {
        "limit": "40",
        "unit": "gpu_hours",
        "period": "term",
        "term_start": "2026-09-01",
        "term_end": "2027-01-15",
    }
    assert "40.00 GPU-hours per term 2026-09-01 to 2027-01-15" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["budget", "set", "--group", "cs231n", "--limit", "-5", "--period", "month"],
        ["budget", "set", "--group", "cs231n", "--limit", "5.5.5", "--period", "month"],
        ["budget", "set", "--group", "cs231n", "--limit", "NaN", "--period", "month"],
        ["budget", "set", "--group", "cs231n", "--limit", "5000", "--period", "year"],
        ["budget", "set", "--group", "cs231n", "--limit", "5000"],
        ["budget", "set", "--limit", "5000", "--period", "month"],
        ["budget", "set", "--group", "g", "--user", "u", "--limit", "5000", "--period", "month"],
        ["budget", "set", "--group", "cs231n", "--limit", "5000", "--period", "month", "--unit", "euro"],
        ["budget", "set", "--group", "cs231n", "--limit", "5000", "--period", "term"],
        ["budget", "set", "--group", "cs231n", "--limit", "5", "--period", "term", "--term-start", "2026-09-01"],
        [
            "budget", "set", "--group", "cs231n", "--limit", "5", "--period", "term",
            "--term-start", "2027-01-15", "--term-end", "2026-09-01",
        ],
        ["budget", "set", "--group", "cs231n", "--limit", "5", "--period", "month", "--term-end", "2026-09-01"],
        ["budget", "set", "--group", "cs231n", "--limit", "5", "--period", "term", "--term-start", "1.9.2026"],
        ["budget", "set", "--group", "a/b", "--limit", "5", "--period", "month"],
        ["budget", "delete"],
        ["budget"],
        ["budget", "frobnicate"],
        ["usage", "--since", "last week"],
        ["usage", "--all", "--user", "stu1"],
        ["usage", "--csv", "--json"],
        [],
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_and_send_nothing(service, argv, capsys):
    with pytest.raises(SystemExit) as e:
        run(*argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err
    assert service.requests == []


def test_no_token_is_a_usage_error(service, monkeypatch, capsys):
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN")
    with pytest.raises(SystemExit) as e:
        run("budget", "list")
    assert e.value.code == 2
    assert "no token" in capsys.readouterr().err
    assert service.requests == []


def test_api_errors_print_the_message_and_exit_1(service, capsys):
    service.answers.append((403, {"status": 403, "message": "This needs the custom:gpu-budgets:write scope."}))
    code, _out = run("budget", "delete", "--group", "cs231n")
    assert code == 1
    assert "This needs the custom:gpu-budgets:write scope. (HTTP 403)" in capsys.readouterr().err
    service.answers.append((502, b"<html>Bad gateway</html>"))
    assert run("budget", "list")[0] == 1
    assert "Bad gateway" in capsys.readouterr().err


def test_an_unreachable_service_exits_1(monkeypatch, capsys):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    code, _ = run("--url", "http://127.0.0.1:9/services/gpu/", "budget", "list")
    assert code == 1
    assert "cannot reach the gpu service" in capsys.readouterr().err


def test_budget_list_prints_a_table(service):
    service.answers.append((200, {"currency": "CNY", "budgets": [BUDGET]}))
    code, out = run("budget", "list")
    assert code == 0
    header, row = out.splitlines()
    # times in the lab's zone; this answer names none: UTC
    columns = ["SCOPE", "NAME", "PERIOD", "LIMIT", "SPENT", "REMAINING", "USED", "PERIOD", "ENDS", "(UTC)"]
    assert header.split() == columns
    assert row.split()[:6] == ["group", "cs231n", "month", "CN¥5,000.00", "CN¥12.50", "CN¥4,987.50"]
    service.answers.append((200, {"currency": "CNY", "budgets": []}))
    assert run("budget", "list")[1] == "No budgets.\n"


def test_usage_passes_filters_and_prints_csv_as_it_comes(service):
    service.answers.append((200, b"id,user\r\ns1,stu1\r\n"))
    code, out = run("usage", "--group", "cs231n", "--since", "2026-11-01", "--until", "2026-11-30T12:00Z", "--csv")
    assert code == 0
    assert out == "id,user\ns1,stu1\n"
    assert service.requests[0]["path"] == (
        "/services/gpu/api/v1/usage?group=cs231n&since=2026-11-01&until=2026-11-30T12%3A00Z&format=csv"
    )


def test_usage_prints_sessions_and_totals(service):
    usage = {
        "sessions": [
            {
                "user": "stu1",
                "server_name": "",
                "profile": "t4",
                "gpu_count": 1,
                "started": "2026-11-01T00:00:00Z",
                "stopped": None,
                "minutes_billed": 3,
                "cost": "0.15",
                "currency": "CNY",
            }
        ],
        "totals": {"sessions": 1, "minutes_billed": 3, "gpu_minutes": 3, "cost": {"CNY": "0.15"}},
    }
    service.answers.append((200, usage))
    code, out = run("usage", "--all")
    assert code == 0
    assert service.requests[0]["path"] == "/services/gpu/api/v1/usage?all=true"
    lines = out.splitlines()
    assert lines[1].split() == ["stu1", "-", "t4", "1", "2026-11-01", "00:00:00", "running", "3", "CN¥0.15"]
    assert lines[-1] == "1 session(s), 3 minute(s) billed, 3 GPU-minute(s), CN¥0.15"


def test_budget_show_and_json_output(service):
    service.answers += [(200, BUDGET), (200, BUDGET)]
    code, out = run("budget", "show", "--group", "cs231n")
    assert code == 0
    assert out.splitlines() == [
        "group cs231n: CN¥5,000.00 per month",
        "spent CN¥12.50, remaining CN¥4,987.50 (0.3% used; period ends 2026-11-30 16:00 UTC)",
    ]
    code, out = run("budget", "show", "--user", "stu1", "--json")
    assert json.loads(out) == BUDGET
    assert [r["path"] for r in service.requests] == [
        "/services/gpu/api/v1/budgets/group/cs231n",
        "/services/gpu/api/v1/budgets/user/stu1",
    ]


# -- reservations and shares ----------------------------------------------------------------------

RESERVATION = {
    "id": 7,
    "group": "cs231n",
    "gpu_model": "T4",
    "count": 4,
    "start": "2026-12-08T14:00:00+08:00",
    "end": "2026-12-08T16:00:00+08:00",
    "weekly_until": "2027-01-15",
    "created_by": "prof",
    "created_at": "2026-12-01T08:00:00Z",
    "note": "lab class",
}


def test_reservations_add_sends_the_booking_with_its_zone(service):
    service.answers.append((201, {**RESERVATION, "timezone": "Asia/Shanghai"}))
    code, out = run(
        "reservations", "add", "--group", "cs231n", "--model", "T4", "--count", "4",
        "--start", "2026-12-08T14:00+08:00", "--end", "2026-12-08T16:00+08:00", "--weekly-until", "2027-01-15",
        "--note", "lab class",
    )  # fmt: skip
    assert code == 0
    (request,) = service.requests
    assert (request["method"], request["path"]) == ("POST", "/services/gpu/api/v1/reservations")
    assert request["body"] == {
        "group": "cs231n",
        "gpu_model": "T4",
        "count": 4,
        "start": "2026-12-08T14:00+08:00",
        "end": "2026-12-08T16:00+08:00",
        "weekly_until": "2027-01-15",
        "note": "lab class",
    }
    assert "4x T4 for cs231n, 2026-12-08 14:00-16:00 Asia/Shanghai, weekly until 2027-01-15 (reservation 7)" in out


def test_reservations_list_delete_and_a_conflict(service, capsys):
    service.answers.append((200, {"timezone": "Asia/Shanghai", "pool": {"T4": 4}, "reservations": [RESERVATION]}))
    code, out = run("reservations", "list")
    assert code == 0 and "2026-12-08 Tue 14:00-16:00" in out and "weekly until 2027-01-15" in out
    service.answers.append((204, b""))
    assert run("reservations", "delete", "7") == (0, "Cancelled reservation 7\n")
    assert service.requests[-1]["method"] == "DELETE" and service.requests[-1]["path"].endswith("/reservations/7")
    service.answers.append((409, {"status": 409, "message": "The reservation conflicts with others: on Tue ..."}))
    code, _ = run(
        "reservations", "add", "--group", "g", "--model", "T4", "--count", "1",
        "--start", "2026-12-08T14:00Z", "--end", "2026-12-08T16:00Z",
    )  # fmt: skip
    assert code == 1 and "conflicts with others: on Tue ... (HTTP 409)" in capsys.readouterr().err


def test_shares_set_list_and_delete(service):
    service.answers.append((201, {"group": "thesis", "gpu_model": "A100", "share": 2, "updated_by": "admin"}))
    assert run("shares", "set", "--group", "thesis", "--model", "A100", "--share", "2")[0] == 0
    assert service.requests[-1]["body"] == {"group": "thesis", "gpu_model": "A100", "share": 2}
    service.answers.append((204, b""))
    assert run("shares", "delete", "--group", "thesis", "--model", "A100")[0] == 0
    assert service.requests[-1]["method"] == "PUT" and service.requests[-1]["body"]["share"] is None
    service.answers.append((200, {"shares": [{"group": "thesis", "gpu_model": "A100", "share": 2, "updated_by": "a"}]}))
    code, out = run("shares", "list")
    assert code == 0 and "thesis" in out and "A100" in out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--start", "2026-12-08T14:00", "--end", "2026-12-08T16:00Z"], "has no time zone"),
        (["--start", "tuesday", "--end", "2026-12-08T16:00Z"], "ISO 8601 date and time with a zone"),
        (["--start", "2026-12-08T16:00Z", "--end", "2026-12-08T14:00Z"], "is not after --start"),
        (["--start", "2026-12-08T14:00Z", "--end", "2026-12-08T16:00Z", "--weekly-until", "2026-12-01"], "before"),
        (["--start", "2026-12-08T14:00Z", "--end", "2026-12-08T16:00Z", "--count", "0"], "whole number of GPUs"),
    ],
)
def test_bad_reservation_arguments_are_refused_before_sending(service, capsys, argv, words):
    base = ["reservations", "add", "--group", "g", "--model", "T4"]
    if "--count" not in argv:
        base += ["--count", "1"]
    with pytest.raises(SystemExit) as e:
        run(*base, *argv)
    assert e.value.code == 2 and words in capsys.readouterr().err
    assert service.requests == []


def test_bad_share_arguments_are_refused_before_sending(service, capsys):
    for share in ("-1", "1.5", "two", "2000000"):
        with pytest.raises(SystemExit):
            run("shares", "set", "--group", "g", "--model", "T4", "--share", share)
        assert "whole number from 0 to 1000000" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run("reservations", "delete", "seven")
    assert service.requests == []
