"""Cancel, delete and the approval deadlines due, written once for both SQL backends (the
rules: :mod:`._control`).

Each runs in one transaction that first reads the run row under the backend's lock
(``LOCK_RUN``: Postgres ``FOR UPDATE``, SQLite the plan's ``BEGIN IMMEDIATE``), so a step
commit in flight either lands before the cancel reads the run's newest row or is fenced out
after it (``LeaseLost``).
"""

from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import Sequence
from typing import Any, TypeVar, Unpack

from ..errors import CorruptRecordError
from . import _codec
from ._audit_codec import audit_named_params
from ._control import (
    CANCELLABLE,
    CancelOptions,
    CancelOutcome,
    DeleteOutcome,
    cancel_audit,
    cancel_checkpoint,
    cancel_error_text,
    unfenced,
)
from ._operations import StoreOperations, _head_of
from ._plans import Plan
from ._rows import CP
from .base import PendingInterrupt

T = TypeVar("T")

__all__ = ["ControlOperations"]


class ControlOperations(StoreOperations):
    """The :class:`~tether.store._control.ControlStore` capability of a SQL checkpointer."""

    def _cancel_plan(self, eid: str, options: CancelOptions) -> Plan[CancelOutcome]:
        by, reason = options["by"], options["reason"]
        end_as, only_if_pending = options.get("end_as", "cancelled"), options.get("only_if_pending")
        sql, of_run = self._sql, {"execution_id": eid}
        row = (yield sql.LOCK_RUN, dict(of_run)).one()
        if row is None:
            return CancelOutcome(found=False)
        status, owner, now = row
        out = CancelOutcome(found=True, status_before=status, owner_before=owner)
        if status not in CANCELLABLE:
            return out
        if only_if_pending is not None:
            pending = (yield sql.LOCK_PENDING, dict(of_run)).one()
            if pending is None or tuple(pending) != (only_if_pending, None, None):
                return out  # answered, claimed or moved on meanwhile: the deadline is moot
        # Read under the lock: no fenced commit can land after this read.
        self._heads.drop(eid)
        head, state, damage = yield from self._ending_state_plan(eid)
        at = _codec.ts_to_dt(now) or _dt.datetime.now(_dt.UTC)  # the database's clock
        cp = cancel_checkpoint(
            eid,
            state,
            by=by,
            reason=reason,
            at=at,
            status_before=status,
            end_as=end_as,
            damage=damage,
        )
        with unfenced(self._fences, eid):
            self._heads.set(eid, head or _codec.empty_head())
            yield from self._insert_plan(cp, force_full=damage is not None)
        error = cancel_error_text(by, reason, end_as)
        yield sql.CANCEL_RUN, {**of_run, "end_as": end_as, "error": error}
        gone = (yield sql.DELETE_PENDING_RETURNING, dict(of_run)).one()
        withdrawn = None if gone is None else gone[0]
        entry = cancel_audit(
            eid,
            by=by,
            reason=reason,
            via=options.get("via", "code"),
            status_before=status,
            withdrawn=withdrawn,
            end_as=end_as,
        )
        yield sql.INSERT_AUDIT_ENTRY, audit_named_params(entry)
        out.cancelled = True
        out.checkpoint = cp
        out.withdrawn_checkpoint_id = withdrawn
        out.damaged = None if damage is None else damage.message
        return out

    def _ending_state_plan(
        self, eid: str
    ) -> Plan[tuple[_codec.Head | None, dict[str, Any], CorruptRecordError | None]]:
        """The head after the run's newest row and that row's state, which a run-end row
        copies (``None`` and ``{}`` for a run without rows). For a run whose stored state
        cannot be read, a head at the newest row that holds no state, ``{}`` and the error:
        the run still ends, on a full row of its own, and the damaged rows stay as they are
        (docs/design.md §12, "Cancel and delete")."""
        row = yield from self._one(self._sql.SELECT_LAST, {"execution_id": eid})
        if row is None:
            return None, {}, None
        try:  # a driver error is thrown into the plan raw: only a decoding failure is caught
            raw = yield from self._raw_state_plan(row)
            state = _codec.decode_state(raw)
        except CorruptRecordError as exc:
            seq = row[CP.seq]
            return _codec.Head(seq, seq, {}, 0, 0), {}, exc
        return _head_of(row, raw), state, None

    def _delete_plan(self, eid: str, statuses: Sequence[str] | None) -> Plan[DeleteOutcome]:
        sql, of_run = self._sql, {"execution_id": eid}
        row = (yield sql.LOCK_RUN, dict(of_run)).one()
        if row is None:
            return DeleteOutcome(found=False)
        out = DeleteOutcome(found=True, status=row[0])
        if statuses is not None and row[0] not in statuses:
            return out
        # The run's rows go as a prune's do, by the same statements: a set of one run.
        remove, of = sql.REMOVE, {"ids": [eid]}
        out.checkpoints = (yield remove.delete_checkpoints, of).rowcount
        out.idempotency = (yield remove.delete_idempotent, of).rowcount
        out.pending = (yield remove.delete_pending, of).rowcount
        yield remove.delete_audit, of
        for query in sql.DELETE_LANGGRAPH_OF_RUNS:  # a LangGraph run's thread, by the run's kind
            yield query, of
        yield remove.delete_runs, of
        return out

    def cancel_run(self, execution_id: str, **options: Unpack[CancelOptions]) -> CancelOutcome:
        """See :meth:`tether.store._control.ControlStore.cancel_run`."""
        return self._ending("cancel_run", execution_id, self._cancel_plan(execution_id, options))

    async def acancel_run(
        self, execution_id: str, **options: Unpack[CancelOptions]
    ) -> CancelOutcome:
        plan = self._cancel_plan(execution_id, options)
        return await self._aending("cancel_run", execution_id, plan)

    def _ending(self, op: str, execution_id: str, plan: Plan[T]) -> T:
        """Run the write ``plan`` that ends or removes the run, then forget its head."""
        try:
            return self._db.run(op, plan, write=True, execution_id=execution_id)
        finally:  # a drive of this process writing the run re-reads its head, fenced out
            self._heads.drop(execution_id)

    async def _aending(self, op: str, execution_id: str, plan: Plan[T]) -> T:
        """Async :meth:`_ending`."""
        try:
            return await self._db.arun(op, plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

    def _due_plan(
        self, runner_names: Sequence[str] | None, limit: int
    ) -> Plan[builtins.list[PendingInterrupt]]:
        if runner_names is not None and not runner_names:
            return []
        names = None if runner_names is None else list(runner_names)
        rows = (yield self._sql.SELECT_DUE, {"runner_names": names, "limit": limit}).rows
        return [_codec.decode_pending(r) for r in rows]  # a damaged one: marked, not raised

    def due_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        """See :meth:`tether.store._control.ControlStore.due_interrupts`."""
        return self._db.run("due_interrupts", self._due_plan(runner_names, limit))

    async def adue_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        return await self._db.arun("due_interrupts", self._due_plan(runner_names, limit))

    def delete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        """See :meth:`tether.store._control.ControlStore.delete_run`."""
        return self._ending("delete_run", execution_id, self._delete_plan(execution_id, statuses))

    async def adelete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        plan = self._delete_plan(execution_id, statuses)
        return await self._aending("delete_run", execution_id, plan)
