"""One record of a session's facts: the spawner's state, the server's environment and the ledger's row each
read back into the record they were written from, old saved states still load, and the rate stays exact."""

from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from jupyterhub_gpu import env as names
from jupyterhub_gpu.env import make_gpu_env, session_from_env
from jupyterhub_gpu.ledger.models import SessionRecord
from jupyterhub_gpu.ledger.store import Ledger
from jupyterhub_gpu.session import SessionStart

STARTED = datetime(2026, 12, 7, 9, 0, 1, 234567, tzinfo=timezone.utc)
PART = "GPU-0001/share-1-of-4"

SESSION = SessionStart(
    id="a1b2",
    user="ann",
    server_name="thesis",
    groups=("cs231n", "thesis"),
    profile="t4-quarter",
    gpus=(PART,),
    rate_micros=33_300,  # 0.0333 per minute: exact, never a float
    currency="CNY",
    started=STARTED,
    simulated=True,
    pool="thesis",
    language="zh-CN",
    tier="preemptible",
    resume=True,
    server_token="a17",
    visible_gpus=("GPU-0001",),
    gpu_names=("Simulated T4 1/4",),
)


def test_the_spawner_state_reads_back_into_the_same_record():
    state = SESSION.to_spawner_state()
    assert state["rate_per_minute"] == "0.0333" and state["devices"] == [PART]
    assert SessionStart.from_spawner_state("ann", "thesis", (), state) == SESSION


def test_the_environment_reads_back_into_the_same_record():
    env = make_gpu_env(SESSION, devices=[{"index": "0", "uuid": PART, "name": "Simulated T4 1/4", "memory_mib": 4096}])
    assert env[names.RATE_PER_MINUTE] == "0.0333" and env[names.DEVICES] == "GPU-0001"
    env |= {"JUPYTERHUB_USER": "ann", "JUPYTERHUB_SERVER_NAME": "thesis"}
    read = session_from_env(env)
    # the environment keeps neither the user's groups nor the token nor the names: the hub adds what it knows
    assert read == replace(SESSION, groups=(), server_token=None, gpu_names=())
    assert session_from_env({}) is None


def test_the_ledger_row_reads_back_into_the_same_record(tmp_path):
    row = SessionRecord.of(SESSION)
    assert row.rate_micros == 33_300
    assert row.start() == replace(SESSION, visible_gpus=(), gpu_names=())
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    try:
        assert ledger.record_start(SESSION)
        assert ledger.get_session(SESSION.id).start() == replace(SESSION, visible_gpus=(), gpu_names=())
    finally:
        ledger.close()


def test_a_state_saved_by_an_older_hub_still_loads():
    # no groups, pool, language, tier, names or visible GPUs; a rate written with trailing zeros; an offset
    old = {
        "profile": "t4",
        "devices": ["GPU-0001"],
        "session_id": "old-1",
        "started": "2026-12-01T08:00:00+00:00",
        "rate_per_minute": "0.050000",
        "currency": "CNY",
    }
    read = SessionStart.from_spawner_state("bob", "", ("physics",), old)
    assert read.rate_micros == 50_000 and read.rate_per_minute == Decimal("0.05")
    assert read.groups == ("physics",) and read.pool is None and read.pool_name() == "physics"
    assert read.language is None and read.tier is None and read.simulated is False
    assert read.started == datetime(2026, 12, 1, 8, tzinfo=timezone.utc)
    again = read.to_spawner_state()
    assert again["rate_per_minute"] == "0.05"
    assert SessionStart.from_spawner_state("bob", "", (), again) == read


@pytest.mark.parametrize("text", ["0.0333", "0.000001", "1000000", "0"])
def test_the_rate_stays_exact_through_every_shape(text):
    session = replace(SESSION, rate_micros=int(Decimal(text) * 1_000_000))
    assert session.rate_per_minute == Decimal(text)
    state = session.to_spawner_state()
    assert state["rate_per_minute"] == text
    env = make_gpu_env(session) | {"JUPYTERHUB_USER": "ann"}
    assert env[names.RATE_PER_MINUTE] == text
    assert session_from_env(env).rate_micros == session.rate_micros
    assert SessionRecord.of(session).start().rate_micros == session.rate_micros


def test_a_rate_finer_than_a_micro_unit_is_refused_not_rounded():
    state = dict(SESSION.to_spawner_state(), rate_per_minute="0.0000001")
    with pytest.raises(ValueError, match="more than six decimal places"):
        SessionStart.from_spawner_state("ann", "thesis", (), state)
    env = make_gpu_env(SESSION) | {names.RATE_PER_MINUTE: "0.0000001"}
    assert session_from_env(env) is None
