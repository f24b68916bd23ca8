"""The ledger keeps a session's pending stop reason by the one precedence rule, in one conditional UPDATE.

On sqlite and PostgreSQL (the fixture runs both). Two writers race the way the hub's scheduler, the service's
tick and a server's own report do: each through its own engine (its own process's connections), released at
once by a barrier.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from itertools import product

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart, StopReason, kept_stop_reason

T0 = datetime(2026, 12, 1, 5, 0, tzinfo=timezone.utc)


def start(ledger, sid):
    ledger.record_start(
        SessionStart(sid, "ann", "", ("cs231n",), "t4", ("GPU-0",), 20_000, "CNY", T0 - timedelta(hours=1))
    )


def test_every_pair_in_either_order_keeps_the_rules_reason(ledger):
    pairs = list(product(StopReason, repeat=2))
    for i, (first, second) in enumerate(pairs):
        start(ledger, f"s{i}")
        assert ledger.claim_stop_reason(f"s{i}", first) == first
        kept = kept_stop_reason(first, second)
        assert ledger.claim_stop_reason(f"s{i}", second) == kept, (first, second)
        assert ledger.get_session(f"s{i}").pending_stop_reason == kept, (first, second)


def test_the_stop_records_the_reason_that_won(ledger):
    start(ledger, "a")
    assert ledger.claim_stop_reason("a", StopReason.BUDGET) == StopReason.BUDGET
    assert ledger.claim_stop_reason("a", StopReason.PREEMPTED) == StopReason.BUDGET  # the writer learns it lost
    ledger.record_stop("a", T0, StopReason.STOPPED)  # the spawner's stop, which the budget pass asked for
    assert ledger.get_session("a").stop_reason == StopReason.BUDGET
    # a closed session takes no reason, and says so
    assert ledger.claim_stop_reason("a", StopReason.GPU_IDLE) is None
    assert ledger.claim_stop_reason("nobody", StopReason.GPU_IDLE) is None
    assert ledger.get_session("a").pending_stop_reason == StopReason.BUDGET


def test_an_unknown_reason_is_refused_and_changes_nothing(ledger):
    start(ledger, "a")
    with pytest.raises(ValueError, match="unknown stop reason"):
        ledger.claim_stop_reason("a", "idle")
    assert ledger.get_session("a").pending_stop_reason is None


RACES = [
    # (one writer, the other, what either order keeps)
    (StopReason.BUDGET, StopReason.PREEMPTED, {StopReason.BUDGET}),
    (StopReason.PREEMPTED, StopReason.JOB_TIME_LIMIT, {StopReason.JOB_TIME_LIMIT}),
    (StopReason.GPU_IDLE, StopReason.BUDGET, {StopReason.GPU_IDLE, StopReason.BUDGET}),
    (StopReason.STOP_WHEN_DONE, StopReason.RESERVED, {StopReason.STOP_WHEN_DONE, StopReason.RESERVED}),
]


@pytest.mark.parametrize(("one", "other", "outcomes"), RACES, ids=[f"{a}-{b}" for a, b, _ in RACES])
def test_two_writers_racing_keep_the_winner_and_both_learn_it(ledger, one, other, outcomes):
    second = Ledger(ledger.db_url, migrate=False)  # the other process
    try:
        for round_ in range(15):
            sid = f"race{round_}"
            start(ledger, sid)
            barrier = threading.Barrier(2)
            answers = {}

            def claim(writer, reason, sid=sid, barrier=barrier, answers=answers):
                barrier.wait()
                answers[reason] = writer.claim_stop_reason(sid, reason)

            threads = [
                threading.Thread(target=claim, args=(ledger, one)),
                threading.Thread(target=claim, args=(second, other)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            kept = ledger.get_session(sid).pending_stop_reason
            assert kept in outcomes
            loser = other if kept == one else one
            assert answers[kept] == kept, (round_, answers)
            if len(outcomes) == 1:
                # a reason that replaces the other in either order: the other won for a moment, or was told it lost
                assert answers[loser] in (loser, kept), (round_, answers)
            else:
                assert answers[loser] == kept, (round_, answers)  # the first stop stays, and the later writer knows
            ledger.record_stop(sid, T0, StopReason.STOPPED)
            assert ledger.get_session(sid).stop_reason == kept
    finally:
        second.close()
