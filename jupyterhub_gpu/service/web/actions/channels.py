"""Alert channels (docs/alerts.md): who may read, write and test whose channels, and the changes, for the REST
API's ``channels`` and the usage pages' channel form alike.

- a user reads, adds, changes, removes and tests only their own channels; the schemes they may add are
  ``c.Notify.user_schemes``;
- a group's channels and the admins' are read with ``custom:gpu-usage:read`` (a group's also by its
  instructors, ``custom:gpu-usage:read!group=NAME``) and written and tested with ``custom:gpu-budgets:write``;
- another user's channels are read with ``custom:gpu-usage:read`` and removed (not changed, not tested)
  with ``custom:gpu-budgets:write``.

A channel nobody may read is "not found", so that ids reveal nothing; no answer holds a URL (:func:`channel_json`).
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from datetime import datetime

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.queries.channels import (
    StoredChannel,
    add_channel,
    channels_of,
    delete_channel,
    get_channel,
    set_channel_events,
)
from jupyterhub_gpu.service.channels import (
    ChannelError,
    check_user_params,
    check_user_url,
    describe,
    forget_channel,
    is_address,
    lab_mail_channel,
    stored_channel,
)
from jupyterhub_gpu.service.domain.notices import EVENTS, ChannelConfig, parse_events, test_message
from jupyterhub_gpu.service.notify import DeliveryError
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, Caller
from jupyterhub_gpu.service.web.context import WebContext
from jupyterhub_gpu.service.web.params import BadRequest, validate_subject

log = logging.getLogger("jupyterhub_gpu.service")

#: Channels one user may keep for themselves.
MAX_OWN_CHANNELS = 10
#: Seconds between two test messages from one caller, and how many one caller may send in an hour (a test
#: button is not a way to flood a chat, whatever channels the caller adds and removes in between).
TEST_INTERVAL = 10.0
TESTS_PER_HOUR = 6
#: Channels one user may add for themselves in an hour (adds and removes are not a way round the test limit).
ADDS_PER_HOUR = 30
#: (what, caller) -> the monotonic times of their recent tests or adds, the last hour's only.
_recent: dict[tuple[str, str], deque] = {}


def rate_limited(what: str, caller: str, per_hour: int, interval: float = 0.0) -> str | None:
    """Count one ``what`` by ``caller`` now, or say why not (too soon after the last, or ``per_hour`` reached)."""
    now = time.monotonic()
    if len(_recent) > 10_000:  # forget callers idle for an hour: the table stays small
        for key in [k for k, q in _recent.items() if not q or now - q[-1] > 3600]:
            del _recent[key]
    times = _recent.setdefault((what, caller), deque())
    while times and now - times[0] > 3600:
        times.popleft()
    if times and now - times[-1] < interval:
        return f"less than {interval:g} s ago"
    if len(times) >= per_hour:
        return f"{per_hour} times in the last hour already"
    times.append(now)
    return None


#: A stored channel's id: ASCII digits only (``str.isdigit`` also takes '²', which ``int`` refuses).
_ID_RE = re.compile(r"[0-9]{1,18}")


def channel_json(channel: ChannelConfig, created=None, created_by: str = "") -> dict:
    """What anyone is shown of a channel: never its URL."""
    return {
        "id": channel.stored_id if channel.stored_id is not None else f"config-{channel.claim}",
        "owner": channel.owner_kind,
        "name": channel.owner,
        "service": channel.service,
        "target": channel.masked,
        "events": list(channel.events),
        "configured": channel.configured,
        "created": isoformat(created) if created is not None else None,
        "created_by": created_by or None,
    }


def owner_name(kind: str, name: str) -> str:
    """``name`` if it is a user's or group's name (``kind``); else the 400 that says why."""
    try:
        validate_subject(kind, name)
    except BadRequest as e:
        raise web.HTTPError(400, str(e).replace("budget", "channel")) from None
    return name


def may_read(caller: Caller, owner_kind: str, owner: str) -> bool:
    if owner_kind == "user" and caller.is_user and owner == caller.name:
        return True
    if owner_kind == "group":
        return caller.can_read_group(owner)
    return caller.has_scope(SCOPE_USAGE_READ) or caller.has_scope(SCOPE_BUDGETS_WRITE)


def may_write(caller: Caller, owner_kind: str, owner: str) -> bool:
    """Add, change, test: a user their own; groups' and admins' with the admin write scope."""
    if owner_kind == "user":
        return caller.is_user and owner == caller.name
    return caller.has_scope(SCOPE_BUDGETS_WRITE)


def may_remove(caller: Caller, owner_kind: str, owner: str) -> bool:
    return may_write(caller, owner_kind, owner) or caller.has_scope(SCOPE_BUDGETS_WRITE)


def refuse_write(owner_kind: str, owner: str) -> None:
    if owner_kind == "user":
        raise web.HTTPError(403, "A user adds, changes and tests only their own channels.")
    raise web.HTTPError(403, f"Channels of a group or of the admins need the {SCOPE_BUDGETS_WRITE} scope.")


def configured(ctx: WebContext, owner_kind: str, owner: str) -> list[ChannelConfig]:
    """The configuration file's channels of this owner (a user: the channel every user has)."""
    notifier = ctx.notifier
    if notifier is None:
        return []
    out = []
    for c in notifier.configured:
        if c.owner_kind != owner_kind:
            continue
        if owner_kind == "group" and c.owner != owner:
            continue
        out.append(c)
    return out


def find(ctx: WebContext, caller: Caller, channel_id: str) -> tuple[ChannelConfig, object]:
    """The channel ``channel_id`` names and its row (None for a configured one); 404 unless readable."""
    missing = web.HTTPError(404, f"No channel {channel_id!r} that you may see")
    if channel_id.startswith("config-"):
        claim = channel_id[len("config-") :]
        for c in ctx.notifier.configured if ctx.notifier is not None else ():
            if c.claim == claim:
                owner = c.owner
                if c.owner_kind == "user":  # the channel every user has: the caller's
                    if not caller.is_user:
                        raise missing
                    owner = caller.name
                if may_read(caller, c.owner_kind, owner):
                    return c, None
        raise missing
    if not _ID_RE.fullmatch(channel_id):
        raise web.HTTPError(400, "A channel id is a number (at most 18 digits) or config-...")
    row = get_channel(ctx.ledger, int(channel_id))
    if row is None or not may_read(caller, row.owner_kind, row.owner):
        raise missing
    return stored_channel(row), row


# -- what the REST API and the pages' forms do -------------------------------------------------


def listing(ctx: WebContext, caller: Caller, owner_kind: str, owner: str) -> dict:
    """One owner's channels as ``GET channels`` answers (403 unless the caller may read them)."""
    if not may_read(caller, owner_kind, owner):
        if owner_kind == "group":
            caller.require_group(owner)
        raise web.HTTPError(403, f"Another user's or the admins' channels need the {SCOPE_USAGE_READ} scope.")
    rows = channels_of(ctx.ledger, owner_kind, owner)
    channels = [channel_json(c) for c in configured(ctx, owner_kind, owner)]
    channels += [channel_json(stored_channel(r), r.created, r.created_by) for r in rows]
    settings = ctx.notifier.settings if ctx.notifier is not None else None
    return {
        "owner": owner_kind,
        "name": owner,
        "channels": channels,
        "events": list(EVENTS),
        "default_events": list(parse_events(None, owner_kind)),
        "schemes": list(settings.user_schemes) if owner_kind == "user" and settings else None,
        "may_edit": may_write(caller, owner_kind, owner),
    }


def add(ctx: WebContext, caller: Caller, owner_kind: str, owner: str, url, events, now: datetime) -> StoredChannel:
    """Check and store a channel; HTTPError (400 with Apprise's reason, 403) changes nothing."""
    if not may_write(caller, owner_kind, owner):
        refuse_write(owner_kind, owner)
    try:
        events = parse_events(events, owner_kind)
    except ValueError as e:
        raise web.HTTPError(400, str(e)) from None
    settings = ctx.notifier.settings if ctx.notifier is not None else None
    schemes = None
    if owner_kind == "user":
        schemes = settings.user_schemes if settings is not None else ()
        mail = settings is not None and bool(settings.user_mail_url)
        if not schemes and not mail:
            raise web.HTTPError(403, "The admins allow no channels of your own here (Notify.user_schemes).")
        if len(channels_of(ctx.ledger, "user", owner)) >= MAX_OWN_CHANNELS:
            raise web.HTTPError(400, f"You have {MAX_OWN_CHANNELS} channels already: remove one first.")
        if is_address(url):  # an e-mail address: through the lab's own mail server, never a server of theirs
            if not mail:
                raise web.HTTPError(400, "url: The admins send no mail to users' own addresses here.")
            try:
                url, service, masked = lab_mail_channel(url)
            except ChannelError as e:
                raise web.HTTPError(400, f"url: {e}") from None
            return _store(ctx, caller, owner_kind, owner, url, service, masked, events, now)
    try:
        if owner_kind == "user" and isinstance(url, str):
            check_user_params(url)  # first: its name is clearer than what Apprise makes of such a URL
        service, masked = describe(url, schemes=schemes)
        if owner_kind == "user":
            check_user_url(url, settings.user_hosts)
    except ChannelError as e:
        raise web.HTTPError(400, f"url: {e}") from None
    return _store(ctx, caller, owner_kind, owner, url.strip(), service, masked, events, now)


def _store(
    ctx: WebContext,
    caller: Caller,
    owner_kind: str,
    owner: str,
    url: str,
    service: str,
    masked: str,
    events,
    now: datetime,
) -> StoredChannel:
    """Store a checked channel: a user's adds counted, their 10 kept however many adds run at once."""
    if owner_kind == "user":
        why = rate_limited("add", caller_name(caller), ADDS_PER_HOUR)
        if why:
            raise web.HTTPError(429, f"You added a channel {why}: try again later.")
    limit = MAX_OWN_CHANNELS if owner_kind == "user" else None
    row = add_channel(ctx.ledger, owner_kind, owner, url, service, masked, events, now, caller_name(caller), limit)
    if row is None:
        raise web.HTTPError(400, f"You have {MAX_OWN_CHANNELS} channels already: remove one first.")
    log.info("channel %s added for %s %s: %s %s", row.id, owner_kind, owner or "admins", service, masked)
    return row


def caller_name(caller: Caller) -> str:
    return ("" if caller.is_user else "service:") + caller.name


def change_events(ctx: WebContext, caller: Caller, channel_id: str, events) -> StoredChannel:
    _, row = find(ctx, caller, channel_id)
    if row is None:
        raise web.HTTPError(409, "This channel is set in the service's configuration file; change it there.")
    if not may_write(caller, row.owner_kind, row.owner):
        refuse_write(row.owner_kind, row.owner)
    try:
        events = parse_events(events, row.owner_kind)
    except ValueError as e:
        raise web.HTTPError(400, str(e)) from None
    row = set_channel_events(ctx.ledger, row.id, events)
    if row is None:
        raise web.HTTPError(404, f"No channel {channel_id!r} that you may see")
    return row


def remove(ctx: WebContext, caller: Caller, channel_id: str) -> None:
    _, row = find(ctx, caller, channel_id)
    if row is None:
        raise web.HTTPError(409, "This channel is set in the service's configuration file; remove it there.")
    if not may_remove(caller, row.owner_kind, row.owner):
        refuse_write(row.owner_kind, row.owner)
    if not delete_channel(ctx.ledger, row.id):
        raise web.HTTPError(404, f"No channel {channel_id!r} that you may see")
    forget_channel(row.id)
    log.info("channel %s of %s %s removed", row.id, row.owner_kind, row.owner or "admins")


async def send_test(ctx: WebContext, caller: Caller, channel_id: str, lang: str) -> ChannelConfig:
    """Send the test message now (502 with the reason, secrets blanked, when the far end refuses it)."""
    channel, row = find(ctx, caller, channel_id)
    owner = channel.owner
    if channel.owner_kind == "user":
        owner = caller.name if row is None else row.owner
    if not may_write(caller, channel.owner_kind, owner):
        refuse_write(channel.owner_kind, owner)
    why = rate_limited("test", caller_name(caller), TESTS_PER_HOUR, TEST_INTERVAL)
    if why:
        raise web.HTTPError(429, f"You sent a test message {why}: try again later.")
    user = owner if channel.owner_kind == "user" else caller.name
    try:
        await ctx.notifier.test(channel, test_message(user, channel, lang))
    except DeliveryError as e:
        raise web.HTTPError(502, f"The test message to {channel.service} {channel.masked} failed: {e}") from None
    return channel
