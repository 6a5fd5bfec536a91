"""The audit trail on SQLite (:mod:`tether.audit`): its table, statements and reads.

An answer's entry is inserted inside the write transaction that stores the answer
(``answer_interrupt``, ``claim_interrupt`` with a value: see :mod:`tether.store.sqlite`), so
both commit or neither does.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Final

from ..audit import AuditEntry
from ._audit_codec import (
    AUDIT_COLUMNS,
    AUDIT_INSERT_COLUMNS,
    audit_from_row,
    audit_params,
    since_utc,
)

__all__ = ["MIGRATION_V6", "SQLiteAudit"]

# v6: the audit trail. AUTOINCREMENT: an entry_id is never reused, even after prune deletes
# the newest entries, so an exported trail's ids stay unique.
MIGRATION_V6: Final[tuple[str, ...]] = (
    """CREATE TABLE audit_log (
        entry_id INTEGER PRIMARY KEY AUTOINCREMENT,
        execution_id TEXT NOT NULL,
        action TEXT NOT NULL,
        via TEXT NOT NULL,
        actor TEXT,
        note TEXT,
        data BLOB,
        checkpoint_id TEXT,
        interrupt BLOB,
        at REAL NOT NULL
    )""",
    "CREATE INDEX audit_log_run_idx ON audit_log (execution_id, entry_id)",
    "CREATE INDEX audit_log_at_idx ON audit_log (at)",
)

INSERT_AUDIT: Final = (
    f"INSERT INTO audit_log ({AUDIT_INSERT_COLUMNS}, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_AUDIT_OF_RUN: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE execution_id = ? ORDER BY entry_id"
)
SELECT_AUDIT_SINCE: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE at >= ? ORDER BY at, entry_id LIMIT ?"
)
DELETE_AUDIT_OF: Final = "DELETE FROM audit_log WHERE execution_id = ?"


def insert_audit(conn: sqlite3.Connection, entry: AuditEntry, now: float) -> None:
    """Append ``entry`` inside the caller's write transaction."""
    conn.execute(INSERT_AUDIT, (*audit_params(entry), now))


class SQLiteAudit:
    """The audit trail's methods of :class:`~tether.store.sqlite.SQLiteCheckpointer`."""

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - the checkpointer's

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - the checkpointer's

    def record_audit(self, entry: AuditEntry) -> None:
        """Append an entry that comes with no answer (a cancel, a state patch), in its own
        transaction. Answers are recorded by the call that stores them.

        Raises:
            SerializationError: ``entry.data`` cannot be stored as JSON (nothing written).
        """
        with self._write() as conn:
            insert_audit(conn, entry, time.time())

    async def arecord_audit(self, entry: AuditEntry) -> None:
        self.record_audit(entry)

    def list_audit(
        self,
        execution_id: str | None = None,
        *,
        since: _dt.datetime | None = None,
        limit: int | None = None,
    ) -> builtins.list[AuditEntry]:
        """A run's entries in the order recorded, or (``execution_id=None``) every run's
        entries recorded at or after ``since``, oldest first, at most ``limit``."""
        with self._read() as conn:
            if execution_id is not None:
                rows: Iterator[tuple[object, ...]] = conn.execute(
                    SELECT_AUDIT_OF_RUN, (execution_id,)
                )
            else:
                start = 0.0 if since is None else since_utc(since).timestamp()
                rows = conn.execute(SELECT_AUDIT_SINCE, (start, -1 if limit is None else limit))
            return [audit_from_row(r) for r in rows]
