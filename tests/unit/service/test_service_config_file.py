"""The service's config file: its one name, a --config path that must exist, and errors that name the file."""

from __future__ import annotations

import json

import pytest
from jupyterhub.services.auth import HubOAuth

from jupyterhub_gpu.service.app import CONFIG_FILE, GPUService


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # what a hub gives a managed service (HubOAuth refuses to start without them); no hub is contacted
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
    monkeypatch.setenv("JUPYTERHUB_CLIENT_ID", "service-gpu")
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://127.0.0.1:1/hub/api")
    yield tmp_path
    HubOAuth.clear_instance()  # a service that initialized made the singleton


def db_flag(workdir) -> str:
    return f"--GPUService.db_url=sqlite:///{workdir / 'ledger.sqlite'}"


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize(argv)
    assert exit_info.value.code == 1
    return capsys.readouterr().err


def test_the_default_name_is_the_one_the_docs_use_and_is_read_from_the_working_directory(workdir):
    assert CONFIG_FILE == "gpu_service_config.py" == GPUService.config_file.default_value
    (workdir / CONFIG_FILE).write_text("c.GPUService.tick_interval = 7\n")
    service = GPUService()
    service.initialize([db_flag(workdir)])
    assert service.tick_interval == 7


def test_without_a_file_of_the_default_name_the_service_starts_on_its_defaults(workdir):
    service = GPUService()
    service.initialize([db_flag(workdir)])
    assert service.tick_interval == 30
    assert (workdir / "ledger.sqlite").exists()


@pytest.mark.parametrize("flag", ["--config={}", "--GPUService.config_file={}"])
def test_a_config_path_that_does_not_exist_stops_the_service_naming_it(workdir, capsys, flag):
    missing = workdir / "etc" / "gpu_sevice_config.py"  # a typo of the admin's
    err = refused([db_flag(workdir), flag.format(missing)], capsys)
    assert f"jupyterhub-gpu service configuration error: --config={missing}: no such file" in err
    assert "Traceback" not in err
    assert not (workdir / "ledger.sqlite").exists()  # nothing was started


def test_a_relative_config_path_is_named_with_where_it_was_looked_for(workdir, capsys):
    err = refused([db_flag(workdir), "--config=gpu_config.py"], capsys)
    assert f"--config=gpu_config.py: no such file ({workdir / 'gpu_config.py'})" in err


def test_a_directory_is_not_a_config_file(workdir, capsys):
    (workdir / "conf").mkdir()
    assert "no such file" in refused([db_flag(workdir), f"--config={workdir / 'conf'}"], capsys)


@pytest.mark.parametrize(
    ("text", "line", "error"),
    [
        ("c.GPUService.tick_interval = 5\nc.GPUService.timezone = TIMEZONE\n", 2, "NameError: name 'TIMEZONE'"),
        ("c.GPUService.tick_interval = 5\n\nc.GPUService.currency = 'CNY\n", 3, "SyntaxError"),
    ],
)
def test_an_error_inside_the_config_file_stops_the_service_naming_the_file_and_line(workdir, capsys, text, line, error):
    """traitlets would log it and go on with the defaults (another time zone, no mail): the service does not."""
    path = workdir / "gpu.py"
    path.write_text(text)
    err = refused([db_flag(workdir), f"--config={path}"], capsys)
    assert f"the config file {path}, line {line} failed: {error}" in err
    assert not (workdir / "ledger.sqlite").exists()


def test_a_bad_value_in_the_file_names_the_setting(workdir, capsys):
    path = workdir / "gpu.py"
    path.write_text("c.GPUService.tick_interval = 'often'\n")
    err = refused([db_flag(workdir), f"--config={path}"], capsys)
    assert "jupyterhub-gpu service configuration error:" in err and "tick_interval" in err


def test_the_command_line_wins_over_the_file(workdir):
    path = workdir / "gpu.py"
    path.write_text("c.GPUService.tick_interval = 7\nc.GPUService.reconcile_interval = 120\n")
    service = GPUService()
    service.initialize([db_flag(workdir), f"--config={path}", "--tick-interval=9"])
    assert (service.tick_interval, service.reconcile_interval) == (9, 120)


def test_a_json_config_file_is_read_as_json(workdir):
    path = workdir / "gpu.json"
    path.write_text(json.dumps({"GPUService": {"tick_interval": 11}}))
    service = GPUService()
    service.initialize([db_flag(workdir), f"--config={path}"])
    assert service.tick_interval == 11


def test_a_misspelt_option_stops_the_service_with_the_nearest_name(workdir, capsys):
    """traitlets would only warn, and the service would run without mail: the typo is refused."""
    path = workdir / "gpu.py"
    path.write_text("c.GPUService.smtp_hots = 'smtp.example.edu'\nc.GPUService.tick_interval = 7\n")
    err = refused([db_flag(workdir), f"--config={path}"], capsys)
    assert f"GPUService.smtp_hots (in {path}) is not an option of the gpu service; did you mean" in err
    assert "GPUService.smtp_host?" in err
    assert not (workdir / "ledger.sqlite").exists()


def test_a_misspelt_section_stops_the_service(workdir, capsys):
    path = workdir / "gpu.py"
    path.write_text("c.GPUServise.tick_interval = 7\n")
    err = refused([db_flag(workdir), f"--config={path}"], capsys)
    assert f"c.GPUServise in {path} is not read by the gpu service" in err


def test_an_option_with_no_near_name_points_to_the_list(workdir, capsys):
    path = workdir / "gpu.py"
    path.write_text("c.GPUService.zzzz = 1\n")
    assert "GPUService.zzzz" in (err := refused([db_flag(workdir), f"--config={path}"], capsys)) and "--help-all" in err
