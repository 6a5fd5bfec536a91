"""Schema migrations carry older databases forward and keep their runs (docs/design.md §7:
migrations run forward only): version 2 added run leases and the queue, version 3 dropped the
primary key on ``checkpoint_id``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import tether
from tests.conftest import PG_DSN
from tether import Chain
from tether.store._postgres_sql import SCHEMA_VERSION as PG_SCHEMA_VERSION
from tether.store.sqlite import SCHEMA_VERSION


def _chain(store: tether.Checkpointer) -> Chain:
    chain = Chain("legacy", store)
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
    assert store.schema_version() == SCHEMA_VERSION
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
        assert store.schema_version() == PG_SCHEMA_VERSION
        run = store.get_run("old")
        assert run is not None and run.status == "running"
        (claimed,) = store.claim_runs(owner="w:1:x", limit=5, lease_seconds=30, max_attempts=5)
        assert claimed.execution_id == "old"
        store.release_run_lease("old", owner="w:1:x")
        assert _chain(store).resume("old").status == "completed"
    finally:
        store.close()


def _step(i: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda s: {"n": s.get("n", 0) + 1, "log": [*s.get("log", []), i]}


def _branching_chain(store: tether.Checkpointer) -> Chain:
    chain = Chain("v2-run", store)
    for i in range(40):  # past a full snapshot: rows of both kinds
        chain.add_node(f"n{i}", _step(i))
        if i:
            chain.add_edge(f"n{i - 1}", f"n{i}")
    return chain


def _assert_carried_over(
    store: tether.Checkpointer, eid: str, before: list[tether.Checkpoint]
) -> None:
    after = store.list(eid)
    assert [(c.checkpoint_id, c.seq, c.node_id, c.state_snapshot) for c in after] == [
        (c.checkpoint_id, c.seq, c.node_id, c.state_snapshot) for c in before
    ]
    mid = before[20]
    got = store.get_checkpoint(eid, mid.checkpoint_id)
    assert got is not None and got.state_snapshot == mid.state_snapshot
    branch = _branching_chain(store).fork(eid, checkpoint_id=mid.checkpoint_id)
    assert branch.status == "completed" and branch.output["n"] == 40


def test_a_version_2_sqlite_file_migrates_to_3_without_the_checkpoint_id_key(tmp_path, monkeypatch):
    path = tmp_path / "v2.db"
    old = _open_at("sqlite", str(path), monkeypatch, 2)
    eid = _branching_chain(old).run({}).execution_id
    before = old.list(eid)
    assert old.schema_version() == 2
    old.close()

    store = _open_at("sqlite", str(path), monkeypatch, None)
    assert store.schema_version() == SCHEMA_VERSION
    _assert_carried_over(store, eid, before)
    store.close()
    conn = sqlite3.connect(path)
    indexes = {row[1]: row[2] for row in conn.execute("PRAGMA index_list(checkpoints)")}
    conn.close()
    assert indexes == {"checkpoints_run_seq_idx": 1}  # one unique index; no autoindex on the id


@pytest.mark.postgres
def test_a_version_2_postgres_schema_migrates_to_3_without_the_checkpoint_id_key(
    pg_schema, monkeypatch
):
    old = _open_at("postgres", pg_schema, monkeypatch, 2)
    try:
        eid = _branching_chain(old).run({}).execution_id
        before = old.list(eid)
        assert old.schema_version() == 2
    finally:
        old.close()

    store = _open_at("postgres", pg_schema, monkeypatch, None)
    try:
        assert store.schema_version() == PG_SCHEMA_VERSION
        _assert_carried_over(store, eid, before)
    finally:
        store.close()
    assert _indexes("postgres", pg_schema, "checkpoints") == {"checkpoints_run_seq_idx"}


_LONG = "a sentence long enough that the state payload crosses the compression threshold. " * 12


def _open_at(kind: str, where: str, monkeypatch: pytest.MonkeyPatch, version: int | None):
    """A store of ``kind`` on ``where``, as a tether whose schema is ``version`` would open it
    (``None``: this tether)."""
    import tether.store._postgres_sql as pg_sql
    import tether.store.sqlite as sqlite_store

    if version is not None:
        monkeypatch.setattr(sqlite_store, "SCHEMA_VERSION", version)
        monkeypatch.setattr(pg_sql, "SCHEMA_VERSION", version)
    else:
        _later_columns(kind, where, add=False)
    try:
        if kind == "sqlite":
            store: Any = tether.SQLiteCheckpointer(where)
        else:
            store = tether.PostgresCheckpointer(PG_DSN, schema=where)
            store.setup()  # Postgres migrates on first use: now, while the version is patched
    finally:
        monkeypatch.undo()
    if version is not None:
        _later_columns(kind, where, add=True)
    return store


# Columns of the runs table added after the versions these tests open at, which this tether's
# code writes and reads: added to an old schema while old rows are written through this code,
# and dropped again before the upgrade, which adds them itself.
_LATER_RUN_COLUMNS = {"app_version": 8}


def _later_columns(kind: str, where: str, *, add: bool) -> None:
    sqls = []
    for column, since in _LATER_RUN_COLUMNS.items():
        if _schema_version(kind, where) >= since or _has_column(kind, where, column) == add:
            continue
        verb = f"ADD COLUMN {column} text" if add else f"DROP COLUMN {column}"
        table = "runs" if kind == "sqlite" else f'"{where}".runs'
        sqls.append(f"ALTER TABLE {table} {verb}")
    _execute(kind, where, sqls)


def _query(kind: str, where: str, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
    if kind == "sqlite":
        conn = sqlite3.connect(where)
        try:
            return conn.execute(sql.replace("%s", "?"), args).fetchall()
        finally:
            conn.close()
    with psycopg.connect(PG_DSN, autocommit=True) as pg:
        cur = pg.execute(sql, args)
        return cur.fetchall() if cur.description else []


def _execute(kind: str, where: str, sqls: list[str]) -> None:
    for sql in sqls:
        _query(kind, where, sql)


def _schema_version(kind: str, where: str) -> int:
    table = "tether_schema" if kind == "sqlite" else f'"{where}".tether_schema'
    try:
        return int(_query(kind, where, f"SELECT MAX(version) FROM {table}")[0][0] or 0)
    except (sqlite3.Error, psycopg.Error):  # no schema yet
        return 0


def _has_column(kind: str, where: str, column: str) -> bool:
    if kind == "sqlite":
        return any(row[1] == column for row in _query(kind, where, "PRAGMA table_info(runs)"))
    rows = _query(
        kind,
        where,
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'runs' AND column_name = %s",
        (where, column),
    )
    return bool(rows)


def _indexes(kind: str, where: str, table: str) -> set[str]:
    """The names of ``table``'s indexes in the SQLite file or Postgres schema ``where``."""
    if kind == "sqlite":
        conn = sqlite3.connect(where)
        try:
            return {row[1] for row in conn.execute(f"PRAGMA index_list({table})")}
        finally:
            conn.close()
    with psycopg.connect(PG_DSN, autocommit=True) as pg:
        rows = pg.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (where, table),
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_version_4_keeps_version_3_rows_and_a_version_3_tether_refuses_its_compressed_rows(
    kind, tmp_path, monkeypatch, request
):
    where = str(tmp_path / "v3.db") if kind == "sqlite" else request.getfixturevalue("pg_schema")
    old = _open_at(kind, where, monkeypatch, 3)
    assert "runs_status_idx" in _indexes(kind, where, "runs")
    chain = Chain("notes", old)
    chain.add_node("a", lambda s: {"notes": [_LONG]})
    first = chain.run({}).execution_id
    before = old.list(first)
    assert old.schema_version() == 3
    old.close()

    store = _open_at(kind, where, monkeypatch, None)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        assert [cp.state_snapshot for cp in store.list(first)] == [
            cp.state_snapshot for cp in before
        ]
        chain = Chain("notes", store)
        chain.add_node("a", lambda s: {"notes": [_LONG, _LONG.upper()]})
        second = chain.run({}).execution_id
        assert store.get_last(second).state_snapshot["notes"][1] == _LONG.upper()
    finally:
        store.close()
    assert "runs_status_idx" not in _indexes(kind, where, "runs")
    assert "runs_queue_idx" in _indexes(kind, where, "runs")
    with pytest.raises(tether.errors.SchemaVersionError) as refused:
        _open_at(kind, where, monkeypatch, 3)
    assert refused.value.found == SCHEMA_VERSION and refused.value.supported == 3
