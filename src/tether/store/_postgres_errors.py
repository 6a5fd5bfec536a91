"""The tether error for a Postgres driver error, with a message naming the server, the
operation and the run (the rule of which error is which: :mod:`._database_errors`)."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolClosed, PoolTimeout

from ..errors import StoreError
from ._database_errors import (
    MISSING_TABLES,
    REJECTED_ADVICE,
    Kind,
    postgres_constraint,
    postgres_kind,
    store_error,
)

__all__ = ["first_line", "translate"]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _ends_session(sqlstate: str | None) -> bool:
    """A client-side connection failure, a connection exception, a server shutdown."""
    return sqlstate is None or sqlstate[:2] == "08" or sqlstate in ("57P01", "57P02")


def _quoted(execution_id: str) -> str:
    # Whole, unless too long to read in a message (a key PostgreSQL refused for its length).
    if len(execution_id) <= 80:
        return repr(execution_id)
    return f"{execution_id[:60]!r}... ({len(execution_id)} characters)"


def translate(
    exc: psycopg.Error,
    *,
    op: str,
    target: str,
    pid: int | None,
    lost: bool,
    execution_id: str | None,
    timeout_seconds: float,
    reason: str | None = None,
) -> StoreError:
    """The tether error for a driver error, by the rule in
    :mod:`tether.store._database_errors`.

    Args:
        exc: the psycopg (or psycopg_pool) error.
        op: the checkpointer operation, e.g. ``"put"``.
        target: the server, ``postgresql://user@host:port/dbname`` (no password).
        pid: the server backend of the connection in use, if one was checked out.
        lost: the connection was found closed after the error.
        execution_id: the run concerned, if any.
        timeout_seconds: the pool's wait for a connection (for the message).
        reason: why a fresh connection could not be made, when that was diagnosed.
    """
    where = target if pid is None else f"{target} (backend pid {pid})"
    what = op if execution_id is None else f"{op} of run {_quoted(execution_id)}"
    msg = first_line(exc)
    kind = postgres_kind(exc, lost=lost)
    if isinstance(exc, PoolTimeout):
        text = f"no connection to PostgreSQL {target} within {timeout_seconds:g} s for {what}: "
        text += reason or msg
    elif isinstance(exc, PoolClosed):
        text = f"the connection pool to PostgreSQL {target} was closed during {what}"
    elif kind is Kind.UNAVAILABLE and (lost or _ends_session(exc.sqlstate)):
        text = (
            f"lost the connection to PostgreSQL {where} during {what}: {msg}. Its transaction "
            "did not commit, unless the loss came as it committed (during COMMIT, or during a "
            "write sent as one statement): read the run back to know"
        )
    elif kind is Kind.UNAVAILABLE:
        text = f"PostgreSQL {where} could not serve {what}: {msg} (SQLSTATE {exc.sqlstate})"
    elif kind is Kind.MISSING:
        text = (
            f"PostgreSQL {target} {MISSING_TABLES} ({msg}) during {what}; "
            "the schema was dropped or altered outside tether"
        )
    elif kind is Kind.CONFLICT:
        text = f"a concurrent transaction on PostgreSQL {target} conflicted with {what}: {msg}"
    elif kind is Kind.REJECTED:
        hint = (exc.diag.message_hint or "").strip().split("\n")[0]
        text = (
            f"PostgreSQL {where} rejected {what}: {msg}{f' ({hint})' if hint else ''} "
            f"(SQLSTATE {exc.sqlstate}); {REJECTED_ADVICE}"
        )
    else:
        text = f"PostgreSQL {where} refused {what}: {msg}"
    return store_error(
        kind,
        text,
        execution_id=execution_id,
        code=exc.sqlstate,
        constraint=postgres_constraint(exc),
    )
