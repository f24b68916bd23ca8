"""the schedule: class reservations and group shares (issue 16)

Revision ID: 0014
Revises: 0013

``gpu_reservations``: one row per booking of N GPUs of a model for a group, from a start to an end (naive UTC),
once or weekly until a day (``weekly_until``, in the lab's time zone), with who booked it and a note.
``gpu_group_shares``: a group's fair-share weight per GPU model (a whole number; no row: the default share).
The service writes both through its REST API; the hub's wait queue does not read them yet.
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_reservations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("group", sa.String(length=255), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("start", sa.DateTime(), nullable=False),
        sa.Column("end", sa.DateTime(), nullable=False),
        sa.Column("weekly_until", sa.Date(), nullable=True),
        sa.Column("created_by", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("note", sa.String(length=255), nullable=False),
    )
    op.create_index("ix_gpu_reservations_group", "gpu_reservations", ["group"])
    op.create_index("ix_gpu_reservations_start", "gpu_reservations", ["start"])
    op.create_table(
        "gpu_group_shares",
        sa.Column("group", sa.String(length=255), primary_key=True),
        sa.Column("gpu_model", sa.String(length=64), primary_key=True),
        sa.Column("share", sa.Integer(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
    )


def downgrade():
    op.drop_table("gpu_group_shares")
    op.drop_index("ix_gpu_reservations_start", table_name="gpu_reservations")
    op.drop_index("ix_gpu_reservations_group", table_name="gpu_reservations")
    op.drop_table("gpu_reservations")
