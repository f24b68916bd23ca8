"""The spawn form says each profile's name once: its line does not repeat what the display name says.

Before: under "1× T4" the line read "1× T4 16 GB — ¥0.05/min — 3 of 4 free", and the Chinese form,
under "1 块 T4", read "1× T4 16 GB — ¥0.05/分钟 — …": the English name again.
"""

from __future__ import annotations

import html as html_lib
import re
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyterhub_gpu.gpus.simulated import simulated_inventory
from jupyterhub_gpu.gpus.static import static_inventory
from jupyterhub_gpu.money import Currency
from jupyterhub_gpu.spawners import form as form_module
from jupyterhub_gpu.spawners.assign.host import GPUAllocator
from jupyterhub_gpu.spawners.form import describe_profile, render_options_form
from jupyterhub_gpu.spawners.profiles import parse_profiles

CNY = Currency.from_config("CNY")
ROOT = Path(__file__).resolve().parents[2]

# the profiles as docs/admin.md writes them, on a lab server's real GPUs
DOCS_PROFILES = [
    {"slug": "t4", "display_name": {"en": "1× T4", "zh-CN": "1 块 T4"}, "gpu_model": "T4", "gpu_count": 1,
     "price_per_gpu_hour": "3.00"},
    {"slug": "t4x2", "display_name": {"en": "2× T4", "zh-CN": "2 块 T4"}, "gpu_model": "T4", "gpu_count": 2,
     "price_per_gpu_hour": "3.00"},
    {"slug": "quarter", "display_name": {"en": "¼ T4", "zh-CN": "¼ 块 T4"}, "gpu_model": "T4", "gpu_count": 1,
     "gpu_share": 4, "price_per_gpu_hour": "0.75"},
    {"slug": "cpu", "display_name": {"en": "CPU only", "zh-CN": "仅 CPU"}, "gpu_count": 0, "price_per_hour": "0.60"},
]  # fmt: skip


def real_t4s() -> GPUAllocator:
    return GPUAllocator(
        static_inventory([{"uuid": f"GPU-{i}", "name": "Tesla T4", "memory_mib": 16384} for i in range(4)])
    )


def labels(html: str) -> dict[str, tuple[str, str]]:
    """Each profile's (display name, line) as the form shows them."""
    found = {}
    for m in re.finditer(r'data-profile="([^"]+)".*?<strong>(.*?)</strong>\s*<span class="jupyterhub-gpu-summary[^"]*">'
                         r"(.*?)</span>", html, re.S):  # fmt: skip
        found[m.group(1)] = (html_lib.unescape(m.group(2)).strip(), html_lib.unescape(m.group(3)).strip())
    return found


def form(profiles, allocator, lang):
    return render_options_form(
        profiles, None, lambda p: describe_profile(p, allocator, CNY, lang), simulated=allocator.simulated(),
        pools=[], lang=lang,
    )  # fmt: skip


def test_each_name_once_in_english_on_real_gpus():
    shown = labels(form(parse_profiles(DOCS_PROFILES, require_image=False), real_t4s(), "en"))
    assert shown == {
        "t4": ("1× T4", "16 GB — CN¥0.05/min — 4 of 4 free"),
        "t4x2": ("2× T4", "16 GB — CN¥0.10/min — 4 of 4 free"),
        "quarter": ("¼ T4", "4 GB — CN¥0.0125/min — 16 of 16 shares free"),
        "cpu": ("CPU only", "CN¥0.01/min"),
    }


def test_the_chinese_line_never_repeats_the_english_name():
    html = form(parse_profiles(DOCS_PROFILES, require_image=False), real_t4s(), "zh-CN")
    shown = labels(html)
    assert shown == {
        "t4": ("1 块 T4", "16 GB — ¥0.05/分钟 — 空闲 4 块，共 4 块"),
        "t4x2": ("2 块 T4", "16 GB — ¥0.10/分钟 — 空闲 4 块，共 4 块"),
        "quarter": ("¼ 块 T4", "4 GB — ¥0.0125/分钟 — 空闲 16 份，共 16 份"),
        "cpu": ("仅 CPU", "¥0.01/分钟"),
    }
    for english in ("1× T4", "2× T4", "¼ T4", "CPU only"):
        assert english not in html, english


def test_the_demo_form_says_each_profile_once_in_both_languages():
    c, path = Config(), ROOT / "config/demo_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"c": c, "get_config": lambda: c, "__file__": str(path)})
    profiles = parse_profiles(c.GPULocalSpawner.profiles, require_image=False)
    alloc = GPUAllocator(simulated_inventory(c.GPULocalSpawner.simulated_gpus))
    for lang in ("en", "zh-CN"):
        shown = labels(form(profiles, alloc, lang))
        assert set(shown) == {p.slug for p in profiles}
        for p in profiles:
            name, line = shown[p.slug]
            assert name == p.name_in(lang)
            # the GPUs, the word "simulated" and "CPU only" are said by the name, not again by the line
            for said in ("×", "Simulated", "模拟", "share", "CPU only", "仅 CPU", "preemptible", "可抢占"):
                if said in name or (said in ("Simulated", "模拟") and "simulated" in name):
                    assert said not in line, (lang, p.slug, name, line)
    en = labels(form(profiles, alloc, "en"))
    assert en["t4"] == ("1× T4 (simulated)", "16 GB — CN¥0.05/min — 2 of 2 free")
    assert en["t4-preemptible"][1].startswith("16 GB — CN¥0.02/min — may be interrupted")


@pytest.mark.parametrize(
    ("profile", "lang", "line"),
    [
        # the slug as the name says nothing of the GPUs: the whole line stays
        ({"slug": "big", "gpu_model": "T4", "gpu_count": 2}, "en", "2× T4 16 GB — CN¥0.10/min — 4 of 4 free"),
        # the model without the count of a two-GPU profile: the count stays said
        ({"slug": "x", "display_name": "T4", "gpu_model": "T4", "gpu_count": 2}, "en",
         "2× T4 16 GB — CN¥0.10/min — 4 of 4 free"),
        # "T4" is not in "T40"
        ({"slug": "x", "display_name": "T40 box", "gpu_model": "T4"}, "en", "1× T4 16 GB — CN¥0.05/min — 4 of 4 free"),
        # an English-only name in the Chinese form: it says the model, the line drops it
        ({"slug": "x", "display_name": "1× T4", "gpu_model": "T4"}, "zh-CN", "16 GB — ¥0.05/分钟 — 空闲 4 块，共 4 块"),
    ],
)  # fmt: skip
def test_a_name_that_does_not_say_the_gpus_keeps_the_whole_line(profile, lang, line):
    (p,) = parse_profiles([{"price_per_gpu_hour": "3.00", **profile}], require_image=False)
    assert form_module.form_line(p, describe_profile(p, real_t4s(), CNY, lang), lang) == line


def test_a_share_or_a_slice_keeps_its_part_when_the_name_does_not_say_it():
    profiles = parse_profiles(
        [
            {"price_per_gpu_hour": "3.00", **p}
            for p in (
                {"slug": "shared", "display_name": "Shared T4", "gpu_model": "T4", "gpu_share": 4},
                {"slug": "quarter", "display_name": "T4 1/4", "gpu_model": "T4", "gpu_share": 4},
                {"slug": "slice", "display_name": "A100 slice", "gpu_model": "A100", "mig": "1g.10gb"},
                {"slug": "small", "display_name": "A100 1g.10gb", "gpu_model": "A100", "mig": "1g.10gb"},
            )
        ],
        require_image=False,
    )
    alloc = GPUAllocator(
        static_inventory(
            [
                {"index": 0, "uuid": "GPU-t4", "name": "Tesla T4", "memory_gb": 16},
                {"index": "1:0", "uuid": "MIG-a", "name": "NVIDIA A100-SXM4-40GB MIG 1g.10gb", "memory_gb": 10,
                 "parent_uuid": "GPU-a100"},
            ]
        )
    )  # fmt: skip
    lines = {p.slug: form_module.form_line(p, describe_profile(p, alloc, CNY), "en") for p in profiles}
    assert lines["shared"].startswith("share 1/4 of a T4 ")  # "Shared T4" does not say a quarter
    assert not lines["quarter"].startswith("share")  # "T4 1/4" does
    assert lines["slice"].startswith("MIG 1g.10gb of an A100")  # "A100 slice" does not say which slice
    assert not lines["small"].startswith("MIG")


def test_simulated_gpus_stay_labelled_when_the_name_does_not_say_so():
    (p,) = parse_profiles([{"slug": "t4", "display_name": "One T4", "gpu_model": "T4",
                            "price_per_gpu_hour": "3.00"}], require_image=False)  # fmt: skip
    alloc = GPUAllocator(simulated_inventory([{"model": "T4", "count": 1, "memory_gb": 16}]))
    line = form_module.form_line(p, describe_profile(p, alloc, CNY), "en")
    assert line == "1× Simulated T4 16 GB — CN¥0.05/min — 1 of 1 free"
