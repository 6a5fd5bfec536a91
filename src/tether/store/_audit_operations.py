"""The audit trail (:mod:`tether.audit`), written once for both SQL backends.

An answer's entry is appended by the plan that stores the answer (``CLAIM_PENDING_AUDITED``,
``ANSWER_PENDING`` in each SQL module: on Postgres a data-modifying CTE of the same statement,
on SQLite a statement of the same transaction), so both commit or neither does. What comes
with no answer (a cancel, a state patch) is appended here, in a transaction of its own; the
row mapping is :mod:`._audit_codec`'s.
"""

from __future__ import annotations

import builtins
import datetime as _dt
from typing import Any, Unpack

from ..audit import AuditEntry
from ._audit_codec import audit_from_row, audit_named_params, since_utc
from ._operations import StoreOperations
from ._plans import Plan, last
from .base import AuditQuery

__all__ = ["AuditOperations"]


class AuditOperations(StoreOperations):
    """The audit trail's methods of a SQL checkpointer."""

    def _record_audit_plan(self, entry: AuditEntry) -> Plan[None]:
        yield last(self._sql.INSERT_AUDIT_ENTRY, audit_named_params(entry))

    def _list_audit_plan(
        self, execution_id: str | None, since: _dt.datetime | None, limit: int | None
    ) -> Plan[builtins.list[AuditEntry]]:
        params: dict[str, Any]
        if execution_id is not None:
            query, params = self._sql.SELECT_AUDIT_OF_RUN, {"execution_id": execution_id}
        else:  # seconds since the epoch, as prune's cutoff; a naive since is UTC
            start = 0.0 if since is None else since_utc(since).timestamp()
            query, params = self._sql.SELECT_AUDIT_SINCE, {"since": start, "limit": limit}
        return [audit_from_row(r) for r in (yield from self._all(query, params))]

    def record_audit(self, entry: AuditEntry) -> None:
        """Append an entry that comes with no answer (a cancel, a state patch), in its own
        transaction. Answers are recorded by the call that stores them.

        Raises:
            SerializationError: ``entry.data`` cannot be stored as JSON (nothing written).
        """
        plan = self._record_audit_plan(entry)
        self._db.run("record_audit", plan, write=True, execution_id=entry.execution_id)

    async def arecord_audit(self, entry: AuditEntry) -> None:
        plan = self._record_audit_plan(entry)
        await self._db.arun("record_audit", plan, write=True, execution_id=entry.execution_id)

    def list_audit(
        self, execution_id: str | None = None, **query: Unpack[AuditQuery]
    ) -> builtins.list[AuditEntry]:
        """A run's entries in the order recorded, or (``execution_id=None``) every run's
        entries recorded at or after ``since``, oldest first, at most ``limit``
        (:class:`~tether.store.base.AuditQuery`)."""
        plan = self._list_audit_plan(execution_id, query.get("since"), query.get("limit"))
        return self._db.run("list_audit", plan)
