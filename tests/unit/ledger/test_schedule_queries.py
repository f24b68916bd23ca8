"""The schedule's tables (migration 0014) and their queries: reservations and group shares."""

from __future__ import annotations

from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect

from jupyterhub_gpu.ledger.queries.schedule import (
    Draft,
    add_reservation,
    delete_reservation,
    get_reservation,
    reservations,
    set_share,
    share_table,
    shares,
)
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)
CLASS = Draft(
    group="cs231n",
    gpu_model="T4",
    count=4,
    start=datetime(2026, 12, 8, 14, 0, tzinfo=SHANGHAI),
    end=datetime(2026, 12, 8, 16, 0, tzinfo=SHANGHAI),
    weekly_until=date(2027, 1, 15),
    note="lab class",
)


def no_check(existing):
    return None


def test_migration_0014_adds_the_schedule_and_goes_back(db_url):
    Ledger(db_url).close()
    ledger = Ledger(db_url, migrate=False)
    try:
        assert {"gpu_reservations", "gpu_group_shares"} <= set(inspect(ledger.engine).get_table_names())
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with ledger.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.downgrade(cfg, "0013")
        assert not {"gpu_reservations", "gpu_group_shares"} & set(inspect(ledger.engine).get_table_names())
        with ledger.engine.begin() as connection:
            cfg.attributes["connection"] = connection
            command.upgrade(cfg, "head")
        assert {"gpu_reservations", "gpu_group_shares"} <= set(inspect(ledger.engine).get_table_names())
    finally:
        ledger.close()


def test_a_booking_is_stored_in_utc_and_read_in_the_labs_zone(ledger):
    made = add_reservation(ledger, CLASS, no_check, SHANGHAI, NOW, "prof")
    (again,) = reservations(ledger, SHANGHAI)
    assert again == made == get_reservation(ledger, made.id, SHANGHAI)
    assert again.start == CLASS.start and again.start.utcoffset() == SHANGHAI.utcoffset(CLASS.start)
    assert (again.weekly_until, again.created_by, again.created_at, again.note) == (
        date(2027, 1, 15),
        "prof",
        NOW,
        "lab class",
    )
    utc = reservations(ledger, timezone.utc)[0]
    assert utc.start.hour == 6 and utc.start == CLASS.start
    assert reservations(ledger, SHANGHAI, ["thesis"]) == []
    assert delete_reservation(ledger, made.id) is True
    assert delete_reservation(ledger, made.id) is False
    assert get_reservation(ledger, made.id, SHANGHAI) is None


def test_a_refusing_check_stores_nothing_and_sees_the_bookings_so_far(ledger):
    add_reservation(ledger, CLASS, no_check, SHANGHAI, NOW, "prof")
    seen = []

    def refuse(existing):
        seen.extend(existing)
        raise ValueError("no")

    with pytest.raises(ValueError):
        add_reservation(ledger, CLASS, refuse, SHANGHAI, NOW, "prof")
    assert [r.group for r in seen] == ["cs231n"]
    assert len(reservations(ledger, SHANGHAI)) == 1


def test_shares_are_set_changed_and_removed(ledger):
    assert set_share(ledger, "thesis", "A100", 2, NOW, "admin") is False
    assert set_share(ledger, "thesis", "A100", 3, NOW, "admin") is True
    assert set_share(ledger, "cs231n", "T4", 0, NOW, "admin") is False
    assert share_table(ledger) == {"thesis": {"A100": 3}, "cs231n": {"T4": 0}}
    assert [(s.group, s.share, s.updated_by, s.updated) for s in shares(ledger, ["thesis"])] == [
        ("thesis", 3, "admin", NOW)
    ]
    assert set_share(ledger, "thesis", "A100", None, NOW, "admin") is True
    assert set_share(ledger, "thesis", "A100", None, NOW, "admin") is False
    assert share_table(ledger) == {"cs231n": {"T4": 0}}
