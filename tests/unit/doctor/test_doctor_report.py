"""The doctor's report: one line per result with the fix, a summary, JSON, and exit 1 on a fail only."""

from __future__ import annotations

import json

import pytest

from jupyterhub_gpu.doctor import report
from jupyterhub_gpu.doctor.checks import run_checks
from jupyterhub_gpu.doctor.loading import Setup
from jupyterhub_gpu.doctor.results import FAIL, PASS, SKIP, WARN, Result, Unavailable


def test_a_line_shows_status_check_message_and_the_fix_but_not_for_a_pass():
    failed = report.line(Result("images", FAIL, "image x is not on this Docker host", "docker pull x"))
    assert failed.startswith("FAIL  images")
    assert failed.endswith("image x is not on this Docker host — fix: docker pull x")
    assert "\n" not in failed
    assert "fix" not in report.line(Result("images", PASS, "image x: jupyterlab 4", "never shown"))


def test_exit_status_is_one_on_any_fail_and_zero_on_warnings_alone():
    warns = [Result("a", PASS, "ok"), Result("b", WARN, "hm", "do x"), Result("c", SKIP, "n/a")]
    assert report.exit_status(warns) == 0
    assert report.exit_status([*warns, Result("d", FAIL, "bad", "fix it")]) == 1
    assert report.exit_status([]) == 0


def test_summary_and_json_count_each_status():
    results = [Result("a", PASS, "ok"), Result("b", WARN, "hm", "do x"), Result("c", FAIL, "bad", "fix it")]
    assert report.text(results).splitlines()[-1] == "1 pass, 1 warn, 1 fail"
    data = json.loads(report.as_json(results))
    assert data["ok"] is False
    assert data["summary"] == {"pass": 1, "warn": 1, "fail": 1}
    assert data["results"][2] == {"check": "c", "status": "fail", "message": "bad", "fix": "fix it"}


def test_a_result_refuses_an_unknown_status():
    with pytest.raises(ValueError, match="status must be one of"):
        Result("a", "ok", "x")


def test_a_crashing_check_is_one_fail_and_the_others_still_run(tmp_path):
    def check_first(setup):
        yield Result("first", PASS, "ran")

    def check_crashes(setup):
        yield Result("crashes", PASS, "a line before the crash is kept")
        raise KeyError("boom")

    def check_needs_docker(setup):
        raise Unavailable("Docker is not reachable")
        yield  # a generator, like the real checks

    def check_last(setup):
        yield Result("last", WARN, "ran too", "x")

    results = run_checks(Setup(hub_config=tmp_path), [check_first, check_crashes, check_needs_docker, check_last])
    assert [(r.check, r.status) for r in results] == [
        ("first", PASS),
        ("crashes", PASS),
        ("crashes", FAIL),
        ("needs-docker", SKIP),
        ("last", WARN),
    ]
    assert "KeyError" in results[2].message and "boom" in results[2].message and results[2].fix
    assert results[3].message == "Docker is not reachable"


def test_checks_that_need_the_hub_are_skipped_naming_why_when_it_did_not_load(tmp_path):
    setup = Setup(hub_config=tmp_path / "missing.py", hub_problem="FileNotFoundError: no such file")
    results = run_checks(setup)
    assert results[0].check == "config" and results[0].status == FAIL and "--config" in results[0].fix
    assert {r.status for r in results[1:]} == {SKIP}
    assert all("the hub's config did not load (FileNotFoundError" in r.message for r in results[1:])
    assert report.exit_status(results) == 1
