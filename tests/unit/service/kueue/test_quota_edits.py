"""An admin's edit of a moved ClusterQueue during a booked window is the admin's value (never overwritten, and what
the window's end leaves); a service whose ``c.Kueue.cluster_queues`` was emptied still gives back what its hub
moved, once; another hub's moves are left to it; the quota pass keeps one API client.

What stands in for the API server is named for it: :class:`StandInApi` holds ClusterQueues as JSON, answers the
service's list and its merge patches (refused with 409 when the ``resourceVersion`` is not the current one, as
the API server does). The real cluster's test is tests/k8s/test_kueue_reservations.py.
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from kubernetes_asyncio.client.rest import ApiException

from jupyterhub_gpu.service.kueue import QuotaMover
from jupyterhub_gpu.service.kueue.cluster import ANNOTATION, QUEUES_PATH, QuotaError, sync_quotas
from jupyterhub_gpu.service.kueue.plan import Queue, Quota, parse_config, plan
from tests.unit.service.kueue.test_quota_plan import CONFIG, START, booking, cluster_queue

GPU = "nvidia.com/gpu"


class Response:
    def __init__(self, body):
        self.body = body

    async def read(self):
        return json.dumps(self.body).encode()


class StandInApi:
    """The API server's ClusterQueues: a list, and JSON merge patches under ``resourceVersion``."""

    def __init__(self, *objects):
        self.objects = {o["metadata"]["name"]: copy.deepcopy(o) for o in objects}
        self.patches: list[str] = []
        self.closed = False

    async def call_api(self, path, method, body=None, **kwargs):
        if method == "GET" and path == QUEUES_PATH:
            return Response({"items": list(copy.deepcopy(self.objects).values())})
        name = path.rsplit("/", 1)[1]
        assert method == "PATCH" and name in self.objects, (method, path)
        obj = self.objects[name]
        if body["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        annotations = obj["metadata"].setdefault("annotations", {})
        for key, value in body["metadata"]["annotations"].items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        obj["spec"]["resourceGroups"] = body["spec"]["resourceGroups"]
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        self.patches.append(name)
        return Response(obj)

    def edit(self, name: str, nominal: int) -> None:
        """``kubectl edit clusterqueue``: the admin sets a new nominal quota."""
        obj = self.objects[name]
        obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = str(nominal)
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)

    def nominal(self, name: str) -> int:
        return int(self.objects[name]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"])

    def record(self, name: str) -> dict | None:
        raw = self.objects[name]["metadata"].get("annotations", {}).get(ANNOTATION)
        return json.loads(raw) if raw else None

    async def close(self):
        self.closed = True


def two_groups() -> StandInApi:
    return StandInApi(cluster_queue("cs231n-cq", "2"), cluster_queue("thesis-cq", "2"))


async def test_an_admins_edit_of_the_booked_queue_during_its_window_is_kept_and_left_after_it():
    api = two_groups()
    await sync_quotas(api, CONFIG, [booking(3)], "lab")
    assert (api.nominal("cs231n-cq"), api.nominal("thesis-cq")) == (3, 1)
    assert api.record("cs231n-cq")["set"] == {"t4": {"nominal": 3, "lending": None}}
    assert api.record("cs231n-cq")["hub"] == "lab"
    api.edit("cs231n-cq", 5)  # the admin gives the course more, mid-window
    await sync_quotas(api, CONFIG, [booking(3)], "lab")
    # the admin's 5 holds it: nothing is moved for the course any more, thesis gets its own back
    assert (api.nominal("cs231n-cq"), api.nominal("thesis-cq")) == (5, 2)
    assert api.record("cs231n-cq") is None and api.record("thesis-cq") is None
    # after the window: the admin's value stays
    written = await sync_quotas(api, CONFIG, [], "lab")
    assert written == [] and api.nominal("cs231n-cq") == 5


async def test_an_admins_edit_of_a_donor_during_the_window_is_its_new_base_and_what_the_end_restores():
    api = two_groups()
    await sync_quotas(api, CONFIG, [booking(3)], "lab")
    api.edit("thesis-cq", 3)  # the admin gives thesis one more GPU, mid-window
    await sync_quotas(api, CONFIG, [booking(3)], "lab")
    # the window's move is planned from the admin's 3: thesis gives the course its one GPU from it
    assert (api.nominal("cs231n-cq"), api.nominal("thesis-cq")) == (3, 2)
    assert api.record("thesis-cq")["original"] == {"t4": {"nominal": 3, "lending": None}}
    await sync_quotas(api, CONFIG, [booking(3)], "lab")  # again: nothing changes
    assert api.patches.count("thesis-cq") == 2
    await sync_quotas(api, CONFIG, [], "lab")  # the window ends
    assert (api.nominal("cs231n-cq"), api.nominal("thesis-cq")) == (2, 3)
    assert api.record("thesis-cq") is None


def test_a_record_of_an_older_service_without_the_values_set_plans_from_the_record():
    moved = Queue("cs231n-cq", "lab", {"t4": Quota(3)}, recorded={"t4": Quota(2)})
    assert not moved.edited("t4") and moved.base("t4") == Quota(2)
    edited = Queue("cs231n-cq", "lab", {"t4": Quota(5)}, recorded={"t4": Quota(2)}, written={"t4": Quota(3)})
    assert edited.edited("t4") and edited.base("t4") == Quota(5)
    (target,) = [t for t in plan([edited], CONFIG, []) if t.queue == "cs231n-cq"]
    assert target.quotas == {"t4": Quota(5)} and target.recorded == {}


async def test_another_hubs_move_is_left_to_it():
    api = two_groups()
    await sync_quotas(api, CONFIG, [booking(3)], "dept")
    before = copy.deepcopy(api.objects)
    assert await sync_quotas(api, CONFIG, [], "lab") == []  # lab's service has no booking: it restores nothing
    assert api.objects == before


class Client:
    """The factory the mover is given: counts the API clients made."""

    def __init__(self, api):
        self.api = api
        self.made = 0

    async def __call__(self):
        self.made += 1
        return self.api


async def test_the_quota_pass_keeps_one_client_and_closes_it_at_the_end():
    api = two_groups()
    client = Client(api)
    mover = QuotaMover(CONFIG, client, hub="lab")
    for minutes in (0, 1, 2):
        await mover([booking(3)], START + timedelta(minutes=minutes))
    assert client.made == 1 and api.nominal("cs231n-cq") == 3
    await mover.close()
    assert api.closed


async def test_a_service_whose_cluster_queues_were_emptied_gives_back_its_hubs_moves_once():
    api = two_groups()
    await sync_quotas(api, CONFIG, [booking(3)], "lab")
    other = StandInApi(cluster_queue("x-cq", "0"), cluster_queue("y-cq", "4"))
    x_config = parse_config({"x": "x-cq", "y": "y-cq"}, {"T4": "t4"})
    await sync_quotas(other, x_config, [booking(3, group="x")], "dept")
    api.objects.update(other.objects)  # one cluster: dept's service moved x-cq and y-cq
    off = parse_config({}, {})
    client = Client(api)
    mover = QuotaMover(off, client, hub="lab")
    assert not mover.idle
    assert sorted(await mover([booking(3)], START)) == ["cs231n-cq", "thesis-cq"]
    assert (api.nominal("cs231n-cq"), api.nominal("thesis-cq")) == (2, 2)
    assert api.record("cs231n-cq") is None
    assert (api.nominal("x-cq"), api.nominal("y-cq")) == (3, 1) and api.record("x-cq")["hub"] == "dept"
    assert mover.idle and api.closed
    assert await mover([booking(3)], START + timedelta(minutes=1)) == [] and client.made == 1


@pytest.mark.parametrize("status", [404, 403])  # no Kueue on the cluster; no right to its ClusterQueues
async def test_without_kueue_on_the_cluster_the_emptied_mover_stops_asking(status):
    class NoKueue(StandInApi):
        async def call_api(self, path, method, body=None, **kwargs):
            raise ApiException(status=status, reason="No")

    client = Client(NoKueue())
    mover = QuotaMover(parse_config({}, {}), client, hub="lab")
    assert await mover([], START) == []
    assert mover.idle and client.made == 1


async def test_the_emptied_mover_asks_again_when_the_cluster_did_not_answer():
    class Down(StandInApi):
        async def call_api(self, path, method, body=None, **kwargs):
            raise ApiException(status=503, reason="Service Unavailable")

    mover = QuotaMover(parse_config({}, {}), Client(Down()), hub="lab")
    with pytest.raises(QuotaError, match="503"):
        await mover([], START)
    assert not mover.idle
