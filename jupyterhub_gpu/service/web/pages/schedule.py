"""The schedule on the pages (docs/scheduling.md): its tables' rows, worded and dated for the reader, and a
form's fields as the JSON body that ``POST reservations`` and ``PUT shares`` read."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from jupyterhub_gpu.ledger.queries.schedule import (
    StoredReservation,
    StoredShare,
    preemptions,
    queue,
)
from jupyterhub_gpu.scheduler.words import gpus_words, wait_words
from jupyterhub_gpu.service.web.actions.schedule import may_book
from jupyterhub_gpu.service.web.api.queue import PREEMPTIONS_DAYS, preemption_json, queued_json
from jupyterhub_gpu.service.web.api.schedule import reservation_json, share_json
from jupyterhub_gpu.service.web.pages.base import PageHandler
from jupyterhub_gpu.service.web.pages.series import day_text, moment_text

# -- the schedule (docs/scheduling.md): reservations, shares, the hub's queue and the preemptions -----------

#: The CSV columns of the schedule's tables: the REST API's fields (``GET reservations``, ``shares``, ``queue``,
#: ``preemptions``).
RESERVATION_COLUMNS = [
    "id",
    "group",
    "gpu_model",
    "count",
    "start",
    "end",
    "weekly_until",
    "note",
    "created_by",
    "created_at",
]
SHARE_COLUMNS = ["group", "gpu_model", "share", "updated", "updated_by"]
QUEUE_COLUMNS = [
    "user",
    "server_name",
    "profile",
    "gpu_model",
    "count",
    "tier",
    "group",
    "position",
    "length",
    "wait_seconds",
    "status",
    "reason",
]
PREEMPTION_COLUMNS = ["user", "server_name", "decided_at", "stop_at", "done_at", "reason"]
BOOKING_FIELDS = ("gpu_model", "count", "start", "end", "weekly_until", "note")
SHARE_FORM_FIELDS = ("group", "gpu_model", "share")
#: The API's refusals that a form shows on its own page, above the form as it was sent (a bad field, a
#: conflicting booking, a share to clear that is not there, a hub that cannot say whether a group exists);
#: any other (403: not theirs to change) is an error page.
FORM_REFUSALS = (400, 404, 409, 502)


def whole_or_text(text: str) -> int | str:
    """A form's number as a JSON body carries it: an ``int`` when it is one, else the text, which the API's
    parser then refuses with its own message (``count must be a whole number of GPUs from 1, got "two"``)."""
    return int(text) if re.fullmatch(r"-?\d{1,18}", text) else text


def zoned(text: str, tz) -> str:
    """A form's ``datetime-local`` value (the lab's wall-clock time, without a zone) as an ISO 8601 time with
    the lab's offset; a time with a zone, or text that is no time, as it is (the API's parser names it)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    if moment.tzinfo is not None:
        return text
    try:
        return moment.replace(tzinfo=tz).isoformat()
    except (OverflowError, ValueError):  # a year 1 or 9999 moved out of range by the offset
        return text


def booking_body(group: str, form: dict[str, str], tz) -> dict:
    """The JSON body of ``POST reservations`` from the booking form (an empty field is left out: "is required")."""
    body: dict = {"group": group}
    for name in BOOKING_FIELDS:
        value = form.get(name, "")
        if value == "":
            continue
        if name == "count":
            body[name] = whole_or_text(value)
        elif name in ("start", "end"):
            body[name] = zoned(value, tz)
        else:
            body[name] = value
    return body


def share_body(form: dict[str, str], clear: bool) -> dict:
    """The JSON body of ``PUT shares`` from the share form: ``share`` null clears it."""
    body: dict = {"group": form.get("group", ""), "gpu_model": form.get("gpu_model", "")}
    if clear:
        body["share"] = None
    elif form.get("share", "") != "":
        body["share"] = whole_or_text(form["share"])
    return body


class ScheduleView(PageHandler):
    """A page that shows the schedule: rows of the REST API's serializers, worded and dated for the reader, and
    the API's own rule of who may book and cancel (:func:`~..actions.schedule.may_book`)."""

    def may_book(self, group: str) -> bool:
        """Whether the reader may book and cancel for ``group`` (an admin, or the group's instructor)."""
        return may_book(self.caller, group)

    def window_words(self, start: datetime, end: datetime) -> str:
        """``Dec 8, 2026 14:00–16:00`` in the lab's zone (both days when the window crosses midnight)."""
        tz = self.ctx.tz
        start, end = start.astimezone(tz), end.astimezone(tz)
        until = f"{end:%H:%M}" if end.date() == start.date() else moment_text(end, tz, self.lang)
        return f"{moment_text(start, tz, self.lang)}–{until}"

    def reservation_rows(self, found: list[StoredReservation]) -> list[dict]:
        return [
            {
                **reservation_json(r),
                "window": self.window_words(r.start, r.end),
                "weekly": day_text(r.weekly_until, self.lang) if r.weekly_until else "",
                "may_cancel": self.may_book(r.group),
            }
            for r in found
        ]

    def share_rows(self, found: list[StoredShare], group: str | None = None) -> list[dict]:
        """The shares set; for one ``group``, also the pool's models it has none of (the default applies)."""
        rows = [{**share_json(s), "set": True} for s in found]
        if group is not None:
            have = {s.gpu_model for s in found}
            rows += [
                {"group": group, "gpu_model": m, "share": None, "updated": None, "updated_by": "", "set": False}
                for m in self.ctx.gpu_pool
                if m not in have
            ]
            rows.sort(key=lambda r: r["gpu_model"])
        return rows

    def queue_rows(self, user: str | None = None) -> list[dict]:
        """The hub's published queue (``GET queue``'s entries, worded in the reader's language); of ``user``."""
        rows = []
        for e in queue(self.ledger, user):
            row = queued_json(e, self.lang, self.ctx.tz, self.now())
            row["gpus"] = gpus_words(e.count, e.gpu_model, self.lang)
            row["place"] = self._("{position} of {length}", position=e.position, length=e.length)
            row["wait"] = wait_words(None if e.wait_seconds is None else timedelta(seconds=e.wait_seconds), self.lang)
            rows.append(row)
        return rows

    def preemption_rows(self, user: str | None = None) -> list[dict]:
        """The preemption records of the last :data:`PREEMPTIONS_DAYS` days (``GET preemptions``); of ``user``;
        whose request took the GPU only on the admin page (``user`` None)."""
        since = self.now() - timedelta(days=PREEMPTIONS_DAYS)
        found = preemptions(self.ledger, since, user)
        return [preemption_json(o, self.lang, self.ctx.tz, self.now(), user is None) for o in found]

    def pool_words(self) -> str:
        """The lab's GPUs as the bookings are checked against them: ``4 T4s, 2 A100s``."""
        return self._.listing(gpus_words(n, m, self.lang) for m, n in sorted(self.ctx.gpu_pool.items()) if n > 0)
