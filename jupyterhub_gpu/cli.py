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

The service's URL comes from ``--url`` or ``$JUPYTERHUB_GPU_URL``, the token from
``--token`` or ``$JUPYTERHUB_API_TOKEN``. Arguments are checked before anything is
sent: bad ones exit with status 2; an error from the API prints its message and
exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import ssl
import sys
import urllib.error
import urllib.request
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from urllib.parse import quote, urlencode, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jupyterhub_gpu import __version__
from jupyterhub_gpu.doctor.options import add_doctor_parser
from jupyterhub_gpu.env import CLI_URL
from jupyterhub_gpu.money import Currency, MoneyError

DEFAULT_URL = "http://127.0.0.1:8000/services/gpu/"
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MOMENT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")


class APIError(Exception):
    """The service answered with an error, or could not be reached."""


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
    parser.add_argument(
        "--lang", choices=("en", "zh-CN"), default=default, help="the language of the status and reasons"
    )
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
    qpre.add_argument("--lang", choices=("en", "zh-CN"), default=argparse.SUPPRESS, help="the language of the reasons")
    qpre.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
    _connection_options(qpre, top=False)
    # subcommands that do not call the service go below, each with set_defaults(run=...) (see API_COMMANDS)
    add_doctor_parser(commands)
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
    if args.command in API_COMMANDS and not (args.token or os.environ.get("JUPYTERHUB_API_TOKEN")):
        parser.error("no token: pass --token or set $JUPYTERHUB_API_TOKEN")


# -- talking to the service ---------------------------------------------------------------------


class Client:
    def __init__(self, url: str, token: str, timeout: float = 30):
        self.url = url if url.endswith("/") else url + "/"
        self.token = token
        self.timeout = timeout

    def _open(self, method: str, url: str, data=None):
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        return urllib.request.urlopen(request, timeout=self.timeout)

    def request(self, method: str, path: str, body=None, params=None) -> tuple[int, bytes, str]:
        url = self.url + "api/v1/" + path
        if params:
            url += "?" + urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        try:
            with self._open(method, url, data) as response:
                return response.status, response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            raise self.refusal(e) from None
        except (urllib.error.URLError, OSError) as e:
            raise APIError(self.unreachable(getattr(e, "reason", e))) from None

    def json(self, method: str, path: str, body=None, params=None):
        _status, raw, kind = self.request(method, path, body, params)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:  # a login page, a web server's index: something else answers at this URL
            raise APIError(
                f"the answer from {self.url} is not the gpu service's JSON ({kind or 'no Content-Type'}):"
                f" {self.not_the_service()}"
            ) from None

    def refusal(self, error: urllib.error.HTTPError) -> APIError:
        """What an HTTP error of the service (or of whatever answers at the URL) means, and what to do."""
        code, raw = error.code, error.read()
        try:
            message = json.loads(raw).get("message")
            page = ""
        except (ValueError, AttributeError):
            message = None  # not the service's JSON: a proxy's or web server's page
            page = raw.decode("utf-8", "replace").strip()[:200]
        message = message.strip() if isinstance(message, str) else ""
        if code in (401, 403) and (not message or message.startswith(("Authentication required", "The token was"))):
            return APIError(
                f"the token was refused (HTTP {code}): JupyterHub does not know it (mistyped, expired or revoked);"
                f" make a new one on the hub's token page ({self.hub_url()}token) and pass it with --token or"
                " $JUPYTERHUB_API_TOKEN"
            )
        if code == 404 and not (message and self.is_the_service()):
            return APIError(f"{self.not_the_service()} (HTTP 404)")
        said = message or page or error.reason
        if code in (502, 503, 504):
            return APIError(
                f"the gpu service did not answer (HTTP {code}: {said}): it is not running, or still starting;"
                " the hub's log says why (the service's own output is in it)"
            )
        if code >= 500:
            return APIError(f"the gpu service failed (HTTP {code}): {said}; the hub's log has the service's output")
        return APIError(f"{said} (HTTP {code})")

    def unreachable(self, reason) -> str:
        """Why the service could not be reached: refused, unknown host, TLS, time-out."""
        where = f"the gpu service at {self.url}"
        if isinstance(reason, ssl.SSLCertVerificationError):
            return (
                f"cannot reach {where}: its TLS certificate is not trusted ({reason.verify_message}): give the"
                " certificate authority's bundle in $SSL_CERT_FILE"
            )
        if isinstance(reason, ssl.SSLError):
            return f"cannot reach {where}: TLS failed ({reason}): does it serve https:// on this port, or http://?"
        if isinstance(reason, TimeoutError):
            return f"{where} did not answer within {self.timeout:g} s"
        if isinstance(reason, ConnectionRefusedError):
            return f"cannot reach {where}: connection refused: is the hub running, and are this host and port its own?"
        if isinstance(reason, socket.gaierror):
            return f"cannot reach {where}: unknown host {urlsplit(self.url).hostname!r}"
        return f"cannot reach {where}: {reason}"

    def is_the_service(self) -> bool:
        """Whether the gpu service answers at the URL: its API description is public."""
        try:
            with self._open("GET", self.url + "api/v1/openapi.yaml") as response:
                return response.status == 200 and b"openapi" in response.read(4096)
        except (urllib.error.URLError, OSError):
            return False

    def hub_url(self) -> str:
        """The hub's own URL (``.../hub/``), from the service's."""
        parts = urlsplit(self.url)
        path = parts.path
        for marker in ("/services/", "/hub/"):
            if marker in path:
                path = path[: path.index(marker) + 1]
                break
        return f"{parts.scheme}://{parts.netloc}{path}hub/"

    def not_the_service(self) -> str:
        """What to use instead of a URL where the service does not answer."""
        expected = self.hub_url()[: -len("hub/")] + "services/gpu/"
        if expected == self.url:
            return (
                f"no gpu service answers at {self.url}: is it in c.JupyterHub.services (named gpu) and running?"
                " The hub's log says why not"
            )
        return f"this is not the gpu service: use {expected} (the hub's URL followed by services/gpu/)"


def _budget_path(args) -> str:
    scope, name = ("user", args.user) if args.user else ("group", args.group)
    return f"budgets/{scope}/{quote(name, safe='')}"


def _money(currency: str):
    try:
        return Currency.from_config(currency)
    except MoneyError:
        return Currency(currency, currency + " ")


def _amount(value: str, unit: str, currency) -> str:
    if unit == "gpu_hours":
        return f"{Decimal(value):.2f} GPU-hours"
    return currency.format(Decimal(value))


def _describe(budget: dict, currency) -> str:
    period = budget["period"]
    if period == "term":
        period = f"term {budget['term_start']} to {budget['term_end']}"
    whose = f"{budget['scope']} {budget['subject']}"
    return f"{whose}: {_amount(budget['limit'], budget['unit'], currency)} per {period}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _period_end(budget: dict, zone: ZoneInfo, short: bool = False) -> str:
    """When the period ends, in ``zone`` (named, except in the table whose header names it); a term budget
    outside its term binds nothing, and says so."""
    suffix = "" if short else f" {zone.key}"
    end = _moment(budget["period_end"], zone, "%Y-%m-%d %H:%M") + suffix
    start = _moment(budget["period_start"], zone, "%Y-%m-%d %H:%M") + suffix
    state = budget.get("state", "current")
    if state == "ended":
        return f"ended {end}" if short else f"the term ended {end}: it binds nothing"
    if state == "upcoming":
        return f"starts {start}" if short else f"the term starts {start}"
    return end if short else f"period ends {end}"


def _zone(args, data: dict) -> ZoneInfo:
    """The time zone times are shown in: ``--tz``, else the lab's (the service's answer says it), else UTC."""
    try:
        return ZoneInfo(args.tz or data.get("timezone") or "UTC")
    except (ZoneInfoNotFoundError, ValueError):  # a zone this machine's tz database lacks
        return ZoneInfo("UTC")


def _moment(iso: str, zone: ZoneInfo, pattern: str = "%Y-%m-%d %H:%M:%S") -> str:
    """An API time (ISO 8601, UTC) in ``zone``."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(zone).strftime(pattern)


def cmd_budget(client: Client, args, out) -> None:
    if args.action == "set":
        body = {"limit": args.limit, "unit": args.unit, "period": args.period}
        if args.period == "term":
            body.update(term_start=args.term_start, term_end=args.term_end)
        budget = client.json("PUT", _budget_path(args), body)
        currency = _money(budget.get("currency", ""))
        print(f"Budget set for {_describe(budget, currency)}", file=out)
        if budget.get("warning"):
            print(f"warning: {budget['warning']}", file=sys.stderr)
    elif args.action == "delete":
        client.request("DELETE", _budget_path(args))
        print(f"Deleted the budget of {'user ' + args.user if args.user else 'group ' + args.group}", file=out)
    elif args.action == "show":
        budget = client.json("GET", _budget_path(args))
        if args.json:
            print(json.dumps(budget, indent=2), file=out)
            return
        currency = _money(budget.get("currency", ""))
        print(_describe(budget, currency), file=out)
        print(
            f"spent {_amount(budget['spent'], budget['unit'], currency)},"
            f" remaining {_amount(budget['remaining'], budget['unit'], currency)}"
            f" ({budget['percent_used']}% used; {_period_end(budget, _zone(args, budget))})",
            file=out,
        )
    else:
        data = client.json("GET", "budgets")
        if args.json:
            print(json.dumps(data, indent=2), file=out)
            return
        if not data["budgets"]:
            print("No budgets.", file=out)
            return
        currency = _money(data["currency"])
        zone = _zone(args, data)
        rows = [["SCOPE", "NAME", "PERIOD", "LIMIT", "SPENT", "REMAINING", "USED", f"PERIOD ENDS ({zone.key})"]]
        for b in data["budgets"]:
            period = b["period"] if b["period"] != "term" else f"term {b['term_start']}..{b['term_end']}"
            rows.append(
                [
                    b["scope"],
                    b["subject"],
                    period,
                    _amount(b["limit"], b["unit"], currency),
                    _amount(b["spent"], b["unit"], currency),
                    _amount(b["remaining"], b["unit"], currency),
                    f"{b['percent_used']}%",
                    _period_end(b, zone, short=True),
                ]
            )
        print(_table(rows), file=out)


def cmd_usage(client: Client, args, out) -> None:
    params = {}
    for name in ("user", "group", "since", "until"):
        if getattr(args, name):
            params[name] = getattr(args, name)
    if args.all:
        params["all"] = "true"
    if args.paid:
        params["paid"] = "true"
    if args.csv:
        params["format"] = "csv"
        _status, raw, kind = client.request("GET", "usage", params=params)
        if kind.startswith("text/html"):  # a login page, say: never written out as if it were the report
            raise APIError(
                f"the answer from {client.url} is not the gpu service's CSV ({kind}): {client.not_the_service()}"
            )
        out.write(raw.decode("utf-8").replace("\r\n", "\n"))
        return
    data = client.json("GET", "usage", params=params)
    if args.json:
        print(json.dumps(data, indent=2), file=out)
        return
    zone = _zone(args, data)
    rows = [["USER", "SERVER", "PROFILE", "GPUS", f"STARTED ({zone.key})", f"STOPPED ({zone.key})", "MINUTES", "COST"]]
    for s in data["sessions"]:
        currency = _money(s["currency"])
        rows.append(
            [
                s["user"],
                s["server_name"] or "-",
                s["profile"],
                str(s["gpu_count"]),
                _moment(s["started"], zone),
                _moment(s["stopped"], zone) if s["stopped"] else "running",
                str(s["minutes_billed"]),
                currency.format(Decimal(s["cost"])),
            ]
        )
    if len(rows) > 1:
        print(_table(rows), file=out)
    totals = data["totals"]
    cost = ", ".join(_money(code).format(Decimal(amount)) for code, amount in totals["cost"].items())
    print(
        f"{totals['sessions']} session(s), {totals['minutes_billed']} minute(s) billed,"
        f" {totals['gpu_minutes']} GPU-minute(s), {cost}",
        file=out,
    )


def _job_line(job: dict) -> list[str]:
    duration = "" if job.get("duration_seconds") is None else f"{job['duration_seconds']} s"
    cost, output = job["cost_display"], job["output_notebook"]
    return [job["id"], job["notebook"], job["profile"], job["state"], duration, cost, output]


def cmd_job(client: Client, args, out) -> None:
    if args.action == "run":
        body = {"notebook": args.notebook}
        if args.profile:
            body["profile"] = args.profile
        if args.param:
            body["parameters"] = dict(args.param)
        if args.time_limit:
            body["time_limit_minutes"] = args.time_limit
        job = client.json("POST", "jobs", body)
        print(f"Job {job['id']} started on {job['profile']}: output in ~/{job['output_notebook']}", file=out)
        return
    if args.action == "list":
        data = client.json("GET", "jobs")
        if args.json:
            print(json.dumps(data, indent=2), file=out)
            return
        header = ["ID", "NOTEBOOK", "PROFILE", "STATE", "DURATION", "COST", "OUTPUT"]
        print(_table([header] + [_job_line(j) for j in data["jobs"]]), file=out)
        return
    path = f"jobs/{args.id}" + ("/cancel" if args.action == "cancel" else "")
    job = client.json("POST" if args.action == "cancel" else "GET", path)
    if getattr(args, "json", False):
        print(json.dumps(job, indent=2), file=out)
        return
    print(_table([["ID", "NOTEBOOK", "PROFILE", "STATE", "DURATION", "COST", "OUTPUT"], _job_line(job)]), file=out)
    if job.get("error"):
        print(f"error: {job['error']}", file=out)


def cmd_reservations(client: Client, args, out) -> None:
    if args.action == "add":
        body = {"group": args.group, "gpu_model": args.model, "count": args.count, "start": args.start, "end": args.end}
        if args.weekly_until:
            body["weekly_until"] = args.weekly_until
        if args.note:
            body["note"] = args.note
        r = client.json("POST", "reservations", body)
        print(f"Reserved {_reservation_line(r, _zone(args, r))} (reservation {r['id']})", file=out)
    elif args.action == "delete":
        client.request("DELETE", f"reservations/{args.id}")
        print(f"Cancelled reservation {args.id}", file=out)
    else:
        data = client.json("GET", "reservations")
        if args.json:
            print(json.dumps(data, indent=2), file=out)
            return
        if not data["reservations"]:
            print("No reservations.", file=out)
            return
        zone = _zone(args, data)
        rows = [["ID", "GROUP", "GPUS", f"WINDOW ({zone.key})", "REPEATS", "BY", "NOTE"]]
        for r in data["reservations"]:
            start, end = (
                datetime.fromisoformat(r["start"]).astimezone(zone),
                datetime.fromisoformat(r["end"]).astimezone(zone),
            )
            window = f"{start:%Y-%m-%d %a %H:%M}-{end:%H:%M}"
            repeats = f"weekly until {r['weekly_until']}" if r["weekly_until"] else "once"
            rows.append(
                [
                    str(r["id"]),
                    r["group"],
                    f"{r['count']}x {r['gpu_model']}",
                    window,
                    repeats,
                    r["created_by"],
                    r["note"],
                ]
            )
        print(_table(rows), file=out)


def _reservation_line(r: dict, zone: ZoneInfo) -> str:
    start, end = datetime.fromisoformat(r["start"]).astimezone(zone), datetime.fromisoformat(r["end"]).astimezone(zone)
    repeats = f", weekly until {r['weekly_until']}" if r.get("weekly_until") else ""
    return f"{r['count']}x {r['gpu_model']} for {r['group']}, {start:%Y-%m-%d %H:%M}-{end:%H:%M} {zone.key}{repeats}"


def cmd_shares(client: Client, args, out) -> None:
    if args.action == "set":
        s = client.json("PUT", "shares", {"group": args.group, "gpu_model": args.model, "share": args.share})
        print(f"Share of {s['gpu_model']} GPUs for group {s['group']}: {s['share']}", file=out)
    elif args.action == "delete":
        client.request("PUT", "shares", {"group": args.group, "gpu_model": args.model, "share": None})
        print(f"Group {args.group} has the default share of {args.model} GPUs again", file=out)
    else:
        data = client.json("GET", "shares")
        if args.json:
            print(json.dumps(data, indent=2), file=out)
            return
        if not data["shares"]:
            print("No shares set: every group has the default share.", file=out)
            return
        rows = [["GROUP", "MODEL", "SHARE", "SET BY"]]
        rows += [[s["group"], s["gpu_model"], str(s["share"]), s["updated_by"]] for s in data["shares"]]
        print(_table(rows), file=out)


def _wait(seconds) -> str:
    if seconds is None:
        return "unknown"
    minutes = max(1, round(seconds / 60))
    return f"~{minutes} min" if minutes < 60 else f"~{minutes // 60} h {minutes % 60:02d} min"


def cmd_queue(client: Client, args, out) -> None:
    params = {name: getattr(args, name) for name in ("user", "lang") if getattr(args, name, None)}
    if args.action == "preemptions":
        data = client.json("GET", "preemptions", params=params)
        if args.json:
            print(json.dumps(data, indent=2), file=out)
            return
        if not data["preemptions"]:
            print("No preemptions in the last 30 days.", file=out)
            return
        zone = _zone(args, data)
        rows = [["USER", "SERVER", f"STOP AT ({zone.key})", "STOPPED", "REASON"]]
        for p in data["preemptions"]:
            done = _moment(p["done_at"], zone, "%Y-%m-%d %H:%M") if p["done_at"] else "not yet"
            stop_at = _moment(p["stop_at"], zone, "%Y-%m-%d %H:%M")
            rows.append([p["user"], p["server_name"] or "-", stop_at, done, p["reason"]])
        print(_table(rows), file=out)
        return
    if getattr(args, "group", None):
        params["group"] = args.group
    data = client.json("GET", "queue", params=params)
    if args.json:
        print(json.dumps(data, indent=2), file=out)
        return
    if not data["queue"]:
        print("No requests waiting for a GPU.", file=out)
        return
    zone = _zone(args, data)
    rows = [["POSITION", "GPUS", "USER", "SERVER", "PROFILE", "TIER", "GROUP", "WAIT", f"SINCE ({zone.key})", "WHY"]]
    for e in data["queue"]:
        rows.append(
            [
                f"{e['position']} of {e['length']}",
                f"{e['count']}x {e['gpu_model']}",
                e.get("user", ""),
                e["server_name"] or "-",
                e["profile"],
                e["tier"],
                e["group"] or "-",
                _wait(e["wait_seconds"]),
                _moment(e["arrived"], zone, "%Y-%m-%d %H:%M"),
                e["reason"],
            ]
        )
    print(_table(rows), file=out)


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


if __name__ == "__main__":
    run()
