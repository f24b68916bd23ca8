"""``jupyterhub-gpu hub-rename OLD NEW --db-url URL``: a hub's rows on the ledger follow it to its new name.

The ledger does it (:func:`jupyterhub_gpu.ledger.renaming.rename_hub`, one transaction, refused while a hub runs
under either name); this prints what moved, or with ``--dry-run`` what would. The ledger must exist and be at
this version's migration: nothing is created or migrated here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from jupyterhub_gpu.clock import utcnow
from jupyterhub_gpu.doctor import databases
from jupyterhub_gpu.ledger.renaming import MOVED, RenameRefused, rename_hub
from jupyterhub_gpu.ledger.store import Ledger

_WHY_DROPPED = {
    "gpu_pricing": "the hub publishes its profiles again at its start",
    "gpu_queue": "the hub publishes its queue again at its start",
    "gpu_spawn_holds": "no spawn of a stopped hub is in flight",
}


def main(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    try:
        shown = make_url(args.db_url).render_as_string(hide_password=True)
    except ArgumentError:
        return _error(f"--db-url {args.db_url!r} is not a database URL (such as sqlite:///jupyterhub_gpu.sqlite)")
    path = databases.sqlite_path(args.db_url, Path.cwd())
    if path is not None and not path.exists():
        return _error(f"there is no ledger at {shown}: {path} does not exist")
    try:
        revision, _ = databases.database_revision(args.db_url, timeout=10)
        head = databases.migration_head()
        if revision != head:
            return _error(
                f"the ledger {shown} is at migration {revision or 'none'}, this jupyterhub-gpu's is {head}: rename"
                " with the jupyterhub-gpu version that migrated it (a hub of this version migrates it at its start)"
            )
        ledger = Ledger(args.db_url, migrate=False)
        try:
            counts = rename_hub(ledger, args.old, args.new, utcnow(), dry_run=args.dry_run, merge=args.merge)
        finally:
            ledger.close()
    except RenameRefused as e:
        return _error(f"{e}; nothing changed")
    except SQLAlchemyError as e:
        return _error(f"could not read the ledger {shown}: {e}")
    moved = {t.__tablename__ for t in MOVED}
    width = max(map(len, counts))
    if args.dry_run:
        out.write(f"would rename the hub {args.old!r} to {args.new!r} on the ledger {shown} (--dry-run: nothing"
                  " changed):\n")  # fmt: skip
    else:
        out.write(f"renamed the hub {args.old!r} to {args.new!r} on the ledger {shown}:\n")
    for table, n in counts.items():
        verb = "move" if table in moved else "delete"
        verb = verb if args.dry_run else ("moved" if table in moved else "deleted")
        why = f"  ({_WHY_DROPPED[table]})" if table in _WHY_DROPPED and n else ""
        out.write(f"  {verb:<7} {table:<{width}} {n:>6}{why}\n")
    if not args.dry_run:
        out.write(
            f"now set hub_name = {args.new!r} on both sides of the hub (the spawner's hub_name and"
            " c.GPUService.hub_name) and start it\n"
        )
    return 0


def _error(message: str) -> int:
    print(f"jupyterhub-gpu: error: {message}", file=sys.stderr)
    return 1
