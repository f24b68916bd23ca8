"""``c.Kueue``: the gpu service's options for class reservations kept by Kueue (docs/kubernetes.md).

Kept beside the code it configures: the service's other options are in :mod:`jupyterhub_gpu.service.settings`.
"""

from __future__ import annotations

from traitlets import Dict, Float, Unicode, validate
from traitlets.config import Configurable

from jupyterhub_gpu.service.kueue.plan import (
    GPU_RESOURCE,
    KueueConfigError,
    QuotaConfig,
    check_flavors,
    check_lead,
    check_queues,
    check_resource,
    parse_config,
)


class Kueue(Configurable):
    """Class reservations through Kueue: during a booked window the group's ClusterQueue gets the GPUs booked."""

    cluster_queues = Dict(
        help="""
        The ClusterQueue of each group whose bookings Kueue keeps (group -> ClusterQueue name). Empty: the
        service moves no quota. During a booked window (from its start less ``lead_seconds``) the group's
        ClusterQueue gets a nominal quota of at least the GPUs booked, taken from the other ClusterQueues of its
        cohort, and every quota goes back after the window.

            c.Kueue.cluster_queues = {"cs231n": "cs231n", "thesis": "thesis"}
        """,
    ).tag(config=True)

    flavors = Dict(
        help="""
        The ResourceFlavor that holds each GPU model's quota (model -> flavor name).

            c.Kueue.flavors = {"T4": "gpu-t4"}
        """,
    ).tag(config=True)

    gpu_resource = Unicode(
        GPU_RESOURCE,
        help="""
        The resource whose quota is moved.

            c.Kueue.gpu_resource = "nvidia.com/gpu"
        """,
    ).tag(config=True)

    lead_seconds = Float(
        300,
        help="""
        How long before a window the quota moves: the spawner's ``reservation_lead`` (the moment others are
        told they may run until), so Kueue reclaims the GPUs then and not earlier.

            c.Kueue.lead_seconds = 300
        """,
    ).tag(config=True)

    kubeconfig = Unicode(
        "",
        help="""
        The kubeconfig the service writes ClusterQueues with; empty: the pod's service account in a cluster,
        else $KUBECONFIG. It needs ``get``, ``list`` and ``patch`` of ``clusterqueues.kueue.x-k8s.io``.

            c.Kueue.kubeconfig = "/etc/jupyterhub-gpu/kubeconfig"
        """,
    ).tag(config=True)

    @validate("cluster_queues")
    def _valid_queues(self, proposal):
        return _checked(check_queues, proposal.value)

    @validate("flavors")
    def _valid_flavors(self, proposal):
        return _checked(check_flavors, proposal.value)

    @validate("gpu_resource")
    def _valid_resource(self, proposal):
        return _checked(check_resource, proposal.value)

    @validate("lead_seconds")
    def _valid_lead(self, proposal):
        return _checked(check_lead, proposal.value)

    def quota_config(self) -> QuotaConfig:
        """The checked settings as one value (KueueConfigError when the groups are set and the flavors are not)."""
        return parse_config(self.cluster_queues, self.flavors, self.gpu_resource, self.lead_seconds)


def _checked(check, value):
    """A setting's value, or ValueError with the check's message (traitlets shows it, naming the setting)."""
    try:
        check(value)
    except KueueConfigError as e:
        raise ValueError(str(e)) from None
    return value
