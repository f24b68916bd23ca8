"""Pure builders of a GPU pod's pieces on Kubernetes, compared as whole dicts, and the schema check."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.spawners.kube.objects import (
    SHARED_RESOURCE,
    SchemaError,
    enforce_pod_policy,
    format_cpu,
    gpu_resource_for,
    make_kube_env,
    make_pod_labels,
    make_resources,
    make_scheduling,
    make_security_contexts,
    make_storage,
    resource_name_problem,
    strip_gpu_resources,
    unit_resource,
    validate_object,
)
from tests.unit.spawners.kube.test_kube_spawner import kubeconfig  # noqa: F401  (KubeSpawner needs a client config)

GIB = 1024**3


@pytest.mark.parametrize(
    "model, expected",
    [
        ("A100", ("nvidia.com/gpu", "A100")),
        ("Tesla T4", ("nvidia.com/gpu", "Tesla T4")),
        ("1g.10gb", ("nvidia.com/mig-1g.10gb", "")),
        ("A100 MIG 1g.10gb", ("nvidia.com/mig-1g.10gb", "A100")),
        ("H100-MIG-3G.40GB", ("nvidia.com/mig-3g.40gb", "H100")),
    ],
)
def test_gpu_resource_for(model, expected):
    assert gpu_resource_for(model) == expected


def test_format_cpu():
    assert [format_cpu(v) for v in (4, 4.0, 0.5, 1.25, 16)] == ["4", "4", "500m", "1250m", "16"]


def test_resources_one_gpu():
    assert make_resources(gpu_resource="nvidia.com/gpu", gpu_count=1, cpu_limit=4.0, mem_limit=16 * GIB) == {
        "limits": {"cpu": "4", "memory": "17179869184", "nvidia.com/gpu": "1"},
        "requests": {"cpu": "4", "memory": "17179869184", "nvidia.com/gpu": "1"},
    }


def test_resources_mig_slice_and_cpu_only():
    assert make_resources(gpu_resource="nvidia.com/mig-1g.10gb", gpu_count=1, cpu_limit=0.5, mem_limit=None) == {
        "limits": {"cpu": "500m", "nvidia.com/mig-1g.10gb": "1"},
        "requests": {"cpu": "500m", "nvidia.com/mig-1g.10gb": "1"},
    }
    assert make_resources(gpu_resource="", gpu_count=0, cpu_limit=None, mem_limit=None) == {
        "limits": {},
        "requests": {},
    }


def test_scheduling_one_product_uses_a_node_selector():
    assert make_scheduling(gpu_resource="nvidia.com/gpu", gpu_count=1, products=["NVIDIA-A100-SXM4-40GB"]) == {
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
        "node_affinity_required": [],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def test_scheduling_several_products_use_a_required_affinity_and_extra_tolerations():
    extra = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert make_scheduling(
        gpu_resource="nvidia.com/gpu",
        gpu_count=2,
        products=["NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"],
        extra_tolerations=extra,
    ) == {
        "node_selector": {},
        "node_affinity_required": [
            {
                "matchExpressions": [
                    {
                        "key": "nvidia.com/gpu.product",
                        "operator": "In",
                        "values": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"],
                    }
                ]
            }
        ],
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        ],
    }


def test_scheduling_cpu_only_stays_off_gpu_nodes():
    assert make_scheduling(gpu_resource="", gpu_count=0, products=["X"], extra_tolerations=[{"key": "k"}]) == {
        "node_selector": {},
        "node_affinity_required": [],
        "tolerations": [],
    }


def test_security_contexts():
    pod, container = make_security_contexts(uid=1000, gid=100, fs_gid=100)
    assert pod == {
        "runAsUser": 1000,
        "runAsGroup": 100,
        "runAsNonRoot": True,
        "fsGroup": 100,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container == {
        "runAsUser": 1000,
        "runAsGroup": 100,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }
    with pytest.raises(ValueError, match="non-root"):
        make_security_contexts(uid=0, gid=0, fs_gid=0)


def test_storage_with_and_without_datasets():
    assert make_storage(
        pvc_name="claim-alice", work_dir="/home/jovyan/work", datasets_claim="lab-datasets", datasets_dir="/d"
    ) == (
        [
            {"name": "work", "persistentVolumeClaim": {"claimName": "claim-alice"}},
            {"name": "datasets", "persistentVolumeClaim": {"claimName": "lab-datasets", "readOnly": True}},
        ],
        [
            {"name": "work", "mountPath": "/home/jovyan/work"},
            {"name": "datasets", "mountPath": "/d", "readOnly": True},
        ],
    )
    assert make_storage(pvc_name="c", work_dir="/w", datasets_claim=None, datasets_dir="/d") == (
        [{"name": "work", "persistentVolumeClaim": {"claimName": "c"}}],
        [{"name": "work", "mountPath": "/w"}],
    )


def test_pod_labels_and_bad_values():
    assert make_pod_labels(profile_slug="a100", session_id="0123abcd") == {
        "jupyterhub-gpu/managed": "true",
        "jupyterhub-gpu/profile": "a100",
        "jupyterhub-gpu/session-id": "0123abcd",
    }
    with pytest.raises(ValueError, match="label"):
        make_pod_labels(profile_slug="a" * 64, session_id="x")


BASE_ENV = {
    "NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu:0",
    "CUDA_VISIBLE_DEVICES": "nvidia.com/gpu:0",
    "JUPYTERHUB_GPU_DEVICES": "nvidia.com/gpu:0",
    "JUPYTERHUB_GPU_DEVICE_INFO": '[{"index": "0"}]',
    "JUPYTERHUB_GPU_PROFILE": "a100",
}


def test_env_of_a_gpu_pod_leaves_the_devices_to_the_device_plugin():
    assert make_kube_env(BASE_ENV, gpu_count=2, gpu_resource="nvidia.com/gpu") == {
        "JUPYTERHUB_GPU_DEVICES": "",
        "JUPYTERHUB_GPU_DEVICE_INFO": "[]",
        "JUPYTERHUB_GPU_DEVICE_DISCOVERY": "nvml",
        "JUPYTERHUB_GPU_READER": "nvml",
        "JUPYTERHUB_GPU_COUNT": "2",
        "JUPYTERHUB_GPU_RESOURCE": "nvidia.com/gpu",
        "JUPYTERHUB_GPU_PROFILE": "a100",
    }


def test_env_of_a_share_or_slice_carries_its_cap_and_what_it_is_and_a_whole_gpu_neither():
    # what the mixin wrote from the placeholders (none of them a share) is replaced by what the cluster says
    env = {**BASE_ENV, "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB": "99", "JUPYTERHUB_GPU_SHARE": "1/99"}
    share = make_kube_env(env, gpu_count=1, gpu_resource=SHARED_RESOURCE, memory_limit_mib=3840, share="1/4")
    assert {
        k: share[k] for k in ("JUPYTERHUB_GPU_RESOURCE", "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB", "JUPYTERHUB_GPU_SHARE")
    } == {
        "JUPYTERHUB_GPU_RESOURCE": "nvidia.com/gpu.shared",
        "JUPYTERHUB_GPU_MEMORY_LIMIT_MIB": "3840",
        "JUPYTERHUB_GPU_SHARE": "1/4",
    }
    mig = make_kube_env(
        BASE_ENV, gpu_count=1, gpu_resource="nvidia.com/mig-1g.10gb", memory_limit_mib=9728, share="mig:1g.10gb"
    )
    assert (mig["JUPYTERHUB_GPU_MEMORY_LIMIT_MIB"], mig["JUPYTERHUB_GPU_SHARE"]) == ("9728", "mig:1g.10gb")
    for whole in (
        make_kube_env(env, gpu_count=1, gpu_resource="nvidia.com/gpu"),
        make_kube_env(env, gpu_count=0, gpu_resource="", memory_limit_mib=3840, share="1/4"),  # no GPU, no cap
    ):
        assert not {"JUPYTERHUB_GPU_MEMORY_LIMIT_MIB", "JUPYTERHUB_GPU_SHARE"} & set(whole)


@pytest.mark.parametrize(
    "model, unit, shared_resource, expected",
    [
        ("A100", {"mig": "1g.10gb"}, SHARED_RESOURCE, ("nvidia.com/mig-1g.10gb", "A100")),
        ("A100 MIG", {"mig": "3g.40gb"}, SHARED_RESOURCE, ("nvidia.com/mig-3g.40gb", "A100")),
        ("T4", {"share": 4}, SHARED_RESOURCE, ("nvidia.com/gpu.shared", "T4")),
        ("T4", {"share": 4}, "nvidia.com/gpu", ("nvidia.com/gpu", "T4")),
        ("Tesla T4", {}, SHARED_RESOURCE, ("nvidia.com/gpu", "Tesla T4")),
        ("A100 MIG 1g.10gb", {}, SHARED_RESOURCE, ("nvidia.com/mig-1g.10gb", "A100")),
    ],
)
def test_unit_resource(model, unit, shared_resource, expected):
    assert unit_resource(model, shared_resource=shared_resource, **unit) == expected


def test_resource_names_a_share_may_ask_for():
    for good in ("nvidia.com/gpu.shared", "nvidia.com/gpu", "example.edu/t4_share.v2"):
        assert resource_name_problem(good) is None, good
    for bad, why in (
        ("gpu", "must be an extended resource name"),
        ("NVIDIA.com/gpu", "must be an extended resource name"),
        ("nvidia.com/", "must be an extended resource name"),
        ("nvidia.com/gpu-", "must be an extended resource name"),
        ("nvidia.com/" + "x" * 64, "must be an extended resource name"),
        ("kubernetes.io/gpu", "kubernetes.io domain"),
        ("example.kubernetes.io/gpu", "kubernetes.io domain"),
        ("nvidia.com/mig-1g.10gb", "names a MIG slice"),
        (None, "must be a string"),
    ):
        assert why in (resource_name_problem(bad) or ""), bad


def test_sidecars_get_no_renamed_shared_resource_either():
    resources = {"limits": {"example.edu/t4-share": "1", "nvidia.com/gpu": "1", "cpu": "1"}, "requests": {"cpu": "1"}}
    assert strip_gpu_resources(resources, ("example.edu/t4-share",)) == {
        "limits": {"cpu": "1"},
        "requests": {"cpu": "1"},
    }
    assert strip_gpu_resources(resources)["limits"] == {"example.edu/t4-share": "1", "cpu": "1"}


def test_env_of_a_cpu_pod_hides_every_gpu():
    env = {**BASE_ENV, "NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0"}
    assert make_kube_env(env, gpu_count=0, gpu_resource="") == {
        **BASE_ENV,
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_VISIBLE_DEVICES": "",
        "JUPYTERHUB_GPU_COUNT": "0",
    }


def _pod(**spec):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-alice"},
        "spec": {
            "containers": [
                {
                    "name": "notebook",
                    "image": "img:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}, "runAsUser": 0},
                },
                {
                    "name": "sidecar",
                    "image": "side:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}, "requests": {"cpu": "1"}},
                },
            ],
            **spec,
        },
    }


def test_enforce_pod_policy_overrides_admin_extras():
    pod_sc, container_sc = make_security_contexts(uid=1000, gid=100, fs_gid=100)
    resources = make_resources(gpu_resource="nvidia.com/gpu", gpu_count=1, cpu_limit=None, mem_limit=None)
    out = enforce_pod_policy(
        _pod(
            hostNetwork=True,
            hostPID=True,
            securityContext={"runAsUser": 0, "sysctls": [{"name": "a", "value": "b"}]},
            initContainers=[{"name": "init", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        ),
        pod_security=pod_sc,
        container_security=container_sc,
        resources=resources,
    )
    assert out == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-alice"},
        "spec": {
            "securityContext": {**pod_sc, "sysctls": [{"name": "a", "value": "b"}]},
            "containers": [
                {
                    "name": "notebook",
                    "image": "img:1",
                    "resources": resources,
                    # drop ALL replaces the capabilities: the admin's "add" is gone too
                    "securityContext": container_sc,
                },
                {
                    "name": "sidecar",
                    "image": "side:1",
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}},
                    "securityContext": container_sc,
                },
            ],
            # init containers run in the pod too: the same securityContext as the notebook's
            "initContainers": [
                {"name": "init", "image": "i", "resources": {"limits": {}}, "securityContext": container_sc}
            ],
            "automountServiceAccountToken": False,
        },
    }
    validate_object(out, "V1Pod")


def test_enforce_pod_policy_removes_every_way_out_of_the_pod():
    """What extras may not weaken: shared process namespace, hostPath, the token, and the rest of the class."""
    pod_sc, container_sc = make_security_contexts(uid=1000, gid=100, fs_gid=100)
    resources = make_resources(gpu_resource="nvidia.com/gpu", gpu_count=1, cpu_limit=None, mem_limit=None)
    weak_context = {
        "privileged": True,
        "runAsUser": 0,
        "procMount": "Unmasked",
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
        "seLinuxOptions": {"type": "spc_t"},
        "windowsOptions": {"hostProcess": True},
        "readOnlyRootFilesystem": True,  # only tightens: kept
    }
    host_mount = {"name": "node-root", "mountPath": "/host"}
    pod = _pod(
        shareProcessNamespace=True,
        hostIPC=True,
        automountServiceAccountToken=True,
        serviceAccountName="hub",
        securityContext={
            "runAsUser": 0,
            "supplementalGroups": [0, 4242],
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
            "seLinuxOptions": {"type": "spc_t"},
        },
        volumes=[
            {"name": "node-root", "hostPath": {"path": "/"}},
            {"name": "sock", "hostPath": {"path": "/var/run/containerd/containerd.sock", "type": "Socket"}},
            {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "scratch", "emptyDir": {}},
        ],
        initContainers=[
            {
                "name": "init",
                "image": "i",
                "securityContext": weak_context,
                "volumeMounts": [host_mount, {"name": "scratch", "mountPath": "/scratch"}],
            }
        ],
    )
    pod["spec"]["containers"][0]["volumeMounts"] = [
        host_mount,
        {"name": "sock", "mountPath": "/run/c.sock"},
        {"name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
    ]
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 8888, "hostPort": 8888, "hostIP": "0.0.0.0"}]
    pod["spec"]["containers"][1]["securityContext"] = weak_context
    out = enforce_pod_policy(pod, pod_security=pod_sc, container_security=container_sc, resources=resources)
    spec = out["spec"]
    for field in ("shareProcessNamespace", "hostIPC", "hostNetwork", "hostPID"):
        assert field not in spec
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {**pod_sc, "supplementalGroups": [4242]}
    assert spec["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    notebook, sidecar = spec["containers"]
    (init,) = spec["initContainers"]
    assert notebook["volumeMounts"] == []
    assert notebook["ports"] == [{"containerPort": 8888}]
    assert init["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    assert sidecar["securityContext"] == init["securityContext"] == {**container_sc, "readOnlyRootFilesystem": True}
    assert notebook["securityContext"] == container_sc
    validate_object(out, "V1Pod")


def test_validate_object_accepts_a_pod_and_builds_the_model():
    model = validate_object(_pod(), "V1Pod")
    assert type(model).__name__ == "V1Pod"
    assert model.spec.containers[1].resources.limits == {"nvidia.com/gpu": "1", "cpu": "1"}


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"nodeSelectr": {"a": "b"}}, "unknown field 'nodeSelectr' for V1PodSpec"),
        ({"nodeSelector": {"a": 1}}, r"V1Pod.spec.nodeSelector.a: expected str, got int 1"),
        ({"tolerations": {"key": "a"}}, "V1Pod.spec.tolerations: expected a list"),
        ({"volumes": [{"persistentVolumeClaim": {"claimName": "c"}}]}, r"V1Pod.spec.volumes\[0\]: .*name"),
        ({"securityContext": {"runAsNonRoot": "yes"}}, "runAsNonRoot: expected bool"),
        ({"securityContext": {"runAsUser": True}}, "runAsUser: expected int, got bool"),
    ],
)
def test_validate_object_rejects_what_the_api_would(spec, message):
    with pytest.raises(SchemaError, match=message):
        validate_object(_pod(**spec), "V1Pod")


async def test_the_kube_spawner_pod_keeps_no_way_out_whatever_the_extras():
    """The same through the real GPUKubeSpawner and KubeSpawner's own manifest code."""
    from tests.unit.spawners.kube.test_kube_spawner import (
        CONTAINER_SECURITY,
        MOUNTS,
        VOLUMES,
        Cluster,
        check_schema,
        make_config,
        make_spawner,
        serialized,
        spawn,
    )

    c = make_config(Cluster())
    root = {"privileged": True, "runAsUser": 0, "allowPrivilegeEscalation": True, "capabilities": {"add": ["ALL"]}}
    c.KubeSpawner.init_containers = [{"name": "setup", "image": "busybox", "securityContext": root}]
    c.KubeSpawner.extra_pod_config = {"shareProcessNamespace": True, "automountServiceAccountToken": True}
    c.KubeSpawner.extra_container_config = {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}
    c.KubeSpawner.volumes = [{"name": "node", "hostPath": {"path": "/"}}, {"name": "scratch", "emptyDir": {}}]
    c.KubeSpawner.volume_mounts = [
        {"name": "node", "mountPath": "/host"},
        {"name": "scratch", "mountPath": "/scratch"},
    ]
    spawner = make_spawner(c)
    await spawn(spawner, "cpu")
    pod = serialized(spawner.created_pod)
    check_schema(pod, "V1Pod")
    spec = pod["spec"]
    assert "shareProcessNamespace" not in spec
    assert spec["automountServiceAccountToken"] is False
    assert spec["volumes"] == [*VOLUMES, {"name": "scratch", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [*MOUNTS, {"name": "scratch", "mountPath": "/scratch"}]
    assert spec["containers"][0]["securityContext"] == CONTAINER_SECURITY
    (init,) = spec["initContainers"]
    assert init["securityContext"] == CONTAINER_SECURITY
