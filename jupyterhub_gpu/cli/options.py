"""The ``jupyterhub-gpu`` command line: its arguments, their types (a bad value exits 2 before anything is
sent), the combinations argparse cannot check, and which subcommand runs which function."""

from __future__ import annotations

import argparse
import json
import os
import re
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub_gpu import __version__
from jupyterhub_gpu.cli.budgets import cmd_budget, cmd_usage
from jupyterhub_gpu.cli.jobs import cmd_job
from jupyterhub_gpu.cli.schedule import cmd_queue, cmd_reservations, cmd_shares
from jupyterhub_gpu.doctor.options import add_doctor_parser, add_hub_rename_parser
from jupyterhub_gpu.env import CLI_URL
from jupyterhub_gpu.i18n import LANGUAGES

DEFAULT_URL = "http://127.0.0.1:8000/services/gpu/"
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MOMENT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")

# -- argument types: refuse bad values before anything is sent ---------------------------------


def limit_type(value: str) -> str:
    try:
        amount = Decimal(value)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"must be a decimal number such as 5000 or 12.50, got {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {value!r}")
    return value


def date_type(value: str) -> str:
    try:
        if not _DATE_RE.fullmatch(value):
            raise ValueError
        date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a date like 2026-09-01, got {value!r}") from None
    return value


def moment_type(value: str) -> str:
    if not _MOMENT_RE.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"must be a date like 2026-11-01 or a date and time like 2026-11-01T08:00, got {value!r}"
        )
    return value


def timezone_type(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise argparse.ArgumentTypeError(
            f"must be an IANA time zone such as Asia/Shanghai, Europe/Berlin or UTC, got {value!r}"
        ) from None
    return value


def name_type(value: str) -> str:
    if not value or value != value.strip() or "/" in value or len(value) > 255:
        raise argparse.ArgumentTypeError(f"is not a JupyterHub user or group name: {value!r}")
    return value


def hub_type(value: str) -> str:
    """A hub's name as its gpu service names it (c.GPUService.hub_name); the service says whether the ledger has it."""
    if not value or value != value.strip() or "/" in value or len(value) > 255 or not value.isprintable():
        raise argparse.ArgumentTypeError(f"is not a hub name: {value!r}")
    return value


def notebook_type(value: str) -> str:
    if not value.endswith(".ipynb") or value.startswith(("/", "~")) or ".." in value.split("/"):
        raise argparse.ArgumentTypeError(f"must be a .ipynb path relative to your home folder, got {value!r}")
    return value


def param_type(value: str) -> tuple[str, object]:
    name, sep, raw = value.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"must be NAME=VALUE with a Python name, got {value!r}")
    try:
        return name, json.loads(raw)
    except ValueError:
        return name, raw  # a plain string


def minutes_type(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of minutes (1 or more), got {value!r}")
    return int(value)


def job_id_type(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{12}", value):
        raise argparse.ArgumentTypeError(f"is not a job id (12 hex digits): {value!r}")
    return value


def zoned_type(value: str) -> str:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an ISO 8601 date and time with a zone, such as 2026-12-08T14:00+08:00, got {value!r}"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"has no time zone: add one, such as 2026-12-08T14:00+08:00 or ...Z, got {value!r}"
        )
    return value


def count_type(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of GPUs (1 or more), got {value!r}")
    return int(value)


def share_type(value: str) -> int:
    if not (value.isascii() and value.isdigit()) or int(value) > 1_000_000:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to 1000000, got {value!r}")
    return int(value)


def reservation_id_type(value: str) -> str:
    if not (value.isascii() and value.isdigit()) or len(value) > 11:
        raise argparse.ArgumentTypeError(f"is not a reservation number: {value!r}")
    return value


def model_type(value: str) -> str:
    if not value or value != value.strip() or "/" in value or len(value) > 64:
        raise argparse.ArgumentTypeError(f"is not a GPU model name such as T4 or A100: {value!r}")
    return value


# -- the parser ---------------------------------------------------------------------------------


def _connection_options(parser: argparse.ArgumentParser, top: bool) -> None:
    # accepted before and after the subcommand; SUPPRESS keeps a later default from overriding
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--url",
        default=default,
        help=f"the gpu service's URL (default: ${CLI_URL} or {DEFAULT_URL})",
    )
    parser.add_argument("--token", default=default, help="a JupyterHub API token (default: $JUPYTERHUB_API_TOKEN)")
    parser.add_argument(
        "--tz",
        type=timezone_type,
        default=default,
        metavar="ZONE",
        help="show times in this IANA time zone, such as Europe/Berlin or UTC (default: the lab's, as on the pages)",
    )


def _subject(parser: argparse.ArgumentParser) -> None:
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", type=name_type, help="a JupyterHub user")
    who.add_argument("--group", type=name_type, help="a JupyterHub group")


def _queue_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """``queue`` and ``queue list`` take the same options (before or after ``list``)."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--user", type=name_type, default=default, help="one user's requests (admins, instructors)")
    parser.add_argument("--group", type=name_type, default=default, help="one group's requests (its instructors)")
    parser.add_argument("--lang", choices=LANGUAGES, default=default, help="the language of the status and reasons")
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="print the API's JSON"
    )
    _connection_options(parser, top=False)  # the top parser has them: a subcommand's default must not hide them


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyterhub-gpu",
        description="Budgets and GPU usage of a JupyterHub with jupyterhub-gpu, through the gpu service's API.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _connection_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    budget = commands.add_parser("budget", help="set, list, show and delete budgets (admins)")
    budget_commands = budget.add_subparsers(dest="action", required=True, metavar="ACTION")

    set_ = budget_commands.add_parser("set", help="create or replace the budget of a user or group")
    _subject(set_)
    set_.add_argument("--limit", required=True, type=limit_type, help="money (in the hub's currency) or GPU-hours")
    set_.add_argument("--period", required=True, choices=("week", "month", "term"))
    set_.add_argument("--unit", default="money", choices=("money", "gpu_hours"), help="default: money")
    set_.add_argument("--term-start", type=date_type, help="first day of the term (period term)")
    set_.add_argument("--term-end", type=date_type, help="last day of the term (period term)")
    _connection_options(set_, top=False)

    list_ = budget_commands.add_parser("list", help="every budget and its use in the current period")
    list_.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(list_, top=False)

    show = budget_commands.add_parser("show", help="one budget and its use in the current period")
    _subject(show)
    show.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(show, top=False)

    delete = budget_commands.add_parser("delete", help="delete the budget of a user or group")
    _subject(delete)
    _connection_options(delete, top=False)

    usage = commands.add_parser("usage", help="sessions and their cost (your own, or with --user/--group/--all)")
    usage.add_argument("--user", type=name_type, help="another user's sessions (admins)")
    usage.add_argument("--group", type=name_type, help="a group's sessions (admins)")
    usage.add_argument(
        "--paid", action="store_true", help="with --group: only the sessions the group paid for (its budget pool)"
    )
    usage.add_argument("--all", action="store_true", help="every user's sessions (admins)")
    usage.add_argument(
        "--hub",
        type=hub_type,
        help="only the sessions of this hub, on a ledger several hubs share (default: every hub)",
    )
    usage.add_argument(
        "--since",
        type=moment_type,
        help="minutes on or after this date (midnight in the lab's time zone) or date and time; a minute counts"
        " where it starts",
    )
    usage.add_argument("--until", type=moment_type, help="minutes up to this date (inclusive) or time")
    output = usage.add_mutually_exclusive_group()
    output.add_argument("--csv", action="store_true", help="print CSV (a header row, one row per session)")
    output.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(usage, top=False)

    job = commands.add_parser("job", help="run notebooks as GPU jobs; list, show and cancel them (docs/jobs.md)")
    job_commands = job.add_subparsers(dest="action", required=True, metavar="ACTION")
    run_ = job_commands.add_parser("run", help="run a notebook top to bottom in a server of its own")
    run_.add_argument("notebook", type=notebook_type, help="the notebook's path in your home folder")
    run_.add_argument("--profile", help="the profile (default: the first one you may use)")
    run_.add_argument(
        "--param", action="append", default=[], type=param_type, metavar="NAME=VALUE", help="a parameter (JSON value)"
    )
    run_.add_argument("--time-limit", type=minutes_type, metavar="MINUTES", help="stop the job after this long")
    _connection_options(run_, top=False)
    jlist = job_commands.add_parser("list", help="your jobs, newest first")
    jlist.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(jlist, top=False)
    for action, text in (("show", "one job"), ("cancel", "cancel a starting or running job")):
        one = job_commands.add_parser(action, help=text)
        one.add_argument("id", type=job_id_type)
        if action == "show":
            one.add_argument("--json", action="store_true", help="print the API's JSON")
        _connection_options(one, top=False)
    reservations = commands.add_parser(
        "reservations", help="class reservations: list, add, delete (admins; instructors for their groups)"
    )
    res_commands = reservations.add_subparsers(dest="action", required=True, metavar="ACTION")
    rlist = res_commands.add_parser("list", help="the reservations you may read, by start")
    rlist.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(rlist, top=False)
    radd = res_commands.add_parser("add", help="reserve GPUs of a model for a group, once or weekly")
    radd.add_argument("--group", required=True, type=name_type, help="the JupyterHub group (a class)")
    radd.add_argument("--model", required=True, type=model_type, help="the GPU model, such as T4")
    radd.add_argument("--count", required=True, type=count_type, help="how many GPUs")
    radd.add_argument("--start", required=True, type=zoned_type, help="ISO 8601 with a zone: 2026-12-08T14:00+08:00")
    radd.add_argument("--end", required=True, type=zoned_type, help="ISO 8601 with a zone, after --start")
    radd.add_argument("--weekly-until", type=date_type, help="repeat every week up to this day (in the lab's zone)")
    radd.add_argument("--note", default="", help="a note shown with the reservation")
    _connection_options(radd, top=False)
    rdel = res_commands.add_parser("delete", help="cancel a reservation")
    rdel.add_argument("id", type=reservation_id_type)
    _connection_options(rdel, top=False)

    shares = commands.add_parser("shares", help="groups' fair shares per GPU model: list, set, delete (admins)")
    share_commands = shares.add_subparsers(dest="action", required=True, metavar="ACTION")
    slist = share_commands.add_parser("list", help="the shares you may read")
    slist.add_argument("--json", action="store_true", help="print the API's JSON")
    _connection_options(slist, top=False)
    for action, text in (("set", "set a group's share of a GPU model"), ("delete", "back to the default share")):
        one = share_commands.add_parser(action, help=text)
        one.add_argument("--group", required=True, type=name_type, help="a JupyterHub group")
        one.add_argument("--model", required=True, type=model_type, help="the GPU model, such as T4")
        if action == "set":
            one.add_argument("--share", required=True, type=share_type, help="a whole-number weight (0: none)")
        _connection_options(one, top=False)
    queue = commands.add_parser(
        "queue", help="requests waiting for a GPU: your own (instructors: their groups'; admins: all); preemptions"
    )
    _queue_options(queue, top=True)
    queue_commands = queue.add_subparsers(dest="action", metavar="ACTION")  # none: list
    qlist = queue_commands.add_parser("list", help="the waiting requests you may see, by GPU model and position")
    _queue_options(qlist, top=False)
    qpre = queue_commands.add_parser("preemptions", help="preemption records of the last 30 days")
    qpre.add_argument("--user", type=name_type, default=argparse.SUPPRESS, help="another user's (admins)")
    qpre.add_argument("--lang", choices=LANGUAGES, default=argparse.SUPPRESS, help="the language of the reasons")
    qpre.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
    _connection_options(qpre, top=False)
    # subcommands that do not call the service go below, each with set_defaults(run=...) (see API_COMMANDS)
    add_doctor_parser(commands)
    add_hub_rename_parser(commands)
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot say: combinations of options. Exits with status 2."""
    if args.command == "budget" and args.action == "set":
        dates = (args.term_start, args.term_end)
        if args.period == "term":
            if None in dates:
                parser.error("--period term needs --term-start and --term-end")
            if args.term_start > args.term_end:
                parser.error(f"--term-start {args.term_start} is after --term-end {args.term_end}")
        elif dates != (None, None):
            parser.error("--term-start and --term-end are only for --period term")
    if args.command == "reservations" and args.action == "add":
        start, end = datetime.fromisoformat(args.start), datetime.fromisoformat(args.end)
        if end <= start:
            parser.error(f"--end {args.end} is not after --start {args.start}")
        if args.weekly_until and date.fromisoformat(args.weekly_until) < start.date():
            parser.error(f"--weekly-until {args.weekly_until} is before the first window on {start.date()}")
    if args.command == "usage" and args.all and (args.user or args.group):
        parser.error("--all lists every user's sessions; do not combine it with --user or --group")
    if args.command == "usage" and args.paid and not args.group:
        parser.error("--paid lists the sessions a group paid for: give --group too")
    if args.command == "hub-rename" and args.old == args.new:
        parser.error(f"OLD and NEW are both {args.old!r}: give the hub's new name")
    if args.command in API_COMMANDS and not (args.token or os.environ.get("JUPYTERHUB_API_TOKEN")):
        parser.error("no token: pass --token or set $JUPYTERHUB_API_TOKEN")


# the subcommands that talk to the gpu service; one that does not (such as ``doctor``) is not listed here and
# sets ``run=`` on its subparser (``parser.set_defaults(run=function)``): main calls ``run(args, out)`` -> status
API_COMMANDS = {
    "budget": cmd_budget,
    "usage": cmd_usage,
    "job": cmd_job,
    "reservations": cmd_reservations,
    "shares": cmd_shares,
    "queue": cmd_queue,
}
