"""Renaming a hub on the ledger (sqlite and a real PostgreSQL): its bookings, shares, profile edits, sessions, jobs
and stop orders follow it, what it publishes again at start is dropped, and every refusal changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from jupyterhub_gpu.ledger import renaming
from jupyterhub_gpu.ledger.models import (
    GroupShare,
    JobRecord,
    PriceRecord,
    ProfileOverride,
    QueueEntry,
    ReservationRecord,
    ScheduleOrder,
    SessionRecord,
    SpawnHold,
)
from jupyterhub_gpu.ledger.queries import overrides, schedule
from jupyterhub_gpu.ledger.renaming import RenameRefused, kept_rows, rename_hub
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.rules.overrides import Override
from tests.unit.ledger.test_ledger import T0, make_start

TABLES = (
    ReservationRecord,
    GroupShare,
    ProfileOverride,
    SessionRecord,
    JobRecord,
    ScheduleOrder,
    PriceRecord,
    QueueEntry,
    SpawnHold,
)


def fill(ledger: Ledger, sid: str = "s1") -> None:
    """One row of each table for the ledger's hub."""
    ledger.record_start(make_start(sid))
    hub, naive = ledger.hub, T0.replace(tzinfo=None)
    schedule.set_share(ledger, "cs231n", "T4", 3, T0, "admin")
    overrides.save_override(ledger, Override(slug="a100", allowed_groups=("thesis",)), T0, "admin")
    with ledger.Session() as db:
        db.add_all(
            [
                ReservationRecord(hub=hub, group="cs231n", gpu_model="T4", count=2, start=naive,
                                  end=naive + timedelta(hours=2), created_by="admin", created_at=naive, note=""),
                JobRecord(id=f"{sid}job", hub=hub, user="ann", server_name="job", notebook="a.ipynb", profile="t4",
                          time_limit_seconds=60, state="running", created=naive),
                ScheduleOrder(session_id=sid, hub=hub, user="ann", server_name="", kind="preempted", stop_at=naive,
                              decided_at=naive, reason_key="k", reason_values="{}"),
                PriceRecord(hub=hub, slug="t4", display_name="T4", rate_micros=50_000, currency="CNY",
                            updated=naive),
                QueueEntry(hub=hub, key="bob/", user="bob", server_name="", profile="t4", gpu_model="T4", count=1,
                           tier="full", arrived=naive, position=1, length=1, reason_key="k", reason_values="{}",
                           updated=naive),
                SpawnHold(hub=hub, key="cy/", user="cy", rate_micros=1, gpu_count=1, created=naive,
                          expires=naive + timedelta(minutes=5)),
            ]
        )  # fmt: skip
        db.commit()


def counts(ledger: Ledger) -> dict[str, dict[str, int]]:
    with ledger.Session() as db:
        return {t.__tablename__: dict(db.execute(select(t.hub, func.count()).group_by(t.hub)).all()) for t in TABLES}


@pytest.fixture
def old(db_url):
    ledger = Ledger(db_url)  # 'default', as every row written before hubs had names
    fill(ledger)
    yield ledger
    ledger.close()


def test_a_rename_moves_every_row_and_drops_what_the_hub_publishes_again(old, db_url):
    moved = rename_hub(old, "default", "lab", T0)
    assert moved == {t.__tablename__: 1 for t in TABLES}
    after = counts(old)
    for table in renaming.MOVED:
        assert after[table.__tablename__] == {"lab": 1}, table.__tablename__
    for table in renaming.DROPPED:
        assert after[table.__tablename__] == {}, table.__tablename__
    lab = Ledger(db_url, hub="lab")
    try:  # the renamed hub reads its booking, share and the restriction of its profile
        assert [r.group for r in schedule.reservations(lab, T0.tzinfo)] == ["cs231n"]
        assert schedule.share_table(lab) == {"cs231n": {"T4": 3}}
        assert overrides.load_overrides(lab)["a100"].allowed_groups == ("thesis",)
        assert kept_rows(lab) == {"lab": {"gpu_reservations": 1, "gpu_group_shares": 1, "gpu_profile_overrides": 1}}
    finally:
        lab.close()


def test_a_dry_run_counts_and_changes_nothing(old):
    before = counts(old)
    assert rename_hub(old, "default", "lab", T0, dry_run=True) == {t.__tablename__: 1 for t in TABLES}
    assert counts(old) == before


@pytest.mark.parametrize(
    ("new", "said"),
    [
        ("Lab", "the new hub name must be 1 to 63 characters"),
        ("lab/1", "the new hub name must be 1 to 63 characters"),
        ("default", "the hub is already named 'default'"),
    ],
)
def test_a_bad_new_name_is_refused_and_changes_nothing(old, new, said):
    before = counts(old)
    with pytest.raises(RenameRefused, match=said):
        rename_hub(old, "default", new, T0)
    assert counts(old) == before


def test_a_hub_without_rows_is_refused(old):
    before = counts(old)
    with pytest.raises(RenameRefused, match="the ledger has no rows of a hub named 'dept'"):
        rename_hub(old, "dept", "lab", T0)
    assert counts(old) == before


def test_a_name_that_has_rows_is_refused_a_merge_is_not_a_rename(old, db_url):
    dept = Ledger(db_url, hub="dept")
    try:
        schedule.set_share(dept, "thesis", "A100", 2, T0, "admin")
        before = counts(old)
        with pytest.raises(RenameRefused, match=r"'dept' already has rows \(gpu_group_shares 1\)"):
            rename_hub(old, "default", "dept", T0)
        assert counts(old) == before
    finally:
        dept.close()


@pytest.mark.parametrize("running", ["default", "lab"])
def test_a_hub_running_under_either_name_is_refused(old, db_url, running):
    member = Ledger(db_url, hub=running)
    try:
        member.announce("service", "http://127.0.0.1:8081/hub/api", T0 - timedelta(minutes=3))
        before = counts(old)
        with pytest.raises(RenameRefused, match=f"stop the hubs first: service pid .* \\(hub '{running}'\\)"):
            rename_hub(old, "default", "lab", T0)
        assert counts(old) == before
        # a member whose heartbeat is old is a stopped hub: the rename goes ahead
        assert rename_hub(old, "default", "lab", T0 + timedelta(hours=1))["gpu_sessions"] == 1
    finally:
        member.close()


def test_kept_rows_names_each_hubs_bookings_shares_and_edits(old):
    assert kept_rows(old) == {"default": {"gpu_reservations": 1, "gpu_group_shares": 1, "gpu_profile_overrides": 1}}


def test_a_merge_joins_the_same_hub_started_under_its_new_name(old, db_url):
    """The hub was restarted as 'lab' before the rename: its sessions under 'lab' stay, 'default''s join them."""
    lab = Ledger(db_url, hub="lab")
    try:
        lab.record_start(make_start("s2"))
        schedule.set_share(lab, "thesis", "A100", 2, T0, "admin")
        rename_hub(old, "default", "lab", T0, merge=True)
        after = counts(old)
        assert after["gpu_sessions"] == {"lab": 2}
        assert schedule.share_table(lab) == {"cs231n": {"T4": 3}, "thesis": {"A100": 2}}
    finally:
        lab.close()


def test_a_merge_is_refused_where_a_share_or_an_edit_is_under_both_names(old, db_url):
    lab = Ledger(db_url, hub="lab")
    try:
        schedule.set_share(lab, "cs231n", "T4", 1, T0, "admin")
        overrides.save_override(lab, Override(slug="a100", allowed_groups=()), T0, "admin")
        before = counts(old)
        with pytest.raises(RenameRefused, match="the share of 'cs231n' on 'T4', an edit of the profile 'a100'"):
            rename_hub(old, "default", "lab", T0, merge=True)
        assert counts(old) == before
    finally:
        lab.close()
