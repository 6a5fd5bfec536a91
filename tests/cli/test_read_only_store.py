"""The reading commands (``runs list``, ``runs show``, ``pending list``, ``audit``) read without
the write lock, and read a SQLite file this process cannot write; a command that must write
such a file says that it is read-only and why, naming it. In subprocesses, on real files."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.cli.test_cli import APP, as_json, paused_run, tether_cli
from tether import Checkpointer
from tether.store.sqlite import SCHEMA_VERSION, SQLiteCheckpointer


def _reads(eid: str) -> list[tuple[str, ...]]:
    return [("runs", "list"), ("pending", "list"), ("runs", "show", eid), ("audit",)]


@contextmanager
def _write_transaction_held(store: Any) -> Iterator[None]:
    """Another connection holds an open write transaction that changed the run's row (on
    SQLite the write lock, taken by ``BEGIN IMMEDIATE``), until the block ends."""
    conn: Any
    if hasattr(store, "path"):
        conn = sqlite3.connect(store.path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
    else:
        import psycopg

        from tests.conftest import PG_DSN

        conn = psycopg.connect(PG_DSN)
    schema = "" if hasattr(store, "path") else f'"{store.schema}".'
    conn.execute(f"UPDATE {schema}runs SET updated_at = updated_at")
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


def test_reading_commands_do_not_wait_for_a_writer_holding_the_lock(
    store: Checkpointer, db_url: str
) -> None:
    eid = paused_run(store)
    with _write_transaction_held(store):
        for args in _reads(eid):
            started = time.monotonic()
            proc = tether_cli(db_url, *args, "--json")
            took = time.monotonic() - started
            # Before, on SQLite, opening the store took the write lock: each command waited
            # out the 30-second busy timeout and failed "stayed locked".
            assert proc.returncode == 0, (args, proc.stderr)
            assert took < 10, (args, took)
        listed = as_json(tether_cli(db_url, "runs", "list", "--json"))
    assert [(r["execution_id"], r["status"]) for r in listed] == [(eid, "paused")]


def _paused_store(place: Any) -> tuple[str, str, bytes]:
    db = place.dir / "tether.db"
    store = SQLiteCheckpointer(db)
    eid = paused_run(store)
    store.close()
    return f"sqlite:///{db}", eid, db.read_bytes()


def test_reading_commands_read_a_store_this_user_cannot_write_and_change_nothing(
    read_only_place: Any,
) -> None:
    url, eid, before = _paused_store(read_only_place)
    read_only_place.seal()
    for args in _reads(eid):
        proc = read_only_place.cli(url, *args)
        # Before: "CorruptRecordError: ... is not a readable tether SQLite database: unable to
        # open database file" (read-only mount) or "attempt to write a readonly database".
        assert proc.returncode == 0, (args, proc.stderr)
        assert "not a readable" not in proc.stderr
    shown = as_json(read_only_place.cli(url, "runs", "show", eid, "--json"))
    assert shown["run"]["status"] == "paused" and len(shown["checkpoints"]) >= 3
    assert sorted(p.name for p in read_only_place.dir.iterdir()) == ["tether.db"]
    assert (read_only_place.dir / "tether.db").read_bytes() == before


def test_a_write_to_a_store_this_user_cannot_write_names_the_file_and_why(
    read_only_place: Any,
) -> None:
    url, eid, before = _paused_store(read_only_place)
    read_only_place.seal()
    db = str(read_only_place.dir / "tether.db")
    rejected = read_only_place.cli(url, "reject", eid, "--app", APP)
    assert rejected.returncode == 5, rejected.stderr
    said = rejected.stderr
    assert f"SQLite database {db!r} cannot be written" in said, said
    assert "read-only filesystem" in said or "may not" in said, said
    assert as_json(read_only_place.cli(url, "runs", "show", eid, "--json"))["run"]["status"] == (
        "paused"
    )
    assert (read_only_place.dir / "tether.db").read_bytes() == before


def test_creating_a_store_where_this_user_cannot_write_names_the_place_and_why(
    read_only_place: Any,
) -> None:
    read_only_place.seal()
    for db in (read_only_place.dir / "new.db", read_only_place.dir / "sub" / "new.db"):
        proc = read_only_place.cli(f"sqlite:///{db}", "db", "migrate")
        # Before: "cannot be written: unable to open database file" for the file, and a raw
        # PermissionError or OSError (exit 1) for the directory it had to create.
        assert proc.returncode == 5, (db, proc.stderr)
        said = proc.stderr
        assert f"SQLite database {str(db)!r} cannot be written" in said, said
        assert "read-only file" in said.lower() or "may not" in said, said
        assert str(read_only_place.dir) in said and "Traceback" not in said, said
    assert list(read_only_place.dir.iterdir()) == []


def test_an_older_store_this_user_cannot_write_says_it_cannot_be_migrated_there(
    read_only_place: Any,
) -> None:
    url, eid, _ = _paused_store(read_only_place)
    db = read_only_place.dir / "tether.db"
    # One version older: undo the newest migration (v9, approval deadlines) and its row.
    assert SCHEMA_VERSION == 9, "undo the newest migration here instead of v9's"
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX pending_due_idx")
        conn.execute("ALTER TABLE pending_interrupts DROP COLUMN due_at")
        conn.execute("DELETE FROM tether_schema WHERE version = ?", (SCHEMA_VERSION,))
    conn.close()
    before = db.read_bytes()
    read_only_place.seal()
    for args in (("runs", "list"), ("approve", eid, "--app", APP)):
        proc = read_only_place.cli(url, *args)
        assert proc.returncode == 5, proc.stderr
        said = " ".join(proc.stderr.split())
        assert f"{str(db)!r} holds tether schema version {SCHEMA_VERSION - 1}" in said, said
        assert "cannot be migrated here" in said and "tether db migrate" in said, said
    migrate = read_only_place.cli(url, "db", "migrate")
    assert migrate.returncode == 5, migrate.stderr
    assert f"SQLite database {str(db)!r} cannot be" in migrate.stderr, migrate.stderr
    assert db.read_bytes() == before


def test_a_log_of_commits_this_user_cannot_index_is_refused_saying_so_not_misread(
    read_only_place: Any,
) -> None:
    url, eid, _ = _paused_store(read_only_place)
    db = read_only_place.dir / "tether.db"
    wal = read_only_place.dir / "tether.db-wal"
    # A commit still in the -wal file and no -shm (a writer that died, a copy taken mid-run):
    # the bytes of both files while a writer holds the commit in its log, put back after.
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE runs SET status = 'failed' WHERE execution_id = ?", (eid,))
    files = db.read_bytes(), wal.read_bytes()
    writer.close()
    db.write_bytes(files[0])
    wal.write_bytes(files[1])
    for left in read_only_place.dir.glob("tether.db-shm"):
        left.unlink()
    read_only_place.seal()
    proc = read_only_place.cli(url, "runs", "list", "--json")
    assert proc.returncode == 5, proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"cannot read SQLite database {str(db)!r}" in said, said
    assert "holds commits" in said and "-shm" in said, said
    assert "not a readable" not in said


# --- Postgres: a role that may only read, and a migration in progress ---------------------------


@contextmanager
def _select_only_role(schema: str, *, read_only_transactions: bool) -> Iterator[str]:
    """A login role granted only USAGE on ``schema`` and SELECT on its tables (a dashboard's);
    with ``read_only_transactions`` every transaction it opens is read-only, as on a hot
    standby. Yields the role's DSN; the role is dropped after."""
    import psycopg

    from tests.conftest import PG_DSN

    role = f"tether_reader_{schema}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        if read_only_transactions:
            admin.execute(f'ALTER ROLE "{role}" SET default_transaction_read_only = on')
        try:
            yield PG_DSN.replace("postgres@", f"{role}@", 1)
        finally:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def _listed(url: str) -> list[tuple[str, str]]:
    listed = as_json(tether_cli(url, "runs", "list", "--json"))
    return [(r["execution_id"], r["status"]) for r in listed]


@pytest.mark.postgres
@pytest.mark.parametrize("standby", [False, True], ids=["select-only", "read-only-transactions"])
def test_a_postgres_role_that_may_only_read_reads_the_store_and_a_write_names_the_refusal(
    pg_schema: str, standby: bool
) -> None:
    from tests.conftest import PG_DSN
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    eid = paused_run(store)
    owner_url = f"{PG_DSN}?schema={pg_schema}"
    before = as_json(tether_cli(owner_url, "runs", "show", eid, "--json"))
    with _select_only_role(pg_schema, read_only_transactions=standby) as dsn:
        url = f"{dsn}?schema={pg_schema}"
        for args in _reads(eid):
            proc = tether_cli(url, *args, "--json")
            # Before: every command failed "refused setup: permission denied for schema" (or
            # "cannot execute CREATE TABLE in a read-only transaction"): opening the store
            # always ran the migration plan's DDL, even at the current version.
            assert proc.returncode == 0, (args, proc.stderr)
        assert _listed(url) == [(eid, "paused")]
        rejected = tether_cli(url, "reject", eid, "--app", APP)
        assert rejected.returncode == 5, rejected.stderr
        said = " ".join(rejected.stderr.split())
        assert "permission denied" in said or "read-only transaction" in said, said
    assert as_json(tether_cli(owner_url, "runs", "show", eid, "--json")) == before
    store.close()


@pytest.mark.postgres
def test_postgres_reading_commands_do_not_queue_behind_a_migration_in_progress(
    pg_schema: str,
) -> None:
    import psycopg

    from tests.conftest import PG_DSN
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    eid = paused_run(store)
    url = f"{PG_DSN}?schema={pg_schema}"
    # Another process migrating the schema holds the migrations lock for its transaction.
    with psycopg.connect(PG_DSN) as migrating:
        migrating.execute("SELECT pg_advisory_xact_lock(%s)", (store._lock_key,))
        for args in _reads(eid):
            started = time.monotonic()
            proc = tether_cli(url, *args, "--json")
            # Before: each command waited for the lock (here: the 60 s subprocess timeout).
            assert proc.returncode == 0, (args, proc.stderr)
            assert time.monotonic() - started < 20, args
        migrating.rollback()
    store.close()


def _paused_run_in(pg_schema: str) -> str:
    """A paused run in a Postgres store in ``pg_schema``, its checkpointer closed; its id."""
    from tests.conftest import PG_DSN
    from tether.store.postgres import PostgresCheckpointer

    store = PostgresCheckpointer(PG_DSN, schema=pg_schema)
    try:
        return paused_run(store)
    finally:
        store.close()


@pytest.mark.postgres
def test_a_postgres_role_without_privileges_is_told_so_not_that_there_is_no_store(
    pg_schema: str,
) -> None:
    import psycopg

    from tests.conftest import PG_DSN

    eid = _paused_run_in(pg_schema)
    role = f"tether_nobody_{pg_schema}"
    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            url = PG_DSN.replace("postgres@", f"{role}@", 1) + f"?schema={pg_schema}"
            for args in _reads(eid):
                proc = tether_cli(url, *args)
                said = " ".join(proc.stderr.split())
                # Before: "no tether store in schema ...", sent to `tether db migrate`
                # (information_schema hides the tables a role may not use).
                assert proc.returncode == 5, (args, proc.stderr)
                assert "permission denied" in said and "no tether store" not in said, said
                assert "Traceback" not in proc.stderr
        finally:
            admin.execute(f'DROP ROLE "{role}"')


@pytest.mark.postgres
def test_a_statement_timeout_during_the_probe_is_a_store_error_not_a_driver_error(
    pg_schema: str,
) -> None:
    import psycopg

    from tests.conftest import PG_DSN

    eid = _paused_run_in(pg_schema)
    url = f"{PG_DSN}?schema={pg_schema}&options=-c%20statement_timeout%3D300"
    # The version table locked by another transaction: the probe's read waits past the
    # statement_timeout the URL sets (as a role's own setting would), and is cancelled.
    with psycopg.connect(PG_DSN) as locker:
        locker.execute(f'LOCK TABLE "{pg_schema}".tether_schema IN ACCESS EXCLUSIVE MODE')
        for args in _reads(eid):
            proc = tether_cli(url, *args)
            said = " ".join(proc.stderr.split())
            # Before: "tether: QueryCanceled: canceling statement ..." with exit 1.
            assert proc.returncode == 5, (args, proc.stderr)
            assert "StoreUnavailableError" in said and "statement timeout" in said, said
        locker.rollback()
