"""A value the database refuses is a ``RecordRejectedError`` naming why, never a
``StoreUnavailableError`` (which callers retry) nor another writer's step: a constraint an
operator added, a key too large for a B-tree index, a string over SQLite's length limit. And
nothing of the refused operation is stored."""

from __future__ import annotations

import secrets
import sqlite3

import psycopg
import pytest

from tests.conftest import PG_DSN
from tether import Chain
from tether.errors import (
    ConcurrentWriteError,
    RecordRejectedError,
    StoreUnavailableError,
)
from tether.store.base import RunRecord


def _admin(store, backend: str, sql: str) -> None:
    """Run ``sql`` (``{t}`` = the table prefix) on the store's database, as its operator."""
    store.setup()  # the tables exist before the operator alters them
    if backend == "sqlite":
        lite = sqlite3.connect(store.path)
        try:
            lite.executescript(sql.format(t=""))
        finally:
            lite.close()
    else:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.format(t=f'"{store.schema}".'))


def _two_steps(store, second: str, calls: list[str]) -> Chain:
    chain = Chain("two-steps", store)

    def step(name):
        def fn(state):
            calls.append(name)
            return {"log": [*state.get("log", []), name]}

        return fn

    chain.add_node("a", step("a"))
    chain.add_node(second, step(second))
    chain.add_edge("a", second)
    return chain


NODE_ID_SHORT = {
    "postgres": "ALTER TABLE {t}checkpoints ADD CONSTRAINT node_id_short "
    "CHECK (length(node_id) <= 20)",
    # SQLite cannot add a CHECK to a table: a trigger that aborts is its way.
    "sqlite": "CREATE TRIGGER node_id_short BEFORE INSERT ON {t}checkpoints "
    "WHEN length(NEW.node_id) > 20 BEGIN SELECT RAISE(ABORT, 'node_id_short'); END;",
}
DROP_NODE_ID_SHORT = {
    "postgres": "ALTER TABLE {t}checkpoints DROP CONSTRAINT node_id_short",
    "sqlite": "DROP TRIGGER node_id_short;",
}


def test_a_step_refused_by_an_operators_constraint_is_rejected_naming_it_and_commits_nothing(
    store, backend
):
    _admin(store, backend, NODE_ID_SHORT[backend])
    calls: list[str] = []
    long_name = "b_has_a_name_longer_than_twenty"
    chain = _two_steps(store, long_name, calls)

    with pytest.raises(RecordRejectedError) as caught:
        chain.run({}, execution_id="refused")
    err = caught.value
    assert not isinstance(err, StoreUnavailableError | ConcurrentWriteError)
    assert err.constraint == "node_id_short"
    assert "node_id_short" in str(err)
    assert "the same call will fail the same way" in str(err)
    assert err.code == ("23514" if backend == "postgres" else "SQLITE_CONSTRAINT_TRIGGER")

    # Nothing of the refused step: a's row only, the run still running, no end row.
    assert [cp.node_id for cp in store.list("refused")] == ["a"]
    assert store.get_run("refused").status == "running"
    assert store.get_pending_interrupt("refused") is None

    _admin(store, backend, DROP_NODE_ID_SHORT[backend])
    done = chain.resume("refused")
    assert done.status == "completed"
    assert done.output["log"] == ["a", long_name]
    assert calls == ["a", long_name, long_name]  # a never re-ran
    assert [cp.node_id for cp in store.list("refused")] == ["a", long_name, "run_end"]


def test_a_unique_index_the_operator_added_is_rejected_not_taken_for_a_duplicate_run(
    store, backend
):
    _admin(store, backend, "CREATE UNIQUE INDEX one_run_per_runner ON {t}runs (runner_name)")
    store.create_run(RunRecord("first", "nightly", "chain"))

    with pytest.raises(RecordRejectedError) as caught:
        store.create_run(RunRecord("second", "nightly", "chain"))
    err = caught.value
    if backend == "postgres":
        assert err.constraint == "one_run_per_runner" and err.code == "23505"
        assert "one_run_per_runner" in str(err)
    else:
        assert err.constraint == "runs.runner_name" and err.code == "SQLITE_CONSTRAINT_UNIQUE"
        assert "runs.runner_name" in str(err)

    assert store.get_run("second") is None
    assert store.get_run("first").runner_name == "nightly"
    assert [r.execution_id for r in store.list_runs()] == ["first"]


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_key_too_large_for_a_btree_index_is_rejected_naming_the_index(store, backend):
    # Random text does not compress, so PostgreSQL cannot fit it in a B-tree entry (at most
    # 2704 bytes): "index row size ... exceeds btree version 4 maximum 2704".
    too_long = secrets.token_hex(2000)

    chain = Chain("c", store)
    chain.add_node("a", lambda state: {})
    with pytest.raises(RecordRejectedError) as caught:
        chain.run({}, execution_id=too_long)
    err = caught.value
    assert not isinstance(err, StoreUnavailableError)
    assert err.code == "54000" and err.constraint == "runs_pkey"
    assert "exceeds btree" in str(err) and '"runs_pkey"' in str(err)
    assert store.list_runs() == []

    store.create_run(RunRecord("r", "c", "chain"))
    with pytest.raises(RecordRejectedError) as caught:
        store.put_idempotent("r", too_long, {"charged": 1})
    assert caught.value.constraint == "idempotency_cache_pkey"
    assert store.list_idempotent("r") == {}
    assert store.put_idempotent("r", "short", {"charged": 1}) == {"charged": 1}


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_value_over_sqlites_length_limit_is_rejected_and_commits_nothing(store, backend):
    store.create_run(RunRecord("r", "c", "chain"))
    # SQLite refuses a string or blob over SQLITE_LIMIT_LENGTH (1 GB unless lowered); lowered
    # here, on this thread's connection of the store, so a test can reach it.
    store._conn().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 64 * 1024)
    too_big = secrets.token_hex(64 * 1024)

    with pytest.raises(RecordRejectedError) as caught:
        store.put_idempotent("r", "k", {"blob": too_big})
    err = caught.value
    assert not isinstance(err, StoreUnavailableError)
    assert err.code == "SQLITE_TOOBIG" and "too big" in str(err)
    assert store.list_idempotent("r") == {}
    assert store.put_idempotent("r", "k", {"blob": "small"}) == {"blob": "small"}
