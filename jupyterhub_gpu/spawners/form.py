"""The spawn form: one line per profile (price, free GPUs, waiting servers), the queue message, the HTML.

Every text is in the reader's language (``lang``: :mod:`jupyterhub_gpu.i18n`), English by default.

Pure: what the form shows comes in as arguments (the profiles the user may use,
the allocator's counts, the groups that may pay); nothing here reads the hub or
the ledger. The mixin's ``options_form`` gathers them and calls
:func:`render_options_form`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from importlib import resources

import jinja2

from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import Currency
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


def profile_line(
    profile: Profile, currency: Currency, counts: dict | None, model: str, memory: str, where: str, lang: str = "en"
) -> str:
    """A profile's line in the form: ``2× T4 16 GB — ¥0.10/min — 1 of 4 free (2 waiting)``, in ``lang``.

    ``counts`` are an allocator's (``free``, ``total``, ``waiting``; ``known`` False when they cannot
    be read now), None for a CPU-only profile; ``model`` is the GPU model as shown, ``memory`` the
    GPU memory as shown (`` 16 GB`` or empty) and ``where`` says where a missing GPU is missing
    (``"host"`` or ``"cluster"``: :data:`NO_SUCH_GPU`).
    """
    _ = translator(lang)
    price = price_text(profile.rate_per_minute, currency, lang)
    if profile.gpu_count == 0 or counts is None:
        return _("CPU only — {price}", price=price)
    head = f"{profile.gpu_count}× {model}{memory} — {price}"
    if not counts.get("known", True):
        return f"{head} — {_('free GPUs unknown right now')}"
    if counts["total"] == 0:
        return f"{head} — {_(NO_SUCH_GPU[where])}"
    waiting, free, total = counts["waiting"], counts["free"], counts["total"]
    if free == 0:
        state = _("none free ({waiting} waiting)", waiting=waiting) if waiting else _("none free")
    elif waiting:
        state = _("{free} of {total} free ({waiting} waiting)", free=free, total=total, waiting=waiting)
    else:
        state = _("{free} of {total} free", free=free, total=total)
    return f"{head} — {state}"


def describe_profile(profile: Profile, allocator: Allocator, currency: Currency, lang: str = "en") -> str:
    """The one-line summary shown in the form on a host, e.g. ``1× T4 16 GB — ¥0.05/min — 3 of 4 free``."""
    if profile.gpu_count == 0:
        return profile_line(profile, currency, None, "", "", "host", lang)
    devices = allocator.matching(profile.gpu_model)
    model = profile.gpu_model
    if devices and devices[0].simulated:
        model = simulated_name(model, lang)
    memory = f" {devices[0].memory_gb} GB" if devices and devices[0].memory_mib else ""
    return profile_line(profile, currency, allocator.counts(profile.gpu_model), model, memory, "host", lang)


def queue_message(model: str, count: int, simulated: bool, position: int, length: int, lang: str = "en") -> str:
    """``Waiting for a free A100 — position 2 of 3`` (in ``lang``)."""
    _ = translator(lang)
    name = simulated_name(model, lang) if simulated else model
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


def assignment_message(profile: Profile, devices: list[GPUDevice], currency: Currency, lang: str = "en") -> str:
    """The progress event of a spawn granted its GPUs: ``Assigned T4 (GPU-…); starting One T4 at ¥0.05/min``."""
    _ = translator(lang)
    rate = _("{rate}/min", rate=currency.format_rate(profile.rate_per_minute, lang))
    name = profile.name_in(lang)
    if not devices:
        return _("Assigned no GPU; starting {profile} at {rate}", profile=name, rate=rate)
    shown = ", ".join(f"{simulated_name(d.name, lang) if d.simulated else d.name} ({d.uuid})" for d in devices)
    return _("Assigned {devices}; starting {profile} at {rate}", devices=shown, profile=name, rate=rate)


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
            "summary": summary(p),
            "checked": chosen is not None and p.slug == chosen.slug,
        }
        for p in allowed
    ]
    return _templates.get_template("options_form.html").render(
        profiles=rows, simulated=simulated, pools=pools, lang=lang, _=translator(lang)
    )
