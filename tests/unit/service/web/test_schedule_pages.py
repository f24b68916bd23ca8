"""The schedule on the usage pages, through the real page handlers, without a hub (docs/pages.md, docs/scheduling.md).

The group page's reservations, shares and booking form, the admin page's "Schedule" (every booking, the shares and
their form, the hub's queue, the preemptions) and a user's own waiting requests and preemptions. The handlers run
in a tornado application of their own with a stand-in caller (the model the hub would return for a login) and a
stand-in hub that knows some groups; the ledger is a real sqlite file. The forms call the REST API's own functions,
so a refusal shows the API's message on the page and leaves the tables exactly as they were. (XSRF is JupyterHub's:
tests/service/test_pages.py posts the forms through a real hub's login.)
"""

from __future__ import annotations

import asyncio
import csv
import html
import io
import re
from datetime import date, datetime, timedelta, timezone
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.ledger.queries.schedule import (
    PREEMPTED,
    Draft,
    Queued,
    add_reservation,
    order_stop,
    publish_queue,
    reservations,
    set_share,
    shares,
)
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.scheduler import WEEK, Grace, Period
from jupyterhub_gpu.service.web import pages
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.pages.schedule import booking_body, share_body, whole_or_text, zoned
from jupyterhub_gpu.session import SessionStart

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
PREEMPT_VALUES = {"grace": Grace(timedelta(minutes=2))}
PREFIX = "/services/gpu/"

ADMIN = {"kind": "user", "name": "admin", "groups": [], "scopes": ["custom:gpu-budgets:write", "custom:gpu-usage:read"]}
READER = {"kind": "user", "name": "auditor", "groups": [], "scopes": ["custom:gpu-usage:read"]}
PROF = {"kind": "user", "name": "prof", "groups": [], "scopes": ["custom:gpu-usage:read!group=cs231n"]}
TUTOR = {"kind": "user", "name": "tutor", "groups": [], "scopes": ["custom:gpu-usage:read!group=thesis"]}
ALICE = {"kind": "user", "name": "alice", "groups": ["cs231n"], "scopes": []}
BOB = {"kind": "user", "name": "bob", "groups": ["cs231n"], "scopes": []}


class FakeHub:
    def __init__(self, groups=("cs231n", "thesis", "ml101")):
        self.groups = set(groups)

    async def group(self, name):
        return {"name": name} if name in self.groups else None

    async def user(self, name):
        return {"name": name, "groups": ["cs231n"]}


class FakeAuth:
    hub_prefix = "/hub/"
    cookie_name = "jupyterhub-services-gpu"
    base_url = "/services/gpu/"

    def get_token(self, handler, in_cookie=True):
        return None  # a browser's login, not a token


def _as(cls, caller):
    class Handler(cls):
        async def prepare(self):
            pass

        def get_current_user(self):
            return caller

        def now(self):
            return NOW

    return Handler


class Response:
    def __init__(self, code, headers, body):
        self.code, self.headers, self.text = code, headers, body.decode()

    @property
    def location(self) -> str:
        return self.headers.get("Location", "")


def call(ctx, caller, method, path, form=None, headers=None) -> Response:
    """One request to the pages, as ``caller`` (a form: ``application/x-www-form-urlencoded``)."""

    routes = [
        (r"/services/gpu/?", pages.UserPage),
        (r"/services/gpu/users/([^/]+)", pages.UserPage),
        (r"/services/gpu/groups/([^/]+)", pages.GroupPage),
        (r"/services/gpu/groups/([^/]+)/reservations", pages.ReservationFormHandler),
        (r"/services/gpu/admin", pages.AdminPage),
        (r"/services/gpu/admin/shares", pages.ShareFormHandler),
    ]

    async def go():
        app = Application(
            [(pattern, _as(cls, caller), {"ctx": ctx}) for pattern, cls in routes], cookie_secret=b"page-tests"
        )
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            body = urlencode(form or {}, doseq=True) if method == "POST" else None
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{path}",
                method=method,
                body=body,
                headers=headers or {},
                raise_error=False,
                follow_redirects=False,
            )
        finally:
            server.stop()
        return Response(response.code, response.headers, response.body)

    return asyncio.run(go())


@pytest.fixture
def ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield ledger
    ledger.close()


@pytest.fixture
def ctx(ledger):
    return WebContext(
        ledger=ledger,
        hub=FakeHub(),
        hub_auth=FakeAuth(),
        tz=SHANGHAI,
        currency=Currency("CNY"),
        prefix=PREFIX,
        advice_settings=AdviceSettings(),
        max_concurrent_jobs=2,
        job_time_limit_minutes=60,
        job_time_limit_max_minutes=600,
        gpu_pool={"T4": 4, "A100": 2},
    )


def book(ledger, group, count, start, end, weekly_until=None, note="", by="admin", model="T4") -> int:
    draft = Draft(group, model, count, start, end, weekly_until, note)
    return add_reservation(ledger, draft, lambda existing: None, SHANGHAI, NOW, by).id


def tuesday(hour, minutes=0, day=8) -> datetime:
    return datetime(2026, 12, day, hour, minutes, tzinfo=SHANGHAI)


def tables(ledger) -> dict:
    with ledger.engine.connect() as db:
        return {
            t: sorted(map(repr, db.execute(text(f"SELECT * FROM {t}"))))
            for t in ("gpu_reservations", "gpu_group_shares")
        }


def rows(page: str, attribute: str) -> list[str]:
    return re.findall(rf'<tr {attribute}="([^"]+)"', page)


def section(page: str, ident: str) -> str:
    start = page.index(f'id="{ident}"')
    return page[start : page.index("</section>", start)]


def shown(page: str) -> str:
    return html.unescape(page)


# -- the pure helpers of the forms -------------------------------------------------------------------------


def test_a_forms_fields_become_the_apis_json_body():
    form = {"gpu_model": "T4", "count": "2", "start": "2026-12-08T14:00", "end": "2026-12-08T16:00"}
    body = booking_body("cs231n", {**form, "weekly_until": "2027-01-15", "note": ""}, SHANGHAI)
    assert body == {
        "group": "cs231n",
        "gpu_model": "T4",
        "count": 2,
        "start": "2026-12-08T14:00:00+08:00",  # the lab's wall-clock time
        "end": "2026-12-08T16:00:00+08:00",
        "weekly_until": "2027-01-15",
    }
    # what is not a number or a time goes to the API as it is, so that its parser names it
    assert booking_body("g", {"count": "two", "start": "tuesday"}, SHANGHAI) == {
        "group": "g",
        "count": "two",
        "start": "tuesday",
    }
    assert zoned("2026-12-08T14:00+01:00", SHANGHAI) == "2026-12-08T14:00+01:00"
    assert zoned("0001-01-01T00:00", SHANGHAI).startswith("0001-01-01T00:00")  # the API refuses it
    assert whole_or_text("-1") == -1 and whole_or_text("1.5") == "1.5"
    assert share_body({"group": "g", "gpu_model": "T4", "share": "3"}, clear=False)["share"] == 3
    assert share_body({"group": "g", "gpu_model": "T4", "share": ""}, clear=False) == {
        "group": "g",
        "gpu_model": "T4",
    }
    assert share_body({"group": "g", "gpu_model": "T4", "share": "3"}, clear=True)["share"] is None


# -- the group page --------------------------------------------------------------------------------------------


def test_the_group_page_lists_its_bookings_and_shares_from_the_ledger(ctx, ledger):
    weekly = book(ledger, "cs231n", 2, tuesday(14), tuesday(16), date(2027, 1, 15), "lab class", by="prof")
    night = book(ledger, "cs231n", 1, tuesday(23), tuesday(1, day=9), model="A100")
    other = book(ledger, "thesis", 1, tuesday(9), tuesday(10))
    set_share(ledger, "cs231n", "T4", 3, NOW, "admin")
    set_share(ledger, "thesis", "A100", 2, NOW, "admin")
    r = call(ctx, PROF, "GET", PREFIX + "groups/cs231n")
    assert r.code == 200, r.text[:500]
    booked = section(r.text, "reservations")
    assert rows(booked, "data-reservation") == [str(weekly), str(night)]  # by start; not thesis's
    assert str(other) not in rows(booked, "data-reservation")
    first = shown(booked[booked.index(f'data-reservation="{weekly}"') :])
    for words in ("T4", "Dec 8, 2026 14:00–16:00", "Jan 15, 2027", "lab class", "prof", 'value="cancel"'):
        assert words in first.split("</tr>")[0], words
    assert "Dec 8, 2026 23:00–Dec 9, 2026 01:00" in shown(booked)  # a window across midnight: both days
    assert 'id="reservation-form"' in booked and 'name="_xsrf"' in booked
    assert "The lab's GPUs: 2 A100s, 4 T4s. Times are in Asia/Shanghai." in shown(booked)
    group_shares = section(r.text, "shares")
    assert rows(group_shares, "data-group") == ["cs231n", "cs231n"]
    assert re.search(r'data-model="T4">\s*<td>T4</td>\s*<td class="text-end share">3<', group_shares)
    assert re.search(r'data-model="A100">\s*<td>A100</td>\s*<td class="text-end share"><span', group_shares)
    assert "share-form" not in r.text  # read-only for an instructor
    # Chinese: the same rows, worded and dated for the reader
    zh = call(ctx, PROF, "GET", PREFIX + "groups/cs231n?lang=zh-CN")
    assert "预留" in zh.text and "2026年12月8日 14:00–16:00" in zh.text and "2027年1月15日" in zh.text
    assert "默认" in section(zh.text, "shares")
    # the CSV is the REST API's rows
    r = call(ctx, PROF, "GET", PREFIX + "groups/cs231n?format=csv&table=reservations")
    got = list(csv.DictReader(io.StringIO(r.text)))
    assert [(g["id"], g["start"], g["weekly_until"], g["created_by"]) for g in got] == [
        (str(weekly), "2026-12-08T14:00:00+08:00", "2027-01-15", "prof"),
        (str(night), "2026-12-08T23:00:00+08:00", "", "admin"),
    ]
    r = call(ctx, PROF, "GET", PREFIX + "groups/cs231n?format=csv&table=shares")
    assert [(g["gpu_model"], g["share"]) for g in csv.DictReader(io.StringIO(r.text))] == [("T4", "3")]


def test_who_sees_the_booking_form_and_the_cancel_buttons(ctx, ledger):
    book(ledger, "cs231n", 2, tuesday(14), tuesday(16))
    for caller, may in ((ADMIN, True), (PROF, True), (READER, False)):
        page = call(ctx, caller, "GET", PREFIX + "groups/cs231n").text
        assert ('id="reservation-form"' in page, 'value="cancel"' in page) == (may, may), caller["name"]
    assert call(ctx, TUTOR, "GET", PREFIX + "groups/cs231n").code == 403
    assert call(ctx, ALICE, "GET", PREFIX + "groups/cs231n").code == 403


def booking_form(**changes) -> dict:
    form = {"action": "book", "gpu_model": "T4", "count": "2", "start": "2026-12-08T14:00", "end": "2026-12-08T16:00"}
    form.update(changes)
    return {k: v for k, v in form.items() if v is not None}


def test_an_instructor_books_for_their_group_and_not_for_another(ctx, ledger):
    form = booking_form(weekly_until="2027-01-15", note="lab class")
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations?since=2026-12-01", form)
    assert r.code == 303, r.text[:500]
    assert r.location == PREFIX + "groups/cs231n?since=2026-12-01&saved=reservation#reservations"
    (made,) = reservations(ledger, SHANGHAI)
    assert (made.group, made.gpu_model, made.count, made.created_by) == ("cs231n", "T4", 2, "prof")
    assert made.note == "lab class"
    assert made.start == tuesday(14) and made.end == tuesday(16) and made.weekly_until == date(2027, 1, 15)
    assert 'id="saved"' in call(ctx, PROF, "GET", PREFIX + "groups/cs231n?saved=reservation").text
    before = tables(ledger)
    # another group's: the group page's own refusal (403), before the API is asked
    r = call(ctx, PROF, "POST", PREFIX + "groups/thesis/reservations", booking_form(start="2026-12-09T14:00"))
    assert r.code == 403 and 'id="error" data-status="403"' in r.text
    assert "custom:gpu-usage:read!group=thesis" in r.text
    # a reader of every group who may not book: the API's refusal
    r = call(ctx, READER, "POST", PREFIX + "groups/cs231n/reservations", booking_form(start="2026-12-09T14:00"))
    assert r.code == 403 and "custom:gpu-budgets:write" in r.text
    # a student
    assert call(ctx, ALICE, "POST", PREFIX + "groups/cs231n/reservations", booking_form()).code == 403
    assert tables(ledger) == before
    # an admin books for any group
    r = call(ctx, ADMIN, "POST", PREFIX + "groups/thesis/reservations", booking_form(count="1", gpu_model="A100"))
    assert r.code == 303 and [x.group for x in reservations(ledger, SHANGHAI)] == ["cs231n", "thesis"]


def test_a_conflicting_booking_shows_the_409_message_and_stores_nothing(ctx, ledger):
    book(ledger, "ml101", 3, tuesday(14), tuesday(16), date(2027, 1, 15))
    before = tables(ledger)
    form = booking_form(start="2026-12-15T15:00", end="2026-12-15T16:00", note="my note")
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", form)
    assert r.code == 409, r.text[:300]
    error = re.search(r'id="reservation-error" role="alert">([^<]*)<', r.text).group(1)
    assert html.unescape(error) == (
        "The reservation conflicts with others: on Tue 15 Dec 15:00–16:00, 5 T4s would be reserved but the pool"
        " has 4 (3 already reserved for ml101)"
    )
    form_html = section(r.text, "reservations")
    assert 'value="2026-12-15T15:00"' in form_html and 'value="my note"' in form_html  # the form as it was sent
    assert rows(form_html, "data-reservation") == []  # ml101's is not this group's
    assert tables(ledger) == before


@pytest.mark.parametrize(
    "changes, status, words",
    [
        ({"count": "two"}, 400, 'count must be a whole number of GPUs from 1, got "two"'),
        ({"count": "0"}, 400, "count must be a whole number of GPUs from 1, got 0"),
        ({"count": "5"}, 400, "5 T4s asked, but the pool has 4"),
        ({"count": ""}, 400, "count is required"),
        ({"start": ""}, 400, "start is required"),
        ({"start": "next tuesday"}, 400, "start must be an ISO 8601"),
        ({"end": "2026-12-08T13:00"}, 400, "ends (2026-12-08 13:00) before it starts"),
        ({"gpu_model": "H100"}, 400, "the pool has no H100 GPUs (it has: A100, T4)"),
        ({"weekly_until": "2026-12-01"}, 400, "repeats until 2026-12-01, before its first window"),
        ({"weekly_until": "15.1.2027"}, 400, "weekly_until must be a date"),
        ({"note": "x" * 256}, 400, "note must be a string of at most 255"),
        ({"action": "book everything"}, 400, "action must be book or cancel"),
    ],
)
def test_bad_bookings_show_the_apis_message_and_store_nothing(ctx, ledger, changes, status, words):
    book(ledger, "cs231n", 1, tuesday(9), tuesday(10))
    before = tables(ledger)
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", booking_form(**changes))
    assert r.code == status and words in shown(r.text), shown(r.text)[-2000:]
    assert tables(ledger) == before


def test_without_a_pool_the_page_says_so_and_nothing_is_booked(ctx, ledger):
    ctx = WebContext(**{**ctx.__dict__, "gpu_pool": {}})
    page = call(ctx, ADMIN, "GET", PREFIX + "groups/cs231n").text
    assert "c.Scheduling.gpu_pool" in page and 'name="gpu_model" value=""' in page  # a text field, no pool
    r = call(ctx, ADMIN, "POST", PREFIX + "groups/cs231n/reservations", booking_form())
    assert r.code == 409 and "set c.Scheduling.gpu_pool" in shown(r.text)
    assert tables(ledger)["gpu_reservations"] == []


def test_cancelling_follows_the_apis_rule(ctx, ledger):
    mine = book(ledger, "cs231n", 2, tuesday(14), tuesday(16))
    theirs = book(ledger, "thesis", 1, tuesday(9), tuesday(10))
    before = tables(ledger)
    cancel = {"action": "cancel"}
    # another group's booking through this group's form: not found; through its own: not theirs
    assert call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", {**cancel, "id": theirs}).code == 404
    assert call(ctx, PROF, "POST", PREFIX + "groups/thesis/reservations", {**cancel, "id": theirs}).code == 403
    assert call(ctx, READER, "POST", PREFIX + "groups/cs231n/reservations", {**cancel, "id": mine}).code == 403
    for rid in ("", "abc", "²", "99999999999999", "12345"):
        r = call(ctx, ADMIN, "POST", PREFIX + "groups/cs231n/reservations", {**cancel, "id": rid})
        assert r.code == 404 and "There is no reservation" in shown(r.text), rid
    assert tables(ledger) == before
    r = call(ctx, PROF, "POST", PREFIX + "groups/cs231n/reservations", {**cancel, "id": mine})
    assert r.code == 303 and r.location == PREFIX + "groups/cs231n?saved=reservation-cancelled#reservations"
    assert [x.id for x in reservations(ledger, SHANGHAI)] == [theirs]
    assert "Cancelled." in call(ctx, PROF, "GET", PREFIX + "groups/cs231n?saved=reservation-cancelled").text
    # from the admin page, back to it
    r = call(ctx, ADMIN, "POST", PREFIX + "groups/thesis/reservations", {**cancel, "id": theirs, "back": "admin"})
    assert r.code == 303 and r.location == PREFIX + "admin?saved=reservation-cancelled#schedule"
    assert reservations(ledger, SHANGHAI) == []


# -- the admin page ----------------------------------------------------------------------------------------------


def queued(user, server, group, model, position, length, key="share", values=None, wait=720, tier="standard"):
    return Queued(
        key=f"{user}/{server}", user=user, server_name=server, profile=model.lower(), gpu_model=model, count=1,
        tier=tier, group=group, arrived=NOW - timedelta(minutes=10 * position), position=position, length=length,
        wait_seconds=wait, reason_key=key,
        values=values if values is not None else {"percent": 140, "model": model, "period": Period(WEEK)},
        updated=NOW,
    )  # fmt: skip


@pytest.fixture
def busy(ledger):
    """A queue as the hub publishes it, and two preemption records (alice's and bob's, for carol's request)."""
    publish_queue(
        ledger,
        [
            queued("alice", "", "cs231n", "A100", 2, 3),
            queued("bob", "train", "cs231n", "A100", 1, 3, key="fifo", values={}, wait=None),
            queued("carol", "", "thesis", "A100", 3, 3, wait=4000),
            queued("alice", "cheap", "cs231n", "T4", 1, 1, key="tier", values={"model": "T4"}, wait=30,
                   tier="preemptible"),
        ],
    )  # fmt: skip
    for sid, user in (("s-a", "alice"), ("s-b", "bob")):
        ledger.record_start(SessionStart(sid, user, "", ("cs231n",), "t4", ("G",), 1, "CNY", NOW - timedelta(hours=2)))
        order_stop(
            ledger, ledger.get_session(sid), PREEMPTED, NOW - timedelta(hours=1), "preempt", PREEMPT_VALUES,
            NOW - timedelta(hours=1, minutes=2), for_user="carol",
        )  # fmt: skip
    old = "s-old"
    ledger.record_start(SessionStart(old, "alice", "", ("cs231n",), "t4", ("G",), 1, "CNY", NOW - timedelta(days=40)))
    order_stop(ledger, ledger.get_session(old), PREEMPTED, NOW - timedelta(days=39), "preempt", PREEMPT_VALUES,
               NOW - timedelta(days=39), for_user="carol")  # fmt: skip
    return ledger


def test_the_admin_page_shows_the_whole_schedule(ctx, busy):
    ledger = busy
    a = book(ledger, "cs231n", 2, tuesday(14), tuesday(16), date(2027, 1, 15), "lab class")
    b = book(ledger, "thesis", 1, tuesday(9), tuesday(10), model="A100")
    set_share(ledger, "thesis", "A100", 2, NOW, "admin")
    r = call(ctx, ADMIN, "GET", PREFIX + "admin")
    assert r.code == 200, r.text[:500]
    schedule = shown(section(r.text, "schedule"))
    assert rows(schedule, "data-reservation") == [str(b), str(a)]
    assert 'href="/services/gpu/groups/thesis"' in schedule and schedule.count('value="cancel"') == 2
    assert 'name="back" value="admin"' in schedule and 'id="share-form"' in schedule
    assert re.search(r'data-model="A100">\s*<td><a [^>]*>thesis</a></td>\s*<td>A100</td>\s*<td[^>]*>2<', schedule)
    queue_rows = schedule[schedule.index('id="queue-table"') :]
    assert rows(queue_rows, "data-user")[:4] == ["bob", "alice", "carol", "alice"]
    alice = queue_rows[queue_rows.index('data-user="alice"') :].split("</tr>")[0]
    for words in ("1 A100", "2 of 3", "about 12 min", "your group has used 140% of its share of A100 GPUs this week"):
        assert words in alice, (words, alice)
    assert "no estimate yet" in queue_rows and "preemptible" in queue_rows
    preempted = schedule[schedule.index('id="preemptions-table"') :]
    assert rows(preempted, "data-session") == ["s-a", "s-b"] or rows(preempted, "data-session") == ["s-b", "s-a"]
    assert "s-old" not in preempted  # older than 30 days
    assert "carol" in preempted and "Preemptions in the last 30 days" in schedule
    # every table exports
    for table, count in (("reservations", 2), ("shares", 1), ("queue", 4), ("preemptions", 2)):
        r = call(ctx, ADMIN, "GET", PREFIX + f"admin?format=csv&table={table}")
        assert r.code == 200 and len(list(csv.DictReader(io.StringIO(r.text)))) == count, table
    # a reader of everything: the same tables, no forms
    page = call(ctx, READER, "GET", PREFIX + "admin").text
    assert 'id="share-form"' not in page and 'value="cancel"' not in page and 'data-user="carol"' in page
    # in Chinese
    zh = shown(section(call(ctx, ADMIN, "GET", PREFIX + "admin?lang=zh-CN").text, "schedule"))
    assert "调度" in zh and "第 2 位，共 3 位" in zh and "您的组本周已用掉其 A100 GPU 份额的 140%" in zh


def test_an_admin_sets_and_clears_a_share(ctx, ledger):
    r = call(ctx, ADMIN, "POST", PREFIX + "admin/shares", {"group": "thesis", "gpu_model": "A100", "share": "2"})
    assert r.code == 303 and r.location == PREFIX + "admin?saved=share#schedule"
    assert [(s.group, s.gpu_model, s.share, s.updated_by) for s in shares(ledger)] == [("thesis", "A100", 2, "admin")]
    before = tables(ledger)
    for form, status, words in [
        ({"group": "thesis", "gpu_model": "A100", "share": "-1"}, 400, "share must be a whole number from 0"),
        ({"group": "thesis", "gpu_model": "A100", "share": "1.5"}, 400, "share must be a whole number from 0"),
        ({"group": "thesis", "gpu_model": "A100", "share": ""}, 400, "share is required"),
        ({"group": "nobody", "gpu_model": "A100", "share": "2"}, 400, "there is no group named 'nobody'"),
        ({"group": "thesis", "gpu_model": "H100", "share": "2"}, 400, "the pool has no H100 GPUs"),
        ({"group": "", "gpu_model": "T4", "share": "2"}, 400, "group must be a non-empty string"),
        ({"group": "cs231n", "gpu_model": "T4", "action": "clear"}, 404, "The group cs231n has no share of T4 GPUs"),
        ({"group": "thesis", "gpu_model": "A100", "share": "2", "action": "drop"}, 400, "action must be set or clear"),
    ]:
        r = call(ctx, ADMIN, "POST", PREFIX + "admin/shares", form)
        assert r.code == status and words in shown(r.text), (form, shown(r.text)[-1500:])
        if status == 400 and "action" not in form:
            assert re.search(r'id="share-error" role="alert">[^<]+<', r.text)
            assert f'value="{form["group"]}"' in r.text  # the form as it was sent
        assert tables(ledger) == before
    for caller in (PROF, READER, ALICE):  # setting a share needs custom:gpu-budgets:write
        r = call(ctx, caller, "POST", PREFIX + "admin/shares", {"group": "cs231n", "gpu_model": "T4", "share": "5"})
        assert r.code == 403 and "custom:gpu-budgets:write" in shown(r.text)
        assert tables(ledger) == before
    r = call(ctx, ADMIN, "POST", PREFIX + "admin/shares", {"group": "thesis", "gpu_model": "A100", "action": "clear"})
    assert r.code == 303 and r.location == PREFIX + "admin?saved=share-cleared#schedule" and shares(ledger) == []


# -- a user's own page ---------------------------------------------------------------------------------------------


def test_a_students_page_shows_only_their_own_queue_entries_and_preemptions(ctx, busy):
    r = call(ctx, ALICE, "GET", PREFIX)
    assert r.code == 200, r.text[:500]
    waiting = shown(section(r.text, "queue"))
    assert rows(waiting, "data-user") == ["alice", "alice"]
    assert "bob" not in waiting and "carol" not in waiting and "train" not in waiting
    assert "2 of 3" in waiting and "about 12 min" in waiting and "(default)" in waiting and "cheap" in waiting
    preempted = section(r.text, "preemptions")
    assert rows(preempted, "data-session") == ["s-a"]
    assert "carol" not in preempted  # whose request took the GPU is not the user's business
    assert "this server will be stopped in 2 min to free its GPU" in shown(preempted)
    r = call(ctx, BOB, "GET", PREFIX + "?format=csv&table=queue")
    assert [(q["user"], q["server_name"], q["status"]) for q in csv.DictReader(io.StringIO(r.text))] == [
        ("bob", "train", "Waiting for a free A100 — position 1 of 3 — no estimate yet")
    ]
    zh = shown(call(ctx, ALICE, "GET", PREFIX, headers={"Accept-Language": "zh-CN"}).text)
    assert "等待 GPU" in zh and "第 2 位，共 3 位" in zh
    # another user's page (an admin's or an instructor's look at it) has no queue section: the admin page has it
    for caller in (ADMIN, PROF):
        page = call(ctx, caller, "GET", PREFIX + "users/alice")
        assert page.code == 200 and "queue-table" not in page.text and "preemptions-table" not in page.text
    nothing = call(ctx, {**BOB, "name": "dave"}, "GET", PREFIX).text
    assert "Nothing is waiting." in nothing and "None in the last 30 days." in nothing
