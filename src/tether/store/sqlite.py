"""SQLite checkpointer: one file, WAL, for one machine (DESIGN section 7).

Concurrency: every write transaction starts with ``BEGIN IMMEDIATE``, taking the write lock up
front, so concurrent processes on one file queue behind SQLite's busy timeout instead of failing
half-way. Connections are per thread. Not for many machines: use Postgres there (SQLite's
locking over network filesystems is unreliable).

Durability: ``synchronous="NORMAL"`` (the default under WAL) survives a process crash; a power
loss or OS crash may lose the last few commits. ``synchronous="FULL"`` survives those too at
about ten times the cost per commit.

WAL checkpoints: under ``NORMAL`` a background thread per store copies the WAL back into
the database file (``wal_checkpoint="background"``, see :mod:`._sqlite_wal`), so no step pays
for it; ``"inline"`` (the default under ``FULL``) leaves it to SQLite's auto-checkpoint inside
the COMMIT that crosses the threshold.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Final, Literal

from ..checkpoint import Checkpoint
from ..errors import ConfigurationError, SerializationError, TetherError
from . import _codec
from ._database_errors import Kind, sqlite_code, sqlite_constraint, sqlite_kind, store_error
from ._langgraph_sql import SQLITE_MIGRATION_V5
from ._leases import Fences, creation_lease_seconds
from ._refusals import claim_taken_over, run_exists, schema_too_new, step_taken
from ._sqlite_leases import MIGRATION_V2, SQLiteLeases
from ._sqlite_wal import SAFETY_NET_FACTOR, WalCheckpointer
from .base import PendingInterrupt, PruneResult, RunRecord, RunStatus, SyncAsyncMixin

__all__ = ["SQLiteCheckpointer"]

SCHEMA_VERSION: Final = 5

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        """CREATE TABLE runs (
            execution_id TEXT PRIMARY KEY,
            runner_name TEXT NOT NULL,
            runner_kind TEXT NOT NULL,
            status TEXT NOT NULL,
            input BLOB,
            parent_execution_id TEXT,
            parent_checkpoint_id TEXT,
            owner TEXT,
            lease_expires_at REAL,
            error TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            finished_at REAL
        )""",
        "CREATE INDEX runs_status_idx ON runs (status, updated_at)",
        "CREATE INDEX runs_name_idx ON runs (runner_name, created_at)",
        """CREATE TABLE checkpoints (
            checkpoint_id TEXT PRIMARY KEY,
            execution_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            node_id TEXT NOT NULL,
            node_index INTEGER NOT NULL,
            step_type TEXT NOT NULL,
            status TEXT NOT NULL,
            state_kind TEXT NOT NULL,
            state BLOB NOT NULL,
            base_seq INTEGER NOT NULL,
            node_input BLOB,
            node_output BLOB,
            iteration_counters BLOB,
            interrupt_reason TEXT,
            interrupt_context BLOB,
            agent_path TEXT,
            parent_checkpoint_id TEXT,
            next_node_id TEXT,
            created_at REAL NOT NULL
        )""",
        "CREATE UNIQUE INDEX checkpoints_run_seq_idx ON checkpoints (execution_id, seq)",
        """CREATE TABLE pending_interrupts (
            execution_id TEXT PRIMARY KEY,
            checkpoint_id TEXT NOT NULL,
            node_id TEXT NOT NULL,
            agent_path TEXT,
            reason TEXT NOT NULL,
            context BLOB,
            created_at REAL NOT NULL,
            claimed_by TEXT,
            claim_expires_at REAL,
            resume_value BLOB
        )""",
        """CREATE TABLE idempotency_cache (
            execution_id TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB,
            created_at REAL NOT NULL,
            PRIMARY KEY (execution_id, key)
        )""",
    ),
    # v2: run leases for workers, the start queue's priority, claim attempts (dead letters).
    2: MIGRATION_V2,
}
# v3: checkpoint_id is no longer the table's primary key. Its index cost every step an insert
# at a random place of a third B-tree (~10 µs of a ~30 µs INSERT); rows are found by run and
# seq, and a checkpoint by id within its run (get_checkpoint), a walk of that run's rows.
# SQLite cannot drop a primary key: the table is copied into one without it.
_CHECKPOINTS_V1: Final = MIGRATIONS[1][3]  # CREATE TABLE checkpoints (...)
MIGRATIONS[3] = (
    _CHECKPOINTS_V1.replace("CREATE TABLE checkpoints (", "CREATE TABLE checkpoints_v3 (").replace(
        "checkpoint_id TEXT PRIMARY KEY", "checkpoint_id TEXT NOT NULL"
    ),
    f"INSERT INTO checkpoints_v3 ({_codec.CHECKPOINT_COLUMNS}) "
    f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY execution_id, seq",
    "DROP TABLE checkpoints",
    "ALTER TABLE checkpoints_v3 RENAME TO checkpoints",
    "CREATE UNIQUE INDEX checkpoints_run_seq_idx ON checkpoints (execution_id, seq)",
)
# v4: a state payload may be a Zstandard frame (_codec.compress_state); the version is recorded so
# that an older tether refuses these rows instead of misreading them. And runs_status_idx goes:
# runs_queue_idx leads with status too and serves the same lookups, while (status, updated_at)
# changed on every lease take, heartbeat and status write.
MIGRATIONS[4] = ("DROP INDEX IF EXISTS runs_status_idx",)
# v5: the tables of the LangGraph checkpoint saver (tether.integrations.langgraph).
MIGRATIONS[5] = SQLITE_MIGRATION_V5

# The unique keys whose violation means another writer came first, as SQLite names them.
_RUN_KEY: Final = "runs.execution_id"
_STEP_KEY: Final = "checkpoints.execution_id, checkpoints.seq"

CREATE_SCHEMA_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER NOT NULL, applied_at REAL NOT NULL)"
)
SELECT_SCHEMA_VERSION: Final = "SELECT MAX(version) FROM tether_schema"
INSERT_SCHEMA_VERSION: Final = "INSERT INTO tether_schema (version, applied_at) VALUES (?, ?)"

INSERT_RUN: Final = f"INSERT INTO runs ({_codec.RUN_COLUMNS}) VALUES ({','.join('?' * 13)})"
SELECT_RUN: Final = f"SELECT {_codec.RUN_COLUMNS} FROM runs WHERE execution_id = ?"
UPDATE_RUN_STATUS: Final = (
    "UPDATE runs SET status = ?, error = ?, updated_at = ?, "
    "finished_at = CASE WHEN ? IN ('completed', 'failed') THEN ? ELSE NULL END "
    "WHERE execution_id = ?"
)
_SELECT_CP: Final = f"SELECT {_codec.CHECKPOINT_COLUMNS} FROM checkpoints"
_PATH_FILTER: Final = " AND (agent_path = ? OR substr(agent_path, 1, ?) = ?)"
SELECT_LAST: Final = f"{_SELECT_CP} WHERE execution_id = ? ORDER BY seq DESC LIMIT 1"
SELECT_LAST_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1"
)
SELECT_LAST_PATH: Final = (
    f"{_SELECT_CP} WHERE execution_id = ? AND seq < ?{_PATH_FILTER} ORDER BY seq DESC LIMIT 1"
)
# What resume reads, in one statement: the rows from the full snapshot under the run's two
# newest rows up to the newest (the newest two, and the state chain they are replayed from).
# When both are run-end markers: the newest row before them that is not one, then the state
# chain from under it.
SELECT_RESUME_WINDOW: Final = (
    f"WITH top AS (SELECT seq, base_seq FROM checkpoints WHERE execution_id = ? "
    "ORDER BY seq DESC LIMIT 2) "
    f"{_SELECT_CP} WHERE execution_id = ? AND seq >= (SELECT min(base_seq) FROM top) "
    "AND seq <= (SELECT max(seq) FROM top) ORDER BY seq"
)
SELECT_RESUMABLE_BEFORE: Final = (
    f"{_SELECT_CP} WHERE execution_id = ? AND seq < ? AND step_type <> 'run_end' "
    "ORDER BY seq DESC LIMIT 1"
)
SELECT_BY_ID: Final = f"{_SELECT_CP} WHERE execution_id = ? AND checkpoint_id = ?"
SELECT_ALL: Final = f"{_SELECT_CP} WHERE execution_id = ? ORDER BY seq"
SELECT_STATE_CHAIN: Final = (
    "SELECT seq, state_kind, state FROM checkpoints "
    "WHERE execution_id = ? AND seq >= ? AND seq <= ? ORDER BY seq"
)
INSERT_PENDING: Final = (
    f"INSERT INTO pending_interrupts ({_codec.PENDING_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)"
)
DELETE_PENDING_OF: Final = (
    "DELETE FROM pending_interrupts WHERE execution_id = ? AND claimed_by = ?"
)
DELETE_PENDING: Final = "DELETE FROM pending_interrupts WHERE execution_id = ?"
SELECT_PENDING: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM pending_interrupts WHERE execution_id = ?"
)
SELECT_PENDING_ALL: Final = (
    f"SELECT {_codec.PENDING_COLUMNS} FROM pending_interrupts ORDER BY created_at LIMIT ?"
)
# The claim: one statement, so exactly one concurrent caller gets the row back.
CLAIM_PENDING: Final = (
    "UPDATE pending_interrupts SET claimed_by = ?, claim_expires_at = ?, "
    "resume_value = COALESCE(resume_value, ?) "
    "WHERE execution_id = ? "
    "AND (claimed_by IS NULL OR claim_expires_at < ? OR claimed_by = ?) "
    "AND ((? IS NOT NULL AND resume_value IS NULL AND claimed_by IS NULL) "
    "     OR (? IS NULL AND resume_value IS NOT NULL)) "
    "AND (? IS NULL OR checkpoint_id = ?) "
    f"RETURNING {_codec.PENDING_COLUMNS}"
)
RENEW_CLAIM: Final = (
    "UPDATE pending_interrupts SET claim_expires_at = ? WHERE execution_id = ? AND claimed_by = ?"
)
RELEASE_CLAIM: Final = (
    "UPDATE pending_interrupts SET claimed_by = NULL, claim_expires_at = NULL "
    "WHERE execution_id = ? AND claimed_by = ?"
)
ANSWER_PENDING: Final = (
    "UPDATE pending_interrupts SET resume_value = ? "
    "WHERE execution_id = ? AND resume_value IS NULL AND claimed_by IS NULL "
    "AND (? IS NULL OR checkpoint_id = ?)"
)
SELECT_IDEMPOTENT: Final = "SELECT value FROM idempotency_cache WHERE execution_id = ? AND key = ?"
INSERT_IDEMPOTENT: Final = (
    "INSERT INTO idempotency_cache (execution_id, key, value, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (execution_id, key) DO NOTHING"
)
SELECT_IDEMPOTENT_ALL: Final = (
    "SELECT key, value FROM idempotency_cache WHERE execution_id = ? ORDER BY created_at"
)
SELECT_PRUNABLE: Final = (
    "SELECT execution_id FROM runs WHERE status IN ('completed', 'failed') AND finished_at < ? "
    "ORDER BY finished_at"
)
# Prune works on the whole set at once: each statement names the runs by the same cutoff, and
# the write lock held from the first to the last keeps that set fixed in between.
_PRUNABLE_IDS: Final = (
    "(SELECT execution_id FROM runs WHERE status IN ('completed', 'failed') AND finished_at < ?)"
)
COUNT_CHECKPOINTS_PRUNABLE: Final = (
    f"SELECT count(*) FROM checkpoints WHERE execution_id IN {_PRUNABLE_IDS}"
)
COUNT_IDEMPOTENT_PRUNABLE: Final = (
    f"SELECT count(*) FROM idempotency_cache WHERE execution_id IN {_PRUNABLE_IDS}"
)
DELETE_CHECKPOINTS_PRUNABLE: Final = (
    f"DELETE FROM checkpoints WHERE execution_id IN {_PRUNABLE_IDS}"
)
DELETE_IDEMPOTENT_PRUNABLE: Final = (
    f"DELETE FROM idempotency_cache WHERE execution_id IN {_PRUNABLE_IDS}"
)
DELETE_PENDING_PRUNABLE: Final = (
    f"DELETE FROM pending_interrupts WHERE execution_id IN {_PRUNABLE_IDS}"
)
DELETE_RUNS_PRUNABLE: Final = (
    "DELETE FROM runs WHERE status IN ('completed', 'failed') AND finished_at < ?"
)


def _now() -> float:
    return time.time()


class SQLiteCheckpointer(SQLiteLeases, SyncAsyncMixin):
    """Checkpoints in one SQLite file.

    Args:
        path: the database file (created if missing), or ``":memory:"`` for a throwaway store
            private to one thread.
        synchronous: ``"NORMAL"`` (default; survives process crashes) or ``"FULL"`` (also
            survives power loss). Source: SQLite's WAL documentation.
        busy_timeout_seconds: how long a writer waits for another process's write lock before
            :class:`~tether.errors.StoreUnavailableError` is raised.
        wal_checkpoint: who copies the WAL back into the database file. ``"background"``:
            a daemon thread of this store, with its own connection, runs a PASSIVE checkpoint
            (which blocks no reader or writer) each time the WAL has grown by about
            ``wal_checkpoint_pages`` pages; SQLite's auto-checkpoint stays on at
            ``4 * wal_checkpoint_pages`` pages as a safety net. ``"inline"``: SQLite's
            auto-checkpoint at ``wal_checkpoint_pages`` pages, run inside the COMMIT of the
            step that crosses it. Default (``None``): ``"background"`` under ``NORMAL``,
            ``"inline"`` under ``FULL``, where the WAL file growing past its inline size makes
            every commit's sync also write the file's new size (resume measured ~25% slower;
            ``docs/storage.md``). Durability is the same either way. Ignored for
            ``":memory:"``, which has no WAL.
        wal_checkpoint_pages: the WAL growth, in database pages (4096 bytes by default),
            that triggers a checkpoint; default 1000, SQLite's own default.
        compress_state_min_bytes: a row's encoded state (a full snapshot or a delta) of at
            least this many bytes is stored Zstandard-compressed when that saves at least a tenth
            (default 512; ``None`` stores every payload as plain JSON). Reading handles both.

    Raises:
        ConfigurationError: an unknown ``synchronous`` or ``wal_checkpoint``,
            ``wal_checkpoint_pages`` not a positive integer, or ``compress_state_min_bytes``
            neither ``None`` nor a positive integer.
        SchemaVersionError: the file was written by a newer tether.
        StoreUnavailableError: the file cannot be opened or written.
        CorruptRecordError: the file is not a SQLite database.

    Its methods raise :class:`~tether.errors.StoreError` subclasses by the rule of
    ``docs/storage.md`` ("Errors"): :class:`~tether.errors.RecordRejectedError` for a value
    SQLite refuses (a constraint or trigger, a string over its length limit).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = "tether.db",
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        busy_timeout_seconds: float = 30.0,
        wal_checkpoint: Literal["background", "inline"] | None = None,
        wal_checkpoint_pages: int = 1000,
        compress_state_min_bytes: int | None = _codec.COMPRESS_MIN_BYTES,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ConfigurationError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if wal_checkpoint is None:
            wal_checkpoint = "background" if synchronous == "NORMAL" else "inline"
        if wal_checkpoint not in ("background", "inline"):
            raise ConfigurationError(
                f"wal_checkpoint must be 'background' or 'inline', got {wal_checkpoint!r}"
            )
        if (
            not isinstance(wal_checkpoint_pages, int)
            or isinstance(wal_checkpoint_pages, bool)
            or wal_checkpoint_pages < 1
        ):
            raise ConfigurationError(
                f"wal_checkpoint_pages must be a positive integer, got {wal_checkpoint_pages!r}"
            )
        self.path = str(path)
        self.synchronous = synchronous
        self.busy_timeout_seconds = busy_timeout_seconds
        self.wal_checkpoint = wal_checkpoint
        self.wal_checkpoint_pages = wal_checkpoint_pages
        self.compress_state_min_bytes = _codec.check_compress_min_bytes(compress_state_min_bytes)
        # The background checkpointer, None inline or without a WAL (``:memory:``).
        self._wal: WalCheckpointer | None = None
        if wal_checkpoint == "background" and self.path != ":memory:":
            self._wal = WalCheckpointer(self.path, wal_checkpoint_pages, synchronous)
        self._autocheckpoint = wal_checkpoint_pages * (
            SAFETY_NET_FACTOR if self._wal is not None else 1
        )
        self._local = threading.local()
        _STORES.add(self)
        self._heads = _codec.HeadCache()
        self._heads_lock = threading.Lock()
        self._fences = Fences()
        self._ready = False
        self.setup()

    def __repr__(self) -> str:
        return f"SQLiteCheckpointer({self.path!r}, synchronous={self.synchronous!r})"

    # --- connections ----------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                if self.path != ":memory:":
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout_seconds,
                    isolation_level=None,
                    check_same_thread=True,
                    cached_statements=256,
                )
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc
            if str(mode).lower() != "wal":  # e.g. ":memory:": nothing to checkpoint
                self._wal = None
            self._local.conn = conn
        return conn

    def _forget_after_fork(self) -> None:
        """In a forked child: never use, close or free the parent's connection (SQLite
        connections must not cross ``fork()``, and closing one may checkpoint the parent's
        WAL); the child opens its own on first use."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            _FORK_ORPHANS.append(conn)
            self._local.conn = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # The background checkpointer's gate is taken before SQLite's write lock, always in
        # that order (as in put's one-INSERT path), so the two cannot deadlock.
        wal = self._wal
        with _NO_GATE if wal is None else wal.gate, self._write_locked() as conn:
            yield conn
        if wal is not None:
            wal.committed()

    @contextmanager
    def _write_locked(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _translate(exc, self.path) from exc
        try:
            yield conn
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            if isinstance(exc, sqlite3.Error | UnicodeEncodeError):
                raise _translate(exc, self.path) from exc
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise _translate(exc, self.path) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        try:
            yield conn
        except (sqlite3.Error, UnicodeEncodeError) as exc:
            raise _translate(exc, self.path) from exc

    def setup(self) -> None:
        """Create the schema or migrate it forward; refuse a newer one.

        Raises:
            SchemaVersionError: the file records a schema version newer than this tether's.
        """
        with self._write() as conn:
            try:
                conn.execute(CREATE_SCHEMA_TABLE)
                found = conn.execute(SELECT_SCHEMA_VERSION).fetchone()[0] or 0
            except sqlite3.Error as exc:
                raise _translate(exc, self.path) from exc
            if found > SCHEMA_VERSION:
                raise schema_too_new(repr(self.path), found, SCHEMA_VERSION)
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
                conn.execute(INSERT_SCHEMA_VERSION, (version, _now()))
        self._ready = True

    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        with self._read() as conn:
            return int(conn.execute(SELECT_SCHEMA_VERSION).fetchone()[0] or 0)

    def close(self) -> None:
        """Close this thread's connection and stop the background checkpoint thread (waiting
        for a checkpoint in progress). Using the store again reopens both as needed. The last
        connection to the file that closes, in any process, checkpoints the WAL and deletes
        it (SQLite's own behaviour)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        if self._wal is not None:
            self._wal.stop()

    # --- runs -----------------------------------------------------------------------------
    def create_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        """Insert a new run; one with an ``owner`` is leased to it for ``lease_seconds`` by the
        same statement.

        Raises:
            ConfigurationError: a run with this execution_id already exists, or an owner was
                given without ``lease_seconds``.
        """
        lease = creation_lease_seconds(run, lease_seconds)
        now = _now()
        expires = None if lease is None else now + lease
        with self._write() as conn:
            try:
                conn.execute(
                    INSERT_RUN,
                    (
                        run.execution_id,
                        run.runner_name,
                        run.runner_kind,
                        run.status,
                        _codec.dump_json(run.input, "input"),
                        run.parent_execution_id,
                        run.parent_checkpoint_id,
                        run.owner,
                        expires,
                        None,
                        now,
                        now,
                        None,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                if sqlite_constraint(exc) != _RUN_KEY:
                    raise  # a constraint of the operator's: rejected, by the rule
                raise run_exists(run.execution_id) from exc
        self._heads.reset(run.execution_id, _codec.empty_head())
        run.created_at = run.updated_at = _codec.ts_to_dt(now)
        run.lease_expires_at = _codec.ts_to_dt(expires)
        return run

    async def acreate_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        return self.create_run(run, lease_seconds=lease_seconds)

    def get_run(self, execution_id: str) -> RunRecord | None:
        with self._read() as conn:
            row = conn.execute(SELECT_RUN, (execution_id,)).fetchone()
        return None if row is None else _codec.run_from_row(row)

    def list_runs(
        self, *, status: str | None = None, runner_name: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        sql = f"SELECT {_codec.RUN_COLUMNS} FROM runs WHERE 1 = 1"
        args: list[Any] = []
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        if runner_name is not None:
            sql += " AND runner_name = ?"
            args.append(runner_name)
        sql += " ORDER BY created_at DESC LIMIT ?"
        args.append(limit)
        with self._read() as conn:
            return [_codec.run_from_row(r) for r in conn.execute(sql, args).fetchall()]

    def set_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        now = _now()
        with self._write() as conn:
            conn.execute(UPDATE_RUN_STATUS, (status, error, now, status, now, execution_id))

    # --- checkpoints ----------------------------------------------------------------------
    def _head(self, conn: sqlite3.Connection, execution_id: str) -> _codec.Head | None:
        head = self._heads.get(execution_id)
        if head is not None:
            return head
        row = conn.execute(SELECT_LAST, (execution_id,)).fetchone()
        if row is None:
            return None
        raw = _codec.replay_state(
            conn.execute(SELECT_STATE_CHAIN, (execution_id, row[9], row[2])).fetchall(),
            execution_id,
        )
        return _codec.head_from_raw(row[2], row[9], raw, row[2] - row[9])

    def _insert(
        self,
        conn: sqlite3.Connection,
        cp: Checkpoint,
        *,
        force_full: bool = False,
        head: _codec.Head | None = None,
    ) -> _codec.Head:
        """Insert ``cp`` after ``head`` (read from the cache or the database when not given);
        the writer head after it."""
        if head is None:
            head = self._head(conn, cp.execution_id)
        params, new_head = _codec.checkpoint_params(
            cp, head, force_full=force_full, compress_min_bytes=self.compress_state_min_bytes
        )
        now = _now()
        cp.created_at = _dt.datetime.fromtimestamp(now, _dt.UTC)
        try:
            self._insert_checkpoint_row(conn, cp, (*params, now))
        except sqlite3.IntegrityError as exc:
            if sqlite_constraint(exc) != _STEP_KEY:
                raise  # a constraint of the operator's: rejected, by the rule
            self._heads.drop(cp.execution_id)
            raise step_taken(cp) from exc
        return new_head

    def _drop_head(self, execution_id: str) -> None:
        self._heads.drop(execution_id)

    def _release(self, conn: sqlite3.Connection, execution_id: str, owner: str) -> None:
        if conn.execute(DELETE_PENDING_OF, (execution_id, owner)).rowcount != 1:
            self._heads.drop(execution_id)
            raise claim_taken_over(execution_id)

    def put(
        self,
        checkpoint: Checkpoint,
        *,
        run_status: RunStatus | None = None,
        error: str | None = None,
        release_claim_of: str | None = None,
        force_full: bool = False,
        release_lease_of: str | None = None,
    ) -> Checkpoint:
        if release_claim_of is None and run_status is None:
            head = self._heads.get(checkpoint.execution_id)
            if head is not None:
                # The common step: the head is known, so the row is one INSERT, which SQLite
                # runs as a transaction of its own (taking the write lock before it reads):
                # no BEGIN and COMMIT statements around it.
                conn = self._conn()
                wal = self._wal
                try:
                    with _NO_GATE if wal is None else wal.gate:
                        head = self._insert(conn, checkpoint, force_full=force_full, head=head)
                except (sqlite3.Error, UnicodeEncodeError) as exc:
                    raise _translate(exc, self.path) from exc
                self._heads.set(checkpoint.execution_id, head)
                if wal is not None:
                    wal.committed()
                return checkpoint
        with self._write() as conn:
            if release_claim_of is not None:
                self._release(conn, checkpoint.execution_id, release_claim_of)
            head = self._insert(conn, checkpoint, force_full=force_full)
            if run_status is not None:
                now = _now()
                conn.execute(
                    UPDATE_RUN_STATUS,
                    (run_status, error, now, run_status, now, checkpoint.execution_id),
                )
                if release_lease_of is not None:  # with the status, as on Postgres
                    self._give_back(conn, checkpoint.execution_id, release_lease_of)
        self._heads.set(checkpoint.execution_id, head)
        return checkpoint

    async def aput(
        self,
        checkpoint: Checkpoint,
        *,
        run_status: RunStatus | None = None,
        error: str | None = None,
        release_claim_of: str | None = None,
        force_full: bool = False,
        release_lease_of: str | None = None,
    ) -> Checkpoint:
        return self.put(
            checkpoint,
            run_status=run_status,
            error=error,
            release_claim_of=release_claim_of,
            force_full=force_full,
            release_lease_of=release_lease_of,
        )

    def record_interrupt(
        self,
        checkpoint: Checkpoint,
        *,
        release_claim_of: str | None = None,
        release_lease_of: str | None = None,
    ) -> PendingInterrupt:
        pending_context = _codec.dump_json(checkpoint.interrupt_context, "interrupt_context")
        with self._write() as conn:
            if release_claim_of is not None:
                self._release(conn, checkpoint.execution_id, release_claim_of)
            else:
                conn.execute(DELETE_PENDING, (checkpoint.execution_id,))
            head = self._insert(conn, checkpoint)
            now = _now()
            conn.execute(
                INSERT_PENDING,
                (
                    checkpoint.execution_id,
                    checkpoint.checkpoint_id,
                    checkpoint.node_id,
                    checkpoint.agent_path,
                    checkpoint.interrupt_reason or "",
                    pending_context,
                    now,
                ),
            )
            conn.execute(
                UPDATE_RUN_STATUS, ("paused", None, now, "paused", now, checkpoint.execution_id)
            )
            if release_lease_of is not None:
                self._give_back(conn, checkpoint.execution_id, release_lease_of)
        self._heads.set(checkpoint.execution_id, head)
        return PendingInterrupt(
            execution_id=checkpoint.execution_id,
            checkpoint_id=checkpoint.checkpoint_id,
            node_id=checkpoint.node_id,
            reason=checkpoint.interrupt_reason or "",
            context=checkpoint.interrupt_context,
            agent_path=checkpoint.agent_path,
            created_at=_codec.ts_to_dt(now),
        )

    async def arecord_interrupt(
        self,
        checkpoint: Checkpoint,
        *,
        release_claim_of: str | None = None,
        release_lease_of: str | None = None,
    ) -> PendingInterrupt:
        return self.record_interrupt(
            checkpoint, release_claim_of=release_claim_of, release_lease_of=release_lease_of
        )

    def _with_raw_state(
        self, conn: sqlite3.Connection, row: Any
    ) -> tuple[Checkpoint, dict[str, Any]]:
        if row[7] == "full":
            raw = _codec.apply_row_of(row[1], row[2], {}, "full", row[8])
        else:
            raw = _codec.replay_state(
                conn.execute(SELECT_STATE_CHAIN, (row[1], row[9], row[2])).fetchall(), row[1]
            )
        return _codec.checkpoint_from_row(row, _codec.decode_state(raw)), raw

    def _with_state(self, conn: sqlite3.Connection, row: Any) -> Checkpoint:
        return self._with_raw_state(conn, row)[0]

    def get_last(
        self,
        execution_id: str,
        *,
        before_seq: int | None = None,
        agent_path_prefix: str | None = None,
    ) -> Checkpoint | None:
        with self._read() as conn:
            if agent_path_prefix is not None:
                prefix = agent_path_prefix.rstrip("/") + "/"
                row = conn.execute(
                    SELECT_LAST_PATH,
                    (
                        execution_id,
                        before_seq if before_seq is not None else 2**62,
                        agent_path_prefix.rstrip("/"),
                        len(prefix),
                        prefix,
                    ),
                ).fetchone()
            elif before_seq is not None:
                row = conn.execute(SELECT_LAST_BEFORE, (execution_id, before_seq)).fetchone()
            else:
                row = conn.execute(SELECT_LAST, (execution_id,)).fetchone()
                if row is None:
                    return None
                # Whoever reads a run's newest row is about to continue it: refresh the
                # writer's head, which another process may have moved on.
                cp, raw = self._with_raw_state(conn, row)
                self._heads.set(
                    execution_id, _codec.head_from_raw(row[2], row[9], raw, row[2] - row[9])
                )
                return cp
            return None if row is None else self._with_state(conn, row)

    def get_resumable(self, execution_id: str) -> tuple[Checkpoint | None, str | None]:
        """The row a resume re-enters, mostly in one read (the contract of
        :meth:`PostgresCheckpointer.get_resumable`); refreshes the writer's head."""
        with self._read() as conn:
            window = conn.execute(SELECT_RESUME_WINDOW, (execution_id, execution_id)).fetchall()
            if not window:
                return None, None
            rows, chain = _codec.resume_window(window)
            if chain is None:  # run-end markers one after another
                rows += conn.execute(SELECT_RESUMABLE_BEFORE, (execution_id, rows[0][2])).fetchall()
                bounds = (execution_id, min(r[9] for r in rows), rows[1][2])
                chain = conn.execute(SELECT_STATE_CHAIN, bounds).fetchall()
        cp, ended, head = _codec.resume_point(rows, chain)
        self._heads.set(execution_id, head)
        return cp, ended

    async def aget_resumable(self, execution_id: str) -> tuple[Checkpoint | None, str | None]:
        return self.get_resumable(execution_id)

    def get_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        with self._read() as conn:
            row = conn.execute(SELECT_BY_ID, (execution_id, checkpoint_id)).fetchone()
            return None if row is None else self._with_state(conn, row)

    def list(
        self, execution_id: str, *, agent_path_prefix: str | None = None
    ) -> builtins.list[Checkpoint]:
        with self._read() as conn:
            rows = conn.execute(SELECT_ALL, (execution_id,)).fetchall()
        return _codec.checkpoints_from_rows(rows, agent_path_prefix)

    # --- pending interrupts ---------------------------------------------------------------
    def get_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        with self._read() as conn:
            row = conn.execute(SELECT_PENDING, (execution_id,)).fetchone()
        return None if row is None else _codec.pending_from_row(row)

    def list_pending_interrupts(self, *, limit: int = 100) -> builtins.list[PendingInterrupt]:
        with self._read() as conn:
            return [_codec.pending_from_row(r) for r in conn.execute(SELECT_PENDING_ALL, (limit,))]

    def claim_interrupt(
        self,
        execution_id: str,
        *,
        owner: str,
        resume_value: dict[str, Any] | None,
        lease_seconds: float,
        steal_from: str | None = None,
        checkpoint_id: str | None = None,
    ) -> PendingInterrupt | None:
        value = _codec.dump_json(resume_value, "resume_value")
        now = _now()
        with self._write() as conn:
            row = conn.execute(
                CLAIM_PENDING,
                (
                    owner,
                    now + lease_seconds,
                    value,
                    execution_id,
                    now,
                    steal_from,
                    value,
                    value,
                    checkpoint_id,
                    checkpoint_id,
                ),
            ).fetchone()
            if row is not None:
                conn.execute(
                    UPDATE_RUN_STATUS, ("running", None, now, "running", now, execution_id)
                )
        return None if row is None else _codec.pending_from_row(row)

    delete_pending_interrupt_atomic = claim_interrupt
    """The contract's name for :meth:`claim_interrupt` (DESIGN section 7)."""

    def renew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        with self._write() as conn:
            cur = conn.execute(RENEW_CLAIM, (_now() + lease_seconds, execution_id, owner))
            return cur.rowcount == 1

    def release_claim(self, execution_id: str, *, owner: str) -> bool:
        now = _now()
        with self._write() as conn:
            released = conn.execute(RELEASE_CLAIM, (execution_id, owner)).rowcount == 1
            if released:
                conn.execute(UPDATE_RUN_STATUS, ("paused", None, now, "paused", now, execution_id))
            return released

    def answer_interrupt(
        self,
        execution_id: str,
        resume_value: dict[str, Any],
        *,
        checkpoint_id: str | None = None,
    ) -> bool:
        value = _codec.dump_json(resume_value, "resume_value")
        params = (value, execution_id, checkpoint_id, checkpoint_id)
        with self._write() as conn:
            return conn.execute(ANSWER_PENDING, params).rowcount == 1

    # --- idempotency ----------------------------------------------------------------------
    def get_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        with self._read() as conn:
            row = conn.execute(SELECT_IDEMPOTENT, (execution_id, key)).fetchone()
        if row is None:
            return False, None
        return True, _codec.load_json(row[0])

    def put_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        data = _codec.dump_json(value, "result")
        with self._write() as conn:
            conn.execute(INSERT_IDEMPOTENT, (execution_id, key, data, _now()))
            row = conn.execute(SELECT_IDEMPOTENT, (execution_id, key)).fetchone()
        return _codec.load_json(row[0])

    def list_idempotent(self, execution_id: str) -> dict[str, Any]:
        with self._read() as conn:
            rows = conn.execute(SELECT_IDEMPOTENT_ALL, (execution_id,)).fetchall()
        return {k: _codec.load_json(v) for k, v in rows}

    # --- maintenance ----------------------------------------------------------------------
    def prune(
        self, older_than: _dt.timedelta | _dt.datetime, *, dry_run: bool = False
    ) -> PruneResult:
        """Delete finished (completed or failed) runs whose end is older than the cutoff.

        Args:
            older_than: an age (``timedelta``) or an absolute UTC cutoff (``datetime``).
            dry_run: count what would go, delete nothing.

        Returns:
            Counts of runs, checkpoints and idempotency rows deleted, and the run ids.
        """
        cutoff = (_codec.prune_cutoff(older_than, _now()),)
        with self._write() as conn:
            ids = [eid for (eid,) in conn.execute(SELECT_PRUNABLE, cutoff).fetchall()]
            result = PruneResult(runs=len(ids), execution_ids=ids)
            if not ids:
                return result
            if dry_run:
                result.checkpoints = conn.execute(COUNT_CHECKPOINTS_PRUNABLE, cutoff).fetchone()[0]
                result.idempotency = conn.execute(COUNT_IDEMPOTENT_PRUNABLE, cutoff).fetchone()[0]
                return result
            result.checkpoints = conn.execute(DELETE_CHECKPOINTS_PRUNABLE, cutoff).rowcount
            result.idempotency = conn.execute(DELETE_IDEMPOTENT_PRUNABLE, cutoff).rowcount
            conn.execute(DELETE_PENDING_PRUNABLE, cutoff)
            conn.execute(DELETE_RUNS_PRUNABLE, cutoff)
        if not dry_run:
            for eid in result.execution_ids:
                self._heads.drop(eid)
        return result


_NO_GATE: Final = nullcontext()
_STORES: weakref.WeakSet[SQLiteCheckpointer] = weakref.WeakSet()
_FORK_ORPHANS: builtins.list[sqlite3.Connection] = []  # a child's inherited connections, kept


def _forget_connections_after_fork() -> None:
    for store in builtins.list(_STORES):
        store._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_connections_after_fork)


def _translate(exc: sqlite3.Error | UnicodeEncodeError, path: str) -> TetherError:
    """The tether error for a :mod:`sqlite3` error, by the rule in
    :mod:`tether.store._database_errors`."""
    if isinstance(exc, UnicodeEncodeError):
        return SerializationError(
            f"a value sent to SQLite is not valid Unicode text ({exc.reason}); ids, names and "
            "text must not hold lone surrogates",
            type_name="str",
        )
    msg = str(exc)
    kind = sqlite_kind(exc)
    code = sqlite_code(exc)
    if (code or "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        text = f"SQLite database {path!r} stayed locked by another writer past the busy timeout"
    elif kind is Kind.UNAVAILABLE:
        text = f"SQLite database {path!r} cannot be written: {msg}"
    elif kind is Kind.CORRUPT:
        text = f"{path!r} is not a readable tether SQLite database: {msg}"
    elif kind is Kind.MISSING:
        text = f"SQLite database {path!r} is missing tether tables or columns: {msg}"
    elif kind is Kind.REJECTED:
        text = (
            f"SQLite database {path!r} rejected a value ({code}): {msg}; the same call will "
            "fail the same way, so change the value or the constraint rather than retry"
        )
    else:
        text = f"SQLite error on {path!r}: {msg}"
    return store_error(kind, text, code=code, constraint=sqlite_constraint(exc))
