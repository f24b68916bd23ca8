"""The quota a booked window moves between ClusterQueues (pure), and the record that makes it idempotent."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from traitlets.config import Config

from jupyterhub_gpu.scheduler.snapshot import Reservation
from jupyterhub_gpu.service.app import _unknown_options
from jupyterhub_gpu.service.kueue.cluster import ANNOTATION, QuotaError, patch_for, queue_of
from jupyterhub_gpu.service.kueue.plan import (
    KueueConfigError,
    Queue,
    Quota,
    changed,
    in_force,
    parse_config,
    plan,
)
from jupyterhub_gpu.service.kueue.settings import Kueue

UTC = timezone.utc
START = datetime(2026, 12, 8, 6, 0, tzinfo=UTC)
CONFIG = parse_config({"cs231n": "cs231n-cq", "thesis": "thesis-cq"}, {"T4": "t4"})


def booking(count=3, group="cs231n", rid="1", start=START, hours=2, weekly_until=None):
    return Reservation(rid, group, "T4", count, start, start + timedelta(hours=hours), weekly_until, "CS231N")


def queues(cs=2, thesis=2, lending=None, cohort="lab"):
    return [
        Queue("cs231n-cq", cohort, {"t4": Quota(cs)}),
        Queue("thesis-cq", cohort, {"t4": Quota(thesis, lending)}),
    ]


def applied(qs, targets):
    """The ClusterQueues once the targets are written (as the cluster would then hold them)."""
    by = {t.queue: t for t in targets}
    return [
        Queue(q.name, q.cohort, dict(t.quotas), dict(t.recorded), t.written) if (t := by.get(q.name)) else q for q in qs
    ]


def test_a_booking_above_the_quota_takes_the_rest_from_the_cohort():
    targets = {t.queue: t for t in plan(queues(), CONFIG, [booking(3)])}
    assert targets["cs231n-cq"].quotas == {"t4": Quota(3)}
    assert targets["thesis-cq"].quotas == {"t4": Quota(1)}
    # the admin's values are recorded on both, to be restored exactly
    assert targets["cs231n-cq"].recorded == {"t4": Quota(2)}
    assert targets["thesis-cq"].recorded == {"t4": Quota(2)}
    assert sum(t.quotas["t4"].nominal for t in targets.values()) == 4  # the cohort's GPUs stay the cluster's


def test_a_booking_within_the_quota_moves_nothing():
    assert plan(queues(), CONFIG, [booking(2)]) == []


def test_no_booking_and_nothing_recorded_moves_nothing():
    assert plan(queues(), CONFIG, []) == []


def test_after_the_window_every_quota_goes_back_to_the_recorded_value():
    moved = applied(queues(lending=2), plan(queues(lending=2), CONFIG, [booking(4)]))
    assert {q.name: q.quotas["t4"] for q in moved} == {"cs231n-cq": Quota(4), "thesis-cq": Quota(0, 0)}
    back = {t.queue: t for t in plan(moved, CONFIG, [])}
    assert back["cs231n-cq"].quotas == {"t4": Quota(2)} and back["cs231n-cq"].recorded == {}
    assert back["thesis-cq"].quotas == {"t4": Quota(2, 2)} and back["thesis-cq"].recorded == {}
    restored = applied(moved, back.values())
    assert plan(restored, CONFIG, []) == []


def test_applying_the_plan_again_changes_nothing():
    qs = queues()
    once = applied(qs, plan(qs, CONFIG, [booking(3)]))
    again = plan(once, CONFIG, [booking(3)])
    assert again and not any(changed(next(q for q in once if q.name == t.queue), t) for t in again)


def test_a_lending_limit_above_a_lowered_quota_is_lowered_with_it():
    targets = {t.queue: t for t in plan(queues(lending=2), CONFIG, [booking(3)])}
    assert targets["thesis-cq"].quotas == {"t4": Quota(1, 1)}
    assert targets["thesis-cq"].recorded == {"t4": Quota(2, 2)}


def test_a_queue_with_its_own_booking_gives_nothing_below_it():
    both = [booking(3), booking(2, group="thesis", rid="2")]
    targets = {t.queue: t for t in plan(queues(), CONFIG, both)}
    assert "thesis-cq" not in targets  # it keeps its 2 for its own booking
    assert targets["cs231n-cq"].quotas == {"t4": Quota(2)} or targets["cs231n-cq"].short == 1
    assert targets["cs231n-cq"].short == 1


def test_only_the_same_cohort_gives():
    qs = [Queue("cs231n-cq", "lab", {"t4": Quota(2)}), Queue("thesis-cq", "other", {"t4": Quota(2)})]
    targets = {t.queue: t for t in plan(qs, CONFIG, [booking(3)])}
    assert targets["cs231n-cq"].short == 1 and "thesis-cq" not in targets


def test_the_largest_spare_gives_first():
    config = parse_config({"cs231n": "a", "x": "b", "y": "c"}, {"T4": "t4"})
    qs = [Queue("a", "lab", {"t4": Quota(0)}), Queue("b", "lab", {"t4": Quota(1)}), Queue("c", "lab", {"t4": Quota(3)})]
    targets = {t.queue: t for t in plan(qs, config, [booking(2)])}
    assert targets["a"].quotas["t4"] == Quota(2)
    assert targets["c"].quotas["t4"] == Quota(1) and "b" not in targets


def test_a_group_without_a_queue_or_a_model_without_a_flavor_moves_nothing():
    other = Reservation("9", "ml101", "T4", 4, START, START + timedelta(hours=1))
    a100 = Reservation("8", "cs231n", "A100", 4, START, START + timedelta(hours=1))
    assert plan(queues(), CONFIG, [other, a100]) == []


def test_a_booking_is_in_force_from_its_start_less_the_lead_to_its_end():
    b = booking(3)
    lead = timedelta(minutes=5)
    assert in_force([b], START - timedelta(minutes=6), lead) == []
    assert in_force([b], START - timedelta(minutes=5), lead) == [b]
    assert in_force([b], START + timedelta(hours=1), lead) == [b]
    assert in_force([b], START + timedelta(hours=2), lead) == []
    weekly = booking(3, weekly_until=(START + timedelta(days=15)).date())
    assert in_force([weekly], START + timedelta(days=7, minutes=-1), lead) == [weekly]
    assert in_force([weekly], START + timedelta(days=21), lead) == []


# -- the ClusterQueue's JSON and its record ---------------------------------------------------------------


def cluster_queue(name, nominal, cohort="lab", lending=None, annotations=None, version="7"):
    resource = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if lending is not None:
        resource["lendingLimit"] = lending
    return {
        "metadata": {"name": name, "resourceVersion": version, "annotations": annotations or {}},
        "spec": {
            "cohortName": cohort,
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "t4",
                            "resources": [{"name": "cpu", "nominalQuota": "8"}, resource],
                        }
                    ],
                }
            ],
        },
    }


def merged(obj, patch):
    """The object after the JSON merge patch (what the API server does with our patch)."""
    out = json.loads(json.dumps(obj))
    annotations = out["metadata"].setdefault("annotations", {})
    for key, value in patch["metadata"]["annotations"].items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    out["spec"]["resourceGroups"] = patch["spec"]["resourceGroups"]
    return out


def test_a_service_restarted_in_the_window_reads_its_record_back_and_restores_exactly():
    objs = {"cs231n-cq": cluster_queue("cs231n-cq", 2), "thesis-cq": cluster_queue("thesis-cq", "2", lending="2")}
    qs = [queue_of(o, "nvidia.com/gpu") for o in objs.values()]
    for t in plan(qs, CONFIG, [booking(3)]):
        patch = patch_for(objs[t.queue], t, "nvidia.com/gpu")
        assert patch["metadata"]["resourceVersion"] == "7"  # never over an edit made meanwhile
        objs[t.queue] = merged(objs[t.queue], patch)
    gpu = objs["thesis-cq"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert gpu == [
        {"name": "cpu", "nominalQuota": "8"},
        {"name": "nvidia.com/gpu", "nominalQuota": "1", "lendingLimit": "1"},
    ]
    record = json.loads(objs["thesis-cq"]["metadata"]["annotations"][ANNOTATION])
    assert record["original"] == {"t4": {"nominal": 2, "lending": 2}}
    # a new service process: only the cluster's objects
    again = [queue_of(o, "nvidia.com/gpu") for o in objs.values()]
    assert not any(changed(next(q for q in again if q.name == t.queue), t) for t in plan(again, CONFIG, [booking(3)]))
    for t in plan(again, CONFIG, []):
        objs[t.queue] = merged(objs[t.queue], patch_for(objs[t.queue], t, "nvidia.com/gpu"))
    assert ANNOTATION not in objs["thesis-cq"]["metadata"]["annotations"]
    res = objs["thesis-cq"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    assert res == {"name": "nvidia.com/gpu", "nominalQuota": "2", "lendingLimit": "2"}
    assert objs["cs231n-cq"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] == "2"


def test_a_quota_that_is_not_a_whole_number_is_refused_with_its_queue_named():
    with pytest.raises(QuotaError, match="ClusterQueue cs231n-cq, flavor t4: nominalQuota"):
        queue_of(cluster_queue("cs231n-cq", "1500m"), "nvidia.com/gpu")
    with pytest.raises(QuotaError, match="annotation cannot be read"):
        queue_of(cluster_queue("cs231n-cq", 2, annotations={ANNOTATION: "{"}), "nvidia.com/gpu")


def test_the_v1beta1_cohort_field_is_read_too():
    obj = cluster_queue("a", 1)
    obj["spec"]["cohort"] = obj["spec"].pop("cohortName")
    assert queue_of(obj, "nvidia.com/gpu").cohort == "lab"


# -- the settings ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"cluster_queues": {"cs231n": "CS231N"}}, r"c.Kueue.cluster_queues\['cs231n'\] must be a ClusterQueue name"),
        ({"cluster_queues": ["cs231n"]}, "cluster_queues. trait of a Kueue instance expected a dict"),
        ({"flavors": {"T4": ""}}, r"c.Kueue.flavors\['T4'\] must be a ResourceFlavor name"),
        ({"gpu_resource": "nvidia.com/ gpu"}, "c.Kueue.gpu_resource must be a resource name"),
        ({"lead_seconds": -1}, "c.Kueue.lead_seconds must be 0 to 86400"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(settings, message):
    with pytest.raises(Exception, match=message):
        Kueue(**settings)


def test_groups_without_flavors_are_refused():
    with pytest.raises(KueueConfigError, match=r"c\.Kueue\.flavors is empty"):
        Kueue(cluster_queues={"cs231n": "cs231n-cq"}).quota_config()
    assert Kueue(cluster_queues={"cs231n": "a"}, flavors={"T4": "t4"}).quota_config().queues == {"cs231n": "a"}


def test_the_service_reads_its_kueue_section_and_still_refuses_a_misspelt_option():
    config = Config({"Kueue": {"cluster_queues": {"cs231n": "cs231n"}, "flavors": {"T4": "gpu-t4"}}})
    assert _unknown_options(config, "gpu_service_config.py") == []
    config = Config({"Kueue": {"cluster_queue": {"cs231n": "cs231n"}}})
    (problem,) = _unknown_options(config, "gpu_service_config.py")
    assert "Kueue.cluster_queue (in gpu_service_config.py) is not an option" in problem
