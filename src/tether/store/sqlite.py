"""SQLite checkpointer: one file, WAL, for one machine (docs/design.md §7).

Concurrency: every write transaction starts with ``BEGIN IMMEDIATE``, taking the write lock up
front, so concurrent processes on one file queue behind SQLite's busy timeout instead of failing
half-way. Opening takes the write lock only when there is a schema to create or migrate, so
a reader never waits for a writer; ``read_only=True`` never writes at all
(:mod:`._sqlite_readonly`). Connections are per thread. Not for many machines: use Postgres
there (SQLite's locking over network filesystems is unreliable).

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
import time
from contextlib import AbstractContextManager
from typing import Any, Final, Literal

from ..errors import ConfigurationError, StoreUnavailableError
from . import _codec
from . import _sqlite_sql as q
from ._audit_operations import AuditOperations
from ._checkpointer import PlanCheckpointer
from ._control_operations import ControlOperations
from ._heads import HeadCache
from ._lease_operations import LeaseOperations
from ._leases import Fences
from ._refusals import schema_too_new
from ._sqlite_io import SQLiteDatabase, translate
from ._sqlite_path import check_store_path
from ._sqlite_readonly import read_only_reason
from ._sqlite_wal import WalCheckpointer
from .drivers import SQLiteDriver

__all__ = ["SQLiteCheckpointer"]

SCHEMA_VERSION: Final = q.SCHEMA_VERSION
MIGRATIONS: Final = q.MIGRATIONS
_translate: Final = translate  # the LangGraph saver's backend translates its errors with it


def _cannot_migrate(path: str, found: int, why: str) -> StoreUnavailableError:
    """The schema of the file at ``path`` is at version ``found`` (0: none yet) and ``why``
    it cannot be written here."""
    what = f"migrated from schema version {found} to {SCHEMA_VERSION}" if found else "created"
    return StoreUnavailableError(
        f"SQLite database {path!r} cannot be {what}: {why}; nothing was changed. Run "
        "`tether db migrate` (or open the store) where the file, its directory and its "
        "filesystem are writable"
    )


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


class SQLiteCheckpointer(AuditOperations, LeaseOperations, ControlOperations, PlanCheckpointer):
    """Checkpoints in one SQLite file.

    Args:
        path: the database file (created if missing, with its directories; a leading ``~``
            is the home directory), or ``":memory:"`` for a throwaway store private to one
            thread. Not an SQLite ``file:`` URI: ``read_only`` reads without writing.
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
        compress_state_min_bytes: a full snapshot of a row's state of at least this many
            bytes is stored Zstandard-compressed when that saves at least a tenth (default 512;
            ``None`` stores every payload as plain JSON); a delta only from 16 KB as well, since
            every resume replays the deltas (docs/storage.md). Reading handles both.
        read_only: read the file and never write it (SQLite ``mode=ro``): no write lock is
            taken, so reads go on while another process holds it; nothing is created or
            migrated; a file on a read-only mount or in a directory this process cannot
            write is read as well (``tether.store._sqlite_readonly``). Every write raises
            :class:`~tether.errors.StoreUnavailableError`. Tether's reading commands
            (``runs list``, ``runs show``, ``pending list``, ``audit``) open SQLite this way.

    Raises:
        ConfigurationError: an unknown ``synchronous`` or ``wal_checkpoint``,
            ``wal_checkpoint_pages`` not a positive integer, or ``compress_state_min_bytes``
            neither ``None`` nor a positive integer; or ``path`` cannot name a database file
            (a directory, a path ending in a separator or under a regular file, a symbolic
            link that points nowhere or loops, a name too long, a NUL byte, a ``file:`` URI,
            a device or FIFO: :mod:`tether.store._sqlite_path`), raised before anything is
            opened or created.
        SchemaVersionError: the file was written by a newer tether.
        StoreUnavailableError: the file cannot be opened or written (the message says why
            it is read-only to this process when it is); with ``read_only``, no such file, no
            tether store in it, or an older schema, which only a writer can migrate.
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
        read_only: bool = False,
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
        self.read_only = bool(read_only)
        self.path = check_store_path(self.path)  # a directory, say: not an outage to retry
        if self.read_only and (self.path == ":memory:" or not os.path.isfile(self.path)):
            raise StoreUnavailableError(
                f"no SQLite database at {self.path!r} to read (read_only=True creates nothing)"
            )
        self._db = SQLiteDatabase(
            self.path,
            synchronous=synchronous,
            busy_timeout_seconds=busy_timeout_seconds,
            wal_checkpoint=wal_checkpoint,
            wal_checkpoint_pages=wal_checkpoint_pages,
            read_only=self.read_only,
        )
        self._sql = q
        self._heads = HeadCache()
        self._fences = Fences()
        self.setup()

    def __repr__(self) -> str:
        read_only = ", read_only=True" if self.read_only else ""
        return f"SQLiteCheckpointer({self.path!r}, synchronous={self.synchronous!r}{read_only})"

    _db: SQLiteDatabase

    @property
    def driver(self) -> SQLiteDriver:
        """What runs plans on this store's file, as its own operations do (connections, the
        write lock, WAL checkpointing, error translation): for an integration that keeps its
        own tables in the store (:mod:`tether.store.drivers`)."""
        return self._db

    # --- connections ----------------------------------------------------------------------
    @property
    def _wal(self) -> WalCheckpointer | None:
        """The background WAL checkpointer, ``None`` inline or without a WAL."""
        return self._db.wal

    def _conn(self) -> sqlite3.Connection:
        return self._db.connection()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.write()

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._db.read()

    def _drop_head(self, execution_id: str) -> None:
        self._heads.drop(execution_id)

    # --- listings (tether.store._listing) -----------------------------------------------
    def _listing_rows(self, sql: str, args: builtins.list[Any]) -> builtins.list[tuple[Any, ...]]:
        sql = sql.replace("{schema}.", "")
        with self._read() as conn:
            try:
                return conn.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                if "decode" not in str(exc):
                    raise
            # A TEXT value that is not UTF-8 stops the whole fetch: read again with bad bytes
            # kept as surrogates, so only that row's entry is marked damaged.
            conn.text_factory = _lenient_text
            try:
                return conn.execute(sql, args).fetchall()
            finally:
                conn.text_factory = str

    def _listing_time(self, when: _dt.datetime) -> Any:
        return when.timestamp()

    def setup(self) -> None:
        """Create the schema or migrate it forward; refuse a newer one.

        A file already at this tether's version is only read: the write lock is taken only
        when there is something to create or migrate, so opening a store never waits for a
        writer.

        Raises:
            SchemaVersionError: the file records a schema version newer than this tether's.
            StoreUnavailableError: the schema must be created or migrated and the file is
                read-only (``read_only``, or to this process); or, not ``read_only``, this
                process cannot write the file (its mode, its directory, a read-only mount).
                The message names the file and why.
        """
        found = self._recorded_version()
        if found == SCHEMA_VERSION:
            why = None if self.read_only else self._not_writable()
            if why is not None:  # a writer finds out now, not at its first step
                raise StoreUnavailableError(
                    f"SQLite database {self.path!r} cannot be written: {why}; "
                    "SQLiteCheckpointer(path, read_only=True) reads it"
                )
            return
        if found is not None and found > SCHEMA_VERSION:
            raise schema_too_new(repr(self.path), found, SCHEMA_VERSION)
        if self.read_only:
            if found is None:
                raise StoreUnavailableError(
                    f"{self.path!r} is a SQLite database but not a tether store (no "
                    "tether_schema table); read_only=True creates nothing"
                )
            raise _cannot_migrate(self.path, found, "it was opened read-only (read_only=True)")
        try:
            with self._write() as conn:
                conn.execute(q.CREATE_SCHEMA_TABLE)
                found = conn.execute(q.SELECT_SCHEMA_VERSION).fetchone()[0] or 0
                if found > SCHEMA_VERSION:
                    raise schema_too_new(repr(self.path), found, SCHEMA_VERSION)
                for version in range(found + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[version]:
                        conn.execute(statement)
                    conn.execute(q.INSERT_SCHEMA_VERSION, (version, time.time()))
        except StoreUnavailableError as exc:
            why = self._not_writable()
            if why is None:
                raise
            raise _cannot_migrate(self.path, found or 0, why) from exc

    def _not_writable(self) -> str | None:
        return read_only_reason(self.path) if os.path.isfile(self.path) else None

    def _recorded_version(self) -> int | None:
        """The schema version the file records, ``None`` when it has no ``tether_schema``."""
        with self._read() as conn:
            try:
                row = conn.execute(q.SELECT_SCHEMA_VERSION).fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                return None
        return int(row[0] or 0)

    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        with self._read() as conn:
            return int(conn.execute(q.SELECT_SCHEMA_VERSION).fetchone()[0] or 0)

    def close(self) -> None:
        """Close this thread's connection and stop the background checkpoint thread (waiting
        for a checkpoint in progress). Using the store again reopens both as needed. The last
        connection to the file that closes, in any process, checkpoints the WAL and deletes
        it (SQLite's own behaviour)."""
        self._db.close()

    async def aclose(self) -> None:
        """Async :meth:`close` (releases this thread's connection; no I/O wait)."""
        self.close()
