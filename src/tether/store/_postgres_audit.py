"""The audit trail on Postgres (:mod:`tether.audit`): its table, statements and reads.

An answer's entry is inserted by the statement that stores the answer, as a data-modifying
CTE over the rows it updated (:data:`AUDITED`, used by ``CLAIM_PENDING_AUDITED`` and
``ANSWER_PENDING_AUDITED`` in :mod:`tether.store._postgres_sql`): one statement, so both commit
or neither does, at no extra round trip.
"""

from __future__ import annotations

import builtins
import datetime as _dt
from typing import Any, Final

from ..audit import AuditEntry
from ._audit_codec import (
    AUDIT_COLUMNS,
    AUDIT_INSERT_COLUMNS,
    AUDIT_PARAM_NAMES,
    audit_from_row,
    audit_named_params,
    audit_params,
    since_utc,
)
from ._postgres_io import Database, Plan

__all__ = ["AUDITED", "MIGRATION_V6", "PostgresAudit", "audit_named_params"]

# v6: the audit trail.
MIGRATION_V6: Final[tuple[str, ...]] = (
    """CREATE TABLE {schema}.audit_log (
        entry_id bigserial PRIMARY KEY,
        execution_id text NOT NULL,
        action text NOT NULL,
        via text NOT NULL,
        actor text,
        note text,
        data bytea,
        checkpoint_id text,
        interrupt bytea,
        at timestamptz NOT NULL
    )""",
    "CREATE INDEX audit_log_run_idx ON {schema}.audit_log (execution_id, entry_id)",
    "CREATE INDEX audit_log_at_idx ON {schema}.audit_log (at)",
)

_CASTS: Final = ("text", "text", "text", "text", "text", "bytea", "text", "bytea")
_VALUES: Final = ", ".join(f"%({n})s::{t}" for n, t in zip(AUDIT_PARAM_NAMES, _CASTS, strict=True))
AUDITED: Final = (
    f"audited AS (INSERT INTO {{schema}}.audit_log ({AUDIT_INSERT_COLUMNS}, at) "
    "SELECT " + _VALUES + ", now() FROM {source} WHERE %(audit_execution_id)s::text IS NOT NULL)"
)
"""A CTE appending the entry given in the ``audit_*`` parameters once per row of
``{source}`` (another CTE's name), and nothing when ``audit_execution_id`` is NULL."""
INSERT_AUDIT: Final = (
    f"INSERT INTO {{schema}}.audit_log ({AUDIT_INSERT_COLUMNS}, at) "
    f"VALUES ({', '.join(['%s'] * len(_CASTS))}, now())"
)
SELECT_AUDIT_OF_RUN: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM {{schema}}.audit_log WHERE execution_id = %s ORDER BY entry_id"
)
SELECT_AUDIT_SINCE: Final = (
    f"SELECT {AUDIT_COLUMNS} FROM {{schema}}.audit_log WHERE at >= %s "
    "ORDER BY at, entry_id LIMIT %s"
)


class PostgresAudit:
    """The audit trail's methods of :class:`~tether.store.postgres.PostgresCheckpointer`."""

    _db: Database

    def _q(self, template: str) -> bytes:
        raise NotImplementedError  # pragma: no cover - the checkpointer's

    def _rows_plan(self, template: str, params: Any) -> Plan[builtins.list[tuple[Any, ...]]]:
        return (yield self._q(template), params).rows

    def _record_audit_plan(self, entry: AuditEntry) -> Plan[None]:
        yield self._q(INSERT_AUDIT), audit_params(entry)

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
        self,
        execution_id: str | None = None,
        *,
        since: _dt.datetime | None = None,
        limit: int | None = None,
    ) -> builtins.list[AuditEntry]:
        """A run's entries in the order recorded, or (``execution_id=None``) every run's
        entries recorded at or after ``since``, oldest first, at most ``limit``."""
        if execution_id is not None:
            plan = self._rows_plan(SELECT_AUDIT_OF_RUN, (execution_id,))
        else:
            start = _dt.datetime.fromtimestamp(0, _dt.UTC) if since is None else since_utc(since)
            plan = self._rows_plan(SELECT_AUDIT_SINCE, (start, limit))
        return [audit_from_row(r) for r in self._db.run("list_audit", plan)]
