"""Alert channels on the pages (docs/alerts.md): the sections of the user and admin pages, and their form."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.service.domain.notices import DEFAULT_EVENTS, EVENT_NAMES, EVENTS
from jupyterhub_gpu.service.web.api.channels import ChannelAccess
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE
from jupyterhub_gpu.service.web.pages.base import PageHandler

# -- alert channels (docs/alerts.md): the sections of the user and admin pages, and their forms ------------


def channel_block(page, owner_kind: str, owner: str, heading: str) -> dict:
    """One owner's channels for ``channels.html`` (``page`` is a page that is also a :class:`ChannelAccess`)."""
    listing = page.listing(owner_kind, owner)
    _ = page._
    rows = [
        {**c, "event_names": ", ".join(_(EVENT_NAMES[e]) for e in c["events"]) or _("nothing")}
        for c in listing["channels"]
    ]
    return {"owner": owner_kind, "name": owner, "heading": heading, "channels": rows, "may_edit": listing["may_edit"]}


def channel_section(page, title: str, blocks: list[dict], back: str, owner_kinds: str) -> dict:
    """The ``ch`` of ``channels.html``: its blocks, and the add form for ``owner_kinds`` (user | others)."""
    _ = page._
    saved = {
        "channel-added": _("Channel added."),
        "channel-removed": _("Channel removed."),
        "channel-tested": _("Test message sent."),
    }.get(page.get_query_argument("saved", ""), "")
    defaults = set(DEFAULT_EVENTS["user" if owner_kinds == "user" else "group"])
    settings = page.ctx.notifier.settings if page.ctx.notifier is not None else None
    return {
        "title": title,
        "blocks": blocks,
        "back": back,
        "action": page.page_url("channels"),
        "saved": saved,
        "owners": owner_kinds == "others",
        "may_add": owner_kinds == "user" or page.has_scope(SCOPE_BUDGETS_WRITE),
        "events": [{"value": e, "name": _(EVENT_NAMES[e]), "default": e in defaults} for e in EVENTS],
        "schemes": ", ".join(settings.user_schemes) if owner_kinds == "user" and settings else "",
    }


class ChannelFormHandler(PageHandler, ChannelAccess):
    """``POST channels``: add, remove or test a channel from the user or admin page (XSRF-checked by JupyterHub).

    The same rules as the REST API (:class:`~.api.channels.ChannelAccess`); a refusal is an error page
    with the reason (a URL Apprise cannot read: Apprise's, secrets blanked).
    """

    @web.authenticated
    async def post(self):
        action = self.get_body_argument("action", "")
        back = "admin" if self.get_body_argument("back", "") == "admin" else ""
        channel_id = self.get_body_argument("id", "").strip()
        if action == "add":
            owner = self.get_body_argument("owner", "user")
            if owner == "user":
                kind, name = "user", self.own_name("it has no channels of its own")
            elif owner == "admins":
                kind, name = "admin", ""
            elif owner == "group":
                kind, name = "group", self._name("group", self.get_body_argument("group", "").strip())
            else:
                raise web.HTTPError(400, f"owner must be user, admins or group, got {owner!r}")
            events = self.get_body_arguments("events")
            if not events:
                raise web.HTTPError(400, self._("Choose at least one event."))
            self.add(kind, name, self.get_body_argument("url", ""), events)
            saved = "channel-added"
        elif action == "remove":
            self.remove(channel_id)
            saved = "channel-removed"
        elif action == "test":
            await self.send_test(channel_id)
            saved = "channel-tested"
        else:
            raise web.HTTPError(400, f"action must be add, remove or test, got {action!r}")
        self.redirect(self.page_url(back, saved=saved) + "#channels", status=303)
