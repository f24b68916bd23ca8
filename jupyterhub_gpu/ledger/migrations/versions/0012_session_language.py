"""the language of each session's spawn: its user's notices and mail speak it (issue 19)

Revision ID: 0012
Revises: 0011

``gpu_sessions.language``: the language the spawn was made in (``en`` or ``zh-CN``), recorded by the
spawner with the session's start. The service words a user's notices, mails and advice in the language
of their latest session; sessions recorded before this revision have none (the lab's default applies).
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.add_column(sa.Column("language", sa.String(length=8), nullable=True))


def downgrade():
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.drop_column("language")
