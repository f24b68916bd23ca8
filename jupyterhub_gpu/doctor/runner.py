"""``jupyterhub-gpu doctor``: load the setup, run every check, print the report, return the exit status."""

from __future__ import annotations

import argparse
import sys

from jupyterhub_gpu.doctor import report
from jupyterhub_gpu.doctor.checks import run_checks
from jupyterhub_gpu.doctor.loading import load_setup


def main(args: argparse.Namespace, out=None) -> int:
    out = out or sys.stdout
    setup = load_setup(args.hub_config, args.service_config, timeout=args.timeout, send_test=args.send_test)
    results = run_checks(setup)
    out.write(report.as_json(results) if args.json else report.text(results))
    return report.exit_status(results)
