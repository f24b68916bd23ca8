"""each hub's own bookings, group shares and admins' profile edits; spawn holds every hub sees

Revision ID: 0018
Revises: 0017

``hub`` (``default`` for every row written before): ``gpu_reservations.hub`` (the hub whose GPUs a class booking
keeps: only that hub's planner keeps them free and stops its sessions for them, and only its service moves Kueue
quota for it), ``gpu_group_shares.hub`` (a group's share of that hub's GPUs; the key becomes hub, group and model)
and ``gpu_profile_overrides.hub`` (an admin's edit of that hub's profile; the key becomes hub and slug): each hub has
its own GPUs and profiles, so an admin of one hub no longer changes another's.
``gpu_spawn_holds``: a spawn that passed the budget check and is not recorded yet holds its first minutes in the
ledger, where the spawns of every hub on the ledger see it (before, each hub process kept its own in memory, so
two hubs could both pass on the same last minutes of one budget). A hold ends when the start is recorded or fails,
or at ``expires`` (a hub that died while it held).
"""

import warnings

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

DEFAULT = "default"

#: the tables whose key gains the hub, with the key's other columns
KEYED = {"gpu_group_shares": ("group", "gpu_model"), "gpu_profile_overrides": ("slug",)}


def _primary_key(table, *columns):
    """Make ``columns`` the table's primary key (sqlite: the table is copied; PostgreSQL: the key is replaced)."""
    if op.get_bind().dialect.name == "sqlite":
        # the copy's columns keep their old key flags, which the new key replaces (SQLAlchemy warns of just that)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", f"Table '_alembic_tmp_{table}' specifies columns", sa.exc.SAWarning)
            with op.batch_alter_table(table, recreate="always") as batch:
                batch.create_primary_key(f"{table}_pkey", list(columns))
    else:
        op.drop_constraint(f"{table}_pkey", table, type_="primary")
        op.create_primary_key(f"{table}_pkey", table, list(columns))


def upgrade():
    for table in ("gpu_reservations", *KEYED):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("hub", sa.String(length=63), nullable=False, server_default=DEFAULT))
    for table, key in KEYED.items():
        _primary_key(table, "hub", *key)
    op.create_index("ix_gpu_reservations_hub", "gpu_reservations", ["hub"])
    op.create_table(
        "gpu_spawn_holds",
        sa.Column("hub", sa.String(length=63), primary_key=True),
        sa.Column("key", sa.String(length=512), primary_key=True),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("pool", sa.String(length=255), nullable=True),
        sa.Column("rate_micros", sa.BigInteger(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("expires", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_gpu_spawn_holds_expires", "gpu_spawn_holds", ["expires"])


def downgrade():
    op.drop_index("ix_gpu_spawn_holds_expires", table_name="gpu_spawn_holds")
    op.drop_table("gpu_spawn_holds")
    op.drop_index("ix_gpu_reservations_hub", table_name="gpu_reservations")
    # one set again: the default hub's (bookings of other hubs go, as their GPUs are no longer told apart)
    for table, key in KEYED.items():
        op.execute(sa.text(f"DELETE FROM {table} WHERE hub <> :hub").bindparams(hub=DEFAULT))
        _primary_key(table, *key)
    op.execute(sa.text("DELETE FROM gpu_reservations WHERE hub <> :hub").bindparams(hub=DEFAULT))
    for table in (*KEYED, "gpu_reservations"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("hub")
