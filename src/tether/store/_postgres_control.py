"""Cancel and delete on Postgres (the rules are in :mod:`tether.store._control`).

Both run in one transaction that first locks the run row (``FOR UPDATE``). A leaseholder's
fenced commit takes a share lock on that row (``_postgres_leases``), so a step commit in
flight either lands before the cancel reads the run's newest row or waits for the cancel and
then finds its lease gone (``LeaseLost``).
"""

from __future__ import annotations

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
from ._leases import Fences
from ._postgres_audit import INSERT_AUDIT
from ._postgres_io import Database, Plan

__all__ = ["PostgresControl"]

LOCK_RUN: Final = (
    "SELECT status, owner, now() FROM {schema}.runs WHERE execution_id = %s FOR UPDATE"
)
CANCEL_RUN: Final = (
    "UPDATE {schema}.runs SET status = 'cancelled', error = %s, owner = NULL, "
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
        self, eid: str, by: str | None, reason: str | None, via: str
    ) -> Plan[CancelOutcome]:
        row = (yield self._q(LOCK_RUN), (eid,)).one()
        if row is None:
            return CancelOutcome(found=False)
        status, owner, now = row
        out = CancelOutcome(found=True, status_before=status, owner_before=owner)
        if status not in CANCELLABLE:
            return out
        # Read under the row lock: no fenced commit can land after this read.
        self._heads.drop(eid)
        head = yield from self._head_plan(eid)
        at = now if isinstance(now, _dt.datetime) else _dt.datetime.now(_dt.UTC)
        cp = cancel_checkpoint(eid, head, by=by, reason=reason, at=at, status_before=status)
        with unfenced(self._fences, eid):
            self._heads.set(eid, head or _codec.empty_head())
            yield from self._insert_plan(cp)
        yield self._q(CANCEL_RUN), (cancel_error_text(by, reason), eid)
        gone = (yield self._q(DELETE_PENDING_RETURNING), (eid,)).one()
        withdrawn = None if gone is None else gone[0]
        entry = cancel_audit(
            eid, by=by, reason=reason, via=via, status_before=status, withdrawn=withdrawn
        )
        yield self._q(INSERT_AUDIT), audit_params(entry)
        out.cancelled = True
        out.checkpoint = cp
        out.withdrawn_checkpoint_id = withdrawn
        return out

    def cancel_run(
        self, execution_id: str, *, by: str | None, reason: str | None, via: str = "code"
    ) -> CancelOutcome:
        """See :meth:`tether.store._control.ControlStore.cancel_run`."""
        plan = self._cancel_plan(execution_id, by, reason, via)
        try:
            return self._db.run("cancel_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

    async def acancel_run(
        self, execution_id: str, *, by: str | None, reason: str | None, via: str = "code"
    ) -> CancelOutcome:
        plan = self._cancel_plan(execution_id, by, reason, via)
        try:
            return await self._db.arun("cancel_run", plan, write=True, execution_id=execution_id)
        finally:
            self._heads.drop(execution_id)

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
