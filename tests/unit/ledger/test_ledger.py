"""The ledger on sqlite and on a real PostgreSQL server: migrations, idempotent writes, exact charges and times."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, inspect, text

from jupyterhub_gpu.billing import BudgetRule
from jupyterhub_gpu.ledger.models import Base, SessionRecord
from jupyterhub_gpu.ledger.queries.samples import Push, record_sample, session_minutes
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger, upgrade
from jupyterhub_gpu.ledger.writer import LedgerWriter
from jupyterhub_gpu.rules.samples import Sample, SampleError
from jupyterhub_gpu.session import SessionStart

T0 = datetime(2026, 11, 29, 19, 46, 4, 123456, tzinfo=timezone.utc)
T4_RATE = 50_000  # ¥0.05 per minute, in micro-units
TABLES = {"alembic_version", "gpu_sessions", "gpu_budgets", "gpu_alerts", "gpu_notices"}


def make_start(
    sid: str = "s1",
    user: str = "ann",
    started: datetime = T0,
    rate_micros: int = T4_RATE,
    gpus: tuple[str, ...] = ("GPU-sim-t4-0",),
    groups: tuple[str, ...] = ("cs231n",),
    server_name: str = "",
) -> SessionStart:
    return SessionStart(
        id=sid,
        user=user,
        server_name=server_name,
        groups=groups,
        profile="t4" if gpus else "cpu",
        gpus=gpus,
        rate_micros=rate_micros,
        currency="CNY",
        started=started,
        simulated=True,
    )


def aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc)


def head_revision() -> str:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def row_count(ledger: Ledger, table: str = "gpu_sessions") -> int:
    with ledger.engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()


# -- migrations ----------------------------------------------------------------------------


def test_migrations_build_the_schema_from_an_empty_database(db_url):
    # the modules that add their own tables to the ledger (advice, profile access, jobs)

    ledger = Ledger(db_url)
    try:
        assert TABLES <= set(inspect(ledger.engine).get_table_names())
        with ledger.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head_revision()]
            # the migrated schema is exactly what the models describe
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        ledger.close()


CHECK_AUTOGENERATE = """
import sys
from alembic import command
from alembic.config import Config
from jupyterhub_gpu.ledger.store import MIGRATIONS, Ledger
Ledger(sys.argv[1]).close()
ledger = Ledger(sys.argv[1], migrate=False)
cfg = Config()
cfg.set_main_option("script_location", str(MIGRATIONS))
with ledger.engine.begin() as connection:
    cfg.attributes["connection"] = connection
    command.check(cfg)  # what `alembic revision --autogenerate` would propose, through the real env.py
print("nothing to propose")
"""


def test_autogenerate_against_a_fresh_ledger_proposes_nothing(db_url):
    # a fresh interpreter: the migrations must see every table themselves, whatever was imported before
    proc = subprocess.run(
        [sys.executable, "-c", CHECK_AUTOGENERATE, db_url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nothing to propose" in proc.stdout


OPEN_AT_THE_SIGNAL = """
import sys
from jupyterhub_gpu.ledger.store import Ledger
print("ready", flush=True)
sys.stdin.readline()
Ledger(sys.argv[1]).close()
print("opened", flush=True)
"""


def test_processes_opening_a_fresh_ledger_at_once_migrate_it_one_at_a_time(db_url):
    # a fresh install: the hub's spawners and the gpu service open the empty ledger in the same moment (the
    # first spawn right after the hub started); before the migration lock, all but one failed with "table
    # alembic_version already exists" and the spawn answered 500
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT_THE_SIGNAL, db_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:  # all imported, all waiting on the one signal
        assert proc.stdout.readline() == "ready\n"
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out == "opened\n", err[-3000:]
    ledger = Ledger(db_url, migrate=False)
    try:
        with ledger.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head_revision()]
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        ledger.close()


def test_migrating_again_is_a_no_op_and_keeps_the_data(db_url):
    first = Ledger(db_url)
    first.record_start(make_start())
    first.close()

    second = Ledger(db_url, migrate=False)
    ddl = []

    @event.listens_for(second.engine, "before_cursor_execute")
    def _ddl(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith(("CREATE", "ALTER", "DROP", "INSERT INTO ALEMBIC", "UPDATE ALEMBIC")):
            ddl.append(statement)

    upgrade(second.engine)
    upgrade(second.engine)
    assert ddl == []
    assert [s.id for s in second.sessions()] == ["s1"]
    second.close()
    # and a whole new Ledger on the same database (what every restart of the service does)
    third = Ledger(db_url)
    assert [s.id for s in third.sessions()] == ["s1"]
    third.close()


# -- idempotent session events -----------------------------------------------------------


def test_record_start_and_stop_are_idempotent(ledger):
    start = make_start()
    assert ledger.record_start(start) is True
    assert ledger.record_start(start) is False  # a replay
    assert row_count(ledger) == 1

    assert ledger.record_stop("s1", T0 + timedelta(seconds=61), "stopped") is True
    first = ledger.get_session("s1")
    # replays, later stops and stops with another reason keep the first stop and its charge
    assert ledger.record_stop("s1", T0 + timedelta(seconds=61), "stopped") is False
    assert ledger.record_stop("s1", T0 + timedelta(minutes=30), "reconciled") is False
    assert ledger.record_stop("s1", T0 + timedelta(seconds=5), "exited", start=start) is False
    assert ledger.record_start(start) is False
    again = ledger.get_session("s1")
    assert row_count(ledger) == 1
    for attr in ("started", "stopped", "stop_reason", "minutes", "cost_micros"):
        assert getattr(again, attr) == getattr(first, attr), attr
    assert (again.minutes, again.cost_micros, again.stop_reason) == (2, 2 * T4_RATE, "stopped")
    assert ledger.open_sessions() == []


def test_stop_of_an_unknown_session_records_its_start_when_given(ledger):
    assert ledger.record_stop("nobody", T0, "stopped") is False
    assert row_count(ledger) == 0
    start = make_start("late")
    assert ledger.record_stop("late", T0 + timedelta(seconds=90), "exited", start=start) is True
    record = ledger.get_session("late")
    assert aware(record.started) == T0 and record.minutes == 2 and record.stop_reason == "exited"


@pytest.mark.parametrize("replay", range(3))
def test_concurrent_writers_record_one_row_and_one_charge(db_url, replay):
    """Two Ledger objects (the hub's and the service's), eight threads, the same start and stop at once."""
    ledgers = [Ledger(db_url), Ledger(db_url, migrate=False)]
    threads_per_ledger = 4
    sessions = [make_start(f"race-{replay}-{i}", user=f"u{i}") for i in range(5)]
    stop_at = T0 + timedelta(seconds=61)
    barrier = threading.Barrier(len(ledgers) * threads_per_ledger)
    results: dict[str, list[tuple[str, bool]]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(ledger: Ledger):
        try:
            for start in sessions:
                barrier.wait(30)
                began = ledger.record_start(start)
                barrier.wait(30)
                stopped = ledger.record_stop(start.id, stop_at, "stopped", start=start)
                with lock:
                    results.setdefault(start.id, []).extend([("start", began), ("stop", stopped)])
        except BaseException as e:  # reported below: an exception in a thread must fail the test
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(lg,)) for lg in ledgers for _ in range(threads_per_ledger)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for start in sessions:
        outcomes = results[start.id]
        assert sum(ok for what, ok in outcomes if what == "start") == 1, outcomes
        assert sum(ok for what, ok in outcomes if what == "stop") == 1, outcomes
    reader = ledgers[0]
    assert row_count(reader) == len(sessions)
    for record in reader.sessions():
        assert (record.minutes, record.cost_micros) == (2, 2 * T4_RATE)
        assert aware(record.stopped) == stop_at
    for lg in ledgers:
        lg.close()


def test_concurrent_stops_at_different_times_keep_exactly_one(db_url):
    ledgers = [Ledger(db_url), Ledger(db_url, migrate=False)]
    ledgers[0].record_start(make_start())
    stops = [T0 + timedelta(seconds=s) for s in (30, 61, 125, 3600)]
    barrier = threading.Barrier(len(stops))
    won = []

    def stop(i):
        barrier.wait(30)
        if ledgers[i % 2].record_stop("s1", stops[i], f"reason{i}"):
            won.append(i)

    threads = [threading.Thread(target=stop, args=(i,)) for i in range(len(stops))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(won) == 1
    record = ledgers[1].get_session("s1")
    winner = won[0]
    assert aware(record.stopped) == stops[winner] and record.stop_reason == f"reason{winner}"
    assert record.minutes == [1, 2, 3, 60][winner] and record.cost_micros == record.minutes * T4_RATE
    for lg in ledgers:
        lg.close()


# -- charges -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "minutes"),
    [
        (timedelta(seconds=0), 1),
        (timedelta(seconds=1), 1),
        (timedelta(seconds=59, microseconds=999_999), 1),
        (timedelta(seconds=60), 1),
        (timedelta(seconds=60, microseconds=1), 2),
        (timedelta(seconds=61), 2),
        (timedelta(seconds=120), 2),
        (timedelta(hours=10, seconds=1), 601),
        (timedelta(seconds=-5), 1),  # a stop before the start (clock skew) is the start
    ],
)
def test_charges_are_per_started_minute_in_integer_micros(ledger, elapsed, minutes):
    ledger.record_start(make_start(rate_micros=T4_RATE))
    ledger.record_stop("s1", T0 + elapsed, "stopped")
    record = ledger.get_session("s1")
    assert record.minutes == minutes
    assert record.cost_micros == minutes * T4_RATE
    assert type(record.minutes) is int and type(record.cost_micros) is int


def test_large_rates_and_costs_stay_exact(ledger):
    # ¥3,000.000001 per minute for 10 hours and a second: past 32 bits, exact to the micro-unit
    rate = 3_000_000_001
    ledger.record_start(make_start(rate_micros=rate))
    ledger.record_stop("s1", T0 + timedelta(hours=10, seconds=1), "stopped")
    record = ledger.get_session("s1")
    assert record.rate_micros == rate
    assert record.cost_micros == 601 * rate == 1_803_000_000_601


def test_usage_rows_compute_a_running_sessions_cost_live(ledger):
    ledger.record_start(make_start("run", gpus=("GPU-a", "GPU-b"), rate_micros=2 * T4_RATE))
    ledger.record_start(make_start("done", started=T0 - timedelta(hours=1)))
    ledger.record_stop("done", T0 - timedelta(hours=1) + timedelta(seconds=150), "stopped")
    now = T0 + timedelta(seconds=125)
    rows = {r.session_id: r for r in Ledger.usage_rows(ledger.sessions(), now)}
    run, done = rows["run"], rows["done"]
    assert run.running is True and run.cost_micros == 3 * 2 * T4_RATE and run.gpu_minutes == 3 * 2
    assert done.running is False and done.cost_micros == 3 * T4_RATE and done.gpu_minutes == 3
    assert run.started == T0 and run.groups == ("cs231n",)
    # live cost grows with time and never drops below the first minute
    later = {r.session_id: r for r in Ledger.usage_rows(ledger.sessions(), now + timedelta(minutes=10))}
    assert later["run"].cost_micros == 13 * 2 * T4_RATE
    assert later["done"].cost_micros == done.cost_micros
    early = Ledger.usage_rows([ledger.get_session("run")], T0 - timedelta(seconds=30))
    assert early[0].cost_micros == 2 * T4_RATE


def test_pending_stop_reason_wins_over_the_recorded_reason(ledger):
    ledger.record_start(make_start("a"))
    ledger.record_start(make_start("b", user="bob"))
    assert ledger.claim_stop_reason("a", "budget") == "budget"
    ledger.record_stop("a", T0 + timedelta(seconds=10), "stopped")
    ledger.record_stop("b", T0 + timedelta(seconds=10), "stopped")
    assert ledger.get_session("a").stop_reason == "budget"
    assert ledger.get_session("b").stop_reason == "stopped"
    # a stopped session's reason is final
    assert ledger.claim_stop_reason("b", "gpu_idle") is None
    assert ledger.get_session("b").stop_reason == "stopped"


@pytest.mark.parametrize("service_reason", ["budget", "gpu_idle", "busy_gpu_idle", "max_age", "job_time_limit"])
def test_a_users_stop_reason_and_the_services_never_replace_each_other(ledger, service_reason):
    """A server that reports ``plateau`` in a loop must not turn a cull or budget stop under way into a run; a
    service's pass must not turn the server's own stop under way into a cull (docs/admin.md, stop reasons)."""
    ledger.record_start(make_start("a"))
    assert ledger.claim_stop_reason("a", "stop_when_done") == "stop_when_done"
    assert ledger.claim_stop_reason("a", "plateau") == "plateau"  # a user's later reason replaces a user's earlier one
    assert ledger.claim_stop_reason("a", service_reason) == "plateau"
    ledger.record_start(make_start("b", user="bob"))
    assert ledger.claim_stop_reason("b", service_reason) == service_reason
    for reason in ("plateau", "stop_when_done", "job_finished", "job_cancelled"):
        assert ledger.claim_stop_reason("b", reason) == service_reason
    assert ledger.get_session("b").pending_stop_reason == service_reason
    ledger.record_stop("b", T0 + timedelta(seconds=10), "stopped")
    assert ledger.get_session("b").stop_reason == service_reason
    assert ledger.claim_stop_reason("b", "plateau") is None  # and a stopped session's reason is final


def test_mark_seen_touches_open_sessions_only(ledger):
    ledger.record_start(make_start("open"))
    ledger.record_start(make_start("closed", user="bob"))
    ledger.record_stop("closed", T0 + timedelta(seconds=5), "stopped")
    seen = T0 + timedelta(seconds=30, microseconds=7)
    ledger.mark_seen(["open", "closed"], seen)
    assert aware(ledger.get_session("open").last_seen) == seen
    assert ledger.get_session("closed").last_seen is None


# -- queries ----------------------------------------------------------------------------


def test_sessions_group_filter_is_exact(ledger):
    groups = {
        "s-cs": ("cs",),
        "s-cs231n": ("cs231n",),
        "s-both": ("cs", "thesis"),
        "s-xcs": ("xcs",),
        "s-under": ("a_b",),
        "s-like": ("axb",),
        "s-pct": ("50%",),
        "s-quote": ('we"ird',),
        "s-backslash": ("back\\slash",),
        "s-physics": ("物理",),
        "s-physics2": ("物理2",),
        "s-none": (),
    }
    for i, (sid, gs) in enumerate(groups.items()):
        ledger.record_start(make_start(sid, user=f"u{i}", groups=gs))
    assert {s.id for s in ledger.sessions(group="cs")} == {"s-cs", "s-both"}
    assert {s.id for s in ledger.sessions(group="cs231n")} == {"s-cs231n"}
    assert {s.id for s in ledger.sessions(group="c")} == set()
    assert {s.id for s in ledger.sessions(group="a_b")} == {"s-under"}
    assert {s.id for s in ledger.sessions(group="50%")} == {"s-pct"}
    assert {s.id for s in ledger.sessions(group="5")} == set()
    assert {s.id for s in ledger.sessions(group='we"ird')} == {"s-quote"}
    assert {s.id for s in ledger.sessions(group="back\\slash")} == {"s-backslash"}
    # non-ASCII names are stored JSON-escaped ("\\u7269\\u7406"): the backslashes must match literally
    assert {s.id for s in ledger.sessions(group="物理")} == {"s-physics"}
    assert {s.id for s in ledger.sessions(group="thesis")} == {"s-both"}


def test_sessions_user_and_time_window(ledger):
    for i in range(4):
        ledger.record_start(make_start(f"s{i}", user="ann" if i % 2 == 0 else "bob", started=T0 + timedelta(hours=i)))
    assert [s.id for s in ledger.sessions(user="ann")] == ["s0", "s2"]
    # [since, until): the start at ``since`` is in, the one at ``until`` is out
    window = ledger.sessions(since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=3))
    assert [s.id for s in window] == ["s1", "s2"]
    tz8 = timezone(timedelta(hours=8))
    since, until = (T0 + timedelta(hours=1)).astimezone(tz8), (T0 + timedelta(hours=3)).astimezone(tz8)
    same = ledger.sessions(since=since, until=until)
    assert [s.id for s in same] == ["s1", "s2"]
    rows = ledger.rows_for("bob", ("cs231n",), T0 + timedelta(hours=5), since=T0)
    assert {r.session_id for r in rows} == {"s0", "s1", "s2", "s3"}  # all four share the group


# -- budgets, alerts, notices ----------------------------------------------------------------


def test_budgets_set_replace_and_delete(ledger):
    rule = BudgetRule("group", "cs231n", "month", "money", Decimal("120.000001"))
    ledger.set_budget(rule, T0)
    assert ledger.budget_rules() == [rule]
    term = BudgetRule("group", "cs231n", "term", "gpu_hours", Decimal("7.5"), date(2026, 9, 1), date(2027, 1, 15))
    ledger.set_budget(term, T0 + timedelta(seconds=1))
    ledger.set_budget(BudgetRule("user", "ann", "week", "money", Decimal("5")), T0)
    assert row_count(ledger, "gpu_budgets") == 2  # replaced, not added
    assert ledger.budget_rules() == [term, BudgetRule("user", "ann", "week", "money", Decimal("5"))]
    stored = ledger.get_budget("group", "cs231n")
    assert aware(stored.updated) == T0 + timedelta(seconds=1)
    assert isinstance(stored.rule().limit, Decimal) and stored.rule().limit == Decimal("7.5")
    assert ledger.delete_budget("group", "cs231n") is True
    assert ledger.delete_budget("group", "cs231n") is False
    assert ledger.get_budget("group", "cs231n") is None
    assert [b.subject for b in ledger.budgets()] == ["ann"]


def test_an_alert_is_claimed_once(ledger):
    period = datetime(2026, 10, 31, 16, 0, tzinfo=timezone.utc)
    claim = ("ann", "user:ann", period, 80, "email")
    assert ledger.claim_alert(*claim, T0) is True
    assert ledger.claim_alert(*claim, T0 + timedelta(minutes=1)) is False
    # another channel, threshold or period is another alert
    assert ledger.claim_alert("ann", "user:ann", period, 80, "webhook", T0) is True
    assert ledger.claim_alert("ann", "user:ann", period, 95, "email", T0) is True
    assert ledger.claim_alert("ann", "user:ann", period + timedelta(days=30), 80, "email", T0) is True
    assert len(ledger.alerts("ann")) == 4
    # a failed send releases its claim, so that the next tick tries again
    assert ledger.release_alert(*claim) is True
    assert ledger.claim_alert(*claim, T0) is True


def test_concurrent_claims_of_one_alert_succeed_once(db_url):
    ledgers = [Ledger(db_url), Ledger(db_url, migrate=False)]
    barrier = threading.Barrier(6)
    won = []

    def claim(i):
        barrier.wait(30)
        won.append(ledgers[i % 2].claim_alert("ann", "user:ann", T0, 100, "lab", T0))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(won) == [False] * 5 + [True]
    for lg in ledgers:
        lg.close()


def test_notices(ledger):
    n = ledger.add_notice("ann", "budget", "80% of your budget used", T0, level="warning", session_id="s1")
    ledger.add_notice("bob", "budget", "hello", T0)
    assert [x.message for x in ledger.notices("ann")] == ["80% of your budget used"]
    assert ledger.dismiss_notice("bob", n.id) is False  # not bob's
    assert ledger.dismiss_notice("ann", n.id) is True
    assert ledger.notices("ann") == []
    assert len(ledger.notices("ann", include_dismissed=True)) == 1


# -- times -----------------------------------------------------------------------------


def test_datetimes_round_trip_exactly(ledger):
    tz8 = timezone(timedelta(hours=8))
    started = datetime(2026, 11, 30, 3, 46, 4, 999_999, tzinfo=tz8)  # 2026-11-29 19:46:04.999999 UTC
    stopped = started + timedelta(seconds=59, microseconds=1)
    ledger.record_start(make_start("t", started=started))
    ledger.record_stop("t", stopped, "stopped")
    ledger.record_start(make_start("naive", user="bob", started=datetime(2026, 1, 1, 0, 0, 0, 1)))
    reader = Ledger(ledger.db_url, migrate=False)  # read back through a new engine: nothing cached
    try:
        record = reader.get_session("t")
        assert record.started == datetime(2026, 11, 29, 19, 46, 4, 999_999)  # naive UTC
        assert aware(record.started) == started and aware(record.stopped) == stopped
        assert record.minutes == 1
        assert reader.get_session("naive").started == datetime(2026, 1, 1, 0, 0, 0, 1)
        with reader.engine.connect() as conn:
            raw = conn.execute(text("SELECT started FROM gpu_sessions WHERE id = 't'")).scalar_one()
        assert str(raw) == "2026-11-29 19:46:04.999999"
        assert reader.sessions(since=started)[0].id == "t"
        assert [s.id for s in reader.sessions(since=started + timedelta(microseconds=1))] == []
    finally:
        reader.close()


def test_session_record_columns_hold_what_was_started(ledger):
    start = make_start("full", gpus=("GPU-1", "MIG-2"), groups=("thesis", "cs231n"), server_name="big")
    ledger.record_start(start)
    record = ledger.get_session("full")
    assert isinstance(record, SessionRecord)
    assert (record.user, record.server_name, record.profile, record.currency) == ("ann", "big", "t4", "CNY")
    assert record.gpu_list == ["GPU-1", "MIG-2"] and record.gpu_count == 2
    assert record.group_list == ["cs231n", "thesis"]
    assert record.simulated is True and record.rate_micros == T4_RATE
    assert record.stopped is None and record.minutes is None and record.cost_micros is None


# -- samples in batches ------------------------------------------------------------------------


def usage_rows(ledger: Ledger) -> tuple[list[tuple], list[tuple]]:
    """Every usage minute (every column) and every session's last activity, in a stable order."""
    with ledger.engine.connect() as conn:
        minutes = [tuple(r) for r in conn.execute(text("SELECT * FROM gpu_usage_minutes ORDER BY session_id, minute"))]
        activity = [tuple(r) for r in conn.execute(text("SELECT id, last_activity FROM gpu_sessions ORDER BY id"))]
    return minutes, activity


def sample_sequence() -> list[Push]:
    """Pushes of three sessions over three minutes, with activity, kernels, GPUs and two a full minute refuses."""
    pushes = []
    for i in range(40):
        sid = ("a", "b", "c")[i % 3]
        at = T0 + timedelta(seconds=7 * i)
        gpus = ((f"GPU-{sid}-0", (i * 13) % 100, 100 * i),) + (((f"GPU-{sid}-1", 50.0, 7),) if sid == "c" else ())
        sample = Sample(
            session_id=sid,
            sampled_until=at,
            samples=2500 if sid == "b" else 3,  # b's minute is full after two pushes
            utilization_avg=(i * 7.3) % 100,
            memory_used_max_mib=(i * 997) % 16_000,
            memory_total_mib=16_384,
            kernels=i % 4,
            busy_kernels=i % 2,
            last_kernel_activity=at - timedelta(seconds=i % 5) if i % 2 else None,
            last_activity=at - timedelta(seconds=3) if i % 3 == 0 else None,
            gpus=gpus,
        )
        # the session holds one GPU except c (two): a third GPU of c is refused
        pushes.append(Push("ann", sample, 2 if sid == "c" else 1, sample.last_activity or sample.last_kernel_activity))
    extra = Sample("c", T0, 1, 1.0, 1, 16_384, 0, 0, None, None, (("GPU-c-9", 1.0, 1),))
    pushes.insert(5, Push("ann", extra, 2, None))
    return pushes


def start_sample_sessions(ledger: Ledger) -> None:
    for sid, gpus in (("a", ("GPU-a-0",)), ("b", ("GPU-b-0",)), ("c", ("GPU-c-0", "GPU-c-1"))):
        ledger.record_start(make_start(sid, gpus=gpus, started=T0 - timedelta(minutes=5)))


def one_by_one(ledger: Ledger, pushes: list[Push]) -> list[str | None]:
    """What the samples handler did before batches: one transaction per push, then one for its activity."""
    errors = []
    for push in pushes:
        try:
            record_sample(ledger, push.user, push.sample, max_gpus=push.max_gpus)
        except SampleError as e:
            errors.append(str(e))
            continue
        errors.append(None)
        if push.activity is not None:
            ledger.note_activity(push.sample.session_id, push.activity)
    return errors


async def batched(ledger: Ledger, pushes: list[Push], batcher: LedgerWriter) -> list[str | None]:
    results = await asyncio.gather(*(batcher.push(p) for p in pushes), return_exceptions=True)
    for r in results:
        assert not isinstance(r, Exception) or isinstance(r, SampleError), r
    return [str(r) if isinstance(r, SampleError) else None for r in results]


async def test_samples_in_batches_leave_exactly_the_rows_of_pushing_them_one_by_one(db_url, tmp_path):
    pushes = sample_sequence()
    if db_url.startswith("sqlite"):
        other_url = f"sqlite:///{tmp_path / 'one-by-one.sqlite'}"
    else:
        other_url = db_url
    batch_ledger = Ledger(db_url)
    start_sample_sessions(batch_ledger)
    batcher = LedgerWriter(batch_ledger, window=0.05)  # gathers what the test sends at once
    errors = await batched(batch_ledger, pushes, batcher)
    batcher.close()
    assert batcher.batches < len(pushes) / 4  # gathered: not one transaction per push
    batch_rows = usage_rows(batch_ledger)
    if other_url == db_url:  # one PostgreSQL database per test: the reference goes into the same one, emptied
        with batch_ledger.engine.begin() as conn:
            conn.execute(text("DELETE FROM gpu_usage_minutes"))
            conn.execute(text("UPDATE gpu_sessions SET last_activity = NULL"))
    batch_ledger.close()
    reference = Ledger(other_url)
    try:
        if other_url != db_url:
            start_sample_sessions(reference)
        assert one_by_one(reference, pushes) == errors
        assert usage_rows(reference) == batch_rows
    finally:
        reference.close()
    refused = [e for e in errors if e]
    assert any("already has 2 pushes and 5000 samples" in e for e in refused)  # b's full minutes
    assert any("would be one more" in e for e in refused)  # c's third GPU
    assert batch_rows[0] and any(activity for _, activity in batch_rows[1])


async def test_a_refused_sample_in_a_batch_fails_alone(ledger):
    start_sample_sessions(ledger)
    good = Sample("a", T0, 3, 40.0, 100, 16_384, 1, 1, None, None, (("GPU-a-0", 40.0, 100),))
    later = Sample("a", T0 + timedelta(seconds=30), 3, 60.0, 200, 16_384, 1, 0, None, None, (("GPU-a-0", 60.0, 200),))
    too_many_gpus = Sample("a", T0, 3, 99.0, 9_999, 16_384, 9, 9, None, None, (("GPU-a-1", 99.0, 9_999),))
    batcher = LedgerWriter(ledger, window=0.05)
    results = await asyncio.gather(
        batcher.push(Push("ann", good, 1, T0)),
        batcher.push(Push("ann", too_many_gpus, 1, T0 + timedelta(seconds=50))),
        batcher.push(Push("ann", later, 1, T0 + timedelta(seconds=20))),
        return_exceptions=True,
    )
    assert batcher.batches == 1
    assert isinstance(results[1], SampleError) and "would be one more" in str(results[1])
    assert results[0].minute == results[2].minute == T0.replace(tzinfo=None, second=0, microsecond=0)
    (row,) = session_minutes(ledger, "a")
    # the two good pushes only: none of the refused one's numbers, GPU or activity
    assert (row.pushes, row.samples, row.kernels_max, row.busy_kernels_max) == (2, 6, 1, 1)
    assert row.utilization_tenths_sum == 400 * 3 // 1 + 600 * 3 // 1 and row.memory_used_max_mib == 200
    assert json.loads(row.gpus) == {"GPU-a-0": {"memory_used_max_mib": 200, "utilization_max": 60.0}}
    assert ledger.get_session("a").last_activity == (T0 + timedelta(seconds=20)).replace(tzinfo=None)


async def test_a_failing_database_fails_every_push_of_its_batch(ledger):
    start_sample_sessions(ledger)
    batcher = LedgerWriter(ledger)
    ledger.engine.dispose()
    with ledger.engine.begin() as conn:
        conn.execute(text("DROP TABLE gpu_usage_minutes"))
    sample = Sample("a", T0, 3, 40.0, 100, 16_384, 1, 1, None, None, ())
    results = await asyncio.gather(
        *(batcher.push(Push("ann", sample, 1, None)) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, Exception) and not isinstance(r, SampleError) for r in results)


def test_lab_settings_are_replaced_whole_by_each_publish(ledger):
    assert ledger.lab_settings() == {}
    ledger.set_lab_settings({"currency": "CNY", "timezone": "Asia/Shanghai"}, datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert ledger.lab_settings() == {"currency": "CNY", "timezone": "Asia/Shanghai"}
    ledger.set_lab_settings({"currency": "USD"}, datetime(2026, 1, 2, tzinfo=timezone.utc))
    assert ledger.lab_settings() == {"currency": "USD"}


@pytest.mark.parametrize("bad", [{"": "x"}, {"currency": 3}, {"x" * 65: "y"}])
def test_a_bad_lab_setting_is_refused_and_changes_nothing(ledger, bad):
    ledger.set_lab_settings({"currency": "CNY"}, datetime(2026, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(ValueError, match="lab setting"):
        ledger.set_lab_settings(bad, datetime(2026, 1, 2, tzinfo=timezone.utc))
    assert ledger.lab_settings() == {"currency": "CNY"}
