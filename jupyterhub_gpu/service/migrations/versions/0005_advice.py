"""right-sizing advice stored with each session (issue 11)

Revision ID: 0005
Revises: 0004
"""

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
