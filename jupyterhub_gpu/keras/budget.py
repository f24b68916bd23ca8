"""What :class:`~jupyterhub_gpu.keras.BudgetGuard` reads and decides, without TensorFlow.

The budget comes from this server's own ``GET /gpu/api/v1/stats`` (the jupyterhub-gpu server
extension), reached with the server's token: ``$JUPYTERHUB_SERVICE_URL`` and
``$JUPYTERHUB_API_TOKEN``, which JupyterHub puts in the server's environment and every kernel
inherits.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass

from jupyterhub_gpu.money import Currency, MoneyError


def stats_url(env=os.environ) -> str | None:
    """This server's stats endpoint, or None outside a JupyterHub server."""
    base = env.get("JUPYTERHUB_SERVICE_URL")
    if not base:
        return None
    return base.rstrip("/") + "/gpu/api/v1/stats?history=0"


def read_stats(url: str | None = None, token: str | None = None, timeout: float = 5.0) -> dict:
    """The server extension's stats (without the chart history). Raises OSError or ValueError."""
    url = url or stats_url()
    if not url:
        raise ValueError("not in a JupyterHub server: $JUPYTERHUB_SERVICE_URL is not set")
    token = token if token is not None else os.environ.get("JUPYTERHUB_API_TOKEN", "")
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@dataclass(frozen=True)
class BudgetView:
    """The part of the stats that matters to a training run."""

    minutes_left: int | None  # how long the tightest budget lasts at this server's rate
    remaining: str | None  # the tightest budget's remainder, as the service wrote it
    unit: str | None  # "money" or "gpu_hours"
    currency_symbol: str
    final_notice: str | None  # the budget is used up: the server stops after the grace period

    def describe(self) -> str:
        if self.final_notice:
            return f"the budget is used up: {self.final_notice}"
        if self.minutes_left is None:
            return "no budget applies to this server"
        left = f"{self.currency_symbol}{self.remaining}" if self.unit == "money" else f"{self.remaining} GPU-hours"
        return f"{left} left, about {self.minutes_left} min at this server's rate"


def budget_view(stats: dict) -> BudgetView:
    session = stats.get("session") or {}
    final = next(
        (
            n.get("message") or "budget used up"
            for n in stats.get("notices") or []
            if n.get("kind") == "budget" and n.get("level") == "error" and not n.get("dismissed")
        ),
        None,
    )
    minutes = session.get("budget_minutes_left")
    return BudgetView(
        minutes_left=int(minutes) if minutes is not None else None,
        remaining=session.get("budget_remaining"),
        unit=session.get("budget_unit"),
        currency_symbol=session.get("currency_symbol") or _symbol(session.get("currency")),
        final_notice=final,
    )


def _symbol(code) -> str:
    """The English symbol of the session's currency when the admin set none (a training log is in English)."""
    try:
        return Currency.from_config(code).symbol_in()
    except MoneyError:
        return ""


def stop_reason(view: BudgetView, margin_minutes: float, next_epoch_minutes: float | None = None) -> str | None:
    """Why training must stop now, or None to go on.

    Stop when the budget is used up (the final notice), when at most ``margin_minutes`` are
    left, or when the next epoch (as long as the last one) would end inside the margin.
    """
    if view.final_notice:
        return view.describe()
    if view.minutes_left is None:
        return None
    if view.minutes_left <= margin_minutes:
        return f"only about {view.minutes_left} min of budget left (the margin is {margin_minutes:g} min)"
    if next_epoch_minutes is not None and view.minutes_left - next_epoch_minutes <= margin_minutes:
        return (
            f"about {view.minutes_left} min of budget left: the next epoch (about {next_epoch_minutes:.1f} min)"
            f" would end inside the {margin_minutes:g} min margin"
        )
    return None
