"""``jupyterhub-gpu budget`` (set, list, delete) and ``jupyterhub-gpu usage`` (reports, CSV)."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from urllib.parse import quote

from jupyterhub_gpu.cli.client import APIError, Client
from jupyterhub_gpu.cli.show import (
    amount_text,
    describe_budget,
    listing,
    moment_in,
    money_of,
    period_end_text,
    table,
    zone_of,
)


def _budget_path(args) -> str:
    scope, name = ("user", args.user) if args.user else ("group", args.group)
    return f"budgets/{scope}/{quote(name, safe='')}"


def cmd_budget(client: Client, args, out) -> None:
    if args.action == "set":
        body = {"limit": args.limit, "unit": args.unit, "period": args.period}
        if args.period == "term":
            body.update(term_start=args.term_start, term_end=args.term_end)
        budget = client.json("PUT", _budget_path(args), body)
        currency = money_of(budget.get("currency", ""))
        print(f"Budget set for {describe_budget(budget, currency)}", file=out)
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
        currency = money_of(budget.get("currency", ""))
        print(describe_budget(budget, currency), file=out)
        print(
            f"spent {amount_text(budget['spent'], budget['unit'], currency)},"
            f" remaining {amount_text(budget['remaining'], budget['unit'], currency)}"
            f" ({budget['percent_used']}% used; {period_end_text(budget, zone_of(args, budget))})",
            file=out,
        )
    else:
        data = listing(client, "budgets", "budgets", args, out, "No budgets.")
        if data is None:
            return
        currency = money_of(data["currency"])
        zone = zone_of(args, data)
        rows = [["SCOPE", "NAME", "PERIOD", "LIMIT", "SPENT", "REMAINING", "USED", f"PERIOD ENDS ({zone.key})"]]
        for b in data["budgets"]:
            period = b["period"] if b["period"] != "term" else f"term {b['term_start']}..{b['term_end']}"
            rows.append(
                [
                    b["scope"],
                    b["subject"],
                    period,
                    amount_text(b["limit"], b["unit"], currency),
                    amount_text(b["spent"], b["unit"], currency),
                    amount_text(b["remaining"], b["unit"], currency),
                    f"{b['percent_used']}%",
                    period_end_text(b, zone, short=True),
                ]
            )
        print(table(rows), file=out)


def cmd_usage(client: Client, args, out) -> None:
    params = {}
    for name in ("user", "group", "hub", "since", "until"):
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
    zone = zone_of(args, data)
    # the hub of each session where the sessions listed ran on several hubs of one ledger
    hubs = len({s.get("hub") for s in data["sessions"]}) > 1
    rows = [["USER", "SERVER", "PROFILE", "GPUS", f"STARTED ({zone.key})", f"STOPPED ({zone.key})", "MINUTES", "COST"]]
    if hubs:
        rows[0].insert(0, "HUB")
    for s in data["sessions"]:
        currency = money_of(s["currency"])
        rows.append(
            [
                *([s["hub"]] if hubs else []),
                s["user"],
                s["server_name"] or "-",
                s["profile"],
                str(s["gpu_count"]),
                moment_in(s["started"], zone),
                moment_in(s["stopped"], zone) if s["stopped"] else "running",
                str(s["minutes_billed"]),
                currency.format(Decimal(s["cost"])),
            ]
        )
    if len(rows) > 1:
        print(table(rows), file=out)
    totals = data["totals"]
    cost = ", ".join(money_of(code).format(Decimal(amount)) for code, amount in totals["cost"].items())
    print(
        f"{totals['sessions']} session(s), {totals['minutes_billed']} minute(s) billed,"
        f" {totals['gpu_minutes']} GPU-minute(s), {cost}",
        file=out,
    )
