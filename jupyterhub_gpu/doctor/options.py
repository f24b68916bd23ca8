"""The ``doctor`` subcommand's arguments: only argparse here, so ``jupyterhub-gpu budget`` stays fast.

Loading JupyterHub, the spawners and the service takes seconds; :func:`run` imports the doctor's
runner only when ``doctor`` is the command.
"""

from __future__ import annotations

import argparse

DEFAULT_HUB_CONFIG = "jupyterhub_config.py"


def seconds_type(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 300:
        raise argparse.ArgumentTypeError(f"must be a number of seconds from 0 to 300, such as 10, got {value!r}")
    return seconds


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
