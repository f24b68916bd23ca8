"""``channels``: where a user's, a group's and the admins' notices go (Apprise URLs), and a test message.

Who may do what (invariant 3, the same scopes as budgets):

- a user reads, adds, changes, removes and tests only their own channels (``user`` in a body or query is
  refused unless it is the caller); the schemes they may add are ``GPUService.notify_user_schemes``;
- a group's channels and the admins' are read with ``custom:gpu-usage:read`` (a group's also by its
  instructors, ``custom:gpu-usage:read!group=NAME``) and written and tested with ``custom:gpu-budgets:write``;
- another user's channels are read with ``custom:gpu-usage:read`` and removed (not changed, not tested)
  with ``custom:gpu-budgets:write``.

A channel nobody may read is "not found", so that ids reveal nothing. No answer holds a URL: only its
service and masked target (:func:`~jupyterhub_gpu.service.notify.describe`); a URL Apprise cannot read
is refused with Apprise's reason, its secrets blanked. Channels from the configuration file are listed
(``configured: true``, id ``config-…``) and can be tested, not changed here.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import language_of
from jupyterhub_gpu.ledger.queries.channels import (
    StoredChannel,
    add_channel,
    channels_of,
    delete_channel,
    get_channel,
    set_channel_events,
)
from jupyterhub_gpu.service.domain.notices import EVENTS, ChannelConfig, parse_events, test_message
from jupyterhub_gpu.service.notify import (
    ChannelError,
    DeliveryError,
    check_user_params,
    check_user_url,
    describe,
    forget_channel,
    is_address,
    lab_mail_channel,
    stored_channel,
)
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, BaseHandler
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


class ChannelAccess(BaseHandler):
    """Who may read, write and test whose channels (one place for the rules above)."""

    def owner_of_query(self) -> tuple[str, str]:
        """``(owner_kind, owner)`` from ``?user=``, ``?group=`` or ``?admins=true``; the caller's own by default."""
        user, group = self.get_query_argument("user", None), self.get_query_argument("group", None)
        admins = self.get_query_argument("admins", "").lower() in ("1", "true", "yes")
        if sum(x is not None and x is not False for x in (user, group)) + admins > 1:
            raise web.HTTPError(400, "Give one of user=, group= or admins=true")
        if group is not None:
            return "group", self._name("group", group)
        if admins:
            return "admin", ""
        if user is not None:
            return "user", self._name("user", user)
        return "user", self.own_name("it has no channels of its own; use group= or admins=true")

    def _name(self, kind: str, name: str) -> str:
        try:
            validate_subject(kind, name)
        except BadRequest as e:
            raise web.HTTPError(400, str(e).replace("budget", "channel")) from None
        return name

    def may_read(self, owner_kind: str, owner: str) -> bool:
        if owner_kind == "user" and self.is_user and owner == self.current_user["name"]:
            return True
        if owner_kind == "group":
            return self.can_read_group(owner)
        return self.has_scope(SCOPE_USAGE_READ) or self.has_scope(SCOPE_BUDGETS_WRITE)

    def may_write(self, owner_kind: str, owner: str) -> bool:
        """Add, change, test: a user their own; groups' and admins' with the admin write scope."""
        if owner_kind == "user":
            return self.is_user and owner == self.current_user["name"]
        return self.has_scope(SCOPE_BUDGETS_WRITE)

    def may_remove(self, owner_kind: str, owner: str) -> bool:
        return self.may_write(owner_kind, owner) or self.has_scope(SCOPE_BUDGETS_WRITE)

    def refuse_write(self, owner_kind: str, owner: str) -> None:
        if owner_kind == "user":
            raise web.HTTPError(403, "A user adds, changes and tests only their own channels.")
        raise web.HTTPError(403, f"Channels of a group or of the admins need the {SCOPE_BUDGETS_WRITE} scope.")

    def configured(self, owner_kind: str, owner: str) -> list[ChannelConfig]:
        """The configuration file's channels of this owner (a user: the channel every user has)."""
        notifier = self.ctx.notifier
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

    def find(self, channel_id: str) -> tuple[ChannelConfig, object]:
        """The channel ``channel_id`` names and its row (None for a configured one); 404 unless readable."""
        missing = web.HTTPError(404, f"No channel {channel_id!r} that you may see")
        if channel_id.startswith("config-"):
            claim = channel_id[len("config-") :]
            for c in self.ctx.notifier.configured if self.ctx.notifier is not None else ():
                if c.claim == claim:
                    owner = c.owner
                    if c.owner_kind == "user":  # the channel every user has: the caller's
                        if not self.is_user:
                            raise missing
                        owner = self.current_user["name"]
                    if self.may_read(c.owner_kind, owner):
                        return c, None
            raise missing
        if not _ID_RE.fullmatch(channel_id):
            raise web.HTTPError(400, "A channel id is a number (at most 18 digits) or config-...")
        row = get_channel(self.ledger, int(channel_id))
        if row is None or not self.may_read(row.owner_kind, row.owner):
            raise missing
        return stored_channel(row), row

    def answer(self, channel: ChannelConfig, row, status: int = 200) -> None:
        if row is None:
            self.write_json(channel_json(channel), status)
        else:
            self.write_json(channel_json(channel, row.created, row.created_by), status)

    # -- what the REST API and the pages' forms do -------------------------------------------------

    def listing(self, owner_kind: str, owner: str) -> dict:
        """One owner's channels as ``GET channels`` answers (403 unless the caller may read them)."""
        if not self.may_read(owner_kind, owner):
            if owner_kind == "group":
                self.require_group(owner)
            raise web.HTTPError(403, f"Another user's or the admins' channels need the {SCOPE_USAGE_READ} scope.")
        rows = channels_of(self.ledger, owner_kind, owner)
        channels = [channel_json(c) for c in self.configured(owner_kind, owner)]
        channels += [channel_json(stored_channel(r), r.created, r.created_by) for r in rows]
        settings = self.ctx.notifier.settings if self.ctx.notifier is not None else None
        return {
            "owner": owner_kind,
            "name": owner,
            "channels": channels,
            "events": list(EVENTS),
            "default_events": list(parse_events(None, owner_kind)),
            "schemes": list(settings.user_schemes) if owner_kind == "user" and settings else None,
            "may_edit": self.may_write(owner_kind, owner),
        }

    def add(self, owner_kind: str, owner: str, url, events) -> StoredChannel:
        """Check and store a channel; HTTPError (400 with Apprise's reason, 403) changes nothing."""
        if not self.may_write(owner_kind, owner):
            self.refuse_write(owner_kind, owner)
        try:
            events = parse_events(events, owner_kind)
        except ValueError as e:
            raise web.HTTPError(400, str(e)) from None
        settings = self.ctx.notifier.settings if self.ctx.notifier is not None else None
        schemes = None
        if owner_kind == "user":
            schemes = settings.user_schemes if settings is not None else ()
            mail = settings is not None and bool(settings.user_mail_url)
            if not schemes and not mail:
                raise web.HTTPError(403, "The admins allow no channels of your own here (notify_user_schemes).")
            if len(channels_of(self.ledger, "user", owner)) >= MAX_OWN_CHANNELS:
                raise web.HTTPError(400, f"You have {MAX_OWN_CHANNELS} channels already: remove one first.")
            if is_address(url):  # an e-mail address: through the lab's own mail server, never a server of theirs
                if not mail:
                    raise web.HTTPError(400, "url: The admins send no mail to users' own addresses here.")
                try:
                    url, service, masked = lab_mail_channel(url)
                except ChannelError as e:
                    raise web.HTTPError(400, f"url: {e}") from None
                return self._store(owner_kind, owner, url, service, masked, events)
        try:
            if owner_kind == "user" and isinstance(url, str):
                check_user_params(url)  # first: its name is clearer than what Apprise makes of such a URL
            service, masked = describe(url, schemes=schemes)
            if owner_kind == "user":
                check_user_url(url, settings.user_hosts)
        except ChannelError as e:
            raise web.HTTPError(400, f"url: {e}") from None
        return self._store(owner_kind, owner, url.strip(), service, masked, events)

    def _store(self, owner_kind: str, owner: str, url: str, service: str, masked: str, events) -> StoredChannel:
        """Store a checked channel: a user's adds counted, their 10 kept however many adds run at once."""
        if owner_kind == "user":
            why = rate_limited("add", self.caller_name(), ADDS_PER_HOUR)
            if why:
                raise web.HTTPError(429, f"You added a channel {why}: try again later.")
        limit = MAX_OWN_CHANNELS if owner_kind == "user" else None
        row = add_channel(
            self.ledger, owner_kind, owner, url, service, masked, events, self.now(), self.caller_name(), limit
        )
        if row is None:
            raise web.HTTPError(400, f"You have {MAX_OWN_CHANNELS} channels already: remove one first.")
        log.info("channel %s added for %s %s: %s %s", row.id, owner_kind, owner or "admins", service, masked)
        return row

    def caller_name(self) -> str:
        user = self.current_user or {}
        return ("" if user.get("kind", "user") == "user" else "service:") + str(user.get("name", ""))

    def change_events(self, channel_id: str, events) -> StoredChannel:
        _, row = self.find(channel_id)
        if row is None:
            raise web.HTTPError(409, "This channel is set in the service's configuration file; change it there.")
        if not self.may_write(row.owner_kind, row.owner):
            self.refuse_write(row.owner_kind, row.owner)
        try:
            events = parse_events(events, row.owner_kind)
        except ValueError as e:
            raise web.HTTPError(400, str(e)) from None
        row = set_channel_events(self.ledger, row.id, events)
        if row is None:
            raise web.HTTPError(404, f"No channel {channel_id!r} that you may see")
        return row

    def remove(self, channel_id: str) -> None:
        _, row = self.find(channel_id)
        if row is None:
            raise web.HTTPError(409, "This channel is set in the service's configuration file; remove it there.")
        if not self.may_remove(row.owner_kind, row.owner):
            self.refuse_write(row.owner_kind, row.owner)
        if not delete_channel(self.ledger, row.id):
            raise web.HTTPError(404, f"No channel {channel_id!r} that you may see")
        forget_channel(row.id)
        log.info("channel %s of %s %s removed", row.id, row.owner_kind, row.owner or "admins")

    async def send_test(self, channel_id: str) -> ChannelConfig:
        """Send the test message now (502 with the reason, secrets blanked, when the far end refuses it)."""
        channel, row = self.find(channel_id)
        owner = channel.owner
        if channel.owner_kind == "user":
            owner = self.current_user["name"] if row is None else row.owner
        if not self.may_write(channel.owner_kind, owner):
            self.refuse_write(channel.owner_kind, owner)
        why = rate_limited("test", self.caller_name(), TESTS_PER_HOUR, TEST_INTERVAL)
        if why:
            raise web.HTTPError(429, f"You sent a test message {why}: try again later.")
        lang = language_of(self)
        user = owner if channel.owner_kind == "user" else (self.current_user or {}).get("name", "")
        try:
            await self.ctx.notifier.test(channel, test_message(user, channel, lang))
        except DeliveryError as e:
            raise web.HTTPError(502, f"The test message to {channel.service} {channel.masked} failed: {e}") from None
        return channel


class ChannelsHandler(ChannelAccess):
    """``GET channels`` (one owner's, the caller's by default) and ``POST channels`` (add one)."""

    @web.authenticated
    def get(self):
        self.write_json(self.listing(*self.owner_of_query()))

    @web.authenticated
    def post(self):
        body = self.json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, 'The body is a JSON object: {"url": "...", "events": [...]}')
        unknown = set(body) - {"url", "events", "user", "group", "admins"}
        if unknown:
            raise web.HTTPError(400, f"Unknown fields {sorted(unknown)}: give url, events and user, group or admins")
        owner_kind, owner = self._owner_of_body(body)
        row = self.add(owner_kind, owner, body.get("url"), body.get("events"))
        self.answer(stored_channel(row), row, 201)

    def _owner_of_body(self, body: dict) -> tuple[str, str]:
        given = [k for k in ("user", "group", "admins") if body.get(k) not in (None, False)]
        if len(given) > 1:
            raise web.HTTPError(400, "Give one of user, group or admins")
        if "group" in given:
            if not isinstance(body["group"], str):
                raise web.HTTPError(400, "group is a group's name")
            return "group", self._name("group", body["group"])
        if "admins" in given:
            if body["admins"] is not True:
                raise web.HTTPError(400, "admins is true or absent")
            return "admin", ""
        own = self.own_name("it has no channels of its own; give group or admins")
        if "user" in given and body["user"] != own:
            raise web.HTTPError(403, "A user adds, changes and tests only their own channels.")
        return "user", own


class ChannelHandler(ChannelAccess):
    """``GET``, ``PATCH`` (its events) and ``DELETE channels/{id}``."""

    @web.authenticated
    def get(self, channel_id: str):
        self.answer(*self.find(channel_id))

    @web.authenticated
    def patch(self, channel_id: str):
        body = self.json_body()
        if not isinstance(body, dict) or set(body) != {"events"}:
            self.find(channel_id)  # an unknown or unreadable channel is "not found" before the body is judged
            raise web.HTTPError(400, 'Only a channel\'s events can change: {"events": [...]} (add a new URL instead)')
        row = self.change_events(channel_id, body["events"])
        self.answer(stored_channel(row), row)

    @web.authenticated
    def delete(self, channel_id: str):
        self.remove(channel_id)
        self.set_status(204)
        self.finish()


class ChannelTestHandler(ChannelAccess):
    """``POST channels/{id}/test``: a test message to one channel now (one per caller per 10 s, 6 an hour)."""

    @web.authenticated
    async def post(self, channel_id: str):
        body = self.json_body(allow_empty=True)
        if body not in (None, {}):
            raise web.HTTPError(400, "A test takes no body (or {})")
        channel = await self.send_test(channel_id)
        self.write_json({"sent": True, "channel": channel_json(channel)})
