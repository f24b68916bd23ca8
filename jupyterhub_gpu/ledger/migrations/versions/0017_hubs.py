"""several hubs on one ledger: each session, job, stop order and queue entry knows its hub; the hubs' members

Revision ID: 0017
Revises: 0016

``hub`` (``c.GPUService.hub_name`` and the spawner's ``hub_name``; ``default`` for every row written before):
``gpu_sessions.hub`` (the hub whose spawner started the session: only that hub's gpu service meters, culls,
reconciles and stops it), ``gpu_jobs.hub`` (the hub whose service runs the job), ``gpu_schedule_orders.hub`` (the
hub whose scheduler gave the order, that of its session), ``gpu_pricing.hub`` (the hub that published the profile:
each hub publishes its own profiles and prices, so the primary key becomes ``hub`` and ``slug``). ``gpu_queue`` is
keyed by hub and ``user/server``: two hubs publish their own queues, and equal user and server names on two hubs
are two entries. The queue is what each hub last published, so its rows are dropped here and published again by the
hub's next cycle.
``gpu_hub_members``: each hub process and gpu service that opened the ledger, with its hub name, host, process,
hub API URL and last heartbeat, so that the doctor finds two hubs configured with one name.
"""

import warnings

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

DEFAULT = "default"


def _queue_table(*hub):
    op.create_table(
        "gpu_queue",
        *hub,
        sa.Column("key", sa.String(length=512), primary_key=True),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("group", sa.String(length=255), nullable=True),
        sa.Column("arrived", sa.DateTime(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("length", sa.Integer(), nullable=False),
        sa.Column("wait_seconds", sa.Integer(), nullable=True),
        sa.Column("reason_key", sa.String(length=32), nullable=False),
        sa.Column("reason_values", sa.Text(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_gpu_queue_user", "gpu_queue", ["user"])


def _pricing_key(*columns):
    """Make ``columns`` gpu_pricing's primary key (sqlite: the table is copied; PostgreSQL: the key is replaced)."""
    if op.get_bind().dialect.name == "sqlite":
        # the copy's columns keep their old key flags, which the new key replaces (SQLAlchemy warns of just that)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Table '_alembic_tmp_gpu_pricing' specifies columns", sa.exc.SAWarning)
            with op.batch_alter_table("gpu_pricing", recreate="always") as batch:
                batch.create_primary_key("gpu_pricing_pkey", list(columns))
    else:
        op.drop_constraint("gpu_pricing_pkey", "gpu_pricing", type_="primary")
        op.create_primary_key("gpu_pricing_pkey", "gpu_pricing", list(columns))


def upgrade():
    for table in ("gpu_sessions", "gpu_jobs", "gpu_schedule_orders", "gpu_pricing"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("hub", sa.String(length=63), nullable=False, server_default=DEFAULT))
    _pricing_key("hub", "slug")
    op.create_index("ix_gpu_sessions_hub_stopped", "gpu_sessions", ["hub", "stopped"])
    op.drop_index("ix_gpu_queue_user", table_name="gpu_queue")
    op.drop_table("gpu_queue")
    _queue_table(sa.Column("hub", sa.String(length=63), primary_key=True, server_default=DEFAULT))
    op.create_table(
        "gpu_hub_members",
        sa.Column("id", sa.String(length=32), primary_key=True),
        sa.Column("hub", sa.String(length=63), nullable=False),
        sa.Column("role", sa.String(length=8), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("api_url", sa.String(length=1024), nullable=False, server_default=""),
        sa.Column("version", sa.String(length=64), nullable=False, server_default=""),
        sa.Column("started", sa.DateTime(), nullable=False),
        sa.Column("heartbeat", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_gpu_hub_members_hub", "gpu_hub_members", ["hub"])


def downgrade():
    op.drop_table("gpu_hub_members")
    op.drop_index("ix_gpu_queue_user", table_name="gpu_queue")
    op.drop_table("gpu_queue")
    _queue_table()
    op.drop_index("ix_gpu_sessions_hub_stopped", table_name="gpu_sessions")
    # one set of profiles again: the default hub's (each hub publishes its own again at its next start)
    op.execute(sa.text("DELETE FROM gpu_pricing WHERE hub <> :hub").bindparams(hub=DEFAULT))
    _pricing_key("slug")
    for table in ("gpu_pricing", "gpu_schedule_orders", "gpu_jobs", "gpu_sessions"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("hub")
