"""profiles of part of a GPU, and advice that suggests one (issue 17)

Revision ID: 0013
Revises: 0012

``gpu_pricing.gpu_share`` and ``gpu_pricing.mig``: a published profile's time-sliced share count (how
many servers share one GPU) or its MIG slice ("1g.10gb"); None for whole GPUs and for profiles published
before this revision. The advice and the cap notice take a share's memory from them (the GPU's memory
divided by the share count), never from what a server reports.

``gpu_session_advice.suggested_gpu_share`` and ``suggested_gpu_model``: an advice that suggests a share
says so ("a quarter of a T4 would have served"); None for every other advice.

A server's per-GPU figures on a shared GPU (scope, its own processes, how many share it) are kept in
``gpu_usage_minutes.gpus``, the JSON per GPU that exists already: no column for them.
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.add_column(sa.Column("gpu_share", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("mig", sa.String(length=32), nullable=True))
    with op.batch_alter_table("gpu_session_advice") as batch:
        batch.add_column(sa.Column("suggested_gpu_share", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("suggested_gpu_model", sa.String(length=64), nullable=True))


def downgrade():
    with op.batch_alter_table("gpu_session_advice") as batch:
        batch.drop_column("suggested_gpu_model")
        batch.drop_column("suggested_gpu_share")
    with op.batch_alter_table("gpu_pricing") as batch:
        batch.drop_column("mig")
        batch.drop_column("gpu_share")
