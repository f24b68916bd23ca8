"""Two hubs on one ledger: a job is run by the service of its hub, so it is cancelled and reported on only through
that service (another hub's service answers 404 and changes nothing), though any hub's service shows it to its
user (a user's jobs are listed across hubs).

The harness is test_two_hubs_schedule.py's (two services' contexts of the hubs ``lab-docker`` and ``dept-k8s``
on sqlite and a real PostgreSQL, a stand-in caller and hub).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jupyterhub_gpu.ledger.queries.jobs import create_job, get_job
from jupyterhub_gpu.service.web.api import jobs as jobs_api
from tests.unit.service.web import test_two_hubs_schedule as harness
from tests.unit.service.web.test_two_hubs_schedule import NOW, call, two  # noqa: F401 (the fixture)

ANN = {"kind": "user", "name": "ann", "groups": ["cs231n"], "scopes": []}


@pytest.fixture
def job_routes(monkeypatch):
    monkeypatch.setattr(
        harness,
        "ROUTES",
        [
            (r"/services/gpu/api/v1/jobs/([^/]+)", jobs_api.JobHandler),
            (r"/services/gpu/api/v1/jobs/([^/]+)/cancel", jobs_api.JobCancelHandler),
            (r"/services/gpu/api/v1/jobs/([^/]+)/started", jobs_api.JobStartedHandler),
            (r"/services/gpu/api/v1/jobs/([^/]+)/finished", jobs_api.JobFinishedHandler),
        ],
    )


def test_another_hubs_job_is_shown_but_neither_cancelled_nor_reported_on(two, job_routes):  # noqa: F811
    lab, dept = two
    request = SimpleNamespace(notebook="work/train.ipynb", parameters={}, time_limit_seconds=3600)
    job = create_job(dept.ledger, "ann", request, "l4", NOW)  # run by the department hub's service
    assert get_job(lab.ledger, job.id).hub == "dept-k8s"

    code, shown = call(lab, ANN, "GET", f"api/v1/jobs/{job.id}")
    assert code == 200 and shown["id"] == job.id, shown
    for action, body in (("cancel", None), ("started", {"session_id": "x"}), ("finished", {"session_id": "x"})):
        code, answer = call(lab, ANN, "POST", f"api/v1/jobs/{job.id}/{action}", body or {})
        assert code == 404, (action, code, answer)
        assert "it runs on the hub 'dept-k8s'" in answer["message"], answer
    after = get_job(dept.ledger, job.id)
    assert (after.state, after.finished, after.hub) == ("starting", None, "dept-k8s")
