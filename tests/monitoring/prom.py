"""A real Prometheus (Debian's package) on loopback for the monitoring tests, with the repository's configs."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

import requests
import yaml

from tests.conftest import ROOT, free_port, wait_for

CONFIG = ROOT / "config" / "prometheus"
DASHBOARD = ROOT / "config" / "grafana" / "jupyterhub-gpu.json"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
#: the scrape jobs of config/prometheus/prometheus.yml, by what they scrape
JOBS = {"jupyterhub": "/hub/metrics", "jupyterhub-gpu": "/services/gpu/metrics"}


def dashboard_expressions(dashboard: dict) -> list[str]:
    """Every query of every panel of a Grafana dashboard, in panel order."""
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict]:
    return [r for g in yaml.safe_load((CONFIG / "rules.yml").read_text())["groups"] for r in g["rules"] if "alert" in r]


def scrape_config_for(workdir: Path, target: str, token_file: Path, interval: str = "1s") -> Path:
    """config/prometheus/prometheus.yml aimed at ``target`` (host:port, plain HTTP) with its paths and jobs kept,
    every interval ``interval``, and rules.yml with every ``for`` at 0 s (promtool's tests check the real ones)."""
    config = yaml.safe_load((CONFIG / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval}
    rules = yaml.safe_load((CONFIG / "rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    (workdir / "rules.yml").write_text(yaml.safe_dump(rules))
    config["rule_files"] = [str(workdir / "rules.yml")]
    for job in config["scrape_configs"]:
        job["scheme"] = "http"
        job["authorization"]["credentials_file"] = str(token_file)
        job["static_configs"] = [{"targets": [target]}]
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def _unix(rfc3339: str) -> float:
    """A time as Prometheus's API writes it (RFC 3339, nanoseconds, Z or an offset) as a Unix time."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", rfc3339)
    assert match, rfc3339
    whole, fraction, zone = match.groups()
    moment = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return moment.timestamp() + float(f"0.{fraction or 0}")


class Prometheus:
    """``prometheus`` on 127.0.0.1 with its own port and storage folder."""

    def __init__(self, workdir: Path, config: Path):
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=open(self.log_file, "wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._ready, 60, what=f"prometheus at {self.url} (log: {self.log_file})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self.proc.returncode}: {self.log_file.read_text()[-2000:]}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def api(self, path: str, **params) -> dict:
        r = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        assert r.status_code == 200, (path, params, r.text[:500])
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def targets(self) -> list[dict]:
        return self.api("targets")["activeTargets"]

    def firing(self) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["state"] == "firing"]

    def wait_firing(self, name: str, timeout: float = 30, **labels) -> dict:
        def found():
            for a in self.firing():
                if a["labels"]["alertname"] == name and all(a["labels"].get(k) == v for k, v in labels.items()):
                    return a
            return None

        return wait_for(found, timeout, interval=0.5, what=f"alert {name} {labels} firing")

    def wait_resolved(self, name: str, timeout: float = 30) -> None:
        wait_for(
            lambda: not [a for a in self.firing() if a["labels"]["alertname"] == name],
            timeout,
            interval=0.5,
            what=f"alert {name} resolved",
        )

    def wait_evaluated(self, after: float, timeout: float = 30) -> None:
        """Wait until every rule group was evaluated after the Unix time ``after`` (on what was scraped by then)."""

        def done():
            groups = self.api("rules")["groups"]
            return groups and all(_unix(g["lastEvaluation"]) > after for g in groups)

        wait_for(done, timeout, interval=0.5, what=f"the rules evaluated after {after}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
