"""activity and idle warnings of sessions, for culling

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("last_activity", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("cull_warned_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("cull_rule", sa.String(length=16), nullable=True))


def downgrade():
    with op.batch_alter_table("gpu_sessions", schema=None) as batch_op:
        batch_op.drop_column("cull_rule")
        batch_op.drop_column("cull_warned_at")
        batch_op.drop_column("last_activity")
