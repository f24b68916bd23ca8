"""Right-sizing advice and the ledger: which sessions to judge, their facts, storing the advice and summing it.

The rule (what to advise for a session from its figures) is :mod:`jupyterhub_gpu.rules.advice`; here the
service reads the ledger to build its inputs (the profile catalogue every rule chooses from,
:func:`profile_options`) and keeps its decisions (``gpu_session_advice``, one row per
session, through :mod:`jupyterhub_gpu.ledger.queries.advice`). The tick judges the sessions
(``update_advice``); the REST API and the pages show each session's advice
(:func:`advice_json`) and sum it per group and per profile (:func:`summary`). Money is integer micro-units.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jupyterhub_gpu.billing import minutes_so_far
from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.ledger.models import SessionAdvice, SessionRecord
from jupyterhub_gpu.ledger.pricing import OWN_HUB
from jupyterhub_gpu.ledger.queries.advice import (
    final_advice_rows,
    running_sessions_due_for_advice,
    save_advices,
    sessions_without_final_advice,
)
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency, from_micros
from jupyterhub_gpu.rules.advice import (
    BATCH,
    CLOSE_DELAY,
    CLOSED_LOOKBACK,
    JUDGED,
    LIVE_REFRESH,
    OVERSIZED_MIN_SESSIONS,
    OVERSIZED_SHARE,
    UNJUDGED,
    UNJUDGED_REFRESH,
    Advice,
    AdviceSettings,
    ProfileOption,
    catalogue,
)
from jupyterhub_gpu.rules.advice_text import advice_text
from jupyterhub_gpu.rules.overrides import apply_to_pricing
from jupyterhub_gpu.session import SessionFacts

# -- the profile catalogue ----------------------------------------------------------------------


def profile_options(ledger: Ledger, settings: AdviceSettings | None = None, hub: str = OWN_HUB) -> list[ProfileOption]:
    """The profiles the rules choose from (the advice, a "GPU memory high" or cap notice's bigger profile, a
    job's restart on a bigger one, a session's unit on the API): the ones ``hub`` published (the ledger's own
    hub by default: a session is advised among its own hub's profiles) at the rates and groups the spawner
    charges and allows, the admins' edits applied as ``GET pricing`` shows them, each with its GPU memory
    (:func:`~jupyterhub_gpu.rules.advice.catalogue`; ``settings`` None: the defaults)."""
    return catalogue(apply_to_pricing(ledger.pricing(hub), load_overrides(ledger, hub)), settings or AdviceSettings())


# -- storage ----------------------------------------------------------------------------------


def store(ledger: Ledger, session: SessionFacts, advice: Advice, now: datetime) -> SessionAdvice:
    """Write (or replace) a session's advice; a final one is never replaced by a live one."""
    (row,) = store_all(ledger, [(session, advice)], now)
    return row


def store_all(ledger: Ledger, judged: Sequence[tuple[SessionFacts, Advice]], now: datetime) -> list[SessionAdvice]:
    """:func:`store` for each ``(session, advice)``, in one transaction."""
    return save_advices(
        ledger, [(session.id, session.final, _row_values(session, advice, now)) for session, advice in judged]
    )


def _row_values(session: SessionFacts, advice: Advice, now: datetime) -> dict:
    usage = advice.usage
    s = advice.suggested
    return dict(
        profile=session.profile,
        computed=naive_utc(now),
        final=session.final,
        reason=advice.reason,
        minutes=session.minutes,
        sampled_minutes=usage.sampled_minutes,
        peak_memory_mib=usage.peak_memory_mib,
        p95_memory_mib=usage.p95_memory_mib,
        memory_total_mib=usage.memory_total_mib,
        gpu_memory_mib=usage.memory_total_mib // session.gpu_count if session.gpu_count else 0,
        util_p50_tenths=round(usage.util_p50 * 10),
        util_p95_tenths=round(usage.util_p95 * 10),
        busy_permille=round(usage.busy_share * 1000),
        gpu_count=session.gpu_count,
        gpus_used=advice.gpus_used,
        suggested_profile=s.slug if s else None,
        suggested_display_name=s.display_name if s else None,
        suggested_gpu_count=s.gpu_count if s else None,
        suggested_rate_micros=s.rate_micros if s else None,
        suggested_gpu_share=s.gpu_share if s else None,
        suggested_gpu_model=(s.gpu_model or None) if s and s.gpu_share else None,
        confidence=advice.confidence,
        currency=session.currency,
        rate_micros=session.rate_micros,
        cost_micros=advice.cost_micros,
        counterfactual_micros=advice.counterfactual_micros if s else advice.cost_micros,
        saving_micros=advice.saving_micros,
        message=advice.message,
    )


def facts_of(record: SessionRecord, now: datetime, options: Sequence[ProfileOption]) -> SessionFacts:
    """The advice's input from a session's ledger row: its minutes so far while it runs, its GPU model from
    the catalogue (``options``)."""
    final = record.stopped is not None
    started = aware_utc(record.started)
    minutes = record.minutes if final else minutes_so_far(started, now)
    option = next((o for o in options if o.slug == record.profile), None)
    return SessionFacts(
        id=record.id,
        user=record.user,
        profile=record.profile,
        gpu_count=record.gpu_count,
        rate_micros=record.rate_micros,
        currency=record.currency,
        minutes=minutes or 0,
        groups=tuple(record.group_list),
        pool=record.pool,
        tier=record.tier,
        gpu_model=option.gpu_model if option else "",
        final=final,
    )


def sessions_to_judge(ledger: Ledger, now: datetime, settings: AdviceSettings) -> tuple[list, list]:
    """``(closed, live)``: the sessions one pass of the tick judges (the tick's ``update_advice``).

    A closed session is judged once, ``CLOSE_DELAY`` after its stop (its last
    samples arrive late). A running session is judged once it has run
    ``live_after_minutes`` and again every ``LIVE_REFRESH``.
    """
    closed = sessions_without_final_advice(ledger, now - CLOSED_LOOKBACK, now - CLOSE_DELAY, BATCH)
    live = running_sessions_due_for_advice(
        ledger,
        now - timedelta(minutes=settings.live_after_minutes),
        now - LIVE_REFRESH,
        # judged every LIVE_REFRESH, and sooner while there were too few samples to judge
        UNJUDGED,
        now - UNJUDGED_REFRESH,
        BATCH,
    )
    return closed, live


# -- reading it back ----------------------------------------------------------------------------


def advice_json(row: SessionAdvice | None, currency: Currency, lang: str = "en") -> dict | None:
    """A session's advice as the API shows it (None when it was not advised); its ``message`` and display amount
    in ``lang`` (the API's: English; the pages': the reader's)."""
    if row is None or row.reason != "advised":
        return None
    money = lambda micros: f"{from_micros(micros):f}"  # noqa: E731
    return {
        "final": row.final,
        "computed": aware_utc(row.computed).isoformat().replace("+00:00", "Z"),
        "profile": row.profile,
        "suggested_profile": row.suggested_profile,
        "suggested_display_name": row.suggested_display_name,
        "suggested_gpu_count": row.suggested_gpu_count,
        "suggested_rate_per_minute": money(row.suggested_rate_micros or 0),
        "suggested_gpu_share": row.suggested_gpu_share,  # a time-sliced share of a GPU, else None
        "rate_per_minute": money(row.rate_micros),
        "confidence": row.confidence,
        "gpu_count": row.gpu_count,
        "gpus_used": row.gpus_used,
        "minutes": row.minutes,
        "sampled_minutes": row.sampled_minutes,
        "peak_memory_mib": row.peak_memory_mib,
        "p95_memory_mib": row.p95_memory_mib,
        "memory_total_mib": row.memory_total_mib,
        "util_p50": row.util_p50_tenths / 10,
        "util_p95": row.util_p95_tenths / 10,
        "busy_percent": round(row.busy_permille / 10),
        "currency": row.currency,
        "cost": money(row.cost_micros),
        "counterfactual_cost": money(row.counterfactual_micros),
        "saving": money(row.saving_micros),
        "saving_display": currency.format(from_micros(row.saving_micros), locale=lang),
        "message": advice_text(row, currency, lang),
    }


@dataclass
class Tally:
    judged: int = 0
    advised: int = 0
    cost_micros: int = 0
    advised_cost_micros: int = 0
    counterfactual_micros: int = 0
    saving_micros: int = 0
    suggested: dict[str, int] = field(default_factory=dict)

    def add(self, row: SessionAdvice) -> None:
        self.judged += 1
        self.cost_micros += row.cost_micros
        if row.reason == "advised":
            self.advised += 1
            self.advised_cost_micros += row.cost_micros
            self.counterfactual_micros += row.counterfactual_micros
            self.saving_micros += row.saving_micros
            self.suggested[row.suggested_profile] = self.suggested.get(row.suggested_profile, 0) + 1


def summary(
    ledger: Ledger,
    since: datetime | None,
    until: datetime | None,
    group: str | None,
    currency: Currency,
    lang: str = "en",
) -> dict:
    """Final advice of the sessions that started in ``[since, until)``: totals, per group, per profile, per session.

    ``potential_saving`` is the sum of the per-session savings (the
    counterfactual cost subtracted from the billed cost) of the advised sessions.
    A session counts once, for the group that paid (its pool): ``group`` narrows
    to what that group paid for, and the per-group rows add up to the total
    (less the sessions of users in no group), as the spend does.
    """
    total = Tally()
    by_group: dict[str, Tally] = {}
    by_profile: dict[str, Tally] = {}
    sessions = []
    rows = final_advice_rows(ledger, since, until, group, JUDGED)
    # the profiles' names of every hub (the sessions may be of any), the own hub's where two hubs share a slug
    names = {p["slug"]: p["display_name"] for p in ledger.pricing(hub=None) + ledger.pricing()}
    for row, user, groups, started, pool in rows:
        group_list = json.loads(groups or "[]")
        if row.currency != currency.code:
            continue  # a currency changed mid-way is not summed with the current one
        total.add(row)
        by_profile.setdefault(row.profile, Tally()).add(row)
        if pool is not None:  # once, for the group that paid: a student in two groups is not counted twice
            by_group.setdefault(pool, Tally()).add(row)
        if row.reason == "advised":
            sessions.append(
                {
                    "session_id": row.session_id,
                    "user": user,
                    "groups": group_list,
                    "pool": pool,
                    "started": aware_utc(started).isoformat().replace("+00:00", "Z"),
                    **advice_json(row, currency, lang),
                }
            )

    def tally_json(t: Tally) -> dict:
        money = lambda micros: f"{from_micros(micros):f}"  # noqa: E731
        return {
            "sessions_judged": t.judged,
            "sessions_advised": t.advised,
            "cost": money(t.cost_micros),
            "advised_cost": money(t.advised_cost_micros),
            "counterfactual_cost": money(t.counterfactual_micros),
            "potential_saving": money(t.saving_micros),
            "potential_saving_display": currency.format(from_micros(t.saving_micros), locale=lang),
        }

    profiles = []
    for slug, t in sorted(by_profile.items(), key=lambda kv: -kv[1].saving_micros):
        share = t.advised / t.judged if t.judged else 0.0
        profiles.append(
            {
                "profile": slug,
                "display_name": names.get(slug, slug),
                **tally_json(t),
                "advised_share": round(share, 4),
                "suggested": dict(sorted(t.suggested.items(), key=lambda kv: -kv[1])),
                "oversized": t.judged >= OVERSIZED_MIN_SESSIONS and share >= OVERSIZED_SHARE,
            }
        )
    return {
        "currency": currency.code,
        "group": group,
        "total": tally_json(total),
        "by_group": [{"group": g, **tally_json(t)} for g, t in sorted(by_group.items())],
        "by_profile": profiles,
        "sessions": sessions,
    }
