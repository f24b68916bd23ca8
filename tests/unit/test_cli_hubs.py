"""``jupyterhub-gpu usage --hub``: the filter sent to the service, a HUB column where the sessions listed ran on
several hubs, and a name that is none refused before anything is sent."""

from __future__ import annotations

import pytest

from tests.unit.test_cli import run, service  # noqa: F401 (the recording service fixture)


def usage(*hubs: str) -> dict:
    sessions = [
        {
            "hub": hub,
            "user": "ann",
            "server_name": "",
            "profile": "t4",
            "gpu_count": 1,
            "started": "2026-11-01T00:00:00Z",
            "stopped": "2026-11-01T00:02:00Z",
            "minutes_billed": 2,
            "cost": "0.1",
            "currency": "CNY",
        }
        for hub in hubs
    ]
    totals = {"sessions": len(hubs), "minutes_billed": 2 * len(hubs), "gpu_minutes": 2 * len(hubs), "cost": {}}
    return {"sessions": sessions, "totals": totals}


def test_usage_sends_the_hub_and_shows_a_hub_column_for_several_hubs(service):  # noqa: F811
    service.answers.append((200, usage("lab-docker", "dept-k8s")))
    code, out = run("usage", "--all")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["HUB", "USER", "SERVER"]
    assert [line.split()[0] for line in lines[1:3]] == ["lab-docker", "dept-k8s"]
    service.answers.append((200, usage("dept-k8s")))
    code, out = run("usage", "--all", "--hub", "dept-k8s")
    assert code == 0
    assert service.requests[-1]["path"] == "/services/gpu/api/v1/usage?hub=dept-k8s&all=true"
    assert out.splitlines()[0].split()[0] == "USER"  # one hub: no column for it


@pytest.mark.parametrize("bad", ["", " lab", "a/b", "x" * 256])
def test_a_hub_that_is_no_name_exits_2_and_sends_nothing(service, bad, capsys):  # noqa: F811
    with pytest.raises(SystemExit) as e:
        run("usage", "--all", "--hub", bad)
    assert e.value.code == 2
    assert "is not a hub name" in capsys.readouterr().err
    assert service.requests == []
