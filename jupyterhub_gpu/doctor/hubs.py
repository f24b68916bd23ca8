"""The doctor's check of the hub names on a shared ledger (docs/admin.md, two hubs on one ledger).

The spawner's ``hub_name`` and the service's ``c.GPUService.hub_name`` must be the same (the service meters,
culls and stops only the sessions recorded under its own name); and on a ledger several hubs share, each hub
must have its own name. The ledger records every hub process and gpu service that opened it, with its hub's
identity (from the hub's cookie secret: a hub API URL such as ``http://hub:8081/hub/api`` is the same for many
hubs), its hub API URL and a heartbeat (:mod:`jupyterhub_gpu.ledger.hubs`): two identities running at once under
one name are two hubs configured with the same name. The doctor reads this hub's identity from the cookie secret
its configuration gives (where it can read it) to say which of the ledger's hubs it is. Nothing is written.
"""

from __future__ import annotations

import binascii
import os
import re
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.doctor import databases
from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, WARN, Result
from jupyterhub_gpu.ledger.hubnames import DEFAULT_HUB
from jupyterhub_gpu.ledger.hubs import ALIVE, hub_identity, hub_name_problems
from jupyterhub_gpu.ledger.renaming import kept_rows
from jupyterhub_gpu.ledger.store import Ledger

_HEX = re.compile(r"(?:[0-9a-fA-F]{2})+")


def configured_identity(hub) -> str | None:
    """This hub's identity from the cookie secret its configuration gives, read as JupyterHub reads it (the config,
    then ``JPY_COOKIE_SECRET``, then ``cookie_secret_file``); None where it cannot be read here (no file yet, or
    one the doctor's user may not read)."""
    try:
        secret = hub.cookie_secret or binascii.a2b_hex(os.environ.get("JPY_COOKIE_SECRET", ""))
        if not secret and hub.cookie_secret_file:
            text = Path(os.path.expanduser(hub.cookie_secret_file)).read_text().strip()
            secret = binascii.a2b_hex(text) if _HEX.fullmatch(text) else binascii.a2b_base64(text)
    except (OSError, ValueError, binascii.Error):
        return None
    return hub_identity(secret)


def check_hub_names(setup: Setup) -> Iterator[Result]:
    """The hub's name the same on the spawner and the service, and no two hubs under one name on the ledger."""
    probe = setup.need_probe()
    service = setup.need_service()
    cls = type(probe).__name__
    spawner_name, service_name = probe.hub_name, service.hub_name
    if spawner_name != service_name:
        yield Result(
            "hub-names",
            FAIL,
            f"the spawner records sessions as hub {spawner_name!r} (c.{cls}.hub_name) but the gpu service meters"
            f" hub {service_name!r} (c.GPUService.hub_name): it would meter, cull and stop none of this hub's"
            " sessions",
            f"set c.{cls}.hub_name and c.GPUService.hub_name to the same name",
        )
        return
    url = probe.ledger_db_url
    path = databases.sqlite_path(url, Path.cwd()) if url else None
    if not url or (path is not None and not path.exists()):
        return  # no ledger (yet): the ledger check says so; a sqlite file is not created by reading it
    try:
        revision, _ = databases.database_revision(url, setup.timeout)
    except Exception:
        return  # unreachable: the ledger check says so
    if revision != databases.migration_head():
        yield Result(
            "hub-names", PASS, f"this hub is {spawner_name!r} (the ledger's hubs are read once it is migrated)"
        )
        return
    ledger = Ledger(url, migrate=False, hub=spawner_name)  # reads only
    try:
        members = ledger.hub_members()
        names = ledger.hub_names()
        kept = kept_rows(ledger)
    finally:
        ledger.close()
    now = utcnow()
    shown = make_url(url).render_as_string(hide_password=True)
    problems = hub_name_problems(members, now)
    for problem in problems:
        yield Result(
            "hub-names",
            FAIL,
            problem,
            f"give each hub on the ledger its own hub_name: set c.{cls}.hub_name and c.GPUService.hub_name to a name"
            " of its own in each hub's configuration (the same on both sides of one hub), and restart that hub",
        )
    alive_names = {m.hub for m in members if now - m.heartbeat <= ALIVE}
    yield from _left_behind(kept, alive_names, spawner_name, shown)
    if problems:
        return
    # this hub's own row, found by the identity of its cookie secret (a secret not read here finds none)
    mine = configured_identity(setup.hub)
    running = [m for m in members if m.role == "hub" and mine and m.identity == mine and now - m.heartbeat <= ALIVE]
    for m in running:
        if m.hub != spawner_name:
            yield Result(
                "hub-names",
                WARN,
                f"this hub (identity {mine[:8]}: {m.where()}) runs on the ledger as {m.hub!r}, but its configuration"
                f" now names it {spawner_name!r}: it records its sessions as {m.hub!r} until it restarts",
                "restart the hub (its gpu service restarts with it) for the new name to apply"
                + (
                    f"; to keep its bookings, shares and profile edits, stop it, run `jupyterhub-gpu hub-rename {m.hub}"
                    f" {spawner_name} --db-url {shown}`, then start it"
                    if m.hub in kept
                    else ""
                ),
            )
            return
    named = f"{spawner_name!r}" + (f" (identity {mine[:8]})" if running else "")
    others = [n for n in names if n != spawner_name]
    if not others:
        alone = "" if spawner_name != DEFAULT_HUB else " (the default name)"
        yield Result("hub-names", PASS, f"this hub is {named}{alone}, the only hub on the ledger {shown}")
        return
    alive = sorted({m.hub for m in members if now - m.heartbeat <= ALIVE})
    yield Result(
        "hub-names",
        PASS,
        f"this hub is {named}; the ledger {shown} is shared with {', '.join(map(repr, others))}"
        f" (running now: {', '.join(map(repr, alive)) or 'none'}), each under its own name",
    )


_KEPT = {
    "gpu_reservations": ("class booking", "class bookings"),
    "gpu_group_shares": ("group share", "group shares"),
    "gpu_profile_overrides": ("profile edit", "profile edits"),
}


def _left_behind(kept: dict[str, dict[str, int]], alive: set[str], this_hub: str, shown: str) -> Iterator[Result]:
    """A WARN for each hub name with bookings, shares or profile edits that no hub runs under and that is not this
    hub's: a hub given a new name (or 'default', where the rows made before hubs had names are) left them."""
    for name in sorted(set(kept) - alive - {this_hub}):
        what = ", ".join(
            f"{n} {_KEPT[table][n != 1]}"
            for table, n in sorted(kept[name].items(), key=lambda kv: list(_KEPT).index(kv[0]))
        )
        yield Result(
            "hub-names",
            WARN,
            f"the ledger has {what} of the hub {name!r}, which no hub runs under now (this hub is {this_hub!r}): no"
            " hub keeps those bookings' GPUs free, applies those shares, or those edits' prices and access"
            " restrictions (a profile restricted to some groups is open again on the hub that left them)",
            f"if they are this hub's (it was renamed): stop its hub and gpu service, run `jupyterhub-gpu hub-rename"
            f" {name} {this_hub} --db-url {shown}` (with --merge where this hub has run under {this_hub!r} since), and"
            " start them (docs/admin.md, renaming a hub); if they are a"
            " stopped hub's, nothing to do until it runs again",
        )
