"""Server faults, on a throwaway cluster these tests start themselves (never the shared
server): the server stops in the middle of a step's transaction, restarts, kills pooled
connections, stays down for a while; passwords are really checked (scram), so a
percent-encoded one is proved to reach the server intact; a database in an encoding that
lacks a character refuses it.

The runs timed here are the fault's outcome: psycopg_pool's own back-off (pauses of 1, 2, 4,
8... s between tries) would hold them for seconds; without it they take milliseconds, so the
bound of a second is far from both."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from urllib.parse import quote

import psycopg
import pytest

import tether
from tests.conftest import IN_CI
from tests.store.pg_cluster import Cluster, _free_port, find_bindir
from tests.support.results import run_of
from tests.support.waiting import wait_for
from tether import Chain, interrupt
from tether.errors import RecordRejectedError, StoreUnavailableError
from tether.store.base import RunRecord

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def cluster():
    bindir = find_bindir()
    if bindir is None:
        reason = "PostgreSQL server binaries (initdb, pg_ctl) not found"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    c = Cluster(bindir)
    try:
        c.init()
        c.start()
    except Exception as exc:
        c.destroy()
        if IN_CI:
            raise
        pytest.skip(f"cannot start a throwaway PostgreSQL cluster: {exc}")
    yield c
    c.destroy()


@pytest.fixture
def admin(cluster):
    if not cluster.is_running():
        cluster.start()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def schema(cluster):
    name = f"f_{uuid.uuid4().hex[:10]}"
    yield name
    if not cluster.is_running():
        cluster.start()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def _store(cluster, schema, **kw):
    from tether.store.postgres import PostgresCheckpointer

    return PostgresCheckpointer(cluster.dsn, schema=schema, **kw)


def _backends(admin, app: str) -> set[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchall()
    return {r[0] for r in rows}


def _terminate(admin, app: str) -> int:
    """Terminate every backend of ``app`` (ours only), wait until they are gone; how many."""
    pids = _backends(admin, app)
    for pid in pids:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: not (_backends(admin, app) & pids), what="the backends to exit")
    return len(pids)


def _scenario(driver: str, chain: Chain, body):
    """Run ``await body(run)`` in an event loop that keeps running through the faults (they are
    applied with ``asyncio.to_thread``), where ``await run()`` runs ``chain`` once with the
    driver under test: the sync verbs on the sync pool (from a thread), or ``arun`` on this
    loop's async pool."""

    async def run():
        if driver == "sync":
            return await asyncio.to_thread(chain.run, {"start": "x"})
        return await chain.arun({"start": "x"})

    return asyncio.run(body(run))


async def _timed(run) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = await run()
    return time.perf_counter() - t0, result


def _three_steps(store, calls: list[str]) -> Chain:
    chain = Chain("three-steps", store)

    def step(name):
        def fn(state):
            calls.append(name)
            return {"log": [*state.get("log", []), name], name: f"{name}\x00\U0001f600"}

        return fn

    for name in ("a", "b", "c"):
        chain.add_node(name, step(name))
    chain.add_edge("a", "b")
    chain.add_edge("b", "c")
    return chain


STALL_B = """
CREATE TABLE {s}.stall_flag (on_ boolean);
INSERT INTO {s}.stall_flag VALUES (true);
CREATE FUNCTION {s}.stall() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.node_id = 'b' AND EXISTS (SELECT 1 FROM {s}.stall_flag) THEN
    PERFORM pg_sleep(60);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER stall BEFORE INSERT ON {s}.checkpoints
  FOR EACH ROW EXECUTE FUNCTION {s}.stall();
"""


def test_server_stopped_mid_step_fails_clearly_commits_nothing_and_resume_completes(
    cluster, admin, schema
):
    app = f"tether-mid-step-{uuid.uuid4().hex[:6]}"
    store = _store(cluster, schema, application_name=app, timeout_seconds=20)
    try:
        calls: list[str] = []
        chain = _three_steps(store, calls)
        reference = chain.run({"start": "\x00"}).output  # the same run, undisturbed
        calls.clear()
        admin.execute(STALL_B.format(s=f'"{schema}"'))

        outcome: list[BaseException | object] = []

        def run() -> None:
            try:
                outcome.append(chain.run({"start": "\x00"}))
            except BaseException as exc:
                outcome.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        # Step b's checkpoint INSERT is inside its transaction, stalled by the trigger.
        stalled = wait_for(
            lambda: admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event = 'PgSleep'",
                (app,),
            ).fetchone(),
            what="step b's insert to stall",
        )[0]
        cluster.crash()  # pg_ctl stop -m immediate: no clean shutdown of the backends
        runner.join(30)
        assert not runner.is_alive()

        (err,) = outcome
        assert isinstance(err, StoreUnavailableError), err
        text = str(err)
        assert "lost the connection" in text
        assert f"127.0.0.1:{cluster.port}" in text and f"backend pid {stalled}" in text
        assert "put of run" in text
        eid = err.execution_id
        assert eid

        cluster.start()
        cluster.wait_ready()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{schema}".stall_flag')

        # Nothing of step b is visible: a's row only, the run still "running", no end row.
        assert [cp.node_id for cp in store.list(eid)] == ["a"]
        assert store.get_run(eid).status == "running"
        assert store.get_pending_interrupt(eid) is None

        done = chain.resume(eid)
        assert done.status == "completed"
        assert done.output == reference
        assert calls == ["a", "b", "b", "c"]  # a never re-ran; b re-ran once; c once
        assert [cp.node_id for cp in store.list(eid)] == ["a", "b", "c", "run_end"]
    finally:
        if not cluster.is_running():
            cluster.start()
        store.close()


def test_a_pooled_connection_the_server_killed_is_replaced_not_reused(cluster, admin, schema):
    app = f"tether-kill-{uuid.uuid4().hex[:6]}"
    store = _store(cluster, schema, application_name=app, min_size=1, max_size=1)
    try:
        store.create_run(RunRecord("r", "c", "chain"))
        before = _backends(admin, app)
        assert len(before) == 1
        for pid in before:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(lambda: not (_backends(admin, app) & before), what="backend to exit")

        assert store.get_run("r").runner_name == "c"  # no error: a new connection served it
        after = _backends(admin, app)
        assert len(after) == 1 and not (after & before)

        async def async_side() -> tuple[set[int], set[int]]:
            await store.aget_run("r")
            first = _backends(admin, app) - after
            for pid in first:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_for(lambda: not (_backends(admin, app) & first), what="backend to exit")
            assert (await store.aget_run("r")).runner_name == "c"
            return first, _backends(admin, app) - after

        first, second = asyncio.run(async_side())
        assert len(first) == 1 and len(second) == 1 and not (first & second)
    finally:
        store.close()


def test_pool_recovers_after_a_server_restart_without_an_error(cluster, admin, schema):
    store = _store(cluster, schema, timeout_seconds=20)
    try:
        store.create_run(RunRecord("r", "c", "chain"))
        cluster.stop("fast")
        cluster.start()
        cluster.wait_ready()
        assert store.get_run("r").status == "running"
    finally:
        if not cluster.is_running():
            cluster.start()
        store.close()


@pytest.mark.parametrize("password", ["p@ss:w0rd", "p@ss:w0rd/?#%&= \U0001f511"])
def test_percent_encoded_password_is_checked_by_the_server(cluster, admin, schema, password):
    role = f"tether_pw_{uuid.uuid4().hex[:8]}"
    admin.execute(
        psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            psycopg.sql.Identifier(role), psycopg.sql.Literal(password)
        )
    )
    admin.execute(f"GRANT CREATE ON DATABASE postgres TO {role}")
    base = f"127.0.0.1:{cluster.port}/postgres?schema={schema}"
    try:
        store = tether.connect(f"postgresql://{role}:{quote(password, safe='')}@{base}")
        try:
            store.create_run(RunRecord("r", "c", "chain"))
            assert run_of(store, "r").runner_name == "c"
        finally:
            store.close()
        wrong = tether.connect(f"postgresql://{role}:wrong@{base}", timeout_seconds=2)
        try:
            with pytest.raises(StoreUnavailableError, match="password authentication failed"):
                wrong.get_run("r")
        finally:
            wrong.close()
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.execute(f"REVOKE CREATE ON DATABASE postgres FROM {role}")
        admin.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("dead", [1, 6])
def test_pooled_connections_the_server_killed_do_not_stall_the_next_run(
    cluster, admin, schema, driver, dead
):
    app = f"tether-dead-{uuid.uuid4().hex[:6]}"
    store = _store(
        cluster, schema, application_name=app, min_size=dead, max_size=dead + 4, timeout_seconds=30
    )
    calls: list[str] = []
    chain = _three_steps(store, calls)

    async def body(run):
        assert (await run()).status == "completed"  # the pool holds `dead` idle connections
        killed = await asyncio.to_thread(_terminate, admin, app)
        assert killed == dead
        return await _timed(run)

    try:
        seconds, result = _scenario(driver, chain, body)
        assert result.status == "completed"
        assert calls == ["a", "b", "c"] * 2
        # psycopg_pool's back-off alone would pause 0 + 1 + 2 + 4 + 8 s for six.
        assert seconds < 1.0, f"the run after {dead} dead connections took {seconds:.2f} s"
    finally:
        store.close()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_restart_under_an_idle_pool_of_six_does_not_stall_the_next_run(
    cluster, admin, schema, driver
):
    store = _store(cluster, schema, min_size=6, max_size=10, timeout_seconds=30)

    def restart():
        cluster.stop("fast")
        cluster.start()
        cluster.wait_ready()

    async def body(run):
        assert (await run()).status == "completed"
        await asyncio.to_thread(restart)
        return await _timed(run)

    try:
        seconds, result = _scenario(driver, _three_steps(store, []), body)
        assert result.status == "completed"
        assert seconds < 1.0, f"the run after the restart took {seconds:.2f} s"
    finally:
        if not cluster.is_running():
            cluster.start()
        store.close()


# psycopg_pool's own back-off tries a server again 0, 1, 3, 7, 15... s after it went (±10%),
# in each of its connect attempts; a server back after ~11 s is first tried ~3-5 s later.
OUTAGE_SECONDS = 10.0


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_runs_during_an_outage_fail_within_the_timeout_and_the_first_after_it_is_immediate(
    cluster, admin, schema, driver
):
    timeout = 2.0
    store = _store(cluster, schema, min_size=2, max_size=4, timeout_seconds=timeout)

    async def body(run):
        assert (await run()).status == "completed"
        await asyncio.to_thread(cluster.stop, "fast")
        failures: list[tuple[float, StoreUnavailableError]] = []
        while len(failures) * timeout < OUTAGE_SECONDS:
            t0 = time.perf_counter()
            with pytest.raises(StoreUnavailableError) as caught:
                await run()
            failures.append((time.perf_counter() - t0, caught.value))
        await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(cluster.wait_ready)
        return failures, await _timed(run)

    try:
        failures, (seconds, result) = _scenario(driver, _three_steps(store, []), body)
        target = f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres"
        for took, exc in failures:
            assert took < timeout + 2.0, f"a run during the outage failed after {took:.1f} s"
            text = str(exc)
            assert f"no connection to PostgreSQL {target} within {timeout:g} s" in text, text
            assert "Connection refused" in text, text  # the reason, diagnosed
        assert result.status == "completed"
        assert seconds < 1.0, f"the first run after the outage took {seconds:.2f} s"
    finally:
        if not cluster.is_running():
            cluster.start()
        store.close()


def _connect_warnings(caplog) -> dict[str, list[str]]:
    """psycopg_pool's failed-connect warnings, by pool name."""
    by_pool: dict[str, list[str]] = {}
    for r in caplog.records:
        if r.name == "psycopg.pool" and str(r.msg).startswith("error connecting in"):
            by_pool.setdefault(r.args[0], []).append(r.getMessage())
    return by_pool


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_operation_waiting_on_a_refused_server_logs_one_warning_not_a_dozen_a_second(
    caplog, driver
):
    from tether.store.postgres import PostgresCheckpointer

    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    port = _free_port()  # nothing listens: every connect is refused at once
    store = PostgresCheckpointer(
        f"postgresql://postgres@127.0.0.1:{port}/postgres", timeout_seconds=2
    )
    try:
        with pytest.raises(StoreUnavailableError, match="Connection refused"):
            if driver == "sync":
                store.list_runs()
            else:
                asyncio.run(store.aget_run("r-1"))
    finally:
        store.close()
    by_pool = _connect_warnings(caplog)
    # Connecting again every quarter second, psycopg_pool warned about 12 times a second.
    assert by_pool and all(len(lines) == 1 for lines in by_pool.values()), by_pool
    for pool, (line,) in by_pool.items():
        assert pool.startswith("tether-") and "Connection refused" in line, line


def test_the_outage_log_filter_leaves_other_pools_alone():
    from tether.store._postgres_recovery import OUTAGE_LOG

    def record(msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, msg, args, None)

    for _ in range(3):
        assert OUTAGE_LOG.filter(record("error connecting in %r: %s", "mine", "refused"))
        assert OUTAGE_LOG.filter(
            record("reconnection attempt in pool %r failed after %s sec", "mine", 0)
        )
    assert OUTAGE_LOG.filter(record("discarding broken connection: %s", "conn"))


def test_an_outage_longer_than_the_log_interval_logs_again_with_the_count_left_out(
    monkeypatch, caplog
):
    from tether.store import _postgres_recovery as recovery

    caplog.set_level(logging.INFO, logger="tether.store.postgres")
    pool = f"tether-{uuid.uuid4().hex[:8]}-sync"

    def failed() -> logging.LogRecord | None:
        rec = logging.LogRecord(
            "psycopg.pool",
            logging.WARNING,
            __file__,
            1,
            "error connecting in %r: %s",
            (pool, "Connection refused"),
            None,
        )
        return rec if recovery.OUTAGE_LOG.filter(rec) else None

    first = failed()
    assert first is not None and "Connection refused" in first.getMessage()
    assert [failed() for _ in range(5)] == [None] * 5
    monkeypatch.setattr(recovery, "OUTAGE_LOG_EVERY_SECONDS", 0.0)
    again = failed()
    assert again is not None and "5 like it not logged" in again.getMessage(), again
    recovery.OUTAGE_LOG.connected(pool)
    (line,) = [r.getMessage() for r in caplog.records if pool in r.getMessage()]
    assert "connected again" in line and "7 failed connects" in line, line
    monkeypatch.setattr(recovery, "OUTAGE_LOG_EVERY_SECONDS", 30.0)
    assert failed() is not None  # a new outage: its first failure is logged again
    recovery.OUTAGE_LOG.connected(pool)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_run_waiting_through_an_outage_is_served_as_soon_as_the_server_is_back(
    cluster, admin, schema, driver, caplog
):
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    caplog.set_level(logging.INFO, logger="tether.store.postgres")
    store = _store(cluster, schema, min_size=2, max_size=4, timeout_seconds=60)

    async def body(run):
        assert (await run()).status == "completed"
        await asyncio.to_thread(cluster.stop, "fast")
        waiting = asyncio.ensure_future(run())
        await asyncio.sleep(OUTAGE_SECONDS)  # the fault's length, not a wait for a condition
        assert not waiting.done()
        await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(cluster.wait_ready)
        back = time.perf_counter()
        result = await waiting
        return time.perf_counter() - back, result

    try:
        seconds, result = _scenario(driver, _three_steps(store, []), body)
        assert result.status == "completed"
        # One pause between connect rounds (a quarter second), a connect and the run.
        assert seconds < 1.5, f"the waiting run ended {seconds:.2f} s after the server was back"
        # Ten seconds of connects every quarter second: one warning (dozens before), then a
        # line saying the pool is connected again and how many connects failed.
        by_pool = _connect_warnings(caplog)
        assert all(len(lines) == 1 for lines in by_pool.values()), {
            k: len(v) for k, v in by_pool.items()
        }
        back = {
            r.args[0]: r.args[2]
            for r in caplog.records
            if r.name == "tether.store.postgres" and str(r.msg).startswith("connected again")
        }
        # The driver's pool, which the run waited on; a pool nobody waited on reconnects, and
        # says so, only when next used.
        assert back.get(f"tether-{schema}-{driver}", 0) >= 10, back  # what was left out
    finally:
        if not cluster.is_running():
            cluster.start()
        store.close()


def test_a_connection_killed_mid_step_fails_it_clearly_and_the_run_resumes_at_once(
    cluster, admin, schema
):
    app = f"tether-mid-kill-{uuid.uuid4().hex[:6]}"
    store = _store(cluster, schema, application_name=app, min_size=6, max_size=10)
    try:
        calls: list[str] = []
        chain = _three_steps(store, calls)
        reference = chain.run({"start": "\x00"}).output
        calls.clear()
        admin.execute(STALL_B.format(s=f'"{schema}"'))
        outcome: list[BaseException | object] = []

        def run() -> None:
            try:
                outcome.append(chain.run({"start": "\x00"}))
            except BaseException as exc:
                outcome.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        stalled = wait_for(
            lambda: admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event = 'PgSleep'",
                (app,),
            ).fetchone(),
            what="step b's insert to stall",
        )[0]
        # The server kills the step's connection in its transaction, and the idle ones.
        assert _terminate(admin, app) == 6
        runner.join(30)
        assert not runner.is_alive()

        (err,) = outcome
        assert isinstance(err, StoreUnavailableError), err
        assert "lost the connection" in str(err) and f"backend pid {stalled}" in str(err)
        eid = err.execution_id
        assert eid  # the error names the run it interrupted
        admin.execute(f'DELETE FROM "{schema}".stall_flag')

        # Read back, then resume, on a pool whose every connection the server killed.
        t0 = time.perf_counter()
        assert [cp.node_id for cp in store.list(eid)] == ["a"]  # nothing of b
        assert run_of(store, eid).status == "running"
        done = chain.resume(eid)
        seconds = time.perf_counter() - t0
        assert done.status == "completed" and done.output == reference
        assert calls == ["a", "b", "b", "c"]
        assert [cp.node_id for cp in store.list(eid)] == ["a", "b", "c", "run_end"]
        assert seconds < 1.0, f"reading back and resuming after the kill took {seconds:.2f} s"
    finally:
        store.close()


def test_a_character_the_databases_encoding_lacks_is_rejected_and_commits_nothing(
    cluster, admin, schema
):
    dbname = f"latin1_{uuid.uuid4().hex[:8]}"
    admin.execute(
        f"CREATE DATABASE {dbname} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    )
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(cluster.dsn.rsplit("/", 1)[0] + f"/{dbname}", schema=schema)
    try:
        chain = Chain("approval", store)
        chain.add_node("a", lambda state: {"amount": 120})
        chain.add_node("b", lambda state: {"ok": interrupt("approve \u2713", state).approved})
        chain.add_edge("a", "b")

        with pytest.raises(RecordRejectedError) as caught:
            chain.run({}, execution_id="r")
        err = caught.value
        assert err.code == "22P05"  # untranslatable_character
        assert 'no equivalent in encoding "LATIN1"' in str(err)
        assert [cp.node_id for cp in store.list("r")] == ["a"]
        assert store.get_pending_interrupt("r") is None
        assert run_of(store, "r").status == "running"
    finally:
        store.close()
        admin.execute(f"DROP DATABASE {dbname} WITH (FORCE)")
