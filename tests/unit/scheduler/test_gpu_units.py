"""The scheduler counts in the devices' own units (docs/scheduling.md#units).

A whole GPU is k shares of that GPU: stopping some of the shares on a GPU frees no whole GPU; shares and whole GPUs
of a model are one pool. Each answer to "what would this stop
free, and is it enough?" (grants, reservations, preemption, the estimate) is in GPUs.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from jupyterhub_gpu.scheduler import (
    END,
    GRANT,
    POLICIES,
    PREEMPT,
    PREEMPTIBLE,
    QUEUE,
    REFUSE,
    Policy,
    Preemption,
    Request,
    Reservation,
    Reservations,
    Running,
    SharedGPU,
    Snapshot,
    schedule,
)
from jupyterhub_gpu.scheduler import Fifo as FifoOrder

UTC = timezone.utc
NOW = datetime(2026, 9, 8, 13, 0, tzinfo=UTC)
TIER = POLICIES["fair-share+tier+reservations"]
TIER_ONLY = Policy("tier", FifoOrder(), Preemption())
RESERVE_ONLY = Policy("reservations", FifoOrder(), None, Reservations())
#: two T4s for CS231N from 14:00 (within the 24 h horizon of NOW)
CLASS = Reservation("cs", "cs231n", "T4", 2, NOW.replace(hour=14), NOW.replace(hour=16), label="CS231N")


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def share(sid, gpu="gpu-4", group="other", age=60, tier="standard", k=4, **kw) -> Running:
    """A session on one of k shares of the GPU ``gpu``."""
    return Running(sid, f"u-{sid}", group, "T4", ago(age), 1, "t4s", tier, share=k, device=gpu, **kw)


def whole(sid, group="other", age=60, tier="standard", count=1, **kw) -> Running:
    return Running(sid, f"u-{sid}", group, "T4", ago(age), count, "t4", tier, **kw)


def request(rid, group="A", k=1, count=1, tier="standard", waited=1) -> Request:
    return Request(rid, f"u-{rid}", group, "T4", ago(waited), count, "t4s" if k > 1 else "t4", tier, share=k)


def of(decisions, kind):
    return [d for d in decisions if d.kind == kind]


def four_shares_on(gpu="gpu-4", tier="standard", age=60):
    return [share(f"{gpu}-s{i}", gpu, tier=tier, age=age + i) for i in range(4)]


# -- reservations -------------------------------------------------------------------------------------------------


def test_four_share_students_on_one_t4_with_three_free_and_a_booking_of_two_get_no_end():
    """The issue's example: three T4s free and a class booking two; the fourth T4 holds four 1/4-T4 students."""
    snap = Snapshot(
        now=NOW,
        free={"T4": 3},
        pool={"T4": 4},
        running=four_shares_on(),
        shared=[SharedGPU("gpu-4", "T4", 4, 4)],
        reservations=[CLASS],
    )
    assert of(schedule(snap, TIER), END) == []


def test_a_booking_that_needs_a_split_gpu_ends_every_strangers_share_on_one_gpu_never_some_of_two():
    """Two T4s booked, one free, two T4s split into shares held by strangers: ending two shares on each GPU would free
    none; every share on one GPU ends (the most recently started GPU first), and a member's share there stays."""
    running = [
        *[share(f"a{i}", "gpu-a", age=100 + i) for i in range(4)],
        share("b0", "gpu-b", age=10),
        share("b1", "gpu-b", age=11),
        share("b-member", "gpu-b", group="cs231n", age=12),
    ]
    snap = Snapshot(
        now=NOW,
        free={"T4": 1},
        pool={"T4": 3},
        running=running,
        shared=[SharedGPU("gpu-a", "T4", 4, 4), SharedGPU("gpu-b", "T4", 4, 3)],
        reservations=[CLASS],
    )
    ends = of(schedule(snap, RESERVE_ONLY), END)
    assert sorted(d.session for d in ends) == ["b0", "b1"]
    assert {d.at for d in ends} == {NOW.replace(hour=13, minute=55)}


def test_a_split_gpu_gives_way_to_the_booking_of_its_members_only_its_strangers_share_ends():
    """The planner model's case: three T4s, CS231N booking one and OTHER two from 14:00; two T4s free, the third split
    between a thesis student's share and an OTHER member's. Ending the thesis share leaves the GPU to OTHER's member
    alone, which counts towards OTHER's booking, and the two free T4s serve the rest: the member's share is no
    stranger's to OTHER's booking and is not ended (not even for CS231N's, booked first)."""
    other = Reservation("ot", "other", "T4", 2, NOW.replace(hour=14), NOW.replace(hour=16), label="OTHER")
    cs = Reservation("cs", "cs231n", "T4", 1, NOW.replace(hour=14), NOW.replace(hour=16), label="CS231N")
    running = [share("thesis", "gpu-s", group="thesis", age=20), share("member", "gpu-s", group="other", age=10)]
    snap = Snapshot(now=NOW, free={"T4": 2}, pool={"T4": 3}, running=running, shared=[SharedGPU("gpu-s", "T4", 4, 2)],
                    reservations=[cs, other])  # fmt: skip
    ends = of(schedule(snap, RESERVE_ONLY), END)
    assert [(d.session, d.reservation) for d in ends] == [("thesis", "ot")]
    # two thesis students took the free T4s; an OTHER member asks to join the split GPU two minutes before the window:
    # it is not ended, so it may (a stranger would be, and is not granted a GPU it could keep for minutes)
    late = NOW.replace(hour=13, minute=58)
    for group, granted in (("other", ["j"]), ("thesis", [])):
        ask = Request("j", "u-j", group, "T4", late, 1, "t4s", share=4)
        snap = Snapshot(now=late, free={"T4": 0}, pool={"T4": 3}, running=[*running, whole("w1", "thesis", 5),
                        whole("w2", "thesis", 5)], shared=[SharedGPU("gpu-s", "T4", 4, 2)], reservations=[cs, other],
                        waiting=[ask])  # fmt: skip
        decisions = schedule(snap, RESERVE_ONLY)
        assert [d.request for d in of(decisions, GRANT)] == granted
        assert "j" not in {d.session for d in of(decisions, END)}


def test_a_split_gpu_whose_members_booking_is_full_is_freed_of_every_share():
    """CS231N's booking of one T4 is served by its member's whole T4; OTHER's booking of two needs the split T4 that a
    CS231N member and a thesis student share: both shares end (ending the thesis share alone would leave the GPU to
    a CS231N member beyond its booking, no T4 for OTHER)."""
    other = Reservation("ot", "other", "T4", 2, NOW.replace(hour=14), NOW.replace(hour=16), label="OTHER")
    cs = Reservation("cs", "cs231n", "T4", 1, NOW.replace(hour=14), NOW.replace(hour=16), label="CS231N")
    running = [
        whole("cs-whole", group="cs231n", age=90),
        share("cs-share", "gpu-s", group="cs231n", age=20),
        share("thesis", "gpu-s", group="thesis", age=10),
    ]
    snap = Snapshot(now=NOW, free={"T4": 1}, pool={"T4": 3}, running=running, shared=[SharedGPU("gpu-s", "T4", 4, 2)],
                    reservations=[cs, other])  # fmt: skip
    ends = of(schedule(snap, RESERVE_ONLY), END)
    assert sorted(d.session for d in ends) == ["cs-share", "thesis"]
    assert {d.reservation for d in ends} == {"ot"}


def test_a_gpu_with_a_share_of_a_server_not_yet_recorded_is_never_counted_as_freed_by_ends():
    """gpu-a has one share nobody listed (a grant still starting): ending the other three frees nothing, so the whole
    stranger is told its end instead."""
    running = [*[share(f"a{i}", "gpu-a", age=5) for i in range(3)], whole("w", age=200)]
    snap = Snapshot(
        now=NOW,
        free={"T4": 1},
        pool={"T4": 3},
        running=running,
        shared=[SharedGPU("gpu-a", "T4", 4, 4)],
        reservations=[CLASS],
    )
    assert [d.session for d in of(schedule(snap, RESERVE_ONLY), END)] == ["w"]


def test_a_stranger_does_not_join_the_shares_of_a_class_gpu_during_its_window_a_member_does():
    during = NOW.replace(hour=14, minute=10)
    members = [share(f"m{i}", "gpu-c", group="cs231n") for i in range(2)]
    snap = dict(
        now=during,
        free={"T4": 1},
        pool={"T4": 2},
        running=members,
        shared=[SharedGPU("gpu-c", "T4", 4, 2)],
        reservations=[CLASS],
    )
    stranger = schedule(Snapshot(waiting=[request("x", "other", k=4)], **snap), RESERVE_ONLY)
    assert of(stranger, GRANT) == []  # the free T4 is the class's second; the split one is the class's first
    member = schedule(Snapshot(waiting=[request("m", "cs231n", k=4)], **snap), RESERVE_ONLY)
    assert [d.request for d in of(member, GRANT)] == ["m"]


# -- grants and the pool ------------------------------------------------------------------------------------------


def test_shares_and_whole_gpus_of_a_model_are_one_pool():
    """A share joins a split GPU with a free share though no whole GPU is free; a whole request does not take a
    split GPU with free shares; a share takes a whole free GPU (and splits it) when no split GPU has room."""
    running = [share("s0", "gpu-1"), share("s1", "gpu-1"), whole("w", age=10)]
    split = [SharedGPU("gpu-1", "T4", 4, 2)]
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 2}, running=running, shared=split,
                    waiting=[request("q", k=4)])  # fmt: skip
    assert [d.request for d in of(schedule(snap, POLICIES["fifo"]), GRANT)] == ["q"]
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 2}, running=running, shared=split,
                    waiting=[request("whole")])  # fmt: skip
    decisions = schedule(snap, POLICIES["fifo"])
    assert of(decisions, GRANT) == [] and [d.request for d in of(decisions, QUEUE)] == ["whole"]
    full = [SharedGPU("gpu-1", "T4", 4, 4)]
    running = [*[share(f"s{i}", "gpu-1") for i in range(4)]]
    snap = Snapshot(now=NOW, free={"T4": 1}, pool={"T4": 2}, running=running, shared=full,
                    waiting=[request("a", k=4), request("b", k=4), request("c")])  # fmt: skip
    granted = [d.request for d in of(schedule(snap, POLICIES["fifo"]), GRANT)]
    assert granted == ["a", "b"]  # a splits the free T4, b joins it; c would need a whole one


def test_the_pool_counts_gpus_not_shares():
    running = four_shares_on()
    snap = Snapshot(now=NOW, free={"T4": 1}, running=running, shared=[SharedGPU("gpu-4", "T4", 4, 4)])
    assert snap.units() == {"T4": 2}
    # without a pool given, four shares naming no GPU fill one, not four
    snap = Snapshot(now=NOW, free={"T4": 1}, running=[share(f"s{i}", None) for i in range(4)])
    assert snap.units() == {"T4": 2}
    two = Snapshot(now=NOW, free={"T4": 1}, running=running, waiting=[request("r", count=2)])
    assert of(schedule(two, POLICIES["fifo"]), REFUSE) == []  # the pool has 2 GPUs
    three = Snapshot(now=NOW, free={"T4": 1}, running=running, waiting=[request("r", count=3)])
    assert [d.values["total"] for d in of(schedule(three, POLICIES["fifo"]), REFUSE)] == [2]


def test_the_last_share_of_a_gpu_stopping_makes_it_whole_again_in_the_same_cycle():
    told = [share("s0", "gpu-1", stop_at=NOW, stop_key="preempted"), share("s1", "gpu-1", stop_at=NOW,
            stop_key="preempted")]  # fmt: skip
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=told, shared=[SharedGPU("gpu-1", "T4", 4, 2)],
                    waiting=[request("whole")])  # fmt: skip
    assert [d.request for d in of(schedule(snap, POLICIES["fifo"]), GRANT)] == ["whole"]
    one_stays = [told[0], share("s1", "gpu-1")]
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=one_stays,
                    shared=[SharedGPU("gpu-1", "T4", 4, 2)], waiting=[request("whole")])  # fmt: skip
    assert of(schedule(snap, POLICIES["fifo"]), GRANT) == []


# -- preemption ---------------------------------------------------------------------------------------------------


def test_a_full_price_whole_request_preempts_preemptible_shares_only_when_that_empties_a_gpu():
    cheap = four_shares_on(tier=PREEMPTIBLE)
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=cheap, shared=[SharedGPU("gpu-4", "T4", 4, 4)],
                    waiting=[request("r")])  # fmt: skip
    preempts = of(schedule(snap, TIER_ONLY), PREEMPT)
    assert sorted(d.session for d in preempts) == sorted(s.id for s in cheap)
    assert {d.for_request for d in preempts} == {"r"}
    # one full-price share on the GPU: stopping the three others frees no T4, so none is stopped
    mixed = [*cheap[:3], share("full", "gpu-4")]
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=mixed, shared=[SharedGPU("gpu-4", "T4", 4, 4)],
                    waiting=[request("r")])  # fmt: skip
    assert of(schedule(snap, TIER_ONLY), PREEMPT) == []


def test_a_full_price_share_request_preempts_one_preemptible_share_else_a_preemptible_whole_gpu():
    split = [share("cheap", "gpu-1", tier=PREEMPTIBLE), *[share(f"f{i}", "gpu-1") for i in range(3)]]
    base = dict(now=NOW, free={"T4": 0}, pool={"T4": 2}, waiting=[request("r", k=4)])
    snap = Snapshot(running=[*split, whole("w", tier=PREEMPTIBLE)], shared=[SharedGPU("gpu-1", "T4", 4, 4)], **base)
    assert [d.session for d in of(schedule(snap, TIER_ONLY), PREEMPT)] == ["cheap"]
    full = [share(f"f{i}", "gpu-1") for i in range(4)]
    snap = Snapshot(running=[*full, whole("w", tier=PREEMPTIBLE)], shared=[SharedGPU("gpu-1", "T4", 4, 4)], **base)
    assert [d.session for d in of(schedule(snap, TIER_ONLY), PREEMPT)] == ["w"]


def test_the_estimate_of_a_whole_request_waits_for_the_last_share_of_a_gpu():
    running = [share("s0", "gpu-1", ends=NOW + timedelta(minutes=10)), share("s1", "gpu-1",
               ends=NOW + timedelta(minutes=30))]  # fmt: skip
    snap = Snapshot(now=NOW, free={"T4": 0}, pool={"T4": 1}, running=running, shared=[SharedGPU("gpu-1", "T4", 4, 2)],
                    waiting=[request("whole")])  # fmt: skip
    (queued,) = of(schedule(snap, POLICIES["fifo"]), QUEUE)
    assert queued.wait == timedelta(minutes=30)
