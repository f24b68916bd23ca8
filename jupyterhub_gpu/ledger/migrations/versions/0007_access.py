"""profile access and price edits from the admin pages (issue 7)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_profile_overrides",
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("price_per_gpu_hour", sa.String(length=40), nullable=True),
        sa.Column("price_per_hour", sa.String(length=40), nullable=True),
        sa.Column("allowed_groups", sa.Text(), nullable=True),
        sa.Column("updated", sa.DateTime(), nullable=False),
        sa.Column("updated_by", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("slug"),
    )


def downgrade():
    op.drop_table("gpu_profile_overrides")
