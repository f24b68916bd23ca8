"""GPU profiles: parsing and validating the admin's profile list, and the user's choice.

A profile is what a student picks on the spawn page: a GPU model and count, the
image to run, its price, and who may use it. Everything here is a pure function
of its inputs so it can be tested without a hub.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from decimal import Decimal

from jupyterhub_gpu.gpus.device import MAX_SHARES
from jupyterhub_gpu.i18n import LANGUAGES
from jupyterhub_gpu.money import Currency, MoneyError, parse_amount, profile_rate
from jupyterhub_gpu.spawners.messages import UserError, shown

#: the admins' edits of prices and access (:func:`apply_overrides`)
access_log = logging.getLogger("jupyterhub_gpu.access")

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
KUEUE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MEM_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)i?B?$", re.IGNORECASE)
MEM_FACTORS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}

PROFILE_FIELDS = {
    "slug",
    "display_name",
    "description",
    "gpu_model",
    "gpu_count",
    "image",
    "price_per_gpu_hour",
    "price_per_hour",
    "allowed_groups",
    "cpu_limit",
    "mem_limit",
    "default",
    "gpu_share",
    "mig",
    "preemptible",
    "price_factor",
    "kueue_queue",
}
#: A MIG profile's name, as ``nvidia-smi mig -lgip`` lists it ("1g.10gb", "3g.20gb", "1g.10gb+me").
MIG_PROFILE_RE = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?$")
#: The most servers that may share one physical GPU.
MAX_GPU_SHARE = MAX_SHARES

#: Form fields a browser may send besides the profile: JupyterHub's own CSRF token, and the language
#: the form was shown in (its refusals answer in it).
HUB_FORM_FIELDS = {"_xsrf", "lang"}
#: The fields an admin may write per language: a string, or ``{"en": ..., "zh-CN": ...}``.
TEXT_FIELDS = ("display_name", "description")
#: Server names the gpu service gives the servers of notebook jobs (``job-<id>``); nobody else may use them.
JOB_SERVER_PREFIX = "job-"


class ProfileError(ValueError):
    """A profile in the configuration is invalid; the message names it and the field."""


class OptionsError(UserError, ValueError):
    """The user's spawn options are invalid; the message is shown to the user, in their language."""


@dataclass(frozen=True)
class Profile:
    """One validated profile."""

    slug: str
    display_name: str
    gpu_model: str
    gpu_count: int
    image: str
    price_per_gpu_hour: Decimal
    price_per_hour: Decimal
    rate_per_minute: Decimal
    allowed_groups: tuple[str, ...] = ()
    description: str = ""
    #: ``(language, text)`` of a display name or description an admin gave per language (English is above)
    display_names: tuple[tuple[str, str], ...] = ()
    descriptions: tuple[tuple[str, str], ...] = ()
    cpu_limit: float | None = None
    mem_limit: int | None = None
    default: bool = False
    #: how many servers share one physical GPU (2..16; a whole GPU is None), or the MIG slice ("1g.10gb")
    gpu_share: int | None = None
    mig: str | None = None
    #: the cheaper tier: may be stopped after a notice to free its GPU for a full-price request;
    #: ``price_factor`` is what its configured prices were multiplied by (the prices above are the factored ones)
    preemptible: bool = False
    price_factor: Decimal = Decimal(1)
    #: Kubernetes: the LocalQueue of Kueue this profile's pods go to (docs/kubernetes.md, "With Kueue"); None: none
    kueue_queue: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def tier(self) -> str:
        return "preemptible" if self.preemptible else "standard"

    @property
    def unit(self) -> str:
        """What one of this profile's GPUs is: "gpu", "share" (time-sliced) or "mig"."""
        return "share" if self.gpu_share else "mig" if self.mig else "gpu"

    def name_in(self, lang: str) -> str:
        """The display name in ``lang``, else the English one."""
        return dict(self.display_names).get(lang) or self.display_name

    def description_in(self, lang: str) -> str:
        """The description in ``lang``, else the English one."""
        return dict(self.descriptions).get(lang) or self.description

    def allows(self, group_names) -> bool:
        """Whether a user in these groups may use this profile (no groups listed: everyone)."""
        return not self.allowed_groups or bool(set(self.allowed_groups) & set(group_names))


def parse_mem_limit(value, where: str) -> int | None:
    """Bytes from ``"8G"``, ``"512M"`` or an int; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ProfileError(f"{where}: mem_limit must be like '8G' or a number of bytes, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and (m := MEM_RE.match(value.strip())):
        number = int(float(m.group(1)) * MEM_FACTORS[m.group(2).upper()])
    else:
        raise ProfileError(f"{where}: mem_limit must be like '8G' or a number of bytes, got {value!r}")
    if number < 4 * 1024**2:
        raise ProfileError(f"{where}: mem_limit must be at least 4M, got {value!r}")
    return number


def parse_texts(value, name: str, where: str) -> dict[str, str] | None:
    """A display name or description: a string, or a mapping of language to text with "en"; None stays None.

    Returns ``{language: text}`` (a string is English only).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return {"en": value.strip()} if value.strip() else None  # blank: as if not given
    known = ", ".join(map(repr, LANGUAGES))
    if not isinstance(value, dict) or not value:
        raise ProfileError(
            f"{where}: {name!r} must be a non-empty string or a mapping of language to text such as"
            f' {{"en": "1× T4", "zh-CN": "1 块 T4"}}, got {value!r}'
        )
    unknown = [k for k in value if k not in LANGUAGES]
    if unknown:
        raise ProfileError(f"{where}: {name!r} has unknown language(s) {', '.join(map(repr, unknown))}; use {known}")
    if "en" not in value:
        raise ProfileError(f"{where}: {name!r} needs its English text under 'en' (shown where a language is missing)")
    for lang, text in value.items():
        if not isinstance(text, str) or not text.strip():
            raise ProfileError(f"{where}: {name!r} in {lang!r} must be a non-empty string, got {text!r}")
    return {lang: text.strip() for lang, text in value.items()}


def parse_profile(raw: object, position: int, require_image: bool = True, currency: Currency | None = None) -> Profile:
    """One profile dict from the configuration, validated; ProfileError names the bad field."""
    if not isinstance(raw, dict):
        raise ProfileError(f"profile #{position + 1} must be a dict, got {type(raw).__name__}")
    slug = raw.get("slug")
    if not isinstance(slug, str) or not SLUG_RE.fullmatch(slug):
        raise ProfileError(
            f"profile #{position + 1}: 'slug' must be lowercase letters, digits, '-' or '_' (at most 63), got {slug!r}"
        )
    where = f"profile {slug!r}"
    unknown = sorted(set(raw) - PROFILE_FIELDS)
    if unknown:
        raise ProfileError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))};"
            f" known fields are {', '.join(sorted(PROFILE_FIELDS))}"
        )

    def text(name, default=None, required=False):
        value = raw.get(name, default)
        if value is None and not required:
            return default
        if not isinstance(value, str) or (required and not value.strip()):
            raise ProfileError(f"{where}: {name!r} must be a non-empty string, got {value!r}")
        return value.strip()

    gpu_count = raw.get("gpu_count", 1)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or not 0 <= gpu_count <= 64:
        raise ProfileError(f"{where}: 'gpu_count' must be an integer from 0 to 64, got {gpu_count!r}")
    gpu_model = text("gpu_model", "", required=gpu_count > 0)
    image = text("image", "", required=require_image)
    preemptible, factor = parse_tier(raw, gpu_count, where)
    try:
        price_gpu = parse_amount(raw.get("price_per_gpu_hour", 0), f"{where}: 'price_per_gpu_hour'") * factor
        price_flat = parse_amount(raw.get("price_per_hour", 0), f"{where}: 'price_per_hour'") * factor
        if gpu_count > 0 and "price_per_gpu_hour" not in raw:
            raise MoneyError(f"{where}: 'price_per_gpu_hour' is required for a GPU profile")
        rate = profile_rate(gpu_count, price_gpu, price_flat, currency)
    except MoneyError as e:
        message = str(e)
        if message.startswith(where):
            raise ProfileError(message) from None
        # "profile 'a100' price_per_gpu_hour: 1.00001/hour is not ...; use 0.99996 or 1.00002, ..."
        raise ProfileError(f"{where} {message}" if message.startswith("price_") else f"{where}: {message}") from None

    groups = raw.get("allowed_groups", [])
    if (
        isinstance(groups, str)
        or not isinstance(groups, (list, tuple, set))
        or not all(isinstance(g, str) and g for g in groups)
    ):
        raise ProfileError(f"{where}: 'allowed_groups' must be a list of group names, got {groups!r}")

    cpu_limit = raw.get("cpu_limit")
    if cpu_limit is not None:
        if isinstance(cpu_limit, bool) or not isinstance(cpu_limit, (int, float)) or not 0 < cpu_limit <= 1024:
            raise ProfileError(f"{where}: 'cpu_limit' must be a positive number of CPUs, got {cpu_limit!r}")
        cpu_limit = float(cpu_limit)
    default = raw.get("default", False)
    if not isinstance(default, bool):
        raise ProfileError(f"{where}: 'default' must be true or false, got {default!r}")
    gpu_share, mig = parse_share(raw, gpu_count, where)
    names = parse_texts(raw.get("display_name"), "display_name", where) or {"en": slug}
    descriptions = parse_texts(raw.get("description"), "description", where) or {"en": ""}

    return Profile(
        slug=slug,
        display_name=names["en"],
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        image=image,
        price_per_gpu_hour=price_gpu,
        price_per_hour=price_flat,
        rate_per_minute=rate,
        allowed_groups=tuple(groups),
        description=descriptions["en"],
        display_names=tuple((k, v) for k, v in names.items() if k != "en"),
        descriptions=tuple((k, v) for k, v in descriptions.items() if k != "en"),
        cpu_limit=cpu_limit,
        mem_limit=parse_mem_limit(raw.get("mem_limit"), where),
        default=default,
        gpu_share=gpu_share,
        mig=mig,
        preemptible=preemptible,
        price_factor=factor,
        kueue_queue=parse_kueue_queue(raw, where),
    )


def parse_kueue_queue(raw: dict, where: str) -> str | None:
    """A profile's ``kueue_queue``: the name of a LocalQueue (Kubernetes only), or None."""
    value = raw.get("kueue_queue")
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 63 or not KUEUE_NAME_RE.fullmatch(value):
        raise ProfileError(
            f"{where}: 'kueue_queue' must be the name of a LocalQueue (lowercase letters, digits and '-',"
            f" at most 63 characters), got {value!r}"
        )
    return value


def parse_tier(raw: dict, gpu_count: int, where: str) -> tuple[bool, Decimal]:
    """``(preemptible, price_factor)``: the factor, from more than 0 to 1 with at most 4 places, is for the
    preemptible tier only (its prices are the configured ones times it)."""
    preemptible = raw.get("preemptible", False)
    if not isinstance(preemptible, bool):
        raise ProfileError(f"{where}: 'preemptible' must be true or false, got {preemptible!r}")
    if preemptible and not gpu_count:
        raise ProfileError(f"{where}: 'preemptible' is for GPU profiles (a profile with no GPU frees none)")
    value = raw.get("price_factor")
    if value is None:
        return preemptible, Decimal(1)
    if not preemptible:
        raise ProfileError(f"{where}: 'price_factor' is for preemptible profiles; add 'preemptible': True")
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str, Decimal)):
            raise ValueError
        factor = Decimal(str(value).strip())
    except (ValueError, ArithmeticError):
        raise ProfileError(
            f"{where}: 'price_factor' must be a number as a string such as '0.4', got {value!r}"
        ) from None
    if not factor.is_finite() or not 0 < factor <= 1 or factor.as_tuple().exponent < -4:
        raise ProfileError(
            f"{where}: 'price_factor' must be more than 0 and at most 1, with at most 4 places, got {value!r}"
        )
    return preemptible, factor


def parse_share(raw: dict, gpu_count: int, where: str) -> tuple[int | None, str | None]:
    """``(gpu_share, mig)`` of a profile: a share count from 2 to 16 (1 is a whole GPU: None), a MIG slice name."""
    share = raw.get("gpu_share")
    mig = raw.get("mig")
    if share is not None:
        if isinstance(share, bool) or not isinstance(share, int) or not 1 <= share <= MAX_GPU_SHARE:
            raise ProfileError(
                f"{where}: 'gpu_share' must be an integer from 1 to {MAX_GPU_SHARE}"
                f" (how many servers share one GPU), got {share!r}"
            )
        if gpu_count != 1:
            raise ProfileError(f"{where}: 'gpu_share' needs 'gpu_count' 1, got {gpu_count!r}")
        if share == 1:
            share = None
    if mig is not None:
        if not isinstance(mig, str) or not MIG_PROFILE_RE.fullmatch(mig.strip()):
            raise ProfileError(
                f"{where}: 'mig' must be a MIG profile name such as '1g.10gb' or '3g.20gb'"
                f" (nvidia-smi mig -lgip lists them), got {mig!r}"
            )
        mig = mig.strip()
        if gpu_count != 1:
            raise ProfileError(f"{where}: 'mig' needs 'gpu_count' 1, got {gpu_count!r}")
        if raw.get("gpu_share") is not None:
            raise ProfileError(f"{where}: 'gpu_share' and 'mig' cannot be used together; choose one")
    return share, mig


def parse_profiles(raw_list: object, require_image: bool = True, currency: Currency | None = None) -> list[Profile]:
    """The whole profile list, validated: at least one, unique slugs, at most one default.

    ``currency`` (the lab's) words an inexact price's suggestions at its minor unit.
    """
    if not isinstance(raw_list, (list, tuple)) or not raw_list:
        raise ProfileError("profiles must be a non-empty list of profile dicts")
    profiles = [parse_profile(raw, i, require_image, currency) for i, raw in enumerate(raw_list)]
    seen = set()
    for p in profiles:
        if p.slug in seen:
            raise ProfileError(f"profile {p.slug!r}: the slug is used by more than one profile")
        seen.add(p.slug)
    defaults = [p.slug for p in profiles if p.default]
    if len(defaults) > 1:
        raise ProfileError(f"profiles {defaults}: only one profile may be the default")
    return profiles


def options_from_form(formdata: dict, allowed: list[Profile], all_profiles: list[Profile] | None = None) -> dict:
    """The user's choice from the spawn form, validated against the profiles they may use.

    ``formdata`` is JupyterHub's form dict (field name -> list of strings).
    """
    extra = sorted(set(formdata) - {"profile", "pool", "resume"} - HUB_FORM_FIELDS)
    if extra:
        raise OptionsError(
            "Unexpected form field(s): {fields}. Nothing was started.", fields=shown(", ".join(map(str, extra)), 120)
        )
    values = formdata.get("profile")
    if not values:
        raise OptionsError("Choose a profile. Nothing was started.")
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        raise OptionsError("Choose exactly one profile. Nothing was started.")
    choose_profile({"profile": values[0]}, allowed, all_profiles)
    options = {"profile": values[0]}
    pools = formdata.get("pool")
    if pools is not None:
        if not isinstance(pools, list) or len(pools) != 1 or not isinstance(pools[0], str):
            raise OptionsError("Choose at most one group to pay. Nothing was started.")
        if pools[0]:  # "": the default group
            options["pool"] = pools[0]
    resume = formdata.get("resume")
    if resume is not None:
        # the checkbox of a preemptible profile: "on" when ticked (browsers send nothing otherwise)
        if not isinstance(resume, list) or len(resume) != 1 or resume[0] not in ("on", ""):
            raise OptionsError("'resume' must be the form's checkbox. Nothing was started.")
        if resume[0] == "on":
            options["resume"] = True
    return options


def resume_choice(user_options: object, profile: Profile) -> bool:
    """Whether to put the server back in the queue when it is preempted (``"resume": true``; preemptible only)."""
    value = user_options.get("resume", False) if isinstance(user_options, dict) else False
    if not isinstance(value, bool):
        raise OptionsError("'resume' must be true or false, got {value}.", value=shown(repr(value)))
    if value and not profile.preemptible:
        raise OptionsError(
            "'resume' is for preemptible profiles; {profile} is not one. Nothing was started.",
            profile=profile.name_in,
        )
    return value


def form_language(formdata: dict) -> str | None:
    """The language the form was shown in (its hidden ``lang`` field), when it is one of ours."""
    values = formdata.get("lang") if isinstance(formdata, dict) else None
    if isinstance(values, list) and len(values) == 1 and values[0] in LANGUAGES:
        return values[0]
    return None


def choose_profile(user_options: object, allowed: list[Profile], all_profiles: list[Profile] | None = None) -> Profile:
    """The profile named by ``user_options`` (or the default one), if the user may use it."""
    if not isinstance(user_options, dict):
        raise OptionsError('Spawn options must be a JSON object such as {"profile": "t4"}.')
    extra = sorted(set(user_options) - {"profile", "pool", "resume"})
    if extra:
        raise OptionsError(
            "Unexpected option(s): {options}. Only 'profile', 'pool' and 'resume' may be given.",
            options=shown(", ".join(map(str, extra)), 120),
        )
    if not allowed:
        raise OptionsError("No profile is available to you. Ask your instructor or administrator for access.")
    if "profile" not in user_options:
        for p in allowed:
            if p.default:
                return p
        return allowed[0]
    slug = user_options["profile"]
    if not isinstance(slug, str):
        raise OptionsError("'profile' must be a profile name, got {value}.", value=shown(repr(slug)))
    for p in allowed:
        if p.slug == slug:
            return p
    if all_profiles and any(p.slug == slug for p in all_profiles):
        raise OptionsError("You may not use the profile {slug}: it is reserved for other groups.", slug=repr(slug))
    raise OptionsError("Unknown profile {slug}.", slug=repr(shown(slug)))


def pool_choices(profile: Profile, user_groups, budgeted_groups=()) -> list[str]:
    """The groups that may pay for a session of ``profile``: exactly one of them will (docs/admin.md).

    The user's groups the profile is allowed for (all of the user's groups for a
    profile open to everyone), in the profile's ``allowed_groups`` order, then by
    name. When some of them have a group budget that binds the profile now
    (``budgeted_groups``: :func:`.billing.binding_groups`), only those: a
    budget binds its members, so a group without one, or whose budget binds
    nothing now, cannot be chosen to escape it.
    """
    mine = set(user_groups)
    if profile.allowed_groups:
        ordered = [g for g in dict.fromkeys(profile.allowed_groups) if g in mine]
    else:
        ordered = sorted(mine)
    budgeted = [g for g in ordered if g in set(budgeted_groups)]
    return budgeted or ordered


def choose_pool(user_options: object, profile: Profile, user_groups, budgeted_groups=()) -> str | None:
    """The group that pays for this session: ``user_options["pool"]`` if allowed, else the first choice.

    None when the user is in no group. A pool the user is not in, or one the
    profile is not allowed for, is refused with OptionsError (nothing starts).
    """
    choices = pool_choices(profile, user_groups, budgeted_groups)
    pool = user_options.get("pool") if isinstance(user_options, dict) else None
    if pool is None:
        return choices[0] if choices else None
    if not isinstance(pool, str) or not pool:
        raise OptionsError("'pool' must be the name of one of your groups, got {value}.", value=shown(repr(pool)))
    if pool not in choices:
        group = repr(shown(pool))
        if choices:
            raise OptionsError(
                "The group {group} cannot pay for {profile}: choose one of {choices}. Nothing was started.",
                group=group,
                profile=profile.name_in,
                choices=", ".join(choices),
            )
        raise OptionsError(
            "The group {group} cannot pay for {profile}. Nothing was started.", group=group, profile=profile.name_in
        )
    return pool


def job_server_option(server_name: str, options, requested_by_service: bool) -> str | None:
    """Take ``job_id`` out of the spawn options; OptionsError unless this is the gpu service starting a job's server.

    Names beginning with ``job-`` are reserved for the servers the service
    starts for notebook jobs (``POST jobs``, with ``job_id`` in the options): a
    user's own server so named could pass for a job's server (its notices, its
    reports). ``requested_by_service`` is whether the hub request that started
    the spawn came from a service's token (JupyterHub's ``spawner.handler``).
    """
    job_id = None
    if isinstance(options, dict) and "job_id" in options:
        job_id = options.pop("job_id")
        if not isinstance(job_id, str) or server_name != f"{JOB_SERVER_PREFIX}{job_id}":
            if server_name:
                raise OptionsError(
                    "'job_id' is only for the job's own server job-<id>, not {server}.", server=shown(server_name)
                )
            raise OptionsError("'job_id' is only for the job's own server job-<id>, not the default server.")
    if server_name.startswith(JOB_SERVER_PREFIX) or job_id is not None:
        if job_id is None or not requested_by_service:
            raise OptionsError(
                "Server names beginning with {prefix} are reserved for notebook jobs, which the gpu service starts"
                " (POST /services/gpu/api/v1/jobs). Choose another name. Nothing was started.",
                prefix=repr(JOB_SERVER_PREFIX),
            )
    return job_id


def apply_overrides(profiles: list[Profile], overrides: dict) -> list[Profile]:
    """The profiles with the admins' prices and allowed groups (``overrides``: slug -> ``Override``).

    An admin may edit, on the usage pages, a profile's prices and who may use it; a field left
    ``None`` keeps the configured value. A stored edit that no longer prices (the configuration
    changed under it) is ignored with a warning, instead of failing every spawn.
    """
    result = []
    for p in profiles:
        o = overrides.get(p.slug)
        if o is None:
            result.append(p)
            continue
        gpu_price = p.price_per_gpu_hour if o.price_per_gpu_hour is None else o.price_per_gpu_hour
        flat = p.price_per_hour if o.price_per_hour is None else o.price_per_hour
        groups = p.allowed_groups if o.allowed_groups is None else o.allowed_groups
        try:
            rate = profile_rate(p.gpu_count, gpu_price, flat)
        except MoneyError as e:
            access_log.warning("ignoring the price edit of profile %r, which no longer prices: %s", p.slug, e)
            gpu_price, flat, rate = p.price_per_gpu_hour, p.price_per_hour, p.rate_per_minute
        result.append(
            replace(
                p,
                price_per_gpu_hour=gpu_price,
                price_per_hour=flat,
                rate_per_minute=rate,
                allowed_groups=tuple(groups),
            )
        )
    return result
