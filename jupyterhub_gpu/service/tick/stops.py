"""The one way a pass of the tick stops a server: its stop's reason claimed in the ledger, then the hub asked."""

from __future__ import annotations

import logging

from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.service.tick.context import TickContext

log = logging.getLogger("jupyterhub_gpu.service")


async def stop_session(ctx: TickContext, session: SessionRecord, reason: str) -> str | None:
    """Ask the hub to stop the server of ``session``, for ``reason``: the reason its stop keeps, or None
    (nothing asked) once it has closed.

    The reason goes through the one precedence rule (:meth:`Ledger.claim_stop_reason`): where a stop is
    already under way for a reason that stays (a budget stop when a preemption comes due, the student's own
    stop), the hub is asked all the same (a stop it has under way is not started twice) and the caller gets
    that reason, to act on what really stops the server. A pass judges the sessions it read before its awaits
    (notices, other stops: seconds, on a slow channel more). Meanwhile the user may have stopped that session
    and started a new one on the same server name: the hub's stop names a server, not a session, so without
    this check the new server would be stopped for the old session's idleness or order. The spawner records a
    stop before the server can start again.
    """
    kept = await ctx.write(Ledger.claim_stop_reason, session.id, reason)
    if kept is None:
        log.info(
            "%s/%s: its session %s closed before the %s stop", session.user, session.server_name, session.id, reason
        )
        return None
    if kept != reason:
        log.info(
            "%s/%s: stopping already for %s, which stays (not %s)", session.user, session.server_name, kept, reason
        )
    await ctx.hub.stop_server(session.user, session.server_name)
    return kept
