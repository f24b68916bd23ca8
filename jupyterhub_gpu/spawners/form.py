"""The spawn form: one line per profile (price, free GPUs, waiting servers), the queue message, the HTML.

Pure: what the form shows comes in as arguments (the profiles the user may use,
the allocator's counts, the groups that may pay); nothing here reads the hub or
the ledger. The mixin's ``options_form`` gathers them and calls
:func:`render_options_form`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

import jinja2

from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners.assign.protocol import Allocator
from jupyterhub_gpu.spawners.profiles import Profile, choose_profile

_templates = jinja2.Environment(
    loader=jinja2.FunctionLoader(
        lambda name: resources.files("jupyterhub_gpu.spawners").joinpath("templates", name).read_text("utf-8")
    ),
    autoescape=True,
)


def profile_line(profile: Profile, currency: Currency, counts: dict | None, model: str, memory: str, where: str) -> str:
    """A profile's line in the form: ``2× T4 16 GB — ¥0.10/min — 1 of 4 free (2 waiting)``.

    ``counts`` are an allocator's (``free``, ``total``, ``waiting``; ``known`` False when they cannot
    be read now), None for a CPU-only profile; ``memory`` is the GPU memory as shown (`` 16 GB`` or
    empty) and ``where`` says where a missing GPU is missing ("on this host", "in the cluster").
    """
    price = "free" if profile.rate_per_minute == 0 else f"{currency.format_rate(profile.rate_per_minute)}/min"
    if profile.gpu_count == 0 or counts is None:
        return f"CPU only — {price}"
    head = f"{profile.gpu_count}× {model}{memory} — {price}"
    if not counts.get("known", True):
        return f"{head} — free GPUs unknown right now"
    if counts["total"] == 0:
        return f"{head} — no such GPU {where}"
    waiting = f" ({counts['waiting']} waiting)" if counts["waiting"] else ""
    if counts["free"] == 0:
        return f"{head} — none free{waiting}"
    return f"{head} — {counts['free']} of {counts['total']} free{waiting}"


def describe_profile(profile: Profile, allocator: Allocator, currency: Currency) -> str:
    """The one-line summary shown in the form on a host, e.g. ``1× T4 16 GB — ¥0.05/min — 3 of 4 free``."""
    if profile.gpu_count == 0:
        return profile_line(profile, currency, None, "", "", "")
    devices = allocator.matching(profile.gpu_model)
    model = profile.gpu_model
    if devices and devices[0].simulated and not model.lower().startswith("simulated"):
        model = f"Simulated {model}"
    memory = f" {devices[0].memory_gb} GB" if devices and devices[0].memory_mib else ""
    return profile_line(profile, currency, allocator.counts(profile.gpu_model), model, memory, "on this host")


def queue_message(model: str, count: int, simulated: bool, position: int, length: int) -> str:
    """``Waiting for a free A100 — position 2 of 3``."""
    name = f"Simulated {model}" if simulated and not model.lower().startswith("simulated") else model
    what = f"a free {name}" if count == 1 else f"{count} free {name} GPUs"
    return f"Waiting for {what} — position {position} of {length}"


def render_options_form(
    allowed: list[Profile],
    previous: str | None,
    summary: Callable[[Profile], str],
    *,
    simulated: bool,
    pools: list[str],
) -> str:
    """The form's HTML: the ``allowed`` profiles, the ``previous`` choice (a slug) checked if still allowed.

    ``summary(profile)`` is each profile's line (:func:`describe_profile` on a host); ``pools`` are
    the groups the user may choose to pay, shown only when there is a choice.
    """
    chosen = choose_profile({}, allowed) if allowed else None
    if previous in {p.slug for p in allowed}:
        chosen = next(p for p in allowed if p.slug == previous)
    rows = [
        {
            "slug": p.slug,
            "display_name": p.display_name,
            "description": p.description,
            "summary": summary(p),
            "checked": chosen is not None and p.slug == chosen.slug,
        }
        for p in allowed
    ]
    return _templates.get_template("options_form.html").render(profiles=rows, simulated=simulated, pools=pools)
