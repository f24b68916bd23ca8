"""What a check returns: one line with a status, what was found and, when it is not a pass, the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
STATUSES = (PASS, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Result:
    """One line of the doctor's report."""

    check: str  # which check, e.g. "profiles"
    status: str  # one of STATUSES; a skip says why the check did not apply
    message: str  # what was found
    fix: str = ""  # what to change, for a warn or a fail

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def as_dict(self) -> dict:
        return asdict(self)


class Unavailable(Exception):
    """A check needs something that did not load (the hub's config, Docker...): it is skipped, saying why."""
