"""What the GPU spawners do when the hub starts: check the configuration, publish prices, reap orphans.

JupyterHub imports spawner entry points before it reads its config file and
offers no startup hook to spawner classes, so :func:`install_startup_check`
wraps ``JupyterHub.init_spawners`` (once), where the config is complete:

- :func:`startup_check` stops a hub whose GPU configuration is invalid (a bad
  profile stops the hub with a message naming it, instead of failing a
  student's spawn later), then :func:`publish_pricing` writes the profiles and
  their rates to the ledger;
- before the hub checks its spawners, :func:`reap_orphans` stops the servers a
  hub killed in the middle of a spawn left behind (and bills what they held);
  meanwhile the hub's API lists its servers pending that check
  (:func:`show_running_servers`), and spawns wait for GPUs (:mod:`.assign.restore`);
- once they are, :func:`start_scheduler` starts the lab's scheduler if servers run.

``jupyterhub.app`` is imported here at module level: it imports no spawner
module itself (it loads the configured spawner class by entry point when it
reads its config), so there is no circle.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import asdict, replace

from jupyterhub import orm
from jupyterhub.app import JupyterHub
from traitlets import TraitError
from traitlets.config import Configurable

from jupyterhub_gpu import __version__, lab
from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.env import HUB_ID as HUB_ID_ENV
from jupyterhub_gpu.env import session_from_env
from jupyterhub_gpu.gpus.device import InventoryError
from jupyterhub_gpu.ledger.holds import release_all
from jupyterhub_gpu.ledger.hubnames import check_hub_name
from jupyterhub_gpu.ledger.hubs import HUB_BEAT, hub_identity
from jupyterhub_gpu.ledger.store import LedgerSchemaError, shared_ledger
from jupyterhub_gpu.money import Currency, MoneyError
from jupyterhub_gpu.session import SessionStart, StopReason
from jupyterhub_gpu.spawners.assign.host import shared_allocator
from jupyterhub_gpu.spawners.assign.restore import begin_restore, end_restore
from jupyterhub_gpu.spawners.mixin import GPUSpawnerMixin
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles


def config_probe(config, spawner_class):
    """A spawner object holding only the hub's configuration (no user): for startup checks."""
    probe = spawner_class.__new__(spawner_class)
    Configurable.__init__(probe, config=config)
    return probe


def probe_and_check(config, spawner_class) -> tuple[object | None, list[str]]:
    """A :func:`config_probe` and the problems every backend checks first: option values, currency, hub name.

    The probe is None when an option's value is invalid.
    """
    try:
        probe = config_probe(config, spawner_class)
    except (TraitError, ValueError) as e:
        return None, [f"{spawner_class.__name__}: {e}"]
    problems = []
    try:
        Currency.from_config(probe.currency, probe.currency_symbol, what=f"c.{spawner_class.__name__}.currency")
    except MoneyError as e:
        problems.append(str(e))
    try:
        check_hub_name(probe.hub_name, f"c.{spawner_class.__name__}.hub_name")
    except ValueError as e:
        problems.append(str(e))
    return probe, problems


def check_config(config, spawner_class) -> list[str]:
    """Validate a hub's GPU configuration at startup; returns the problems found.

    Profiles given as a callable can only be checked at spawn time.
    """
    probe, problems = probe_and_check(config, spawner_class)
    if probe is None:
        return problems
    currency = None if problems else Currency.from_config(probe.currency, probe.currency_symbol)  # its digits
    profiles = []
    if not callable(probe.profiles):
        try:
            profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image, currency=currency)
        except ProfileError as e:
            problems.append(str(e))
    if not probe.ledger_db_url:
        # the scheduler runs on the ledger's shares, use, reservations and stop orders (docs/scheduling.md)
        if probe.fair_share:
            problems.append("fair_share needs ledger_db_url: the queue weighs the groups' use kept in the ledger")
        tiered = [p.slug for p in profiles if p.preemptible]
        if tiered:
            problems.append(
                f"preemptible profile(s) {', '.join(tiered)} need ledger_db_url: preemptions are stop orders the gpu"
                " service carries out from the ledger"
            )
    try:
        allocator = shared_allocator(probe.gpu_backend, probe.static_gpus, probe.simulated_gpus)
    except InventoryError as e:
        problems.append(str(e))
    else:
        names = sorted({d.name for d in allocator.devices})
        for p in profiles:
            problem = unit_problem(p, allocator, names) if p.gpu_count else None
            if problem:
                problems.append(problem)
    return problems


def unit_problem(profile, allocator, names: list[str]) -> str | None:
    """Why the host cannot give ``profile`` its GPUs (too few, no GPU to share, no such MIG slice), else None."""
    p = profile
    its = f"(its GPUs: {', '.join(names) or 'none'})"
    if p.mig:
        if allocator.matching(p.gpu_model, mig=p.mig):
            return None
        slices = sorted({d.name for d in allocator.devices if d.is_mig})
        return (
            f"profile {p.slug!r}: 'mig' {p.mig!r}: this host has no MIG {p.mig} instance of {p.gpu_model!r}"
            f" (its MIG instances: {', '.join(slices) or 'none'}; create them with nvidia-smi mig, docs/admin.md)"
        )
    total = len(allocator.matching(p.gpu_model, share=p.gpu_share))
    if p.gpu_share and total < 1:
        return f"profile {p.slug!r}: 'gpu_share' {p.gpu_share}: this host has no whole {p.gpu_model!r} to share {its}"
    if total < p.gpu_count:
        return f"profile {p.slug!r}: needs {p.gpu_count}× {p.gpu_model!r} but this host has {total} {its}"
    return None


def _is_gpu_spawner(spawner_class) -> bool:
    return isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerMixin)


def route_logs(app) -> None:
    """jupyterhub-gpu's module loggers (``jupyterhub_gpu.scheduler``, ``.allocator``, ``.kube_inventory``,
    ``.access``) write to the hub's log, with its handlers and level: without this they have no handler in the
    hub and their lines (a queued request's place, a preemption, a withdrawn stop) are lost."""
    ours = logging.getLogger("jupyterhub_gpu")
    if ours.handlers or not app.log.handlers:
        return  # routed already, or configured by the admin's own logging setup
    for handler in app.log.handlers:
        ours.addHandler(handler)
    ours.setLevel(app.log.level)
    ours.propagate = False


def startup_check(app) -> None:
    """Stop a starting hub whose GPU spawner has an invalid configuration."""
    spawner_class = app.spawner_class
    if not _is_gpu_spawner(spawner_class):
        return
    route_logs(app)
    # a spawner without a host inventory (Kubernetes) brings its own check
    own_check = getattr(spawner_class, "gpu_check_config", None)
    problems = own_check(app.config) if own_check else check_config(app.config, spawner_class)
    if problems:
        for problem in problems:
            app.log.critical("jupyterhub-gpu configuration error: %s", problem)
        app.exit(1)
    app.log.info("jupyterhub-gpu: the GPU configuration of %s is valid", spawner_class.__name__)
    for warning in resource_warnings(app.config, spawner_class):
        app.log.warning("jupyterhub-gpu: %s", warning)
    publish_pricing(app, spawner_class)


def start_prepull(app) -> None:
    """Start the backend's pre-pull of the profiles' images in the background (Docker's ``gpu_prepull``)."""
    spawner_class = app.spawner_class
    prepull = getattr(spawner_class, "gpu_prepull", None) if _is_gpu_spawner(spawner_class) else None
    if prepull is None:
        return
    try:
        prepull(config_probe(app.config, spawner_class))
    except Exception:  # never keep the hub from starting for this: a spawn pulls its image itself
        app.log.exception("jupyterhub-gpu: could not start the pre-pull of the profiles' images")


def _size(n: int) -> str:
    """Bytes as a person reads them: 1.5 GiB."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def limit_warnings(profiles, cpus: float | None, memory: int | None, host: str = "this host") -> list[str]:
    """Profiles whose ``cpu_limit`` or ``mem_limit`` is more than the host has (pure: the host's figures given).

    Docker refuses a container that asks for more CPUs than the host has (the spawn fails), and a
    memory limit above the host's memory limits nothing.
    """
    warnings = []
    for p in profiles:
        if cpus and p.cpu_limit and p.cpu_limit > cpus:
            warnings.append(
                f"profile {p.slug!r}: cpu_limit {p.cpu_limit:g} is more than the {cpus:g} CPUs of {host}: a server"
                f" cannot use more (Docker refuses such a container: its spawns fail); set the profile's cpu_limit"
                f" to {cpus:g} or less"
            )
        if memory and p.mem_limit and p.mem_limit > memory:
            warnings.append(
                f"profile {p.slug!r}: mem_limit {_size(p.mem_limit)} is more than the {_size(memory)} of memory of"
                f" {host}: it limits nothing; set the profile's mem_limit below {_size(memory)}"
            )
    return warnings


def local_resources() -> tuple[float, int]:
    """This machine's CPUs (those this process may use) and memory in bytes."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    return float(cpus), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def resource_warnings(config, spawner_class) -> list[str]:
    """What the start-up check warns of in the servers' limits: profiles above the host, limits never applied.

    The host is the backend's (``gpu_host_resources``: the Docker engine's), else this machine; a
    Kubernetes cluster's nodes are not known here. The spawner's own ``cpu_limit`` / ``mem_limit``
    are not what limits a server (each profile's are), so setting them is a mistake too.
    """
    probe = config_probe(config, spawner_class)
    given = {name: getattr(probe, name, None) for name in ("cpu_limit", "mem_limit")}
    warnings = [
        f"{spawner_class.__name__}.{name} = {_size(value) if name == 'mem_limit' else f'{value:g}'} limits no"
        f" server: each profile's {name} does (c.{spawner_class.__name__}.profiles = [{{..., {name!r}: ...}}])"
        for name, value in given.items()
        if isinstance(value, (int, float)) and value  # 0: DockerSpawner's default, no limit
    ]
    if callable(probe.profiles) or any(c.__module__.startswith("kubespawner") for c in spawner_class.__mro__):
        return warnings
    own = getattr(spawner_class, "gpu_host_resources", None)
    try:
        cpus, memory, host = own(probe) if own else (*local_resources(), "this host")
    except Exception as e:  # the Docker engine unreachable: the start-up check says so
        probe.log.debug("jupyterhub-gpu: no host figures for the limits check: %s", e)
        return warnings
    currency = Currency.from_config(probe.currency, probe.currency_symbol)
    profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image, currency=currency)
    return warnings + limit_warnings(profiles, cpus, memory, host)


def publish_lab_settings(app, spawner_class, probe, ledger) -> None:
    """Write the lab's currency, symbol and time zone to the ledger, where the service takes them (:mod:`..lab`).

    A changed currency while the ledger holds sessions charged in another one is
    allowed (those keep theirs) but logged as a warning that says what it means.
    """
    values = {lab.CURRENCY: probe.currency, lab.SYMBOL: probe.currency_symbol, lab.TIMEZONE: probe.budget_timezone}
    sources = {name: lab.option_source(spawner_class, app.config, name) for name in lab.NAMES}
    warning = lab.other_currencies_warning(
        probe.currency, ledger.session_currencies(), sources[lab.CURRENCY].removeprefix("the default of ")
    )
    if warning:
        app.log.warning("jupyterhub-gpu: %s", warning)
    rows = lab.published_rows(values, sources)
    # the spawn's budget check, for the gpu service's own check of a restart before it stops anything
    rows[lab.MIN_MINUTES] = str(probe.budget_min_minutes)
    ledger.set_lab_settings(rows, utcnow())
    app.log.info("jupyterhub-gpu: published currency %s, time zone %s", probe.currency, probe.budget_timezone)


_BEATS: dict = {}  # the hub's ledger: its heartbeat's task (a reference, so that the task is not collected)


def join_ledger(app, ledger) -> None:
    """This hub on the shared ledger, for the doctor's check of the hubs' names (docs/admin.md, two hubs on one
    ledger): its row under its identity (from its cookie secret), beating while the hub runs, and that identity
    given to its managed services (the gpu service writes its own row under it)."""
    identity = hub_identity(getattr(app, "cookie_secret", None))
    ledger.announce("hub", getattr(getattr(app, "hub", None), "api_url", ""), utcnow(), __version__, identity)
    # before it serves, no spawn of this hub is in flight: holds on its budgets are its previous process's
    left = release_all(ledger)
    if left:
        app.log.info("jupyterhub-gpu: ended %d spawn hold(s) this hub's previous process left on the ledger", left)
    if identity:
        app.log.info("jupyterhub-gpu: this hub is %r on the ledger, identity %s", ledger.hub, identity)
        # the services start after the spawners are initialised, with this environment
        for service in getattr(app, "_service_map", {}).values():
            if getattr(service, "managed", False):
                service.environment = {HUB_ID_ENV: identity, **service.environment}
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not in a running hub (a check run on its own)
    if ledger not in _BEATS or _BEATS[ledger].done():
        _BEATS[ledger] = loop.create_task(ledger.keep_beating(HUB_BEAT, utcnow))


def publish_pricing(app, spawner_class) -> None:
    """Write the lab's settings, the static profiles and their rates to the ledger, for the service."""
    probe = config_probe(app.config, spawner_class)
    if not probe.ledger_db_url:
        return
    try:
        ledger = shared_ledger(probe.ledger_db_url, probe.hub_name)
    except LedgerSchemaError as e:  # another hub on this ledger runs a newer jupyterhub-gpu
        app.log.critical("jupyterhub-gpu cannot start: %s", e)
        app.exit(1)
    join_ledger(app, ledger)
    publish_lab_settings(app, spawner_class, probe, ledger)
    if callable(probe.profiles):
        return
    profiles = parse_profiles(probe.profiles, require_image=spawner_class._require_image)
    currency = Currency.from_config(probe.currency, probe.currency_symbol).code
    rows = [asdict(p) for p in profiles]
    try:  # one GPU's memory per profile from the host inventory, for right-sizing advice (never a server's report)
        allocator = shared_allocator(probe.gpu_backend, probe.static_gpus, probe.simulated_gpus)
        for row, p in zip(rows, profiles, strict=True):
            devices = allocator.matching(p.gpu_model, share=p.gpu_share, mig=p.mig) if p.gpu_count else []
            memory = min((d.memory_mib for d in devices), default=None) or None
            # one unit's memory: a share's cap (the GPU's // gpu_share), a MIG slice's own
            row["gpu_memory_mib"] = memory // p.gpu_share if memory and p.gpu_share else memory
    except Exception as e:  # no host inventory (Kubernetes): the advice takes memory from the profile
        app.log.debug("jupyterhub-gpu: no GPU inventory to publish memory sizes from: %s", e)
    count = ledger.set_pricing(rows, currency, utcnow())
    app.log.info("jupyterhub-gpu: published %d profiles and their prices to the ledger", count)


def known_sessions(app) -> set[str]:
    """The GPU sessions the hub knows: in its spawners' saved states and in the spawners it has loaded."""
    known = set()
    for orm_spawner in app.db.query(orm.Spawner):
        session = ((orm_spawner.state or {}).get("gpu") or {}).get("session_id")
        if session:
            known.add(session)
    for user in list(app.users.values()):
        for spawner in list(user.spawners.values()):
            session = getattr(getattr(spawner, "_gpu_session", None), "id", None)
            if session:
                known.add(session)
    return known


def orphan_start(env: dict[str, str], groups) -> SessionStart | None:
    """The session an orphan's environment describes (what its spawner wrote there), or None if it cannot."""
    found = session_from_env(env)
    if found is None or not found.user or not found.profile:
        return None
    # the group that pays only if it is one of the user's groups as the hub knows them now: gpu-local reads the
    # environment of any process the user started (a student can write it), and no group may be charged on an
    # environment's word; a user since removed from the group pays from the default pool
    groups = tuple(sorted(groups))
    return replace(found, groups=groups, pool=found.pool if found.pool in groups else None)


def _user_groups(app, name: str) -> list[str]:
    user = orm.User.find(app.db, name) if name else None
    return [g.name for g in user.groups] if user is not None else []


async def reap_orphans(app) -> list[str]:
    """Stop the servers this hub launched but does not know, before it serves anyone; bill what they held.

    A hub killed in the middle of a spawn (after the server was launched, before the hub saved the
    spawner's state) leaves a server behind that neither the hub nor the ledger may know, holding GPUs
    that no saved assignment names and that the restarted hub would give out again. The backend lists
    its servers of this hub (by the hub's API URL in their environment); those whose session no saved
    spawner state names are stopped, all at once, and each is waited for until it has ended. It ran on
    its GPUs until then: its session is closed in the ledger at that moment (reason ``orphaned``), and
    recorded first from the session facts in its environment if the killed hub had not recorded it yet.
    This runs while spawns wait (:mod:`.assign.restore`), so no GPU of an orphan is handed out while it
    still runs.
    """
    spawner_class = app.spawner_class
    if not _is_gpu_spawner(spawner_class):
        return []
    try:
        probe = config_probe(app.config, spawner_class)
        api_url = app.hub.api_url
        running = await asyncio.to_thread(spawner_class.gpu_orphans, probe, api_url)
        known = known_sessions(app)
        ledger = shared_ledger(probe.ledger_db_url, probe.hub_name) if probe.ledger_db_url else None
        orphans = [o for o in running if o[0] not in known]

        async def reap(session, what, handle, env):
            app.log.warning(
                "jupyterhub-gpu: stopping %s of session %s: it runs, but no server of this hub names it"
                " (the hub was stopped in the middle of its spawn)",
                what,
                session,
            )
            await asyncio.to_thread(spawner_class.gpu_reap, probe, handle)
            ended = utcnow()
            start = orphan_start(env, _user_groups(app, env.get("JUPYTERHUB_USER", "")))
            if ledger is not None and start is not None and start.id == session:
                await asyncio.to_thread(ledger.record_stop, session, ended, StopReason.ORPHANED, start)
            elif ledger is not None:
                app.log.warning("jupyterhub-gpu: %s has no session facts in its environment to bill", what)
            return what

        results = await asyncio.gather(*(reap(*o) for o in orphans), return_exceptions=True)
        for (session, what, _, _), result in zip(orphans, results, strict=True):
            if isinstance(result, BaseException):
                app.log.error("jupyterhub-gpu: could not stop %s of session %s: %s", what, session, result)
        return [r for r in results if not isinstance(r, BaseException)]
    except Exception:  # never keep the hub from starting for this
        app.log.exception("jupyterhub-gpu: could not look for servers left by an interrupted spawn")
        return []


async def clean_up_failed_start(app) -> None:
    """Stop what a hub whose start failed had started: its proxy, its managed services (JupyterHub's cleanup).

    ``JupyterHub.start`` starts the proxy (a process in a session of its own), binds the hub, then
    starts the managed services, and ends the process (``exit(1)``) when one of them does not come
    up, or when binding fails, without its cleanup: the proxy ran on, orphaned, holding the public
    and API ports with the dead hub's token, and a next hub that did not find its pid file (started
    from another directory) met a proxy that refused it ("api_request to proxy failed: 403").
    JupyterHub's own ``cleanup`` is what a signal runs at shutdown, with the admin's ``cleanup_proxy``
    and ``cleanup_servers`` choices.
    """
    app.log.critical("jupyterhub-gpu: the hub did not start; stopping the proxy and the services it started")
    try:
        await app.cleanup()
    except Exception:
        app.log.exception("jupyterhub-gpu: could not clean up after the failed start")


async def start_scheduler(app) -> None:
    """Start the hub's scheduler now when servers run on GPUs, not at the next spawn: a class reservation
    booked before or while the hub was down must tell them their end in time (docs/scheduling.md)."""
    for user in list(app.users.values()):
        for spawner in list(user.spawners.values()):
            if isinstance(spawner, GPUSpawnerMixin) and spawner.server is not None:
                try:
                    planner = await spawner.gpu_attach_planner()
                    if planner is not None:
                        await planner.fresh(0)  # the bookings and orders as they are, before the first cycle
                except Exception:
                    app.log.exception("jupyterhub-gpu: the scheduler did not start; it starts at the next spawn")
                return


def show_running_servers(app) -> list:
    """Load the spawner of every server the hub's database has, pending JupyterHub's check, before anything is
    awaited; the spawners loaded (for :func:`end_checks`).

    JupyterHub serves once ``init_spawners`` has run for ``init_spawners_timeout`` seconds, done or not, and
    its API shows only the servers of the spawners it has loaded: a user whose spawners are not loaded yet is
    listed as active with no servers. JupyterHub's own ``init_spawners`` loads them, pending its check, before
    its first await; :func:`reap_orphans` runs before it and awaits, so a hub whose start took that long
    showed none of its running servers while it reaped, and the gpu service's reconciliation closed their
    sessions (docs/service.md). Loaded here, they are listed as JupyterHub lists them during its check."""
    loaded = []
    for orm_spawner in app.db.query(orm.Spawner).filter(orm.Spawner.server_id.isnot(None)):
        spawner = app.users[orm_spawner.user].spawners[orm_spawner.name]
        spawner._check_pending = True
        loaded.append(spawner)
    return loaded


def end_checks(spawners: list) -> None:
    """Once JupyterHub's ``init_spawners`` is over: a spawner of :func:`show_running_servers` that it did not
    check (its server was stopped meanwhile) is no longer pending a check, which would refuse its next spawn."""
    for spawner in spawners:
        spawner._check_pending = False


def install_startup_check() -> None:
    """Run :func:`startup_check` and :func:`reap_orphans` when the hub initialises its spawners, and
    :func:`clean_up_failed_start` when the hub's start fails."""
    original = JupyterHub.init_spawners
    if getattr(original, "_jupyterhub_gpu_check", False):
        return
    original_start = JupyterHub.start

    async def start(self):
        try:
            return await original_start(self)
        except BaseException:  # SystemExit from the hub's exit(1) too
            await clean_up_failed_start(self)
            raise

    async def init_spawners(self):
        startup_check(self)
        start_prepull(self)
        # JupyterHub starts serving after init_spawners_timeout even if this is not done: until it is,
        # spawns wait for GPUs (the saved assignments are loaded here, and orphans are still running)
        begin_restore()
        # the API lists the running servers while the orphans are reaped (pending JupyterHub's check)
        loaded = show_running_servers(self)
        try:
            # before the spawners are checked: the saved states (in the hub's database) say which sessions it knows
            await reap_orphans(self)
            result = await original(self)
            await start_scheduler(self)
            return result
        finally:
            end_checks(loaded)
            end_restore()

    init_spawners._jupyterhub_gpu_check = True
    JupyterHub.init_spawners = init_spawners
    JupyterHub.start = start
