"""Kueue mode's pure part: the option and the profile key checked, the LocalQueue a spawn goes to, the pod's
labels, what a Workload and the VisibilityOnDemand API say, and the words of the wait in English and Chinese."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyterhub_gpu.spawners.kube.kueue import (
    ADMISSION_GATE,
    KueueConfigError,
    KueueTarget,
    admitted,
    check_kueue_option,
    gated,
    in_kueue_mode,
    kueue_labels,
    kueue_profile_problems,
    missing_queue_phrase,
    position_in,
    queue_of,
    timeout_phrase,
    waiting_phrase,
    why_waiting,
    workload_of,
)
from jupyterhub_gpu.spawners.kube.pods import pod_bound_at
from jupyterhub_gpu.spawners.kube.spawner import GPUKubeSpawner
from jupyterhub_gpu.spawners.messages import Phrase
from jupyterhub_gpu.spawners.profiles import ProfileError, parse_profile, parse_profiles
from jupyterhub_gpu.spawners.startup import probe_and_check

IMAGE = "registry.example.edu/jupyterhub-gpu/tensorflow:2.15"


def profile(slug="t4", **extra):
    raw = {"slug": slug, "gpu_model": "T4", "gpu_count": 1, "image": IMAGE, "price_per_gpu_hour": "3.00", **extra}
    return parse_profile(raw, 0)


# -- the option ---------------------------------------------------------------------------


def test_a_good_option_is_kept_as_it_is():
    value = {"groups": {"cs231n": "cs231n-notebooks"}, "profiles": {"a100": "thesis"}, "default": "shared"}
    assert check_kueue_option(value) is value
    assert check_kueue_option({}) == {}
    assert check_kueue_option({"default": ""}) == {"default": ""}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ([], "c.GPUKubeSpawner.kueue must be a dict or a callable"),
        ({"group": {"a": "b"}}, "unknown key(s) 'group'; its keys are groups, profiles, default"),
        ({"groups": ["cs231n"]}, "c.GPUKubeSpawner.kueue['groups'] must map a name to a LocalQueue"),
        ({"groups": {"cs231n": "CS231N"}}, "c.GPUKubeSpawner.kueue['groups']['cs231n'] must be a Kubernetes object"),
        ({"profiles": {"t4": ""}}, "c.GPUKubeSpawner.kueue['profiles']['t4'] must be a Kubernetes object"),
        ({"groups": {"": "q"}}, "has a key that is not a name"),
        ({"default": "x" * 64}, "c.GPUKubeSpawner.kueue['default'] must be a Kubernetes object name"),
        ({"default": 3}, "c.GPUKubeSpawner.kueue['default'] must be a Kubernetes object name"),
    ],
)
def test_a_bad_option_is_refused_naming_it(value, says):
    with pytest.raises(KueueConfigError) as e:
        check_kueue_option(value)
    assert says in str(e.value)


def config(**options) -> Config:
    c = Config()
    c.GPUKubeSpawner.profiles = [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "image": IMAGE, "price_per_gpu_hour": "3.00"}
    ]
    for key, value in options.items():
        setattr(c.GPUKubeSpawner, key, value)
    return c


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("kueue", {"groups": {"cs231n": "Bad_Name"}}, "c.GPUKubeSpawner.kueue['groups']['cs231n'] must be"),
        ("kueue", "cs231n", "The 'kueue' trait of a GPUKubeSpawner instance expected a dict or a callable"),
        ("kueue_priority_class", "High", "c.GPUKubeSpawner.kueue_priority_class must be a Kubernetes object name"),
        ("kueue_preemptible_priority_class", "a b", "c.GPUKubeSpawner.kueue_preemptible_priority_class must be"),
        ("kueue_poll_interval", 0.1, "kueue_poll_interval must be from 0.5 to 60 seconds"),
    ],
)
def test_the_hubs_start_refuses_a_bad_kueue_setting_naming_the_option(option, value, says):
    probe, problems = probe_and_check(config(**{option: value}), GPUKubeSpawner)
    assert probe is None and len(problems) == 1 and says in problems[0], problems
    with pytest.raises(TraitError, match="kueue"):
        GPUKubeSpawner(config=config(**{option: value}), _mock=True)


def test_the_hubs_start_takes_good_settings_and_a_callable():
    good = {
        "kueue": {"groups": {"cs231n": "cs231n-notebooks"}, "profiles": {"t4": "t4-queue"}},
        "kueue_priority_class": "notebook-normal",
        "kueue_preemptible_priority_class": "notebook-preemptible",
    }
    assert GPUKubeSpawner.gpu_check_config(config(**good)) == []
    assert GPUKubeSpawner.gpu_check_config(config(kueue=lambda spawner: "q")) == []


def test_the_hubs_start_refuses_a_kueue_profile_that_is_not_one():
    problems = GPUKubeSpawner.gpu_check_config(config(kueue={"profiles": {"a100": "thesis"}}))
    assert problems == ["c.GPUKubeSpawner.kueue['profiles'] names 'a100', which is not a profile"]


def test_a_profile_names_its_local_queue_and_a_bad_name_is_refused():
    assert profile(kueue_queue="cs231n-notebooks").kueue_queue == "cs231n-notebooks"
    assert profile().kueue_queue is None
    for bad in ("CS231N", "", 3, "a" * 64):
        with pytest.raises(ProfileError, match="profile 't4': 'kueue_queue' must be the name of a LocalQueue"):
            profile(kueue_queue=bad)
    cpu = parse_profiles([{"slug": "cpu", "gpu_count": 0, "image": IMAGE, "kueue_queue": "q"}])
    assert kueue_profile_problems({}, cpu) == [
        "profile 'cpu': 'kueue_queue' is for GPU profiles (Kueue admits GPUs here)"
    ]


# -- which LocalQueue, which profiles -------------------------------------------------------


def test_kueue_mode_is_for_gpu_profiles_when_the_option_or_the_profile_says_so():
    cpu = parse_profile({"slug": "cpu", "gpu_count": 0, "image": IMAGE}, 0)
    assert not in_kueue_mode({}, profile())
    assert in_kueue_mode({"default": "q"}, profile())
    assert in_kueue_mode(lambda s: "q", profile())
    assert in_kueue_mode({}, profile(kueue_queue="q"))
    assert not in_kueue_mode({"default": "q"}, cpu)


def test_the_local_queue_comes_from_the_profile_then_its_slug_then_the_paying_group_then_the_default():
    kueue = {"groups": {"cs231n": "cs231n-q", "thesis": "thesis-q"}, "profiles": {"a100": "a100-q"}, "default": "d"}
    assert queue_of(kueue, profile(kueue_queue="own"), "cs231n") == "own"
    assert queue_of(kueue, profile("a100"), "cs231n") == "a100-q"
    assert queue_of(kueue, profile(), "thesis") == "thesis-q"
    # a paying group without a LocalQueue takes the default, never another group's quota
    assert queue_of(kueue, profile(), "hobby") == "d"
    assert queue_of(kueue, profile(), None) == "d"
    assert queue_of({"groups": {"cs231n": "q"}}, profile(), "hobby") is None
    assert queue_of({"groups": {"cs231n": "q"}}, profile(), None) is None


# -- the pod's labels and what Kueue says ------------------------------------------------------


def test_the_pod_carries_its_local_queue_and_priority_class():
    assert kueue_labels(KueueTarget("cs231n-q", "notebook-normal")) == {
        "kueue.x-k8s.io/queue-name": "cs231n-q",
        "kueue.x-k8s.io/priority-class": "notebook-normal",
    }
    assert kueue_labels(KueueTarget("cs231n-q")) == {"kueue.x-k8s.io/queue-name": "cs231n-q"}
    assert kueue_labels(None) == {}


#: a pod as the API server holds it while Kueue gates it
GATED_POD = {
    "metadata": {"name": "jupyter-alice", "uid": "u-1"},
    "spec": {"schedulingGates": [{"name": ADMISSION_GATE}]},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "SchedulingGated",
                "lastTransitionTime": "2026-12-07T10:00:00Z",
            }
        ],
    },
}


def test_a_gated_pod_is_not_bound_so_nothing_is_billed_while_it_waits():
    assert gated(GATED_POD)
    assert pod_bound_at(GATED_POD) is None
    admitted_pod = {
        "metadata": GATED_POD["metadata"],
        "spec": {"nodeName": "n"},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T10:05:00Z"}]
        },
    }
    assert not gated(admitted_pod)
    assert pod_bound_at(admitted_pod).isoformat() == "2026-12-07T10:05:00+00:00"


def workload(name="pod-jupyter-alice-1a2b3", uid="u-1", conditions=()):
    return {
        "metadata": {"name": name, "ownerReferences": [{"kind": "Pod", "name": "jupyter-alice", "uid": uid}]},
        "status": {"conditions": list(conditions)},
    }


QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor"
    " sim-gpu, 1 more needed"
)


def test_the_workload_of_the_pod_its_admission_and_kueues_reason():
    pending = workload(conditions=[{"type": "QuotaReserved", "status": "False", "message": QUOTA_MESSAGE}])
    assert workload_of([workload(uid="other"), pending], "u-1") is pending
    assert workload_of([workload(uid="other")], "u-1") is None
    assert not admitted(pending) and why_waiting(pending) == QUOTA_MESSAGE
    done = workload(
        conditions=[
            {"type": "QuotaReserved", "status": "True", "message": "Quota reserved in ClusterQueue cs231n"},
            {"type": "Admitted", "status": "True", "message": "The workload is admitted"},
        ]
    )
    assert admitted(done) and why_waiting(done) == ""
    assert why_waiting(None) == "" and not admitted(None)


def test_the_position_from_the_visibility_api():
    answer = {
        "items": [
            {"metadata": {"name": f"w{i}"}, "positionInLocalQueue": i, "positionInClusterQueue": i + 4}
            for i in range(7)
        ]
    }
    assert position_in(answer, "w2") == (3, 7)
    assert position_in(answer, "gone") is None
    assert position_in({"items": []}, "w2") is None


def test_the_words_of_the_wait_in_english_and_chinese():
    with_place = waiting_phrase("cs231n", (3, 7), "")
    assert with_place("en") == "Waiting in the cs231n queue (Kueue) — position 3 of 7"
    assert with_place("zh-CN") == "在 cs231n 队列（Kueue）中等待——第 3 位，共 7 位"
    why = waiting_phrase("cs231n", (3, 7), QUOTA_MESSAGE)
    assert why("en") == f"Waiting in the cs231n queue (Kueue) — position 3 of 7. Kueue says: {QUOTA_MESSAGE}"
    assert why("zh-CN") == f"在 cs231n 队列（Kueue）中等待——第 3 位，共 7 位。Kueue 说明：{QUOTA_MESSAGE}"
    assert waiting_phrase("cs231n", None, "")("zh-CN") == "在 cs231n 队列（Kueue）中等待"
    limit = Phrase("{n} minutes", n="10")
    assert timeout_phrase("cs231n", limit)("en") == (
        "Kueue did not admit this server from the cs231n queue within 10 minutes; nothing was started."
        " Try again later or choose another profile."
    )
    assert "cs231n" in timeout_phrase("cs231n", limit)("zh-CN") and "10" in timeout_phrase("cs231n", limit)("zh-CN")
    assert missing_queue_phrase("nope", "jhub")("en") == (
        "The Kueue queue nope does not exist in the namespace jhub; nothing was started."
        " Please tell your administrator."
    )
    assert "nope" in missing_queue_phrase("nope", "jhub")("zh-CN")
