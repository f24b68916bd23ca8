"""right-sizing advice stored with each session (issue 11)

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_session_advice",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=False),
        sa.Column("computed", sa.DateTime(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=False),
        sa.Column("minutes", sa.Integer(), nullable=False),
        sa.Column("sampled_minutes", sa.Integer(), nullable=False),
        sa.Column("peak_memory_mib", sa.Integer(), nullable=False),
        sa.Column("p95_memory_mib", sa.Integer(), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
        sa.Column("gpu_memory_mib", sa.Integer(), nullable=False),
        sa.Column("util_p50_tenths", sa.Integer(), nullable=False),
        sa.Column("util_p95_tenths", sa.Integer(), nullable=False),
        sa.Column("busy_permille", sa.Integer(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("gpus_used", sa.Integer(), nullable=False),
        sa.Column("suggested_profile", sa.String(length=64), nullable=True),
        sa.Column("suggested_display_name", sa.String(length=255), nullable=True),
        sa.Column("suggested_gpu_count", sa.Integer(), nullable=True),
        sa.Column("suggested_rate_micros", sa.BigInteger(), nullable=True),
        sa.Column("confidence", sa.String(length=8), nullable=True),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("rate_micros", sa.BigInteger(), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.Column("counterfactual_micros", sa.BigInteger(), nullable=False),
        sa.Column("saving_micros", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )
    with op.batch_alter_table("gpu_session_advice", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_session_advice_profile"), ["profile"], unique=False)


def downgrade():
    with op.batch_alter_table("gpu_session_advice", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_session_advice_profile"))
    op.drop_table("gpu_session_advice")
