"""``reservations`` and ``shares`` through the real handlers, without a hub: who may book, and every refusal.

The handlers run in a tornado application of their own with a stand-in caller (the model the hub would return
for a token) and a stand-in hub that knows some groups; the ledger is a real sqlite file. Every refusal is a
4xx with a message naming what is wrong, and leaves the tables exactly as they were.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.hubapi import HubAPIError
from jupyterhub_gpu.service.web.api import schedule

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)

ADMIN = {"kind": "user", "name": "admin", "groups": [], "scopes": ["custom:gpu-budgets:write", "custom:gpu-usage:read"]}
PROF = {"kind": "user", "name": "prof", "groups": [], "scopes": ["custom:gpu-usage:read!group=cs231n"]}
TUTOR = {"kind": "user", "name": "tutor", "groups": [], "scopes": ["custom:gpu-usage:read!group=thesis"]}
STUDENT = {"kind": "user", "name": "stu1", "groups": ["cs231n"], "scopes": []}
OUTSIDER = {"kind": "user", "name": "stu9", "groups": ["ml101"], "scopes": []}


class FakeHub:
    def __init__(self, groups=("cs231n", "thesis", "ml101"), fail=False):
        self.groups, self.fail = set(groups), fail

    async def group(self, name):
        if self.fail:
            raise HubAPIError("the hub did not answer")
        return {"name": name} if name in self.groups else None


class FakeAuth:
    def get_token(self, handler, in_cookie=True):
        return "a-token"


def _as(cls, caller):
    class Handler(cls):
        async def prepare(self):
            pass

        def get_current_user(self):
            return caller

        def now(self):
            return NOW

    return Handler


def call(ctx, caller, method, path, body=None):
    """``(status, JSON or None)`` of one request to the schedule's handlers, as ``caller``."""

    async def go():
        app = Application(
            [
                (r"/reservations", _as(schedule.ReservationsHandler, caller), {"ctx": ctx}),
                (r"/reservations/([^/]+)", _as(schedule.ReservationHandler, caller), {"ctx": ctx}),
                (r"/shares", _as(schedule.SharesHandler, caller), {"ctx": ctx}),
            ]
        )
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            raw = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{path}",
                method=method,
                body=raw,
                raise_error=False,
                allow_nonstandard_methods=True,
            )
        finally:
            server.stop()
        return response.code, (json.loads(response.body) if response.body else None)

    return asyncio.run(go())


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


@pytest.fixture
def ctx(ledger):
    return SimpleNamespace(
        ledger=ledger, tz=SHANGHAI, gpu_pool={"T4": 4, "A100": 2}, hub=FakeHub(), hub_auth=FakeAuth()
    )


def tables(ledger) -> dict:
    with ledger.engine.connect() as db:
        return {
            t: sorted(map(repr, db.execute(text(f"SELECT * FROM {t}"))))
            for t in ("gpu_reservations", "gpu_group_shares")
        }


def booking(**changes) -> dict:
    body = {
        "group": "cs231n",
        "gpu_model": "T4",
        "count": 2,
        "start": "2026-12-08T14:00+08:00",
        "end": "2026-12-08T16:00+08:00",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not ...}


def test_an_admin_books_a_weekly_class_and_everyone_in_it_reads_it(ctx, ledger):
    code, made = call(ctx, ADMIN, "POST", "/reservations", booking(weekly_until="2027-01-15", note="lab class"))
    assert code == 201, made
    assert made["start"] == "2026-12-08T14:00:00+08:00" and made["end"] == "2026-12-08T16:00:00+08:00"
    assert (made["group"], made["gpu_model"], made["count"], made["weekly_until"]) == ("cs231n", "T4", 2, "2027-01-15")
    assert (made["created_by"], made["created_at"], made["note"]) == ("admin", "2026-12-01T08:00:00Z", "lab class")
    for caller in (ADMIN, PROF, STUDENT):
        code, listed = call(ctx, caller, "GET", "/reservations")
        assert code == 200 and [r["id"] for r in listed["reservations"]] == [made["id"]]
        assert listed["pool"] == {"A100": 2, "T4": 4} and listed["timezone"] == "Asia/Shanghai"
    for caller in (TUTOR, OUTSIDER):  # another group's class is not theirs to read
        assert call(ctx, caller, "GET", "/reservations")[1]["reservations"] == []


def test_an_instructor_books_and_cancels_for_their_group_only(ctx, ledger):
    code, made = call(ctx, PROF, "POST", "/reservations", booking())
    assert code == 201 and made["created_by"] == "prof"
    before = tables(ledger)
    code, refused = call(ctx, PROF, "POST", "/reservations", booking(group="thesis"))
    assert code == 403 and "custom:gpu-usage:read!group=thesis" in refused["message"]
    assert call(ctx, TUTOR, "DELETE", f"/reservations/{made['id']}")[0] == 404  # not theirs to see
    code, refused = call(ctx, STUDENT, "DELETE", f"/reservations/{made['id']}")
    assert code == 403 and "custom:gpu-budgets:write" in refused["message"]  # seen, not theirs to cancel
    assert call(ctx, STUDENT, "POST", "/reservations", booking())[0] == 403
    assert call(ctx, STUDENT, "POST", "/reservations", b"{not json")[0] == 403  # refused before its body is read
    assert tables(ledger) == before
    assert call(ctx, PROF, "DELETE", f"/reservations/{made['id']}")[0] == 204
    assert tables(ledger)["gpu_reservations"] == []
    assert call(ctx, PROF, "DELETE", f"/reservations/{made['id']}")[0] == 404


def test_an_instructor_cannot_take_the_pool_for_long_or_at_short_notice(ctx, ledger):
    """Now is 16:00 in Shanghai on 1 Dec: an instructor books at most 4 hours, from 16:00 on 2 Dec at the soonest."""
    refused = [
        (booking(end="2026-12-08T18:00:01+08:00"), "lasts 4.00028 hours, and an instructor may book at most 4"),
        (booking(end="2026-12-09T02:00+08:00", weekly_until="2027-01-15"), "lasts 12 hours"),
        (booking(start="2026-12-02T15:59+08:00", end="2026-12-02T17:00+08:00"), "it starts 2026-12-02 15:59, and an"
         " instructor must book at least 24 hours ahead (c.Scheduling.reservation_notice_hours), so not before"
         " 2026-12-02 16:00"),
        (booking(start="2026-12-01T07:00Z", end="2026-12-01T08:00Z"), "at least 24 hours ahead"),  # begun already
    ]  # fmt: skip
    for body, words in refused:
        code, answer = call(ctx, PROF, "POST", "/reservations", body)
        assert code == 400 and words in answer["message"], answer
        assert answer["message"].startswith("The reservation cannot be made: ")
    assert (
        "(c.Scheduling.reservation_max_hours)" in call(ctx, PROF, "POST", "/reservations", refused[0][0])[1]["message"]
    )
    assert tables(ledger)["gpu_reservations"] == []

    def book(caller, start, end, **changes):
        return call(
            ctx, caller, "POST", "/reservations", booking(start=f"{start}+08:00", end=f"{end}+08:00", **changes)
        )

    # just inside both limits: 4 hours, 24 hours ahead
    assert book(PROF, "2026-12-02T16:00", "2026-12-02T20:00")[0] == 201
    # admins are not limited: most of a day, starting in an hour
    assert book(ADMIN, "2026-12-01T17:00", "2026-12-02T15:00", group="thesis", gpu_model="A100", count=1)[0] == 201
    # the lab's own limits
    ctx.reservation_max_hours, ctx.reservation_notice_hours = 1.5, 0.5
    assert book(PROF, "2026-12-01T17:00", "2026-12-01T18:30", gpu_model="A100", count=1)[0] == 201
    code, answer = book(PROF, "2026-12-09T14:00", "2026-12-09T16:00")
    assert code == 400 and "at most 1.5 hours" in answer["message"]
    code, answer = book(PROF, "2026-12-01T16:20", "2026-12-01T16:40")
    assert code == 400 and "at least 0.5 hours ahead" in answer["message"]
    assert len(tables(ledger)["gpu_reservations"]) == 3


@pytest.mark.parametrize("setting", ["reservation_max_hours", "reservation_notice_hours"])
@pytest.mark.parametrize("value", ["0", "-4", "float('nan')", "float('inf')"])
def test_the_service_does_not_start_with_bad_reservation_limits(tmp_path, monkeypatch, capsys, setting, value):
    from jupyterhub_gpu.service.app import GPUService
    from jupyterhub_gpu.service.settings import Scheduling

    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.py"
    config.write_text(f"c.GPUService.{setting} = {value}\n")
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:  # one line naming the setting, not a traceback
        GPUService().initialize([db, f"--config={config}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert f"configuration error: GPUService.{setting} must be a positive number of hours, got" in err
    assert not (tmp_path / "ledger.sqlite").exists()
    assert (Scheduling().reservation_max_hours, Scheduling().reservation_notice_hours) == (4, 24)  # defaults kept


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"", 400, "empty"),
        (b"[1]", 400, "JSON object"),
        (b'{"group": "cs231n"', 400, "not valid JSON"),
        (booking(start=...), 400, "start is required"),
        (booking(owner="x"), 400, "Unknown field(s) 'owner'"),
        (booking(start="2026-12-08T14:00"), 400, "start '2026-12-08T14:00' has no time zone"),
        (booking(end="2026-12-08 16:00"), 400, "end '2026-12-08 16:00' has no time zone"),
        (booking(start="next tuesday"), 400, "start must be an ISO 8601"),
        (booking(start=20261208), 400, "start must be an ISO 8601"),
        (booking(end="2026-12-08T13:00+08:00"), 400, "ends (2026-12-08 13:00) before it starts"),
        (booking(count=0), 400, "count must be a whole number"),
        (booking(count=2.0), 400, "count must be a whole number"),
        (booking(count=True), 400, "count must be a whole number"),
        (booking(count="2"), 400, "count must be a whole number"),
        (booking(count=5), 400, "5 T4s asked, but the pool has 4"),
        (booking(gpu_model="H100"), 400, "the pool has no H100 GPUs (it has: A100, T4)"),
        (booking(group="nobody"), 403, "custom:gpu-budgets:write"),  # a prof's unknown group is not theirs
        (booking(group=" cs231n"), 400, "group ' cs231n' is not a plausible name"),
        (booking(weekly_until="2026-12-01"), 400, "repeats until 2026-12-01, before its first window"),
        (booking(weekly_until="15.1.2027"), 400, "weekly_until must be a date"),
        (booking(note="x" * 256), 400, "note must be a string of at most 255"),
        (booking(start="0001-01-01T00:00+05:00"), 400, "start '0001-01-01T00:00+05:00' is not a time between"),
        (booking(end="9999-12-31T23:00-05:00"), 400, "end '9999-12-31T23:00-05:00' is not a time between"),
        (booking(weekly_until="2028-12-08"), 400, "weekly_until must be at most 366 days after the start"),
        (booking(group=".."), 400, "group '..' is not a plausible name"),
    ],
)
def test_bad_bookings_are_refused_naming_the_problem_and_change_nothing(ctx, ledger, body, status, words):
    call(ctx, ADMIN, "POST", "/reservations", booking(start="2026-12-09T14:00+08:00", end="2026-12-09T15:00+08:00"))
    before = tables(ledger)
    code, answer = call(ctx, PROF, "POST", "/reservations", body)
    assert (code, words in answer["message"]) == (status, True), answer
    assert tables(ledger) == before


def test_an_unknown_group_is_refused_for_an_admin(ctx, ledger):
    code, answer = call(ctx, ADMIN, "POST", "/reservations", booking(group="nobody"))
    assert code == 400 and "there is no group named 'nobody'" in answer["message"]
    ctx.hub = FakeHub(fail=True)
    code, answer = call(ctx, ADMIN, "POST", "/reservations", booking())
    assert code == 502 and "the hub did not answer" in answer["message"]
    assert tables(ledger)["gpu_reservations"] == []


def test_bookings_that_conflict_are_refused_with_409_naming_the_window(ctx, ledger):
    assert call(ctx, ADMIN, "POST", "/reservations", booking(count=3, weekly_until="2027-01-15"))[0] == 201
    assert call(ctx, ADMIN, "POST", "/reservations", booking(group="ml101", count=1))[0] == 201  # 3 + 1 = 4
    before = tables(ledger)
    # the thesis group on a later Tuesday of the weekly class (3 reserved then)
    code, answer = call(
        ctx,
        ADMIN,
        "POST",
        "/reservations",
        booking(group="thesis", count=2, start="2026-12-15T15:00+08:00", end="2026-12-15T16:00+08:00"),
    )
    assert code == 409 and "on Tue 15 Dec 15:00–16:00, 5 T4s would be reserved but the pool has 4" in answer["message"]
    # the same group's booking overlapping its own (in another zone: 07:00Z is 15:00 in Shanghai)
    code, answer = call(ctx, ADMIN, "POST", "/reservations", booking(count=1, start="2026-12-08T07:00Z"))
    assert code == 409 and "overlaps cs231n's reservation of 3 T4s" in answer["message"]
    assert tables(ledger) == before
    # another model, or after the term, is free
    assert call(ctx, ADMIN, "POST", "/reservations", booking(gpu_model="A100"))[0] == 201
    later = booking(count=4, group="thesis", start="2027-01-19T14:00+08:00", end="2027-01-19T16:00+08:00")
    assert call(ctx, ADMIN, "POST", "/reservations", later)[0] == 201


def test_without_a_pool_nothing_can_be_booked(ctx, ledger):
    ctx.gpu_pool = {}
    code, answer = call(ctx, ADMIN, "POST", "/reservations", booking())
    assert code == 409 and "c.Scheduling.gpu_pool" in answer["message"]
    assert tables(ledger)["gpu_reservations"] == []


def test_malformed_reservation_ids_are_not_found(ctx):
    for rid in ("abc", "1.5", "99999999999999", "-1", "%C2%B2"):
        assert call(ctx, ADMIN, "DELETE", f"/reservations/{rid}")[0] == 404


def test_admins_set_shares_and_groups_read_their_own(ctx, ledger):
    code, made = call(ctx, ADMIN, "PUT", "/shares", {"group": "thesis", "gpu_model": "A100", "share": 2})
    assert code == 201 and (made["share"], made["updated_by"]) == (2, "admin")
    assert call(ctx, ADMIN, "PUT", "/shares", {"group": "thesis", "gpu_model": "A100", "share": 3})[0] == 200
    assert call(ctx, ADMIN, "PUT", "/shares", {"group": "cs231n", "gpu_model": "T4", "share": 0})[0] == 201
    assert [(s["group"], s["share"]) for s in call(ctx, ADMIN, "GET", "/shares")[1]["shares"]] == [
        ("cs231n", 0),
        ("thesis", 3),
    ]
    assert [s["group"] for s in call(ctx, TUTOR, "GET", "/shares")[1]["shares"]] == ["thesis"]
    assert [s["group"] for s in call(ctx, STUDENT, "GET", "/shares")[1]["shares"]] == ["cs231n"]
    assert call(ctx, ADMIN, "PUT", "/shares", {"group": "thesis", "gpu_model": "A100", "share": None})[0] == 204
    assert call(ctx, ADMIN, "PUT", "/shares", {"group": "thesis", "gpu_model": "A100", "share": None})[0] == 404
    assert [s["group"] for s in call(ctx, ADMIN, "GET", "/shares")[1]["shares"]] == ["cs231n"]


@pytest.mark.parametrize(
    "caller, body, status, words",
    [
        (PROF, {"group": "cs231n", "gpu_model": "T4", "share": 2}, 403, "custom:gpu-budgets:write"),
        (STUDENT, {"group": "cs231n", "gpu_model": "T4", "share": 2}, 403, "custom:gpu-budgets:write"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4", "share": -1}, 400, "share must be a whole number from 0"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4", "share": 1.5}, 400, "share must be a whole number"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4", "share": "2"}, 400, "share must be a whole number"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4", "share": 10**7}, 400, "share must be a whole number"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4"}, 400, "share is required"),
        (ADMIN, {"group": "cs231n", "gpu_model": "T4", "share": 1, "x": 1}, 400, "Unknown field(s) 'x'"),
        (ADMIN, {"group": "nobody", "gpu_model": "T4", "share": 2}, 400, "group: there is no group named 'nobody'"),
        (ADMIN, {"group": "cs231n", "gpu_model": "H100", "share": 2}, 400, "gpu_model: the pool has no H100"),
        (ADMIN, {"group": "cs231n", "gpu_model": "", "share": 2}, 400, "gpu_model must be a non-empty string"),
    ],
)
def test_bad_shares_are_refused_and_change_nothing(ctx, ledger, caller, body, status, words):
    call(ctx, ADMIN, "PUT", "/shares", {"group": "thesis", "gpu_model": "A100", "share": 2})
    before = tables(ledger)
    code, answer = call(ctx, caller, "PUT", "/shares", body)
    assert (code, words in answer["message"]) == (status, True), answer
    assert tables(ledger) == before
