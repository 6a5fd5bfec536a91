"""Look at what a store URL names without creating or migrating anything.

Opening a checkpointer creates its schema or migrates it forward: right for code that writes,
wrong for a command that only reads. A mistyped schema in a URL, another application's SQLite
file or an empty file would silently become an (empty) tether store. :func:`check_store`
opens the database read-only (SQLite ``mode=ro``, by :mod:`._sqlite_readonly`, so a file this
process cannot write is read too; one Postgres connection with a short connect timeout and no
pool, so an unreachable server fails in seconds with one error instead of a pool's retries)
and says what is there.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..errors import CorruptRecordError, StoreUnavailableError
from ._database_errors import Kind, sqlite_kind
from ._sqlite_path import check_store_path
from ._sqlite_readonly import connect_read_only, read_only_reason

__all__ = ["PROBE_CONNECT_TIMEOUT_SECONDS", "check_postgres", "check_sqlite"]

#: How long a probe waits for a Postgres server to accept its connection.
PROBE_CONNECT_TIMEOUT_SECONDS = 5

_CREATE_HINT = "`tether db migrate` (or the first write) creates it"


def _version_verdict(where: str, found: int, current: int, allow_older: bool) -> None:
    if found < current and not allow_older:
        raise StoreUnavailableError(
            f"{where} holds tether schema version {found}; this tether reads version "
            f"{current}: run `tether db migrate` to upgrade it (reading never migrates)"
        )


def check_sqlite(path: str, *, allow_older: bool = False) -> None:
    """Check that ``path`` is a tether store, reading it only.

    Args:
        path: the database file.
        allow_older: accept a store at an older schema version (a command that writes will
            migrate it); otherwise that is an error naming ``tether db migrate``.

    Raises:
        ConfigurationError: ``path`` cannot name a database file (a directory, say:
            :func:`._sqlite_path.check_store_path`).
        StoreUnavailableError: no such file, an empty file, a file that is not a tether store,
            or (without ``allow_older``) an older schema version.
        CorruptRecordError: the file is not a SQLite database.
    """
    path = check_store_path(path)
    file = Path(path)
    if not file.exists():
        raise StoreUnavailableError(
            f"no database at {path!r}; check --db / TETHER_DATABASE_URL ({_CREATE_HINT})"
        )
    if file.is_file() and file.stat().st_size == 0:
        raise StoreUnavailableError(
            f"{path!r} is an empty file, not a tether store; check --db / TETHER_DATABASE_URL "
            f"({_CREATE_HINT})"
        )
    try:
        conn = connect_read_only(path, timeout=5)
    except sqlite3.Error as exc:
        raise _unreadable(path, exc) from exc
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        if "tether_schema" not in names:
            shown = ", ".join(sorted(names)[:8]) or "no tables"
            raise StoreUnavailableError(
                f"{path!r} is a SQLite database but not a tether store ({shown}); check --db / "
                "TETHER_DATABASE_URL"
            )
        found = conn.execute("SELECT MAX(version) FROM tether_schema").fetchone()[0] or 0
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return  # a writer holds it: it is a database; the store itself will wait
        raise _unreadable(path, exc) from exc
    finally:
        conn.close()
    from .sqlite import SCHEMA_VERSION

    if found < SCHEMA_VERSION:
        why = read_only_reason(path)
        if why is not None:  # `tether db migrate` would fail too: say so, not only "migrate"
            raise StoreUnavailableError(
                f"{path!r} holds tether schema version {found}; this tether reads version "
                f"{SCHEMA_VERSION}, and the file cannot be migrated here: {why}. Run "
                "`tether db migrate` where the file, its directory and its filesystem are "
                "writable"
            )
    _version_verdict(repr(path), found, SCHEMA_VERSION, allow_older)


def _unreadable(path: str, exc: sqlite3.Error) -> Exception:
    """The error for a SQLite file the probe could not read: corrupt only when SQLite says
    so (not a database, a damaged page), not when it could not open or lock the file."""
    if sqlite_kind(exc) is Kind.CORRUPT:
        return CorruptRecordError(f"{path!r} is not a readable tether SQLite database: {exc}")
    return StoreUnavailableError(f"cannot read SQLite database {path!r}: {exc}")


def check_postgres(url: str, *, allow_older: bool = False, store_required: bool = True) -> None:
    """Check that the schema a ``postgresql://`` URL names holds a tether store, over one
    connection that gives up after :data:`PROBE_CONNECT_TIMEOUT_SECONDS` (unless the URL
    sets ``connect_timeout``). With ``store_required=False`` (a command that creates the
    store) only that the database answers.

    Raises:
        StoreUnavailableError: the server cannot be reached, the database does not exist,
            the schema holds no tether store, or (without ``allow_older``) an older version.
    """
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from ._postgres_errors import translate
    from .postgres import SCHEMA_VERSION, _target, split_url

    dsn, options = split_url(url, {})
    schema = options.get("schema", "tether")
    where = _target(dsn)
    kwargs: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in conninfo_to_dict(dsn):
        kwargs["connect_timeout"] = PROBE_CONNECT_TIMEOUT_SECONDS
    try:
        conn = psycopg.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        raise StoreUnavailableError(f"cannot connect to {where}: {reason}") from None
    with conn:
        if not store_required:
            return
        try:
            found = _postgres_version(conn, schema, where)
        except psycopg.Error as exc:
            # A role's statement_timeout, a privilege missing on the schema: said in the
            # store's words, never as a driver's error (docs/storage.md).
            raise translate(
                exc,
                op="probe",
                target=where,
                pid=conn.info.backend_pid,
                lost=conn.closed,
                execution_id=None,
                timeout_seconds=PROBE_CONNECT_TIMEOUT_SECONDS,
            ) from None
    _version_verdict(f"schema {schema!r} of {where}", found, SCHEMA_VERSION, allow_older)


def _postgres_version(conn: Any, schema: str, where: str) -> int:
    """The newest schema version in ``schema``, its table found in the catalogs (which every
    role may read: a role without privileges on the store is told so by the next query, not
    that there is none).

    Raises:
        StoreUnavailableError: ``schema`` holds no tether store (naming the ones that do).
        psycopg.Error: the server refused or cancelled a query.
    """
    import psycopg

    from ._postgres_sql import SELECT_SCHEMA_TABLE_EXISTS

    if conn.execute(SELECT_SCHEMA_TABLE_EXISTS, (schema,)).fetchone() is None:
        rows = conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = 'tether_schema' AND c.relkind = 'r' ORDER BY 1"
        ).fetchall()
        names = [r[0] for r in rows]
        others = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        raise StoreUnavailableError(
            f"no tether store in schema {schema!r} of {where} (schemas holding one: "
            f"{others or 'none'}); check ?schema= in --db / TETHER_DATABASE_URL "
            f"({_CREATE_HINT})"
        )
    found = conn.execute(
        psycopg.sql.SQL("SELECT MAX(version) FROM {}.tether_schema").format(
            psycopg.sql.Identifier(schema)
        )
    ).fetchone()
    return int((found or [0])[0] or 0)
