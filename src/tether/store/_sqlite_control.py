"""Cancel and delete on SQLite (the rules are in :mod:`tether.store._control`).

Both run inside ``BEGIN IMMEDIATE``: the write lock orders them against every step commit, so
a commit in flight lands before the cancel or is fenced out after it.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Final

from ..checkpoint import Checkpoint
from . import _codec
from ._control import (
    CANCELLABLE,
    CancelOutcome,
    DeleteOutcome,
    cancel_audit,
    cancel_checkpoint,
    cancel_error_text,
    unfenced,
)
from ._langgraph_sql import SQLITE_PRUNE_THREAD
from ._leases import Fences
from ._sqlite_audit import DELETE_AUDIT_OF, insert_audit
from .base import PendingInterrupt

__all__ = ["MIGRATION_V9", "SQLiteControl"]

SELECT_RUN_FOR_CONTROL: Final = "SELECT status, owner FROM runs WHERE execution_id = ?"
# v9: approval deadlines: when a pending question falls due (interrupt(timeout_seconds=)).
MIGRATION_V9: Final[tuple[str, ...]] = (
    "ALTER TABLE pending_interrupts ADD COLUMN due_at REAL",
    "CREATE INDEX pending_due_idx ON pending_interrupts (due_at) WHERE due_at IS NOT NULL",
)
CANCEL_RUN: Final = (
    "UPDATE runs SET status = ?, error = ?, owner = NULL, lease_expires_at = NULL, "
    "updated_at = ?, finished_at = ? WHERE execution_id = ?"
)
SELECT_PENDING_ID: Final = (
    "SELECT checkpoint_id, resume_value, claimed_by FROM pending_interrupts WHERE execution_id = ?"
)
SELECT_DUE: Final = (
    f"SELECT {', '.join('p.' + c.strip() for c in _codec.PENDING_COLUMNS.split(','))} "
    "FROM pending_interrupts p JOIN runs r ON r.execution_id = p.execution_id "
    "WHERE p.due_at IS NOT NULL AND p.due_at <= ? AND p.resume_value IS NULL "
    "AND p.claimed_by IS NULL AND r.status = 'paused'"
)
DELETE_PENDING: Final = "DELETE FROM pending_interrupts WHERE execution_id = ?"
DELETE_CHECKPOINTS: Final = "DELETE FROM checkpoints WHERE execution_id = ?"
DELETE_IDEMPOTENT: Final = "DELETE FROM idempotency_cache WHERE execution_id = ?"
DELETE_RUN: Final = "DELETE FROM runs WHERE execution_id = ?"


class SQLiteControl:
    """The :class:`~tether.store._control.ControlStore` capability of ``SQLiteCheckpointer``."""

    _heads: _codec.HeadCache
    _fences: Fences

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _head(self, conn: sqlite3.Connection, execution_id: str) -> _codec.Head | None:
        raise NotImplementedError

    def _insert(
        self,
        conn: sqlite3.Connection,
        cp: Checkpoint,
        *,
        force_full: bool = False,
        head: _codec.Head | None = None,
    ) -> _codec.Head:
        raise NotImplementedError

    def cancel_run(
        self,
        execution_id: str,
        *,
        by: str | None,
        reason: str | None,
        via: str = "code",
        end_as: str = "cancelled",
        only_if_pending: str | None = None,
    ) -> CancelOutcome:
        """See :meth:`tether.store._control.ControlStore.cancel_run`."""
        now = time.time()
        at = _dt.datetime.fromtimestamp(now, _dt.UTC)
        # A cached head may trail a commit another process made: read the newest row.
        self._heads.drop(execution_id)
        with self._write() as conn:
            row = conn.execute(SELECT_RUN_FOR_CONTROL, (execution_id,)).fetchone()
            if row is None:
                return CancelOutcome(found=False)
            status, owner = row
            out = CancelOutcome(found=True, status_before=status, owner_before=owner)
            if status not in CANCELLABLE:
                return out
            pending = conn.execute(SELECT_PENDING_ID, (execution_id,)).fetchone()
            if only_if_pending is not None and (
                pending is None or tuple(pending) != (only_if_pending, None, None)
            ):
                return out  # answered, claimed or moved on meanwhile: the deadline is moot
            head = self._head(conn, execution_id)
            cp = cancel_checkpoint(
                execution_id,
                head,
                by=by,
                reason=reason,
                at=at,
                status_before=status,
                end_as=end_as,
            )
            with unfenced(self._fences, execution_id):
                self._insert(conn, cp, head=head or _codec.empty_head())
            error = cancel_error_text(by, reason, end_as)
            conn.execute(CANCEL_RUN, (end_as, error, now, now, execution_id))
            conn.execute(DELETE_PENDING, (execution_id,))
            withdrawn = None if pending is None else pending[0]
            entry = cancel_audit(
                execution_id,
                by=by,
                reason=reason,
                via=via,
                status_before=status,
                withdrawn=withdrawn,
                end_as=end_as,
            )
            insert_audit(conn, entry, now)
        # A drive of this process writing the run re-reads its head and is fenced out.
        self._heads.drop(execution_id)
        out.cancelled = True
        out.checkpoint = cp
        out.withdrawn_checkpoint_id = withdrawn
        return out

    async def acancel_run(
        self,
        execution_id: str,
        *,
        by: str | None,
        reason: str | None,
        via: str = "code",
        end_as: str = "cancelled",
        only_if_pending: str | None = None,
    ) -> CancelOutcome:
        return self.cancel_run(
            execution_id,
            by=by,
            reason=reason,
            via=via,
            end_as=end_as,
            only_if_pending=only_if_pending,
        )

    def due_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        """See :meth:`tether.store._control.ControlStore.due_interrupts`."""
        sql, args = SELECT_DUE, list[Any]([time.time()])
        if runner_names is not None:
            if not runner_names:
                return []
            sql += f" AND r.runner_name IN ({','.join('?' * len(runner_names))})"
            args.extend(runner_names)
        with self._read() as conn:
            rows = conn.execute(sql + " ORDER BY p.due_at LIMIT ?", (*args, limit)).fetchall()
        return [_codec.pending_from_row(r) for r in rows]

    async def adue_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        return self.due_interrupts(runner_names=runner_names, limit=limit)

    def delete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        """See :meth:`tether.store._control.ControlStore.delete_run`."""
        with self._write() as conn:
            row = conn.execute(SELECT_RUN_FOR_CONTROL, (execution_id,)).fetchone()
            if row is None:
                return DeleteOutcome(found=False)
            out = DeleteOutcome(found=True, status=row[0])
            if statuses is not None and row[0] not in statuses:
                return out
            out.checkpoints = conn.execute(DELETE_CHECKPOINTS, (execution_id,)).rowcount
            out.idempotency = conn.execute(DELETE_IDEMPOTENT, (execution_id,)).rowcount
            out.pending = conn.execute(DELETE_PENDING, (execution_id,)).rowcount
            conn.execute(DELETE_AUDIT_OF, (execution_id,))
            for statement in SQLITE_PRUNE_THREAD:  # a LangGraph run's thread, by the run's kind
                conn.execute(statement, (execution_id,))
            conn.execute(DELETE_RUN, (execution_id,))
        self._heads.drop(execution_id)
        return out

    async def adelete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        return self.delete_run(execution_id, statuses=statuses)
