"""A class reservation end to end: a real hub, real servers, the real gpu service, no stand-ins.

The pool is 2 T4s and 1 A100. An admin books both T4s for CS231N through the service's REST ``POST reservations``
for a window that opens 80 s later and lasts 60 s; bookings that are wrong, not allowed, or that the pool
cannot hold are refused and store nothing. Before the window, thea (not in cs231n) runs on a T4: the hub's
scheduler orders her stop at the window's start less ``reservation_lead`` (a ``reserved`` stop order in the
ledger) and the service tells her at once until when she may run. The hub is restarted (``cleanup_servers =
False``) right after the booking, before its scheduler has acted on it, and again after the notice: nothing
changes, and nobody needs to spawn for the restarted hub to schedule. tom, a stranger who asks for a T4 shortly
before the window, is not given the free one (he could not keep it ``min_run``); a stranger granted long enough
before another window reads in the spawn progress until when he may run. At the stop time the service stops thea's
server with reason ``reserved`` and her bill ends there. In the window the cs231n students start on the reserved
T4s though tom asked first; tom waits, told why; a T4 a student gives back stays reserved; after the window the
GPUs return to the pool and tom gets one.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import requests

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config

pytestmark = pytest.mark.hub

LAB = ZoneInfo("Asia/Shanghai")
LEAD = 5  # c.GPULocalSpawner.reservation_lead
OPENS_IN = 80  # seconds from the booking to the window
LENGTH = 60  # the window's length

EXTRA = """
c.GPULocalSpawner.simulated_gpus = [
    {"model": "T4", "count": 2, "memory_gb": 16},
    {"model": "A100", "count": 1, "memory_gb": 40},
]
c.GPULocalSpawner.reservation_lead = %(lead)d
c.GPULocalSpawner.schedule_interval = 1
c.JupyterHub.cleanup_servers = False
c.JupyterHub.load_roles.append(
    {"name": "thesis-instructor", "users": ["prof"], "scopes": ["custom:gpu-usage:read!group=thesis"]}
)
"""


def clock(moment: datetime) -> str:
    """A time as the scheduler and the service word it on the same day: ``14:03`` in the lab's zone."""
    return f"{moment.astimezone(LAB):%H:%M}"


def iso(moment: datetime) -> str:
    return moment.astimezone(LAB).isoformat(timespec="seconds")


class Service:
    """The gpu service's REST API as one user (a token with the scopes given, as the hub makes it)."""

    def __init__(self, hub, user: str, *scopes: str):
        self.headers = {"Authorization": f"token {ServiceUsers(hub, None).token(user, *scopes)}"}
        self.url = f"{hub.url}/services/gpu/api/v1"

    def __call__(self, method: str, path: str, **kwargs) -> requests.Response:
        return requests.request(method, f"{self.url}/{path}", headers=self.headers, timeout=30, **kwargs)


def booking(start: datetime, end: datetime, **changes) -> dict:
    body = {"group": "cs231n", "gpu_model": "T4", "count": 2, "start": iso(start), "end": iso(end), "note": "CS231N"}
    return body | changes


def session_of(ledger: Ledger, user: str):
    return next(iter(ledger.sessions(user=user)), None)


def test_a_class_reservation_stops_a_stranger_serves_the_class_then_returns_the_gpus(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=1, min_minutes=0, gpu_pool={"T4": 2, "A100": 1})
    hub = make_hub(config + EXTRA % {"lead": LEAD})
    hub.create_users("admin", "prof", "stu1", "stu2", "thea", "tom")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    admin = Service(hub, "admin")
    prof = Service(hub, "prof", "custom:gpu-usage:read!group=thesis")
    as_tom = Service(hub, "tom")

    # thea (thesis) runs on a T4 before anything is booked
    hub.start_server("thea", {"profile": "t4"})
    thea = hub.wait_ready("thea")["state"]["gpu"]

    # -- (a) the booking, and the ones refused ------------------------------------------------------------------
    now = datetime.now(timezone.utc).replace(microsecond=0)
    opens, closes = now + timedelta(seconds=OPENS_IN), now + timedelta(seconds=OPENS_IN + LENGTH)
    r = admin("POST", "reservations", json=booking(opens, closes))
    assert r.status_code == 201, r.text
    class_booking = r.json()
    assert (class_booking["group"], class_booking["count"], class_booking["created_by"]) == ("cs231n", 2, "admin")
    # a later window of the A100 (20 min on): a stranger granted now may keep it long enough, until then
    later = now + timedelta(minutes=20)
    r = admin("POST", "reservations", json=booking(later, later + timedelta(minutes=30), gpu_model="A100", count=1))
    assert r.status_code == 201, r.text

    def stored():
        r = admin("GET", "reservations")
        assert r.status_code == 200, r.text
        return r.json()["reservations"]

    before = stored()
    assert len(before) == 2 and r.json()["id"] in {b["id"] for b in before}
    refused = [
        # overlapping the class's window: 2 + 1 T4s at once, the pool has 2
        (409, admin, booking(opens + timedelta(seconds=30), closes + timedelta(seconds=60), group="thesis", count=1)),
        (400, admin, booking(closes, opens)),  # the end before the start
        (400, admin, booking(opens, closes) | {"start": opens.strftime("%Y-%m-%dT%H:%M:%S")}),  # no zone
        (400, admin, booking(opens, closes, group="nosuchgroup")),
        (400, admin, booking(opens, closes, count=0)),
        (400, admin, booking(opens, closes, count=3)),  # more T4s than the pool has, on its own
        (403, prof, booking(opens + timedelta(hours=2), closes + timedelta(hours=2))),  # cs231n is not prof's
    ]
    for status, caller, body in refused:
        r = caller("POST", "reservations", json=body)
        assert r.status_code == status, (body, r.status_code, r.text)
        assert r.json()["message"], r.text
    r = admin("POST", "reservations", json=refused[0][2])
    assert "pool has 2" in r.json()["message"], r.text
    assert stored() == before  # nothing stored by any refusal

    # -- (f) the hub restarts right after the booking: with no spawn, the restarted hub's scheduler acts on it ---
    hub.stop()
    hub.start()
    assert hub.wait_ready("thea")["state"]["gpu"]["session_id"] == thea["session_id"]

    # -- (b) thea is told her end: a stop order at the window's start less the lead, and a notice ---------------
    stop_at = opens - timedelta(seconds=LEAD)
    (order,) = wait_for(lambda: rows.stop_orders(ledger, pending=False), 15, what="thea's stop order")
    assert (order.user, order.kind, order.reason_key) == ("thea", "reserved", "end")
    assert order.session_id == thea["session_id"] and order.stop_at == stop_at, (order, stop_at)
    told = f"This server may run until {clock(stop_at)}: CS231N has 2 T4s reserved from {clock(opens)}."
    notices = wait_for(lambda: [n for n in ledger.notices("thea") if told in n.message], 15, what="thea's notice")
    assert len(notices) == 1, [n.message for n in notices]

    # -- (f) a hub restart between the notice and the window changes nothing ------------------------------------
    hub.stop()
    hub.start()
    assert hub.wait_ready("thea")["state"]["gpu"]["session_id"] == thea["session_id"]
    (kept,) = rows.stop_orders(ledger)  # the same order, noticed before the restart, not told again
    assert (kept.session_id, kept.stop_at, kept.kind, kept.decided_at) == (
        order.session_id,
        stop_at,
        "reserved",
        order.decided_at,
    )
    assert kept.noticed_at is not None and kept.noticed_at <= notices[0].created.replace(tzinfo=timezone.utc)

    # a stranger granted 20 min before the A100's window reads until when it may run
    hub.start_server("tom", {"profile": "a100"})
    events = hub.progress_events("tom", lambda e: "may run until" in e.get("message", ""))
    a100_stop = later - timedelta(seconds=LEAD)
    said = events[-1]["message"]
    assert said == f"may run until {clock(a100_stop)}: CS231N has 1 A100 reserved from {clock(later)}", said
    hub.wait_ready("tom")
    hub.stop_server("tom")
    hub.wait_stopped("tom")

    # a stranger who asks for a T4 shortly before the window waits, though one is free: told why
    assert datetime.now(timezone.utc) < stop_at - timedelta(seconds=10), "too slow: the window is near already"
    hub.start_server("tom", {"profile": "t4"})
    soon = f"the free T4 GPUs are reserved for CS231N from {clock(opens)}"
    events = hub.progress_events("tom", lambda e: soon in e.get("message", ""))
    assert events[-1]["message"].startswith("Waiting for a free Simulated T4 — position 1 of 1"), events[-1]

    # -- (c) at the stop time the service stops thea's server: reason reserved, billed to there -----------------
    hub.wait_stopped("thea", timeout=OPENS_IN + 30)
    record = wait_for(lambda: (s := session_of(ledger, "thea")) and s.stopped and s, 15, what="thea's bill closed")
    assert record.stop_reason == "reserved"
    stopped = record.stopped.replace(tzinfo=timezone.utc)
    (done,) = [o for o in rows.stop_orders(ledger, pending=False) if o.user == "thea"]
    # the service asks the hub to stop it at the stop time (one tick late at most); the bill runs until the
    # server has stopped (jupyter-server takes a few seconds to shut down here)
    assert stop_at <= done.done_at <= stop_at + timedelta(seconds=5), (done, stop_at)
    assert done.done_at <= stopped <= stop_at + timedelta(seconds=15), (stopped, stop_at)
    assert record.minutes == -(-(record.stopped - record.started) // timedelta(minutes=1))
    assert len([n for n in ledger.notices("thea") if told in n.message]) == 1  # told once, restart or not
    assert hub.server("tom") is not None and not hub.server("tom").get("ready")  # the freed T4 is reserved too

    # -- (d) in the window the class starts on the reserved T4s, though tom asked first --------------------------
    def tom_in_queue(reason):
        r = as_tom("GET", "queue")
        assert r.status_code == 200, r.text
        entries = r.json()["queue"]
        return entries if entries and entries[0]["reason"] == reason else None

    time.sleep(max(0.0, (opens - datetime.now(timezone.utc)).total_seconds()))
    # the window is open and both T4s are free: tom still waits, told why (in the progress and in GET queue)
    reserved = f"CS231N has 2 T4s reserved until {clock(closes)}"
    events = hub.progress_events("tom", lambda e: reserved in e.get("message", ""))
    assert events[-1]["message"].startswith("Waiting for a free Simulated T4 — position 1 of 1"), events[-1]
    (entry,) = wait_for(lambda: tom_in_queue(reserved), 15, what="tom's reason in GET queue")
    assert (entry["profile"], entry["gpu_model"], entry["position"], entry["reason_key"]) == ("t4", "T4", 1, "reserved")
    hub.start_server("stu1", {"profile": "t4"})
    hub.start_server("stu2", {"profile": "t4"})
    got = {hub.wait_ready(u)["state"]["gpu"]["devices"][0] for u in ("stu1", "stu2")}
    assert len(got) == 2 and not hub.server("tom").get("ready")

    # a T4 a student gives back during the window stays the class's: tom waits, told why again
    hub.stop_server("stu2")
    hub.wait_stopped("stu2")
    wait_for(lambda: tom_in_queue(reserved), 15, what="tom told again that the free T4 is reserved")
    time.sleep(2)
    assert datetime.now(timezone.utc) < closes, "too slow: the window closed already"
    assert not hub.server("tom").get("ready")

    # -- (e) after the window the GPUs return to the pool: tom gets the free one --------------------------------
    ready = hub.wait_ready("tom", timeout=LENGTH + 30)
    served = datetime.now(timezone.utc)
    assert closes <= served <= closes + timedelta(seconds=20), (served, closes)
    assert ready["state"]["gpu"]["devices"][0] in got
    wait_for(lambda: as_tom("GET", "queue").json()["queue"] == [], 15, what="an empty queue")
    wait_for(lambda: rows.stop_orders(ledger) == [], 15, what="no stop order left")  # tom's A100 one: closed
