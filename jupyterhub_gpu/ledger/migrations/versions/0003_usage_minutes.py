"""per-minute GPU usage samples

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_usage_minutes",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("minute", sa.DateTime(), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("pushes", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("utilization_tenths_sum", sa.Integer(), nullable=False),
        sa.Column("memory_used_max_mib", sa.Integer(), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("kernels_max", sa.Integer(), nullable=False),
        sa.Column("busy_kernels_max", sa.Integer(), nullable=False),
        sa.Column("last_kernel_activity", sa.DateTime(), nullable=True),
        sa.Column("gpus", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "minute"),
    )
    with op.batch_alter_table("gpu_usage_minutes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_usage_minutes_user"), ["user"], unique=False)


def downgrade():
    with op.batch_alter_table("gpu_usage_minutes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_usage_minutes_user"))
    op.drop_table("gpu_usage_minutes")
