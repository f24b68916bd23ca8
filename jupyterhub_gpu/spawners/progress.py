"""A spawn's words: its progress events and its refusals, in the spawn's language; the hub's log has the English.

JupyterHub asks one spawner object for the form and may spawn with another (it replaces a failed spawner
by one it does not keep, and the next lookup makes a third), so the language of the form that starts a
server, and of the form shown again after a refusal, are kept here by server (``user/name``), not on
the spawner.
"""

from __future__ import annotations

import asyncio

from jupyterhub.spawner import SpawnException

from jupyterhub_gpu.spawners.messages import Phrase

#: The language of the form that starts a server, by server (``user/name``).
SPAWN_LANGUAGES: dict[str, str] = {}
#: The language of the form shown again after a refusal, by server.
FORM_LANGUAGES: dict[str, str] = {}


def refusal(
    spawner, worded, *, reason: str, status_code: int = 400, lang: str | None = None, log_message: str = ""
) -> SpawnException:
    """A refusal the student reads in the spawn's language (``worded(lang)``); the hub's log has its English.

    JupyterHub shows a SpawnException's ``jupyterhub_message`` where it is set (the spawn page, the
    progress events, the REST API's answer), and its log message (``str()``) elsewhere.
    """
    lang = lang or spawner._gpu_lang
    FORM_LANGUAGES[spawner._gpu_key] = lang  # the form shown again under this refusal speaks the same
    shown = worded(lang)
    e = SpawnException(shown, reason=reason, log_message=log_message or worded("en"), status_code=status_code)
    e.jupyterhub_message = shown
    return e


def stopped_while_starting(spawner) -> SpawnException:
    """The refusal of a spawn whose server was stopped (or its state cleared) while it was starting."""
    return refusal(
        spawner,
        Phrase("The server was stopped while it was starting; nothing was started."),
        reason="stopped",
        status_code=409,
    )


def say(spawner, progress: int, worded) -> None:
    """A progress event in the spawn's language (``worded(lang)``); the hub's log has its English."""
    spawner.log.info("%s: %s", spawner._gpu_key, worded("en"))
    emit(spawner, {"progress": progress, "message": worded(spawner._gpu_lang)})


def emit(spawner, event: dict) -> None:
    """Add a progress event, and wake whoever waits for the next one."""
    spawner._gpu_events.append(event)
    waiting, spawner._gpu_events_changed = spawner._gpu_events_changed, None
    if waiting is not None and not waiting.done():
        waiting.set_result(None)


async def events(spawner, done=lambda: False):
    """Our spawn events as they come (queue position, assignment), until ``done()`` after the last one."""
    seen = 0
    while True:
        while seen < len(spawner._gpu_events):
            yield spawner._gpu_events[seen]
            seen += 1
        if done():
            return
        if spawner._gpu_events_changed is None:
            spawner._gpu_events_changed = asyncio.get_running_loop().create_future()
        await spawner._gpu_events_changed
