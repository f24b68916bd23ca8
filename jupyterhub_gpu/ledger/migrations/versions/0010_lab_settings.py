"""the lab's settings as the hub published them: currency and time zone (issue 21)

Revision ID: 0010
Revises: 0009

``gpu_lab_settings``: one row per setting the hub's spawner publishes at start
(``currency``, ``currency_symbol``, ``timezone``), so that the service, the
pages and the CLI read one source of truth and the service refuses to start
when its own configuration says otherwise.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "gpu_lab_settings",
        sa.Column("name", sa.String(length=64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated", sa.DateTime(), nullable=False),
    )


def downgrade():
    op.drop_table("gpu_lab_settings")
