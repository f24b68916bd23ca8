"""A spawn's wait for its GPUs: the lab's scheduling policy, the hub's planner, and the queue.

The mixin's ``gpu_policy``, ``gpu_planner`` and ``gpu_attach_planner`` and the pre-spawn hook's wait
(:func:`take_gpus`): the request stands in the allocator's queue, told its place (or the scheduler's
decision with its estimate and reason, docs/scheduling.md), then the budget is checked again before
anything runs.
"""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.gpus.device import GPUDevice
from jupyterhub_gpu.scheduler import FairShare, Fifo, Policy, Preemption, Reservations
from jupyterhub_gpu.session import default_pool
from jupyterhub_gpu.spawners.assign.plan import Ask, Planner, ProfileFacts, unit_of
from jupyterhub_gpu.spawners.assign.protocol import AllocationError, QueueCancelled, QueueTimeout
from jupyterhub_gpu.spawners.assign.restore import wait_restored
from jupyterhub_gpu.spawners.budget import refusal_of
from jupyterhub_gpu.spawners.cancel import raise_if_cancelled
from jupyterhub_gpu.spawners.form import queue_message, queue_status
from jupyterhub_gpu.spawners.kube.kueue import in_kueue_mode
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import Profile


def policy_of(spawner) -> Policy:
    """The scheduling policy a spawner's settings make (docs/scheduling.md)."""
    order = (
        FairShare(
            half_life=timedelta(seconds=spawner.fair_share_half_life),
            ageing=timedelta(seconds=spawner.fair_share_ageing),
        )
        if spawner.fair_share
        else Fifo()
    )
    return Policy(
        "fair-share" if spawner.fair_share else "fifo",
        order,
        Preemption(
            min_runtime=timedelta(seconds=spawner.preempt_min_runtime), grace=timedelta(seconds=spawner.preempt_grace)
        ),
        Reservations(lead=timedelta(seconds=spawner.reservation_lead)),
    )


def planner_of(spawner) -> Planner | None:
    """The hub's scheduler of the spawner's allocator's queue, attached on first use (None without a ledger)."""
    ledger = spawner.ledger
    if ledger is None:
        return None
    allocator = spawner.allocator
    planner = getattr(allocator, "planner", None)
    policy = policy_of(spawner)
    if planner is None or planner.ledger is not ledger:
        planner = Planner(ledger, policy, ZoneInfo(spawner.budget_timezone), refresh=spawner.schedule_interval)
        allocator.use_planner(planner)
    else:
        planner.policy = policy
    return planner


async def attach_planner(spawner) -> Planner | None:
    """:func:`planner_of`, told the hub's GPU profiles (the running sessions are counted by them)."""
    planner = planner_of(spawner)
    if planner is not None:
        planner.note_profiles(
            {
                p.slug: ProfileFacts(p.gpu_model, unit_of(p.gpu_share, p.mig))
                for p in await spawner.gpu_profiles()
                # Kueue admits, orders and preempts the sessions of its profiles: the planner leaves them alone
                if p.gpu_count and not in_kueue_mode(getattr(spawner, "kueue", None), p)
            }
        )
    return planner


async def take_gpus(spawner, profile: Profile) -> None:
    """Wait in the queue for the profile's GPUs, then check the budget again before anything runs.

    A spawn in Kueue mode (its target set by the Kubernetes spawner's pre-spawn hook) stands in no queue of
    the hub: Kueue admits, orders and preempts it (docs/kubernetes.md, "With Kueue").
    """
    if getattr(spawner, "_gpu_kueue", None) is not None:
        # no claim and no wait, but the session's GPUs all the same: the ledger counts them (GPU-hour budgets),
        # culling judges their use, and the server samples them
        spawner._gpu_devices = await spawner.allocator.unclaimed(
            profile.gpu_model, profile.gpu_count, share=profile.gpu_share, mig=profile.mig
        )
        spawner._gpu_granted_at = utcnow()  # billing starts at the pod's binding (gpu_confirm_start)
        return
    key = spawner._gpu_key
    allocator = spawner.allocator
    unit = {"share": profile.gpu_share, "mig": profile.mig}  # a time-sliced share or a MIG slice
    simulated = allocator.simulated(profile.gpu_model, **unit) if profile.gpu_count else False
    waited = False
    planned = False

    def on_position(position, length):
        nonlocal waited
        waited = True  # called only for a request that stands in the queue
        if planned:
            return  # the scheduler's decision says it, with the estimate and the reason
        spawner._gpu_say(
            50,
            lambda lang: queue_message(profile.gpu_model, profile.gpu_count, simulated, position, length, lang, **unit),
        )

    def on_decision(decision):
        # the scheduler's place, why, and the estimate (docs/scheduling.md)
        spawner._gpu_say(
            50, lambda lang: queue_status(decision, profile.gpu_model, profile.gpu_count, simulated, lang, **unit)
        )

    devices: list[GPUDevice] = []
    if profile.gpu_count:
        planner = await spawner.gpu_attach_planner()
        if planner is not None:
            planned = True
            groups = tuple(sorted(spawner._gpu_group_names()))
            allocator.expect(
                key,
                Ask(
                    user=spawner.user.name,
                    server_name=spawner.name,
                    group=spawner._gpu_pool or default_pool(groups) or "",
                    groups=groups,
                    profile=profile.slug,
                    tier=profile.tier,
                    arrived=utcnow(),
                    unit=unit_of(profile.gpu_share, profile.mig),
                ),
                on_decision,
            )

        def on_restore():
            spawner._gpu_say(
                45, Phrase("The hub has just started and is restoring its GPU assignments; your request waits for it")
            )

        # a hub that has just started hands out no GPU before it knows every one its servers hold
        await wait_restored(on_restore)
        try:
            devices = await allocator.acquire(
                key,
                profile.gpu_model,
                profile.gpu_count,
                timeout=spawner.queue_timeout,
                on_position=on_position,
                **unit,
            )
        except QueueTimeout as e:
            raise spawner.gpu_refusal(e.phrase, reason="gpu_queue_timeout", status_code=503) from None
        except QueueCancelled:
            # stopped while waiting (JupyterHub's User.stop clears the state of a server that does not run
            # yet): a spawn failure, so that JupyterHub cleans up instead of waiting for a server
            raise spawner._gpu_stopped_while_starting() from None
        except AllocationError as e:
            raise spawner.gpu_refusal(e.phrase, reason="gpu_unavailable", status_code=503) from None
    grant = getattr(allocator, "grants", {}).pop(key, None)  # the scheduler's word on it (a time limit)
    try:
        raise_if_cancelled()  # the hub's stop came as the GPUs were granted
        if spawner._gpu_abort:
            raise spawner._gpu_stopped_while_starting()
        if waited:
            # The budget again after the wait: other servers of the same budgets ran meanwhile. The first
            # check holds this spawn's minimum until its start is recorded, so concurrent spawns that
            # did not wait cannot all pass on the same remaining budget either.
            refusal = await refusal_of(spawner, profile, reserve=True)
            if refusal:
                raise spawner.gpu_refusal(refusal, reason="budget", status_code=403)
    except BaseException:
        if devices:
            allocator.release(key)
        raise
    spawner._gpu_devices = devices
    spawner._gpu_granted_at = utcnow()  # the GPUs are held (and billed) from now
    if grant is not None and grant.at is not None:
        # "may run until 13:55: CS231N has 4 T4s reserved from 14:00"
        spawner._gpu_say(55, grant.reason_in)
