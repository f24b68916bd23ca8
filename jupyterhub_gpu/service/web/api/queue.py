"""``queue`` and ``preemptions``: the hub's wait queue as it last published it, and the preemption records.

The hub's scheduler publishes every waiting spawn request in the ledger each cycle (its place among the requests
for its GPU model, why it stands there, the wait estimate: :func:`~jupyterhub_gpu.ledger.queries.schedule.queue`);
here it is read and worded in the reader's language (``?lang=``, the language cookie, else ``Accept-Language``)
from the key and typed values the hub stored (:mod:`jupyterhub_gpu.scheduler.words`), its times in the lab's zone.

Who sees what: a user their own requests; an instructor (``custom:gpu-usage:read!group=NAME``) also those of
the requests counted against their groups; admins (``custom:gpu-usage:read`` or ``custom:gpu-budgets:write``)
every request. Another user's request is never shown to anyone else. The preemption records (the last
:data:`PREEMPTIONS_DAYS` days): a user's own, every one for admins.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.i18n import LANGUAGES, language_of
from jupyterhub_gpu.ledger.queries.schedule import Queued, StopOrder, preemptions, queue
from jupyterhub_gpu.scheduler.words import reason_words, status_words
from jupyterhub_gpu.service.web.auth import SCOPE_BUDGETS_WRITE, SCOPE_USAGE_READ, BaseHandler
from jupyterhub_gpu.service.web.params import BadRequest, query_values, validate_subject

QUEUE_PARAMS = ("user", "group", "lang")
PREEMPTION_PARAMS = ("user", "lang")
#: How far back ``GET preemptions`` reads.
PREEMPTIONS_DAYS = 30


def queued_json(e: Queued, lang: str, tz: tzinfo, now: datetime, show_user: bool = True) -> dict:
    """One waiting request, worded in ``lang`` (times in ``tz``, without the day on the day of ``now``)."""
    wait = None if e.wait_seconds is None else timedelta(seconds=e.wait_seconds)
    return {
        **({"user": e.user} if show_user else {}),
        "server_name": e.server_name,
        "profile": e.profile,
        "gpu_model": e.gpu_model,
        "count": e.count,
        "tier": e.tier,
        "group": e.group,
        "position": e.position,
        "length": e.length,
        "wait_seconds": e.wait_seconds,
        "status": status_words(e.gpu_model, e.count, e.position, e.length, wait, lang),
        "reason_key": e.reason_key,
        "reason": reason_words(e.reason_key, e.values, lang, tz, now),
        "arrived": isoformat(e.arrived),
        "updated": isoformat(e.updated),
    }


def preemption_json(o: StopOrder, lang: str, tz: tzinfo, now: datetime, admin: bool) -> dict:
    """One preemption record (worded as :func:`queued_json`); whose request it freed the GPU for only for admins."""
    return {
        "session_id": o.session_id,
        "user": o.user,
        "server_name": o.server_name,
        "stop_at": isoformat(o.stop_at),
        "decided_at": isoformat(o.decided_at),
        "noticed_at": isoformat(o.noticed_at) if o.noticed_at else None,
        "done_at": isoformat(o.done_at) if o.done_at else None,
        "reason_key": o.reason_key,
        "reason": reason_words(o.reason_key, o.values, lang, tz, now),
        **({"for_user": o.for_user} if admin else {}),
    }


class QueueBase(BaseHandler):
    @property
    def is_admin(self) -> bool:
        return self.has_scope(SCOPE_USAGE_READ) or self.has_scope(SCOPE_BUDGETS_WRITE)

    def query(self, params: tuple[str, ...]) -> tuple[dict[str, str], str]:
        """The query's values and the answer's language; 400 for an unknown parameter or language."""
        try:
            values = query_values(self.request.query_arguments, params)
            for name in ("user", "group"):
                if name in values:
                    validate_subject(name, values[name])
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        if "lang" in values and values["lang"] not in LANGUAGES:
            raise web.HTTPError(400, f"lang must be one of {', '.join(LANGUAGES)}, got {values['lang']!r}")
        return values, language_of(self)


class QueueHandler(QueueBase):
    """``GET queue``: the waiting requests the caller may see, worded in the reader's language."""

    @web.authenticated
    def get(self):
        values, lang = self.query(QUEUE_PARAMS)
        user, group = values.get("user"), values.get("group")
        me = self.current_user["name"] if self.is_user else None
        teaches = set(self.instructor_groups)
        if group is not None and not self.is_admin:
            self.require_group(group)  # admins, or that group's instructor
        if user is not None and user != me and not (self.is_admin or teaches):
            self.require_scope(SCOPE_USAGE_READ, f"{SCOPE_USAGE_READ}!group=NAME")
        if not self.is_admin and me is None and not teaches:
            self.own_name("a service sees the queue with custom:gpu-usage:read")
        entries = queue(self.ledger, user)
        if not self.is_admin:
            # one's own requests, and those counted against a group one teaches; nobody else's
            entries = [e for e in entries if (me is not None and e.user == me) or (e.group in teaches)]
        if group is not None:
            entries = [e for e in entries if e.group == group]
        self.write_json(
            {
                "user": user,
                "group": group,
                "language": lang,
                "timezone": self.ctx.tz.key,
                "updated": isoformat(max(e.updated for e in entries)) if entries else None,
                "queue": [queued_json(e, lang, self.ctx.tz, self.now()) for e in entries],
            }
        )


class PreemptionsHandler(QueueBase):
    """``GET preemptions``: the preemption records of the last 30 days: one's own; admins every one."""

    @web.authenticated
    def get(self):
        values, lang = self.query(PREEMPTION_PARAMS)
        user = values.get("user")
        if not self.is_user or (user is not None and user != self.current_user["name"]):
            self.require_scope(SCOPE_USAGE_READ, SCOPE_BUDGETS_WRITE)
        elif user is None and not self.is_admin:
            user = self.own_name("give user=")
        since = self.now() - timedelta(days=PREEMPTIONS_DAYS)
        found = preemptions(self.ledger, since, user)
        self.write_json(
            {
                "user": user,
                "since": isoformat(since),
                "language": lang,
                "preemptions": [preemption_json(o, lang, self.ctx.tz, self.now(), self.is_admin) for o in found],
            }
        )
