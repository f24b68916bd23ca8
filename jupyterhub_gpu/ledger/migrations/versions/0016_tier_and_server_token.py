"""a published profile's tier, and the token of a session's own server

Revision ID: 0016
Revises: 0015

``gpu_pricing.tier``: ``preemptible`` for a profile of the cheaper tier (NULL: full price), so that the gpu
service's automatic choices of a profile (the bigger profile a memory notice offers and a restart takes, the
right-sizing advice) keep the tier the student chose. ``gpu_sessions.server_token``: the id JupyterHub gives the
API token of the session's server (``a17``; NULL: unknown, recorded before this), so that only that token passes
as the server's own (samples, reports, restarts), not a token its user made with the same scopes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.add_column(sa.Column("tier", sa.String(length=16), nullable=True))
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.add_column(sa.Column("server_token", sa.String(length=64), nullable=True))


def downgrade():
    with op.batch_alter_table("gpu_sessions") as batch:
        batch.drop_column("server_token")
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.drop_column("tier")
