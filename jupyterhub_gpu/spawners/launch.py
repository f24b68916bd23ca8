"""A spawn from the pre-spawn hook to a running, recorded server.

The mixin's ``run_pre_spawn_hook`` (:func:`pre_spawn`: the spawn's language, the profile and pool
chosen and checked, the budget checked and held, the wait for GPUs in :mod:`.queueing`) and ``start``
(:func:`start`: the session's record and the server's environment from it, the backend's start, the
start recorded in the ledger). A stop while starting makes the spawn give up at its next step, and
what was launched is stopped before its GPUs are released.
"""

from __future__ import annotations

import asyncio
from functools import partial

from jupyterhub.orm import Service
from jupyterhub.utils import maybe_future

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import make_gpu_env, memory_limit_of, share_label
from jupyterhub_gpu.gpus.backends import reader_name
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.session import StopReason
from jupyterhub_gpu.spawners.budget import choose_pool_of, drop_reservation, keep_hold, refusal_of
from jupyterhub_gpu.spawners.form import assignment_message
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import OptionsError, choose_profile, job_server_option, resume_choice
from jupyterhub_gpu.spawners.progress import SPAWN_LANGUAGES
from jupyterhub_gpu.spawners.queueing import take_gpus
from jupyterhub_gpu.spawners.records import new_session, record_start, server_token_id


async def pre_spawn(spawner, backend_hook):
    """Validate the chosen profile, then wait for its GPUs (form and REST API alike); ``backend_hook`` is the
    backend's own ``run_pre_spawn_hook``.

    The queue wait happens here, before JupyterHub calls ``start()`` and starts counting ``start_timeout``:
    a spawn that waits gets exactly its wait on top, and one that does not wait keeps the configured
    ``start_timeout``.
    """
    # the spawn's language: the form's that started it, else the request's (the REST API's), else English
    lang = SPAWN_LANGUAGES.pop(spawner._gpu_key, None) or spawner.gpu_language()
    previous, current = spawner._gpu_spawn_task, asyncio.current_task()
    if previous is not None and previous is not current and not previous.done():
        # JupyterHub let a new spawn begin while the last one still runs on this spawner (a stop cleared its
        # pending flags: the hub's start-up check "appears to have stopped while the Hub was down" stops a
        # spawn that waits for the GPU restore). One at a time, or both launch a server, on the same GPU;
        # the last one gives up at its next step, and the student asks again once it has
        spawner._gpu_abort = True
        raise spawner.gpu_refusal(
            Phrase("The previous start of this server is still being cancelled; try again in a moment."),
            reason="busy",
            status_code=409,
            lang=lang,  # the running spawn keeps its own language (its session records it)
        )
    spawner._gpu_lang = lang
    spawner._gpu_spawn_task = current  # JupyterHub's spawn (User.spawn): it runs until the start ends or fails
    # JupyterHub's own first event: a spawn that fails before its GPUs are assigned still shows one
    spawner._gpu_events = [{"progress": 50, "message": translator(spawner._gpu_lang)("Spawning server...")}]
    spawner._gpu_abort = False
    spawner._gpu_in_start = True
    try:
        return await _choose_and_wait(spawner, backend_hook)
    except BaseException:
        spawner._gpu_in_start = False
        raise


async def _choose_and_wait(spawner, backend_hook):
    allowed, everything = await spawner.allowed_profiles()
    options = dict(spawner.user_options or {}) if isinstance(spawner.user_options, dict) else spawner.user_options
    try:
        spawner._gpu_job_id = job_option(spawner, options)
        profile = choose_profile(options, allowed, everything)
        spawner._gpu_pool = await choose_pool_of(spawner, options, profile)
        spawner._gpu_resume = resume_choice(options, profile)
    except OptionsError as e:
        raise spawner.gpu_refusal(e.phrase, reason="options") from None
    # the check and the hold of this spawn's minimum are one step for every hub of the ledger (docs/service.md,
    # "Spawn races")
    refusal = await refusal_of(spawner, profile, reserve=True)
    if refusal:
        raise spawner.gpu_refusal(refusal, reason="budget", status_code=403)
    spawner._gpu_profile = profile
    try:
        result = await maybe_future(backend_hook())
        await spawner.gpu_before_queue(profile)
        await keep_hold(spawner, profile)  # the hold lasts the waits to come, however long an image pull took
        await take_gpus(spawner, profile)
    except BaseException:
        drop_reservation(spawner)
        raise
    return result


def job_option(spawner, options) -> str | None:
    """Take ``job_id`` out of the options: ``job-`` servers are the gpu service's job servers (docs/jobs.md)."""
    # who asked the hub for this spawn: only a service (the gpu service's POST jobs) starts a job's server
    requester = getattr(getattr(spawner, "handler", None), "current_user", None)
    return job_server_option(spawner.name, options, isinstance(requester, Service))


async def start(spawner, backend_start, backend_stop):
    """The spawner's ``start()``: the session and its environment, the backend's start, the start recorded."""
    if spawner._gpu_profile is None or not spawner._gpu_in_start:  # start() without the hub's spawn sequence
        await spawner.run_pre_spawn_hook()
    profile = spawner._gpu_profile
    devices = list(spawner._gpu_devices)
    spawner._gpu_devices = []
    spawner._gpu_launching = True
    spawner._gpu_recorded = False
    spawner._gpu_last_alive = None
    launched = False
    currency = spawner.gpu_currency
    try:
        if spawner._gpu_abort:
            raise spawner._gpu_stopped_while_starting()
        session = new_session(
            profile,
            devices,
            spawner._gpu_granted_at or utcnow(),
            currency.code,
            user=spawner.user.name,
            server_name=spawner.name,
            groups=spawner._gpu_group_names(),
            pool=spawner._gpu_pool,
            language=spawner._gpu_lang,
            resume=spawner._gpu_resume,
            server_token=server_token_id(spawner),
        )
        spawner._gpu_session = session
        spawner._gpu_env = make_gpu_env(
            session,
            devices=[d.to_dict() for d in devices],
            memory_limit_mib=memory_limit_of(devices),
            share=share_label(devices),
            reader=reader_name(spawner.gpu_backend),
            gpu_model=profile.gpu_model,
            profile_name=profile.name_in(spawner._gpu_lang),  # the Lab shows it to the student who chose it
            currency_symbol=currency.symbol or "",  # "": the Lab writes its language's symbol
            service_url=spawner.gpu_service_url,
        )
        if getattr(spawner, "_gpu_kueue", None) is None:  # in Kueue mode no GPU is assigned: Kueue admits the pod
            spawner._gpu_say(60, partial(assignment_message, profile, devices, currency))
        await spawner.gpu_prepare(profile, devices)
        if spawner._gpu_abort:
            raise spawner._gpu_stopped_while_starting()
        result = await backend_start()
        launched = True
        await spawner.gpu_confirm_start()
        await _record_start(spawner)
        if spawner._gpu_abort:
            # stopped while it was launching: JupyterHub's stop found nothing running and left it
            raise spawner._gpu_stopped_while_starting()
        return result
    except BaseException:
        session = spawner._gpu_session
        if launched or spawner.gpu_launch_began():
            # stopped while launching, its start could not be recorded, or the backend's start failed
            # after it asked for the server (a pod KubeSpawner timed out on): what was launched must not
            # run on once its GPUs are released (JupyterHub's own stop may have found nothing running)
            try:
                spawner._gpu_stopping = True
                await backend_stop(now=True)
            except Exception:
                spawner.log.exception("could not stop %s, stopped while starting", spawner._log_name)
            finally:
                spawner._gpu_stopping = False
        if spawner._gpu_recorded and session is not None:
            await spawner._gpu_record_stop(session, utcnow(), StopReason.STOPPED)
        spawner._gpu_release()
        raise
    finally:
        spawner._gpu_launching = False
        spawner._gpu_in_start = False
        drop_reservation(spawner)


async def _record_start(spawner) -> None:
    """Record the session start in the ledger; a spawn that cannot be billed does not run."""
    ledger = spawner.ledger
    if ledger is None or spawner._gpu_session is None:
        return

    def current():
        # read under the budget check's lock: a server stopped while this waited has no session any more
        if spawner._gpu_session is None:
            raise spawner._gpu_stopped_while_starting()
        return spawner._gpu_session

    def recorded():
        spawner._gpu_recorded = True
        drop_reservation(spawner)  # the recorded session counts from now on

    await record_start(ledger, current, recorded)
