"""The arguments of the subcommands that read the hub's configuration or the ledger directly (``doctor``,
``hub-rename``): only argparse here, so ``jupyterhub-gpu budget`` stays fast.

Loading JupyterHub, the spawners and the service takes seconds; :func:`run` imports the doctor's
runner only when ``doctor`` is the command, :func:`run_hub_rename` the ledger only for ``hub-rename``.
"""

from __future__ import annotations

import argparse

from jupyterhub_gpu.ledger.hubnames import check_hub_name

DEFAULT_HUB_CONFIG = "jupyterhub_config.py"


def seconds_type(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 300:
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to 300, such as 10, got {value!r}")
    return seconds


def hub_name_type(value: str) -> str:
    try:
        return check_hub_name(value, "a hub name")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_doctor_parser(commands) -> argparse.ArgumentParser:
    """Add ``doctor`` to the CLI's subcommands."""
    doctor = commands.add_parser(
        "doctor",
        help="check a hub's configuration, the GPUs, Docker, roles, the ledger, mail and ports before students come",
        description=(
            "Load jupyterhub_config.py as `jupyterhub -f` does and the gpu service's settings as the service"
            " does, and check them: one line each with pass, warn or fail and the fix. Exit status 1 on any fail."
        ),
    )
    doctor.add_argument(
        "-f",
        "--config",
        dest="hub_config",
        default=DEFAULT_HUB_CONFIG,
        metavar="PATH",
        help=f"the hub's config file, as for `jupyterhub -f` (default: ./{DEFAULT_HUB_CONFIG})",
    )
    doctor.add_argument(
        "--service-config",
        metavar="PATH",
        help="the gpu service's config file (default: the --config= in the service's command, else the service's"
        " own default name)",
    )
    doctor.add_argument("--json", action="store_true", help="print the results as JSON (for scripts)")
    doctor.add_argument(
        "--send-test",
        action="store_true",
        help="also send a test message through each configured alert channel (the deprecated mail settings' to"
        " LegacyMail.admin_emails)",
    )
    doctor.add_argument(
        "--timeout", type=seconds_type, default=10.0, metavar="SECONDS", help="for each connection (default: 10)"
    )
    doctor.set_defaults(run=run)
    return doctor


def run(args: argparse.Namespace, out) -> int:
    """Run the doctor; its exit status."""
    # optional heavy dependency: the runner loads JupyterHub, the spawners and the service (seconds)
    from jupyterhub_gpu.doctor.runner import main

    return main(args, out)


def add_hub_rename_parser(commands) -> argparse.ArgumentParser:
    """Add ``hub-rename`` to the CLI's subcommands."""
    rename = commands.add_parser(
        "hub-rename",
        help="move a hub's bookings, shares, profile edits, sessions and jobs on the ledger to its new hub_name"
        " (with the hubs stopped)",
        description=(
            "Rename a hub on the ledger in one transaction: its class bookings, group shares, admins' profile"
            " edits, sessions, jobs and stop orders move to NEW; its published profiles, wait queue and spawn holds"
            " are dropped (the hub publishes them again at its start). Stop every hub and gpu service of OLD and"
            " NEW first; then set hub_name = NEW on both sides of the hub and start it. Rows written before hubs"
            " had names are the hub 'default'."
        ),
    )
    rename.add_argument("old", type=hub_name_type, metavar="OLD", help="the hub's name on the ledger now")
    rename.add_argument("new", type=hub_name_type, metavar="NEW", help="its new name (one the ledger has no rows of)")
    rename.add_argument(
        "--db-url",
        required=True,
        metavar="URL",
        help="the ledger's SQLAlchemy URL, as the spawner's ledger_db_url and c.GPUService.db_url give it",
    )
    rename.add_argument("--dry-run", action="store_true", help="print what would move and change nothing")
    rename.add_argument(
        "--merge",
        action="store_true",
        help="NEW may have rows already: the same hub, started under its new name before the rename (refused where"
        " a group share or profile edit is under both names)",
    )
    rename.set_defaults(run=run_hub_rename)
    return rename


def run_hub_rename(args: argparse.Namespace, out) -> int:
    """Rename the hub; the exit status."""
    # optional heavy dependency: SQLAlchemy, Alembic and the ledger's tables
    from jupyterhub_gpu.doctor.renaming import main

    return main(args, out)
