"""The service's ``c.GPUService.hub_name``: a bad one stops the service with a clear line before anything is
opened; a good one scopes its ledger and records the service among the ledger's hub members; a ledger of a newer
schema stops it with a clear line; the spawner's ``hub_name`` is checked at the hub's start."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from traitlets.config import Config

from jupyterhub_gpu.ledger.store import Ledger, make_engine
from jupyterhub_gpu.service.app import GPUService
from jupyterhub_gpu.spawners.local import GPULocalSpawner
from jupyterhub_gpu.spawners.startup import probe_and_check


@pytest.mark.parametrize("name", ["Lab A", "", "-lab", "x" * 64])
def test_a_bad_hub_name_stops_the_service_naming_it_and_opens_nothing(tmp_path, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "config.py"
    config.write_text(f"c.GPUService.hub_name = {name!r}\n")
    db = f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize([db, f"--config={config}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "jupyterhub-gpu service configuration error: GPUService.hub_name must be 1 to 63 characters" in err
    assert repr(name) in err and "Traceback" not in err
    assert not (tmp_path / "ledger.sqlite").exists()


def test_the_hub_name_scopes_the_services_ledger_and_the_service_is_a_member(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_URL", "http://127.0.0.1:8081/hub/api")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    service = GPUService()
    service.initialize([f"--GPUService.db_url={url}", "--hub-name=dept-k8s"])
    assert service.ledger.hub == service.tick_context.ledger.hub == "dept-k8s"
    (member,) = service.ledger.hub_members()
    assert (member.hub, member.role, member.api_url) == ("dept-k8s", "service", "http://127.0.0.1:8081/hub/api")
    service.ledger.withdraw()
    assert service.ledger.hub_members() == []
    service.ledger.close()


def test_without_a_hub_name_the_service_is_the_default_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "t")
    service = GPUService()
    service.initialize([f"--GPUService.db_url=sqlite:///{tmp_path / 'ledger.sqlite'}"])
    assert service.hub_name == service.ledger.hub == "default"
    service.ledger.close()


def test_a_ledger_of_a_newer_schema_stops_the_service_with_a_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger(url).close()
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0042'"))
    engine.dispose()
    with pytest.raises(SystemExit) as exit_info:
        GPUService().initialize([f"--GPUService.db_url={url}"])
    assert exit_info.value.code == 1
    err = capsys.readouterr().err
    assert "jupyterhub-gpu service cannot start: the ledger sqlite:///" in err
    assert "schema revision 0042, newer than this jupyterhub-gpu knows" in err and "Traceback" not in err


def test_the_hubs_start_check_refuses_a_bad_spawner_hub_name():
    config = Config()
    config.GPULocalSpawner.hub_name = "Lab A"
    _, problems = probe_and_check(config, GPULocalSpawner)
    assert any(p.startswith("c.GPULocalSpawner.hub_name must be 1 to 63 characters") for p in problems), problems
    config.GPULocalSpawner.hub_name = "lab-a"
    assert probe_and_check(config, GPULocalSpawner)[1] == []
