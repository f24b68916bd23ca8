"""The hubs' members on a shared ledger (sqlite and a real PostgreSQL): each hub's identity, a restarted hub that
takes over its own row, the hub process's heartbeat off the event loop, and what the doctor finds when two hubs
(with the same hub API URL, as every Zero to JupyterHub release has) run under one name."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import timedelta

import pytest

from jupyterhub_gpu.ledger.hubs import hub_identity, hub_name_problems, valid_identity
from jupyterhub_gpu.ledger.store import Ledger
from tests.unit.ledger.test_ledger import T0

Z2JH = "http://hub:8081/hub/api"  # the hub API URL of every Zero to JupyterHub release
HUB_A, HUB_B = hub_identity(b"a" * 32), hub_identity(b"b" * 32)


@pytest.fixture
def ledgers(db_url):
    """Ledgers opened on one database, as each process of a hub or service opens its own."""
    opened = []

    def open_(hub: str = "default") -> Ledger:
        opened.append(Ledger(db_url, hub=hub))
        return opened[-1]

    yield open_
    for ledger in opened:
        ledger.close()


def test_a_hubs_identity_is_the_same_for_its_secret_and_another_for_another_secret():
    assert HUB_A == hub_identity(b"a" * 32) == hub_identity("a" * 32)
    assert HUB_A != HUB_B and valid_identity(HUB_A) == HUB_A and len(HUB_A) == 24
    assert HUB_A not in (b"a" * 32).hex()  # derived, not the secret's own digits
    assert hub_identity(b"") is None and hub_identity(None) is None
    assert valid_identity("xyz") is None and valid_identity(None) is None


def test_two_hubs_with_the_same_api_url_under_one_name_are_found(ledgers):
    """Two Zero to JupyterHub releases both left at the default name: one hub API URL, two hubs."""
    for identity in (HUB_A, HUB_B):
        ledgers().announce("hub", Z2JH, T0, "1.0", identity)
        ledgers().announce("service", Z2JH, T0 + timedelta(seconds=5), "1.0", identity)
    reader = ledgers()
    for m in reader.hub_members():
        assert m.api_url == Z2JH and m.identity in (HUB_A, HUB_B)
    (problem,) = hub_name_problems(reader.hub_members(), T0 + timedelta(minutes=1))
    assert problem.startswith("two hubs run under the hub name 'default' on this ledger")
    assert f"hub {HUB_A[:8]}: " in problem and f"hub {HUB_B[:8]}: " in problem
    assert "give each hub its own name (c.GPUService.hub_name and the spawner's hub_name" in problem
    # the same hubs under names of their own: nothing wrong
    ledgers("lab").announce("hub", Z2JH, T0, "1.0", HUB_A)
    ledgers("lab").announce("service", Z2JH, T0, "1.0", HUB_A)
    assert hub_name_problems(reader.hub_members(), T0 + timedelta(minutes=1)) == []


def test_a_restarted_hub_takes_over_its_row_and_is_not_counted_as_two(ledgers):
    first = ledgers()
    first.announce("hub", Z2JH, T0, "1.0", HUB_A)
    first.heartbeat(T0 + timedelta(minutes=1))  # then killed: no withdraw
    ledgers().announce("hub", Z2JH, T0 + timedelta(minutes=2), "1.0", HUB_A)  # its restart
    ledgers().announce("service", Z2JH, T0 + timedelta(minutes=2), "1.0", HUB_A)
    members = ledgers().hub_members()
    assert [(m.role, m.identity, m.started) for m in members] == [
        ("hub", HUB_A, T0 + timedelta(minutes=2)),
        ("service", HUB_A, T0 + timedelta(minutes=2)),
    ]
    assert hub_name_problems(members, T0 + timedelta(minutes=3)) == []


def test_a_hub_restarted_with_a_new_cookie_secret_is_not_two_hubs_but_two_at_once_are(ledgers):
    """A hub whose cookie secret is not kept gets a new identity at each start: its old row, still young, ended
    before the new one started; another hub beats after it started."""
    old = ledgers()
    old.announce("hub", Z2JH, T0, "1.0", HUB_A)
    old.heartbeat(T0 + timedelta(minutes=1))
    new = ledgers()
    new.announce("hub", Z2JH, T0 + timedelta(minutes=1, seconds=30), "1.0", HUB_B)
    new.heartbeat(T0 + timedelta(minutes=3))
    assert hub_name_problems(ledgers().hub_members(), T0 + timedelta(minutes=3)) == []
    old.heartbeat(T0 + timedelta(minutes=2))  # the other one runs on after the new one started: two hubs
    (problem,) = hub_name_problems(ledgers().hub_members(), T0 + timedelta(minutes=3))
    assert "two hubs run under the hub name 'default'" in problem


def test_a_service_of_another_hub_than_the_hub_of_its_name_is_flagged(ledgers):
    ledgers().announce("hub", Z2JH, T0, "1.0", HUB_A)
    ledgers().announce("service", Z2JH, T0, "1.0", HUB_B)  # its own hub runs under no name of this ledger
    (problem,) = hub_name_problems(ledgers().hub_members(), T0 + timedelta(minutes=1))
    assert "two hubs run under the hub name 'default'" in problem
    assert f"hub {HUB_B[:8]}: service pid" in problem and "; its hub process is not running under this name)" in problem
    # a service whose hub (by identity, whatever the URL) records its sessions under another name
    ledgers("lab").announce("hub", "http://127.0.0.1:8081/hub/api", T0, "1.0", HUB_B)
    problems = hub_name_problems(ledgers().hub_members(), T0 + timedelta(minutes=1))
    assert any("spawners record sessions as 'lab'" in p and "meters none of them" in p for p in problems)


def test_a_heartbeat_writes_the_row_again_when_another_instance_of_it_withdrew_it(ledgers):
    """An old service of a hub (left running by a killed hub) stops cleanly while the new one runs: the row they
    share is written again at the new one's next heartbeat."""
    old, new = ledgers(), ledgers()
    old.announce("service", Z2JH, T0, "1.0", HUB_A)
    new.announce("service", Z2JH, T0 + timedelta(minutes=1), "1.0", HUB_A)
    old.withdraw()
    assert ledgers().hub_members() == []
    new.heartbeat(T0 + timedelta(minutes=2))
    (member,) = ledgers().hub_members()
    assert (member.identity, member.started, member.heartbeat) == (
        HUB_A,
        T0 + timedelta(minutes=1),
        T0 + timedelta(minutes=2),
    )


def test_the_hub_process_beats_off_the_event_loop_and_logs_another_hub_under_its_name_once(ledgers, caplog):
    hub = ledgers()
    hub.announce("hub", Z2JH, T0, "1.0", HUB_A)
    other = ledgers()
    other.announce("hub", Z2JH, T0, "1.0", HUB_B)
    moments = iter(T0 + timedelta(minutes=n) for n in range(1, 100))
    threads = []
    beat = hub.heartbeat

    def heartbeat(now):
        threads.append(threading.get_ident())
        beat(now)

    hub.heartbeat = heartbeat

    async def run():
        task = asyncio.create_task(hub.keep_beating(timedelta(milliseconds=20), lambda: next(moments)))
        while len(threads) < 3:
            other.heartbeat(T0 + timedelta(minutes=len(threads) + 1))
            await asyncio.sleep(0.01)
        task.cancel()
        return threading.get_ident()

    with caplog.at_level(logging.ERROR, logger="jupyterhub_gpu.ledger"):
        loop_thread = asyncio.run(run())
    assert loop_thread not in threads
    (mine,) = [m for m in ledgers().hub_members() if m.identity == HUB_A]
    assert mine.heartbeat >= T0 + timedelta(minutes=3)
    told = [r.getMessage() for r in caplog.records if "two hubs run under the hub name 'default'" in r.getMessage()]
    assert len(told) == 1, told
