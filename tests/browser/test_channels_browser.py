"""The channel forms in a real browser: Debian's Chromium through a real hub, the service and OAuth.

A student adds a channel of their own on the usage page (a refused URL first, with Apprise's reason),
sends a test message that a local HTTP server receives, and removes the channel; an admin adds a group's
channel on the admin page and tests it. Screenshots go to .state/artifacts/ (not docs/images).
"""

from __future__ import annotations

import pytest

from jupyterhub_gpu.ledger.queries.channels import channels_of
from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import ARTIFACTS
from tests.browser.test_pages_browser import login
from tests.conftest import wait_for
from tests.service.conftest import WebhookServer, gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]


@pytest.fixture
def webhook():
    server = WebhookServer()
    yield server
    server.close()


def test_a_student_and_an_admin_add_test_and_remove_channels(make_hub, tmp_path, browser, webhook):
    port = webhook.url.split(":")[2].split("/")[0]
    config = gpu_hub_config(tmp_path)
    with open(tmp_path / "gpu_service_config.py", "a") as f:
        f.write('c.GPUService.notify_user_schemes = ["json", "tgram"]\n')
        f.write('c.GPUService.notify_user_hosts = ["127.0.0.1"]\n')  # the local server: trusted by name
    hub = make_hub(config)
    hub.create_users("admin", "stu1")
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    service = f"{hub.url}/services/gpu/"

    ctx, stu = login(browser, hub, "stu1")
    stu.goto(service + "?lang=en")
    section = stu.locator("#channels")
    assert "No channels yet" in section.inner_text()
    # a URL Apprise cannot read: the reason, nothing stored
    stu.fill("#c-url", "tgram://bad")
    stu.click("#channel-add-button")
    stu.wait_for_selector("text=Unparseable Telegram URL")
    assert channels_of(ledger, "user", "stu1") == []
    # a good one, with the events chosen: only budget.100 and cull
    stu.goto(service + "?lang=en")
    for box in stu.locator("#c-events input[type=checkbox]").all():
        box.set_checked(box.get_attribute("value") in ("budget.100", "cull"))
    stu.fill("#c-url", f"json://127.0.0.1:{port}/stu1-browser")
    stu.click("#channel-add-button")
    stu.locator("#channel-saved").wait_for()
    [row] = channels_of(ledger, "user", "stu1")
    assert row.events == ("budget.100", "cull")
    table_row = stu.locator(f'#channels tr[data-channel="{row.id}"]')
    assert "budget used up (100%), idle warnings" in table_row.locator(".events").inner_text()
    stu.locator("#channels").screenshot(path=str(ARTIFACTS / "channels-student-en.png"))
    table_row.locator(".channel-test").click()
    stu.wait_for_selector("text=Test message sent.")
    wait_for(lambda: "/stu1-browser" in webhook.paths, 10, what="the test message")
    assert webhook.bodies[-1]["title"] == "Test message from the GPU service"
    stu.locator(f'#channels tr[data-channel="{row.id}"] .channel-remove').click()
    stu.wait_for_selector("text=Channel removed.")
    assert channels_of(ledger, "user", "stu1") == []
    stu.goto(service + "?lang=zh-CN")
    assert "发送测试消息" not in stu.locator("#channels").inner_text()  # no channel left to test
    assert "添加渠道" in stu.locator("#channels").inner_text()
    ctx.close()

    ctx, admin = login(browser, hub, "admin")
    admin.goto(service + "admin?lang=en")
    admin.select_option("#c-owner", "group")
    admin.fill("#c-group", "cs231n")
    admin.fill("#c-url", f"json://127.0.0.1:{port}/cs231n-browser")
    admin.click("#channel-add-button")
    admin.locator("#channel-saved").wait_for()
    [group_row] = channels_of(ledger, "group", "cs231n")
    assert group_row.events == ("budget.80", "budget.95", "budget.100", "digest")  # a group's defaults, checked
    admin.locator(f'#channels tr[data-channel="{group_row.id}"] .channel-test').click()
    admin.wait_for_selector("text=Test message sent.")
    wait_for(lambda: "/cs231n-browser" in webhook.paths, 10, what="the group's test message")
    admin.locator("#channels").screenshot(path=str(ARTIFACTS / "channels-admin-en.png"))
    ctx.close()
