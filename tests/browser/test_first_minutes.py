"""A student's first minutes, in a real browser: log in, the profile form, the queue, then JupyterLab.

The browser is set to zh-CN (its ``Accept-Language`` and ``navigator.language``) and nothing else
chooses the language: the hub's pages (the package's templates), the spawn form, the queue's progress
message, JupyterLab's own menus (the official language pack, opened in the spawn's language by the
server extension) and the project's status bar item and panel are all in Simplified Chinese. The
same walk with an en-US browser is all English. The only A100 is held by another user, so the spawn
waits in the queue until that server stops.

The project's texts are checked against the message catalogue (``jupyterhub_gpu/i18n.py``; the Lab
extension's ``zh_CN.ts``) and must differ from their English; the Lab's menus against the language
pack's words. The zh-CN run's screenshots go to ``docs/images/first-minutes-zh-*.png`` (README.md
and docs/user.md show them), the en-US run's to ``.state/artifacts/``.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from playwright.sync_api import expect

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.ledger.store import Ledger
from tests.browser.conftest import ARTIFACTS, shot
from tests.conftest import Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.browser, pytest.mark.hub]

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

#: Over the tests' hub with the gpu service (tests/service/conftest.py): the package's hub pages, one A100.
EXTRA = """
import jupyterhub_gpu.hubpages
c.JupyterHub.template_paths = jupyterhub_gpu.hubpages.template_paths()
c.GPULocalSpawner.gpu_service_url = "http://127.0.0.1:%(port)d/services/gpu/"
c.Spawner.args = c.Spawner.args + ["--GPUStats.push_interval=2", "--GPUStats.interval=1"]
c.GPULocalSpawner.simulated_gpus = [{"model": "A100", "count": 1, "memory_gb": 40}]
c.GPULocalSpawner.profiles = [
    {"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00", "default": True,
     "display_name": {"en": "1× A100 (simulated)", "zh-CN": "1 块 A100（模拟）"},
     "description": {"en": "Large models. Only one on this host: you may have to wait.",
                     "zh-CN": "大模型。本机只有一块：可能需要排队。"}},
    {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60",
     "display_name": {"en": "CPU only", "zh-CN": "仅 CPU"}},
]
c.GPULocalSpawner.queue_timeout = 300
c.Spawner.default_url = "/lab"
"""

#: The profile texts of CONFIG, per language.
PROFILE = {
    "en": ("1× A100 (simulated)", "Large models. Only one on this host: you may have to wait."),
    "zh-CN": ("1 块 A100（模拟）", "大模型。本机只有一块：可能需要排队。"),
}
#: JupyterLab's main menus as its language pack writes them (English: JupyterLab's own).
MENUS = {"en": ["File", "Edit", "View", "Run", "Kernel"], "zh-CN": ["文件", "编辑", "查看", "运行", "内核"]}
#: JupyterLab's Settings menu, its Language submenu and the other language's item in it.
SETTINGS_MENU = {"en": ("Settings", "Language"), "zh-CN": ("设置", "语言")}
LANGUAGE_ITEM = {"en": re.compile(r"^Chinese \(Simplified, China\)"), "zh-CN": re.compile(r"^English")}
#: The price of the A100 profile in each language's format (Babel: CN¥ in English, ¥ in Chinese).
RATE = {"en": "CN¥0.25", "zh-CN": "¥0.25"}
CPU_RATE = {"en": "CN¥0.01", "zh-CN": "¥0.01"}
#: The browser's locale for each of our languages.
BROWSER_LOCALE = {"en": "en-US", "zh-CN": "zh-CN"}


#: The students (each with a budget of their own) and the users who hold the A100 meanwhile.
STUDENT = {"zh-CN": "wu", "en": "amy"}
HOLDER = {"zh-CN": "li", "en": "bob"}
BUDGET = Decimal("10.00")


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("first-minutes")
    config = gpu_hub_config(root, tick=1, grace=3600, min_minutes=0)
    port = int(config.split('"url": "http://127.0.0.1:')[1].split('"')[0])
    hub = Hub(root / "hub", config + EXTRA % {"port": port})
    hub.start()
    ledger = Ledger(f"sqlite:///{root / 'ledger.sqlite'}")
    for student in STUDENT.values():
        ledger.set_budget(BudgetRule("user", student, "month", "money", BUDGET), datetime.now(timezone.utc))
    try:
        yield hub
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop()


def translated(lang: str, text: str, **values) -> str:
    """The catalogue's text of ``text`` in ``lang``; in Chinese it must have one (not the English)."""
    out = translator(lang)(text, **values)
    if lang != "en":
        assert out != translator("en")(text, **values), f"no {lang} text in the catalogue for {text!r}"
    return out


def visible_text(page) -> str:
    return " ".join(page.locator("body").inner_text().split())


def expect_texts(page, present: list[str], absent: list[str], where: str) -> str:
    text = visible_text(page)
    missing = [t for t in present if t not in text]
    left = [t for t in absent if t in text]
    assert not missing and not left, f"{where}: missing {missing}, left in the page {left}:\n{text[:2000]}"
    return text


def save(page, lang: str, step: str, height: int | None = None) -> None:
    """A screenshot of the step (the top ``height`` pixels of a short page); the zh-CN run's go to the docs."""
    name = f"first-minutes-{'zh' if lang == 'zh-CN' else 'en'}-{step}"
    image = ARTIFACTS / f"{name}.png"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clip = {"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height} if height else None
    page.screenshot(path=str(image), clip=clip)
    if lang == "zh-CN":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copy(image, DOCS_IMAGES / f"{name}.png")


def close_toasts(page) -> None:
    """JupyterLab's first-start toasts (its news prompt) cover the status bar's corner: put them away."""
    page.add_style_tag(content="#react-toastify-container { display: none !important; }")


def first_minutes(hub: Hub, browser, lang: str) -> None:
    _ = translator(lang)
    other = "zh-CN" if lang == "en" else "en"
    __ = translator(other)
    student, holder = STUDENT[lang], HOLDER[lang]
    hub.create_users(student, holder)
    # another user takes the only A100 (the form below says "none free" once it is taken)
    assert hub.start_server(holder, {"profile": "a100"}).status_code in (201, 202)

    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale=BROWSER_LOCALE[lang])
    page = context.new_page()
    try:
        # 1. the login page
        page.goto(f"{hub.url}/hub/login")
        words = ["Username:", "Password:"]
        expect_texts(page, [translated(lang, w) for w in words], [__(w) for w in words], "the login page")
        assert page.locator("#login_submit").get_attribute("value") == translated(lang, "Sign in")
        assert page.evaluate("document.documentElement.lang") == lang
        save(page, lang, "1-login", height=380)
        page.fill("input[name=username]", student)
        page.fill("input[name=password]", "pw")
        page.click("#login_submit")
        page.wait_for_load_state()

        # 2. the profile form: the hub's heading, the banner, each profile's line and texts, the footer
        page.goto(f"{hub.url}/hub/spawn")
        a100 = page.locator("[data-profile=a100]")
        a100.wait_for(timeout=30_000)
        sim_a100 = translated(lang, "Simulated {model}", model="A100")
        # the profile's name says the GPUs once; the line under it has the rest
        summary = f"40 GB — {translated(lang, '{rate}/min', rate=RATE[lang])} — {translated(lang, 'none free')}"
        assert a100.locator(".jupyterhub-gpu-summary").inner_text() == summary
        name, description = PROFILE[lang]
        assert name in a100.inner_text() and description in a100.inner_text()
        cpu_line = translated(lang, "{rate}/min", rate=CPU_RATE[lang])
        assert page.locator("[data-profile=cpu] .jupyterhub-gpu-summary").inner_text() == cpu_line
        form_texts = [
            "Server Options",
            "Simulated GPUs.",
            "Billing is per started minute, from the moment the server starts until it stops.",
        ]
        expect_texts(
            page,
            [translated(lang, t) for t in form_texts] + [PROFILE[lang][0]],
            [__(t) for t in form_texts] + [PROFILE[other][0], PROFILE[other][1]],
            "the profile form",
        )
        save(page, lang, "2-form", height=500)

        # 3. start the A100: the spawn page says where the spawn waits, in the queue
        page.check("#profile-a100")
        page.click("form button[type=submit], form input[type=submit]")
        queued = translated(lang, "Waiting for a free {model} — position {position} of {length}", model=sim_a100,
                            position=1, length=1)  # fmt: skip
        page.wait_for_url(re.compile(rf".*/hub/spawn-pending/{student}.*"), timeout=30_000)
        page.get_by_text(queued).first.wait_for(timeout=30_000)
        pending = ["Your server is starting up.", "You will be redirected automatically when it's ready for you."]
        expect_texts(page, [translated(lang, t) for t in pending], [__(t) for t in pending], "the spawn page")
        save(page, lang, "3-queue", height=320)

        # 4. the A100 is freed: the spawn goes on and JupyterLab opens, its menus in the language
        hub.wait_ready(holder, timeout=60)
        assert hub.stop_server(holder).status_code in (202, 204)
        page.wait_for_url(re.compile(rf".*/user/{student}/lab.*"), timeout=90_000)
        menubar = page.locator("#jp-menu-panel .lm-MenuBar-itemLabel, .lm-MenuBar-content .lm-MenuBar-itemLabel")
        menubar.first.wait_for(timeout=60_000)
        expect(menubar.first).to_have_text(MENUS[lang][0], timeout=30_000)
        assert menubar.all_inner_texts()[: len(MENUS[lang])] == MENUS[lang]
        assert page.evaluate("document.documentElement.lang") == lang

        # the project's status bar item: the simulated A100, its use, the cost so far (the first minute,
        # charged at the start) and what is left of the student's budget once the service has said it
        item = page.locator(".jp-gpu-StatusItem")
        item.wait_for(timeout=60_000)
        expected = {
            "en": "A100 (simulated) · GPU 0% · 0.0/40.0 GB · CN¥0.25 (1 min) · CN¥9.75 left",
            "zh-CN": "A100（模拟） · GPU 0% · 0.0/40.0 GB · ¥0.25（1 分钟） · 剩余 ¥9.75",
        }
        wait_for(lambda: item.inner_text() == expected[lang], 30, what=f"the status bar to say {expected[lang]!r}")

        # and its panel, over JupyterLab's launcher
        page.locator(".jp-Launcher").first.wait_for(timeout=30_000)
        close_toasts(page)
        item.click()
        panel = page.locator(".jp-gpu-Panel")
        panel.wait_for(timeout=10_000)
        heading = {"en": "GPU usage and cost", "zh-CN": "GPU 用量和费用"}
        stop = {"en": "Stop my server (stop billing)", "zh-CN": "停止我的服务器（停止计费）"}
        panel_text = panel.inner_text()
        gpu = {"en": "0: Simulated A100", "zh-CN": "0: 模拟 A100"}
        for texts in (heading, stop, gpu):
            assert texts[lang] in panel_text and texts[other] not in panel_text, panel_text
        save(page, lang, "4-lab")

        # 5. the student's own choice wins over the spawn's: Settings → Language → the other one, and the Lab
        # reloads in it (saved in the student's settings)
        settings, language = SETTINGS_MENU[lang]
        page.locator("#jp-menu-panel .lm-MenuBar-item", has_text=settings).click()
        page.locator(".lm-Menu-item", has_text=language).hover()
        page.locator(".lm-Menu-item", has_text=LANGUAGE_ITEM[lang]).click()
        with page.expect_navigation(timeout=60_000):
            page.locator(".jp-Dialog .jp-mod-accept").click()
        expect(menubar.first).to_have_text(MENUS[other][0], timeout=60_000)
        assert page.evaluate("document.documentElement.lang") == other
    except Exception:
        shot(page, f"first-minutes-{lang}-failed")
        raise
    finally:
        context.close()
        hub.stop_server(student)


def test_first_minutes_in_chinese(hub, browser):
    first_minutes(hub, browser, "zh-CN")


def test_first_minutes_in_english(hub, browser):
    first_minutes(hub, browser, "en")
