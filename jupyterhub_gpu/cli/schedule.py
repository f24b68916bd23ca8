"""``jupyterhub-gpu reservations``, ``shares`` and ``queue``: the schedule (docs/scheduling.md)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from jupyterhub_gpu.cli.client import Client
from jupyterhub_gpu.cli.show import listing, moment_in, table, zone_of


def cmd_reservations(client: Client, args, out) -> None:
    if args.action == "add":
        body = {"group": args.group, "gpu_model": args.model, "count": args.count, "start": args.start, "end": args.end}
        if args.weekly_until:
            body["weekly_until"] = args.weekly_until
        if args.note:
            body["note"] = args.note
        r = client.json("POST", "reservations", body)
        print(f"Reserved {_reservation_line(r, zone_of(args, r))} (reservation {r['id']})", file=out)
    elif args.action == "delete":
        client.request("DELETE", f"reservations/{args.id}")
        print(f"Cancelled reservation {args.id}", file=out)
    else:
        data = listing(client, "reservations", "reservations", args, out, "No reservations.")
        if data is None:
            return
        zone = zone_of(args, data)
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
        print(table(rows), file=out)


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
        data = listing(client, "shares", "shares", args, out, "No shares set: every group has the default share.")
        if data is None:
            return
        rows = [["GROUP", "MODEL", "SHARE", "SET BY"]]
        rows += [[s["group"], s["gpu_model"], str(s["share"]), s["updated_by"]] for s in data["shares"]]
        print(table(rows), file=out)


def _wait(seconds) -> str:
    if seconds is None:
        return "unknown"
    minutes = max(1, round(seconds / 60))
    return f"~{minutes} min" if minutes < 60 else f"~{minutes // 60} h {minutes % 60:02d} min"


def cmd_queue(client: Client, args, out) -> None:
    params = {name: getattr(args, name) for name in ("user", "lang") if getattr(args, name, None)}
    if args.action == "preemptions":
        data = listing(
            client, "preemptions", "preemptions", args, out, "No preemptions in the last 30 days.", params=params
        )
        if data is None:
            return
        zone = zone_of(args, data)
        rows = [["USER", "SERVER", f"STOP AT ({zone.key})", "STOPPED", "REASON"]]
        for p in data["preemptions"]:
            done = moment_in(p["done_at"], zone, "%Y-%m-%d %H:%M") if p["done_at"] else "not yet"
            stop_at = moment_in(p["stop_at"], zone, "%Y-%m-%d %H:%M")
            rows.append([p["user"], p["server_name"] or "-", stop_at, done, p["reason"]])
        print(table(rows), file=out)
        return
    if getattr(args, "group", None):
        params["group"] = args.group
    data = listing(client, "queue", "queue", args, out, "No requests waiting for a GPU.", params=params)
    if data is None:
        return
    zone = zone_of(args, data)
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
                moment_in(e["arrived"], zone, "%Y-%m-%d %H:%M"),
                e["reason"],
            ]
        )
    print(table(rows), file=out)
