"""The one precedence rule of stop reasons (:func:`jupyterhub_gpu.session.kept_stop_reason`), over every pair.

The pairs are generated from :class:`StopReason`, so a reason added later is in every pair at once, and it
cannot be forgotten: it must be given a kind (:data:`STOP_KINDS`) first. The table the rule is checked against
is written here again by hand, by kind, as docs/admin.md shows it.
"""

from __future__ import annotations

from itertools import product

import pytest

from jupyterhub_gpu.session import (
    CULL_REASONS,
    STOP_KINDS,
    USER_STOP_REASONS,
    StopKind,
    StopReason,
    kept_stop_reason,
)

PAIRS = list(product(StopReason, repeat=2))

# pending kind (row) x new kind (column): "new" where the new reason replaces the pending one
OBSERVED, BY_HAND, SAID_DONE, SERVICE, COMES_BACK = StopKind
REPLACES = {
    #          observed by hand said done service comes back
    OBSERVED: (False, False, True, True, True),
    BY_HAND: (False, False, False, False, False),
    SAID_DONE: (False, False, True, False, False),
    SERVICE: (False, False, False, False, False),
    COMES_BACK: (False, False, True, True, False),
}


def test_every_reason_has_a_kind():
    assert set(STOP_KINDS) == set(StopReason)
    assert all(isinstance(kind, StopKind) for kind in STOP_KINDS.values())


@pytest.mark.parametrize(("pending", "new"), PAIRS, ids=[f"{p}-then-{n}" for p, n in PAIRS])
def test_each_pair_in_each_order_keeps_the_reason_of_the_table(pending, new):
    kept = kept_stop_reason(pending, new)
    assert kept in (pending, new)
    replaces = REPLACES[STOP_KINDS[pending]][list(StopKind).index(STOP_KINDS[new])] and new != pending
    assert kept == (new if replaces else pending)
    # the rule is settled once: the same reason again changes nothing
    assert kept_stop_reason(kept, new) == kept


def test_a_budget_stop_is_never_turned_into_a_preemption_in_either_order():
    """A preempted job is requeued: for a user with no budget its spawn is refused and the budget stop is lost."""
    assert kept_stop_reason(StopReason.BUDGET, StopReason.PREEMPTED) == StopReason.BUDGET
    assert kept_stop_reason(StopReason.PREEMPTED, StopReason.BUDGET) == StopReason.BUDGET
    for pending, new in PAIRS:
        if StopReason.PREEMPTED in (pending, new) and pending != new:
            other = new if pending == StopReason.PREEMPTED else pending
            if STOP_KINDS[other] not in (StopKind.OBSERVED, StopKind.BY_HAND):
                # only a preemption brings a server back: any reason that ends the work for good keeps it ended
                assert kept_stop_reason(pending, new) == other, (pending, new)
    # the hub's stop, which carries out a preemption, does not turn it into the student's own stop
    assert kept_stop_reason(StopReason.PREEMPTED, StopReason.STOPPED) == StopReason.PREEMPTED


def test_a_stop_under_way_is_not_relabelled_by_a_later_pass():
    service = [*CULL_REASONS, StopReason.BUDGET, StopReason.JOB_TIME_LIMIT, StopReason.RESERVED]
    for pending, new in product(service, [*service, *USER_STOP_REASONS, StopReason.STOPPED, StopReason.PREEMPTED]):
        assert kept_stop_reason(pending, new) == pending, (pending, new)
    # the student's own stop (the hub's stop button) stays what it is, whatever comes later
    for new in StopReason:
        assert kept_stop_reason(StopReason.STOPPED, new) == StopReason.STOPPED
    # the student's run or server said it is done and stops: a service pass does not relabel it
    for pending, new in product(USER_STOP_REASONS, service):
        assert kept_stop_reason(pending, new) == pending, (pending, new)


def test_what_the_recorder_saw_never_replaces_the_reason_asked_for():
    seen = [StopReason.STOPPED, StopReason.EXITED, StopReason.RECONCILED, StopReason.ORPHANED]
    for pending, new in product(StopReason, seen):
        assert kept_stop_reason(pending, new) == pending
    for new in StopReason:
        assert kept_stop_reason(None, new) == new


def test_a_server_s_later_word_replaces_its_earlier_one():
    assert kept_stop_reason(StopReason.STOP_WHEN_DONE, StopReason.PLATEAU) == StopReason.PLATEAU
    assert kept_stop_reason(StopReason.PLATEAU, StopReason.STOP_WHEN_DONE) == StopReason.STOP_WHEN_DONE


def test_an_unknown_reason_is_refused_and_an_unknown_pending_one_stays():
    with pytest.raises(ValueError, match="unknown stop reason 'idle'"):
        kept_stop_reason(None, "idle")
    assert kept_stop_reason("idle", StopReason.BUDGET) == "idle"  # written by an older version: a stop under way
    assert kept_stop_reason("budget", "preempted") == StopReason.BUDGET  # the ledger's strings work as members
