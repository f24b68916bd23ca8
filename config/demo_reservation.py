"""The demo's sample class reservation, booked by ``make demo`` before the hub starts (docs/scheduling.md).

Kept out of demo_config.py: loading a configuration (the doctor, the tests) must never write to the ledger.

    .venv/bin/python config/demo_reservation.py
"""

import os


def book_sample_reservation(ledger_url: str, zone: str) -> None:
    """The demo's sample class reservation: 1 T4 for CS231N, Tuesdays 14:00-16:00 (the lab's time) for 15 weeks,
    booked once with the same checks as the REST API (docs/scheduling.md); a demo that has one keeps it."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from jupyterhub_gpu.clock import utcnow
    from jupyterhub_gpu.ledger.queries import schedule as rows
    from jupyterhub_gpu.ledger.store import Ledger
    from jupyterhub_gpu.scheduler import Reservation, check_reservation

    ledger = Ledger(ledger_url)
    try:
        tz = ZoneInfo(zone)
        if rows.reservations(ledger, tz):
            return
        today = datetime.now(tz).date()
        tuesday = today + timedelta(days=(1 - today.weekday()) % 7)
        start = datetime(tuesday.year, tuesday.month, tuesday.day, 14, tzinfo=tz)
        booking = Reservation(
            "new", "cs231n", "T4", 1, start, start + timedelta(hours=2), start.date() + timedelta(weeks=15), "CS231N"
        )
        pool = {"T4": 2, "A100": 1}
        check_reservation(booking, [], pool, {"cs231n", "thesis"})
        draft = rows.Draft("cs231n", "T4", 1, booking.start, booking.end, booking.weekly_until, "CS231N")
        rows.add_reservation(ledger, draft, lambda existing: None, tz, utcnow(), "demo")
    finally:
        ledger.close()


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    state = os.environ.get("JUPYTERHUB_GPU_DEMO_STATE", os.path.join(root, ".state", "demo"))
    os.makedirs(state, exist_ok=True)
    book_sample_reservation(f"sqlite:///{os.path.join(state, 'jupyterhub_gpu.sqlite')}", "Asia/Shanghai")
