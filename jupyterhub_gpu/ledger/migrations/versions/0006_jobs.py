"""notebook jobs and stop-when-done (issue 10)

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_jobs",
        sa.Column("id", sa.String(length=12), nullable=False),
        sa.Column("user", sa.String(length=255), nullable=False),
        sa.Column("server_name", sa.String(length=255), nullable=False),
        sa.Column("notebook", sa.String(length=1024), nullable=False),
        sa.Column("profile", sa.String(length=64), nullable=False),
        sa.Column("parameters", sa.Text(), nullable=False),
        sa.Column("time_limit_seconds", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.Column("started", sa.DateTime(), nullable=True),
        sa.Column("finished", sa.DateTime(), nullable=True),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_jobs_user", "gpu_jobs", ["user"])
    op.create_index("ix_gpu_jobs_state", "gpu_jobs", ["state"])


def downgrade():
    op.drop_index("ix_gpu_jobs_state", table_name="gpu_jobs")
    op.drop_index("ix_gpu_jobs_user", table_name="gpu_jobs")
    op.drop_table("gpu_jobs")
