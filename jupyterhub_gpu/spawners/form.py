"""The spawn form: one line per profile (price, free GPUs, waiting servers), the queue message, the HTML.

Every text is in the reader's language (``lang``: :mod:`jupyterhub_gpu.i18n`), English by default.

Pure: what the form shows comes in as arguments (the profiles the user may use,
the allocator's counts, the groups that may pay); nothing here reads the hub or
the ledger. The mixin's ``options_form`` gathers them and calls
:func:`render_options_form`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from importlib import resources

import jinja2

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.i18n import english_an, translator
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.scheduler.words import clock_words, wait_words
from jupyterhub_gpu.spawners.assign.protocol import Allocator
from jupyterhub_gpu.spawners.profiles import Profile, choose_profile

_templates = jinja2.Environment(
    loader=jinja2.FunctionLoader(
        lambda name: resources.files("jupyterhub_gpu.spawners").joinpath("templates", name).read_text("utf-8")
    ),
    autoescape=True,
)


#: Where a profile's GPU is missing, as the form says it (``where`` of :func:`profile_line`).
NO_SUCH_GPU = {"host": "no such GPU on this host", "cluster": "no such GPU in the cluster"}


def simulated_name(model: str, lang: str = "en") -> str:
    """A simulated GPU model as shown: ``Simulated T4`` (``模拟 T4``), never "Simulated" twice."""
    if model.lower().startswith("simulated"):
        if lang == "en":
            return model
        model = model[len("simulated") :].strip()
    return translator(lang)("Simulated {model}", model=model)


def price_text(rate: Decimal, currency: Currency, lang: str = "en") -> str:
    """A rate per minute as the form and the progress messages say it: ``¥0.05/min``, or ``free``."""
    _ = translator(lang)
    return _("free") if rate == 0 else _("{rate}/min", rate=currency.format_rate(rate, lang))


def unit_head(profile: Profile, model: str, memory: str, lang: str = "en") -> str:
    """A profile's GPUs as the form's line begins: "1× T4 16 GB", "share 1/4 of a T4 4 GB", "MIG 1g.10gb of an A100"."""
    _ = translator(lang)
    an = english_an(model)
    if profile.gpu_share:
        k = profile.gpu_share
        head = _("share 1/{count} of an {model}", count=k, model=model) if an else None
        return (head or _("share 1/{count} of a {model}", count=k, model=model)) + memory
    if profile.mig:
        head = _("MIG {slice} of an {model}", slice=profile.mig, model=model) if an else None
        return head or _("MIG {slice} of a {model}", slice=profile.mig, model=model)
    return f"{profile.gpu_count}× {model}{memory}"


def profile_line(
    profile: Profile, currency: Currency, counts: dict | None, model: str, memory: str, where: str, lang: str = "en"
) -> str:
    """A profile's line in the form: ``2× T4 16 GB — ¥0.10/min — 1 of 4 free (2 waiting)``, in ``lang``.

    ``counts`` are an allocator's (``free``, ``total``, ``waiting``; ``known`` False when they cannot
    be read now; ``unit`` "gpu", "share" or "mig"), None for a CPU-only profile; ``model`` is the GPU
    model as shown, ``memory`` the GPU memory as shown (`` 16 GB`` or empty; a share's cap) and
    ``where`` says where a missing GPU is missing (``"host"`` or ``"cluster"``: :data:`NO_SUCH_GPU`).
    A share's line: ``share 1/4 of a T4 4 GB — ¥0.0125/min — 3 of 8 shares free``.
    """
    _ = translator(lang)
    price = price_text(profile.rate_per_minute, currency, lang)
    if profile.gpu_count == 0 or counts is None:
        return _("CPU only — {price}", price=price)
    head = f"{unit_head(profile, model, memory, lang)} — {price}"
    if profile.preemptible:
        # the cheaper tier (docs/scheduling.md): "1× T4 preemptible — ¥0.02/min — may be interrupted, ..."
        head = f"{unit_head(profile, model, memory, lang)} {_('preemptible')} — {price} — " + _(
            "may be interrupted, your work is checkpointed"
        )
    if not counts.get("known", True):
        return f"{head} — {_('free GPUs unknown right now')}"
    if counts["total"] == 0:
        return f"{head} — {_(NO_SUCH_GPU[where])}"
    waiting, free, total = counts["waiting"], counts["free"], counts["total"]
    unit = counts.get("unit") or profile.unit
    if free == 0:
        state = _("none free ({waiting} waiting)", waiting=waiting) if waiting else _("none free")
    elif unit == "share":
        if waiting:
            state = _("{free} of {total} shares free ({waiting} waiting)", free=free, total=total, waiting=waiting)
        else:
            state = _("{free} of {total} shares free", free=free, total=total)
    elif unit == "mig":
        if waiting:
            state = _("{free} of {total} slices free ({waiting} waiting)", free=free, total=total, waiting=waiting)
        else:
            state = _("{free} of {total} slices free", free=free, total=total)
    elif waiting:
        state = _("{free} of {total} free ({waiting} waiting)", free=free, total=total, waiting=waiting)
    else:
        state = _("{free} of {total} free", free=free, total=total)
    return f"{head} — {state}"


def describe_profile(profile: Profile, allocator: Allocator, currency: Currency, lang: str = "en") -> str:
    """The one-line summary shown in the form on a host, e.g. ``1× T4 16 GB — ¥0.05/min — 3 of 4 free``."""
    if profile.gpu_count == 0:
        return profile_line(profile, currency, None, "", "", "host", lang)
    devices = allocator.matching(profile.gpu_model, share=profile.gpu_share, mig=profile.mig)
    model = profile.gpu_model
    if devices and devices[0].simulated:
        model = simulated_name(model, lang)
    memory = ""
    if devices and devices[0].memory_mib:
        memory = f" {round(devices[0].memory_mib / (profile.gpu_share or 1) / 1024)} GB"
    counts = allocator.counts(profile.gpu_model, share=profile.gpu_share, mig=profile.mig)
    return profile_line(profile, currency, counts, model, memory, "host", lang)


def queue_message(
    model: str,
    count: int,
    simulated: bool,
    position: int,
    length: int,
    lang: str = "en",
    *,
    share: int | None = None,
    mig: str | None = None,
) -> str:
    """``Waiting for a free A100 — position 2 of 3`` (in ``lang``); ``Waiting for a free share 1/4 of a T4 — ...``."""
    _ = translator(lang)
    name = simulated_name(model, lang) if simulated else model
    where = {"position": position, "length": length}
    if share and english_an(name):
        return _(
            "Waiting for a free share 1/{share} of an {model} — position {position} of {length}",
            share=share,
            model=name,
            **where,
        )
    if share:
        return _(
            "Waiting for a free share 1/{share} of a {model} — position {position} of {length}",
            share=share,
            model=name,
            **where,
        )
    if mig and english_an(name):
        return _(
            "Waiting for a free MIG {slice} slice of an {model} — position {position} of {length}",
            slice=mig,
            model=name,
            **where,
        )
    if mig:
        return _(
            "Waiting for a free MIG {slice} slice of a {model} — position {position} of {length}",
            slice=mig,
            model=name,
            **where,
        )
    if count == 1:
        return _(
            "Waiting for a free {model} — position {position} of {length}", model=name, position=position, length=length
        )
    return _(
        "Waiting for {count} free {model} GPUs — position {position} of {length}",
        count=count,
        model=name,
        position=position,
        length=length,
    )


def device_text(device: GPUDevice, lang: str = "en") -> str:
    """A granted unit as the progress message names it: ``Simulated T4 (GPU-…)``, ``Simulated T4 share 2/4 (GPU-…)``."""
    name = simulated_name(device.name, lang) if device.simulated else device.name
    if device.is_share:
        share = translator(lang)("share {index}/{count}", index=(device.share_index or 0) + 1, count=device.share_count)
        return f"{name} {share} ({device.visible_uuid})"
    return f"{name} ({device.uuid})"


def assignment_message(profile: Profile, devices: list[GPUDevice], currency: Currency, lang: str = "en") -> str:
    """The progress event of a spawn granted its GPUs: ``Assigned T4 (GPU-…); starting One T4 at ¥0.05/min``."""
    _ = translator(lang)
    rate = _("{rate}/min", rate=currency.format_rate(profile.rate_per_minute, lang))
    name = profile.name_in(lang)
    if not devices:
        return _("Assigned no GPU; starting {profile} at {rate}", profile=name, rate=rate)
    shown = ", ".join(device_text(d, lang) for d in devices)
    return _("Assigned {devices}; starting {profile} at {rate}", devices=shown, profile=name, rate=rate)


#: How a display name may write a share of a GPU ("¼ T4"), besides "1/4".
FRACTIONS = {2: "½", 3: "⅓", 4: "¼", 5: "⅕", 6: "⅙", 8: "⅛"}
#: Words that say a GPU is simulated, in the languages of :mod:`jupyterhub_gpu.i18n` (casefolded).
SIMULATED_WORDS = ("simulated", "模拟")


def _says(name: str, text: str) -> bool:
    """Whether ``name`` says ``text`` as whole words (casefolded, spaces collapsed): "T4" in "1× T4", not in "T40"."""

    def squeeze(t: str) -> str:
        return " ".join(t.casefold().split())

    return re.search(rf"(?<!\w){re.escape(squeeze(text))}(?!\w)", squeeze(name)) is not None


def _named_head(profile: Profile, name: str, line: str, lang: str) -> str | None:
    """The beginning of ``line`` that restates what the display ``name`` already says, or None.

    The line begins with the profile's GPUs (:func:`unit_head`: "1× T4", "share 1/4 of a Simulated T4",
    "CPU only"); a name such as "1× T4", "1 块 T4" or "¼ T4 (simulated)" says the same, so the form
    shows it once. The name must say the GPU model, the count when there is more than one GPU, and
    "simulated" when the GPU is, else the line keeps its head (it says what the name does not). A CPU
    profile's "CPU only" goes when the name says exactly that ("CPU only", "仅 CPU").
    """
    _ = translator(lang)
    if profile.gpu_count == 0:
        head = _("CPU only — {price}", price="")
        return head if line.startswith(head) and _says(name, head.rstrip(" —")) else None
    model = profile.gpu_model
    bare = model[len("simulated") :].strip() if model.casefold().startswith("simulated") else model
    for shown in dict.fromkeys((simulated_name(model, lang), model)):
        head = unit_head(profile, shown, "", lang)
        if not line.startswith(head):
            continue
        says = _says(name, bare) and (profile.gpu_count == 1 or _says(name, str(profile.gpu_count)))
        # a share or a slice: the name must say which part of the GPU too ("¼ T4", "A100 1g.10gb"), else the
        # line keeps "share 1/4 of a T4" / "MIG 1g.10gb of an A100" (the part is what the student pays for)
        if profile.gpu_share:
            k = profile.gpu_share
            says = says and (_says(name, f"1/{k}") or FRACTIONS.get(k, "1/") in name)
        if profile.mig:
            says = says and _says(name, profile.mig)
        if any(word in shown.casefold() for word in SIMULATED_WORDS):
            says = says and any(word in name.casefold() for word in SIMULATED_WORDS)
        return head if says else None
    return None


def form_line(profile: Profile, line: str, lang: str = "en") -> str:
    """A profile's line as the form shows it under its display name: without what the name already says.

    ``1× T4 16 GB — ¥0.05/min — 3 of 4 free`` under "1× T4" (or "1 块 T4") reads ``16 GB — ¥0.05/min —
    3 of 4 free``; ``CPU only — ¥0.01/min`` under "CPU only" reads ``¥0.01/min``. A name that does not
    say the GPUs (the slug "big", or "One T4" over simulated GPUs) keeps the whole line.
    """
    name = profile.name_in(lang)
    head = _named_head(profile, name, line, lang)
    rest = line[len(head) :].lstrip(" —") if head else ""
    if rest and profile.preemptible:
        # "1× T4 preemptible" above: the line's "16 GB preemptible — ..." says it a second time
        word = translator(lang)("preemptible")
        if _says(name, word):
            rest = re.sub(rf"(^|\s){re.escape(word)} — ", r"\1— ", rest, count=1).removeprefix("— ")
    return rest or line


def render_options_form(
    allowed: list[Profile],
    previous: str | None,
    summary: Callable[[Profile], str],
    *,
    simulated: bool,
    pools: list[str],
    lang: str = "en",
) -> str:
    """The form's HTML in ``lang``: the ``allowed`` profiles, the ``previous`` choice (a slug) checked if allowed.

    ``summary(profile)`` is each profile's line (:func:`describe_profile` on a host, in ``lang``);
    ``pools`` are the groups the user may choose to pay, shown only when there is a choice. Each
    profile's display name and description are the admin's in ``lang`` (else English); the form
    carries ``lang`` back, so that its refusals answer in it.
    """
    chosen = choose_profile({}, allowed) if allowed else None
    if previous in {p.slug for p in allowed}:
        chosen = next(p for p in allowed if p.slug == previous)
    rows = [
        {
            "slug": p.slug,
            "display_name": p.name_in(lang),
            "description": p.description_in(lang),
            # the line says the GPUs only when the display name above it does not (each said once)
            "summary": form_line(p, summary(p), lang),
            "unit": p.unit,  # "gpu", "share" or "mig"
            "preemptible": p.preemptible,
            "checked": chosen is not None and p.slug == chosen.slug,
        }
        for p in allowed
    ]
    return _templates.get_template("options_form.html").render(
        profiles=rows,
        simulated=simulated,
        pools=pools,
        lang=lang,
        _=translator(lang),
        preemptible=any(p.preemptible for p in allowed),
    )


def queue_status(decision, model: str, count: int, simulated: bool, lang: str = "en", *, share=None, mig=None) -> str:
    """A waiting request as the scheduler sees it: ``Waiting for a free A100 — position 2 of 5 — about 12 min —
    your group has used 140% of its share of A100 GPUs this week`` (the plain first-come order adds no reason)."""
    parts = [queue_message(model, count, simulated, decision.position, decision.length, lang, share=share, mig=mig)]
    if decision.wait is not None:  # no estimate yet: nothing is said
        parts.append(wait_words(decision.wait, lang))
    if decision.key != "fifo":
        parts.append(decision.reason_in(lang))
    return " — ".join(parts)


#: The form's note of a booking on a whole GPU's line, by whether the window is in force (a share profile's line,
#: which counts shares, says "whole GPUs": :func:`reserved_note`).
RESERVED_NOTES = {
    "gpus.until": "{count} reserved for {label} until {time}",
    "gpus.from": "{count} reserved for {label} from {time}",
}


def reserved_note(
    reservations,
    model: str,
    now,
    tz,
    lang: str = "en",
    within=timedelta(hours=12),
    *,
    share: int | None = None,
    mig: str | None = None,
) -> str | None:
    """``2 reserved for CS231N from 14:00`` (or ``until 16:00`` during the window): the reservations of ``model``
    in force now or starting within ``within``, for the form's line; None when there are none.

    A booking holds whole GPUs: a share profile's line, which counts shares, says so (``1 whole GPU reserved for
    CS231N from 14:00``); a MIG slice is a GPU of its own that no booking of its model holds (None)."""
    if mig:
        return None
    _ = translator(lang)
    notes = []
    for r in reservations:
        if r.model != model:
            continue
        window = r.window_at(now) or next(iter(r.windows(now, now + within)), None)
        if window is None:
            continue
        start, end = window
        during = start <= now
        time = clock_words(end if during else start, tz, now, lang)
        values = dict(count=r.count, label=r.name, time=time)
        if share and share > 1 and during:
            note = _.plural(
                "{count} whole GPU reserved for {label} until {time}",
                "{count} whole GPUs reserved for {label} until {time}",
                r.count,
                **values,
            )
        elif share and share > 1:
            note = _.plural(
                "{count} whole GPU reserved for {label} from {time}",
                "{count} whole GPUs reserved for {label} from {time}",
                r.count,
                **values,
            )
        else:
            note = _(RESERVED_NOTES["gpus.until" if during else "gpus.from"], **values)
        notes.append(note)
    return " · ".join(notes) or None
