"""profile access and price edits from the admin pages (issue 7)

Revision ID: 0007
Revises: 0006
"""

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
