"""Two hubs on one ledger (sqlite and a real PostgreSQL), each with its own service: a class booking, a group
share and an admin's profile edit belong to the hub they were made on (docs/admin.md, "Two hubs on one ledger").

A booking an instructor makes through the lab hub's service (``POST reservations``) is not listed, cancelled or
counted by the department hub's service (its REST API, its group and admin pages, its capacity check), and the
department hub's planner neither keeps GPUs free for it nor orders its sessions to end, nor does its service move
Kueue quota for it; the lab's own do. Shares likewise; an admin's edit of ``a100`` on one hub leaves the other
hub's ``a100`` (its spawner's profiles, its pricing, its admin page) as configured.

The service's handlers run in a tornado application of their own with a stand-in caller and a stand-in hub that
knows the groups, as in test_schedule_pages.py; the planner is the spawner's (a real allocator); the quota mover
is a stand-in that records the bookings the tick hands it.
"""

from __future__ import annotations

import asyncio
import html
import json
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
from sqlalchemy import text
from tornado.httpclient import AsyncHTTPClient
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.rules.advice import AdviceSettings
from jupyterhub_gpu.service.feeds.advice import profile_options
from jupyterhub_gpu.service.tick.context import TickContext
from jupyterhub_gpu.service.tick.scheduling import move_quotas
from jupyterhub_gpu.service.web import pages
from jupyterhub_gpu.service.web.api import pricing as pricing_api
from jupyterhub_gpu.service.web.api import schedule as schedule_api
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.spawners.choosing import profiles_of
from tests.unit.service.web.test_schedule_pages import FakeAuth, FakeHub, section
from tests.unit.service.web.test_schedule_pages import rows as rows_of
from tests.unit.spawners.test_planner import ZONE, ask, make, running, wait_in_queue

PREFIX = "/services/gpu/"
#: the services' clock: two days before the test's real time, so that an instructor's booking (24 hours' notice)
#: is in force now for the planners, which run on the real clock
NOW = utcnow() - timedelta(days=2)

ADMIN = {"kind": "user", "name": "admin", "groups": [], "scopes": ["custom:gpu-budgets:write", "custom:gpu-usage:read"]}
PROF = {"kind": "user", "name": "prof", "groups": [], "scopes": ["custom:gpu-usage:read!group=cs231n"]}

# the same slug on both hubs, each at its own price (tests/unit/service/web/test_hub_profiles.py)
LAB_PROFILES = [
    {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3"},
    {"slug": "a100", "display_name": "1× A100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15"},
]
DEPT_PROFILES = [
    {"slug": "l4", "display_name": "1× L4", "gpu_model": "L4", "gpu_count": 1, "price_per_gpu_hour": "4.8"},
    {"slug": "a100", "display_name": "A100 (dept)", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "12"},
]


def published(profiles: list[dict]) -> list[dict]:
    return [{**p, "rate_per_minute": Decimal(p["price_per_gpu_hour"]) / 60} for p in profiles]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def two(request, tmp_path):
    """``(lab, dept)``: the services' contexts of two hubs, ``lab-docker`` and ``dept-k8s``, on one ledger, each
    hub's profiles published; 4 T4s and 2 A100s in each hub's pool."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_url")
    made = []
    for name, profiles in (("lab-docker", LAB_PROFILES), ("dept-k8s", DEPT_PROFILES)):
        ledger = Ledger(url, hub=name)
        ledger.set_pricing(published(profiles), "CNY", NOW)
        made.append(
            WebContext(
                ledger=ledger,
                hub=FakeHub(),
                hub_auth=FakeAuth(),
                tz=ZONE,
                currency=Currency("CNY"),
                prefix=PREFIX,
                advice_settings=AdviceSettings(),
                max_concurrent_jobs=2,
                job_time_limit_minutes=60,
                job_time_limit_max_minutes=600,
                gpu_pool={"T4": 4, "A100": 2},
            )
        )
    yield tuple(made)
    for ctx in made:
        ctx.ledger.close()


ROUTES = [
    (r"/services/gpu/api/v1/reservations", schedule_api.ReservationsHandler),
    (r"/services/gpu/api/v1/reservations/([^/]+)", schedule_api.ReservationHandler),
    (r"/services/gpu/api/v1/shares", schedule_api.SharesHandler),
    (r"/services/gpu/api/v1/pricing", pricing_api.PricingHandler),
    (r"/services/gpu/groups/([^/]+)", pages.GroupPage),
    (r"/services/gpu/groups/([^/]+)/reservations", pages.ReservationFormHandler),
    (r"/services/gpu/admin", pages.AdminPage),
    (r"/services/gpu/admin/profiles/([^/]+)", pages.ProfileFormHandler),
]


def call(ctx, caller, method, path, body=None, form=None):
    """``(status, JSON, or the page's text)`` of one request to ``ctx``'s service, as ``caller``."""

    def as_caller(cls):
        class Handler(cls):
            async def prepare(self):
                pass

            def get_current_user(self):
                return caller

            def now(self):
                return NOW

        return Handler

    async def go():
        app = Application([(p, as_caller(cls), {"ctx": ctx}) for p, cls in ROUTES], cookie_secret=b"two-hubs")
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        try:
            raw = urlencode(form, doseq=True) if form is not None else (None if body is None else json.dumps(body))
            response = await AsyncHTTPClient().fetch(
                f"http://127.0.0.1:{port}{PREFIX}{path}",
                method=method,
                body=raw,
                raise_error=False,
                follow_redirects=False,
                allow_nonstandard_methods=True,
            )
        finally:
            server.stop()
        answer = response.body.decode()
        if response.headers.get("Content-Type", "").startswith("application/json") and answer:
            return response.code, json.loads(answer)
        return response.code, answer

    return asyncio.run(go())


def schedule_tables(ledger) -> list[str]:
    with ledger.engine.connect() as db:
        return [
            repr(row)
            for table in ("gpu_reservations", "gpu_group_shares", "gpu_profile_overrides")
            for row in db.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2, 3"))
        ]


def window(start_minutes: int, hours: int = 2) -> dict:
    """A booking's times, ``start_minutes`` from the real now, in the lab's zone."""
    start = (utcnow() + timedelta(minutes=start_minutes)).astimezone(ZONE).replace(second=0, microsecond=0)
    return {"start": start.isoformat(), "end": (start + timedelta(hours=hours)).isoformat()}


@pytest.fixture
def booked(two):
    """The lab hub's instructor of cs231n books 2 of its 4 T4s through its service, from 10 minutes ago."""
    lab, _dept = two
    code, made = call(
        lab, PROF, "POST", "api/v1/reservations", {"group": "cs231n", "gpu_model": "T4", "count": 2, **window(-10)}
    )
    assert code == 201, made
    return made


def test_a_booking_on_one_hub_is_not_listed_nor_cancelled_by_the_other_hubs_service(two, booked):
    lab, dept = two
    for caller in (ADMIN, PROF):
        code, listed = call(lab, caller, "GET", "api/v1/reservations")
        assert code == 200 and [r["id"] for r in listed["reservations"]] == [booked["id"]]
        code, listed = call(dept, caller, "GET", "api/v1/reservations")
        assert code == 200 and listed["reservations"] == []
    before = schedule_tables(lab.ledger)
    # the department's admin (or cs231n's instructor there) cannot cancel it by its id: not found, nothing changes
    for caller in (ADMIN, PROF):
        code, answer = call(dept, caller, "DELETE", f"api/v1/reservations/{booked['id']}")
        assert code == 404 and "There is no reservation" in answer["message"], answer
        code, page = call(
            dept, caller, "POST", "groups/cs231n/reservations", form={"action": "cancel", "id": booked["id"]}
        )
        assert code == 404, page[:300]
    assert rows.get_reservation(dept.ledger, booked["id"], ZONE) is None
    assert rows.get_reservation(lab.ledger, booked["id"], ZONE) is not None
    assert schedule_tables(lab.ledger) == before
    # the pages: the lab's group and admin pages list it, the department's do not
    for ctx, listed in ((lab, [str(booked["id"])]), (dept, [])):
        code, page = call(ctx, PROF, "GET", "groups/cs231n")
        assert code == 200 and rows_of(section(page, "reservations"), "data-reservation") == listed
        code, page = call(ctx, ADMIN, "GET", "admin")
        assert code == 200 and rows_of(section(page, "schedule"), "data-reservation") == listed
    # its own hub's admin cancels it
    assert call(lab, ADMIN, "DELETE", f"api/v1/reservations/{booked['id']}")[0] == 204
    assert rows.reservations(lab.ledger, ZONE) == []


def test_the_other_hubs_planner_keeps_no_gpu_free_and_orders_no_end_for_the_booking(two, booked):
    lab, dept = two

    async def main(ctx, stranger, newcomer):
        """A stranger's session holds one of the hub's 2 T4s; a newcomer of another group asks for the other."""
        allocator, planner = make(ctx.ledger, t4=2)
        session = running(ctx.ledger, allocator, stranger, "other", minutes_ago=20)
        await planner.fresh(0)
        told = {}
        allocator.expect(f"{newcomer}/", ask(newcomer, "other"), lambda d: told.__setitem__(newcomer, d))
        wanted = asyncio.ensure_future(allocator.acquire(f"{newcomer}/", "T4", 1))
        await asyncio.sleep(0.2)
        granted = wanted.done() and wanted.result()
        if not granted:
            await wait_in_queue(allocator, f"{newcomer}/")
            allocator.cancel(f"{newcomer}/")
            await asyncio.gather(wanted, return_exceptions=True)
        await planner.settled()
        orders = [o for o in rows.stop_orders(ctx.ledger, hub=ctx.ledger.hub) if o.session_id == session.id]
        return granted, told.get(newcomer), orders, [r.id for r in planner.view.reservations]

    # the department's planner: its GPU goes to the newcomer at once, its stranger is told nothing
    granted, told, orders, seen = asyncio.run(main(dept, "sue", "dan"))
    assert granted and told is None and orders == [] and seen == []
    # the lab's own planner keeps the class's GPUs: the newcomer waits for the booking, the stranger's session ends
    granted, told, orders, seen = asyncio.run(main(lab, "sam", "eve"))
    assert not granted and told.key == "reserved"
    assert [(o.kind, o.reason_key) for o in orders] == [("reserved", "end")]
    assert seen == [str(booked["id"])]


def test_only_the_booking_hubs_service_moves_kueue_quota_for_it(two, booked):
    lab, dept = two
    handed = {}

    def mover(name):
        async def move(bookings, now):
            handed[name] = [(b.id, b.group, b.model, b.count) for b in bookings]
            return []

        return move

    for ctx in (lab, dept):
        name = ctx.ledger.hub
        tick_ctx = TickContext(ledger=ctx.ledger, tz=ZONE, kueue_quota=mover(name))
        assert asyncio.run(move_quotas(tick_ctx, utcnow())) == []
    assert handed == {"lab-docker": [(str(booked["id"]), "cs231n", "T4", 2)], "dept-k8s": []}


def test_each_hubs_capacity_check_counts_only_its_own_bookings(two, booked):
    lab, dept = two
    later = window(3 * 24 * 60)
    code, made = call(
        lab, ADMIN, "POST", "api/v1/reservations", {"group": "thesis", "gpu_model": "T4", "count": 3, **later}
    )
    assert code == 201, made
    # the department's 4 T4s are all free in that window: its admin books them all
    code, made = call(
        dept, ADMIN, "POST", "api/v1/reservations", {"group": "ml101", "gpu_model": "T4", "count": 4, **later}
    )
    assert code == 201, made
    # the lab's pool has one T4 left then: 2 more are refused by the lab's own bookings
    code, refused = call(
        lab, ADMIN, "POST", "api/v1/reservations", {"group": "ml101", "gpu_model": "T4", "count": 2, **later}
    )
    assert code == 409 and "conflicts" in refused["message"], refused
    assert len(rows.reservations(lab.ledger, ZONE)) == 2 and len(rows.reservations(dept.ledger, ZONE)) == 1


def test_group_shares_are_each_hubs_own(two):
    lab, dept = two
    code, share = call(lab, ADMIN, "PUT", "api/v1/shares", {"group": "cs231n", "gpu_model": "T4", "share": 3})
    assert code == 201, share
    assert call(dept, ADMIN, "GET", "api/v1/shares")[1] == {"shares": []}
    before = schedule_tables(lab.ledger)
    # clearing it through the other hub's service: that hub has no such share (404), the lab's stays
    code, answer = call(dept, ADMIN, "PUT", "api/v1/shares", {"group": "cs231n", "gpu_model": "T4", "share": None})
    assert code == 404 and "has no share" in answer["message"]
    assert schedule_tables(lab.ledger) == before
    # the department sets its own share of the same group and model
    code, _ = call(dept, ADMIN, "PUT", "api/v1/shares", {"group": "cs231n", "gpu_model": "T4", "share": 1})
    assert code == 201
    for ctx, value in ((lab, 3), (dept, 1)):
        (only,) = call(ctx, PROF, "GET", "api/v1/shares")[1]["shares"]
        assert (only["group"], only["gpu_model"], only["share"]) == ("cs231n", "T4", value)
        assert rows.share_table(ctx.ledger) == {"cs231n": {"T4": value}}  # what each hub's planner reads
        code, page = call(ctx, ADMIN, "GET", "admin")
        assert code == 200 and f'<td class="text-end share">{value}<' in section(page, "schedule")


def test_the_other_hubs_planner_counts_only_its_own_hubs_use_for_fair_share(two):
    lab, dept = two

    async def usage(ctx, session_of=None):
        allocator, planner = make(ctx.ledger, t4=2, fair=True)
        if session_of is not None:
            running(ctx.ledger, allocator, session_of, "cs231n", minutes_ago=90)
        await planner.fresh(0)
        return planner.view.usage

    assert asyncio.run(usage(lab, "sam")).get("cs231n")  # cs231n's use of the lab's T4
    assert asyncio.run(usage(dept)) == {}


def spawner_profiles(ctx) -> dict:
    """The profiles the hub's spawner offers, the admins' edits applied (its ledger carries the hub's name)."""
    spawner = SimpleNamespace(
        profiles=LAB_PROFILES if ctx.ledger.hub == "lab-docker" else DEPT_PROFILES,
        _require_image=False,
        ledger=ctx.ledger,
    )
    return {p.slug: p for p in asyncio.run(profiles_of(spawner))}


def test_an_admins_profile_edit_on_one_hub_leaves_the_other_hubs_profile_of_the_same_slug(two):
    lab, dept = two
    form = {"price_per_gpu_hour": "30", "restrict": "groups", "allowed_groups": "thesis"}
    code, page = call(lab, ADMIN, "POST", "admin/profiles/a100", form=form)
    assert code == 303, page[:300]
    # the lab's own: its spawner, its pricing
    a100 = spawner_profiles(lab)["a100"]
    assert (a100.price_per_gpu_hour, a100.allowed_groups) == (Decimal(30), ("thesis",))
    pricing = {p["slug"]: p for p in call(lab, ADMIN, "GET", "api/v1/pricing")[1]["profiles"]}
    assert pricing["a100"]["rate_per_minute"] == "0.5"
    # the department's a100 is as its hub configured it: its spawner, its pricing, its admin page
    assert load_overrides(dept.ledger) == {}
    a100 = spawner_profiles(dept)["a100"]
    assert (a100.price_per_gpu_hour, a100.allowed_groups) == (Decimal(12), ())
    pricing = {p["slug"]: p for p in call(dept, ADMIN, "GET", "api/v1/pricing")[1]["profiles"]}
    assert pricing["a100"]["rate_per_minute"] == "0.2" and pricing["a100"]["allowed_groups"] == []
    code, page = call(dept, ADMIN, "GET", "admin")
    assert code == 200 and "thesis" not in html.unescape(section(page, "profiles"))
    # a session of the department's, advised by the lab's service, is priced by the department's own a100
    options = {o.slug: o for o in profile_options(lab.ledger, hub="dept-k8s")}
    assert options["a100"].rate_micros == 200_000
    # the department's admin resets its a100: the lab's edit stays
    before = schedule_tables(lab.ledger)
    assert call(dept, ADMIN, "POST", "admin/profiles/a100", form={"action": "reset"})[0] == 303
    assert schedule_tables(lab.ledger) == before and set(load_overrides(lab.ledger)) == {"a100"}
