"""A group's page (its instructors and the admins) and its booking form."""

from __future__ import annotations

from tornado import web
from tornado.escape import url_escape

from jupyterhub_gpu.ledger.queries.schedule import (
    reservations,
    shares,
)
from jupyterhub_gpu.service.web.actions.schedule import book, cancel, limits_words
from jupyterhub_gpu.service.web.api.schedule import reservation_json, share_json
from jupyterhub_gpu.service.web.auth import http_error_text
from jupyterhub_gpu.service.web.pages.base import BUDGET_COLUMNS, CULLING_COLUMNS, DAILY_COLUMNS, TOTAL_COLUMNS
from jupyterhub_gpu.service.web.pages.kueue import kueue_section
from jupyterhub_gpu.service.web.pages.schedule import (
    BOOKING_FIELDS,
    FORM_REFUSALS,
    RESERVATION_COLUMNS,
    SHARE_COLUMNS,
    ScheduleView,
    booking_body,
)
from jupyterhub_gpu.service.web.pages.series import daily_series, totals_by
from jupyterhub_gpu.service.web.params import BadRequest, validate_subject
from jupyterhub_gpu.service.web.views import usage_csv


class GroupView(ScheduleView):
    """A group: its total against its budget, top users, idle time culled, sessions, daily chart, and its
    reservations (with the booking form for its instructors and admins) and shares."""

    def check_group(self, group: str) -> None:
        """400 for a name that is none; 403 unless the reader reads the group (admins, its instructors)."""
        try:
            validate_subject("group", group)
        except BadRequest as e:
            raise web.HTTPError(400, str(e)) from None
        self.require_group(group)

    def group_url(self, group: str, **params) -> str:
        return self.page_url("groups/" + url_escape(group, plus=False), **params)

    def show(
        self, group: str, status: int = 200, booking_error: str = "", booking: dict | None = None, kueue=None
    ) -> None:
        self.check_group(group)
        since, until, values = self.page_query()
        sessions = self.sessions(since, until, pool=group)  # what the group paid for, as its budget counts
        budgets = self.budget_rows([r for r in self.ledger.budget_rules() if r.key == f"group:{group}"])
        users = totals_by(sessions, lambda s: [s["user"]])
        series = daily_series(sessions, self.ctx.tz, since, until, self.now())
        culled = self.culling(since, until, group)
        booked = reservations(self.ledger, self.ctx.tz, [group])
        group_shares = shares(self.ledger, [group])
        if self.export(
            values,
            {
                "sessions": usage_csv(sessions),
                "users": (TOTAL_COLUMNS, users),
                "daily": (DAILY_COLUMNS, series),
                "budgets": (BUDGET_COLUMNS, budgets),
                "culling": (CULLING_COLUMNS, culled["rows"]),
                "reservations": (RESERVATION_COLUMNS, [reservation_json(r) for r in booked]),
                "shares": (SHARE_COLUMNS, [share_json(s) for s in group_shares]),
            },
        ):
            return
        self.render_page(
            "group.html",
            status,
            path=self.group_url(group),  # a form's answer links back to the group page, not to the form's URL
            title=self._("Group {group}", group=group),
            group=group,
            budgets=budgets,
            users=users,
            culled=culled,
            kueue=kueue,
            saved=self.get_query_argument("saved", ""),
            schedule={
                "reservations": self.reservation_rows(booked),
                "shares": self.share_rows(group_shares, group),
                "may_book": self.may_book(group),
                "pool": self.pool_words(),
                "limits": self._.sentences(limits_words(self.ctx, self.lang)),
                "models": sorted(m for m, n in self.ctx.gpu_pool.items() if n > 0),
                "error": booking_error,
                "form": {**dict.fromkeys(BOOKING_FIELDS, ""), **(booking or {})},
            },
            **self.summary(sessions, series, since, until),
        )


class GroupPage(GroupView):
    """``GET groups/NAME``: the group page (``custom:gpu-usage:read``, or ``!group=NAME``: its instructors)."""

    @web.authenticated
    async def get(self, group: str):
        self.check_group(group)  # refused before the cluster is read
        self.show(group, kueue=await kueue_section(self.ctx.kueue, [group], self._))


class ReservationFormHandler(GroupView):
    """``POST groups/NAME/reservations``: book for the group (``action=book``), or cancel one of its bookings
    (``action=cancel``, ``id``; ``back=admin`` from the admin page). XSRF-checked by JupyterHub.

    The booking is the same function as ``POST reservations`` (:func:`~..actions.schedule.book`) on the form's
    fields (times in the lab's zone): who may book for the group, each field, the pool, the group, the other
    bookings; a cancellation the same as ``DELETE reservations/ID`` (:func:`~..actions.schedule.cancel`). A
    refusal (400, 409) is shown above the form, with the form as it was sent, and stores nothing; a reader who
    may not book gets the 403 page.
    """

    @web.authenticated
    async def post(self, group: str):
        self.check_group(group)
        action = self.get_body_argument("action", "book")
        if action == "book":
            form = {k: self.get_body_argument(k, "").strip() for k in BOOKING_FIELDS}
            try:
                await book(self.ctx, self.caller, lambda: booking_body(group, form, self.ctx.tz), self.now())
            except web.HTTPError as e:
                if e.status_code not in FORM_REFUSALS:
                    raise
                self.show(group, e.status_code, booking_error=http_error_text(e), booking=form)
                return
            self.back_to(group, "reservation", admin=False)
        elif action == "cancel":
            rid = self.get_body_argument("id", "").strip()
            cancel(self.ctx, self.caller, rid, group)  # only a booking of this group; who may cancel it: the API's rule
            self.back_to(group, "reservation-cancelled", admin=self.get_body_argument("back", "") == "admin")
        else:
            raise web.HTTPError(400, f"action must be book or cancel, got {action!r}")

    def back_to(self, group: str, saved: str, admin: bool) -> None:
        window = {k: self.get_query_argument(k, "") for k in ("since", "until")}
        if admin:
            self.redirect(self.page_url("admin", **window, saved=saved) + "#schedule", status=303)
        else:
            self.redirect(self.group_url(group, **window, saved=saved) + "#reservations", status=303)
