"""Alert channels with a real hub, the real service and real tokens: who may set what, masked secrets, tests.

One hub serves the module. Its service has an admins' channel in its config file
(``json://`` to a local HTTP server) and lets users add ``json://`` channels too
(``notify_user_schemes``) to 127.0.0.1, the one internal host it trusts by name
(``notify_user_hosts``), so that every delivery stays on this machine; Telegram
URLs are only stored and read back, never sent to.
"""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.queries.channels import channels_of
from jupyterhub_gpu.ledger.store import Ledger
from tests.conftest import Hub, wait_for
from tests.service.conftest import SMTPServer, WebhookServer, gpu_hub_config
from tests.service.test_api import user_token

pytestmark = pytest.mark.hub

TG_TOKEN = "123456789:AAHsecretBOTtokenXYZ"
TG_URL = f"tgram://{TG_TOKEN}/987654"
PASSWORD = "Pa55wordNeverShown"

EXTRA_CONFIG = """
c.JupyterHub.load_roles.append({
    "name": "instructor-cs231n", "users": ["prof"], "scopes": ["custom:gpu-usage:read!group=cs231n"],
})
"""


@dataclass
class Env:
    hub: Hub
    ledger: Ledger
    tokens: dict[str, str]
    webhook: WebhookServer
    port: int
    smtp: SMTPServer

    def call(self, who: str | None, method: str, path: str, **kwargs) -> requests.Response:
        headers = kwargs.pop("headers", {})
        if who is not None:
            headers["Authorization"] = f"token {self.tokens[who]}"
        url = f"{self.hub.url}/services/gpu/{path}"
        return requests.request(method, url, headers=headers, allow_redirects=False, timeout=30, **kwargs)

    def add(self, who: str, **body) -> requests.Response:
        return self.call(who, "POST", "api/v1/channels", json=body)

    def local(self, path: str) -> str:
        return f"json://127.0.0.1:{self.port}/{path}"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("channels")
    webhook = WebhookServer()
    port = int(webhook.url.split(":")[2].split("/")[0])
    smtp = SMTPServer()  # the lab's own mail server, for users' addresses
    smtp.controller.start()
    config = gpu_hub_config(root, tick=1, grace=300, min_minutes=0) + EXTRA_CONFIG
    with open(root / "gpu_service_config.py", "a") as f:
        f.write(
            f'c.GPUService.notify_admin_urls = [{{"url": "json://127.0.0.1:{port}/admins",'
            ' "events": ["budget.100"]}]\n'
            'c.GPUService.notify_user_schemes = ["json", "tgram", "mailto"]\n'
            'c.GPUService.notify_user_hosts = ["127.0.0.1"]\n'
            f'c.GPUService.notify_user_mail_url = "mailto://127.0.0.1:{smtp.port}?from=gpu@example.edu&mode=insecure"\n'
            "c.GPUService.notify_timeout = 5\n"
        )
    hub = Hub(root / "hub", config)
    hub.start()
    try:
        names = ("admin", "stu1", "stu2", "stu3", "stu4", "stu5", "stu6", "prof")
        hub.create_users(*names)
        tokens = {name: user_token(hub, name) for name in names}
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}")
        yield Env(hub, ledger, tokens, webhook, port, smtp)
    finally:
        webhook.close()
        smtp.controller.stop()
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


def error(r: requests.Response, status: int, fragment: str = "") -> str:
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert body["status"] == status and fragment in body["message"], body
    return body["message"]


def test_a_user_adds_their_own_channel_and_never_sees_its_secret_again(env):
    r = env.add("stu1", url=TG_URL, events=["budget.95", "budget.100", "cull"])
    assert r.status_code == 201, r.text
    channel = r.json()
    assert (channel["owner"], channel["name"], channel["service"]) == ("user", "stu1", "Telegram")
    assert channel["events"] == ["budget.95", "budget.100", "cull"]
    assert channel["target"].startswith("tgram://") and "987654" in channel["target"]
    listed = env.call("stu1", "GET", "api/v1/channels")
    assert listed.status_code == 200
    assert [c["id"] for c in listed.json()["channels"] if not c["configured"]] == [channel["id"]]
    assert listed.json()["may_edit"] is True and listed.json()["schemes"] == ["json", "tgram", "mailto"]
    for text in (r.text, listed.text, env.call("stu1", "GET", f"api/v1/channels/{channel['id']}").text):
        assert "AAHsecretBOTtokenXYZ" not in text and TG_TOKEN not in text
    # the admins see it masked too, and nothing of it is in the service's log
    as_admin = env.call("admin", "GET", "api/v1/channels?user=stu1")
    assert as_admin.status_code == 200 and "AAHsecretBOTtokenXYZ" not in as_admin.text
    assert "AAHsecretBOTtokenXYZ" not in env.hub.log_text()
    # the owner changes its events and removes it
    r = env.call("stu1", "PATCH", f"api/v1/channels/{channel['id']}", json={"events": ["job"]})
    assert r.status_code == 200 and r.json()["events"] == ["job"]
    error(env.call("stu1", "PATCH", f"api/v1/channels/{channel['id']}", json={"events": ["jobs"]}), 400, "'jobs'")
    assert env.call("stu1", "DELETE", f"api/v1/channels/{channel['id']}").status_code == 204
    assert channels_of(env.ledger, "user", "stu1") == []


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"url": "tgram://bad"}, "Unparseable Telegram URL"),
        ({"url": "bogus://x"}, "not among the services you may add"),
        ({"url": "json://"}, "Apprise cannot use this URL"),
        ({"url": "no scheme at all"}, "no scheme://"),
        ({"url": "windows://"}, "the service's own machine"),
        ({"url": "slack://T1/B1/C1"}, "not among the services you may add"),
        ({"url": ""}, "empty"),
        ({"url": 5}, "empty"),
        ({"url": "mailto://{username}@example.edu"}, "{username}"),
        ({"url": "json://127.0.0.1/x", "events": ["budget"]}, "'budget' is not an event"),
        ({"url": "json://127.0.0.1/x", "events": "cull"}, "must be a list"),
        ({"url": "json://127.0.0.1/x", "colour": "red"}, "Unknown fields"),
    ],
)
def test_bad_channels_are_refused_with_the_reason_and_change_nothing(env, body, fragment):
    error(env.add("stu1", **body), 400, fragment)
    assert channels_of(env.ledger, "user", "stu1") == []


@pytest.mark.parametrize("url", [f"json://gpu:{PASSWORD}@", f"tgram://{PASSWORD}", f"mailto://gpu:{PASSWORD}@/x"])
def test_a_refused_url_never_shows_its_secret(env, url):
    message = error(env.add("admin", url=url, admins=True), 400, "Apprise cannot use this URL")
    assert PASSWORD not in message and PASSWORD[1:-1] not in message
    assert PASSWORD not in env.hub.log_text()


def test_a_student_cannot_touch_another_users_or_a_groups_channels(env):
    theirs = env.add("stu2", url=env.local("stu2")).json()
    error(env.add("stu1", url=TG_URL, user="stu2"), 403, "only their own")
    error(env.add("stu1", url=TG_URL, group="cs231n"), 403, "custom:gpu-budgets:write")
    error(env.add("stu1", url=TG_URL, admins=True), 403, "custom:gpu-budgets:write")
    error(env.call("stu1", "GET", "api/v1/channels?user=stu2"), 403)
    error(env.call("stu1", "GET", "api/v1/channels?group=cs231n"), 403)
    error(env.call("stu1", "GET", "api/v1/channels?admins=true"), 403)
    for method, path, body in (
        ("GET", f"api/v1/channels/{theirs['id']}", None),
        ("PATCH", f"api/v1/channels/{theirs['id']}", {"events": ["job"]}),
        ("DELETE", f"api/v1/channels/{theirs['id']}", None),
        ("POST", f"api/v1/channels/{theirs['id']}/test", None),
    ):
        error(env.call("stu1", method, path, json=body), 404, "No channel")
    assert [c.id for c in channels_of(env.ledger, "user", "stu2")] == [theirs["id"]]
    assert channels_of(env.ledger, "user", "stu1") == []
    assert env.call("stu2", "DELETE", f"api/v1/channels/{theirs['id']}").status_code == 204


def test_an_instructor_reads_their_groups_channels_and_only_admins_write_them(env):
    r = env.add("admin", url=env.local("course"), group="cs231n")
    assert r.status_code == 201, r.text
    course = r.json()
    assert course["events"] == ["budget.80", "budget.95", "budget.100", "digest"]  # a group's defaults
    listed = env.call("prof", "GET", "api/v1/channels?group=cs231n")
    assert listed.status_code == 200 and listed.json()["may_edit"] is False
    assert [c["id"] for c in listed.json()["channels"]] == [course["id"]]
    error(env.call("prof", "GET", "api/v1/channels?group=thesis"), 403, "custom:gpu-usage:read!group=thesis")
    error(env.add("prof", url=env.local("x"), group="cs231n"), 403, "custom:gpu-budgets:write")
    error(env.call("prof", "DELETE", f"api/v1/channels/{course['id']}"), 403)
    error(env.call("prof", "POST", f"api/v1/channels/{course['id']}/test"), 403)
    # the admins' channels, with the configured one first
    admins = env.call("admin", "GET", "api/v1/channels?admins=true").json()["channels"]
    assert [(c["configured"], c["service"], c["events"]) for c in admins] == [(True, "JSON", ["budget.100"])]
    error(env.call("admin", "DELETE", f"api/v1/channels/{admins[0]['id']}"), 409, "configuration file")
    assert env.call("admin", "DELETE", f"api/v1/channels/{course['id']}").status_code == 204


def test_the_test_button_sends_a_real_message_in_the_callers_language(env):
    mine = env.add("stu5", url=env.local("stu5-test"), events=["budget.100"]).json()
    before = len(env.webhook.bodies)
    r = env.call("stu5", "POST", f"api/v1/channels/{mine['id']}/test", headers={"Accept-Language": "zh-CN"})
    assert r.status_code == 200, r.text
    assert r.json()["sent"] is True
    [body] = env.webhook.bodies[before:]
    assert env.webhook.paths[-1] == "/stu5-test"
    assert body["title"] == "GPU 服务的测试消息" and "预算已用完" in body["message"]
    error(env.call("stu5", "POST", f"api/v1/channels/{mine['id']}/test"), 429, "less than 10 s ago")
    assert len(env.webhook.bodies) == before + 1
    env.call("stu5", "DELETE", f"api/v1/channels/{mine['id']}")


def test_a_failing_test_message_names_the_reason_without_the_secret(env):
    r = env.add("stu2", url=f"json://gpu:{PASSWORD}@127.0.0.1:1/down")
    assert r.status_code == 201 and PASSWORD not in r.text
    message = error(env.call("stu2", "POST", f"api/v1/channels/{r.json()['id']}/test"), 502, "failed")
    assert PASSWORD not in message and "127.0.0.1" in message
    metrics = env.call("admin", "GET", "metrics")
    assert metrics.status_code == 200
    counts = {
        (s.labels["service"], s.labels["outcome"]): s.value
        for family in text_string_to_metric_families(metrics.text)
        if family.name == "jupyterhub_gpu_notifications"
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert counts[("JSON", "failed")] >= 1
    assert PASSWORD not in env.hub.log_text()
    env.call("stu2", "DELETE", f"api/v1/channels/{r.json()['id']}")


def test_a_budget_alert_reaches_the_users_own_channel_and_the_admins_and_no_one_elses(env):
    """Through the service's own tick: stu1 reaches 100% of a tiny budget as their server starts.

    Not the group's chat: stu1's own budget is stu1's business (classmates read a course chat)."""
    assert env.add("stu1", url=env.local("stu1-own")).status_code == 201
    assert env.add("stu2", url=env.local("stu2-own")).status_code == 201
    assert env.add("admin", url=env.local("course-chat"), group="cs231n", events=["budget.100"]).status_code == 201
    assert env.add("admin", url=env.local("thesis-chat"), group="thesis").status_code == 201
    now = datetime.now(timezone.utc)
    env.ledger.set_budget(BudgetRule("user", "stu1", "week", "money", Decimal("0.05")), now)
    try:
        assert env.hub.start_server("stu1", {"profile": "t4"}).status_code in (201, 202)
        wanted = {"/stu1-own", "/admins"}
        wait_for(lambda: wanted <= set(env.webhook.paths), 90, what="the 100% alert on two channels")
        arrived = {p: b for p, b in zip(env.webhook.paths, env.webhook.bodies, strict=True) if p in wanted}
        for path, body in arrived.items():
            assert (body["user"], body["threshold"], body["event"]) == ("stu1", 100, "budget_threshold"), path
        time.sleep(3)  # a few more ticks: nothing else arrives
        assert {"/stu2-own", "/thesis-chat", "/course-chat"}.isdisjoint(env.webhook.paths)
        assert sum(p in wanted for p in env.webhook.paths) == 2  # once each, however many ticks ran
    finally:
        env.hub.stop_server("stu1")
        env.ledger.delete_budget("user", "stu1")
        for kind, owner in (("user", "stu1"), ("user", "stu2"), ("group", "cs231n"), ("group", "thesis")):
            for channel in channels_of(env.ledger, kind, owner):
                env.call("admin", "DELETE", f"api/v1/channels/{channel.id}")


# -- the pages: "Notifications" on the user page, "Alert channels" on the admin page -------------------


def browser(env, name: str) -> requests.Session:
    session = env.hub.login(name)
    assert session.get(f"{env.hub.url}/services/gpu/", timeout=30).status_code == 200  # through OAuth
    return session


def form_post(env, session, page: str, data: dict) -> requests.Response:
    text = session.get(f"{env.hub.url}/services/gpu/{page}", timeout=30).text
    xsrf = re.search(r'name="_xsrf" value="([^"]+)"', text).group(1)
    url = f"{env.hub.url}/services/gpu/channels"
    return session.post(url, data={**data, "_xsrf": xsrf}, timeout=30, allow_redirects=False)


def test_the_user_page_adds_tests_and_removes_a_channel(env):
    stu1 = browser(env, "stu1")
    page = stu1.get(f"{env.hub.url}/services/gpu/?lang=en", timeout=30).text
    assert 'id="channels"' in page and 'id="channel-add"' in page and "No channels yet" in page
    r = form_post(env, stu1, "", {"action": "add", "owner": "user", "url": TG_URL, "events": ["budget.100", "cull"]})
    assert r.status_code == 303 and r.headers["Location"].endswith("saved=channel-added#channels")
    [row] = channels_of(env.ledger, "user", "stu1")
    assert row.events == ("budget.100", "cull") and row.url == TG_URL
    page = stu1.get(f"{env.hub.url}/services/gpu/?saved=channel-added", timeout=30).text
    assert "Channel added." in page and "Telegram" in page and "budget used up (100%), idle warnings" in page
    assert "AAHsecretBOTtokenXYZ" not in page
    # a bad URL: an error page with Apprise's reason, nothing stored
    r = form_post(env, stu1, "", {"action": "add", "owner": "user", "url": "tgram://bad", "events": ["cull"]})
    assert r.status_code == 400 and "Unparseable Telegram URL" in r.text
    r = form_post(env, stu1, "", {"action": "add", "owner": "user", "url": env.local("x")})
    assert r.status_code == 400 and "Choose at least one event." in r.text
    # a student's form cannot add for a group, nor remove another's channel
    r = form_post(
        env, stu1, "", {"action": "add", "owner": "group", "group": "cs231n", "url": TG_URL, "events": ["cull"]}
    )
    assert r.status_code == 403
    theirs = env.add("stu2", url=env.local("stu2-page")).json()
    assert form_post(env, stu1, "", {"action": "remove", "id": str(theirs["id"])}).status_code == 404
    assert len(channels_of(env.ledger, "user", "stu2")) >= 1
    env.call("stu2", "DELETE", f"api/v1/channels/{theirs['id']}")
    # the test button: a local channel, the message arrives
    local = env.add("stu1", url=env.local("stu1-button")).json()
    r = form_post(env, stu1, "", {"action": "test", "id": str(local["id"])})
    assert r.status_code == 303 and "saved=channel-tested" in r.headers["Location"]
    assert (
        env.webhook.paths[-1] == "/stu1-button"
        and env.webhook.bodies[-1]["title"] == "Test message from the GPU service"
    )
    for channel in channels_of(env.ledger, "user", "stu1"):
        r = form_post(env, stu1, "", {"action": "remove", "id": str(channel.id)})
        assert r.status_code == 303
    assert channels_of(env.ledger, "user", "stu1") == []
    assert "通知" in stu1.get(f"{env.hub.url}/services/gpu/?lang=zh-CN", timeout=30).text


def test_the_admin_page_shows_the_configured_channel_and_adds_a_groups(env):
    admin = browser(env, "admin")
    page = admin.get(f"{env.hub.url}/services/gpu/admin?lang=en", timeout=30).text
    assert "Alert channels" in page and "configuration file" in page and f"json://127.0.0.1:{env.port}/admins" in page
    data = {"back": "admin", "action": "add", "owner": "group", "group": "thesis", "url": env.local("thesis-page")}
    data["events"] = ["digest"]
    r = form_post(env, admin, "admin", data)
    assert r.status_code == 303 and "/services/gpu/admin?saved=channel-added#channels" in r.headers["Location"]
    [row] = channels_of(env.ledger, "group", "thesis")
    page = admin.get(f"{env.hub.url}/services/gpu/admin", timeout=30).text
    assert "Group thesis" in page and f'data-channel="{row.id}"' in page
    assert form_post(env, admin, "admin", {"action": "test", "id": str(row.id)}).status_code == 303
    assert env.webhook.paths[-1] == "/thesis-page"
    assert form_post(env, admin, "admin", {"action": "remove", "id": str(row.id)}).status_code == 303
    assert channels_of(env.ledger, "group", "thesis") == []


# -- what a student's URL may not do ------------------------------------------


def test_a_students_url_cannot_reach_the_labs_own_network(env):
    """json:// is allowed here with 127.0.0.1 trusted by name: every other internal address is refused."""
    before = len(env.webhook.paths)
    for url in (
        f"json://localhost:{env.port}/inside",
        f"json://127.0.0.2:{env.port}/inside",
        f"json://[::1]:{env.port}/inside",
        "json://169.254.169.254/latest/meta-data",
        "json://10.0.0.25/inside",
        f"json://0.0.0.0:{env.port}/inside",
        "json://nowhere.invalid/inside",
    ):
        message = error(env.add("stu1", url=url), 400, "url: The host")
        assert "lab's own network" in message or "cannot be resolved" in message, message
    assert channels_of(env.ledger, "user", "stu1") == []
    assert len(env.webhook.paths) == before


def test_a_students_mail_url_cannot_choose_the_relay_the_sender_or_more_recipients(env):
    smtp = SMTPServer()
    smtp.controller.start()
    try:
        bcc = ",".join(f"v{i}@example.org" for i in range(40))
        base = "mailto://university.edu?to=a@example.org&mode=insecure"
        for extra, name in (
            (f"&smtp=127.0.0.1&port={smtp.port}", "'smtp'"),
            ("&from=dean@university.edu", "'from'"),
            (f"&bcc={bcc}", "'bcc'"),
            ("&cc=b@example.org", "'cc'"),
            ("&to=b@example.org,c@example.org", "several recipients"),
        ):
            message = error(env.add("stu1", url=base + extra), 400, name)
            assert "v1@example.org" not in message
        assert channels_of(env.ledger, "user", "stu1") == [] and smtp.messages == []
    finally:
        smtp.controller.stop()
    # an admin's own relay is the admins' choice, and their masked view says where mail goes
    r = env.add("admin", url="mailto://gpu:pw123456@university.edu?smtp=10.0.0.25&from=g@university.edu", admins=True)
    assert r.status_code == 201 and "via 10.0.0.25" in r.json()["target"] and "pw123456" not in r.text
    assert env.call("admin", "DELETE", f"api/v1/channels/{r.json()['id']}").status_code == 204


def test_the_test_button_is_limited_per_caller_whatever_channels_they_add(env):
    before = len(env.webhook.bodies)
    codes = []
    for i in range(4):  # add, test, remove: a new claim each time, the same caller
        r = env.add("stu3", url=env.local("stu3-test") + (f"?x{i}=1" if i else ""))
        assert r.status_code == 201, r.text
        codes.append(env.call("stu3", "POST", f"api/v1/channels/{r.json()['id']}/test").status_code)
        assert env.call("stu3", "DELETE", f"api/v1/channels/{r.json()['id']}").status_code == 204
    assert codes == [200, 429, 429, 429]
    assert len(env.webhook.bodies) == before + 1
    # another caller is not held up by stu3
    theirs = env.add("stu4", url=env.local("stu4-test")).json()
    assert env.call("stu4", "POST", f"api/v1/channels/{theirs['id']}/test").status_code == 200
    env.call("stu4", "DELETE", f"api/v1/channels/{theirs['id']}")


@pytest.mark.parametrize("channel_id", ["%C2%B2", "%D9%A1", "1%E2%80%8B", "-1", "1e3"])
def test_a_channel_id_that_is_not_ascii_digits_is_refused_not_a_server_error(env, channel_id):
    for method in ("GET", "DELETE"):
        r = env.call("stu1", method, f"api/v1/channels/{channel_id}")
        assert r.status_code in (400, 404), (method, r.status_code, r.text[:300])
    stu1 = browser(env, "stu1")
    r = form_post(env, stu1, "", {"action": "remove", "id": "²"})
    assert r.status_code == 400, r.text[:300]


def test_a_student_adds_an_e_mail_address_sent_through_the_labs_own_server(env):
    r = env.add("stu6", url="stu6@example.org", events=["cull"])
    assert r.status_code == 201, r.text
    channel = r.json()
    assert (channel["service"], channel["target"]) == ("E-Mail", "labmail://stu6@example.org")
    before = len(env.smtp.messages)
    assert env.call("stu6", "POST", f"api/v1/channels/{channel['id']}/test").status_code == 200
    wait_for(lambda: len(env.smtp.messages) > before, 10, what="the test mail")
    [(sender, rcpts, message)] = env.smtp.messages[before:]
    assert sender == "gpu@example.edu" and rcpts == ["stu6@example.org"]
    assert message["Subject"] == "Test message from the GPU service"
    for bad in ("a@example.org,b@example.org", "a@example.org?bcc=b@example.org", "a b@example.org", "mailto:a@x@y"):
        error(env.add("stu6", url=bad), 400, "url:")
    assert [c.id for c in channels_of(env.ledger, "user", "stu6")] == [channel["id"]]
    assert env.call("stu6", "DELETE", f"api/v1/channels/{channel['id']}").status_code == 204
