"""Schemathesis against the gpu service's OpenAPI document, served by a real hub and the real service.

Every operation of ``jupyterhub_gpu/service/web/openapi.yaml``, with valid inputs
(schemathesis' positive mode) and invalid ones (negative mode: wrong types,
missing fields, out-of-range values, odd path parameters), as three callers:
anonymous, a student and an admin. The properties: no 5xx response at all, and
every rejection (4xx) is JSON with the status and a message for a person.

The run is bounded (``FUZZ_EXAMPLES`` cases per operation, mode and caller; 12 by
default, under a minute here); ``FUZZ_EXAMPLES=200`` is the long run. The number
of cases tried is printed.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections import Counter

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from jupyterhub_gpu.service.web.api.openapi import OPENAPI
from tests.conftest import Hub, wait_for
from tests.service.conftest import gpu_hub_config

pytestmark = [pytest.mark.hub, pytest.mark.timeout(900)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES") or 12)
CALLERS = ("anonymous", "student", "admin")
PROMETHEUS_TOKEN = secrets.token_hex(16)


def user_token(hub: Hub, name: str) -> str:
    r = requests.post(
        f"{hub.api_url}/users/{name}/tokens",
        json={"note": "fuzz", "auth": {"username": name, "password": "pw"}},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    return r.json()["token"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    hub = Hub(root / "hub", gpu_hub_config(root, min_minutes=0))
    hub.start()
    try:
        hub.create_users("admin", "stu1")
        wait_for(
            lambda: requests.get(f"{hub.url}/services/gpu/api/v1/openapi.yaml", timeout=5).status_code == 200,
            60,
            what="the gpu service",
        )
        tokens = {"anonymous": None, "student": user_token(hub, "stu1"), "admin": user_token(hub, "admin")}
        yield hub, tokens
    finally:
        try:
            hub.cleanup()
        except Exception:
            hub.stop(signal.SIGKILL)


#: Answers about a far end that the API declares (``502``: a channel's test message was not taken; the hub could
#: not say): not a server error when the operation declares them and the answer says why.
GATEWAY = {"502"}


def problem(response, declared=frozenset()) -> str | None:
    """What is wrong with a response, or None; ``declared``: the statuses the operation's schema lists."""
    status = response.status_code
    if status >= 500 and not (str(status) in GATEWAY & set(declared) and _says_why(response, status)):
        return f"server error {status}"
    if status >= 400:
        try:
            body = response.json()
        except ValueError:
            return f"{status} without a JSON body: {response.text[:120]!r}"
        if not isinstance(body, dict) or body.get("status") != status or not str(body.get("message") or "").strip():
            return f"{status} without a message: {body!r}"[:200]
    return None


def _says_why(response, status: int) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") == status and bool(str(body.get("message") or "").strip())


def fuzz(strategy, base_url, session, token, label, tried, statuses, failures, declared=frozenset()) -> None:
    """Draw cases of one operation in one mode and send them as one caller."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case):
        # the caller's own credentials only (or none): never a generated Authorization header
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        case.headers = dict(headers)
        if token:
            headers["Authorization"] = f"token {token}"
        response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
        tried[label.split()[0]] += 1
        statuses[response.status_code] += 1
        found = problem(response, declared)
        if found:
            failures.append(f"{label} {case.method} {response.request.url} body={str(case.body)[:100]!r}: {found}")

    try:
        run()
    except Unsatisfiable:
        # nothing invalid to generate (an operation without parameters or body, in negative mode)
        if "negative" not in label:
            raise
        tried[f"unsatisfiable {label}"] += 0


def test_no_5xx_and_every_rejection_has_a_message(service):
    hub, tokens = service
    schema = schemathesis.openapi.from_path(OPENAPI)
    paths = schema.raw_schema["paths"]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [f"{o.method} {o.path}" for o in operations]
    failures: list[str] = []
    tried: Counter = Counter()
    statuses: Counter = Counter()
    session = requests.Session()
    started = time.monotonic()
    for operation in operations:
        # an operation may declare its own server (metrics lives outside api/v1)
        servers = paths[operation.path].get("servers") or schema.raw_schema["servers"]
        base_url = hub.url + servers[0]["url"]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                strategy = operation.as_strategy(generation_mode=mode)
            except Exception as e:  # an operation with nothing invalid to generate
                tried[
                    f"{operation.method.upper()} {operation.path} {mode.value}: not generated ({type(e).__name__})"
                ] += 0
                continue
            declared = frozenset(paths[operation.path][operation.method.lower()].get("responses", {}))
            for who in CALLERS:
                fuzz(
                    strategy, base_url, session, tokens[who], f"{who} {mode.value}", tried, statuses, failures, declared
                )
    elapsed = time.monotonic() - started
    print(
        f"\nschemathesis: {sum(tried.values())} cases over {len(operations)} operations"
        f" x (positive, negative) x {CALLERS} in {elapsed:.0f}s; by caller {dict(+tried)};"
        f" statuses {dict(sorted(statuses.items()))}; problems {len(failures)}"
    )
    assert not failures, f"{len(failures)} bad responses:\n" + "\n".join(sorted(set(failures))[:40])
    assert sum(tried.values()) >= len(operations) * len(CALLERS) * 2  # every operation was tried
    # a 5xx only where the operation declares a gateway's answer and says why (``problem`` holds each to that)
    assert not any(s >= 500 and str(s) not in GATEWAY for s in statuses), statuses
