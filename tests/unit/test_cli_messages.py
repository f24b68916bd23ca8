"""The ``jupyterhub-gpu`` CLI's errors say what went wrong and what to do; its times name their time zone.

Against real servers on loopback: a recording HTTP server, one that never answers, a TLS server with a
certificate nobody trusts, and plain HTTP spoken to as https.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from http.server import ThreadingHTTPServer

import pytest

from jupyterhub_gpu import cli
from tests.conftest import free_port
from tests.unit import test_cli
from tests.unit.test_cli import BUDGET, run

service = test_cli.service  # the recording server and the environment pointing at it (a fixture)


def error_of(capsys, *argv) -> str:
    code, _out = run(*argv)
    assert code == 1
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "message",
    [
        "The token was refused: JupyterHub does not know it (mistyped, expired or revoked).",
        "Authentication required: send 'Authorization: token <JupyterHub API token>', or log in.",
        None,
    ],
)
def test_a_bad_token_is_the_token_was_refused(service, capsys, message):
    service.answers.append((403, {"status": 403, "message": message}))
    err = error_of(capsys, "budget", "list")
    assert "error: the token was refused (HTTP 403)" in err
    assert "authentication required" not in err.lower()
    assert f"token page ({service.url.removesuffix('services/gpu/')}hub/token)" in err


def test_a_missing_scope_is_not_a_bad_token(service, capsys):
    service.answers.append((403, {"status": 403, "message": "This needs the custom:gpu-usage:read scope."}))
    err = error_of(capsys, "budget", "list")
    assert "This needs the custom:gpu-usage:read scope. (HTTP 403)" in err and "refused" not in err


def test_the_hub_root_is_not_the_gpu_service(service, capsys):
    root = service.url.removesuffix("services/gpu/")
    # the hub answers JSON without a message for a path it does not know
    service.answers.append((404, {"status": 404, "message": None}))
    err = error_of(capsys, "--url", root, "budget", "list")
    assert f"this is not the gpu service: use {root}services/gpu/" in err
    assert "None" not in err
    # a message, but no gpu API here (its openapi.yaml is missing too); the hub's own prefix
    service.answers += [(404, {"status": 404, "message": "Not Found"}), (404, b"<html>404</html>")]
    assert f"use {root}services/gpu/" in error_of(capsys, "--url", root + "hub/", "budget", "list")
    assert [r["path"] for r in service.requests[1:]] == ["/hub/api/v1/budgets", "/hub/api/v1/openapi.yaml"]
    # a page that is not JSON at all
    service.answers.append((200, b"<html>Sign in</html>"))
    err = error_of(capsys, "--url", root + "hub/", "usage")
    assert "is not the gpu service's JSON" in err and f"use {root}services/gpu/" in err
    service.answers.append((200, b"<html>Sign in</html>"))
    service.content_type = "text/html"
    err = error_of(capsys, "--url", root + "hub/", "usage", "--csv")
    assert "is not the gpu service's CSV (text/html)" in err and f"use {root}services/gpu/" in err


def test_a_404_of_the_service_itself_keeps_its_message(service, capsys):
    service.answers += [
        (404, {"status": 404, "message": "The group cs231n has no budget"}),
        (200, b"openapi: 3.0.3\n"),
    ]
    err = error_of(capsys, "budget", "show", "--group", "cs231n")
    assert "The group cs231n has no budget (HTTP 404)" in err


def test_a_service_that_is_down_or_failing_says_so(service, capsys):
    service.answers.append((503, b"<html>Service Unavailable</html>"))
    err = error_of(capsys, "budget", "list")
    assert "the gpu service did not answer (HTTP 503" in err and "hub's log" in err
    service.answers.append((500, {"status": 500, "message": "Internal Server Error"}))
    err = error_of(capsys, "budget", "list")
    assert "the gpu service failed (HTTP 500): Internal Server Error" in err


def test_connection_refused_unknown_host_and_time_out(monkeypatch, capsys):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    url = f"http://127.0.0.1:{free_port()}/services/gpu/"
    assert "connection refused: is the hub running" in error_of(capsys, "--url", url, "budget", "list")
    err = error_of(capsys, "--url", "http://no-such-host.invalid/services/gpu/", "budget", "list")
    assert "unknown host 'no-such-host.invalid'" in err

    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    try:
        client = cli.Client(f"http://127.0.0.1:{silent.getsockname()[1]}/services/gpu/", "t", timeout=0.5)
        with pytest.raises(cli.APIError, match=r"did not answer within 0.5 s"):
            client.json("GET", "budgets")
    finally:
        silent.close()


def test_tls_problems_say_which(service, tmp_path, monkeypatch, capsys):
    # plain HTTP spoken to as https
    err = error_of(capsys, "--url", service.url.replace("http://", "https://"), "budget", "list")
    assert "TLS failed" in err and "http://?" in err
    # a certificate nobody trusts
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), service.httpd.RequestHandlerClass)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    try:
        err = error_of(capsys, "--url", f"https://127.0.0.1:{httpd.server_address[1]}/services/gpu/", "budget", "list")
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "its TLS certificate is not trusted" in err and "$SSL_CERT_FILE" in err


SESSION = {
    "user": "stu1",
    "server_name": "",
    "profile": "t4",
    "gpu_count": 1,
    "started": "2026-11-01T00:00:00Z",
    "stopped": "2026-11-01T16:30:05Z",
    "minutes_billed": 991,
    "cost": "49.55",
    "currency": "CNY",
}
USAGE = {
    "currency": "CNY",
    "timezone": "Asia/Shanghai",
    "sessions": [SESSION],
    "totals": {"sessions": 1, "minutes_billed": 991, "gpu_minutes": 991, "cost": {"CNY": "49.55"}},
}


def test_times_are_in_the_labs_time_zone_and_say_so(service):
    service.answers.append((200, USAGE))
    code, out = run("usage")
    assert code == 0
    header, row = out.splitlines()[:2]
    assert "STARTED (Asia/Shanghai)" in header and "STOPPED (Asia/Shanghai)" in header
    assert "2026-11-01 08:00:00" in row and "2026-11-02 00:30:05" in row

    service.answers.append((200, USAGE))
    header, row = run("usage", "--tz", "UTC")[1].splitlines()[:2]
    assert "STARTED (UTC)" in header and "2026-11-01 00:00:00" in row and "2026-11-01 16:30:05" in row

    service.answers.append((200, {**BUDGET, "timezone": "Asia/Shanghai"}))
    assert "period ends 2026-12-01 00:00 Asia/Shanghai" in run("budget", "show", "--group", "cs231n")[1]
    service.answers.append((200, {"currency": "CNY", "timezone": "Asia/Shanghai", "budgets": [BUDGET]}))
    header, row = run("--tz", "Europe/Berlin", "budget", "list")[1].splitlines()
    assert header.endswith("PERIOD ENDS (Europe/Berlin)") and row.endswith("2026-11-30 17:00")


def test_a_bad_time_zone_is_refused_before_anything_is_sent(service, capsys):
    with pytest.raises(SystemExit) as e:
        run("usage", "--tz", "Mars/Olympus")
    assert e.value.code == 2
    assert "--tz: must be an IANA time zone such as Asia/Shanghai" in capsys.readouterr().err
    assert service.requests == []
