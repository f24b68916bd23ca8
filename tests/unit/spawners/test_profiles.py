"""Profiles: validating the admin's list, and the user's choice from the form or the API."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.spawners.profiles import (
    OptionsError,
    Profile,
    ProfileError,
    choose_profile,
    form_language,
    options_from_form,
    parse_mem_limit,
    parse_profile,
    parse_profiles,
)


def good_profiles() -> list[dict]:
    return [
        {
            "slug": "t4",
            "display_name": "1× T4",
            "description": "For coursework",
            "gpu_model": "T4",
            "gpu_count": 1,
            "image": "jupyterhub-gpu/tensorflow:2.15",
            "price_per_gpu_hour": "3.00",
            "mem_limit": "16G",
            "cpu_limit": 4,
            "default": True,
        },
        {
            "slug": "t4x2",
            "gpu_model": "T4",
            "gpu_count": 2,
            "image": "jupyterhub-gpu/tensorflow:2.15",
            "price_per_gpu_hour": "3.00",
            "price_per_hour": "0.60",
        },
        {
            "slug": "a100",
            "display_name": "1× A100",
            "gpu_model": "A100",
            "gpu_count": 1,
            "image": "jupyterhub-gpu/pytorch:2.3",
            "price_per_gpu_hour": "15.00",
            "allowed_groups": ["thesis", "staff"],
        },
        {"slug": "cpu", "display_name": "CPU only", "gpu_count": 0, "image": "jupyterhub-gpu/base:1"},
    ]


def with_field(**fields) -> list[dict]:
    """The good list with the first profile ('t4') changed; a value of ... removes the field."""
    profiles = good_profiles()
    for name, value in fields.items():
        if value is ...:
            profiles[0].pop(name, None)
        else:
            profiles[0][name] = value
    return profiles


def profile_error(raw_list, require_image=True) -> str:
    with pytest.raises(ProfileError) as info:
        parse_profiles(raw_list, require_image=require_image)
    return str(info.value)


# -- parse_profiles: a good list -------------------------------------------------


def test_parse_good_profiles():
    t4, t4x2, a100, cpu = parse_profiles(good_profiles())
    assert t4 == Profile(
        slug="t4",
        display_name="1× T4",
        gpu_model="T4",
        gpu_count=1,
        image="jupyterhub-gpu/tensorflow:2.15",
        price_per_gpu_hour=Decimal("3.00"),
        price_per_hour=Decimal(0),
        rate_per_minute=Decimal("0.05"),
        allowed_groups=(),
        description="For coursework",
        cpu_limit=4.0,
        mem_limit=16 * 1024**3,
        default=True,
    )
    assert isinstance(t4.cpu_limit, float)
    # two GPUs at 3.00 plus a flat 0.60 per hour: 6.60/h = 0.11/min
    assert t4x2.rate_per_minute == Decimal("0.11")
    assert t4x2.display_name == "t4x2"  # defaults to the slug
    assert t4x2.description == ""
    assert (t4x2.cpu_limit, t4x2.mem_limit, t4x2.default) == (None, None, False)
    assert a100.allowed_groups == ("thesis", "staff")
    assert a100.rate_per_minute == Decimal("0.25")
    assert cpu.gpu_count == 0
    assert cpu.gpu_model == ""
    assert cpu.rate_per_minute == Decimal(0)


def test_gpu_count_defaults_to_one():
    (p,) = parse_profiles([{"slug": "x", "gpu_model": "T4", "image": "i", "price_per_gpu_hour": 3}])
    assert p.gpu_count == 1
    assert p.rate_per_minute == Decimal("0.05")


def test_strings_are_stripped():
    (p,) = parse_profiles(
        [{"slug": "x", "gpu_model": " T4 ", "image": " img ", "display_name": " X ", "price_per_gpu_hour": "3"}]
    )
    assert (p.gpu_model, p.image, p.display_name) == ("T4", "img", "X")


def test_empty_display_name_falls_back_to_slug():
    (p,) = parse_profiles([{"slug": "x", "gpu_count": 0, "image": "i", "display_name": ""}])
    assert p.display_name == "x"


def test_tuple_of_profiles_is_accepted():
    assert [p.slug for p in parse_profiles(tuple(good_profiles()))] == ["t4", "t4x2", "a100", "cpu"]


def test_profile_allows():
    t4, _, a100, _ = parse_profiles(good_profiles())
    assert t4.allows([])
    assert t4.allows(["anyone"])
    assert a100.allows(["students", "thesis"])
    assert not a100.allows(["students"])
    assert not a100.allows([])


# -- parse_profiles: each bad field ------------------------------------------------


def test_unknown_field_is_named():
    message = profile_error(with_field(gpu="T4", colour="red"))
    assert message.startswith("profile 't4': unknown field(s) 'colour', 'gpu';")
    assert "known fields are" in message and "gpu_model" in message


@pytest.mark.parametrize(
    "slug", ["T4", "-t4", "t 4", "t4!", "", "a" * 64, "t4\n", "ü", None, 4, ["t4"], "../t4", "<script>"]
)
def test_bad_slug(slug):
    message = profile_error(with_field(slug=slug))
    assert message.startswith("profile #1: 'slug' must be lowercase letters, digits, '-' or '_' (at most 63)")
    assert message.endswith(f"got {slug!r}")


def test_missing_slug_names_the_position():
    profiles = good_profiles()
    del profiles[2]["slug"]
    assert profile_error(profiles).startswith("profile #3: 'slug' must be")


@pytest.mark.parametrize("slug", ["a" * 63, "0", "t4_x-2"])
def test_good_slugs(slug):
    assert parse_profiles(with_field(slug=slug))[0].slug == slug


def test_profile_that_is_not_a_dict():
    profiles = good_profiles()
    profiles[1] = "t4x2"
    assert profile_error(profiles) == "profile #2 must be a dict, got str"


@pytest.mark.parametrize("count", [-1, 65, 10**9, True, False, 1.0, "1", None])
def test_bad_gpu_count(count):
    message = profile_error(with_field(gpu_count=count))
    assert message == f"profile 't4': 'gpu_count' must be an integer from 0 to 64, got {count!r}"


def test_gpu_count_bounds_are_inclusive():
    assert parse_profiles(with_field(gpu_count=64))[0].gpu_count == 64
    assert parse_profiles(with_field(gpu_count=0))[0].gpu_count == 0


@pytest.mark.parametrize("field", ["price_per_gpu_hour", "price_per_hour"])
def test_float_price(field):
    message = profile_error(with_field(**{field: 3.0}))
    assert message.startswith(f"profile 't4': '{field}' must be a decimal string such as '3.00'")
    assert "money is never a float" in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("-1", "must not be negative"),
        ("abc", "must be a decimal number"),
        ("NaN", "must be a finite number"),
        ("Infinity", "must be a finite number"),
        (True, "must be a decimal string"),
        ("1e20", "must be less than"),
    ],
)
def test_bad_price(value, fragment):
    message = profile_error(with_field(price_per_gpu_hour=value))
    assert message.startswith("profile 't4': 'price_per_gpu_hour' ")
    assert fragment in message


def test_inexact_price_names_profile_and_suggests_a_price():
    message = profile_error(with_field(price_per_gpu_hour="2"))
    assert message == (
        "profile 't4' price_per_gpu_hour: 2/hour is not a whole number of 0.000001 per minute"
        " (2/60 = 0.0333333333...); use 1.99998 or 2.00004, or a round price such as 1.98 or 2.01"
    )


def test_inexact_total_of_gpu_and_flat_price():
    # 2 × 3.00 + 0.01 = 6.01/hour is not exact per minute
    profiles = good_profiles()
    profiles[1]["price_per_hour"] = "0.01"
    assert profile_error(profiles).startswith(
        "profile 't4x2' price_per_gpu_hour: 2 GPUs × 3.00 + price_per_hour 0.01 = 6.01/hour is not a whole number"
    )


def test_missing_price_for_a_gpu_profile():
    assert (
        profile_error(with_field(price_per_gpu_hour=...))
        == "profile 't4': 'price_per_gpu_hour' is required for a GPU profile"
    )


def test_cpu_profile_needs_no_price():
    (p,) = parse_profiles([{"slug": "cpu", "gpu_count": 0, "image": "i"}])
    assert p.rate_per_minute == 0
    (p,) = parse_profiles([{"slug": "cpu", "gpu_count": 0, "image": "i", "price_per_hour": "0.60"}])
    assert p.rate_per_minute == Decimal("0.01")


@pytest.mark.parametrize("model", [..., "", "   ", None, 4])
def test_missing_gpu_model_for_a_gpu_profile(model):
    message = profile_error(with_field(gpu_model=model))
    assert message.startswith("profile 't4': 'gpu_model' must be a non-empty string, got ")


def test_cpu_profile_needs_no_gpu_model():
    (p,) = parse_profiles([{"slug": "cpu", "gpu_count": 0, "image": "i"}])
    assert p.gpu_model == ""


@pytest.mark.parametrize("image", [..., "", " ", None, 3])
def test_missing_image_when_required(image):
    message = profile_error(with_field(image=image))
    assert message.startswith("profile 't4': 'image' must be a non-empty string, got ")


def test_missing_image_is_fine_when_not_required():
    profiles = parse_profiles(with_field(image=...), require_image=False)
    assert profiles[0].image == ""


def test_bad_image_type_is_refused_even_when_not_required():
    assert profile_error(with_field(image=3), require_image=False).startswith(
        "profile 't4': 'image' must be a non-empty string"
    )


@pytest.mark.parametrize("field", ["display_name", "description"])
@pytest.mark.parametrize("value", [5, {}, ["1× T4"]])
def test_bad_text_fields(field, value):
    assert profile_error(with_field(**{field: value})) == (
        f"profile 't4': '{field}' must be a non-empty string or a mapping of language to text such as"
        f' {{"en": "1× T4", "zh-CN": "1 块 T4"}}, got {value!r}'
    )


# -- display names and descriptions per language --------------------------------------


def test_texts_per_language():
    t4 = parse_profiles(
        with_field(
            display_name={"en": " 1× T4 ", "zh-CN": "1 块 T4"}, description={"en": "For coursework", "zh-CN": "课程用"}
        )
    )[0]
    # English wherever one text is wanted (the ledger's pricing, the usage pages, the logs)
    assert (t4.display_name, t4.description) == ("1× T4", "For coursework")
    assert (t4.name_in("zh-CN"), t4.description_in("zh-CN")) == ("1 块 T4", "课程用")
    assert (t4.name_in("en"), t4.name_in("fr")) == ("1× T4", "1× T4")


def test_a_language_without_its_text_falls_back_to_english():
    t4 = parse_profiles(with_field(display_name={"en": "1× T4"}))[0]
    assert t4.name_in("zh-CN") == "1× T4" and t4.description_in("zh-CN") == "For coursework"
    plain = parse_profiles(good_profiles())[1]  # no display name: its slug, in every language
    assert plain.name_in("zh-CN") == plain.display_name == "t4x2"


def test_a_blank_text_is_as_if_not_given():
    assert parse_profiles(with_field(display_name="  "))[0].display_name == "t4"
    assert parse_profiles(with_field(description=""))[0].description == ""


@pytest.mark.parametrize("field", ["display_name", "description"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"en": "x", "zh": "y"}, "has unknown language(s) 'zh'; use 'en', 'zh-CN'"),
        ({"en": "x", "zh_CN": "y", "fr": "z"}, "has unknown language(s) 'zh_CN', 'fr'; use 'en', 'zh-CN'"),
        ({"zh-CN": "y"}, "needs its English text under 'en' (shown where a language is missing)"),
        ({"en": "x", "zh-CN": " "}, "in 'zh-CN' must be a non-empty string, got ' '"),
        ({"en": "", "zh-CN": "y"}, "in 'en' must be a non-empty string, got ''"),
        ({"en": "x", "zh-CN": 3}, "in 'zh-CN' must be a non-empty string, got 3"),
    ],
)
def test_bad_texts_per_language_are_refused_at_start(field, value, message):
    assert profile_error(with_field(**{field: value})) == f"profile 't4': '{field}' {message}"


def test_texts_per_language_are_published_in_english(tmp_path):
    """The ledger keeps one display name per profile (the pages and the API show it): the English."""
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    profiles = parse_profiles(with_field(display_name={"en": "1× T4", "zh-CN": "1 块 T4"}))
    ledger.set_pricing([asdict(p) for p in profiles], "CNY", datetime.now(timezone.utc))
    assert [p["display_name"] for p in ledger.pricing()][:2] == ["1× T4", "t4x2"]


@pytest.mark.parametrize("groups", ["thesis", ["thesis", ""], ["thesis", 3], {"thesis": 1}, 3, [None]])
def test_bad_allowed_groups(groups):
    message = profile_error(with_field(allowed_groups=groups))
    assert message == f"profile 't4': 'allowed_groups' must be a list of group names, got {groups!r}"


def test_allowed_groups_as_tuple_or_set():
    assert parse_profiles(with_field(allowed_groups=("a", "b")))[0].allowed_groups == ("a", "b")
    assert parse_profiles(with_field(allowed_groups={"a"}))[0].allowed_groups == ("a",)


@pytest.mark.parametrize("cpu", [0, -1, 1025, True, "4", float("nan"), float("inf")])
def test_bad_cpu_limit(cpu):
    message = profile_error(with_field(cpu_limit=cpu))
    assert message == f"profile 't4': 'cpu_limit' must be a positive number of CPUs, got {cpu!r}"


@pytest.mark.parametrize("cpu", [0.5, 1, 1024])
def test_good_cpu_limit(cpu):
    assert parse_profiles(with_field(cpu_limit=cpu))[0].cpu_limit == float(cpu)


@pytest.mark.parametrize("mem", ["lots", "8X", "-8G", "8 G B B", 8.0, True, [8], "G"])
def test_bad_mem_limit(mem):
    message = profile_error(with_field(mem_limit=mem))
    assert message == f"profile 't4': mem_limit must be like '8G' or a number of bytes, got {mem!r}"


@pytest.mark.parametrize("mem", ["1M", 1024, "3M", "8"])
def test_too_small_mem_limit(mem):
    assert profile_error(with_field(mem_limit=mem)) == f"profile 't4': mem_limit must be at least 4M, got {mem!r}"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8G", 8 * 1024**3),
        ("8g", 8 * 1024**3),
        ("8GB", 8 * 1024**3),
        ("8GiB", 8 * 1024**3),
        (" 8 G ", 8 * 1024**3),
        ("512M", 512 * 1024**2),
        ("1.5G", int(1.5 * 1024**3)),
        ("1T", 1024**4),
        ("4096K", 4 * 1024**2),
        ("4194304", 4 * 1024**2),
        (4 * 1024**2, 4 * 1024**2),
        (None, None),
    ],
)
def test_parse_mem_limit(value, expected):
    assert parse_mem_limit(value, "profile 'x'") == expected


def test_mem_limit_in_profile():
    assert parse_profiles(with_field(mem_limit="8G"))[0].mem_limit == 8 * 1024**3


@pytest.mark.parametrize("default", ["yes", 1, None])
def test_bad_default(default):
    assert (
        profile_error(with_field(default=default)) == f"profile 't4': 'default' must be true or false, got {default!r}"
    )


def test_duplicate_slugs():
    profiles = good_profiles()
    profiles[3]["slug"] = "t4x2"
    assert profile_error(profiles) == "profile 't4x2': the slug is used by more than one profile"


def test_two_defaults():
    profiles = good_profiles()
    profiles[2]["default"] = True
    message = profile_error(profiles)
    assert message == "profiles ['t4', 'a100']: only one profile may be the default"


@pytest.mark.parametrize("raw", [[], (), None, "t4", {"slug": "t4"}])
def test_empty_or_non_list(raw):
    assert profile_error(raw) == "profiles must be a non-empty list of profile dicts"


def test_first_bad_profile_is_reported_by_its_own_slug():
    profiles = good_profiles()
    profiles[2]["gpu_count"] = -1
    assert profile_error(profiles).startswith("profile 'a100': 'gpu_count'")


def test_parse_profile_single():
    p = parse_profile({"slug": "x", "gpu_count": 0}, 0, require_image=False)
    assert (p.slug, p.image, p.gpu_count) == ("x", "", 0)


def test_profile_error_is_a_value_error():
    assert issubclass(ProfileError, ValueError)
    assert issubclass(OptionsError, ValueError)


# -- options_from_form ------------------------------------------------------------


@pytest.fixture
def everything():
    return parse_profiles(good_profiles())


@pytest.fixture
def students(everything):
    """The profiles a user outside the 'thesis' group may use."""
    return [p for p in everything if p.allows(["students"])]


def options_error(formdata, allowed, all_profiles=None) -> str:
    with pytest.raises(OptionsError) as info:
        options_from_form(formdata, allowed, all_profiles)
    return str(info.value)


def test_good_form_with_xsrf(students):
    formdata = {"profile": ["t4x2"], "_xsrf": ["2|abc|def|123"]}
    assert options_from_form(formdata, students) == {"profile": "t4x2"}


def test_good_form_without_xsrf(students):
    assert options_from_form({"profile": ["cpu"]}, students) == {"profile": "cpu"}


def test_form_unknown_slug(students):
    assert options_error({"profile": ["v100"]}, students) == "Unknown profile 'v100'."


def test_form_profile_of_another_group(students, everything):
    assert options_error({"profile": ["a100"]}, students, everything) == (
        "You may not use the profile 'a100': it is reserved for other groups."
    )


def test_form_profile_of_another_group_without_all_profiles_is_unknown(students):
    assert options_error({"profile": ["a100"]}, students) == "Unknown profile 'a100'."


@pytest.mark.parametrize(
    ("formdata", "fields"),
    [
        ({"profile": ["t4"], "image": ["evil:latest"]}, "image"),
        ({"profile": ["t4"], "gpu_count": ["8"], "_xsrf": ["x"]}, "gpu_count"),
        ({"profile": ["t4"], "price_per_gpu_hour": ["0"], "cpu_limit": ["64"]}, "cpu_limit, price_per_gpu_hour"),
        ({"profile": ["t4"], "xsrf": ["x"]}, "xsrf"),
    ],
)
def test_form_extra_fields(students, formdata, fields):
    assert options_error(formdata, students) == f"Unexpected form field(s): {fields}. Nothing was started."


@pytest.mark.parametrize(
    ("lang", "expected"),
    [(["zh-CN"], "zh-CN"), (["en"], "en"), (["klingon"], None), (["zh-CN", "en"], None), ("zh-CN", None), ([], None)],
)
def test_the_form_s_language_is_one_of_ours_or_none(students, lang, expected):
    """The hidden field the form carries back: only a language we have words the refusals; never an option."""
    assert form_language({"profile": ["t4"], "lang": lang}) == expected
    assert form_language({"profile": ["t4"]}) is None
    assert options_from_form({"profile": ["t4"], "lang": lang}, students) == {"profile": "t4"}


def test_a_refusal_is_worded_in_either_language(students, everything):
    with pytest.raises(OptionsError) as info:
        options_from_form({"profile": ["a100"]}, students, everything)
    assert str(info.value) == "You may not use the profile 'a100': it is reserved for other groups."
    assert info.value.worded("zh-CN") == "您不能使用配置 'a100'：它仅供其他组使用。"
    with pytest.raises(OptionsError) as info:
        options_from_form({"profile": ["t4"], "x" * 500: ["1"]}, students)
    assert len(str(info.value)) < 200  # a field name sent is shown shortened, not echoed


def test_form_two_values_for_profile(students):
    assert options_error({"profile": ["t4", "cpu"]}, students) == "Choose exactly one profile. Nothing was started."


@pytest.mark.parametrize("formdata", [{}, {"_xsrf": ["x"]}, {"profile": []}, {"profile": None}])
def test_form_missing_profile(students, formdata):
    assert options_error(formdata, students) == "Choose a profile. Nothing was started."


@pytest.mark.parametrize("value", ["t4", [b"t4"], [None], ("t4",)])
def test_form_malformed_profile_value(students, value):
    assert options_error({"profile": value}, students) == "Choose exactly one profile. Nothing was started."


def test_form_empty_slug_is_unknown(students):
    assert options_error({"profile": [""]}, students) == "Unknown profile ''."


def test_form_with_no_profile_allowed():
    assert options_error({"profile": ["t4"]}, []) == (
        "No profile is available to you. Ask your instructor or administrator for access."
    )


# -- choose_profile ----------------------------------------------------------------


def choice_error(user_options, allowed, all_profiles=None) -> str:
    with pytest.raises(OptionsError) as info:
        choose_profile(user_options, allowed, all_profiles)
    return str(info.value)


def test_choose_named_profile(students):
    assert choose_profile({"profile": "t4x2"}, students).slug == "t4x2"


def test_choose_default_when_none_given(students):
    assert choose_profile({}, students).slug == "t4"


def test_choose_first_when_no_default():
    profiles = parse_profiles(with_field(default=...))
    assert choose_profile({}, profiles).slug == "t4"
    assert choose_profile({}, profiles[1:]).slug == "t4x2"


def test_choose_default_is_not_the_first():
    profiles = good_profiles()
    profiles[0]["default"] = False
    profiles[3]["default"] = True
    assert choose_profile({}, parse_profiles(profiles)).slug == "cpu"


@pytest.mark.parametrize("options", [None, "t4", ["t4"], 3])
def test_choose_non_dict(students, options):
    assert choice_error(options, students) == 'Spawn options must be a JSON object such as {"profile": "t4"}.'


@pytest.mark.parametrize("slug", [3, None, ["t4"], {"slug": "t4"}, True])
def test_choose_non_string_slug(students, slug):
    assert choice_error({"profile": slug}, students) == f"'profile' must be a profile name, got {slug!r}."


def test_choose_extra_options(students):
    assert choice_error({"profile": "t4", "image": "evil", "gpu_count": 8}, students) == (
        "Unexpected option(s): gpu_count, image. Only 'profile', 'pool' and 'resume' may be given."
    )


def test_choose_with_no_profiles_allowed(everything):
    message = "No profile is available to you. Ask your instructor or administrator for access."
    assert choice_error({}, [], everything) == message
    assert choice_error({"profile": "t4"}, [], everything) == message


def test_choose_profile_of_another_group(students, everything):
    assert choice_error({"profile": "a100"}, students, everything) == (
        "You may not use the profile 'a100': it is reserved for other groups."
    )


def test_choose_unknown_profile(students, everything):
    assert choice_error({"profile": "v100"}, students, everything) == "Unknown profile 'v100'."


def test_choose_very_long_unknown_slug_is_truncated(students, everything):
    slug = "x" * 10_000
    message = choice_error({"profile": slug}, students, everything)
    assert message == f"Unknown profile {'x' * 64 + '…'!r}."
    assert len(message) < 100


def test_choose_slug_of_exactly_64_is_not_truncated(students):
    assert choice_error({"profile": "y" * 64}, students) == f"Unknown profile {'y' * 64!r}."


def test_a_huge_value_is_named_not_echoed(students):
    """A nested profile value or a flood of option names gets a message of bounded length (found by fuzzing)."""
    nested = choice_error({"profile": {"x" * 400: [None, 1e16, "y" * 400]}}, students)
    assert nested.startswith("'profile' must be a profile name, got {'xxx") and len(nested) < 120
    flood = choice_error({"profile": "t4", **{f"option-{i}": 1 for i in range(200)}}, students)
    assert flood.startswith("Unexpected option(s): option-0, option-1") and len(flood) < 200
    assert flood.endswith("…. Only 'profile', 'pool' and 'resume' may be given.")


# -- gpu_share and mig ------------------------------------------------------------


def test_gpu_share_and_mig_are_parsed():
    (t4,) = parse_profiles(with_field(gpu_share=4))[:1]
    assert (t4.gpu_share, t4.mig, t4.unit) == (4, None, "share")
    mig = parse_profiles(with_field(mig=" 1g.10gb"))[0]
    assert (mig.gpu_share, mig.mig, mig.unit) == (None, "1g.10gb", "mig")
    assert parse_profiles(with_field(mig="1g.10gb+me"))[0].mig == "1g.10gb+me"
    plain = parse_profiles(good_profiles())[0]
    assert (plain.gpu_share, plain.mig, plain.unit) == (None, None, "gpu")


def test_a_share_of_one_is_a_whole_gpu():
    t4 = parse_profiles(with_field(gpu_share=1))[0]
    assert (t4.gpu_share, t4.unit) == (None, "gpu")
    assert parse_profiles(with_field(gpu_share=16))[0].gpu_share == 16


def test_the_price_of_a_share_is_per_unit():
    t4 = parse_profiles(with_field(gpu_share=4, price_per_gpu_hour="0.75"))[0]
    assert t4.rate_per_minute == Decimal("0.0125")


@pytest.mark.parametrize("share", [0, 17, -1, True, False, 2.0, "4", [4]])
def test_bad_gpu_share(share):
    message = profile_error(with_field(gpu_share=share))
    assert message.startswith("profile 't4': 'gpu_share' must be an integer from 1 to 16")
    assert message.endswith(f"got {share!r}")


@pytest.mark.parametrize("field, value", [("gpu_share", 4), ("mig", "1g.10gb")])
@pytest.mark.parametrize("count", [0, 2])
def test_shares_and_slices_need_one_gpu(field, value, count):
    message = profile_error(with_field(**{field: value, "gpu_count": count}))
    assert message == f"profile 't4': {field!r} needs 'gpu_count' 1, got {count}"


@pytest.mark.parametrize("name", ["1g", "8g.10gb", "1g.10GB", "1g.10gb+xx", "", " ", 1, None.__class__, "mig-1g.10gb"])
def test_bad_mig_name(name):
    message = profile_error(with_field(mig=name))
    assert message.startswith("profile 't4': 'mig' must be a MIG profile name such as '1g.10gb'")


def test_share_and_mig_together_are_refused():
    message = profile_error(with_field(gpu_share=2, mig="1g.10gb"))
    assert message == "profile 't4': 'gpu_share' and 'mig' cannot be used together; choose one"
