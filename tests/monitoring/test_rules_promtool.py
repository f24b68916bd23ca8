"""promtool over config/prometheus: the rules are valid, their unit tests pass, the scrape config loads."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.monitoring.prom import CONFIG, JOBS, PROMTOOL, alert_rules

pytestmark = pytest.mark.prometheus


def promtool(*args: str, cwd=CONFIG) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules():
    done = promtool("check", "rules", "rules.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_promtool_test_rules():
    done = promtool("test", "rules", "rules_test.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    tests = yaml.safe_load((CONFIG / "rules_test.yml").read_text())["tests"]
    cases = [case for t in tests for case in t["alert_rule_test"]]
    for rule in alert_rules():
        mine = [c for c in cases if c["alertname"] == rule["alert"]]
        assert [c for c in mine if c["exp_alerts"]], f"{rule['alert']}: no unit test where it fires"
        assert [c for c in mine if not c["exp_alerts"]], f"{rule['alert']}: no unit test where it stays silent"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


def test_the_scrape_config_loads_with_its_token_file(tmp_path):
    config = yaml.safe_load((CONFIG / "prometheus.yml").read_text())
    assert {job["job_name"]: job["metrics_path"] for job in config["scrape_configs"]} == JOBS
    token = tmp_path / "jupyterhub-token"
    token.write_text("a-token\n")
    for job in config["scrape_configs"]:
        assert job["authorization"] == {"type": "Bearer", "credentials_file": "/etc/prometheus/jupyterhub-token"}
        job["authorization"]["credentials_file"] = str(token)
    config["rule_files"] = [str(CONFIG / "rules.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    done = promtool("check", "config", str(tmp_path / "prometheus.yml"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
