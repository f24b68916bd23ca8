"""Hypothesis on every parser of outside input: the spawn form, profiles, budgets, cull rules, API queries, samples.

The property is the same everywhere: a parser either returns a valid value or
raises its own error type with a message for a person; never another exception
(which the hub or the service would turn into a 500), and never a value that
breaks the invariants the rest of the code relies on.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyterhub_gpu.billing import PERIODS, UNITS, period_window
from jupyterhub_gpu.money import to_micros
from jupyterhub_gpu.rules.cullrules import KINDS, CullRule, parse_config
from jupyterhub_gpu.rules.samples import SAMPLE_FIELDS, SampleError, parse_sample
from jupyterhub_gpu.service.web.params import (
    BUDGET_FIELDS,
    CULLING_PARAMS,
    USAGE_PARAMS,
    BadRequest,
    parse_budget,
    parse_culling_query,
    parse_json_body,
    parse_usage_query,
)
from jupyterhub_gpu.spawners.profiles import (
    PROFILE_FIELDS,
    OptionsError,
    Profile,
    ProfileError,
    choose_profile,
    options_from_form,
    parse_profiles,
)

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TZ = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["", " ", "0", "-1", "3.00", "1e9", "NaN", "t4", "../etc", "a\x00b", "é", "🙂", "None"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)

ALLOWED = parse_profiles(
    [
        {"slug": "t4", "gpu_model": "T4", "gpu_count": 1, "price_per_gpu_hour": "3.00", "default": True},
        {"slug": "cpu", "gpu_count": 0, "price_per_hour": "0.60"},
    ],
    require_image=False,
)
EVERYTHING = [
    *ALLOWED,
    *parse_profiles(
        [{"slug": "a100", "gpu_model": "A100", "gpu_count": 1, "price_per_gpu_hour": "15.00"}], require_image=False
    ),
]


# -- the spawn form and the REST spawn options -------------------------------------------------------

form_keys = st.sampled_from(["profile", "_xsrf", "image", "gpu_count", "profile ", "Profile", ""]) | st.text(max_size=8)
form_values = st.lists(st.text(max_size=70) | st.sampled_from(["t4", "cpu", "a100", "T4", " t4", "t4\x00"]), max_size=3)


@FUZZ
@given(st.dictionaries(form_keys, form_values | scalars, max_size=4))
@example({"profile": ["a100"]})
@example({"profile": ["t4"], "_xsrf": ["x"]})
@example({"profile": ["t4", "cpu"]})
@example({"profile": ["x" * 500]})
def test_the_spawn_form_yields_one_allowed_profile_or_a_message(formdata):
    try:
        options = options_from_form(formdata, ALLOWED, EVERYTHING)
    except OptionsError as e:
        assert str(e).strip() and len(str(e)) < 300  # a message for a person, not an echo of a huge value
        return
    assert options == {"profile": options["profile"]}
    assert options["profile"] in {p.slug for p in ALLOWED}


@FUZZ
@given(json_values | st.dictionaries(st.sampled_from(["profile", "image", "gpus"]), json_values, max_size=2))
@example({"profile": "a100"})
@example({"profile": ["t4"]})
@example({})
def test_rest_spawn_options_choose_an_allowed_profile_or_a_message(options):
    try:
        profile = choose_profile(options, ALLOWED, EVERYTHING)
    except OptionsError as e:
        assert str(e).strip() and len(str(e)) < 300
        return
    assert isinstance(profile, Profile) and profile in ALLOWED


# -- profile configuration --------------------------------------------------------------------------

profile_fields = st.sampled_from([*sorted(PROFILE_FIELDS), "gpus", "price"])
profile_values = st.one_of(
    scalars,
    st.sampled_from(["T4", "A100", "img:1", "8G", "512M", "1.5T", "0", "0.05", "3.00", "15", "4M", "3K"]),
    st.lists(st.sampled_from(["thesis", "", 3]), max_size=2),
    st.integers(min_value=-2, max_value=70),
    st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=0, max_value=10**6).map(str),
)
raw_profiles = st.dictionaries(profile_fields, profile_values, max_size=7).map(
    lambda d: {"slug": "p", **d} if "slug" not in d else d
)


@FUZZ
@given(st.lists(raw_profiles, max_size=3) | scalars)
def test_profile_config_is_valid_or_a_message_naming_the_profile(raw):
    try:
        profiles = parse_profiles(raw, require_image=False)
    except ProfileError as e:
        assert "profile" in str(e)
        return
    assert profiles and len({p.slug for p in profiles}) == len(profiles)
    for p in profiles:
        assert 0 <= p.gpu_count <= 64
        assert isinstance(p.rate_per_minute, Decimal) and p.rate_per_minute >= 0
        assert p.rate_per_minute * 60 == p.price_per_gpu_hour * p.gpu_count + p.price_per_hour  # exact
        to_micros(p.rate_per_minute)  # the ledger can store it exactly
        assert p.mem_limit is None or p.mem_limit >= 4 * 1024**2
        assert p.gpu_count == 0 or p.gpu_model


# -- budgets (PUT budgets/{scope}/{name}) ---------------------------------------------------------------

budget_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "limit": st.one_of(scalars, st.decimals(0, 10**9, places=6).map(str)),
            "unit": st.sampled_from([*UNITS, "hours", None, 1]),
            "period": st.sampled_from([*PERIODS, "day", None, ""]),
            "term_start": st.sampled_from(
                ["2026-09-01", "2026-02-30", "2026-9-1", None, 20260901, "2027-01-31", "0001-01-01"]
            ),
            "term_end": st.sampled_from(["2027-01-31", "2026-08-31", "", None, "9999-12-31"]),
            "extra": scalars,
        },
    ),
)
names = st.text(max_size=12) | st.sampled_from(["alice", "cs231n", " bob", "a/b", "x" * 300, "\x7f", "学生"])


@FUZZ
@given(st.sampled_from(["user", "group", "users", ""]), names, budget_bodies)
@example("user", "a", {"limit": "1", "period": "term", "term_start": "0001-01-01", "term_end": "9999-12-31"})
def test_a_budget_body_becomes_a_rule_or_a_400_message(scope, name, body):
    try:
        rule = parse_budget(scope, name, body)
    except BadRequest as e:
        assert str(e).strip()
        return
    assert rule.scope in ("user", "group") and rule.subject == name
    assert rule.period in PERIODS and rule.unit in UNITS
    assert isinstance(rule.limit, Decimal) and rule.limit >= 0
    to_micros(rule.limit)
    assert (rule.period == "term") == (rule.term_start is not None)
    assert rule.term_start is None or rule.term_start <= rule.term_end
    assert set(body) <= set(BUDGET_FIELDS)
    period_window(rule.period, NOW, TZ, rule.term_start, rule.term_end)  # its period exists (no OverflowError)


@FUZZ
@given(st.binary(max_size=60) | json_values.map(lambda v: json.dumps(v).encode()))
@example(b'{"a": 1, "a": 2}')
@example(b"NaN")
@example(b"\xff\xfe")
@example(b'{"limit": Infinity}')
def test_a_json_body_parses_strictly_or_is_a_400_message(body):
    try:
        parse_json_body(body)
    except BadRequest as e:
        assert str(e).strip()


# -- query strings of GET usage and GET culling -----------------------------------------------------------

query_values = st.lists(
    st.binary(max_size=12)
    | st.sampled_from(
        [
            b"true",
            b"1",
            b"2026-11-01",
            b"2026-11-01T08:00:00+08:00",
            b"2026-13-01",
            b"24",
            b"999",
            b"csv",
            b"9999-12-31",
            b"0001-01-01",
            b"0001-01-01T00:00:00",
            b"9999-12-31T23:00-12:00",
        ]
    ),
    min_size=1,
    max_size=2,
)


def query_strategy(params):
    return st.dictionaries(st.sampled_from([*params, "token", "bogus"]), query_values, max_size=4)


@FUZZ
@given(query_strategy(USAGE_PARAMS))
@example({"until": [b"9999-12-31"]})  # found by this test: an OverflowError (a 500) before the fix
@example({"since": [b"0001-01-01T00:00:00"]})
def test_usage_queries_parse_or_are_a_400_message(arguments):
    try:
        query = parse_usage_query(arguments, TZ)
    except BadRequest as e:
        assert str(e).strip()
        return
    assert query.format in ("json", "csv")
    assert not (query.everyone and (query.user or query.group))
    assert query.since is None or query.until is None or query.since < query.until


@FUZZ
@given(query_strategy(CULLING_PARAMS))
def test_culling_queries_parse_or_are_a_400_message(arguments):
    try:
        query = parse_culling_query(arguments, TZ)
    except BadRequest as e:
        assert str(e).strip()
        return
    assert 1 <= query.horizon.total_seconds() / 3600 <= 168


# -- cull rules (GPUService.cull_rules) -------------------------------------------------------------------

rule_dicts = st.dictionaries(
    st.sampled_from(["kind", "minutes", "warn_minutes", "util_threshold", "bogus"]),
    st.one_of(scalars, st.sampled_from(KINDS), st.integers(-5, 50_000)),
    max_size=4,
)
cull_configs = st.one_of(
    scalars,
    st.dictionaries(
        st.sampled_from(["default", "profiles", "groups", "other"]),
        st.one_of(
            st.lists(rule_dicts, max_size=3),
            st.dictionaries(st.text(max_size=4), st.lists(rule_dicts, max_size=2), max_size=2),
            scalars,
        ),
        max_size=3,
    ),
)


@FUZZ
@given(cull_configs)
def test_cull_config_is_valid_or_a_message_naming_the_field(raw):
    try:
        config = parse_config(raw, "GPUService.cull_rules")
    except ValueError as e:
        assert str(e).startswith("GPUService.cull_rules")
        return
    rule_lists = [config["default"], *config["profiles"].values(), *config["groups"].values()]
    for rules in rule_lists:
        assert all(isinstance(r, CullRule) and 1 <= r.warn_minutes < r.minutes for r in rules)
        assert len({r.kind for r in rules}) == len(rules)
    assert parse_config(config) == config  # parsing a parsed config again changes nothing


# -- samples the server extension posts -----------------------------------------------------------------------

sample_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "session_id": st.text(min_size=0, max_size=70),
            "sampled_until": st.sampled_from(["2026-11-01T08:00:00Z", "x", 5]),
        },
        optional={
            k: st.one_of(scalars, st.integers(-1, 10**8), st.floats(-1, 101))
            for k in sorted(SAMPLE_FIELDS - {"session_id", "sampled_until", "gpus"})
        }
        | {
            "gpus": st.lists(
                st.dictionaries(
                    st.sampled_from(
                        [
                            "uuid",
                            "utilization_avg",
                            "memory_used_max_mib",
                            "scope",
                            "processes",
                            "shared_by",
                            "memory_known",
                            "x",
                        ]
                    ),
                    scalars | st.sampled_from(["own", "gpu"]),
                    max_size=6,
                ),
                max_size=3,
            )
        },
    ),
)


@FUZZ
@given(sample_bodies)
def test_a_sample_body_is_valid_or_a_400_message(body):
    try:
        sample = parse_sample(body)
    except SampleError as e:
        assert str(e).strip()
        return
    assert 0 < len(sample.session_id) <= 64
    assert 0 <= sample.utilization_avg <= 100
    assert sample.sampled_until.tzinfo is not None
    for _uuid, util, mem, scope, processes, shared_by, memory_known in sample.gpus:
        assert 0 <= util <= 100 and mem >= 0
        assert scope in (None, "own", "gpu")
        assert processes is None or processes >= 0
        assert shared_by is None or (type(shared_by) is int and shared_by >= 1)
        assert memory_known in (None, True, False)
