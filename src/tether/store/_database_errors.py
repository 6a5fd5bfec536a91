"""What a database error means to its caller: one rule, for both backends.

Each driver error gets a :class:`Kind` from the database's own code for it (a PostgreSQL
SQLSTATE, a SQLite result code), never from the words of its message, and each kind is one
tether error (:func:`store_error`):

=============  =========================  ====================================================
kind           raised as                  what happened; what the caller does
=============  =========================  ====================================================
unavailable    ``StoreUnavailableError``  the database could not be reached, went away, is out
                                          of room (disk, memory, connections) or stayed locked
                                          past the wait: the same call may work later; retry
conflict       ``ConcurrentWriteError``   another transaction won (serialization failure,
                                          deadlock): re-read, then decide
missing        ``CorruptRecordError``     tether's tables or columns are gone or altered
corrupt        ``CorruptRecordError``     the file is not a readable database
rejected       ``RecordRejectedError``    the database refused what was sent: a constraint, a
                                          value too large for an index or the database, data
                                          its column cannot hold; the same call fails again
other          ``StoreError``             anything else (a permission, an internal error)
=============  =========================  ====================================================

Callers retry :class:`~tether.errors.StoreUnavailableError` (workers, web clients on a 503,
people), so a failure is "unavailable" only when the database's code says it is about
reaching or keeping the database, or when the driver lost the connection; an unknown code is
"other", never "unavailable".
"""

from __future__ import annotations

import enum
import sqlite3
from typing import Any, Final

from ..errors import (
    ConcurrentWriteError,
    CorruptRecordError,
    RecordRejectedError,
    StoreError,
    StoreUnavailableError,
)


class Kind(enum.Enum):
    """What a database error means to the caller (the table above)."""

    UNAVAILABLE = "unavailable"
    CONFLICT = "conflict"
    MISSING = "missing"
    CORRUPT = "corrupt"
    REJECTED = "rejected"
    OTHER = "other"


_CLASSES: Final[dict[Kind, type[StoreError]]] = {
    Kind.UNAVAILABLE: StoreUnavailableError,
    Kind.CONFLICT: ConcurrentWriteError,
    Kind.MISSING: CorruptRecordError,
    Kind.CORRUPT: CorruptRecordError,
    Kind.OTHER: StoreError,
}


REJECTED_ADVICE: Final = (
    "the same call will fail the same way, so change the value or the constraint rather than retry"
)
"""What every backend's message for a refused value (:attr:`Kind.REJECTED`) ends with."""
MISSING_TABLES: Final = "is missing tether tables or columns"
"""What every backend's message for a schema it cannot find (:attr:`Kind.MISSING`) says."""


def store_error(
    kind: Kind,
    message: str,
    *,
    execution_id: str | None = None,
    code: str | None = None,
    constraint: str | None = None,
) -> StoreError:
    """The tether error for a database error of ``kind``.

    Args:
        kind: what the error means (:func:`postgres_kind`, :func:`sqlite_kind`).
        message: what happened, naming the database and the operation.
        execution_id: the run concerned, if any.
        code: the database's code (SQLSTATE, SQLite result code name), kept on a rejection.
        constraint: the constraint or index the database named, kept on a rejection.
    """
    if kind is Kind.REJECTED:
        return RecordRejectedError(
            message, code=code, constraint=constraint, execution_id=execution_id
        )
    return _CLASSES[kind](message, execution_id=execution_id)


# --- PostgreSQL -----------------------------------------------------------------------------
# By SQLSTATE class (its first two characters), then the codes that differ from their class.
_POSTGRES_CLASSES: Final[dict[str, Kind]] = {
    "08": Kind.UNAVAILABLE,  # connection exception
    "53": Kind.UNAVAILABLE,  # insufficient resources: disk full, out of memory, too many clients
    "57": Kind.UNAVAILABLE,  # operator intervention: shutdown, restart, cancel, session timeouts
    "58": Kind.UNAVAILABLE,  # system error: an I/O error outside PostgreSQL
    "40": Kind.CONFLICT,  # transaction rollback: serialization failure, deadlock
    "22": Kind.REJECTED,  # data exception: out of range, untranslatable character...
    "23": Kind.REJECTED,  # integrity constraint violation: unique, check, not null, foreign key
    "54": Kind.REJECTED,  # program limit exceeded: an index row too large for a B-tree...
}
_POSTGRES_CODES: Final[dict[str, Kind]] = {
    "25006": Kind.UNAVAILABLE,  # read_only_sql_transaction: a standby, e.g. during a failover
    "25P03": Kind.UNAVAILABLE,  # idle_in_transaction_session_timeout
    "55P03": Kind.UNAVAILABLE,  # lock_not_available: locked past lock_timeout
    "3F000": Kind.MISSING,  # invalid_schema_name
    "42P01": Kind.MISSING,  # undefined_table
    "42703": Kind.MISSING,  # undefined_column
}


def postgres_kind(exc: Exception, *, lost: bool) -> Kind:
    """The kind of a psycopg (or psycopg_pool) error.

    Args:
        exc: the error.
        lost: the connection was found closed after it: whatever the server said, the
            session is gone, so the failure is about reaching the database.
    """
    import psycopg
    from psycopg_pool import PoolClosed, PoolTimeout

    sqlstate: str | None = getattr(exc, "sqlstate", None)
    if lost or isinstance(exc, PoolTimeout | PoolClosed):
        return Kind.UNAVAILABLE
    if sqlstate:
        kind = _POSTGRES_CODES.get(sqlstate) or _POSTGRES_CLASSES.get(sqlstate[:2])
        return kind or Kind.OTHER
    # No SQLSTATE: the client's own error. libpq's (a refused or broken connection) come as
    # OperationalError, a connection used after it closed as InterfaceError.
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return Kind.UNAVAILABLE
    return Kind.OTHER


def postgres_constraint(exc: Exception) -> str | None:
    """The constraint or index a PostgreSQL error names, if any."""
    diag: Any = getattr(exc, "diag", None)
    name = getattr(diag, "constraint_name", None)
    return name if isinstance(name, str) else None


# --- SQLite ---------------------------------------------------------------------------------
# By primary result code (the low byte of the extended code the error carries).
_SQLITE_CODES: Final[dict[int, Kind]] = {
    sqlite3.SQLITE_BUSY: Kind.UNAVAILABLE,  # locked by another connection past busy_timeout
    sqlite3.SQLITE_LOCKED: Kind.UNAVAILABLE,
    sqlite3.SQLITE_FULL: Kind.UNAVAILABLE,  # database or disk is full
    sqlite3.SQLITE_IOERR: Kind.UNAVAILABLE,
    sqlite3.SQLITE_READONLY: Kind.UNAVAILABLE,  # a read-only file or mount
    sqlite3.SQLITE_CANTOPEN: Kind.UNAVAILABLE,
    sqlite3.SQLITE_NOMEM: Kind.UNAVAILABLE,
    sqlite3.SQLITE_PROTOCOL: Kind.UNAVAILABLE,
    sqlite3.SQLITE_CORRUPT: Kind.CORRUPT,
    sqlite3.SQLITE_NOTADB: Kind.CORRUPT,
    sqlite3.SQLITE_CONSTRAINT: Kind.REJECTED,  # unique, check, not null, a trigger's RAISE
    sqlite3.SQLITE_TOOBIG: Kind.REJECTED,  # a string or blob over SQLITE_LIMIT_LENGTH
    sqlite3.SQLITE_MISMATCH: Kind.REJECTED,  # datatype mismatch
    sqlite3.SQLITE_RANGE: Kind.REJECTED,
}
# SQLite reports a missing table or column only as SQLITE_ERROR, told apart by its wording.
_SQLITE_MISSING: Final = ("no such table", "no such column", "has no column named")


def sqlite_kind(exc: sqlite3.Error) -> Kind:
    """The kind of a :mod:`sqlite3` error."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if code is None:  # the module's own error (a closed connection, a bad binding)
        return Kind.OTHER
    primary = code & 0xFF
    if primary == sqlite3.SQLITE_ERROR and any(w in str(exc) for w in _SQLITE_MISSING):
        return Kind.MISSING
    return _SQLITE_CODES.get(primary, Kind.OTHER)


def sqlite_code(exc: sqlite3.Error) -> str | None:
    """The extended result code's name, e.g. ``"SQLITE_CONSTRAINT_UNIQUE"``."""
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else None


def sqlite_constraint(exc: sqlite3.Error) -> str | None:
    """What a SQLite constraint failure names: ``"runs.execution_id"`` for a unique key,
    a check constraint's name, or a trigger's message."""
    if sqlite_kind(exc) is not Kind.REJECTED:
        return None
    text = str(exc)
    _, sep, named = text.partition("constraint failed: ")
    if sep:
        return named.strip() or None
    return text if sqlite_code(exc) == "SQLITE_CONSTRAINT_TRIGGER" else None
