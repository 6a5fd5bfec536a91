"""The audit trail's row mapping, shared by both backends (their SQL lives with each).

A row is the columns of :data:`AUDIT_COLUMNS` in order; ``data`` and ``interrupt`` are JSON
(:mod:`tether.serde`). A row whose JSON cannot be read is still listed, with the damage named
in its ``data`` (an ``at`` that is no time: in its ``damaged``), so one bad row never hides
the rest of a run's trail.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Final

from ..audit import AuditEntry
from . import _codec
from ._records import AUDIT

AUDIT_COLUMNS: Final = AUDIT.sql
AUDIT_INSERT_COLUMNS: Final = AUDIT_COLUMNS.rsplit(", at, entry_id", 1)[0]
"""The columns a writer gives; ``at`` and ``entry_id`` are the store's."""


def audit_params(entry: AuditEntry) -> tuple[Any, ...]:
    """The values of :data:`AUDIT_INSERT_COLUMNS` for ``entry``.

    Raises:
        SerializationError: ``data`` holds a value JSON cannot store (nothing is written).
    """
    return (
        entry.execution_id,
        entry.action,
        entry.via,
        entry.actor,
        entry.note,
        _codec.dump_json(entry.data, "audit.data"),
        entry.checkpoint_id,
        _codec.dump_json(entry.interrupt, "audit.interrupt"),
    )


AUDIT_PARAM_NAMES: Final = tuple(f"audit_{c.strip()}" for c in AUDIT_INSERT_COLUMNS.split(","))
"""The named parameters of an audit entry in a statement that may append one."""


def audit_named_params(entry: AuditEntry | None) -> dict[str, Any]:
    """The ``audit_*`` parameters of ``entry`` (all NULL: no entry, and none is appended)."""
    values = (None,) * len(AUDIT_PARAM_NAMES) if entry is None else audit_params(entry)
    return dict(zip(AUDIT_PARAM_NAMES, values, strict=True))


audit_from_row = AUDIT.tolerant
"""An :class:`AuditEntry` from a row in :data:`AUDIT_COLUMNS` order (never raising: the
damage of unreadable JSON is named in the field, an unreadable ``at`` in the entry's
``damaged``; see :data:`._records.AUDIT`)."""


def since_utc(since: _dt.datetime) -> _dt.datetime:
    """``since`` as an aware datetime; a naive one is taken as UTC (tether's stored times)."""
    return since if since.tzinfo is not None else since.replace(tzinfo=_dt.UTC)
