"""the group pool that pays for each session, and alerts once per budget revision (issue 14)

Revision ID: 0008
Revises: 0007

``gpu_sessions.pool``: the one group whose budget a session draws from. Sessions
recorded before it existed get the documented rule: the first group of their
stored (sorted) list of groups, none for a session without groups.

``gpu_alerts.revision``: the ``updated`` time of the budget an alert was sent for
(ISO, UTC), part of the once-only key, so that a budget edited after it ran out
sends its notices again. Alerts sent before take the revision of their budget
as it is now, so that nothing already sent is sent again by the upgrade.
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _iso(moment) -> str:
    """A budget's revision: its ``updated`` time as ISO text (``Budget.revision`` in the ledger)."""
    return moment.isoformat() if moment is not None else ""


def upgrade():
    with op.batch_alter_table("gpu_sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pool", sa.String(length=255), nullable=True))
        batch_op.create_index(batch_op.f("ix_gpu_sessions_pool"), ["pool"], unique=False)
    bind = op.get_bind()
    sessions = sa.table(
        "gpu_sessions", sa.column("id", sa.String), sa.column("groups", sa.Text), sa.column("pool", sa.String)
    )
    by_groups: dict[str, list[str]] = {}
    for sid, groups in bind.execute(sa.select(sessions.c.id, sessions.c.groups)):
        by_groups.setdefault(groups or "[]", []).append(sid)
    for groups, ids in by_groups.items():
        names = sorted(json.loads(groups or "[]"))
        if not names:
            continue
        for i in range(0, len(ids), 500):
            bind.execute(sa.update(sessions).where(sessions.c.id.in_(ids[i : i + 500])).values(pool=names[0]))

    with op.batch_alter_table("gpu_alerts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("revision", sa.String(length=40), nullable=False, server_default=""))
        batch_op.drop_constraint("uq_alert_once", type_="unique")
        batch_op.create_unique_constraint(
            "uq_alert_once", ["user", "budget_key", "period_start", "threshold", "channel", "revision"]
        )
    budgets = sa.table(
        "gpu_budgets", sa.column("scope", sa.String), sa.column("subject", sa.String), sa.column("updated", sa.DateTime)
    )
    alerts = sa.table("gpu_alerts", sa.column("budget_key", sa.String), sa.column("revision", sa.String))
    for scope, subject, updated in bind.execute(sa.select(budgets.c.scope, budgets.c.subject, budgets.c.updated)):
        bind.execute(
            sa.update(alerts).where(alerts.c.budget_key == f"{scope}:{subject}").values(revision=_iso(updated))
        )


def downgrade():
    with op.batch_alter_table("gpu_alerts", schema=None) as batch_op:
        batch_op.drop_constraint("uq_alert_once", type_="unique")
        batch_op.drop_column("revision")
        batch_op.create_unique_constraint(
            "uq_alert_once", ["user", "budget_key", "period_start", "threshold", "channel"]
        )
    with op.batch_alter_table("gpu_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_sessions_pool"))
        batch_op.drop_column("pool")
