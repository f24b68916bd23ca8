"""``reservations`` and ``shares``: the schedule's state (docs/scheduling.md), to read and to book.

A booking keeps N GPUs of a model for a group in a window, once or weekly until a day; group shares are
fair-share weights per GPU model, set by admins. Who may read and book what, the order in which a booking is
checked and the changes are :mod:`jupyterhub_gpu.service.web.actions.schedule`'s (the usage pages' forms
call the same functions); here they are read from JSON and answered as JSON. The hub's scheduler reads both
from the ledger.
"""

from __future__ import annotations

from tornado import web

from jupyterhub_gpu.clock import isoformat
from jupyterhub_gpu.ledger.queries.schedule import StoredReservation, StoredShare, reservations, shares
from jupyterhub_gpu.service.web.actions.schedule import book, cancel, put_share, visible_groups
from jupyterhub_gpu.service.web.auth import BaseHandler


def reservation_json(r: StoredReservation) -> dict:
    return {
        "id": r.id,
        "group": r.group,
        "gpu_model": r.gpu_model,
        "count": r.count,
        "start": r.start.isoformat(),
        "end": r.end.isoformat(),
        "weekly_until": r.weekly_until.isoformat() if r.weekly_until else None,
        "created_by": r.created_by,
        "created_at": isoformat(r.created_at),
        "note": r.note,
    }


def share_json(s: StoredShare) -> dict:
    return {
        "group": s.group,
        "gpu_model": s.gpu_model,
        "share": s.share,
        "updated": isoformat(s.updated),
        "updated_by": s.updated_by,
    }


class ReservationsHandler(BaseHandler):
    """``GET reservations``: the bookings the caller may read; ``POST reservations``: book one."""

    @web.authenticated
    def get(self):
        visible = visible_groups(self.caller)
        found = reservations(self.ledger, self.ctx.tz, visible)
        self.write_json(
            {
                "timezone": self.ctx.tz.key,
                "pool": dict(sorted(self.ctx.gpu_pool.items())),
                "reservations": [reservation_json(r) for r in found],
            }
        )

    @web.authenticated
    async def post(self):
        stored = await book(self.ctx, self.caller, self.json_body, self.now())
        self.write_json({**reservation_json(stored), "timezone": self.ctx.tz.key}, 201)


class ReservationHandler(BaseHandler):
    """``DELETE reservations/{id}``: cancel a booking (admins; an instructor, their groups')."""

    @web.authenticated
    def delete(self, rid: str):
        cancel(self.ctx, self.caller, rid)
        self.set_status(204)
        self.finish()


class SharesHandler(BaseHandler):
    """``GET shares``: the groups' fair-share weights the caller may read; ``PUT shares``: set one (admins)."""

    @web.authenticated
    def get(self):
        self.write_json({"shares": [share_json(s) for s in shares(self.ledger, visible_groups(self.caller))]})

    @web.authenticated
    async def put(self):
        stored, existed = await put_share(self.ctx, self.caller, self.json_body, self.now())
        if stored is None:
            self.set_status(204)
            self.finish()
            return
        self.write_json(share_json(stored), 200 if existed else 201)
