"""What the Postgres backend promises beyond the shared conformance suite: concurrency in one
process, NUL and astral text in ids, URLs and pools, schema migrations, and driver errors
always arriving as tether errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest

import tether
from tests.conftest import PG_DSN
from tests.support.results import run_of
from tests.support.waiting import wait_for
from tether import Chain, Checkpoint, Resume, interrupt
from tether.errors import (
    ConfigurationError,
    CorruptRecordError,
    SchemaVersionError,
    SerializationError,
    StoreError,
    StoreUnavailableError,
)
from tether.store.base import RunRecord
from tether.store.postgres import SCHEMA_VERSION, PostgresCheckpointer

pytestmark = pytest.mark.postgres


@pytest.fixture
def admin(pg_schema):
    """An autocommit connection to the shared test server (the schema fixture checked it)."""
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pg(pg_schema):
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    yield store
    store.close()


def _backends(admin, app: str) -> set[int]:
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)
    ).fetchall()
    return {r[0] for r in rows}


# --- concurrency in one process ---------------------------------------------------------------
async def test_fifty_concurrent_aruns_overlap_their_database_work(pg):
    chain = Chain("concurrent", pg)

    async def step(state):
        return {"n": state["n"] + 1, "trail": [*state["trail"], state["n"]]}

    for name in ("one", "two", "three"):
        chain.add_node(name, step)
    chain.add_edge("one", "two")
    chain.add_edge("two", "three")

    results = await asyncio.gather(*(chain.arun({"n": 0, "trail": [i]}) for i in range(50)))

    assert [r.status for r in results] == ["completed"] * 50
    assert [r.output["trail"] for r in results] == [[i, 0, 1, 2] for i in range(50)]
    stats = pg.pool_stats()
    assert stats["async_max_in_use"] > 1, stats  # runs held connections at the same time
    assert stats["async_in_use"] == 0
    assert len(pg.list_runs(runner_name="concurrent", limit=100)) == 50


async def test_exactly_one_of_many_concurrent_claims_wins(pg):
    eid = "claimed-once"
    pg.create_run(RunRecord(eid, "c", "chain"))
    pg.record_interrupt(
        Checkpoint(eid, "review", "hitl_pause", "interrupted", {"x": 1}, interrupt_reason="ok?")
    )
    won = await asyncio.gather(
        *(
            pg.aclaim_interrupt(
                eid, owner=f"owner-{i}", resume_value={"approved": True}, lease_seconds=30
            )
            for i in range(40)
        )
    )
    winners = [w for w in won if w is not None]
    assert len(winners) == 1
    assert pg.get_pending_interrupt(eid).claimed_by == winners[0].claimed_by
    assert pg.get_run(eid).status == "running"


def test_concurrent_setup_from_many_connections_migrates_once(pg_schema, admin):
    from tether.store.postgres import PostgresCheckpointer

    stores = [PostgresCheckpointer(PG_DSN, schema=pg_schema) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def go(store):
        barrier.wait()
        try:
            store.setup()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert errors == []
        rows = admin.execute(f'SELECT version FROM "{pg_schema}".tether_schema').fetchall()
        assert sorted(rows) == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
        assert all(s.schema_version() == SCHEMA_VERSION for s in stores)
    finally:
        for s in stores:
            s.close()


# --- text --------------------------------------------------------------------------------------
def test_nul_and_astral_characters_in_ids_and_state_round_trip_through_a_run(pg):
    chain = Chain("n\x00me-\U0001f600", pg)

    def first(state):
        return {"seen": state["text"] + "\x00\U0001f9e0", "\x00key": "\ufffe0"}

    def ask(state):
        answer = interrupt("why\x00\U0001f914", {"ctx": "\x00\U0001f600"})
        return {"answer": answer.data}

    chain.add_node("f\x00irst-\U0001f680", first)
    chain.add_node("ask-\U0001f914", ask)
    chain.add_edge("f\x00irst-\U0001f680", "ask-\U0001f914")

    eid = "run\x00-\U0001f600-\ufffe0-\\"
    paused = chain.run({"text": "a\x00b\U00010348"}, execution_id=eid)
    assert paused.status == "paused"
    assert paused.pending_interrupt == {
        "reason": "why\x00\U0001f914",
        "context": {"ctx": "\x00\U0001f600"},
        "node_id": "ask-\U0001f914",
        "agent_path": None,
        "checkpoint_id": pg.get_pending_interrupt(eid).checkpoint_id,
    }
    assert [p.execution_id for p in pg.list_pending_interrupts()] == [eid]
    done = chain.resume(eid, Resume(True, data="\x00\U0001f44d"))
    assert done.status == "completed"
    assert done.output == {
        "text": "a\x00b\U00010348",
        "seen": "a\x00b\U00010348\x00\U0001f9e0",
        "\x00key": "\ufffe0",
        "answer": "\x00\U0001f44d",
    }
    assert [cp.node_id for cp in pg.list(eid)] == [
        "f\x00irst-\U0001f680",
        "ask-\U0001f914",
        "ask-\U0001f914",
        "run_end",
    ]
    assert pg.get_run(eid).runner_name == "n\x00me-\U0001f600"
    assert [r.execution_id for r in pg.list_runs(runner_name="n\x00me-\U0001f600")] == [eid]


def test_ids_differing_only_in_nul_and_the_escape_character_stay_distinct(pg):
    ids = ["a\x00", "a\ufffe0", "a\ufffe", "a\ufffe\ufffe", "a\ufffe\ufffe0", "a\\0", "a"]
    for i, eid in enumerate(ids):
        pg.create_run(RunRecord(eid, f"name-{i}", "chain"))
        pg.put(Checkpoint(eid, "n", "node", "completed", {"i": i}, agent_path=f"agent:{eid}/x"))
    for i, eid in enumerate(ids):
        assert pg.get_run(eid).runner_name == f"name-{i}"
        assert pg.get_last(eid).state_snapshot == {"i": i}
        assert pg.get_last(eid, agent_path_prefix=f"agent:{eid}").state_snapshot == {"i": i}
    # Escaping keeps prefixes exact: "agent:a\ufffe/" is no prefix of "agent:a\ufffe\ufffe/x".
    assert pg.get_last("a\ufffe\ufffe", agent_path_prefix="agent:a\ufffe") is None
    assert pg.get_last("a\x00", agent_path_prefix="agent:a") is None


def test_text_that_utf8_cannot_encode_is_a_serialization_error(pg):
    with pytest.raises(SerializationError, match="surrogates not allowed"):
        pg.create_run(RunRecord("lone-\ud800", "c", "chain"))
    assert pg.list_runs() == []


# --- URLs and pools ------------------------------------------------------------------------------
def test_connect_with_a_percent_encoded_password_and_schema_parameter(pg_schema, admin):
    role = f"tether_pw_{uuid.uuid4().hex[:8]}"
    password = "p@ss:w0rd"
    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    admin.execute(f"GRANT CREATE ON DATABASE test TO {role}")
    url = f"postgresql://{role}:{quote(password, safe='')}@127.0.0.1/test?schema={pg_schema}"
    assert "p%40ss%3Aw0rd" in url
    try:
        store = tether.connect(url)
        try:
            assert isinstance(store, PostgresCheckpointer) and store.schema == pg_schema
            store.create_run(RunRecord("r", "c", "chain"))
            assert run_of(store, "r").runner_name == "c"
            owner = admin.execute(
                "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = %s",
                (pg_schema,),
            ).fetchone()[0]
            assert owner == role
        finally:
            store.close()
    finally:
        admin.execute(f'DROP SCHEMA IF EXISTS "{pg_schema}" CASCADE')
        admin.execute(f"REVOKE CREATE ON DATABASE test FROM {role}")
        admin.execute(f"DROP ROLE {role}")


def test_from_url_passes_other_parameters_to_libpq_and_refuses_two_schemas(pg_schema, admin):
    app = f"tether-url-{uuid.uuid4().hex[:6]}"
    store = tether.connect(f"{PG_DSN}?schema={pg_schema}&application_name={app}")
    try:
        store.create_run(RunRecord("r", "c", "chain"))
        assert isinstance(store, PostgresCheckpointer) and store.schema == pg_schema
        assert _backends(admin, app)
    finally:
        store.close()
    with pytest.raises(ConfigurationError, match="conflicting schemas"):
        tether.connect(f"{PG_DSN}?schema=a", schema="b")


def test_a_pool_passed_in_serves_the_sync_methods_and_is_left_open(pg_schema):
    from psycopg_pool import ConnectionPool

    from tether.store.postgres import PostgresCheckpointer

    with ConnectionPool(PG_DSN, min_size=1, max_size=2, open=True) as pool:
        store = PostgresCheckpointer(pool, schema=pg_schema)
        store.create_run(RunRecord("r", "c", "chain"))
        store.put(Checkpoint("r", "n", "node", "completed", {"x": "\x00"}))
        row = asyncio.run(store.aget_last("r"))
        assert row is not None and row.state_snapshot == {"x": "\x00"}
        store.close()
        assert not pool.closed
        with pool.connection() as conn:
            # The caller's connections keep psycopg's own adapters (tether's escaping of NUL
            # would make this 2).
            assert conn.execute("SELECT length(%s::text)", ("\ufffe",)).fetchone() == (1,)
        assert run_of(store, "r").status == "running"  # still usable after close()
        store.close()


def _use_inherited_store(store, out) -> None:
    from tether.store import _postgres_io

    try:
        store.create_run(RunRecord("from-child", "c", "chain"))
        out.put(asyncio.run(store.aget_run("from-child")).runner_name)
        store.close()
        # What finalizing the inherited connections (at interpreter exit) would do.
        for sync, loops in _postgres_io._FORK_ORPHANS:
            pools = [lp.pool for lp in loops.values()] + ([sync] if sync else [])
            for pool in pools:
                for conn in list(pool._pool):
                    conn.pgconn.finish()
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")


def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone(pg_schema, admin):
    import multiprocessing as mp

    from tether.store.postgres import PostgresCheckpointer

    app = f"tether-fork-{uuid.uuid4().hex[:6]}"
    store = PostgresCheckpointer(PG_DSN, schema=pg_schema, application_name=app)
    try:
        store.create_run(RunRecord("from-parent", "c", "chain"))
        parents = _backends(admin, app)
        assert len(parents) == 1  # the sync pool's connection
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_use_inherited_store, args=(store, out))
        child.start()
        assert out.get(timeout=30) == "c"
        child.join(30)
        assert child.exitcode == 0
        # The child neither used nor closed the parent's connection: it is still there.
        assert parents <= _backends(admin, app)
        assert run_of(store, "from-child").runner_name == "c"
        assert _backends(admin, app) & parents
    finally:
        store.close()


def test_sync_verbs_called_repeatedly_do_not_leak_connections(pg_schema, admin):
    from tether.store.postgres import PostgresCheckpointer

    app = f"tether-leak-{uuid.uuid4().hex[:6]}"
    store = PostgresCheckpointer(PG_DSN, schema=pg_schema, application_name=app)
    chain = Chain("sync", store)
    chain.add_node("only", lambda state: {"done": True})
    try:
        assert chain.run({}).status == "completed"
        first = _backends(admin, app)
        assert first
        for _ in range(11):
            assert chain.run({}).status == "completed"
        # Sync verbs run on the sync pool, which every call shares: the same connections
        # served all twelve runs, none was opened per call.
        assert _backends(admin, app) == first
    finally:
        store.close()
    wait_for(lambda: _backends(admin, app) == set(), "every connection to close")


# --- schema versions and errors ------------------------------------------------------------
def test_newer_schema_version_is_refused(pg, pg_schema, admin):
    from tether.store.postgres import PostgresCheckpointer

    pg.setup()
    admin.execute(f'INSERT INTO "{pg_schema}".tether_schema VALUES (99, now())')
    newer = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    try:
        with pytest.raises(SchemaVersionError) as info:
            newer.get_run("anything")
        assert info.value.found == 99 and info.value.supported == SCHEMA_VERSION
        with pytest.raises(SchemaVersionError):
            newer.setup()
    finally:
        newer.close()


def test_an_unreachable_server_is_a_store_unavailable_error_saying_why():
    from tether.store.postgres import PostgresCheckpointer

    with socket_port() as port:
        store = PostgresCheckpointer(
            f"postgresql://postgres@127.0.0.1:{port}/test", timeout_seconds=1
        )
        try:
            with pytest.raises(StoreUnavailableError) as info:
                store.get_run("x")
            assert f"127.0.0.1:{port}" in str(info.value)
            assert "refused" in str(info.value).lower()
            with pytest.raises(StoreUnavailableError):
                asyncio.run(store.aget_run("x"))
        finally:
            store.close()


def test_tables_dropped_behind_the_stores_back_are_a_tether_error(pg, admin, pg_schema):
    pg.create_run(RunRecord("r", "c", "chain"))
    admin.execute(f'DROP TABLE "{pg_schema}".runs')
    with pytest.raises(CorruptRecordError, match="missing tether tables"):
        pg.get_run("r")
    with pytest.raises(StoreError):
        asyncio.run(pg.aget_run("r"))


def test_constructor_refuses_bad_arguments():
    from tether.store.postgres import PostgresCheckpointer

    with pytest.raises(ConfigurationError):
        PostgresCheckpointer(PG_DSN, schema="")
    with pytest.raises(ConfigurationError):
        PostgresCheckpointer(PG_DSN, min_size=5, max_size=2)
    with pytest.raises(ConfigurationError):
        PostgresCheckpointer("host=127.0.0.1 junk", schema="x")
    with pytest.raises(ConfigurationError):
        PostgresCheckpointer(42)  # type: ignore[arg-type]


@contextlib.contextmanager
def socket_port() -> Iterator[int]:
    """A local TCP port nothing listens on, for the life of the ``with`` block."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        yield int(sock.getsockname()[1])
