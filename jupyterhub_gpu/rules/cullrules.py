"""The cull rules as configured: their kinds, fields, defaults, and which rules a session gets.

A rule (:class:`CullRule`) is a kind (the stop reason of the servers it stops), a time ``T`` (``minutes``), a
warning lead (``warn_minutes``) and, for the GPU rules, a utilization threshold whose default is the idle
definition's (:data:`.idle.IDLE`). :func:`parse_config` reads the service's ``c.Culling.rules`` (a default list,
per-profile and per-group lists), :func:`rules_for` picks a session's. What a rule decides is
:mod:`.culling`; docs/culling.md explains each kind and the defaults.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from jupyterhub_gpu.rules import idle
from jupyterhub_gpu.session import CULL_REASONS, StopReason

#: A rule's kind is the stop reason of the servers it stops.
KINDS = CULL_REASONS
#: Actions from least to most urgent.
ACTIONS = ("none", "cancel", "warn", "stop")
#: Warning lead used when a configured rule gives none (capped below ``minutes``).
DEFAULT_WARN_MINUTES = {
    StopReason.GPU_IDLE: 5,
    StopReason.INACTIVE: 5,
    StopReason.MAX_AGE: 30,
    StopReason.BUSY_GPU_IDLE: 20,
}
#: The largest ``minutes`` a rule may have: a 31-day month.
MAX_MINUTES = 31 * 24 * 60
_RULE_FIELDS = ("kind", "minutes", "warn_minutes", "util_threshold")
_CONFIG_KEYS = ("default", "profiles", "groups")

# -- rules -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CullRule:
    """One cull rule: its kind, its time ``T`` in minutes, its warning lead, and (GPU rules) a threshold.

    ``util_threshold`` is a GPU utilization in percent: below it a minute is
    idle for ``gpu_idle``; at or above it a minute is activity for ``inactive``.
    Left out, it is the idle definition's (:data:`.idle.IDLE`) when the rule is made.
    Constructing a rule validates it (ValueError naming the field).
    """

    kind: str
    minutes: int
    warn_minutes: int
    util_threshold: float | None = None  # None: the idle definition's, set on construction

    def __post_init__(self):
        if self.util_threshold is None:
            object.__setattr__(self, "util_threshold", float(idle.IDLE.util_percent))
        _check_rule(self.kind, self.minutes, self.warn_minutes, self.util_threshold, "rule")

    def to_dict(self) -> dict:
        """The configuration dict this rule parses from."""
        return {
            "kind": self.kind,
            "minutes": self.minutes,
            "warn_minutes": self.warn_minutes,
            "util_threshold": self.util_threshold,
        }


def _check_rule(kind, minutes, warn_minutes, util_threshold, where: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if not _is_int(minutes) or not 2 <= minutes <= MAX_MINUTES:
        raise ValueError(f"{where}.minutes must be a whole number of minutes from 2 to {MAX_MINUTES}, got {minutes!r}")
    if not _is_int(warn_minutes) or not 1 <= warn_minutes < minutes:
        raise ValueError(
            f"{where}.warn_minutes must be a whole number of minutes from 1 to minutes - 1 ({minutes - 1}),"
            f" got {warn_minutes!r}"
        )
    if (
        isinstance(util_threshold, bool)
        or not isinstance(util_threshold, (int, float))
        or not 0 < util_threshold <= 100
    ):
        raise ValueError(f"{where}.util_threshold must be a percentage above 0 and at most 100, got {util_threshold!r}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@cache
def _defaults(definition: idle.IdleRule) -> tuple[CullRule, ...]:
    threshold = float(definition.util_percent)
    return (
        CullRule(StopReason.GPU_IDLE, minutes=30, warn_minutes=5, util_threshold=threshold),
        CullRule(StopReason.INACTIVE, minutes=15, warn_minutes=5, util_threshold=threshold),
        CullRule(StopReason.MAX_AGE, minutes=24 * 60, warn_minutes=30),
        CullRule(StopReason.BUSY_GPU_IDLE, minutes=120, warn_minutes=20, util_threshold=threshold),
    )


def default_rules() -> tuple[CullRule, ...]:
    """The rules of a session no configured list names: :data:`DEFAULT_RULES`, at the idle definition's threshold."""
    return _defaults(idle.IDLE)


#: The defaults (see docs/culling.md for why): the lab rule "GPU utilization under the idle threshold
#: (:data:`.idle.IDLE`, 5%) for 30 minutes", nothing at all (no user, no kernel, no GPU) for 15 minutes, and at
#: most a day per server; each warned 5 minutes ahead (30 for the day); and a busy kernel on a GPU
#: that did nothing for 2 hours, warned 20 minutes ahead.
DEFAULT_RULES: tuple[CullRule, ...] = default_rules()


def parse_rule(raw, where: str = "rule") -> CullRule:
    """A :class:`CullRule` from a config dict such as ``{"kind": "gpu_idle", "minutes": 30}``.

    ``warn_minutes`` defaults to :data:`DEFAULT_WARN_MINUTES` of the kind (at
    most half of ``minutes``), ``util_threshold`` to the idle definition's (5). ValueError messages
    start with ``where`` and name the field.
    """
    if isinstance(raw, CullRule):
        return raw
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a dict such as {{'kind': 'gpu_idle', 'minutes': 30}}, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in _RULE_FIELDS)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not a cull rule field (fields: {', '.join(_RULE_FIELDS)})")
    for required in ("kind", "minutes"):
        if required not in raw:
            raise ValueError(f"{where}.{required} is missing")
    kind, minutes = raw["kind"], raw["minutes"]
    if "warn_minutes" in raw:
        warn = raw["warn_minutes"]
    elif kind in KINDS and _is_int(minutes):
        warn = max(1, min(DEFAULT_WARN_MINUTES[kind], minutes // 2))
    else:
        warn = 1
    threshold = raw["util_threshold"] if "util_threshold" in raw else float(idle.IDLE.util_percent)
    _check_rule(kind, minutes, warn, threshold, where)
    return CullRule(kind=kind, minutes=minutes, warn_minutes=warn, util_threshold=float(threshold))


def parse_rules(raw, where: str = "cull_rules") -> tuple[CullRule, ...]:
    """Rules from a list of config dicts (or CullRules); at most one rule of each kind.

    An empty list is valid and means "never cull".
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Iterable):
        example = "[{'kind': 'gpu_idle', 'minutes': 30}]"
        raise ValueError(f"{where} must be a list of rules such as {example}, got {raw!r}")
    rules = tuple(parse_rule(item, f"{where}[{i}]") for i, item in enumerate(raw))
    seen: set[str] = set()
    for i, rule in enumerate(rules):
        if rule.kind in seen:
            raise ValueError(f"{where}[{i}].kind: a second {rule.kind!r} rule; give at most one rule of each kind")
        seen.add(rule.kind)
    return rules


def parse_config(raw, where: str = "cull_rules") -> dict:
    """Validate and normalise the culling configuration.

    ``raw`` is ``None`` (the defaults) or a dict with any of::

        {"default":  [rule, ...],                  # all sessions; omitted: default_rules()
         "profiles": {profile_slug: [rule, ...]},  # replaces the default for that profile
         "groups":   {group_name: [rule, ...]}}    # replaces the profile's list for members

    Returns the same structure with tuples of :class:`CullRule`. Parsing a
    parsed config again returns an equal one.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a dict with keys {', '.join(_CONFIG_KEYS)}, got {raw!r}")
    unknown = sorted(str(k) for k in raw if k not in _CONFIG_KEYS)
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not a key of the culling config (keys: {', '.join(_CONFIG_KEYS)})")
    out: dict = {"default": default_rules(), "profiles": {}, "groups": {}}
    if "default" in raw:
        out["default"] = parse_rules(raw["default"], f"{where}.default")
    for key in ("profiles", "groups"):
        section = raw.get(key)
        section = {} if section is None else section
        if not isinstance(section, Mapping):
            raise ValueError(f"{where}.{key} must be a dict of name -> list of rules, got {section!r}")
        for name, rules in section.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where}.{key}: names must be non-empty strings, got {name!r}")
            out[key][name] = parse_rules(rules, f"{where}.{key}[{name!r}]")
    return out


def _leniency(rule: CullRule) -> tuple:
    # longer T, then (gpu rules) a lower threshold, then a longer warning
    return (rule.minutes, -rule.util_threshold if rule.kind != StopReason.MAX_AGE else 0, rule.warn_minutes)


def most_lenient(rule_lists: Sequence[Sequence[CullRule]]) -> tuple[CullRule, ...]:
    """Per kind, the most lenient rule of several lists; a kind missing from any list is dropped.

    A list without a rule of some kind never culls for it, which is the most
    lenient there is. Among rules of one kind the longest ``minutes`` wins, then
    the lowest ``util_threshold``, then the longest warning.
    """
    if not rule_lists:
        return ()
    merged = []
    for kind in KINDS:
        candidates = [r for rules in rule_lists for r in rules if r.kind == kind]
        if len(candidates) < len(rule_lists):  # one rule per kind per list: some list lacks it
            continue
        merged.append(max(candidates, key=_leniency))
    return tuple(merged)


def rules_for(profile_slug: str | None, groups: Iterable[str], config) -> tuple[CullRule, ...]:
    """The rules of a session: its groups' lists, else its profile's list, else the default.

    ``config`` is the structure of :func:`parse_config` (raw or parsed; ``None``
    means the defaults). A user in several configured groups gets, per kind,
    the most lenient of those groups' rules (:func:`most_lenient`), so that
    joining a group never makes culling stricter than that group's own rules.
    """
    parsed = parse_config(config)
    matched = [parsed["groups"][g] for g in sorted(set(groups)) if g in parsed["groups"]]
    if matched:
        return matched[0] if len(matched) == 1 else most_lenient(matched)
    if profile_slug is not None and profile_slug in parsed["profiles"]:
        return parsed["profiles"][profile_slug]
    return parsed["default"]
