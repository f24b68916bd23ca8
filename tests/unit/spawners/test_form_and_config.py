"""The spawn form's text and template, the queue message, and the startup configuration check."""

from __future__ import annotations

import asyncio
from html.parser import HTMLParser

import pytest
from traitlets.config import Config

from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.gpus.static import static_inventory
from jupyterhub_gpu.i18n import translator
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.assign.protocol import QueueCancelled
from jupyterhub_gpu.spawners.form import (
    _templates,
    assignment_message,
    describe_profile,
    queue_message,
    render_options_form,
)
from jupyterhub_gpu.spawners.kube.profiles import describe_kube_profile
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.profiles import parse_profiles
from jupyterhub_gpu.spawners.startup import check_config

CNY = Currency.from_config("CNY")
USD = Currency.from_config("USD")


def profiles_by_slug(raw):
    return {p.slug: p for p in parse_profiles(raw, require_image=False)}


PROFILES = profiles_by_slug(
    [
        {"slug": "t4", "display_name": "1× T4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"},
        {"slug": "t4x2", "gpu_model": "T4", "gpu_count": 2, "price_per_gpu_hour": "3.00"},
        {"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00"},
        {"slug": "v100", "gpu_model": "V100", "gpu_count": 1, "price_per_gpu_hour": "3.00"},
        {"slug": "cheap", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "0.15"},
        {"slug": "sim", "gpu_model": "Simulated T4", "gpu_count": 1, "price_per_gpu_hour": "3.00"},
        {"slug": "cpu", "gpu_count": 0},
        {"slug": "cpu-paid", "gpu_count": 0, "price_per_hour": "0.60"},
    ]
)


def simulated_allocator() -> GPUAllocator:
    return GPUAllocator(
        simulated_inventory(
            [{"model": "T4", "count": 2, "memory_gb": 16}, {"model": "A100", "count": 1, "memory_gb": 40}]
        )
    )


# -- describe_profile ------------------------------------------------------------------------


def test_describe_free_simulated_gpus():
    alloc = simulated_allocator()
    assert describe_profile(PROFILES["t4"], alloc, CNY) == "1× Simulated T4 16 GB — CN¥0.05/min — 2 of 2 free"
    assert describe_profile(PROFILES["t4x2"], alloc, CNY) == "2× Simulated T4 16 GB — CN¥0.10/min — 2 of 2 free"
    assert describe_profile(PROFILES["a100"], alloc, USD) == "1× Simulated A100 40 GB — $0.25/min — 1 of 1 free"


def test_describe_does_not_say_simulated_twice():
    assert describe_profile(PROFILES["sim"], simulated_allocator(), CNY) == (
        "1× Simulated T4 16 GB — CN¥0.05/min — 2 of 2 free"
    )


def test_describe_a_rate_needing_more_digits():
    assert describe_profile(PROFILES["cheap"], simulated_allocator(), CNY) == (
        "1× Simulated T4 16 GB — CN¥0.0025/min — 2 of 2 free"
    )


def test_describe_cpu_only():
    alloc = simulated_allocator()
    assert describe_profile(PROFILES["cpu"], alloc, CNY) == "CPU only — free"
    assert describe_profile(PROFILES["cpu-paid"], alloc, CNY) == "CPU only — CN¥0.01/min"


def test_describe_a_model_the_host_lacks():
    assert describe_profile(PROFILES["v100"], simulated_allocator(), CNY) == (
        "1× V100 — CN¥0.05/min — no such GPU on this host"
    )


def test_describe_real_gpus():
    alloc = GPUAllocator(
        static_inventory(
            [
                {"uuid": "GPU-a", "name": "Tesla T4", "memory_mib": 15360},
                {"uuid": "GPU-b", "name": "Tesla T4", "memory_mib": 15360},
            ]
        )
    )
    assert describe_profile(PROFILES["t4x2"], alloc, USD) == "2× T4 15 GB — $0.10/min — 2 of 2 free"
    unknown_memory = GPUAllocator(static_inventory([{"uuid": "GPU-a", "name": "Tesla T4"}]))
    assert describe_profile(PROFILES["t4"], unknown_memory, USD) == "1× T4 — $0.05/min — 1 of 1 free"


async def test_describe_follows_the_allocator():
    alloc = simulated_allocator()
    t4 = PROFILES["t4"]
    await alloc.acquire("alice/", "T4", 1)
    assert describe_profile(t4, alloc, CNY) == "1× Simulated T4 16 GB — CN¥0.05/min — 1 of 2 free"
    pair = asyncio.create_task(alloc.acquire("pair/", "T4", 2))
    await asyncio.sleep(0)
    assert describe_profile(t4, alloc, CNY) == "1× Simulated T4 16 GB — CN¥0.05/min — 1 of 2 free (1 waiting)"
    await alloc.acquire("bob/", "A100", 1)
    alloc.cancel("pair/")
    with pytest.raises(QueueCancelled):
        await pair
    await alloc.acquire("carol/", "T4", 1)
    assert describe_profile(t4, alloc, CNY) == "1× Simulated T4 16 GB — CN¥0.05/min — none free"
    waiters = [asyncio.create_task(alloc.acquire(k, "T4", 1)) for k in ("w1/", "w2/")]
    await asyncio.sleep(0)
    assert describe_profile(t4, alloc, CNY) == "1× Simulated T4 16 GB — CN¥0.05/min — none free (2 waiting)"
    assert describe_profile(PROFILES["a100"], alloc, CNY) == "1× Simulated A100 40 GB — CN¥0.25/min — none free"
    for key in ("w1/", "w2/"):
        alloc.cancel(key)
    await asyncio.gather(*waiters, return_exceptions=True)


# -- queue_message -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("A100", 1, True, 2, 3), "Waiting for a free Simulated A100 — position 2 of 3"),
        (("A100", 1, False, 1, 1), "Waiting for a free A100 — position 1 of 1"),
        (("T4", 2, True, 1, 4), "Waiting for 2 free Simulated T4 GPUs — position 1 of 4"),
        (("T4", 4, False, 3, 3), "Waiting for 4 free T4 GPUs — position 3 of 3"),
        (("Simulated T4", 1, True, 1, 2), "Waiting for a free Simulated T4 — position 1 of 2"),
        (("simulated t4", 1, True, 1, 2), "Waiting for a free simulated t4 — position 1 of 2"),
    ],
)
def test_queue_message(args, message):
    assert queue_message(*args) == message


# -- the form template -----------------------------------------------------------------------------


class FormParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.inputs: list[dict] = []
        self.hidden: dict[str, str] = {}  # the form's hidden fields (its language)
        self.simulated_banners = 0
        self.alerts: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("type") == "hidden":
            self.hidden[attrs["name"]] = attrs["value"]
        elif tag == "input":
            self.inputs.append(attrs)
        if attrs.get("data-simulated") == "true":
            self.simulated_banners += 1
        if "alert" in (attrs.get("class") or "").split():
            self.alerts.append(attrs.get("role"))


def render(rows, simulated, lang="en"):
    html = _templates.get_template("options_form.html").render(
        profiles=rows, simulated=simulated, lang=lang, _=translator(lang)
    )
    parser = FormParser()
    parser.feed(html)
    return html, parser


def row(slug, display_name=None, description="", summary="", checked=False):
    return {
        "slug": slug,
        "display_name": display_name or slug,
        "description": description,
        "summary": summary,
        "checked": checked,
    }


ROWS = [
    row("t4", "1× T4", "For coursework", "1× Simulated T4 16 GB — CN¥0.05/min — 2 of 2 free", checked=True),
    row("cpu", "CPU only", summary="CPU only — free"),
]


def test_form_radio_inputs():
    html, form = render(ROWS, simulated=True)
    radios = [i for i in form.inputs if i.get("type") == "radio"]
    assert [(r["name"], r["value"], r["id"]) for r in radios] == [
        ("profile", "t4", "profile-t4"),
        ("profile", "cpu", "profile-cpu"),
    ]
    assert ["checked" in r for r in radios] == [True, False]
    assert all("required" in r for r in radios)
    assert "1× Simulated T4 16 GB — CN¥0.05/min — 2 of 2 free" in html
    assert "For coursework" in html
    assert 'for="profile-cpu"' in html


def test_form_simulated_banner_only_when_simulated():
    html, form = render(ROWS, simulated=True)
    assert form.simulated_banners == 1
    assert "Simulated GPUs." in html
    html, form = render(ROWS, simulated=False)
    assert form.simulated_banners == 0
    assert "Simulated GPUs." not in html
    assert "simulated GPU inventory" not in html


def test_form_without_profiles_says_so():
    html, form = render([], simulated=False)
    assert form.inputs == []
    assert form.alerts == ["alert"]
    assert "No profile is available to you." in html
    _, form = render(ROWS, simulated=False)
    assert form.alerts == []


def test_form_escapes_admin_text():
    evil = row(
        "x",
        display_name="<script>alert('name')</script>",
        description="<img src=x onerror=alert(1)>",
        summary="<b>summary</b>",
    )
    html, form = render([evil], simulated=False)
    assert "<script>" not in html
    assert "<img" not in html
    assert "<b>summary" not in html
    assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert [i["value"] for i in form.inputs] == ["x"]


def test_form_escapes_attribute_values():
    _, form = render([row('a" onfocus="alert(1)')], simulated=False)
    (radio,) = form.inputs
    assert radio["value"] == 'a" onfocus="alert(1)'
    assert "onfocus" not in radio


# -- the form and its messages in Chinese ------------------------------------------------------------

ZH_PROFILES = profiles_by_slug(
    [
        {
            "slug": "t4",
            "display_name": {"en": "One T4", "zh-CN": "一块 T4"},
            "description": {"en": "For coursework", "zh-CN": "<课程用>"},
            "gpu_model": "T4",
            "gpu_count": 1,
            "price_per_gpu_hour": "3.00",
        },
        {"slug": "a100", "display_name": "One A100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15"},
        {"slug": "cpu", "gpu_count": 0},
    ]
)


def test_the_form_in_chinese():
    alloc = simulated_allocator()
    profiles = list(ZH_PROFILES.values())
    html = render_options_form(
        profiles,
        None,
        lambda p: describe_profile(p, alloc, CNY, "zh-CN"),
        simulated=True,
        pools=["a", "b"],
        lang="zh-CN",
    )
    parser = FormParser()
    parser.feed(html)
    assert parser.hidden == {"lang": "zh-CN"}  # its refusals answer in it
    assert 'lang="zh-CN"' in html
    for text in ("模拟 GPU。", "按开始的分钟计费", "由哪个组的预算支付", "该配置允许的第一个组", "选择 GPU 配置"):
        assert text in html, text
    assert "一块 T4" in html and "&lt;课程用&gt;" in html  # the admin's Chinese, escaped
    assert "One A100" in html  # no Chinese given: the English
    assert "1× 模拟 T4 16 GB — ¥0.05/分钟 — 空闲 2 块，共 2 块" in html
    assert "仅 CPU — 免费" in html
    for english in ("Billing", "Simulated", "free", "One T4", "For coursework"):
        assert english not in html, english
    english = render_options_form(profiles, None, lambda p: describe_profile(p, alloc, CNY), simulated=True, pools=[])
    assert "One T4" in english and "For coursework" in english and 'name="lang" value="en"' in english


async def test_the_counts_in_chinese():
    alloc = simulated_allocator()
    t4, a100 = ZH_PROFILES["t4"], ZH_PROFILES["a100"]
    await alloc.acquire("alice/", "T4", 1)
    await alloc.acquire("bob/", "A100", 1)
    waiter = asyncio.create_task(alloc.acquire("w/", "A100", 1))
    await asyncio.sleep(0)
    assert describe_profile(a100, alloc, CNY, "zh-CN") == "1× 模拟 A100 40 GB — ¥0.25/分钟 — 无空闲（1 人排队）"
    assert describe_profile(t4, alloc, CNY, "zh-CN") == "1× 模拟 T4 16 GB — ¥0.05/分钟 — 空闲 1 块，共 2 块"
    assert describe_profile(PROFILES["v100"], alloc, CNY, "zh-CN") == "1× V100 — ¥0.05/分钟 — 本机没有这种 GPU"
    unknown = {"free": 0, "total": 0, "waiting": 0, "known": False, "memory_mib": 0}
    assert describe_kube_profile(t4, unknown, CNY, "zh-CN") == "1× T4 — ¥0.05/分钟 — 暂时无法获知空闲 GPU 数量"
    none = {"free": 0, "total": 0, "waiting": 0, "known": True, "memory_mib": 0}
    assert describe_kube_profile(t4, none, CNY, "zh-CN") == "1× T4 — ¥0.05/分钟 — 集群中没有这种 GPU"
    alloc.cancel("w/")
    await asyncio.gather(waiter, return_exceptions=True)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("A100", 1, True, 1, 1), "正在等待空闲的 模拟 A100 — 排队中：第 1 位，共 1 位"),
        (("T4", 2, False, 2, 3), "正在等待 2 块空闲的 T4 GPU — 排队中：第 2 位，共 3 位"),
        (("Simulated T4", 1, True, 1, 2), "正在等待空闲的 模拟 T4 — 排队中：第 1 位，共 2 位"),
    ],
)
def test_queue_message_in_chinese(args, message):
    assert queue_message(*args, lang="zh-CN") == message


def test_assignment_message():
    alloc = simulated_allocator()
    devices = alloc.matching("T4")[:1]
    t4 = ZH_PROFILES["t4"]
    english = assignment_message(t4, devices, CNY)
    assert english == f"Assigned Simulated T4 ({devices[0].uuid}); starting One T4 at CN¥0.05/min"
    assert assignment_message(t4, devices, CNY, "zh-CN") == (
        f"已分配 模拟 T4 ({devices[0].uuid})；正在启动 一块 T4，费率 ¥0.05/分钟"
    )
    assert assignment_message(ZH_PROFILES["cpu"], [], CNY, "zh-CN") == "未分配 GPU；正在启动 cpu，费率 ¥0.00/分钟"


# -- check_config --------------------------------------------------------------------------------

GOOD = [
    {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
    {"slug": "cpu", "gpu_count": 0},
]


def config(**traits) -> Config:
    c = Config()
    for name, value in traits.items():
        setattr(c.GPULocalSpawner, name, value)
    return c


def test_check_good_config():
    assert check_config(config(profiles=GOOD, currency="CNY"), GPULocalSpawner) == []


def test_check_config_local_spawner_needs_no_image():
    # GPULocalSpawner runs local processes: a profile without an image is fine
    assert all("image" not in p for p in GOOD)
    assert check_config(config(profiles=GOOD), GPULocalSpawner) == []


def test_check_config_bad_profile_is_named():
    bad = [GOOD[0], {"slug": "big", "gpu_model": "A100", "gpu_count": 2, "price_per_gpu_hour": 15.0}]
    problems = check_config(config(profiles=bad), GPULocalSpawner)
    assert problems == [
        "profile 'big': 'price_per_gpu_hour' must be a decimal string such as '3.00'"
        " (not the float 15.0: money is never a float)"
    ]


def test_check_config_unknown_field_is_named():
    bad = [{**GOOD[0], "gpus": 2}]
    (problem,) = check_config(config(profiles=bad), GPULocalSpawner)
    assert problem.startswith("profile 't4': unknown field(s) 'gpus';")


def test_check_config_no_profiles():
    assert check_config(config(), GPULocalSpawner) == ["profiles must be a non-empty list of profile dicts"]


def test_check_config_bad_currency():
    assert check_config(config(profiles=GOOD, currency="RMB!"), GPULocalSpawner) == [
        "c.GPULocalSpawner.currency must be a three-letter ISO 4217 code such as 'CNY' or 'USD', got 'RMB!'"
    ]


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        (
            "RMB",
            "c.GPULocalSpawner.currency 'RMB' is not an ISO 4217 currency code; did you mean 'CNY' (Chinese Yuan)?",
        ),
        ("cny", "c.GPULocalSpawner.currency is an ISO 4217 code, written in capitals: use 'CNY', not 'cny'"),
    ],
)
def test_check_config_refuses_a_code_that_is_no_currency_in_use(code, problem):
    assert check_config(config(profiles=GOOD, currency=code), GPULocalSpawner) == [problem]


def test_check_config_suggests_round_prices_in_the_currencys_minor_unit():
    inexact = [{**GOOD[0], "price_per_gpu_hour": "1.00001"}]
    (problem,) = check_config(config(profiles=inexact, currency="JPY"), GPULocalSpawner)
    assert problem.startswith("profile 't4' price_per_gpu_hour: 1.00001/hour is not a whole number of 0.000001")
    assert problem.endswith("use 0.99996 or 1.00002, or a round price such as 3")  # yen have no minor unit


def test_check_config_reports_every_problem():
    bad = [{**GOOD[0], "gpu_count": -1}]
    problems = check_config(config(profiles=bad, currency="EURO"), GPULocalSpawner)
    assert len(problems) == 2
    assert problems[0].startswith("c.GPULocalSpawner.currency must be a three-letter ISO 4217 code")
    assert problems[1] == "profile 't4': 'gpu_count' must be an integer from 0 to 64, got -1"


def test_check_config_callable_profiles_are_checked_at_spawn_time():
    assert check_config(config(profiles=lambda spawner: [{"slug": "BAD"}]), GPULocalSpawner) == []


def test_check_config_bad_inventory():
    problems = check_config(config(profiles=GOOD, gpu_backend="static"), GPULocalSpawner)
    assert problems == ["static_gpus must be a non-empty list of {'index','uuid','name','memory_gb'} dicts"]
    problems = check_config(config(profiles=GOOD, simulated_gpus=[{"model": "T4", "count": 0}]), GPULocalSpawner)
    assert problems == ["simulated_gpus #1: 'count' must be an integer from 1 to 256"]


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("currency", 5, "expected a unicode string"),
        ("queue_timeout", -1, "queue_timeout must be between 0 and one week"),
        ("gpu_backend", "cuda", "gpu_backend"),
    ],
)
def test_check_config_reports_wrong_option_types_as_problems(section, value, message):
    c = Config()
    setattr(c.GPULocalSpawner, section, value)
    problems = check_config(c, GPULocalSpawner)
    assert len(problems) == 1 and message in problems[0]


def test_check_config_flags_a_profile_no_gpu_of_this_host_can_serve():
    c = Config()
    c.GPULocalSpawner.profiles = [
        {"slug": "v100", "gpu_model": "V100", "price_per_gpu_hour": "3"},
        {"slug": "t4x8", "gpu_model": "T4", "gpu_count": 8, "price_per_gpu_hour": "3"},
        {"slug": "t4", "gpu_model": "T4", "price_per_gpu_hour": "3"},
    ]
    assert check_config(c, GPULocalSpawner) == [
        "profile 'v100': needs 1× 'V100' but this host has 0 (its GPUs: Simulated A100, Simulated T4)",
        "profile 't4x8': needs 8× 'T4' but this host has 2 (its GPUs: Simulated A100, Simulated T4)",
    ]


def test_the_kubernetes_form_line_says_the_same_as_the_hosts_in_cluster_words():
    a100 = PROFILES["a100"]
    counts = {"free": 3, "total": 8, "waiting": 0, "known": True, "memory_mib": 40960}
    assert describe_kube_profile(a100, counts, CNY) == "1× A100 40 GB — CN¥0.25/min — 3 of 8 free"
    assert describe_kube_profile(a100, {**counts, "waiting": 2}, CNY) == (
        "1× A100 40 GB — CN¥0.25/min — 3 of 8 free (2 waiting)"
    )
    assert describe_kube_profile(a100, {**counts, "free": 0, "waiting": 1}, CNY) == (
        "1× A100 40 GB — CN¥0.25/min — none free (1 waiting)"
    )
    assert describe_kube_profile(a100, {**counts, "total": 0, "memory_mib": 0}, CNY) == (
        "1× A100 — CN¥0.25/min — no such GPU in the cluster"
    )
    assert describe_kube_profile(a100, {**counts, "known": False}, CNY) == (
        "1× A100 40 GB — CN¥0.25/min — free GPUs unknown right now"
    )
    assert describe_kube_profile(PROFILES["cpu-paid"], None, CNY) == "CPU only — CN¥0.01/min"


# -- shares and MIG slices in the form and at hub start ---------------------------------

SHARED = profiles_by_slug(
    [
        {"slug": "t4-quarter", "gpu_model": "T4", "gpu_share": 4, "price_per_gpu_hour": "0.75"},
        {"slug": "a100-small", "gpu_model": "A100", "mig": "1g.10gb", "price_per_gpu_hour": "3.00"},
        {"slug": "h100-half", "gpu_model": "H100", "gpu_share": 2, "price_per_gpu_hour": "6.00"},
    ]
)


def shared_allocator_for_form() -> GPUAllocator:
    return GPUAllocator(
        simulated_inventory(
            [
                {"model": "T4", "count": 2, "memory_gb": 16},
                {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb", "1g.10gb"]},
            ]
        )
    )


async def test_the_form_line_of_a_share_counts_shares():
    alloc = shared_allocator_for_form()
    quarter = SHARED["t4-quarter"]
    assert describe_profile(quarter, alloc, CNY) == (
        "share 1/4 of a Simulated T4 4 GB — CN¥0.0125/min — 8 of 8 shares free"
    )
    await alloc.acquire("a/", "T4", 1, share=4)
    assert describe_profile(quarter, alloc, CNY).endswith("— 7 of 8 shares free")
    # a whole T4 profile sees one GPU free: the other is split
    assert describe_profile(PROFILES["t4"], alloc, CNY).endswith("— 1 of 2 free")
    assert describe_profile(quarter, alloc, CNY, "zh-CN") == (
        "模拟 T4 的 1/4 份额 4 GB — ¥0.0125/分钟 — 空闲 7 份，共 8 份"
    )
    for k in ("b/", "c/", "d/", "e/", "f/", "g/", "h/"):
        await alloc.acquire(k, "T4", 1, share=4)
    waiter = asyncio.ensure_future(alloc.acquire("i/", "T4", 1, share=4))
    await asyncio.sleep(0)
    assert describe_profile(quarter, alloc, CNY).endswith("— none free (1 waiting)")
    alloc.release("a/")
    for _ in range(5):
        await asyncio.sleep(0)
    assert waiter.done()


async def test_the_form_line_of_a_mig_slice_counts_slices():
    alloc = shared_allocator_for_form()
    small = SHARED["a100-small"]
    assert describe_profile(small, alloc, CNY) == "MIG 1g.10gb of a Simulated A100 — CN¥0.05/min — 2 of 2 slices free"
    await alloc.acquire("a/", "A100", 1, mig="1g.10gb")
    assert describe_profile(small, alloc, CNY).endswith("— 1 of 2 slices free")
    assert describe_profile(small, alloc, CNY, "zh-CN") == (
        "模拟 A100 的 MIG 1g.10gb 切片 — ¥0.05/分钟 — 空闲 1 个切片，共 2 个"
    )
    # a whole-A100 profile never counts the slices
    assert describe_profile(PROFILES["a100"], alloc, CNY).endswith("— no such GPU on this host")


def test_english_articles_of_real_models():
    from jupyterhub_gpu.spawners.form import unit_head

    assert unit_head(SHARED["h100-half"], "H100", " 40 GB") == "share 1/2 of an H100 40 GB"
    assert unit_head(SHARED["t4-quarter"], "T4", "") == "share 1/4 of a T4"
    assert unit_head(SHARED["a100-small"], "A100", "") == "MIG 1g.10gb of an A100"
    assert unit_head(SHARED["t4-quarter"], "L4", "") == "share 1/4 of an L4"
    assert unit_head(SHARED["t4-quarter"], "V100", "") == "share 1/4 of a V100"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"share": 4}, "Waiting for a free share 1/4 of a Simulated T4 — position 2 of 3"),
        ({"mig": "1g.10gb"}, "Waiting for a free MIG 1g.10gb slice of a Simulated T4 — position 2 of 3"),
    ],
)
def test_queue_message_of_a_share_or_slice(kwargs, message):
    assert queue_message("T4", 1, True, 2, 3, **kwargs) == message
    assert queue_message("A100", 1, False, 1, 1, share=2) == "Waiting for a free share 1/2 of an A100 — position 1 of 1"
    assert queue_message("T4", 1, False, 1, 2, "zh-CN", share=4) == (
        "正在等待空闲的 T4 1/4 份额 — 排队中：第 1 位，共 2 位"
    )


async def test_assignment_message_of_a_share_names_the_physical_gpu():
    alloc = shared_allocator_for_form()
    (share,) = await alloc.acquire("a/", "T4", 1, share=4)
    quarter = SHARED["t4-quarter"]
    assert assignment_message(quarter, [share], CNY) == (
        f"Assigned Simulated T4 share 1/4 ({share.parent_uuid}); starting t4-quarter at CN¥0.0125/min"
    )
    assert "份额 1/4" in assignment_message(quarter, [share], CNY, "zh-CN")


def shared_config(profiles, simulated=None) -> Config:
    c = Config()
    c.GPULocalSpawner.profiles = profiles
    c.GPULocalSpawner.simulated_gpus = simulated or [
        {"model": "T4", "count": 2, "memory_gb": 16},
        {"model": "A100", "count": 1, "memory_gb": 40, "mig": ["3g.20gb", "1g.10gb"]},
    ]
    return c


def test_check_config_accepts_shares_and_slices_the_host_has():
    good = [
        {"slug": "t4-quarter", "gpu_model": "T4", "gpu_share": 4, "price_per_gpu_hour": "0.75"},
        {"slug": "a100-small", "gpu_model": "A100", "mig": "1g.10gb", "price_per_gpu_hour": "3.00"},
        {"slug": "a100-big", "gpu_model": "A100", "mig": "3g.20gb", "price_per_gpu_hour": "6.00"},
    ]
    assert check_config(shared_config(good), GPULocalSpawner) == []


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (
            {"gpu_share": 0},
            "profile 'bad': 'gpu_share' must be an integer from 1 to 16 (how many servers share one GPU), got 0",
        ),
        (
            {"gpu_share": 17},
            "profile 'bad': 'gpu_share' must be an integer from 1 to 16 (how many servers share one GPU), got 17",
        ),
        ({"gpu_share": 4, "gpu_count": 2}, "profile 'bad': 'gpu_share' needs 'gpu_count' 1, got 2"),
        ({"mig": "1g.10gb", "gpu_count": 2}, "profile 'bad': 'mig' needs 'gpu_count' 1, got 2"),
        (
            {"gpu_share": 2, "mig": "1g.10gb"},
            "profile 'bad': 'gpu_share' and 'mig' cannot be used together; choose one",
        ),
        (
            {"mig": "2g.20gb"},
            "profile 'bad': 'mig' '2g.20gb': this host has no MIG 2g.20gb instance of 'A100' (its MIG instances:"
            " Simulated A100 MIG 1g.10gb, Simulated A100 MIG 3g.20gb; create them with nvidia-smi mig, docs/admin.md)",
        ),
        (
            {"gpu_model": "T4", "mig": "1g.10gb"},
            "profile 'bad': 'mig' '1g.10gb': this host has no MIG 1g.10gb instance of 'T4' (its MIG instances:"
            " Simulated A100 MIG 1g.10gb, Simulated A100 MIG 3g.20gb; create them with nvidia-smi mig, docs/admin.md)",
        ),
        (
            {"gpu_share": 4},  # the only A100 is MIG-enabled: no whole A100 to time-slice
            "profile 'bad': 'gpu_share' 4: this host has no whole 'A100' to share (its GPUs: Simulated A100 MIG"
            " 1g.10gb, Simulated A100 MIG 3g.20gb, Simulated T4)",
        ),
    ],
)
def test_check_config_refuses_a_bad_share_or_slice_naming_profile_and_field(extra, problem):
    bad = {"slug": "bad", "gpu_model": "A100", "price_per_gpu_hour": "3.00", **extra}
    good = {"slug": "t4", "gpu_model": "T4", "price_per_gpu_hour": "3.00"}
    assert check_config(shared_config([good, bad]), GPULocalSpawner) == [problem]


def test_the_form_marks_each_profiles_unit():
    alloc = shared_allocator_for_form()
    rows = [SHARED["t4-quarter"], SHARED["a100-small"], PROFILES["t4"]]
    html = render_options_form(rows, None, lambda p: describe_profile(p, alloc, CNY), simulated=True, pools=[])
    assert 'data-profile="t4-quarter" data-unit="share"' in html
    assert 'data-profile="a100-small" data-unit="mig"' in html
    assert 'data-profile="t4" data-unit="gpu"' in html
    assert "share 1/4 of a Simulated T4 4 GB — CN¥0.0125/min — 8 of 8 shares free" in html


def test_the_scheduler_s_settings_need_the_ledger_and_bad_ones_stop_the_hub():
    preemptible = [*GOOD, {"slug": "t4p", "gpu_model": "T4", "price_per_gpu_hour": "3.00", "preemptible": True}]
    problems = check_config(config(profiles=preemptible, fair_share=True), GPULocalSpawner)
    assert "fair_share needs ledger_db_url" in problems[0]
    assert "preemptible profile(s) t4p need ledger_db_url" in problems[1]
    with_ledger = config(profiles=preemptible, fair_share=True, ledger_db_url="sqlite:////tmp/x.sqlite")
    assert check_config(with_ledger, GPULocalSpawner) == []
    for name, value in (("preempt_grace", -1), ("schedule_interval", 0), ("fair_share_half_life", 0)):
        problems = check_config(config(profiles=GOOD, **{name: value}), GPULocalSpawner)
        assert any(name in p for p in problems), (name, problems)
