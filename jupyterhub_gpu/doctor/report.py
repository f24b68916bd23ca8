"""The doctor's output: one line per result (or JSON), a summary line, and the exit status."""

from __future__ import annotations

import json
from collections import Counter

from jupyterhub_gpu.doctor.results import FAIL, STATUSES, Result

WIDTH = max(len(s) for s in STATUSES)


def line(result: Result) -> str:
    """``fail  images      image x is not on this Docker host — fix: build it ...``"""
    text = f"{result.status.upper():<{WIDTH}}  {result.check:<14} {result.message}"
    if result.fix and result.status != "pass":
        text += f" — fix: {result.fix}"
    return text


def summary(results: list[Result]) -> str:
    counts = Counter(r.status for r in results)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) or "no checks ran"


def text(results: list[Result]) -> str:
    return "\n".join([*(line(r) for r in results), summary(results)]) + "\n"


def as_json(results: list[Result]) -> str:
    return (
        json.dumps(
            {
                "ok": exit_status(results) == 0,
                "summary": dict(Counter(r.status for r in results)),
                "results": [r.as_dict() for r in results],
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )


def exit_status(results: list[Result]) -> int:
    """1 when any check failed; warnings alone leave 0."""
    return 1 if any(r.status == FAIL for r in results) else 0
