"""The doctor's checks: one function per thing a first hour goes wrong on, each over the loaded :class:`Setup`.

Each check yields :class:`~jupyterhub_gpu.doctor.results.Result` lines and reuses the rule it checks
from where that rule lives (profiles and prices: :func:`~jupyterhub_gpu.spawners.startup.check_config`;
the currency and time zone: :func:`jupyterhub_gpu.lab.agree`, as the service takes the hub's; the Docker
network: the spawner's own ``network_problem``; the ledger's migrations: the Alembic scripts of
:mod:`jupyterhub_gpu.ledger.store`).
Nothing is written anywhere: no database is created or migrated, no Docker network made; the image check
runs one throwaway container without network. :func:`run_checks` runs every check, and a check that
crashes is one fail line of its own while the others still run.
"""

from __future__ import annotations

import json
import smtplib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import urlparse

from jupyterhub.scopes import expand_scopes
from sqlalchemy.engine import make_url

from jupyterhub_gpu import __version__, lab
from jupyterhub_gpu.doctor import channels, databases
from jupyterhub_gpu.doctor.dockerchecks import check_docker, check_images
from jupyterhub_gpu.doctor.gpus import _inventory_problem, _is_kube, check_gpu_host, check_gpus
from jupyterhub_gpu.doctor.hubs import check_hub_names
from jupyterhub_gpu.doctor.kueue import check_kueue
from jupyterhub_gpu.doctor.loading import SERVICE_NAME, Setup, is_gpu_spawner
from jupyterhub_gpu.doctor.ports import check_ports, port_problem
from jupyterhub_gpu.doctor.results import FAIL, PASS, SKIP, WARN, Result, Unavailable
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES, SCOPE_BUDGETS_WRITE
from jupyterhub_gpu.spawners.docker.spawner import GPUDockerSpawner
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profiles
from jupyterhub_gpu.spawners.startup import check_config as startup_check_config
from jupyterhub_gpu.spawners.startup import resource_warnings

__all__ = ["CHECKS", "check_docker", "check_gpus", "check_images", "check_ports", "port_problem", "run_checks"]

REFERENCE = "config/docker_host_config.py"

# What the service asks the hub for, and why (the reference config's gpu-service role).
SERVICE_SCOPES = {
    "list:users": "the tick finds the running servers",
    "read:users": "the tick reads users and their servers",
    "read:groups": "group budgets and instructors' pages read the groups",
    "read:servers": "the tick reads each server's state",
    "delete:servers": "idle and over-budget servers are stopped",
    "start:servers": "notebook jobs start named servers",
}
USER_ACCESS = f"access:services!service={SERVICE_NAME}"

Check = Callable[[Setup], Iterable[Result]]


# -- configuration ---------------------------------------------------------------------------------


def check_config(setup: Setup) -> Iterator[Result]:
    """The hub's config file loads, with a jupyterhub-gpu spawner."""
    if setup.hub is None:
        yield Result(
            "config",
            FAIL,
            f"{setup.hub_config} did not load: {setup.hub_problem}",
            "give the hub's config file with --config PATH (the one `jupyterhub -f` reads), and fix the error named",
        )
        return
    spawner_class = setup.hub.spawner_class
    name = getattr(spawner_class, "__name__", str(spawner_class))
    if not is_gpu_spawner(spawner_class):
        yield Result(
            "config",
            FAIL,
            f"{setup.hub_config}: c.JupyterHub.spawner_class is {name}, not a jupyterhub-gpu spawner",
            'set c.JupyterHub.spawner_class = "gpu-docker" (or "gpu-kube", "gpu-local")',
        )
        return
    if setup.probe is None:
        yield Result("config", FAIL, f"{setup.hub_config}: {setup.probe_problem}", "correct the setting it names")
        return
    yield Result("config", PASS, f"{setup.hub_config} loaded: spawner {name}")


def check_hub_files(setup: Setup) -> Iterator[Result]:
    """The folders of the hub's own database and cookie secret exist, its TLS files too (or it cannot start)."""
    hub = setup.need_hub()
    here = Path.cwd()
    wanted = []
    db = databases.sqlite_path(hub.db_url, here)
    if db is not None:
        wanted.append(("c.JupyterHub.db_url", db, False))
    if hub.cookie_secret_file:
        wanted.append(("c.JupyterHub.cookie_secret_file", Path(here, hub.cookie_secret_file), False))
    for setting in ("ssl_cert", "ssl_key"):
        if getattr(hub, setting):
            wanted.append((f"c.JupyterHub.{setting}", Path(here, getattr(hub, setting)), True))
    for setting, path, must_exist in wanted:
        if must_exist and not path.is_file():
            yield Result(
                "hub-files", FAIL, f"{setting}: {path} does not exist", f"correct {setting} or create the file"
            )
        elif not must_exist and not path.parent.is_dir():
            yield Result(
                "hub-files",
                FAIL,
                f"{setting}: the folder {path.parent} does not exist: the hub cannot start",
                f"mkdir -p {path.parent} (owned by the user the hub runs as), or change {setting}",
            )
        else:
            yield Result("hub-files", PASS, f"{setting}: {path}" + ("" if path.exists() else " (created at start)"))


def check_service(setup: Setup) -> Iterator[Result]:
    """The gpu service is in ``c.JupyterHub.services``, its command line and config file load."""
    setup.need_hub()
    if setup.service_spec is None:
        yield Result(
            "service",
            FAIL,
            "no gpu service in c.JupyterHub.services: no billing, budgets or culling",
            f'add the "gpu" service entry of {REFERENCE} (its command runs python -m jupyterhub_gpu.service)',
        )
        if setup.service is None:
            return
    if setup.service_spec is not None and not setup.service_spec.get("url"):
        yield Result(
            "service",
            FAIL,
            "the gpu service's entry in c.JupyterHub.services has no url: the proxy cannot route /services/gpu/",
            f'add "url": "http://127.0.0.1:10101" (for Docker servers on the network\'s gateway, as {REFERENCE})',
        )
    if setup.service is None:
        yield Result(
            "service",
            FAIL,
            f"the gpu service would refuse its settings: {setup.service_problem}",
            "correct the option or setting named, in the service's command or its config file",
        )
        return
    how = "its command line" if setup.service_argv is not None else "no command line (not started by the hub)"
    if setup.service_config_loaded:
        yield Result("service", PASS, f"gpu service settings: {how} and {setup.service_config}")
    else:
        yield Result("service", PASS, f"gpu service settings: {how}; no config file ({setup.service_config} absent)")
    for note in setup.notes:
        yield Result("service", WARN, note, "run the gpu service as a managed service (command) as the reference does")


def check_service_url(setup: Setup) -> Iterator[Result]:
    """The spawner's ``gpu_service_url`` (how the servers reach the service) names the service's address."""
    probe = setup.need_probe()
    spec = setup.service_spec
    if spec is None or not spec.get("url"):
        raise Unavailable("no gpu service url to compare with")
    setting = f"c.{type(probe).__name__}.gpu_service_url"
    service = urlparse(spec["url"])
    if not probe.gpu_service_url:
        yield Result(
            "service-url",
            WARN,
            f"{setting} is empty: servers push no GPU samples (culling by GPU use has none) and JupyterLab shows"
            " no cost or budget",
            f'{setting} = "http://{service.hostname}:{service.port}/services/gpu/" (the service\'s url)',
        )
        return
    given = urlparse(probe.gpu_service_url)
    public = urlparse(setup.hub.bind_url)
    ports = {service.port or 80, public.port or 80}  # the service itself, or through the proxy
    if (given.port or 80) not in ports or not given.path.rstrip("/").endswith("/services/gpu"):
        yield Result(
            "service-url",
            WARN,
            f"{setting} = {probe.gpu_service_url!r} is neither the gpu service's url ({spec['url']}) nor the proxy"
            " (its port, /services/gpu/): servers would send their samples elsewhere",
            f'{setting} = "http://{service.hostname}:{service.port}/services/gpu/"',
        )
        return
    yield Result("service-url", PASS, f"servers reach the gpu service at {probe.gpu_service_url}")


# -- profiles, prices and GPUs -----------------------------------------------------------------------


def check_profiles(setup: Setup) -> Iterator[Result]:
    """Profiles and prices, by the hub's own start-up rules (a fail here stops the hub at start)."""
    probe = setup.need_probe()
    cls = type(probe)
    config = setup.hub.config
    if issubclass(cls, GPUDockerSpawner) or not hasattr(cls, "gpu_check_config"):
        problems = startup_check_config(config, cls)  # Docker's own check would also create its network
    else:
        problems = cls.gpu_check_config(config)
    inventory = _inventory_problem(probe)
    problems = [p for p in problems if p != inventory]  # the gpus check reports that one
    where = f"in {setup.hub_config}"
    for problem in problems:
        yield Result("profiles", FAIL, problem, f"correct the setting or profile field it names {where}")
    if problems:
        return
    if callable(probe.profiles):
        yield Result("profiles", WARN, "profiles is a callable: checked only when a user spawns", "")
        return
    try:
        profiles = parse_profiles(probe.profiles, require_image=cls._require_image)
    except ProfileError as e:  # reported above already when the start-up check saw it
        yield Result("profiles", FAIL, str(e), f"correct the profile field it names {where}")
        return
    currency = Currency.from_config(probe.currency, probe.currency_symbol)
    shown = ", ".join(
        f"{p.slug} ({p.gpu_count}× {p.gpu_model}, {currency.format_rate(p.rate_per_minute)}/min)"
        if p.gpu_count
        else f"{p.slug} (no GPU, {currency.format_rate(p.rate_per_minute)}/min)"
        for p in profiles
    )
    yield Result("profiles", PASS, f"{len(profiles)} profiles, prices exact per minute: {shown}")


def check_limits(setup: Setup) -> Iterator[Result]:
    """Each profile's cpu_limit and mem_limit within the host's, by the hub's own start-up warning."""
    probe = setup.need_probe()
    if _is_kube(probe):
        raise Unavailable("Kubernetes: a profile's limits are checked against the node it lands on")
    if callable(probe.profiles):
        raise Unavailable("profiles is a callable: its limits are known only at spawn time")
    try:
        warnings = resource_warnings(setup.hub.config, type(probe))
    except ProfileError as e:
        raise Unavailable(f"the profiles do not parse ({e})") from None
    for warning in warnings:
        yield Result("limits", WARN, warning, f"change the limit it names in {setup.hub_config}")
    if not warnings:
        yield Result("limits", PASS, "every profile's cpu_limit and mem_limit fits the host")


# -- roles and scopes ------------------------------------------------------------------------------------


def _expanded(scopes: Iterable[str]) -> set[str]:
    """Scopes with what they imply, as the hub expands them ("self" is kept as it is: it needs a user)."""
    scopes = set(scopes)
    return set(expand_scopes(scopes - {"self"})) | (scopes & {"self"})


def check_roles(setup: Setup) -> Iterator[Result]:
    """The roles, scopes and OAuth scopes the service and the users need, as the reference config sets them."""
    hub = setup.need_hub()
    roles = list(hub.load_roles or [])
    service_roles = [r for r in roles if SERVICE_NAME in (r.get("services") or [])]
    held = _expanded(s for r in service_roles for s in r.get("scopes") or [])
    names = ", ".join(repr(r.get("name")) for r in service_roles)
    missing = [s for s in SERVICE_SCOPES if s not in held]
    if not service_roles:
        yield Result(
            "roles",
            FAIL,
            "no role in c.JupyterHub.load_roles names the gpu service: it cannot read or stop servers",
            f"add {json.dumps({'name': 'gpu-service', 'services': [SERVICE_NAME], 'scopes': list(SERVICE_SCOPES)})}"
            f" as {REFERENCE} does",
        )
    elif missing:
        why = "; ".join(f"{s}: {SERVICE_SCOPES[s]}" for s in missing)
        yield Result(
            "roles",
            FAIL,
            f"the gpu service's role {names} lacks {', '.join(missing)} ({why})",
            f"add {', '.join(repr(s) for s in missing)} to the scopes of {names} in c.JupyterHub.load_roles",
        )
    else:
        yield Result("roles", PASS, f"the gpu service's role {names} has {', '.join(SERVICE_SCOPES)}")
    extra = sorted({s for r in service_roles for s in r.get("scopes") or []} - set(SERVICE_SCOPES))
    if extra:
        yield Result(
            "roles",
            WARN,
            f"the gpu service's role {names} also grants {', '.join(extra)}, which the service does not use: its"
            " token (in the service's environment) could do that too",
            f"keep only {', '.join(SERVICE_SCOPES)} (least privilege)",
        )

    user_role = next((r for r in roles if r.get("name") == "user"), None)
    user_scopes = _expanded((user_role or {}).get("scopes") or ["self"])
    if USER_ACCESS not in user_scopes and "access:services" not in user_scopes:
        yield Result(
            "roles",
            FAIL,
            "the 'user' role does not give access:services!service=gpu: students' browsers get 'You do not have"
            " permission to access JupyterHub service gpu'",
            f'add {{"name": "user", "scopes": ["self", "{USER_ACCESS}"]}} to c.JupyterHub.load_roles',
        )
    elif "self" not in (user_role or {}).get("scopes", []) and "servers" not in user_scopes:
        yield Result(
            "roles",
            FAIL,
            "the 'user' role override drops 'self': users cannot start their own servers",
            f'give the user role "scopes": ["self", "{USER_ACCESS}"]',
        )
    else:
        yield Result("roles", PASS, f"the 'user' role gives every user {USER_ACCESS}")

    defined = set(hub.custom_scopes or {})
    undefined = sorted(set(CUSTOM_SCOPES) - defined)
    if undefined:
        yield Result(
            "roles",
            FAIL,
            f"c.JupyterHub.custom_scopes does not define {', '.join(undefined)}",
            "c.JupyterHub.custom_scopes = CUSTOM_SCOPES (from jupyterhub_gpu.service.web.auth import CUSTOM_SCOPES)",
        )
    spec = setup.service_spec or {}
    allowed = {s.split("!", 1)[0] for s in spec.get("oauth_client_allowed_scopes") or []}
    holders = [r for r in roles if (r.get("users") or r.get("groups"))]
    for scope in sorted(set(CUSTOM_SCOPES) - allowed):
        who = [r.get("name") for r in holders if any(s.split("!", 1)[0] == scope for s in r.get("scopes") or [])]
        if not who:
            continue
        yield Result(
            "oauth",
            FAIL,
            f"{scope} is held (roles {', '.join(map(repr, who))}) but not in the gpu service's"
            " oauth_client_allowed_scopes: the pages answer 'This needs the scope' to those holding it",
            '"oauth_client_allowed_scopes": sorted(CUSTOM_SCOPES) in the gpu service\'s entry of c.JupyterHub.services',
        )
    if set(CUSTOM_SCOPES) <= allowed:
        yield Result("oauth", PASS, "the gpu service's OAuth client may be granted every custom:gpu-* scope")
    admins = [
        r.get("name") for r in holders if SCOPE_BUDGETS_WRITE in {s.split("!", 1)[0] for s in r.get("scopes") or []}
    ]
    if not admins:
        yield Result(
            "oauth",
            WARN,
            f"no role gives a user or group {SCOPE_BUDGETS_WRITE}: no one can set budgets on the pages or the CLI",
            f'a role like {{"name": "gpu-admins", "users": ["you"], "scopes": sorted(CUSTOM_SCOPES)}} ({REFERENCE})',
        )


def check_named_servers(setup: Setup) -> Iterator[Result]:
    """Named servers for notebook jobs, and room for them under the per-user limit."""
    hub = setup.need_hub()
    service = setup.need_service()
    jobs = service.jobs.max_concurrent
    if not hub.allow_named_servers:
        yield Result(
            "named-servers",
            FAIL,
            "c.JupyterHub.allow_named_servers is False: every notebook job (jupyterhub-gpu job run) fails",
            "c.JupyterHub.allow_named_servers = True (jobs run in named servers job-<id>, docs/jobs.md)",
        )
        return
    limit = hub.named_server_limit_per_user
    limit = limit(None) if callable(limit) else limit
    if limit and limit < jobs:
        yield Result(
            "named-servers",
            WARN,
            f"named_server_limit_per_user is {limit}, under Jobs.max_concurrent {jobs}: jobs are refused before that",
            f"c.JupyterHub.named_server_limit_per_user = {jobs + 2} (jobs count, docs/admin.md)",
        )
        return
    yield Result("named-servers", PASS, f"named servers on (limit {limit or 'none'}), up to {jobs} jobs a user")


# -- currency and time zone ----------------------------------------------------------------------------


def check_currency(setup: Setup) -> Iterator[Result]:
    """The service's currency and time zone agree with what the hub publishes (the service's own rule)."""
    probe = setup.need_probe()
    service = setup.need_service()
    cls = type(probe)
    values = {lab.CURRENCY: probe.currency, lab.SYMBOL: probe.currency_symbol, lab.TIMEZONE: probe.budget_timezone}
    sources = {name: lab.option_source(cls, setup.hub.config, name) for name in lab.NAMES}
    agreement = lab.agree(service.own_lab_settings(), lab.published_rows(values, sources))
    for conflict in agreement.conflicts:
        yield Result(
            "currency",
            FAIL,
            f"the gpu service would refuse to start: {conflict}",
            f"set the currency and time zone once, on the spawner (c.{cls.__name__}.currency, budget_timezone), and"
            " drop --currency/--timezone from the service's command (it takes the hub's)",
        )
    if agreement.conflicts:
        return
    currency = agreement.currency
    yield Result(
        "currency",
        PASS,
        f"one currency and time zone for the hub and the service: {currency.code} ({currency.symbol_in()}),"
        f" {agreement.settings[lab.TIMEZONE]}",
    )


# -- the ledger --------------------------------------------------------------------------------------------


def check_ledger(setup: Setup) -> Iterator[Result]:
    """One ledger for the spawner and the service, reachable, its migrations current; nothing written."""
    probe = setup.need_probe()
    service = setup.need_service()
    cls = type(probe).__name__
    spawner_url, service_url = probe.ledger_db_url, service.db_url
    if not spawner_url:
        yield Result(
            "ledger",
            FAIL,
            f"c.{cls}.ledger_db_url is not set: sessions are not recorded, nothing is billed",
            f"c.{cls}.ledger_db_url = the service's --db-url"
            f" ({make_url(service_url).render_as_string(hide_password=True)})",
        )
        return
    here = Path.cwd()
    if not databases.same_database(spawner_url, service_url, here):
        shown = (make_url(u).render_as_string(hide_password=True) for u in (spawner_url, service_url))
        yield Result(
            "ledger",
            FAIL,
            "the spawner writes sessions to {} but the gpu service reads {}: nothing would be billed".format(*shown),
            f"give the service --db-url={make_url(spawner_url).render_as_string(hide_password=True)} (the same URL as"
            f" c.{cls}.ledger_db_url)",
        )
        return
    url = make_url(spawner_url)
    shown = url.render_as_string(hide_password=True)
    path = databases.sqlite_path(spawner_url, here)
    if path is not None:
        if not path.exists():
            if not path.parent.is_dir():
                yield Result(
                    "ledger",
                    FAIL,
                    f"the ledger's folder {path.parent} does not exist: the hub cannot create {path.name}",
                    f"mkdir -p {path.parent} (owned by the user the hub runs as), or change the ledger URL",
                )
            else:
                yield Result("ledger", PASS, f"{shown}: not created yet; the hub creates and migrates it at start")
            return
    try:
        revision, has_tables = databases.database_revision(spawner_url, setup.timeout)
    except Exception as e:
        yield Result(
            "ledger",
            FAIL,
            f"cannot reach the ledger {shown}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            "check the URL, that the database server runs, and that it accepts this host and user",
        )
        return
    head = databases.migration_head()
    if revision == head:
        yield Result("ledger", PASS, f"{shown}: reachable, at migration {head} (the newest)")
        ledger = Ledger(spawner_url, migrate=False)  # reads only: the sessions' currencies
        try:
            warning = lab.other_currencies_warning(probe.currency, ledger.session_currencies(), f"c.{cls}.currency")
        finally:
            ledger.close()
        if warning:
            yield Result("ledger", WARN, warning, f"set c.{cls}.currency back, or check and set the budgets again")
    elif revision is None and not has_tables:
        yield Result("ledger", PASS, f"{shown}: reachable and empty; the hub migrates it to {head} at start")
    elif revision is None:
        yield Result(
            "ledger",
            FAIL,
            f"{shown} has tables but no migration record: it is not a jupyterhub-gpu ledger",
            "point ledger_db_url and the service's --db-url at a database of its own",
        )
    elif revision in databases.known_migrations():
        yield Result(
            "ledger",
            WARN,
            f"{shown}: at migration {revision}, this jupyterhub-gpu needs {head}",
            "back the database up, then start the hub: it migrates the ledger to the newest at start",
        )
    else:
        yield Result(
            "ledger",
            FAIL,
            f"{shown}: at migration {revision}, which this jupyterhub-gpu ({__version__}) does not know (a newer"
            " version wrote it)",
            "install the jupyterhub-gpu version that wrote it; the ledger cannot be migrated down",
        )


# -- alerts ------------------------------------------------------------------------------------------------


def check_alerts(setup: Setup) -> Iterator[Result]:
    """Every configured alert channel reachable (and, with --send-test, a test message through each)."""
    service = setup.need_service()
    try:
        settings = channels.alert_settings(service)
        configured = settings.apprise_channels()
    except ValueError as e:
        yield Result("alerts", FAIL, f"the gpu service refuses its alert settings: {e}", "correct the setting named")
        return
    if not configured:
        yield Result(
            "alerts",
            WARN,
            "no alert channel: budget and culling warnings reach students in JupyterLab only",
            "add Apprise URLs: c.Notify.admin_urls, group_urls, user_url_template (docs/alerts.md)",
        )
        return
    for channel in configured:
        target = channels.endpoint(channel)
        if target.kind == "unknown":
            yield Result(
                "alerts",
                WARN,
                f"{target.label}: where it connects is known only by sending",
                "run the doctor with --send-test",
            )
            continue
        try:
            answer = channels.reach(target, setup.timeout)
        except (OSError, smtplib.SMTPException) as e:
            yield Result(
                "alerts",
                FAIL,
                f"{target.label}: {target.host}:{target.port} unreachable: {type(e).__name__}: {e}",
                "check the host and port in its URL (or LegacyMail.smtp_host/smtp_port, webhook_url), and that this"
                " host may connect there",
            )
            continue
        if setup.send_test and "{username}" not in channel.url:
            try:
                answer += "; " + channels.send_test(settings, channel)
            except Exception as e:
                yield Result(
                    "alerts",
                    FAIL,
                    f"{target.label}: reachable, but the test message failed: {e}",
                    "check the channel's credentials and addresses",
                )
                continue
        yield Result("alerts", PASS, f"{target.label}: {target.host}:{target.port} {answer}")


CHECKS: tuple[Check, ...] = (
    check_config,
    check_hub_files,
    check_service,
    check_service_url,
    check_profiles,
    check_gpus,
    check_gpu_host,
    check_limits,
    check_kueue,
    check_docker,
    check_images,
    check_roles,
    check_named_servers,
    check_currency,
    check_ledger,
    check_hub_names,
    check_alerts,
    check_ports,
)


def check_name(check: Check) -> str:
    return check.__name__.removeprefix("check_").replace("_", "-")


def run_checks(setup: Setup, checks: Iterable[Check] = CHECKS) -> list[Result]:
    """Every check's lines; a check that needs what did not load is a skip, one that crashes a fail."""
    results: list[Result] = []
    for check in checks:
        name = check_name(check)
        try:
            for result in check(setup):
                results.append(result)
        except Unavailable as e:
            results.append(Result(name, SKIP, str(e)))
        except Exception as e:
            results.append(
                Result(
                    name,
                    FAIL,
                    f"the check itself failed: {type(e).__name__}: {e}",
                    "report this with the output of `jupyterhub-gpu doctor --json` (the other checks ran)",
                )
            )
    return results
