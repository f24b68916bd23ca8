"""A stop that reaches a spawn as a cancellation is never lost on the way.

JupyterHub stops a server whose spawn is pending by cancelling the spawn (its REST API's DELETE), then
stops what runs. Python 3.11's ``asyncio.wait_for`` swallows a cancellation that arrives in the moment what it
waits for is done (the GPU queue's turn, granted as the stop came): the spawn would go on to launch the server
the student has just stopped, and JupyterHub's stop would fail on a spawn still pending. The spawner asks
:func:`cancelled` after such a step and gives up as a cancelled spawn does.
"""

from __future__ import annotations

import asyncio


def cancelled() -> bool:
    """Whether the running task has been asked to cancel (a cancellation delivered and swallowed included)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_cancelled() -> None:
    """CancelledError when the running task was cancelled on the way (see the module's reason)."""
    if cancelled():
        raise asyncio.CancelledError()
