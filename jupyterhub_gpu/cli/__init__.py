"""``jupyterhub-gpu``: budgets and usage reports from the command line, through the gpu service's REST API.

    jupyterhub-gpu budget set --group cs231n --limit 5000 --period month
    jupyterhub-gpu budget set --user alice --limit 40 --unit gpu_hours --period term \\
        --term-start 2026-09-01 --term-end 2027-01-15
    jupyterhub-gpu budget list
    jupyterhub-gpu budget delete --group cs231n
    jupyterhub-gpu usage --group cs231n --since 2026-11-01 --csv > november.csv
    jupyterhub-gpu job run work/train.ipynb --profile t4 --param epochs=5 --time-limit 120
    jupyterhub-gpu job list
    jupyterhub-gpu job show a1b2c3d4e5f6
    jupyterhub-gpu job cancel a1b2c3d4e5f6
    jupyterhub-gpu reservations add --group cs231n --model T4 --count 4 \\
        --start 2026-12-08T14:00+08:00 --end 2026-12-08T16:00+08:00 --weekly-until 2027-01-15
    jupyterhub-gpu reservations list
    jupyterhub-gpu reservations delete 7
    jupyterhub-gpu shares set --group cs231n --model T4 --share 3
    jupyterhub-gpu queue                    # your requests waiting for a GPU (instructors: their groups'; admins: all)
    jupyterhub-gpu queue preemptions
    jupyterhub-gpu doctor -f /etc/jupyterhub/jupyterhub_config.py   # before opening the hub (docs/admin.md)
    jupyterhub-gpu hub-rename default lab --db-url postgresql+psycopg://gpu@db/jupyterhub_gpu   # hubs stopped

``doctor`` and ``hub-rename`` read the hub's configuration or the ledger themselves; the others call the service.
The service's URL comes from ``--url`` or ``$JUPYTERHUB_GPU_URL``, the token from
``--token`` or ``$JUPYTERHUB_API_TOKEN``. Arguments are checked before anything is
sent: bad ones exit with status 2; an error from the API prints its message and
exits with status 1.

The parts: the arguments and which subcommand runs what (:mod:`.options`), the client of the REST API
(:mod:`.client`), the subcommands by concern (:mod:`.budgets`, :mod:`.jobs`, :mod:`.schedule`) and how
answers are shown (:mod:`.show`). The console script ``jupyterhub-gpu`` runs :func:`run`.
"""

from __future__ import annotations

import os
import sys

from jupyterhub_gpu.cli.client import APIError, Client
from jupyterhub_gpu.cli.options import API_COMMANDS, DEFAULT_URL, check_args, make_parser
from jupyterhub_gpu.env import CLI_URL

__all__ = ["APIError", "Client", "check_args", "main", "make_parser", "run"]


def main(argv: list[str] | None = None, out=None) -> int:
    out = out or sys.stdout
    parser = make_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    if args.command not in API_COMMANDS:
        return args.run(args, out)
    client = Client(
        args.url or os.environ.get(CLI_URL) or DEFAULT_URL,
        args.token or os.environ["JUPYTERHUB_API_TOKEN"],
    )
    try:
        API_COMMANDS[args.command](client, args, out)
    except APIError as e:
        print(f"jupyterhub-gpu: error: {e}", file=sys.stderr)
        return 1
    return 0


def run() -> None:
    sys.exit(main())
