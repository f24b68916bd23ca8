"""The culling notices: an idle warning and its cancellation, the "GPU memory high" notice, and the cap notice
of a share or MIG slice.

What the cull rules decide is :mod:`jupyterhub_gpu.rules.culling` (pure, shared with the simulator); this
module words the decision as a :class:`~.notices.Message` for the gateway, and composes the memory notices
that name a bigger profile (:mod:`jupyterhub_gpu.rules.moves`).
"""

from __future__ import annotations

from collections.abc import Sequence

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.gpus.device import parse_share_uuid
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import from_micros
from jupyterhub_gpu.rules.culling import Decision
from jupyterhub_gpu.rules.moves import Chosen, next_bigger
from jupyterhub_gpu.rules.signals import MinuteSignal
from jupyterhub_gpu.service.domain.notices import AlertSettings, Message, Once, user_address

#: The notices' own strings (the decisions' texts are :data:`jupyterhub_gpu.rules.culling.MESSAGES`).
NOTICE_TEXTS: dict[str, str] = {
    "subject.warn": "Your GPU server will be stopped",
    "subject.cancel": "Idle stop cancelled",
    "memory_high": (
        "GPU memory has been above {percent}% for {minutes} minutes: a profile with a larger GPU may help."
    ),
}


def memory_notice(threshold: float = 0.9, minutes: int = 10) -> str:
    """The text of the "GPU memory high" notice."""
    percent = threshold * 100
    return NOTICE_TEXTS["memory_high"].format(
        percent=int(percent) if float(percent).is_integer() else round(percent, 1), minutes=minutes
    )


def cull_message(session, decision: Decision, settings: AlertSettings, lang: str = "en") -> Message:
    """An idle warning (or its cancellation) for the session's user: in JupyterLab, by mail and webhook.

    ``session`` is the ledger's record (``user``, ``server_name``, ``id``). The
    mail goes to the user's own address (``user_email_template``), never to
    instructors; a failed mail or webhook is logged and not retried (the Lab
    notice is the warning that counts). Worded in ``lang``, and in another language on the gateway's demand.
    """
    warn = decision.action == "warn"
    address = user_address(settings, session.user)
    text = decision.worded(lang)
    return Message(
        user=session.user,
        kind="cull",
        text=text,
        level="warning" if warn else "info",
        session_id=session.id,
        subject=translator(lang)(NOTICE_TEXTS["subject.warn" if warn else "subject.cancel"]),
        to=(address,) if address else (),
        payload={
            "event": "idle_warning" if warn else "idle_warning_cancelled",
            "user": session.user,
            "server_name": session.server_name,
            "session_id": session.id,
            "rule": decision.rule.kind if decision.rule else None,
            "stop_at": isoformat(decision.stop_at) if decision.stop_at else None,
            "text": text,
        },
        what=f"idle notice for {session.user}",
        source="jupyterhub_gpu.service",
        event="cull",
        lang=lang,
        words=lambda other: cull_message(session, decision, settings, other),
    )


def bigger_profile(options: Sequence, session, affordable=None):
    """The next bigger profile a session may grow to, or None: :func:`.moves.next_bigger`.

    ``options`` are the advice's catalogue (``advice.catalogue``: the published profiles with the
    admins' edits and each one's memory per GPU); ``session`` the ledger's record (or a
    :class:`.moves.Chosen`). Bigger keeps the tier, the group that pays and the kind of unit (a share
    grows to a whole GPU); a profile whose memory is unknown is never offered. The next one is the
    cheapest per minute, then the smallest, among those ``affordable(option)`` says the budgets can pay.
    """
    return next_bigger(options, Chosen.of(session), affordable)


def memory_text(threshold: float, minutes: int, bigger, currency, lang: str = "en") -> str:
    """The "GPU memory high" notice's words: the next bigger profile and its price, or that there is none."""
    _ = translator(lang)
    percent = threshold * 100
    percent = int(percent) if float(percent).is_integer() else round(percent, 1)
    if bigger is None:
        return _(
            "GPU memory has been above {percent}% for {minutes} minutes, and no profile with more GPU memory or"
            " more GPUs is open to you: try a smaller batch size or model.",
            percent=percent,
            minutes=minutes,
        )
    return _(
        "GPU memory has been above {percent}% for {minutes} minutes: a bigger instance may help."
        " {profile} ({gpus} × {memory} GB GPU memory) costs {price}/min.",
        percent=percent,
        minutes=minutes,
        profile=bigger.display_name,
        gpus=bigger.gpu_count,
        memory=f"{bigger.memory_mib / 1024:g}",
        price=currency.format_rate(from_micros(bigger.rate_micros), locale=lang),
    )


def memory_message(
    session,
    threshold: float = 0.9,
    minutes: int = 10,
    options: Sequence = (),
    currency=None,
    lang: str = "en",
    affordable=None,
) -> tuple[Message, Once]:
    """The "GPU memory high" notice of a session, in JupyterLab only, and its once-per-session key.

    With the catalogue (``options``) and the ``currency`` it names the next bigger profile the user
    may use (:func:`bigger_profile`, one its budgets can pay for: ``affordable``) and its price per minute;
    its kind is then ``bigger:<slug>``, which the Lab shows with a "Restart on <profile>" button (docs/user.md).
    """
    bigger = bigger_profile(options, session, affordable) if currency is not None else None
    if currency is None:
        text = memory_notice(threshold, minutes)
    else:
        text = memory_text(threshold, minutes, bigger, currency, lang)
    kind = "advice"
    if bigger is not None and len(f"bigger:{bigger.slug}") <= 32:  # the notice's kind column is 32 characters
        kind = f"bigger:{bigger.slug}"
    message = Message(
        user=session.user,
        kind=kind,
        text=text,
        level="info",
        session_id=session.id,
        what=f"memory notice for {session.user}",
        source="jupyterhub_gpu.service",
        lang=lang,
        words=lambda other: memory_message(session, threshold, minutes, options, currency, other, affordable)[0],
    )
    return message, Once(session.user, f"session:{session.id}", session.started, 90)


# -- the cap of a share or MIG slice -------------------------------------------------------------


def capped_unit(session, options: Sequence = ()) -> str | None:
    """ "share" for a session on a time-sliced share of a GPU, "mig" on a MIG slice, None on whole GPUs.

    From the unit uuids the spawner assigned (the ledger's ``gpus``), never from what a server reports. On
    Kubernetes the device plugin picks the device and the ledger names what the pod asked for
    (``nvidia.com/gpu.shared:0``, ``nvidia.com/mig-1g.10gb:0``): there the published profile (``options``,
    :func:`.advice.catalogue`) says which unit it is.
    """
    uuids = session.gpu_list
    if any(parse_share_uuid(u) for u in uuids):
        return "share"
    if any(u.startswith("MIG-") for u in uuids):
        return "mig"
    if any("/" in u.partition(":")[0] for u in uuids):  # a cluster's resource placeholders
        mine = next((o for o in options if o.slug == session.profile), None)
        if mine is not None and mine.mig:
            return "mig"
        if mine is not None and mine.gpu_share:
            return "share"
    return None


def cap_reached(session, signals: Sequence[MinuteSignal], threshold: float = 0.9, options: Sequence = ()) -> bool:
    """Whether a session on a share or a MIG slice used ``threshold`` (a fraction) of its cap in its latest
    sampled minute: its server's own memory (what the reader attributes to its own processes) over the cap."""
    if capped_unit(session, options) is None:
        return False
    latest = next((s for s in reversed(signals) if s.gpu_mem_frac is not None), None)
    return latest is not None and latest.gpu_mem_frac >= threshold


def cap_text(unit: str, used_fraction: float, cap_mib: int | None, bigger, lang: str = "en") -> str:
    """The cap notice's words: how much of the cap the kernels use, what happens past it, and a bigger profile."""
    _ = translator(lang)
    if cap_mib:
        values = dict(used=f"{used_fraction * cap_mib / 1024:.1f}", cap=f"{cap_mib / 1024:.1f}")
        if unit == "mig":
            text = _(
                "Your kernels use {used} of your MIG slice's {cap} GB;"
                " past it TensorFlow stops with an out-of-memory error.",
                **values,
            )
        else:
            text = _(
                "Your kernels use {used} of your share's {cap} GB;"
                " past it TensorFlow stops with an out-of-memory error.",
                **values,
            )
    else:
        percent = round(used_fraction * 100)
        if unit == "mig":
            text = _(
                "Your kernels use {percent}% of your MIG slice's GPU memory;"
                " past it TensorFlow stops with an out-of-memory error.",
                percent=percent,
            )
        else:
            text = _(
                "Your kernels use {percent}% of your share's GPU memory;"
                " past it TensorFlow stops with an out-of-memory error.",
                percent=percent,
            )
    if bigger is None:
        more = _("No profile with more GPU memory is open to you: try a smaller batch size or model.")
    elif bigger.gpu_count > 1:
        memory = f"{bigger.memory_mib / 1024:g}"
        more = _(
            "The profile '{profile}' has {gpus} × {memory} GB.",
            profile=bigger.display_name,
            gpus=bigger.gpu_count,
            memory=memory,
        )
    else:
        more = _(
            "The profile '{profile}' has {memory} GB.",
            profile=bigger.display_name,
            memory=f"{bigger.memory_mib / 1024:g}",
        )
    return _.sentences((text, more))


def cap_message(
    session, signals: Sequence[MinuteSignal], options: Sequence = (), currency=None, lang: str = "en", affordable=None
) -> tuple[Message, Once]:
    """The cap notice of a session on a share or MIG slice, in JupyterLab only, and its once-per-session key.

    The cap is the unit's memory in the catalogue (``options``: a share's is its GPU's divided by the share
    count, :func:`.advice.catalogue`), the use the latest sampled minute's fraction of it. With the
    ``currency`` it names the next bigger profile the user may use and pay for (:func:`bigger_profile`,
    ``affordable``) and its kind is
    ``bigger:<slug>`` (the Lab's "Restart on <profile>" button). Its key is the "GPU memory high" notice's:
    a session gets one of the two, the cap notice first (it needs no ten minutes).
    """
    unit = capped_unit(session, options) or "share"
    latest = next((s for s in reversed(signals) if s.gpu_mem_frac is not None), None)
    used = latest.gpu_mem_frac if latest is not None else 1.0
    mine = next((o for o in options if o.slug == session.profile), None)
    bigger = bigger_profile(options, session, affordable) if currency is not None else None
    kind = "advice"
    if bigger is not None and len(f"bigger:{bigger.slug}") <= 32:  # the notice's kind column is 32 characters
        kind = f"bigger:{bigger.slug}"
    message = Message(
        user=session.user,
        kind=kind,
        text=cap_text(unit, used, mine.memory_mib if mine else None, bigger, lang),
        level="warning",
        session_id=session.id,
        what=f"memory cap notice for {session.user}",
        source="jupyterhub_gpu.service",
        lang=lang,
        words=lambda other: cap_message(session, signals, options, currency, other, affordable)[0],
    )
    return message, Once(session.user, f"session:{session.id}", session.started, 90)
