"""Alert channels on the pages (docs/alerts.md): the sections of the user and admin pages, and their form."""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.i18n import language_of
from jupyterhub_gpu.service.domain.notices import DEFAULT_EVENTS, EVENT_NAMES, EVENTS
from jupyterhub_gpu.service.web.actions.channels import add, listing, owner_name, remove, send_test
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE
from jupyterhub_gpu.service.web.pages.base import PageHandler

# -- alert channels (docs/alerts.md): the sections of the user and admin pages, and their forms ------------


def channel_block(page, owner_kind: str, owner: str, heading: str) -> dict:
    """One owner's channels for ``channels.html``, as ``GET channels`` lists them to the page's reader."""
    found = listing(page.ctx, page.caller, owner_kind, owner)
    _ = page._
    rows = [
        {**c, "event_names": ", ".join(_(EVENT_NAMES[e]) for e in c["events"]) or _("nothing")}
        for c in found["channels"]
    ]
    return {"owner": owner_kind, "name": owner, "heading": heading, "channels": rows, "may_edit": found["may_edit"]}


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


class ChannelFormHandler(PageHandler):
    """``POST channels``: add, remove or test a channel from the user or admin page (XSRF-checked by JupyterHub).

    The same functions as the REST API (:mod:`~..actions.channels`); a refusal is an error page
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
                kind, name = "group", owner_name("group", self.get_body_argument("group", "").strip())
            else:
                raise web.HTTPError(400, f"owner must be user, admins or group, got {owner!r}")
            events = self.get_body_arguments("events")
            if not events:
                raise web.HTTPError(400, self._("Choose at least one event."))
            add(self.ctx, self.caller, kind, name, self.get_body_argument("url", ""), events, self.now())
            saved = "channel-added"
        elif action == "remove":
            remove(self.ctx, self.caller, channel_id)
            saved = "channel-removed"
        elif action == "test":
            await send_test(self.ctx, self.caller, channel_id, language_of(self))
            saved = "channel-tested"
        else:
            raise web.HTTPError(400, f"action must be add, remove or test, got {action!r}")
        self.redirect(self.page_url(back, saved=saved) + "#channels", status=303)
