"""``jupyterhub-gpu job``: run a notebook as a job; list, show and cancel jobs."""

from __future__ import annotations

import json

from jupyterhub_gpu.cli.client import Client
from jupyterhub_gpu.cli.show import table


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
        print(table([header] + [_job_line(j) for j in data["jobs"]]), file=out)
        return
    path = f"jobs/{args.id}" + ("/cancel" if args.action == "cancel" else "")
    job = client.json("POST" if args.action == "cancel" else "GET", path)
    if getattr(args, "json", False):
        print(json.dumps(job, indent=2), file=out)
        return
    print(table([["ID", "NOTEBOOK", "PROFILE", "STATE", "DURATION", "COST", "OUTPUT"], _job_line(job)]), file=out)
    if job.get("error"):
        print(f"error: {job['error']}", file=out)
