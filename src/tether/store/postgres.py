"""Postgres checkpointer: many processes and machines on one database (docs/design.md §7).

The same four tables as SQLite (:mod:`tether.store.sqlite`), in a schema of their own
(``tether`` unless told otherwise), with the same semantics:

- **Steps.** Every write that belongs to one step is one transaction. The writer keeps each
  run's head in memory (:class:`~tether.store._codec.HeadCache`), so the step path never reads;
  a stale head shows up as a unique violation on ``(execution_id, seq)``, raised as
  :class:`~tether.errors.ConcurrentWriteError`. A step's checkpoint, its lease check and any
  change of the run's status are one statement, sent in autocommit (one statement is atomic by
  itself), so the usual step commits in one round trip; a step that also releases a claimed
  interrupt runs its statements inside ``BEGIN`` … ``COMMIT``. Steps of concurrent runs on one
  event loop share statements and commits (:mod:`tether.store._postgres_batch`).
- **The claim** of a pending interrupt is one ``UPDATE … RETURNING`` statement. Under READ
  COMMITTED a claimer that finds the row locked by another waits for it to commit and then
  re-checks the ``WHERE`` against the row as the winner left it (Postgres's EvalPlanQual
  recheck), so of any number of concurrent claimers exactly one gets the row back.
- **Time** comes from the database's clock (``now()``): claim leases compare times written by
  different machines, which only one clock can make consistent. Timestamps are
  ``timestamptz``.
- **JSON and state** are ``bytea``: ``jsonb`` rejects ``\\u0000`` and reorders keys; bytes keep
  exactly what :mod:`tether.serde` wrote. Text columns hold any ``str``, NUL included (see
  :mod:`tether.store._postgres_io`).
- **Schema**: ``tether_schema`` records forward-only versions; :meth:`setup` runs under a
  transaction-scoped advisory lock, so processes starting together migrate once.

Connections: a psycopg 3 ``ConnectionPool`` serves the sync methods and an
``AsyncConnectionPool`` per event loop serves the async twins the engine calls, so concurrent
runs in one process overlap their database work. Pools open on first use; connections the
server killed are all replaced at the first checkout that finds one, and a server back from an
outage is connected to at once (:mod:`tether.store._postgres_recovery`). Durability is the
server's: with the default ``synchronous_commit=on`` a committed step survives power loss.

The statements live in :mod:`tether.store._postgres_sql`; how they reach the server (pools,
plans, error translation) in :mod:`tether.store._postgres_io`.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import hashlib
import math
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool

from .._urls import split_store_url
from ..errors import ConfigurationError
from . import _codec
from . import _postgres_sql as q
from ._audit_operations import AuditOperations
from ._checkpointer import PlanCheckpointer
from ._control_operations import ControlOperations
from ._heads import HeadCache
from ._lease_operations import LeaseOperations
from ._leases import Fences
from ._postgres_io import Database, Plan
from ._refusals import schema_too_new
from ._removal_sql import RemovalStatements
from .drivers import Driver

__all__ = ["PostgresCheckpointer"]

SCHEMA_VERSION: Final = q.SCHEMA_VERSION
_MAX_IDENTIFIER_BYTES: Final = 63  # PostgreSQL's NAMEDATALEN - 1


def _target(conninfo: str) -> str:
    """The server as a URL without the password, for messages and ``repr``."""
    info = conninfo_to_dict(conninfo)
    user = info.get("user")
    host = info.get("host") or "localhost"
    port = info.get("port")
    where = f"{host}:{port}" if port else str(host)
    return f"postgresql://{f'{user}@' if user else ''}{where}/{info.get('dbname') or ''}"


def split_url(url: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A ``postgresql://`` URL as libpq's DSN and the constructor's options (its ``schema``
    query parameter moved into ``options``), as :meth:`PostgresCheckpointer.from_url` reads it.

    Raises:
        ConfigurationError: not a Postgres URL, or two different schemas asked for.
    """
    parts = split_store_url(url)
    if parts.scheme.lower() not in ("postgres", "postgresql", "postgresql+psycopg"):
        raise ConfigurationError(f"not a PostgreSQL URL: {parts.scheme!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = dict(options)
    schemas = {v for k, v in query if k == "schema"}
    if "schema" in options:
        schemas.add(options["schema"])
    if len(schemas) > 1:
        raise ConfigurationError(f"conflicting schemas asked for: {sorted(schemas)}")
    if schemas:
        options["schema"] = schemas.pop()
    rest = urlencode([(k, v) for k, v in query if k != "schema"], quote_via=quote)
    return urlunsplit(("postgresql", parts.netloc, parts.path, rest, parts.fragment)), options


class _Statements:
    """The statements of :mod:`._postgres_sql` by name, each rendered for one schema on first
    use (a script as a tuple of statements); the unique keys' names as they are."""

    def __init__(self, render: Callable[[str], bytes]) -> None:
        self._render = render

    def __getattr__(self, name: str) -> Any:
        value = getattr(q, name)
        if name.endswith("_KEY"):
            found: Any = value
        elif isinstance(value, str):
            found = self._render(value)
        elif isinstance(value, RemovalStatements):  # statements by name
            found = RemovalStatements._make(self._render(v) for v in value)
        else:
            found = tuple(self._render(v) for v in value)
        setattr(self, name, found)  # kept: later reads do not come here
        return found


class PostgresCheckpointer(AuditOperations, LeaseOperations, ControlOperations, PlanCheckpointer):
    """Checkpoints in a PostgreSQL database (psycopg 3), safe for many processes and machines.

    Args:
        dsn_or_pool: a libpq connection string or URL
            (``postgresql://user:password@host:5432/dbname``; percent-encode special
            characters in the password), or a ``psycopg_pool.ConnectionPool`` you own: it
            serves the sync methods and is never closed here, and the async pools connect
            with its ``conninfo`` and ``kwargs``.
        schema: the schema holding tether's tables; created by :meth:`setup` if missing.
        min_size: connections each pool keeps open.
        max_size: the most connections each pool opens (one sync pool, plus one async pool per
            event loop in use).
        timeout_seconds: how long an operation waits for a free connection (or for the
            server to accept one) before :class:`~tether.errors.StoreUnavailableError`.
        connect_timeout_seconds: libpq's ``connect_timeout`` for each new connection, unless
            the DSN sets one.
        compress_state_min_bytes: a full snapshot of a row's state of at least this many
            bytes is stored Zstandard-compressed when that saves at least a tenth (default 512;
            ``None`` stores every payload as plain JSON); a delta only from 16 KB as well, since
            every resume replays the deltas (docs/storage.md). Reading handles both.
        **connect_kwargs: further libpq / psycopg connection parameters (``sslmode``,
            ``application_name``...), overriding the DSN.

    The schema is created or migrated on first use (or by calling :meth:`setup`). Every
    method raises :class:`~tether.errors.StoreError` subclasses, never driver errors:
    :class:`~tether.errors.StoreUnavailableError` when the server cannot be reached or a
    connection is lost mid-operation (the message names the server and backend pid),
    :class:`~tether.errors.RecordRejectedError` when the server refuses a value (a constraint,
    a key too large for an index, a character the database's encoding lacks; retrying fails
    the same way), :class:`~tether.errors.ConcurrentWriteError` when another writer won,
    :class:`~tether.errors.SchemaVersionError` when the schema is newer than this tether,
    :class:`~tether.errors.CorruptRecordError` when tables or rows are not what tether wrote.

    Raises:
        ConfigurationError: a malformed DSN, schema name or pool size, or
            ``compress_state_min_bytes`` neither ``None`` nor a positive integer.
    """

    def __init__(
        self,
        dsn_or_pool: str | ConnectionPool[Any],
        *,
        schema: str = "tether",
        min_size: int = 1,
        max_size: int = 10,
        timeout_seconds: float = 30.0,
        connect_timeout_seconds: float = 10.0,
        compress_state_min_bytes: int | None = _codec.COMPRESS_MIN_BYTES,
        **connect_kwargs: Any,
    ) -> None:
        if (
            not isinstance(schema, str)
            or not schema
            or "\x00" in schema
            or len(schema.encode()) > _MAX_IDENTIFIER_BYTES
        ):
            raise ConfigurationError(
                f"schema must be a non-empty name of at most 63 bytes, got {schema!r}"
            )
        if min_size < 0 or max_size < max(1, min_size):
            raise ConfigurationError(
                f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}"
            )
        self.compress_state_min_bytes = _codec.check_compress_min_bytes(compress_state_min_bytes)
        pool: ConnectionPool[Any] | None = None
        if isinstance(dsn_or_pool, ConnectionPool):
            pool = dsn_or_pool
            if not isinstance(pool.conninfo, str) or callable(pool.kwargs):
                raise ConfigurationError(
                    "a ConnectionPool passed in needs a str conninfo and a dict of kwargs"
                )
            conninfo = pool.conninfo
            kwargs: dict[str, Any] = {**(pool.kwargs or {}), "autocommit": True}
        elif isinstance(dsn_or_pool, str):
            conninfo = dsn_or_pool
            kwargs = {"autocommit": True, "fallback_application_name": "tether"}
        else:
            raise ConfigurationError(
                f"dsn_or_pool must be a connection string or a psycopg_pool.ConnectionPool, "
                f"got {type(dsn_or_pool).__name__}"
            )
        try:
            target = _target(conninfo)
            given = conninfo_to_dict(conninfo)
        except psycopg.Error as exc:
            raise ConfigurationError(f"not a PostgreSQL connection string: {exc}") from exc
        if "connect_timeout" not in given and "connect_timeout" not in connect_kwargs:
            kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout_seconds))
        kwargs["client_encoding"] = "utf8"
        kwargs.update(connect_kwargs)
        self.schema = schema
        self.timeout_seconds = timeout_seconds
        self._target = target
        self._heads = HeadCache()
        self._fences = Fences()
        self._rendered: dict[str, bytes] = {}
        self._sql = _Statements(self._q)
        digest = hashlib.sha256(f"tether-migrations:{schema}".encode()).digest()
        self._lock_key = int.from_bytes(digest[:8], "big", signed=True)
        self._db = Database(
            conninfo,
            kwargs,
            sync_pool=pool,
            min_size=min_size,
            max_size=max_size,
            timeout_seconds=timeout_seconds,
            target=target,
            name=f"tether-{schema}",
            setup=self._setup_plan,
            schema=self._q("{schema}"),
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> PostgresCheckpointer:
        """Open the store a ``postgresql://`` URL names.

        Args:
            url: ``postgresql://user:password@host:port/dbname`` (also ``postgres://`` and
                ``postgresql+psycopg://``); a ``schema`` query parameter picks the schema and
                other query parameters go to libpq (``?sslmode=require``).
            **options: constructor keyword arguments.

        Raises:
            ConfigurationError: not a Postgres URL, or two different schemas asked for.
        """
        dsn, options = split_url(url, options)
        return cls(dsn, **options)

    _db: Database

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({self._target!r}, schema={self.schema!r})"

    @property
    def driver(self) -> Driver:
        """What runs plans on this store's pools, as its own operations do (reconnects, error
        translation): for an integration that keeps its own tables in the store
        (:mod:`tether.store.drivers`)."""
        return self._db

    def render_sql(self, template: str) -> bytes:
        """``template`` (a statement in Postgres's dialect, ``{schema}`` where the schema's
        name goes, as :mod:`tether.store.langgraph_sql` writes them) rendered for this store's
        schema, as the bytes its driver sends; cached."""
        return self._q(template)

    def _q(self, template: str) -> bytes:
        query = self._rendered.get(template)
        if query is None:
            query = SQL(template).format(schema=Identifier(self.schema)).as_bytes(None)
            self._rendered[template] = query
        return query

    # --- listings (tether.store._listing) -----------------------------------------------
    def _listing_rows(self, sql: str, args: builtins.list[Any]) -> builtins.list[tuple[Any, ...]]:
        return self._db.run("listing", self._all(self._q(sql.replace("?", "%s")), tuple(args)))

    def _listing_time(self, when: _dt.datetime) -> Any:
        return when

    # --- schema and pools -----------------------------------------------------------------
    def _setup_plan(self) -> Plan[None]:
        # A schema already at this version is only read: no lock, no DDL, so a role that may
        # only SELECT (a dashboard's, a hot standby's) reads the store, and readers never
        # queue behind another process's migration (docs/storage.md, Postgres).
        if (yield self._q(q.SELECT_SCHEMA_TABLE_EXISTS), (self.schema,)).one() is not None:
            found = (yield self._q(q.SELECT_SCHEMA_VERSION), None).rows[0][0] or 0
            if found > q.SCHEMA_VERSION:
                raise schema_too_new(
                    f"schema {self.schema!r} on {self._target}", found, q.SCHEMA_VERSION
                )
            if found == q.SCHEMA_VERSION:
                return
        yield self._q(q.LOCK_MIGRATIONS), (self._lock_key,)
        if (yield self._q(q.SELECT_SCHEMA_EXISTS), (self.schema,)).one() is None:
            yield self._q(q.CREATE_SCHEMA), None
        yield self._q(q.CREATE_SCHEMA_TABLE), None
        found = (yield self._q(q.SELECT_SCHEMA_VERSION), None).rows[0][0] or 0
        if found > q.SCHEMA_VERSION:
            raise schema_too_new(
                f"schema {self.schema!r} on {self._target}", found, q.SCHEMA_VERSION
            )
        for version in range(found + 1, q.SCHEMA_VERSION + 1):
            for statement in q.MIGRATIONS[version]:
                yield self._q(statement), None
            yield self._q(q.INSERT_SCHEMA_VERSION), (version,)

    def setup(self) -> None:
        """Create the schema or migrate it forward; refuse a newer one.

        Safe when many processes call it at once: the migration transaction holds a
        transaction-scoped advisory lock. Runs by itself on first use; call it to fail early.

        Raises:
            SchemaVersionError: the schema records a version newer than this tether's.
            StoreUnavailableError: the server cannot be reached.
        """
        self._db.setup()

    async def asetup(self) -> None:
        """Async :meth:`setup`."""
        await self._db.asetup()

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        row = self._db.run("schema_version", self._one(self._sql.SELECT_SCHEMA_VERSION, None))
        return int(row[0] or 0) if row else 0

    def close(self) -> None:
        """Close the pools this checkpointer opened (a pool passed in stays open). A later
        call opens them again."""
        self._db.close()

    async def aclose(self) -> None:
        """Async :meth:`close`: awaits the running event loop's pool."""
        await self._db.aclose()

    def pool_stats(self) -> dict[str, int]:
        """Connection use: ``sync_in_use`` / ``async_in_use`` (checked out now),
        ``sync_max_in_use`` / ``async_max_in_use`` (most at once since opening),
        ``async_pools`` (event loops with a pool), and group commit: ``async_batches``
        (multi-row step statements written) and ``async_batched_steps`` (the steps they held;
        see :mod:`tether.store._postgres_batch`)."""
        return self._db.stats()
