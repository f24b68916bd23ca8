"""``POST restart-bigger`` with a real hub, simulated GPUs and the real gpu service over a sqlite ledger.

A student's T4 session asks, with its server's own token, to be restarted on the bigger profile (the A100,
the one its GPU-memory notice names): the service stops the server and starts it on the A100, in the same
home directory, so a file written before is there after. Another student's session, the student's own
(non-server) token, or a profile other than the next bigger one is refused and changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
import requests

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import wait_for
from tests.service.conftest import ServiceUsers, gpu_hub_config

pytestmark = pytest.mark.hub

#: the servers reach the service (their own token), as the Lab's button goes through its server
EXTRA = """
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
"""


def service_port(config: str) -> int:
    return int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])


def test_a_session_restarts_on_the_bigger_profile_with_its_storage_and_no_one_else_can(make_hub, tmp_path):
    config = gpu_hub_config(tmp_path, tick=600, min_minutes=0)
    hub = make_hub(config + EXTRA % {"port": service_port(config)})
    hub.create_users("stu1", "stu2")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    users = ServiceUsers(hub, ledger)
    # stu1 is in two budgeted groups and lets the second (thesis) pay, in Chinese: the restart keeps both
    assert hub.api("POST", "/groups/thesis/users", json={"users": ["stu1"]}).status_code == 200
    for group in ("cs231n", "thesis"):
        ledger.set_budget(BudgetRule("group", group, "month", "money", Decimal("100")), datetime.now(timezone.utc))
    chinese = {"Accept-Language": "zh-CN,zh;q=0.9"}
    r = hub.api("POST", "/users/stu1/server", json={"profile": "t4", "pool": "thesis"}, headers=chinese)
    assert r.status_code in (201, 202), r.text
    assert hub.start_server("stu2", {"profile": "t4"}).status_code in (201, 202)
    for name in ("stu1", "stu2"):
        hub.wait_ready(name)
    (first,) = ledger.sessions(user="stu1")
    assert (first.pool, first.language) == ("thesis", "zh-CN")
    (other,) = ledger.sessions(user="stu2")
    assert first.profile == "t4"
    (tmp_path / "homes/stu1/kept.txt").write_text("written on the T4")

    url = f"{users.url}api/v1/restart-bigger"
    mine = users.server_token("stu1")

    def post(token, body):
        return requests.post(url, headers={"Authorization": f"token {token}"}, json=body, timeout=30)

    refusals = [
        # another student's session, with one's own server token
        (mine, {"session_id": other.id, "profile": "a100"}, 403, "its own session"),
        # one's own session with another student's server token
        (users.server_token("stu2"), {"session_id": first.id, "profile": "a100"}, 403, "its own session"),
        # the student's own token is not the server's
        (users.token("stu1"), {"session_id": first.id, "profile": "a100"}, 403, "with its own token"),
        # only the next bigger profile, never another one (nor the same one, nor an unknown one)
        (mine, {"session_id": first.id, "profile": "cpu"}, 400, "profile must be 'a100'"),
        (mine, {"session_id": first.id, "profile": "t4"}, 400, "profile must be 'a100'"),
        (mine, {"session_id": first.id, "profile": "h100"}, 400, "profile must be 'a100'"),
        (mine, {"session_id": first.id}, 400, '"profile"'),
        (mine, {"session_id": first.id, "profile": "a100", "user": "stu2"}, 400, '"profile"'),
        (mine, ["a100"], 400, '"session_id"'),
    ]
    for token, body, status, words in refusals:
        r = post(token, body)
        assert r.status_code == status and words in r.json()["message"], (body, r.status_code, r.text)
    # nothing changed: both servers run on their T4s, one session each
    for name in ("stu1", "stu2"):
        assert hub.server(name)["ready"]
        (record,) = ledger.sessions(user=name)
        assert record.profile == "t4" and record.stopped is None

    # the Lab asks its own server (the user's token), which asks the service with the server's token
    lab = {"Authorization": f"token {users.token('stu1')}"}
    button = f"{hub.url}/user/stu1/gpu/api/v1/restart-bigger"
    r = requests.post(button, headers=lab, json={"profile": "cpu"}, timeout=30)
    assert r.status_code == 400 and "profile must be 'a100'" in r.json()["message"], r.text
    r = requests.post(button, headers=lab, json={"profile": "a100", "session_id": other.id}, timeout=30)
    assert r.status_code == 400 and '{"profile"' in r.json()["message"], r.text
    assert hub.server("stu1")["ready"] and hub.server("stu2")["ready"]
    r = requests.post(button, headers=lab, json={"profile": "a100"}, timeout=30)
    assert r.status_code == 202, r.text
    assert r.json() == {"session_id": first.id, "from_profile": "t4", "profile": "a100"}

    def restarted():
        sessions = ledger.sessions(user="stu1")
        return [s for s in sessions if s.profile == "a100" and s.stopped is None] and hub.server("stu1")

    wait_for(lambda: (s := restarted()) and s.get("ready"), 120, what="stu1 restarted on the A100")
    old = next(s for s in ledger.sessions(user="stu1") if s.id == first.id)
    assert old.stopped is not None and old.profile == "t4"
    (new,) = [s for s in ledger.sessions(user="stu1") if s.stopped is None]
    assert (new.pool, new.language) == ("thesis", "zh-CN")  # the same group pays; the notices stay in Chinese
    # the same storage: the file written on the T4 is served by the A100 server
    token = hub.api("POST", "/users/stu1/tokens", json={"note": "t"}).json()["token"]
    r = requests.get(
        f"{hub.url}/user/stu1/api/contents/kept.txt", headers={"Authorization": f"token {token}"}, timeout=30
    )
    assert r.status_code == 200 and r.json()["content"] == "written on the T4", r.text
    # stu2 was never touched
    (record,) = ledger.sessions(user="stu2")
    assert record.profile == "t4" and record.stopped is None and hub.server("stu2")["ready"]
    # the A100 session asks again: no profile is bigger than the A100 here
    (now,) = [s for s in ledger.sessions(user="stu1") if s.stopped is None]
    r = post(users.server_token("stu1"), {"session_id": now.id, "profile": "a100"})
    # in the session's language (this one was started in Chinese): the Lab shows it to its student
    assert r.status_code == 409 and "没有比 'a100' 更大" in r.json()["message"], r.text
    for name in ("stu1", "stu2"):
        hub.stop_server(name)
        hub.wait_stopped(name)
