"""alert channels: the Apprise URLs of users, groups and admins, and the events each gets (issue 22)

Revision ID: 0011
Revises: 0010

``gpu_notify_channels``: one row per channel a user added for themselves, or an
admin for a group or for the admins, with the events it receives. The URL keeps
the secrets the far end needs; the service never returns it, only ``service``
and ``masked``.
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_notify_channels",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("owner_kind", sa.String(length=8), nullable=False),
        sa.Column("owner", sa.String(length=255), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("service", sa.String(length=64), nullable=False),
        sa.Column("masked", sa.Text(), nullable=False),
        sa.Column("events", sa.String(length=255), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=False),
    )
    op.create_index("ix_gpu_notify_channels_owner_kind", "gpu_notify_channels", ["owner_kind"])
    op.create_index("ix_gpu_notify_channels_owner", "gpu_notify_channels", ["owner"])


def downgrade():
    op.drop_index("ix_gpu_notify_channels_owner", table_name="gpu_notify_channels")
    op.drop_index("ix_gpu_notify_channels_owner_kind", table_name="gpu_notify_channels")
    op.drop_table("gpu_notify_channels")
