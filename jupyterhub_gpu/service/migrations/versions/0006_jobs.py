"""notebook jobs and stop-when-done (issue 10)

Revision ID: 0006
Revises: 0005
"""

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
