"""Schema version 2 (run leases, the queue) migrates a version-1 database forward and keeps its
runs (DESIGN section 7: migrations run forward only)."""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pytest

import tether
from tests.conftest import PG_DSN
from tether import Chain


def _chain(store: object) -> Chain:
    chain = Chain("legacy", store)  # type: ignore[arg-type]
    chain.add_node("a", lambda s: {"a": 1})
    chain.add_node("b", lambda s: {"b": 2})
    chain.add_edge("a", "b")
    return chain


def test_a_version_1_sqlite_file_migrates_to_2_and_keeps_its_runs(tmp_path):
    from tether.store.sqlite import MIGRATIONS

    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE tether_schema (version INTEGER NOT NULL, applied_at REAL NOT NULL)")
    for statement in MIGRATIONS[1]:
        conn.execute(statement)
    conn.execute("INSERT INTO tether_schema VALUES (1, ?)", (time.time(),))
    now = time.time()
    conn.execute(
        "INSERT INTO runs (execution_id, runner_name, runner_kind, status, input, created_at, "
        "updated_at) VALUES ('old', 'legacy', 'chain', 'running', ?, ?, ?)",
        (b"{}", now - 3600, now - 3600),
    )
    conn.commit()
    conn.close()

    store = tether.SQLiteCheckpointer(path)
    assert store.schema_version() == 2
    run = store.get_run("old")
    assert run is not None and run.status == "running"
    # A v1 run left "running" with no lease counts as abandoned: a worker claims it.
    (claimed,) = store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5)
    assert claimed.execution_id == "old" and claimed.status == "running"
    store.release_run_lease("old", owner="w:1:x")
    assert _chain(store).resume("old").status == "completed"


@pytest.mark.postgres
def test_a_version_1_postgres_schema_migrates_to_2_and_keeps_its_runs(pg_schema):
    from tether.store._postgres_sql import MIGRATIONS

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tether_schema '
            "(version integer NOT NULL, applied_at timestamptz NOT NULL)"
        )
        for statement in MIGRATIONS[1]:
            conn.execute(statement.format(schema=f'"{pg_schema}"'))
        conn.execute(f'INSERT INTO "{pg_schema}".tether_schema VALUES (1, now())')
        conn.execute(
            f'INSERT INTO "{pg_schema}".runs (execution_id, runner_name, runner_kind, status, '
            "input, created_at, updated_at) VALUES ('old', 'legacy', 'chain', 'running', "
            "'{}'::bytea, now() - interval '1 hour', now() - interval '1 hour')"
        )

    store = tether.PostgresCheckpointer(PG_DSN, schema=pg_schema)
    try:
        assert store.schema_version() == 2
        run = store.get_run("old")
        assert run is not None and run.status == "running"
        (claimed,) = store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5)
        assert claimed.execution_id == "old"
        store.release_run_lease("old", owner="w:1:x")
        assert _chain(store).resume("old").status == "completed"
    finally:
        store.close()
