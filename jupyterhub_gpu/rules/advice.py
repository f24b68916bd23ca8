"""Right-sizing advice, the rule: when a cheaper profile would have done the same work.

A session's per-minute usage (rows with the fields of :class:`MinuteFigures`) is summarised into
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
they run (live); the constants below say when. Reading the sessions and their minutes,
storing the advice and summing it per group and per profile is the service's
(:mod:`jupyterhub_gpu.service.feeds.advice`); its words are :mod:`.advice_text`. Money is integer micro-units.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Protocol

from jupyterhub_gpu.gpus.names import gpu_family, memory_from_name
from jupyterhub_gpu.money import Currency, to_micros
from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.rules.advice_text import advice_text
from jupyterhub_gpu.rules.moves import Chosen, keeps_choices
from jupyterhub_gpu.rules.samples import memory_unknown
from jupyterhub_gpu.session import SessionFacts

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


#: Reasons under which a running session is judged again at the next tick.
UNJUDGED = ("too_short", "no_samples", "few_samples")
#: Reasons under which a session was judged on its usage (too short or unsampled ones were not).
JUDGED = ("advised", "nothing_cheaper", "unknown_memory")
#: A profile is "chronically oversized" when at least this share of its judged sessions was advised ...
OVERSIZED_SHARE = 0.5
#: ... out of at least this many.
OVERSIZED_MIN_SESSIONS = 3


# -- settings ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdviceSettings:
    """The thresholds of the advice (``c.Advice``; its errors name the option without the group)."""

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
                raise AdviceError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
        if not isinstance(self.profile_memory_gb, dict):
            raise AdviceError(f"profile_memory_gb must be a dict of profile -> GB, got {self.profile_memory_gb!r}")
        for slug, gb in self.profile_memory_gb.items():
            if (
                isinstance(gb, bool)
                or not isinstance(gb, (int, float))
                or not 0 < gb <= 4096
                or not isinstance(slug, str)
            ):
                raise AdviceError(f"profile_memory_gb[{slug!r}] must be a number of GB from 0 to 4096, got {gb!r}")


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
    #: part of a GPU (docs/admin.md, "Shared GPUs"): how many servers share one GPU (``memory_mib`` is then
    #: one share's, the GPU's memory divided by it), or the MIG slice ("1g.10gb", whose ``memory_mib`` is the slice's)
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

    Memory comes from ``c.Advice.profile_memory_gb`` first, then from the hub's
    GPU inventory (``gpu_memory_mib`` of the published profile: the smallest GPU
    of its model), then from the model or profile name (a MIG slice ``1g.5gb``,
    ``A100-80GB``, or a known model such as ``T4``). A profile of part of a GPU
    (a share or a MIG slice) has the memory of its unit: the hub publishes a share's cap (the
    GPU's memory divided by its ``gpu_share``) and a MIG slice's own; from names,
    a share's is the model's memory divided by ``gpu_share``, a slice's that of
    its slice's name (``mig``). Never from what a user's
    server reported: a forged ``memory_total_mib`` would advise other users onto
    a GPU too small for their work (docs/security.md: what a user's server
    reports cannot be forged). A profile whose memory stays
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


class MinuteFigures(Protocol):
    """One minute of a session's samples as :func:`summarize` reads it (the ledger's minute rows have these)."""

    samples: int
    utilization_tenths_sum: int
    memory_used_max_mib: int
    memory_total_mib: int | None
    #: per GPU uuid, as JSON: ``utilization_max``, ``memory_used_max_mib`` (and ``memory_unknown`` on a share)
    gpus: str | None


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


def summarize(minutes: Iterable[MinuteFigures]) -> SessionUsage:
    """A :class:`SessionUsage` from a session's minute rows (the ledger's, or any with their fields)."""
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
        busy += idle.IDLE.gpu_worked(util)  # a minute (or a GPU in a minute) is busy when its GPU worked
        for uuid, g in json.loads(m.gpus or "{}").items():
            entry = per_gpu.setdefault(uuid, [0, 0])
            entry[0] = max(entry[0], int(g.get("memory_used_max_mib", 0)))
            entry[1] += idle.IDLE.gpu_worked(g.get("utilization_max", 0))
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


def figures(advice: Advice, gpu_count: int, rate_micros: int, final: bool) -> SimpleNamespace:
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
            continue  # the same tier, paid by the same group (rules/moves.py)
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
    words = figures(advice, session.gpu_count, session.rate_micros, session.final)
    return replace(advice, message=advice_text(words, currency))
