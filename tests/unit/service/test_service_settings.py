"""The service's settings by concern (c.Budgets, c.Notify, ...), and their deprecated flat names on c.GPUService.

The real GPUService reads a real config file, as the doctor does (command line, then the file, then the groups).
"""

from __future__ import annotations

import logging

import pytest
from traitlets import TraitError

from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.service.settings import DEPRECATED, SETTINGS_CLASSES

# one value for every moved option, each other than its default
VALUES = {
    "alert_thresholds": [50, 90],
    "budget_grace_seconds": 120.0,
    "notify_admin_urls": ["json://127.0.0.1:9/hook"],
    "notify_group_urls": {"cs231n": ["json://127.0.0.1:9/group"]},
    "notify_user_url_template": "mailtos://smtp.example.edu?from=gpu@example.edu&to={username}@example.edu",
    "notify_user_schemes": ["tgram"],
    "notify_user_hosts": ["ntfy.lab.example.edu"],
    "notify_user_mail_url": "mailtos://gpu:pw@smtp.example.edu?from=gpu@example.edu",
    "notify_timeout": 3.0,
    "smtp_host": "smtp.example.edu",
    "smtp_port": 587,
    "smtp_starttls": True,
    "smtp_username": "gpu",
    "smtp_password": "secret",
    "mail_from": "gpu@example.edu",
    "user_email_template": "{username}@example.edu",
    "instructor_emails": {"cs231n": ["ta@example.edu"]},
    "admin_emails": ["admin@example.edu"],
    "webhook_url": "https://hooks.example.edu/gpu",
    "webhook_format": "slack",
    "cull_rules": {"default": [{"kind": "max_age", "minutes": 600, "warn_minutes": 30}]},
    "max_concurrent_jobs": 3,
    "job_time_limit_minutes": 60,
    "job_time_limit_max_minutes": 600,
    "gpu_pool": {"T4": 4},
    "reservation_max_hours": 6.0,
    "reservation_max_gpu_hours_per_week": 40.0,
    "reservation_max_pool_fraction": 0.5,
    "reservation_notice_hours": 12.0,
    "advice_headroom_percent": 30,
    "advice_min_minutes": 20,
    "advice_live_after_minutes": 45,
    "advice_profile_memory_gb": {"v100": 32},
    "advice_digest_weekday": "monday",
    "advice_digest_hour": 9,
}


def load(tmp_path, text: str, name="gpu_service_config.py") -> GPUService:
    path = tmp_path / name
    path.write_text(text)
    service = GPUService(log_level=logging.WARNING)
    service.parse_command_line([f"--config={path}"])
    service.load_service_config()
    service.load_settings()
    return service


def settings_of(service: GPUService) -> dict:
    groups = {cls.__name__: getattr(service, attr) for cls, attr in zip(SETTINGS_CLASSES, ATTRS, strict=True)}
    return {(g, name): getattr(obj, name) for g, obj in groups.items() for name in obj.trait_names(config=True)}


ATTRS = ("budgets", "notify", "legacy_mail", "culling", "jobs", "scheduling", "advice")


def test_every_deprecated_name_is_a_moved_option_and_every_moved_option_has_a_value_here():
    assert set(VALUES) == set(DEPRECATED)
    options = {(cls.__name__, name) for cls in SETTINGS_CLASSES for name in cls.class_own_traits(config=True)}
    assert set(DEPRECATED.values()) == options


def test_the_old_and_the_new_names_give_the_same_settings(tmp_path, capsys):
    old = "".join(f"c.GPUService.{name} = {value!r}\n" for name, value in VALUES.items())
    new = "".join(f"c.{DEPRECATED[n][0]}.{DEPRECATED[n][1]} = {v!r}\n" for n, v in VALUES.items())
    by_old = load(tmp_path, old, "old.py")
    warned = capsys.readouterr().err
    by_new = load(tmp_path, new, "new.py")
    assert settings_of(by_old) == settings_of(by_new)
    assert "deprecated" not in capsys.readouterr().err and "not recognized" not in warned
    for name, (group, option) in DEPRECATED.items():
        assert by_new.config[group][option] is not None
        assert f"GPUService.{name} is deprecated: write it as c.{group}.{option}" in warned
        value = getattr(getattr(by_old, ATTRS[[c.__name__ for c in SETTINGS_CLASSES].index(group)]), option)
        assert value == VALUES[name] or value == tuple(VALUES[name]), name  # every value arrived, none default
    assert by_old.make_alert_settings() == by_new.make_alert_settings()
    assert by_old.make_advice_settings() == by_new.make_advice_settings()


def test_the_command_line_takes_the_old_names_too(tmp_path):
    service = GPUService(log_level=logging.CRITICAL)
    service.parse_command_line(["--GPUService.gpu_pool=T4=4", "--Scheduling.reservation_max_hours=6"])
    service.load_service_config()
    service.load_settings()
    assert service.scheduling.gpu_pool == {"T4": 4}  # a number, as the trait's own parser gives it
    assert service.scheduling.reservation_max_hours == 6


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("c.GPUService.reservation_max_pool_fraction = 2", "GPUService.reservation_max_pool_fraction must be a part"),
        ("c.Scheduling.reservation_max_pool_fraction = 2", "Scheduling.reservation_max_pool_fraction must be a part"),
        ("c.GPUService.advice_digest_hour = 24", "GPUService.advice_digest_hour must be an hour from 0 to 23"),
        ("c.Advice.digest_hour = 24", "Advice.digest_hour must be an hour from 0 to 23"),
        ("c.Culling.rules = {'default': [{'kind': 'nap'}]}", "Culling.rules"),
        ("c.Jobs.max_concurent = 2", "did you mean Jobs.max_concurrent?"),
        ("c.Budget.grace_seconds = 2", "c.Budget in"),
        ("c.GPUService.gpu_pool = {'T4': 1}\nc.Scheduling.gpu_pool = {'T4': 2}", "are both set"),
    ],
)
def test_a_bad_value_stops_the_service_naming_it_and_starts_nothing(tmp_path, monkeypatch, capsys, line, said):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.py"
    config.write_text(line + "\n")
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize([db, f"--config={config}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "jupyterhub-gpu service configuration error: " in err and said in err
    assert "Traceback" not in err
    assert not (tmp_path / "ledger.sqlite").exists()  # nothing was started


def test_a_settings_group_refuses_a_bad_value_by_itself():
    from jupyterhub_gpu.service.settings import Budgets

    with pytest.raises((TraitError, ValueError), match=r"Budgets\.grace_seconds must be positive"):
        Budgets(grace_seconds=0)
