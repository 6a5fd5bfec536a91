"""The stores under test, each fresh per workload, and the raw floor beside each.

The **floor** is what the same database costs without tether: one small row written by one
``INSERT`` in its own transaction (so INSERT + COMMIT, one durable commit per step), through
the plain driver with the same settings (``sqlite3`` with the same PRAGMAs; ``psycopg`` on the
same server). tether's overhead is compared against it.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from tether import SQLiteCheckpointer
from tether.store.base import Checkpointer

PG_DSN = os.environ.get("TETHER_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TETHER_TABLES = ("runs", "checkpoints", "pending_interrupts", "idempotency_cache")
FLOOR_TABLE = "floor_steps"

SQLITE_FLOOR_DDL = (
    f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (execution_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " state BLOB NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (execution_id, seq))"
)
PG_FLOOR_DDL = (
    f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (execution_id TEXT NOT NULL, seq BIGINT NOT NULL,"
    " state BYTEA NOT NULL, created_at DOUBLE PRECISION NOT NULL,"
    " PRIMARY KEY (execution_id, seq))"
)
SQLITE_FLOOR_INSERT = f"INSERT INTO {FLOOR_TABLE} VALUES (?, ?, ?, ?)"
PG_FLOOR_INSERT = f"INSERT INTO {FLOOR_TABLE} VALUES (%s, %s, %s, %s)"
SQLITE_FLOOR_READ = f"SELECT state FROM {FLOOR_TABLE} WHERE execution_id = ? AND seq = ?"
PG_FLOOR_READ = f"SELECT state FROM {FLOOR_TABLE} WHERE execution_id = %s AND seq = %s"
SQLITE_FLOOR_LAST = (
    f"SELECT seq, state FROM {FLOOR_TABLE} WHERE execution_id = ? ORDER BY seq DESC LIMIT 1"
)
PG_FLOOR_LAST = (
    f"SELECT seq, state FROM {FLOOR_TABLE} WHERE execution_id = %s ORDER BY seq DESC LIMIT 1"
)
SQLITE_FLOOR_HISTORY = f"SELECT state FROM {FLOOR_TABLE} WHERE execution_id = ? ORDER BY seq"
PG_FLOOR_HISTORY = f"SELECT state FROM {FLOOR_TABLE} WHERE execution_id = %s ORDER BY seq"


class Floor(Protocol):
    """The raw driver doing the least a durable step must do."""

    def write(self, execution_id: str, seq: int, state: bytes, created_at: float) -> None:
        """One INSERT committed on its own."""

    def read(self, execution_id: str, seq: int) -> bytes:
        """One SELECT of a row by primary key."""

    def last(self, execution_id: str) -> tuple[int, bytes]:
        """The run's newest row: ``(seq, state)``."""

    def history(self, execution_id: str) -> list[bytes]:
        """Every row of the run, oldest first (an append-only log read back whole)."""

    def size(self) -> int:
        """Bytes the floor's table takes at rest (SQLite: its file after emptying the WAL;
        Postgres: ``pg_total_relation_size``)."""

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class StoreBytes:
    """Space a store uses.

    Attributes:
        file_bytes: SQLite: database file + WAL after ``wal_checkpoint(TRUNCATE)``; Postgres:
            ``pg_total_relation_size`` summed over tether's tables (heap, TOAST, indexes).
        row_bytes: the bytes of the stored values: SQLite: every column's byte length;
            Postgres: ``pg_column_size`` of each row.
        columns: bytes per checkpoint column, for the columns that dominate.
    """

    file_bytes: int
    row_bytes: int
    columns: dict[str, int]


class Handle(Protocol):
    """One fresh store (a new SQLite file or a new Postgres schema)."""

    store: Checkpointer

    def reopen(self, synchronous: str | None = None) -> Checkpointer:
        """Another checkpointer on the same data, as a second process would open it."""

    def floor(self) -> Floor: ...

    def size(self) -> StoreBytes: ...

    def spec(self) -> dict[str, Any]:
        """How a child process opens the same store (see :mod:`benchmarks.memory`)."""


class Backend(Protocol):
    @property
    def name(self) -> str:
        """The backend's label in the report."""

    def unavailable(self) -> str | None:
        """Why this backend cannot run here, or ``None``."""

    def fresh(self) -> Any:
        """A context manager yielding a new :class:`Handle`, removed afterwards."""


# --- SQLite -------------------------------------------------------------------------------


class _SQLiteFloor:
    def __init__(self, path: str, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = 30000")
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute(SQLITE_FLOOR_DDL)

    def write(self, execution_id: str, seq: int, state: bytes, created_at: float) -> None:
        self.conn.execute(SQLITE_FLOOR_INSERT, (execution_id, seq, state, created_at))

    def read(self, execution_id: str, seq: int) -> bytes:
        row = self.conn.execute(SQLITE_FLOOR_READ, (execution_id, seq)).fetchone()
        return bytes(row[0])

    def last(self, execution_id: str) -> tuple[int, bytes]:
        seq, state = self.conn.execute(SQLITE_FLOOR_LAST, (execution_id,)).fetchone()
        return int(seq), bytes(state)

    def history(self, execution_id: str) -> list[bytes]:
        return [r[0] for r in self.conn.execute(SQLITE_FLOOR_HISTORY, (execution_id,))]

    def size(self) -> int:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        path = self.conn.execute("PRAGMA database_list").fetchone()[2]
        wal = path + "-wal"
        return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)

    def close(self) -> None:
        self.conn.close()


class _SQLiteHandle:
    def __init__(self, directory: str, synchronous: str) -> None:
        self.path = os.path.join(directory, "tether.db")
        self.floor_path = os.path.join(directory, "floor.db")
        self.synchronous = synchronous
        self.store: Checkpointer = self.reopen()

    def reopen(self, synchronous: str | None = None) -> Checkpointer:
        return SQLiteCheckpointer(self.path, synchronous=synchronous or self.synchronous)  # type: ignore[arg-type]

    def floor(self) -> Floor:
        return _SQLiteFloor(self.floor_path, self.synchronous)

    def size(self) -> StoreBytes:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            # A checkpoint the store's thread is running makes TRUNCATE return busy at once
            # (no busy handler for that lock): ask again until it has emptied the WAL.
            deadline = time.monotonic() + 10
            while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"could not empty the WAL of {self.path} in 10 s")
                time.sleep(0.005)
            row_bytes = 0
            columns: dict[str, int] = {}
            for table in TETHER_TABLES:
                names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
                exprs = ", ".join(f"COALESCE(SUM(LENGTH(CAST({c} AS BLOB))), 0)" for c in names)
                sums = conn.execute(f"SELECT {exprs} FROM {table}").fetchone()
                row_bytes += sum(sums)
                if table == "checkpoints":
                    columns = {c: int(s) for c, s in zip(names, sums, strict=True)}
        finally:
            conn.close()
        wal = self.path + "-wal"
        file_bytes = os.path.getsize(self.path)
        if os.path.exists(wal):
            file_bytes += os.path.getsize(wal)
        return StoreBytes(file_bytes, int(row_bytes), _top_columns(columns))

    def spec(self) -> dict[str, Any]:
        return {"kind": "sqlite", "path": self.path, "synchronous": self.synchronous}


@dataclass
class SQLiteBackend:
    """A fresh SQLite file per workload, in WAL with the given ``synchronous``."""

    synchronous: str

    @property
    def name(self) -> str:
        return f"SQLite {self.synchronous}"

    def unavailable(self) -> str | None:
        return None

    @contextmanager
    def fresh(self) -> Iterator[_SQLiteHandle]:
        directory = tempfile.mkdtemp(prefix="tether-bench-", dir=_bench_tmp())
        handle = _SQLiteHandle(directory, self.synchronous)
        try:
            yield handle
        finally:
            _close(handle.store)
            shutil.rmtree(directory, ignore_errors=True)


def _bench_tmp() -> str:
    # Beside the repository rather than /tmp, which may be a RAM disk on some machines and
    # would make fsync free.
    path = os.path.join(os.path.dirname(__file__), "results", ".tmp")
    os.makedirs(path, exist_ok=True)
    return path


# --- Postgres -----------------------------------------------------------------------------


class _PGFloor:
    def __init__(self, dsn: str, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True, options=f"-c search_path={schema}")
        self.conn.execute(PG_FLOOR_DDL)

    def write(self, execution_id: str, seq: int, state: bytes, created_at: float) -> None:
        self.conn.execute(PG_FLOOR_INSERT, (execution_id, seq, state, created_at), prepare=True)

    def read(self, execution_id: str, seq: int) -> bytes:
        cur = self.conn.execute(PG_FLOOR_READ, (execution_id, seq), prepare=True)
        row = cur.fetchone()
        assert row is not None
        return bytes(row[0])

    def last(self, execution_id: str) -> tuple[int, bytes]:
        row = self.conn.execute(PG_FLOOR_LAST, (execution_id,), prepare=True).fetchone()
        assert row is not None
        return int(row[0]), bytes(row[1])

    def history(self, execution_id: str) -> list[bytes]:
        cur = self.conn.execute(PG_FLOOR_HISTORY, (execution_id,), prepare=True)
        return [r[0] for r in cur]

    def size(self) -> int:
        row = self.conn.execute(f"SELECT pg_total_relation_size('{FLOOR_TABLE}')").fetchone()
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self.conn.close()


class _PGHandle:
    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.store = self.reopen()

    def reopen(self, synchronous: str | None = None) -> Checkpointer:
        from tether.store.postgres import PostgresCheckpointer

        store: Checkpointer = PostgresCheckpointer(self.dsn, schema=self.schema)
        return store

    def floor(self) -> Floor:
        return _PGFloor(self.dsn, self.schema)

    def size(self) -> StoreBytes:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> %s",
                    (self.schema, FLOOR_TABLE),
                )
            ]
            file_bytes = row_bytes = 0
            columns: dict[str, int] = {}
            for t in tables:
                q = f'"{self.schema}"."{t}"'
                file_bytes += conn.execute("SELECT pg_total_relation_size(%s)", (q,)).fetchone()[0]  # type: ignore[index]
                row_bytes += conn.execute(
                    f"SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {q} t"
                ).fetchone()[0]  # type: ignore[index]
                if t == "checkpoints":
                    cols = [
                        r[0]
                        for r in conn.execute(
                            "SELECT column_name FROM information_schema.columns "
                            "WHERE table_schema = %s AND table_name = %s",
                            (self.schema, t),
                        )
                    ]
                    exprs = ", ".join(f'COALESCE(SUM(pg_column_size("{c}")), 0)' for c in cols)
                    sums = conn.execute(f"SELECT {exprs} FROM {q}").fetchone() or ()
                    columns = {c: int(s) for c, s in zip(cols, sums, strict=True)}
        return StoreBytes(int(file_bytes), int(row_bytes), _top_columns(columns))

    def spec(self) -> dict[str, Any]:
        return {"kind": "postgres", "dsn": self.dsn, "schema": self.schema}


@dataclass
class PostgresBackend:
    """A fresh schema per workload on the local server, dropped afterwards."""

    dsn: str = PG_DSN
    name: str = "Postgres"

    def unavailable(self) -> str | None:
        try:
            import tether.store.postgres  # noqa: F401
        except ImportError as exc:
            return f"tether.store.postgres does not import ({exc})"
        try:
            import psycopg

            with psycopg.connect(self.dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # any failure to reach the server means: skip
            return f"server at {self.dsn} does not answer ({type(exc).__name__}: {exc})"
        return None

    @contextmanager
    def fresh(self) -> Iterator[_PGHandle]:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        handle: _PGHandle | None = None
        try:
            handle = _PGHandle(self.dsn, schema)
            yield handle
        finally:
            if handle is not None:
                _close(handle.store)
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _close(store: Any) -> None:
    close = getattr(store, "close", None)
    if close is not None:
        close()


def _top_columns(columns: dict[str, int]) -> dict[str, int]:
    wanted = ("state", "node_output", "node_input")
    return {c: columns[c] for c in wanted if c in columns}


def floor_from_spec(spec: dict[str, Any]) -> Floor:
    """The floor beside the store a :meth:`Handle.spec` names, opened in another process."""
    if spec["kind"] == "sqlite":
        return _SQLiteFloor(
            os.path.join(os.path.dirname(spec["path"]), "floor.db"), spec["synchronous"]
        )
    return _PGFloor(spec["dsn"], spec["schema"])


def all_backends() -> list[Backend]:
    return [SQLiteBackend("NORMAL"), SQLiteBackend("FULL"), PostgresBackend()]
