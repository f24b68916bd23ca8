"""the published profiles keep their price parts and GPU memory (issue 14)

Revision ID: 0009
Revises: 0008

``gpu_pricing.price_per_gpu_hour`` and ``price_per_hour`` (decimal strings):
the configured parts of a profile's rate, so that ``GET pricing`` computes an
admin's edit of one part exactly as the spawner does (:func:`jupyterhub_gpu.money.profile_rate`).
``gpu_memory_mib``: the memory of one GPU of the profile's model in the hub's
inventory, for right-sizing advice. Rows published before have neither (NULL)
until the hub publishes again at its next start.
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.add_column(sa.Column("price_per_gpu_hour", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("price_per_hour", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("gpu_memory_mib", sa.Integer(), nullable=True))


def downgrade():
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.drop_column("gpu_memory_mib")
        batch.drop_column("price_per_hour")
        batch.drop_column("price_per_gpu_hour")
