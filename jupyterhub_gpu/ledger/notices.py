"""The ledger's alerts sent (claimed once per period and budget revision) and the in-Lab notices.

:class:`NoticeBook` is a part of :class:`~jupyterhub_gpu.ledger.store.Ledger` (its ``Session``): an alert is
claimed before it is sent and released when sending fails, so that it is sent once, or tried again.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from jupyterhub_gpu.clock import naive_utc
from jupyterhub_gpu.ledger.models import AlertSent, Notice


class NoticeBook:
    """Alerts claimed and released, notices added, listed and dismissed (a part of the ``Ledger``)."""

    def claim_alert(
        self,
        user: str,
        budget_key: str,
        period_start: datetime,
        threshold: int,
        channel: str,
        now: datetime,
        revision: str = "",
    ) -> bool:
        """Record an alert before sending it; False if it was already sent (once per period and budget revision)."""
        with self.Session() as db:
            db.add(
                AlertSent(
                    user=user,
                    budget_key=budget_key,
                    period_start=naive_utc(period_start),
                    threshold=threshold,
                    channel=channel,
                    sent=naive_utc(now),
                    revision=revision,
                )
            )
            try:
                db.commit()
            except IntegrityError:
                db.rollback()
                return False
        return True

    def alerts_since(self, since: datetime) -> list[AlertSent]:
        """Alerts of the periods that start at or after ``since`` (read once per tick)."""
        with self.Session() as db:
            return list(db.scalars(select(AlertSent).where(AlertSent.period_start >= naive_utc(since))))

    def final_notices_before(self, period_start: datetime, sent_since: datetime) -> list[AlertSent]:
        """100% Lab notices of periods before ``period_start`` sent at or after ``sent_since`` (stops still due)."""
        query = select(AlertSent).where(
            AlertSent.threshold == 100,
            AlertSent.channel == "lab",
            AlertSent.period_start < naive_utc(period_start),
            AlertSent.sent >= naive_utc(sent_since),
        )
        with self.Session() as db:
            return list(db.scalars(query))

    def alerts(self, user: str | None = None) -> list[AlertSent]:
        query = select(AlertSent).order_by(AlertSent.id)
        if user is not None:
            query = query.where(AlertSent.user == user)
        with self.Session() as db:
            return list(db.scalars(query))

    def release_alert(
        self, user: str, budget_key: str, period_start: datetime, threshold: int, channel: str, revision: str = ""
    ) -> bool:
        """Undo :meth:`claim_alert` after a failed send, so that the alert is tried again."""
        with self.Session() as db:
            changed = db.execute(
                delete(AlertSent).where(
                    AlertSent.user == user,
                    AlertSent.budget_key == budget_key,
                    AlertSent.period_start == naive_utc(period_start),
                    AlertSent.threshold == threshold,
                    AlertSent.channel == channel,
                    AlertSent.revision == revision,
                )
            ).rowcount
            db.commit()
            return bool(changed)

    def add_notice(
        self, user: str, kind: str, message: str, now: datetime, level: str = "info", session_id: str | None = None
    ) -> Notice:
        with self.Session() as db:
            notice = Notice(
                user=user, kind=kind, level=level, message=message, created=naive_utc(now), session_id=session_id
            )
            db.add(notice)
            db.commit()
            return notice

    def notices(self, user: str, include_dismissed: bool = False) -> list[Notice]:
        query = select(Notice).where(Notice.user == user).order_by(Notice.id)
        if not include_dismissed:
            query = query.where(Notice.dismissed.is_(False))
        with self.Session() as db:
            return list(db.scalars(query))

    def dismiss_notice(self, user: str, notice_id: int) -> bool:
        with self.Session() as db:
            changed = db.execute(
                update(Notice).where(Notice.id == notice_id, Notice.user == user).values(dismissed=True)
            ).rowcount
            db.commit()
            return bool(changed)
