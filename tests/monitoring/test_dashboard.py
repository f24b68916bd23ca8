"""config/grafana/jupyterhub-gpu.json: its datasource a variable, its queries exactly those the live test runs."""

from __future__ import annotations

import json

from tests.monitoring.prom import DASHBOARD, dashboard_expressions
from tests.monitoring.test_prometheus_hub import DASHBOARD_QUERIES

DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def test_the_dashboards_queries_are_the_ones_prometheus_is_asked_in_the_test():
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = dashboard_expressions(dashboard)
    assert len(expressions) == len(set(expressions)), "a query appears twice"
    assert set(expressions) == DASHBOARD_QUERIES


def test_every_panel_reads_the_datasource_variable_and_has_a_place():
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in dashboard["panels"]}
    for part in (
        "Spend by group",
        "Spend by profile",
        "billed vs busy",
        "Queue length",
        "Queue wait",
        "Culls",
        "Stops by reason",
        "Budget use by group",
        "Sessions by profile",
    ):
        assert [t for t in titles if part in t], f"no panel for {part!r}"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"] and all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
