"""config/kubernetes/values.yaml: the chart's image pullers pull every profile's image, on the GPU nodes too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from jupyterhub_gpu.spawners.kube.objects import GPU_TOLERATION
from jupyterhub_gpu.spawners.profiles import parse_profiles

VALUES = Path(__file__).resolve().parents[4] / "config" / "kubernetes" / "values.yaml"
#: a Kubernetes container name (the chart names each puller's init container image-pull-<key>)
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def image_of(entry: dict) -> str:
    return f"{entry['name']}:{entry['tag']}"


def test_the_pre_pullers_run_at_upgrade_and_on_new_nodes(values):
    puller = values["prePuller"]
    assert puller["hook"]["enabled"] is True and puller["hook"]["pullOnlyOnChanges"] is True
    assert puller["continuous"]["enabled"] is True
    # GPUKubeSpawner's profiles are not the chart's profileList (empty): the chart cannot find their images
    assert values["singleuser"]["profileList"] == [] and puller["pullProfileListImages"] is False


def test_extra_images_name_every_profile_image_and_no_other(values):
    profiles = parse_profiles(values["hub"]["config"]["GPUKubeSpawner"]["profiles"])
    extra = values["prePuller"]["extraImages"]
    assert {image_of(entry) for entry in extra.values()} == {p.image for p in profiles}
    for key, entry in extra.items():
        assert DNS_LABEL.match(f"image-pull-{key}") and len(f"image-pull-{key}") <= 63, key
        assert set(entry) == {"name", "tag"} and isinstance(entry["tag"], str), entry  # a tag 2.15, not 2.150


def test_the_pullers_tolerate_the_gpu_nodes_taint_as_the_gpu_pods_do(values):
    assert GPU_TOLERATION in values["prePuller"]["extraTolerations"]
