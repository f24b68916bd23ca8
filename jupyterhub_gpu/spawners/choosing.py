"""The spawn form's hooks: the profiles, the form as this user sees it, and the choice it sends back (or a link's).

JupyterHub's ``options_form``, ``options_from_form`` and ``options_from_query`` of the GPU spawners
(:class:`.mixin.GPUSpawnerMixin` wires them): the profiles this user's groups allow with their price,
free GPUs and a reservation's note, and the groups that may pay; the choice checked against them. The
text and HTML are :mod:`.form`'s; the parsing is :mod:`.profiles`'.
"""

from __future__ import annotations

import asyncio
from zoneinfo import ZoneInfo

from jupyterhub.utils import maybe_future

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.i18n import language_of
from jupyterhub_gpu.ledger.queries.overrides import load_overrides
from jupyterhub_gpu.spawners.budget import binding_groups_of
from jupyterhub_gpu.spawners.form import render_options_form, reserved_note
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import (
    OptionsError,
    Profile,
    ProfileError,
    apply_overrides,
    form_language,
    options_from_form,
    parse_profiles,
    pool_choices,
)
from jupyterhub_gpu.spawners.progress import FORM_LANGUAGES, SPAWN_LANGUAGES

#: Query arguments of ``/hub/spawn`` that ask for no spawn: the language switch, a reload after a refused form.
NOT_SPAWN_ARGUMENTS = frozenset({"lang", "_xsrf"})


class ShowTheForm(Exception):
    """Raised by ``options_from_query`` for a query that asks for no spawn: JupyterHub then shows the form,
    with no error above it (its message is empty)."""

    def __init__(self):
        super().__init__("")
        self.jupyterhub_message = ""


async def profiles_of(spawner) -> list[Profile]:
    """Every configured profile, validated (a callable ``profiles`` is evaluated), with the prices and allowed
    groups admins edited on the usage pages (docs/admin.md)."""
    raw = spawner.profiles
    if callable(raw):
        raw = await maybe_future(raw(spawner))
    try:
        profiles = parse_profiles(raw, require_image=spawner._require_image)
    except ProfileError as e:
        raise spawner.gpu_refusal(
            Phrase("The GPU profiles are misconfigured; please tell your administrator."),
            reason="profiles",
            log_message=f"Invalid profiles: {e}",
            status_code=500,
            lang=spawner.gpu_language(),
        ) from e
    ledger = spawner.ledger
    if ledger is None:
        return profiles
    return apply_overrides(profiles, await asyncio.to_thread(load_overrides, ledger))


async def allowed_of(spawner) -> tuple[list[Profile], list[Profile]]:
    """(the profiles the spawner's user may use, all profiles)."""
    profiles = await spawner.gpu_profiles()
    groups = spawner._gpu_group_names()
    return [p for p in profiles if p.allows(groups)], profiles


def request_language(spawner) -> str:
    """The language of the request JupyterHub is serving for a spawner (``spawner.handler``).

    The switch's cookie, then ``Accept-Language`` (:func:`.i18n.language_of`); English without a
    request (a spawn outside a request, a hub restart) or for a request that cannot be read.
    """
    handler = getattr(spawner, "handler", None)
    if handler is None or getattr(handler, "request", None) is None:
        return "en"
    try:
        return language_of(handler)
    except Exception:  # a malformed header must not break the form or the spawn
        spawner.log.debug("language of %s not read", spawner._log_name, exc_info=True)
        return "en"


def take_user_options(spawner, user_options) -> None:
    """JupyterHub's ``apply_user_options`` hook: the GPU spawners handle ``profile``, ``pool`` and ``job_id``.

    Without a hook JupyterHub (5.3 and later) logs "Received unhandled user_options" at every spawn. The
    options are checked and applied by ``run_pre_spawn_hook``, which JupyterHub calls right after this
    hook and which also serves a ``start()`` outside the hub's spawn sequence, so nothing is done here
    twice. An ``apply_user_options`` set in the config replaces this one (and then sees these options).
    """


async def render_form(spawner) -> str:
    """The profile form in the request's language, or in the refused form's or spawn's when shown again."""
    lang = FORM_LANGUAGES.pop(spawner._gpu_key, None) or spawner.gpu_language()
    allowed, _ = await spawner.allowed_profiles()
    currency = spawner.gpu_currency
    previous = (spawner.orm_spawner.user_options or {}).get("profile") if spawner.orm_spawner else None
    planner = await spawner.gpu_attach_planner()
    if planner is not None:
        await planner.fresh()
    zone, now = ZoneInfo(spawner.budget_timezone), utcnow()

    def summary(p: Profile) -> str:
        line = spawner.gpu_profile_summary(p, currency, lang)
        note = (
            reserved_note(planner.view.reservations, p.gpu_model, now, zone, lang, share=p.gpu_share, mig=p.mig)
            if planner
            else None
        )
        return f"{line} · {note}" if note and p.gpu_count else line

    return render_options_form(
        allowed,
        previous,
        summary,
        simulated=spawner.allocator.simulated(),
        pools=await pool_options(spawner, allowed),
        lang=lang,
    )


async def pool_options(spawner, allowed: list[Profile]) -> list[str]:
    """The groups the form offers to pay (any profile's choices); shown only when there is a choice."""
    ledger = spawner.ledger
    rules = await asyncio.to_thread(ledger.budget_rules) if ledger is not None else []
    groups = spawner._gpu_group_names()
    choices = (pool_choices(p, groups, binding_groups_of(spawner, rules, p)) for p in allowed)
    return list(dict.fromkeys(g for some in choices for g in some))


async def options_of_form(spawner, formdata) -> dict:
    """The checked choice of a posted form (a refusal the student reads above the form shown again)."""
    # JupyterHub's POST does not set spawner.handler: the form says the language it was shown in
    lang = form_language(formdata) or spawner.gpu_language()
    allowed, everything = await spawner.allowed_profiles()
    try:
        options = options_from_form(formdata, allowed, everything)
    except OptionsError as e:
        # shown on the spawn page, above the form shown again; nothing is started
        raise spawner.gpu_refusal(e.phrase, reason="options", lang=lang) from None
    SPAWN_LANGUAGES[spawner._gpu_key] = lang  # the spawn this form starts speaks it
    return options


async def options_of_query(spawner, query_data) -> dict:
    """A link's choice (``GET /hub/spawn?profile=a100``): only where ``allow_spawn_from_link`` lets it start."""
    if not set(query_data) - NOT_SPAWN_ARGUMENTS:
        raise ShowTheForm()  # the language switch without scripts, a reload after a refused form
    if not spawner.allow_spawn_from_link:
        raise spawner.gpu_refusal(
            Phrase("A link cannot start a server: choose a profile and press Start."),
            reason="options",
            lang=spawner.gpu_language(),
        )
    return await options_of_form(spawner, query_data)
