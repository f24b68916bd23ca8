"""The name of a hub on a shared ledger: what a valid one is, and the name of a hub that sets none.

Several hubs (a lab's Docker host, a department's cluster) may write one ledger; each session, job, stop order and
queue entry carries its hub's name, set by ``c.GPUService.hub_name`` and the spawner's ``hub_name`` (the same name
on both sides of one hub). A hub that sets none is :data:`DEFAULT_HUB`, which the rows written before hubs had
names got too, so that a single hub runs as it always did (docs/admin.md, two hubs on one ledger).
"""

from __future__ import annotations

import re

#: The name of a hub that sets none (every row of a ledger older than hub names has it).
DEFAULT_HUB = "default"

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?")


def check_hub_name(name, option: str = "hub_name") -> str:
    """``name`` if it is a valid hub name, else a ValueError that names ``option`` and what it accepts."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    raise ValueError(
        f"{option} must be 1 to 63 characters of lowercase letters, digits, '.', '-' and '_', starting and ending"
        f" with a letter or digit (such as 'lab-docker' or 'dept-k8s'), got {name!r}"
    )
