"""published profiles and prices

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_pricing",
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("rate_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("allowed_groups", sa.Text(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("slug"),
    )


def downgrade():
    op.drop_table("gpu_pricing")
