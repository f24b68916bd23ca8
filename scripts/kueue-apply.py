#!/usr/bin/env python3
"""Install Kueue's API objects into the test cluster, from the Kueue Go module itself (scripts/k8s-setup.sh).

The manager runs on the machine, not in a pod (the cluster has no kube-proxy, no registry): so the objects that a
Kueue release's kustomize overlay would point at a Service are rewritten to reach the manager where it listens.

    kueue-apply.py crds      the CRDs (conversion webhook by URL), the kueue-system namespace, the manager's RBAC;
                             waits until each CRD is Established
    kueue-apply.py webhooks  the admission webhooks of the enabled integrations (pod, batch/job) and of Kueue's own
                             kinds, by URL; the visibility server's Service, EndpointSlice and APIServices; waits
                             until the APIServices are Available

Everything is created, or replaced when it exists (so a new Kueue release's CRDs replace the old). The module's
files are read where Go put them (``go mod download``); nothing of them is copied into the repository.

Environment (set by scripts/k8s-setup.sh): KUEUE_MODULE (the module's directory), K8S_PKI, K8S_API,
KUEUE_WEBHOOK_PORT, KUEUE_VISIBILITY_PORT, K8S_NODE_IP, KUEUE_USER (the manager's client certificate's name).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

MODULE = Path(os.environ["KUEUE_MODULE"]) / "config" / "components"
PKI = Path(os.environ["K8S_PKI"])
API = os.environ.get("K8S_API", "https://127.0.0.1:16443")
WEBHOOK = f"https://127.0.0.1:{os.environ['KUEUE_WEBHOOK_PORT']}"
VISIBILITY_PORT = int(os.environ["KUEUE_VISIBILITY_PORT"])
NODE_IP = os.environ["K8S_NODE_IP"]
USER = os.environ.get("KUEUE_USER", "kueue-manager")
NAMESPACE = "kueue-system"
#: the API groups of the webhooks installed: core pods, batch Jobs, Kueue's own kinds; the other integrations'
#: webhooks stay out (their kinds are not served here, and the manager does not handle their paths)
WEBHOOK_GROUPS = {"", "batch", "kueue.x-k8s.io"}
#: the CRDs whose versions convert through the manager's /convert (Kueue's crd/kustomization.yaml)
CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}
#: namespaces whose pods Kueue never gates (the release's webhook/kustomization.yaml patch)
UNMANAGED = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}

CONTEXT = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
CONTEXT.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
CA_BUNDLE = base64.b64encode((PKI / "ca.crt").read_bytes()).decode()


def call(method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, context=CONTEXT, timeout=60) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"message": raw.decode(errors="replace")}


def collection(obj: dict) -> str:
    """The REST path of the collection an object belongs to (the few kinds installed here)."""
    group_version = obj["apiVersion"]
    plural = {
        "CustomResourceDefinition": "customresourcedefinitions",
        "Namespace": "namespaces",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
        "Service": "services",
        "EndpointSlice": "endpointslices",
        "APIService": "apiservices",
    }[obj["kind"]]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def apply(obj: dict) -> None:
    """Create the object, or replace the one of that name (a Service keeps its cluster IP)."""
    path = collection(obj)
    name = obj["metadata"]["name"]
    status, out = call("POST", path, obj)
    if status == 409:
        status, current = call("GET", f"{path}/{name}")
        if status != 200:
            sys.exit(f"kueue-apply: GET {path}/{name}: {status} {current.get('message')}")
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if obj["kind"] == "Service":
            obj["spec"]["clusterIP"] = current["spec"].get("clusterIP")
        status, out = call("PUT", f"{path}/{name}", obj)
    if status not in (200, 201):
        sys.exit(f"kueue-apply: {obj['kind']} {name}: {status} {out.get('message')}")


def load(relative: str) -> list[dict]:
    with open(MODULE / relative) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def wait(what: str, check, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"kueue-apply: gave up waiting {limit:.0f}s for {what}")
        time.sleep(1)


def condition(path: str, kind: str) -> bool:
    status, obj = call("GET", path)
    conditions = obj.get("status", {}).get("conditions", []) if status == 200 else []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def crds() -> None:
    names = []
    for path in sorted((MODULE / "crd" / "bases").glob("*.yaml")):
        for crd in load(str(path.relative_to(MODULE))):
            if crd["spec"]["names"]["plural"] in CONVERTED:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{WEBHOOK}/convert", "caBundle": CA_BUNDLE},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            apply(crd)
            names.append(crd["metadata"]["name"])
    apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    rbac()
    for name in names:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        wait(f"CRD {name}", lambda path=path: condition(path, "Established"))


def rbac() -> None:
    """The release's roles, named as its overlay names them (prefix kueue-), bound to the manager's user."""
    user = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]
    rbac = MODULE / "rbac"
    for path in [rbac / "role.yaml", *sorted(rbac.glob("*_role.yaml"))]:
        if path.name.startswith("leader_election"):
            continue
        for role in load(str(path.relative_to(MODULE))):
            role["metadata"]["name"] = "kueue-" + role["metadata"]["name"]
            if role["kind"] == "Role":
                role["metadata"]["namespace"] = NAMESPACE
            apply(role)
    for role in ("kueue-manager-role", "kueue-metrics-auth-role", "system:auth-delegator"):
        apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"jhgpu-kueue-manager:{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": user,
            }
        )
    for namespace, role in (
        (NAMESPACE, "kueue-manager-secrets-role"),
        ("kube-system", "extension-apiserver-authentication-reader"),
    ):
        apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"jhgpu-kueue-manager:{role}", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": user,
            }
        )


def webhooks() -> None:
    for config in load("webhook/manifests.yaml"):
        config["metadata"]["name"] = "kueue-" + config["metadata"]["name"]
        kept = []
        for hook in config["webhooks"]:
            if not {g for rule in hook["rules"] for g in rule["apiGroups"]} <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": WEBHOOK + path, "caBundle": CA_BUNDLE}
            if hook["name"] in ("mpod.kb.io", "vpod.kb.io"):
                hook["namespaceSelector"] = {"matchExpressions": [UNMANAGED]}
            kept.append(hook)
        config["webhooks"] = kept
        apply(config)
    visibility()


def visibility() -> None:
    """The visibility API (pending workloads and their positions) through the API server's aggregation layer:
    a Service without a selector and an EndpointSlice at the node's address, where the manager's visibility
    server listens (the API server routes to endpoints: --enable-aggregator-routing)."""
    (service,) = load("visibility/service.yaml")
    service["spec"]["ports"][0]["targetPort"] = VISIBILITY_PORT
    apply(service)
    apply(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "visibility-server",
                "namespace": NAMESPACE,
                "labels": {
                    "kubernetes.io/service-name": "visibility-server",
                    "endpointslice.kubernetes.io/managed-by": "jhgpu-k8s-setup",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": VISIBILITY_PORT, "protocol": "TCP"}],
        }
    )
    names = []
    for path in sorted((MODULE / "visibility").glob("apiservice_*.yaml")):
        for api_service in load(str(path.relative_to(MODULE))):
            # the visibility server's certificate is the cluster CA's, for the Service's name
            api_service["spec"].pop("insecureSkipTLSVerify", None)
            api_service["spec"]["caBundle"] = CA_BUNDLE
            apply(api_service)
            names.append(api_service["metadata"]["name"])
    for name in names:
        path = f"/apis/apiregistration.k8s.io/v1/apiservices/{name}"
        wait(f"APIService {name}", lambda path=path: condition(path, "Available"))


if __name__ == "__main__":
    {"crds": crds, "webhooks": webhooks}[sys.argv[1]]()
