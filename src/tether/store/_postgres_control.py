"""Cancel and delete on Postgres (the rules are in :mod:`tether.store._control`).

Both run in one transaction that first locks the run row (``FOR UPDATE``). A leaseholder's
fenced commit takes a share lock on that row (``_postgres_leases``), so a step commit in
flight either lands before the cancel reads the run's newest row or waits for the cancel and
then finds its lease gone (``LeaseLost``).
"""

from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import Sequence
from typing import Final

from ..checkpoint import Checkpoint
from . import _codec
from ._audit_codec import audit_params
from ._control import (
    CANCELLABLE,
    CancelOutcome,
    DeleteOutcome,
    cancel_audit,
    cancel_checkpoint,
    cancel_error_text,
    unfenced,
)
from ._langgraph_sql import POSTGRES_PRUNE_THREADS
from ._leases import Fences
from ._postgres_audit import INSERT_AUDIT
from ._postgres_io import Database, Plan
from .base import PendingInterrupt

__all__ = ["MIGRATION_V9", "PostgresControl"]

LOCK_RUN: Final = (
    "SELECT status, owner, now() FROM {schema}.runs WHERE execution_id = %s FOR UPDATE"
)
# v9: approval deadlines: when a pending question falls due (interrupt(timeout_seconds=)).
MIGRATION_V9: Final[tuple[str, ...]] = (
    "ALTER TABLE {schema}.pending_interrupts ADD COLUMN due_at timestamptz",
    "CREATE INDEX pending_due_idx ON {schema}.pending_interrupts (due_at) WHERE due_at IS NOT NULL",
)
LOCK_PENDING: Final = (
    "SELECT checkpoint_id, resume_value, claimed_by FROM {schema}.pending_interrupts "
    "WHERE execution_id = %s FOR UPDATE"
)
SELECT_DUE: Final = (
    f"SELECT {', '.join('p.' + c.strip() for c in _codec.PENDING_COLUMNS.split(','))} "
    "FROM {schema}.pending_interrupts p JOIN {schema}.runs r ON r.execution_id = p.execution_id "
    "WHERE p.due_at IS NOT NULL AND p.due_at <= now() AND p.resume_value IS NULL "
    "AND p.claimed_by IS NULL AND r.status = 'paused' "
    "AND (%s::text[] IS NULL OR r.runner_name = ANY(%s::text[])) ORDER BY p.due_at LIMIT %s"
)
CANCEL_RUN: Final = (
    "UPDATE {schema}.runs SET status = %s, error = %s, owner = NULL, "
    "lease_expires_at = NULL, updated_at = now(), finished_at = now() WHERE execution_id = %s"
)
DELETE_PENDING_RETURNING: Final = (
    "DELETE FROM {schema}.pending_interrupts WHERE execution_id = %s RETURNING checkpoint_id"
)
DELETE_CHECKPOINTS: Final = "DELETE FROM {schema}.checkpoints WHERE execution_id = %s"
DELETE_IDEMPOTENT: Final = "DELETE FROM {schema}.idempotency_cache WHERE execution_id = %s"
DELETE_RUN: Final = "DELETE FROM {schema}.runs WHERE execution_id = %s"
DELETE_AUDIT_OF: Final = "DELETE FROM {schema}.audit_log WHERE execution_id = %s"


class PostgresControl:
    """The :class:`~tether.store._control.ControlStore` capability of
    ``PostgresCheckpointer``."""

    _db: Database
    _heads: _codec.HeadCache
    _fences: Fences

    def _q(self, template: str) -> bytes:
        raise NotImplementedError

    def _head_plan(self, execution_id: str) -> Plan[_codec.Head | None]:
        raise NotImplementedError

    def _insert_plan(
        self,
        cp: Checkpoint,
        *,
        force_full: bool = False,
        run_status: str | None = None,
        error: str | None = None,
        final: bool = False,
        release_lease_of: str | None = None,
    ) -> Plan[_codec.Head]:
        raise NotImplementedError

    def _cancel_plan(
        self,
        eid: str,
        by: str | None,
        reason: str | None,
        via: str,
        end_as: str = "cancelled",
        only_if_pending: str | None = None,
    ) -> Plan[CancelOutcome]:
        row = (yield self._q(LOCK_RUN), (eid,)).one()
        if row is None:
            return CancelOutcome(found=False)
        status, owner, now = row
        out = CancelOutcome(found=True, status_before=status, owner_before=owner)
        if status not in CANCELLABLE:
            return out
        if only_if_pending is not None:
            pending = (yield self._q(LOCK_PENDING), (eid,)).one()
            if pending is None or tuple(pending) != (only_if_pending, None, None):
                return out  # answered, claimed or moved on meanwhile: the deadline is moot
        # Read under the row lock: no fenced commit can land after this read.
        self._heads.drop(eid)
        head = yield from self._head_plan(eid)
        at = now if isinstance(now, _dt.datetime) else _dt.datetime.now(_dt.UTC)
        cp = cancel_checkpoint(
            eid, head, by=by, reason=reason, at=at, status_before=status, end_as=end_as
        )
        with unfenced(self._fences, eid):
            self._heads.set(eid, head or _codec.empty_head())
            yield from self._insert_plan(cp)
        yield self._q(CANCEL_RUN), (end_as, cancel_error_text(by, reason, end_as), eid)
        gone = (yield self._q(DELETE_PENDING_RETURNING), (eid,)).one()
        withdrawn = None if gone is None else gone[0]
        entry = cancel_audit(
            eid,
            by=by,
            reason=reason,
            via=via,
            status_before=status,
            withdrawn=withdrawn,
            end_as=end_as,
        )
        yield self._q(INSERT_AUDIT), audit_params(entry)
        out.cancelled = True
        out.checkpoint = cp
        out.withdrawn_checkpoint_id = withdrawn
        return out

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
        plan = self._cancel_plan(execution_id, by, reason, via, end_as, only_if_pending)
        try:
            return self._db.run("cancel_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

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
        plan = self._cancel_plan(execution_id, by, reason, via, end_as, only_if_pending)
        try:
            return await self._db.arun("cancel_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

    def _due_plan(
        self, runner_names: Sequence[str] | None, limit: int
    ) -> Plan[builtins.list[PendingInterrupt]]:
        if runner_names is not None and not runner_names:
            return []
        names = None if runner_names is None else list(runner_names)
        rows = (yield self._q(SELECT_DUE), (names, names, limit)).rows
        return [_codec.pending_from_row(r) for r in rows]

    def due_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        """See :meth:`tether.store._control.ControlStore.due_interrupts`."""
        return self._db.run("due_interrupts", self._due_plan(runner_names, limit))

    async def adue_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        return await self._db.arun("due_interrupts", self._due_plan(runner_names, limit))

    def _delete_plan(self, eid: str, statuses: Sequence[str] | None) -> Plan[DeleteOutcome]:
        row = (yield self._q(LOCK_RUN), (eid,)).one()
        if row is None:
            return DeleteOutcome(found=False)
        out = DeleteOutcome(found=True, status=row[0])
        if statuses is not None and row[0] not in statuses:
            return out
        out.checkpoints = (yield self._q(DELETE_CHECKPOINTS), (eid,)).rowcount
        out.idempotency = (yield self._q(DELETE_IDEMPOTENT), (eid,)).rowcount
        out.pending = (yield self._q(DELETE_PENDING_RETURNING), (eid,)).rowcount
        yield self._q(DELETE_AUDIT_OF), (eid,)
        for statement in POSTGRES_PRUNE_THREADS:  # a LangGraph run's thread, by the run's kind
            yield self._q(statement), ([eid],)
        yield self._q(DELETE_RUN), (eid,)
        return out

    def delete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        """See :meth:`tether.store._control.ControlStore.delete_run`."""
        plan = self._delete_plan(execution_id, statuses)
        try:
            return self._db.run("delete_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

    async def adelete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        plan = self._delete_plan(execution_id, statuses)
        try:
            return await self._db.arun("delete_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)
