"""Right-sizing advice: when a cheaper profile would have done the same work.

A session's per-minute usage (:class:`~.ledger.UsageMinute`) is summarised into
peak and percentile GPU memory, utilization percentiles, the share of busy
minutes and which GPUs did any work (:func:`summarize`). :func:`advise`, a pure
function of that summary, the session and the profile catalogue, names the
cheapest profile of the session's tier that the group paying for it may use
(:func:`.moves.keeps_choices`: a full-price session is never advised onto the
preemptible tier, nor paid by another group)

- whose GPU memory per GPU has ``headroom`` (default 20%) over the observed peak
  of the GPUs that did work,
- whose GPU count covers the GPUs that did work (so "1 GPU would have done" for a
  2-GPU session with one idle GPU),
- whose compute is likely enough (see :func:`compute_fit`),

with what the session would have cost on it and how confident the advice is.
Sessions shorter than ``min_minutes`` (default 15) get no advice, nor do
sessions that nothing cheaper fits.

The service computes advice at each session's close (final) and, for sessions
running longer than ``live_after_minutes`` (default 30), every few minutes while
they run (live); both are stored in ``gpu_session_advice``, one row per session
(:func:`..tick.update_advice`). The REST API serves it with each session and sums it per
group and per profile (:func:`summary`). Money is integer micro-units.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, time, timedelta
from decimal import Decimal
from types import SimpleNamespace

from jupyterhub_gpu.billing import minutes_so_far
from jupyterhub_gpu.clock import aware_utc, naive_utc
from jupyterhub_gpu.gpus.names import gpu_family, memory_from_name
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.ledger.models import SessionAdvice, SessionRecord
from jupyterhub_gpu.ledger.queries.advice import (
    final_advice_rows,
    running_sessions_due_for_advice,
    save_advice,
    sessions_without_final_advice,
)
from jupyterhub_gpu.ledger.queries.samples import memory_unknown
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency, from_micros, to_micros
from jupyterhub_gpu.service.domain.moves import Chosen, keeps_choices
from jupyterhub_gpu.service.domain.notices import Message, Once, day_in
from jupyterhub_gpu.session import IDLE_UTIL_PERCENT, SessionFacts

log = logging.getLogger("jupyterhub_gpu.advice")

#: Defaults of the settings (see docs/advice.md for the reasoning).
DEFAULT_HEADROOM_PERCENT = 20
DEFAULT_MIN_MINUTES = 15
DEFAULT_LIVE_AFTER_MINUTES = 30
#: A running session's live advice is recomputed at most this often (and, before it could be judged, this often).
LIVE_REFRESH = timedelta(minutes=5)
UNJUDGED_REFRESH = timedelta(seconds=15)
#: Only sessions that stopped this recently get a Lab notice with their advice (not a backlog after an upgrade).
NOTICE_WITHIN = timedelta(days=1)
#: A GPU did work when it was busy in at least this share of the busiest GPU's busy minutes.
GPU_USED_SHARE = 0.05
#: Advice needs samples for at least this share of the billed minutes; under ``FULL_COVERAGE`` it is less sure.
MIN_COVERAGE = 0.5
FULL_COVERAGE = 0.8
#: For another GPU model (whose speed is not known), how busy the session may have been.
#: "very likely": busy at most 25% of the minutes and a 95th-percentile utilization of at most 50%;
#: "likely": busy at most 50% of the minutes and a 95th percentile of at most 80%.
OTHER_MODEL_LIMITS = {"high": (0.25, 50.0), "medium": (0.5, 80.0)}
#: Closed sessions get their final advice this long after the stop (the last samples come late).
CLOSE_DELAY = timedelta(seconds=10)
#: How far back a tick looks for closed sessions without final advice, and how many it judges at once.
CLOSED_LOOKBACK = timedelta(days=7)
BATCH = 200

CONFIDENCES = ("high", "medium")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
CONFIDENCE_WORDS = {"high": "very likely", "medium": "likely"}
#: Why a session got no advice.
REASONS = ("advised", "too_short", "no_samples", "few_samples", "no_gpu", "nothing_cheaper", "unknown_memory")


class AdviceError(ValueError):
    """A setting of the advice that cannot be used; the message names it."""


# -- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdviceSettings:
    """The thresholds of the advice (``GPUService.advice_*``)."""

    headroom_percent: int = DEFAULT_HEADROOM_PERCENT
    min_minutes: int = DEFAULT_MIN_MINUTES
    live_after_minutes: int = DEFAULT_LIVE_AFTER_MINUTES
    #: profile slug -> GPU memory per GPU in GB, for profiles whose model name does not say it
    profile_memory_gb: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, low, high in (
            ("headroom_percent", 0, 400),
            ("min_minutes", 1, 24 * 60),
            ("live_after_minutes", 0, 7 * 24 * 60),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise AdviceError(f"advice_{name} must be a whole number from {low} to {high}, got {value!r}")
        if not isinstance(self.profile_memory_gb, dict):
            raise AdviceError(
                f"advice_profile_memory_gb must be a dict of profile -> GB, got {self.profile_memory_gb!r}"
            )
        for slug, gb in self.profile_memory_gb.items():
            if (
                isinstance(gb, bool)
                or not isinstance(gb, (int, float))
                or not 0 < gb <= 4096
                or not isinstance(slug, str)
            ):
                raise AdviceError(
                    f"advice_profile_memory_gb[{slug!r}] must be a number of GB from 0 to 4096, got {gb!r}"
                )


# -- the profile catalogue ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileOption:
    """A profile as the advice sees it: its price, GPUs, GPU memory per GPU (None: unknown) and who may use it."""

    slug: str
    display_name: str
    gpu_model: str
    gpu_count: int
    rate_micros: int  # per minute
    memory_mib: int | None = None
    allowed_groups: tuple[str, ...] = ()
    #: part of a GPU (issue 17): how many servers share one GPU (``memory_mib`` is then one share's, the GPU's
    #: memory divided by it), or the MIG slice ("1g.10gb", whose ``memory_mib`` is the slice's)
    gpu_share: int | None = None
    mig: str | None = None
    #: the preemptible tier (docs/scheduling.md): an automatic choice never moves a session to another tier
    preemptible: bool = False

    def allows(self, groups: Iterable[str]) -> bool:
        return not self.allowed_groups or bool(set(self.allowed_groups) & set(groups))

    @property
    def unit_model(self) -> str:
        """The model of one of its GPUs as :func:`compute_ratio` reads it: a MIG slice named with its GPU."""
        return f"{self.gpu_model} MIG {self.mig}" if self.mig else self.gpu_model


def share_ratio(current: ProfileOption | None, candidate: ProfileOption) -> float:
    """The candidate's share of a GPU's compute over the current profile's: a time-sliced share of ``k`` gets
    ``1/k`` of its GPU when every share is busy (the worst case, which the advice assumes); a whole GPU 1."""
    mine = (current.gpu_share if current else None) or 1
    return mine / (candidate.gpu_share or 1)


def compute_ratio(current_model: str, candidate_model: str) -> float | None:
    """The candidate's compute per GPU over the current one's, where it is known: same model, or MIG slices of it."""
    cur, cur_slice, cur_whole = gpu_family(current_model)
    cand, cand_slice, cand_whole = gpu_family(candidate_model)
    if not cur or cur != cand:
        return None
    cur_units = cur_slice if cur_slice is not None else cur_whole
    cand_units = cand_slice if cand_slice is not None else cand_whole
    return cand_units / cur_units


def catalogue(pricing: Sequence[dict], settings: AdviceSettings) -> list[ProfileOption]:
    """The profiles the hub published (``Ledger.pricing()``) with their GPU memory per GPU.

    Memory comes from ``advice_profile_memory_gb`` first, then from the hub's
    GPU inventory (``gpu_memory_mib`` of the published profile: the smallest GPU
    of its model), then from the model or profile name (a MIG slice ``1g.5gb``,
    ``A100-80GB``, or a known model such as ``T4``). A profile of part of a GPU
    (issue 17) has the memory of its unit: the hub publishes a share's cap (the
    GPU's memory divided by its ``gpu_share``) and a MIG slice's own; from names,
    a share's is the model's memory divided by ``gpu_share``, a slice's that of
    its slice's name (``mig``). Never from what a user's
    server reported: a forged ``memory_total_mib`` would advise other users onto
    a GPU too small for their work (invariant 7). A profile whose memory stays
    unknown is never advised.
    """
    options = []
    for p in pricing:
        slug = p["slug"]
        share, mig = p.get("gpu_share") or None, p.get("mig") or None
        if slug in settings.profile_memory_gb:  # the admin's figure is the unit's, a share's or a slice's
            memory = int(Decimal(str(settings.profile_memory_gb[slug])) * 1024)
        elif p.get("gpu_memory_mib"):  # the hub publishes one unit's: a share's cap, a slice's own
            memory = int(p["gpu_memory_mib"])
        elif mig and memory_from_name(mig):
            memory = memory_from_name(mig)
        else:
            memory = memory_from_name(p.get("gpu_model") or "", p.get("display_name") or "")
            memory = memory // (share or 1) if memory else memory
        options.append(
            ProfileOption(
                slug=slug,
                display_name=p.get("display_name") or slug,
                gpu_model=p.get("gpu_model") or "",
                gpu_count=int(p.get("gpu_count") or 0),
                rate_micros=to_micros(Decimal(p["rate_per_minute"])),
                memory_mib=memory,
                allowed_groups=tuple(p.get("allowed_groups") or ()),
                gpu_share=int(share) if share else None,
                mig=mig,
                preemptible=p.get("tier") == "preemptible",
            )
        )
    return options


# -- a session's usage ------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUUse:
    """One GPU of a session: its peak memory and in how many minutes it was busy."""

    uuid: str
    peak_memory_mib: int
    busy_minutes: int


@dataclass(frozen=True)
class SessionUsage:
    """What a session's per-minute samples say (memory summed over its GPUs, utilization averaged)."""

    sampled_minutes: int = 0
    peak_memory_mib: int = 0
    p95_memory_mib: int = 0
    memory_total_mib: int = 0
    util_p50: float = 0.0
    util_p95: float = 0.0
    busy_share: float = 0.0
    gpus: tuple[GPUUse, ...] = ()
    #: a minute whose memory the server could not measure (a share in a container): no peak to judge
    memory_unknown: bool = False


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summarize(minutes: Iterable) -> SessionUsage:
    """A :class:`SessionUsage` from a session's :class:`~.ledger.UsageMinute` rows (or rows with their fields)."""
    memory, utils, total = [], [], 0
    busy = 0
    unknown = False
    per_gpu: dict[str, list[int]] = {}
    for m in minutes:
        if not m.samples:
            continue
        unknown = unknown or memory_unknown(m)
        util = m.utilization_tenths_sum / 10 / m.samples
        utils.append(util)
        memory.append(m.memory_used_max_mib)
        total = max(total, m.memory_total_mib or 0)
        busy += util >= IDLE_UTIL_PERCENT  # a minute (or a GPU in a minute) is busy from the idle threshold up
        for uuid, g in json.loads(m.gpus or "{}").items():
            entry = per_gpu.setdefault(uuid, [0, 0])
            entry[0] = max(entry[0], int(g.get("memory_used_max_mib", 0)))
            entry[1] += g.get("utilization_max", 0) >= IDLE_UTIL_PERCENT
    n = len(utils)
    return SessionUsage(
        sampled_minutes=n,
        peak_memory_mib=max(memory, default=0),
        p95_memory_mib=int(percentile(memory, 95)),
        memory_total_mib=total,
        util_p50=round(percentile(utils, 50), 1),
        util_p95=round(percentile(utils, 95), 1),
        busy_share=busy / n if n else 0.0,
        gpus=tuple(GPUUse(uuid, mem, b) for uuid, (mem, b) in sorted(per_gpu.items())),
        memory_unknown=unknown,
    )


def gpus_used(usage: SessionUsage, gpu_count: int) -> tuple[int, int]:
    """``(GPUs that did work, the peak memory of the busiest of them in MiB)``.

    Without per-GPU figures every GPU counts as used and the session's whole
    peak as the need of one GPU (the safe side). With them, a GPU did work when
    it was busy in at least ``GPU_USED_SHARE`` of the busiest GPU's busy minutes;
    memory held on a GPU that never computed (TensorFlow reserves memory on every
    visible GPU) is not needed. A session whose GPUs never worked needs one GPU.
    """
    if not usage.gpus or gpu_count <= 1:
        return max(gpu_count, 1), usage.peak_memory_mib
    most = max(g.busy_minutes for g in usage.gpus)
    if most == 0:
        return 1, max(g.peak_memory_mib for g in usage.gpus)
    used = [g for g in usage.gpus if g.busy_minutes >= max(1, math.ceil(GPU_USED_SHARE * most))]
    return len(used), max(g.peak_memory_mib for g in used)


# -- the advice ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Advice:
    """The judgement of one session: a cheaper profile with its counterfactual cost, or why none."""

    reason: str
    usage: SessionUsage
    gpus_used: int = 0
    memory_per_gpu_mib: int | None = None
    suggested: ProfileOption | None = None
    confidence: str | None = None
    cost_micros: int = 0
    counterfactual_micros: int = 0
    message: str = ""

    @property
    def advised(self) -> bool:
        return self.suggested is not None

    @property
    def saving_micros(self) -> int:
        return self.cost_micros - self.counterfactual_micros if self.advised else 0


def compute_fit(usage: SessionUsage, ratio: float | None, headroom: float, util_scale: float = 1.0) -> str | None:
    """How sure it is that the candidate's compute serves: ``"high"``, ``"medium"`` or None.

    ``ratio`` is the candidate's compute per GPU over the current one's (same
    model: 1; a MIG slice: its share), None for another model. With a known
    ratio the utilization must fit the smaller GPU with the same headroom as the
    memory: the 95th percentile for "high", the median for "medium". For another
    model only a mostly idle GPU is judged (:data:`OTHER_MODEL_LIMITS`): the
    counterfactual cost assumes the session would have taken as long.
    ``util_scale`` turns the session's mean utilization into that of its working GPUs.
    """
    p50 = min(100.0, usage.util_p50 * util_scale)
    p95 = min(100.0, usage.util_p95 * util_scale)
    if ratio is not None:
        capacity = 100.0 * ratio
        if p95 * (1 + headroom) <= capacity:
            return "high"
        if p50 * (1 + headroom) <= capacity:
            return "medium"
        return None
    for level in CONFIDENCES:
        busy, util = OTHER_MODEL_LIMITS[level]
        if usage.busy_share <= busy and p95 <= util:
            return level
    return None


def _gb(mib: int) -> str:
    gb = Decimal(mib) / 1024
    shown = gb.quantize(Decimal("0.1"))
    return f"{shown:f}".removesuffix(".0")


def advice_text(row, currency: Currency, lang: str = "en") -> str:
    """The advice as sentences in ``lang``, from its figures (a :class:`~.ledger.models.SessionAdvice` row, or an
    object with its attributes): the Lab notice, the usage pages and the API's ``message`` say this, and the Lab
    panel builds the same sentences from the same figures (labextension/src/advice.ts).

    E.g. "Peak 3.1 GB of 40 GB GPU memory, busy 12% of the time. The 1× T4 profile (CN¥0.05/min instead of
    CN¥0.25/min) would very likely have served. This session would have cost CN¥6.00 instead of CN¥30.00."
    """
    _ = translator(lang)
    money = lambda micros: currency.format(from_micros(micros), locale=lang)  # noqa: E731
    rate = lambda micros: currency.format_rate(from_micros(micros), locale=lang)  # noqa: E731
    busy = round(row.busy_permille / 10)
    parts = []
    if row.gpus_used < row.gpu_count and (row.suggested_gpu_count or 0) < row.gpu_count:
        parts.append(
            _(
                "{used} of {count} GPUs did work (peak {peak} GB), busy {busy}% of the time.",
                used=row.gpus_used,
                count=row.gpu_count,
                peak=_gb(row.peak_memory_mib),
                busy=busy,
            )
        )
        parts.append(
            _("1 GPU would have done.")
            if row.suggested_gpu_count == 1
            else _("{count} GPUs would have done.", count=row.suggested_gpu_count)
        )
    else:
        parts.append(
            _(
                "Peak {peak} GB of {total} GB GPU memory, busy {busy}% of the time.",
                peak=_gb(row.peak_memory_mib),
                total=_gb(row.memory_total_mib),
                busy=busy,
            )
        )
    values = dict(
        profile=row.suggested_display_name or row.suggested_profile,
        rate=rate(row.suggested_rate_micros or 0),
        current=rate(row.rate_micros),
    )
    share, model = getattr(row, "suggested_gpu_share", None), getattr(row, "suggested_gpu_model", None)
    if share and model:
        parts.append(
            share_sentence(share, model, row, values, money(row.counterfactual_micros), money(row.cost_micros), _)
        )
        return ("" if lang == "zh-CN" else " ").join(parts)
    parts.append(
        _("The {profile} profile ({rate}/min instead of {current}/min) would very likely have served.", **values)
        if row.confidence == "high"
        else _("The {profile} profile ({rate}/min instead of {current}/min) would likely have served.", **values)
    )
    costs = dict(would=money(row.counterfactual_micros), cost=money(row.cost_micros))
    parts.append(
        _("This session would have cost {would} instead of {cost}.", **costs)
        if row.final
        else _("So far this session would have cost {would} instead of {cost}.", **costs)
    )
    return ("" if lang == "zh-CN" else " ").join(parts)


def share_unit(count: int, model: str, _) -> str:
    """ "A quarter of a T4": one time-sliced share of ``count`` of a ``model`` GPU, at the start of a sentence."""
    # a model is read out letter by letter: "an A100", "an H100", "an L4", "a T4", "a V100"
    an = model[:1].upper() in "AEFHILMNORSX"
    if count == 2:
        return _("Half an {model}", model=model) if an else _("Half a {model}", model=model)
    if count == 3:
        return _("A third of an {model}", model=model) if an else _("A third of a {model}", model=model)
    if count == 4:
        return _("A quarter of an {model}", model=model) if an else _("A quarter of a {model}", model=model)
    if an:
        return _("A 1/{count} share of an {model}", count=count, model=model)
    return _("A 1/{count} share of a {model}", count=count, model=model)


def share_sentence(count: int, model: str, row, values: dict, would: str, cost: str, _) -> str:
    """The advice of a share (issue 17): "A quarter of a T4 would very likely have served: ¥1.50 instead of ¥6.00
    (the ¼ T4 profile, ¥0.0125/min instead of ¥0.05/min)."; "so far" while the session runs."""
    unit = share_unit(count, model, _)
    values = dict(values, unit=unit, would=would, cost=cost)
    if row.final:
        if row.confidence == "high":
            return _(
                "{unit} would very likely have served: {would} instead of {cost}"
                " (the {profile} profile, {rate}/min instead of {current}/min).",
                **values,
            )
        return _(
            "{unit} would likely have served: {would} instead of {cost}"
            " (the {profile} profile, {rate}/min instead of {current}/min).",
            **values,
        )
    if row.confidence == "high":
        return _(
            "{unit} would very likely have served so far: {would} instead of {cost}"
            " (the {profile} profile, {rate}/min instead of {current}/min).",
            **values,
        )
    return _(
        "{unit} would likely have served so far: {would} instead of {cost}"
        " (the {profile} profile, {rate}/min instead of {current}/min).",
        **values,
    )


def _figures(advice: Advice, gpu_count: int, rate_micros: int, final: bool) -> SimpleNamespace:
    """The figures of an advice as its ledger row will hold them (what :func:`advice_text` words)."""
    s = advice.suggested
    return SimpleNamespace(
        busy_permille=round(advice.usage.busy_share * 1000),
        gpus_used=advice.gpus_used,
        gpu_count=gpu_count,
        suggested_gpu_count=s.gpu_count if s else None,
        suggested_display_name=s.display_name if s else None,
        suggested_profile=s.slug if s else None,
        suggested_rate_micros=s.rate_micros if s else None,
        suggested_gpu_share=s.gpu_share if s else None,
        suggested_gpu_model=s.gpu_model if s else None,
        rate_micros=rate_micros,
        peak_memory_mib=advice.usage.peak_memory_mib,
        memory_total_mib=advice.usage.memory_total_mib,
        confidence=advice.confidence,
        final=final,
        counterfactual_micros=advice.counterfactual_micros,
        cost_micros=advice.cost_micros,
    )


def advise(
    session: SessionFacts,
    usage: SessionUsage,
    options: Sequence[ProfileOption],
    settings: AdviceSettings = AdviceSettings(),
    currency: Currency | None = None,
) -> Advice:
    """The cheapest profile that would very likely (or likely) have served this session, or why there is none."""
    currency = currency or Currency.from_config(session.currency)
    current = next((o for o in options if o.slug == session.profile), None)
    # the session's GPU memory from the catalogue, never from its samples (see catalogue())
    usage = replace(usage, memory_total_mib=((current.memory_mib or 0) if current else 0) * max(session.gpu_count, 0))
    cost = session.minutes * session.rate_micros
    base = Advice(reason="advised", usage=usage, cost_micros=cost)
    if session.gpu_count <= 0:
        return replace(base, reason="no_gpu")
    if session.minutes < settings.min_minutes:
        return replace(base, reason="too_short")
    if usage.sampled_minutes == 0:
        return replace(base, reason="no_samples")
    # a running session's current minute has not been pushed yet
    coverage = usage.sampled_minutes / max(1, session.minutes - (0 if session.final else 1))
    if coverage < MIN_COVERAGE:
        return replace(base, reason="few_samples")
    if usage.memory_unknown:
        # its server could not measure its own memory (a share in a container): a peak of 0 would advise a
        # smaller unit that the session may not fit in
        return replace(base, reason="unknown_memory")
    used, need_mib = gpus_used(usage, session.gpu_count)
    base = replace(base, gpus_used=used, memory_per_gpu_mib=need_mib)
    current_model = session.gpu_model or (current.gpu_model if current else "")
    current_unit = current.unit_model if current and current.gpu_model == current_model else current_model
    headroom = settings.headroom_percent / 100
    util_scale = session.gpu_count / used if used else 1.0
    best: tuple | None = None
    unknown_memory = False
    chosen = Chosen.of(session)
    for position, option in enumerate(options):
        if option.slug == session.profile or option.rate_micros >= session.rate_micros:
            continue
        if option.gpu_count < max(used, 1) or keeps_choices(chosen, option) is not None:
            continue  # the same tier, paid by the same group (service/domain/moves.py)
        if option.memory_mib is None:
            unknown_memory = True
            continue
        # integers: memory >= need × (100 + headroom) / 100
        if option.memory_mib * 100 < need_mib * (100 + settings.headroom_percent):
            continue
        ratio = compute_ratio(current_unit, option.unit_model) if current_model else None
        if ratio is not None:
            ratio *= share_ratio(current, option)
        confidence = compute_fit(usage, ratio, headroom, util_scale)
        if confidence is None:
            continue
        if coverage < FULL_COVERAGE:
            confidence = "medium" if confidence == "high" else None
            if confidence is None:
                continue
        rank = (option.rate_micros, CONFIDENCES.index(confidence), -option.memory_mib, position)
        if best is None or rank < best[0]:
            best = (rank, option, confidence)
    if best is None:
        return replace(base, reason="unknown_memory" if unknown_memory else "nothing_cheaper")
    _, option, confidence = best
    advice = replace(
        base, suggested=option, confidence=confidence, counterfactual_micros=session.minutes * option.rate_micros
    )
    figures = _figures(advice, session.gpu_count, session.rate_micros, session.final)
    return replace(advice, message=advice_text(figures, currency))


# -- storage ----------------------------------------------------------------------------------


def store(ledger: Ledger, session: SessionFacts, advice: Advice, now: datetime) -> SessionAdvice:
    """Write (or replace) a session's advice; a final one is never replaced by a live one."""
    usage = advice.usage
    s = advice.suggested
    values = dict(
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
    return save_advice(ledger, session.id, session.final, values)


def facts_of(record: SessionRecord, now: datetime, options: Sequence[ProfileOption]) -> SessionFacts:
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
    """``(closed, live)``: the sessions one pass of the tick judges (see :func:`..tick.update_advice`).

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


def advice_message(record: SessionRecord, advice: Advice, currency: Currency, lang: str = "en") -> Message:
    """The Lab notice of a closed session's advice (its user's own; no mail, no webhook), worded in ``lang``
    (and in another language on the gateway's demand)."""
    figures = _figures(advice, record.gpu_count, record.rate_micros, record.stopped is not None)
    return Message(
        user=record.user,
        kind="advice",
        text=advice_text(figures, currency, lang),
        level="info",
        session_id=record.id,
        what=f"advice notice for {record.user}",
        source=log.name,
        lang=lang,
        words=lambda other: advice_message(record, advice, currency, other),
    )


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
        "suggested_gpu_share": row.suggested_gpu_share,  # a time-sliced share of a GPU (issue 17), else None
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


#: Reasons under which a running session is judged again at the next tick.
UNJUDGED = ("too_short", "no_samples", "few_samples")
#: Reasons under which a session was judged on its usage (too short or unsampled ones were not).
JUDGED = ("advised", "nothing_cheaper", "unknown_memory")
#: A profile is "chronically oversized" when at least this share of its judged sessions was advised ...
OVERSIZED_SHARE = 0.5
#: ... out of at least this many.
OVERSIZED_MIN_SESSIONS = 3


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
    names = {p["slug"]: p["display_name"] for p in ledger.pricing()}
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


# -- the weekly digest ------------------------------------------------------------------------


def digest_text(group: str, report: dict, since: datetime, until: datetime, tz, lang: str = "en") -> tuple[str, str]:
    """The subject and body of an instructor's weekly right-sizing digest for one group, in ``lang``."""
    _ = translator(lang)
    t = report["total"]
    first = day_in(aware_utc(since).astimezone(tz).date(), lang)
    last = day_in((aware_utc(until).astimezone(tz) - timedelta(seconds=1)).date(), lang)
    saved = t["potential_saving_display"]
    subject = _(
        "GPU right-sizing for {group}: {amount} could have been saved ({first} to {last})",
        group=group,
        amount=saved,
        first=first,
        last=last,
    )
    lines = [
        _("GPU sessions of the {group} group from {first} to {last}:", group=group, first=first, last=last),
        _(
            "{judged} sessions judged, {advised} of them on a larger profile than their work needed;"
            " following the advice would have saved {amount}.",
            judged=t["sessions_judged"],
            advised=t["sessions_advised"],
            amount=saved,
        ),
        "",
    ]
    for p in report["by_profile"]:
        if p["sessions_advised"]:
            values = dict(
                profile=p["display_name"],
                advised=p["sessions_advised"],
                judged=p["sessions_judged"],
                amount=p["potential_saving_display"],
            )
            lines.append(
                _("- {profile}: {advised} of {judged} sessions, {amount} (chronically larger than needed)", **values)
                if p["oversized"]
                else _("- {profile}: {advised} of {judged} sessions, {amount}", **values)
            )
    lines += ["", _("Per session:")]
    for s in report["sessions"][:50]:
        started = s["started"][:16].replace("T", " ")
        lines.append(_("- {user}, {started} UTC: {advice}", user=s["user"], started=started, advice=s["message"]))
    if len(report["sessions"]) > 50:
        more = len(report["sessions"]) - 50
        lines.append(_("... and {count} more (GET /services/gpu/api/v1/advice).", count=more))
    return subject, "\n".join(lines) + "\n"


def digest_window(now: datetime, tz, weekday: int, hour: int = 8) -> tuple[datetime, datetime]:
    """``(since, due)``: the seven whole local days a digest due at or before ``now`` covers, and when it was due.

    A digest is due on ``weekday`` (0 = Monday) at ``hour`` in the lab's time zone.
    """
    local = aware_utc(now).astimezone(tz)
    day = local.date() - timedelta(days=(local.weekday() - weekday) % 7)
    if datetime.combine(day, time(hour), tzinfo=tz) > local:
        day -= timedelta(days=7)
    # the seven whole local days before the digest's day
    due = datetime.combine(day, time(0), tzinfo=tz)
    since = datetime.combine(day - timedelta(days=7), time(0), tzinfo=tz)
    return since, due


def digest_message(
    group: str, to, report: dict, since: datetime, due: datetime, tz, lang: str = "en"
) -> tuple[Message, Once]:
    """An instructor's weekly digest for one group, by mail only, and its once-per-group-and-week key.

    Worded in ``lang``, as ``report`` (:func:`summary`) is: the lab's default language, a group's."""
    subject, body = digest_text(group, report, since, due, tz, lang)
    message = Message(
        user=f"group:{group}",
        kind="advice",
        subject=subject,
        body=body,
        to=tuple(to),
        what=f"advice digest for {group}",
        source=log.name,
        event="digest",
        groups=(group,),
        lang=lang,
    )
    return message, Once(f"group:{group}", f"advice-digest:{group}", due, 0)
