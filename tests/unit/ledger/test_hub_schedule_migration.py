"""Migration 0018 on a ledger with rows (sqlite and a real PostgreSQL): the class bookings, group shares and
admins' profile edits written before become the default hub's; another hub then keeps its own (the same group,
model and slug too); going back keeps the default hub's and the old keys."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from jupyterhub_gpu.ledger.queries import schedule as rows
from jupyterhub_gpu.ledger.queries.overrides import load_overrides, save_override
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger, make_engine
from jupyterhub_gpu.rules.overrides import Override
from tests.unit.ledger.test_ledger import T0

ZONE = ZoneInfo("Asia/Shanghai")
START = datetime(2026, 12, 8, 6, 0)  # naive UTC, as the ledger keeps it


def migrate(cfg, engine, revision: str, down: bool = False) -> None:
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(cfg, revision)


def test_migrating_gives_the_schedule_and_the_edits_the_default_hub_and_going_back_keeps_its_own(db_url):
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    engine = make_engine(db_url)
    migrate(cfg, engine, "0017")
    with engine.begin() as db:
        db.execute(
            text(
                'INSERT INTO gpu_reservations ("group", gpu_model, count, start, "end", created_by, created_at, note)'
                " VALUES ('cs231n', 'T4', 2, :start, :end, 'prof', :t, 'lab class')"
            ),
            {"start": START, "end": START + timedelta(hours=2), "t": T0.replace(tzinfo=None)},
        )
        db.execute(
            text(
                'INSERT INTO gpu_group_shares ("group", gpu_model, share, updated, updated_by)'
                " VALUES ('cs231n', 'T4', 3, :t, 'admin')"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
        db.execute(
            text(
                "INSERT INTO gpu_profile_overrides (slug, price_per_gpu_hour, updated, updated_by)"
                " VALUES ('a100', '30', :t, 'admin')"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
    migrate(cfg, engine, "0018")
    default, dept = Ledger(db_url, hub="default"), Ledger(db_url, hub="dept-k8s")
    try:
        (booked,) = rows.reservations(default, ZONE)
        assert (booked.group, booked.gpu_model, booked.count, booked.note) == ("cs231n", "T4", 2, "lab class")
        assert rows.share_table(default) == {"cs231n": {"T4": 3}}
        assert load_overrides(default)["a100"].price_per_gpu_hour == Decimal(30)
        # another hub has none of them, and keeps its own under the same group, model and slug
        assert rows.reservations(dept, ZONE) == [] and rows.share_table(dept) == {} and load_overrides(dept) == {}
        assert rows.get_reservation(dept, booked.id, ZONE) is None
        draft = rows.Draft("cs231n", "T4", 4, booked.start, booked.end, note="dept class")
        rows.add_reservation(dept, draft, lambda existing: None, ZONE, T0, "admin")
        assert not rows.set_share(dept, "cs231n", "T4", 1, T0, "admin")  # a new row: the key is the hub's too
        save_override(dept, Override("a100", price_per_gpu_hour=Decimal(12)), T0, "admin")
        assert rows.share_table(default) == {"cs231n": {"T4": 3}}
        assert load_overrides(default)["a100"].price_per_gpu_hour == Decimal(30)
        assert [r.count for r in rows.reservations(default, ZONE)] == [2]
    finally:
        default.close()
        dept.close()
    migrate(cfg, engine, "0017", down=True)  # one set again: the default hub's
    with engine.begin() as db:
        assert db.execute(text("SELECT count, note FROM gpu_reservations")).all() == [(2, "lab class")]
        assert db.execute(text('SELECT "group", gpu_model, share FROM gpu_group_shares')).all() == [("cs231n", "T4", 3)]
        assert db.execute(text("SELECT slug, price_per_gpu_hour FROM gpu_profile_overrides")).all() == [("a100", "30")]
    with pytest.raises(IntegrityError), engine.begin() as db:  # the old key again: one share per group and model
        db.execute(
            text(
                'INSERT INTO gpu_group_shares ("group", gpu_model, share, updated, updated_by)'
                " VALUES ('cs231n', 'T4', 5, :t, 'admin')"
            ),
            {"t": T0.replace(tzinfo=None)},
        )
    migrate(cfg, engine, "head")
    engine.dispose()
