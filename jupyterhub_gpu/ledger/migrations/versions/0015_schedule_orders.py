"""the schedule at work: stop orders (preemptions, reservation ends), the published queue, a session's tier

Revision ID: 0015
Revises: 0014

``gpu_schedule_orders``: one row per session the hub's scheduler told to stop at a time: ``kind`` ``preempted``
(its GPU goes to a full-price request) or ``reserved`` (a class reservation starts), why in words (a key of
``scheduling.TEXTS`` and its values, so each reader's language words it), when the notice went out and when the
stop was done; ``cause`` (``request:<user/server>`` or ``reservation:<id>``) and ``withdrawn_at``: the hub withdraws
an order whose cause is gone before its time (the request left the queue, the booking was cancelled). These rows
are the ledger's preemption records. ``gpu_queue``: the hub's wait queue as it last
published it (the gpu service's ``GET queue`` reads it). ``gpu_sessions.tier``: ``preemptible`` for a session of
the cheaper tier (NULL: full price); ``gpu_sessions.resume``: its user asked to be put back in the queue when it
is preempted.
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.add_column(sa.Column("tier", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("resume", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "gpu_schedule_orders",
        sa.Column("session_id", sa.String(length=64), primary_key=True),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("stop_at", sa.DateTime(), nullable=False),
        sa.Column("decided_at", sa.DateTime(), nullable=False),
        sa.Column("reason_key", sa.String(length=32), nullable=False),
        sa.Column("reason_values", sa.Text(), nullable=False),
        sa.Column("for_user", sa.String(length=255), nullable=True),
        sa.Column("noticed_at", sa.DateTime(), nullable=True),
        sa.Column("done_at", sa.DateTime(), nullable=True),
        sa.Column("cause", sa.String(length=255), nullable=True),
        sa.Column("withdrawn_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_gpu_schedule_orders_done_at", "gpu_schedule_orders", ["done_at"])
    op.create_table(
        "gpu_queue",
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


def downgrade():
    op.drop_index("ix_gpu_queue_user", table_name="gpu_queue")
    op.drop_table("gpu_queue")
    op.drop_index("ix_gpu_schedule_orders_done_at", table_name="gpu_schedule_orders")
    op.drop_table("gpu_schedule_orders")
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.drop_column("resume")
        batch.drop_column("tier")
