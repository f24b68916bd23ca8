"""``channels``: where a user's, a group's and the admins' notices go (Apprise URLs), and a test message.

Who may do what, and the changes, are :mod:`jupyterhub_gpu.service.web.actions.channels`'s (the usage pages'
channel form calls the same functions; the same scopes as budgets, docs/alerts.md): a user their own
channels (``user`` in a body or query is refused unless it is the caller); a group's and the admins' with the
admin scopes; another user's are read and removed (not changed, not tested) by admins.

A channel nobody may read is "not found", so that ids reveal nothing. No answer holds a URL: only its
service and masked target (:func:`~jupyterhub_gpu.service.channels.describe`); a URL Apprise cannot read
is refused with Apprise's reason, its secrets blanked. Channels from the configuration file are listed
(``configured: true``, id ``config-…``) and can be tested, not changed here.
"""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.i18n import language_of
from jupyterhub_gpu.service.channels import stored_channel
from jupyterhub_gpu.service.domain.notices import ChannelConfig
from jupyterhub_gpu.service.web.actions.channels import (
    add,
    change_events,
    channel_json,
    find,
    listing,
    owner_name,
    remove,
    send_test,
)
from jupyterhub_gpu.service.web.auth import BaseHandler


class ChannelHandlerBase(BaseHandler):
    """What the channel handlers share: the owner a query names, and a channel as the answer."""

    def owner_of_query(self) -> tuple[str, str]:
        """``(owner_kind, owner)`` from ``?user=``, ``?group=`` or ``?admins=true``; the caller's own by default."""
        user, group = self.get_query_argument("user", None), self.get_query_argument("group", None)
        admins = self.get_query_argument("admins", "").lower() in ("1", "true", "yes")
        if sum(x is not None and x is not False for x in (user, group)) + admins > 1:
            raise web.HTTPError(400, "Give one of user=, group= or admins=true")
        if group is not None:
            return "group", owner_name("group", group)
        if admins:
            return "admin", ""
        if user is not None:
            return "user", owner_name("user", user)
        return "user", self.own_name("it has no channels of its own; use group= or admins=true")

    def answer(self, channel: ChannelConfig, row, status: int = 200) -> None:
        if row is None:
            self.write_json(channel_json(channel), status)
        else:
            self.write_json(channel_json(channel, row.created, row.created_by), status)


class ChannelsHandler(ChannelHandlerBase):
    """``GET channels`` (one owner's, the caller's by default) and ``POST channels`` (add one)."""

    @web.authenticated
    def get(self):
        self.write_json(listing(self.ctx, self.caller, *self.owner_of_query()))

    @web.authenticated
    def post(self):
        body = self.json_body()
        if not isinstance(body, dict):
            raise web.HTTPError(400, 'The body is a JSON object: {"url": "...", "events": [...]}')
        unknown = set(body) - {"url", "events", "user", "group", "admins"}
        if unknown:
            raise web.HTTPError(400, f"Unknown fields {sorted(unknown)}: give url, events and user, group or admins")
        owner_kind, owner = self._owner_of_body(body)
        row = add(self.ctx, self.caller, owner_kind, owner, body.get("url"), body.get("events"), self.now())
        self.answer(stored_channel(row), row, 201)

    def _owner_of_body(self, body: dict) -> tuple[str, str]:
        given = [k for k in ("user", "group", "admins") if body.get(k) not in (None, False)]
        if len(given) > 1:
            raise web.HTTPError(400, "Give one of user, group or admins")
        if "group" in given:
            if not isinstance(body["group"], str):
                raise web.HTTPError(400, "group is a group's name")
            return "group", owner_name("group", body["group"])
        if "admins" in given:
            if body["admins"] is not True:
                raise web.HTTPError(400, "admins is true or absent")
            return "admin", ""
        own = self.own_name("it has no channels of its own; give group or admins")
        if "user" in given and body["user"] != own:
            raise web.HTTPError(403, "A user adds, changes and tests only their own channels.")
        return "user", own


class ChannelHandler(ChannelHandlerBase):
    """``GET``, ``PATCH`` (its events) and ``DELETE channels/{id}``."""

    @web.authenticated
    def get(self, channel_id: str):
        self.answer(*find(self.ctx, self.caller, channel_id))

    @web.authenticated
    def patch(self, channel_id: str):
        body = self.json_body()
        if not isinstance(body, dict) or set(body) != {"events"}:
            find(
                self.ctx, self.caller, channel_id
            )  # an unknown or unreadable channel is "not found" before the body is judged
            raise web.HTTPError(400, 'Only a channel\'s events can change: {"events": [...]} (add a new URL instead)')
        row = change_events(self.ctx, self.caller, channel_id, body["events"])
        self.answer(stored_channel(row), row)

    @web.authenticated
    def delete(self, channel_id: str):
        remove(self.ctx, self.caller, channel_id)
        self.set_status(204)
        self.finish()


class ChannelTestHandler(ChannelHandlerBase):
    """``POST channels/{id}/test``: a test message to one channel now (one per caller per 10 s, 6 an hour)."""

    @web.authenticated
    async def post(self, channel_id: str):
        body = self.json_body(allow_empty=True)
        if body not in (None, {}):
            raise web.HTTPError(400, "A test takes no body (or {})")
        channel = await send_test(self.ctx, self.caller, channel_id, language_of(self))
        self.write_json({"sent": True, "channel": channel_json(channel)})
