"""Each budget's use in its current period: the one computation the API, the pages and the metrics share."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from jupyterhub_gpu.billing import BudgetRule, BudgetStatus
from jupyterhub_gpu.ledger.store import Ledger


def current_statuses(ledger: Ledger, rules: list[BudgetRule], now: datetime, tz: ZoneInfo) -> list[BudgetStatus]:
    """Each budget's use in its period, in the order of ``rules``: :meth:`Ledger.statuses_of`.

    The one computation of a budget's use that the spawn check, the tick, the
    API, the pages and the metrics share. A rule the ledger cannot compute (a
    damaged row) is left out.
    """
    return ledger.statuses_of(rules, now, tz)
