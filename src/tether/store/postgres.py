"""Postgres checkpointer: many processes and machines on one database (DESIGN section 7).

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
import time
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool

from ..audit import AuditEntry
from ..checkpoint import Checkpoint
from ..errors import ConfigurationError
from . import _codec, _listing
from . import _postgres_sql as q
from ._database_errors import postgres_constraint
from ._langgraph_sql import POSTGRES_PRUNE_THREADS
from ._leases import Fences, creation_lease_seconds
from ._listing import Listings
from ._postgres_audit import PostgresAudit, audit_named_params
from ._postgres_batch import StepInsert
from ._postgres_control import PostgresControl
from ._postgres_io import Database, Plan, Result, last
from ._postgres_leases import PostgresLeases
from ._refusals import claim_taken_over, run_exists, schema_too_new, step_taken
from .base import PendingInterrupt, PruneResult, RunRecord, RunStatus

__all__ = ["PostgresCheckpointer"]

SCHEMA_VERSION: Final = q.SCHEMA_VERSION
_NO_SEQ: Final = 2**62  # "below any seq" for q.SELECT_LAST_PATH without before_seq
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
    parts = urlsplit(url)
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


class PostgresCheckpointer(PostgresLeases, PostgresAudit, Listings, PostgresControl):
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
        compress_state_min_bytes: a row's encoded state (a full snapshot or a delta) of at
            least this many bytes is stored Zstandard-compressed when that saves at least a tenth
            (default 512; ``None`` stores every payload as plain JSON). Reading handles both.
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
        self._heads = _codec.HeadCache()
        self._fences = Fences()
        self._rendered: dict[str, bytes] = {}
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

    def __repr__(self) -> str:
        return f"PostgresCheckpointer({self._target!r}, schema={self.schema!r})"

    def _q(self, template: str) -> bytes:
        query = self._rendered.get(template)
        if query is None:
            query = SQL(template).format(schema=Identifier(self.schema)).as_bytes(None)
            self._rendered[template] = query
        return query

    # --- schema and pools -----------------------------------------------------------------
    def _setup_plan(self) -> Plan[None]:
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
        row = self._db.run("schema_version", self._one(q.SELECT_SCHEMA_VERSION, None))
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

    # --- small plans ----------------------------------------------------------------------
    def _one(self, template: str, params: Any) -> Plan[tuple[Any, ...] | None]:
        return (yield self._q(template), params).one()

    def _all(self, template: str, params: Any) -> Plan[builtins.list[tuple[Any, ...]]]:
        return (yield self._q(template), params).rows

    def _count(self, template: str, params: Any) -> Plan[int]:
        return (yield self._q(template), params).rowcount

    # --- runs -----------------------------------------------------------------------------
    def _create_run_plan(self, run: RunRecord, lease_seconds: float | None) -> Plan[RunRecord]:
        lease = creation_lease_seconds(run, lease_seconds)  # refused before any I/O
        return self._insert_run_plan(run, lease)

    def _insert_run_plan(self, run: RunRecord, lease_seconds: float | None) -> Plan[RunRecord]:
        params = (
            run.execution_id,
            run.runner_name,
            run.runner_kind,
            run.status,
            _codec.dump_json(run.input, "input"),
            run.parent_execution_id,
            run.parent_checkpoint_id,
            run.owner,
            lease_seconds,
            run.app_version,
        )
        try:
            res: Result = yield self._q(q.INSERT_RUN), params
        except pg_errors.UniqueViolation as exc:
            if postgres_constraint(exc) != q.RUN_KEY:
                raise  # a constraint of the operator's: rejected, by the rule
            raise run_exists(run.execution_id) from exc
        created, expires = res.rows[0]
        run.created_at = run.updated_at = _codec.ts_to_dt(created)
        run.lease_expires_at = _codec.ts_to_dt(expires)
        return run

    def create_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        """Insert a new run; one with an ``owner`` is leased to it for ``lease_seconds``
        (server clock) by the same statement.

        Raises:
            ConfigurationError: a run with this execution_id already exists, or an owner was
                given without ``lease_seconds``.
        """
        plan = self._create_run_plan(run, lease_seconds)
        out = self._db.run("create_run", plan, execution_id=run.execution_id)
        self._heads.reset(run.execution_id, _codec.empty_head())
        return out

    async def acreate_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        out = await self._db.arun(
            "create_run", self._create_run_plan(run, lease_seconds), execution_id=run.execution_id
        )
        self._heads.reset(run.execution_id, _codec.empty_head())
        return out

    def get_run(self, execution_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        row = self._db.run("get_run", self._one(q.SELECT_RUN, (execution_id,)))
        return None if row is None else _listing.read_run(row)

    async def aget_run(self, execution_id: str) -> RunRecord | None:
        row = await self._db.arun("get_run", self._one(q.SELECT_RUN, (execution_id,)))
        return None if row is None else _listing.read_run(row)

    # --- listings (tether.store._listing) -----------------------------------------------
    def _listing_rows(self, sql: str, args: builtins.list[Any]) -> builtins.list[tuple[Any, ...]]:
        return self._db.run("listing", self._all(sql.replace("?", "%s"), tuple(args)))

    def _listing_time(self, when: _dt.datetime) -> Any:
        return when

    def _status_plan(self, execution_id: str, status: RunStatus, error: str | None) -> Plan[int]:
        return (yield from self._count(q.UPDATE_RUN_STATUS, (status, error, status, execution_id)))

    def set_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        """Record a status change that comes with no checkpoint."""
        self._db.run(
            "set_run_status",
            self._status_plan(execution_id, status, error),
            execution_id=execution_id,
        )

    async def aset_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        await self._db.arun(
            "set_run_status",
            self._status_plan(execution_id, status, error),
            execution_id=execution_id,
        )

    # --- checkpoints ----------------------------------------------------------------------
    def _raw_state_plan(self, row: tuple[Any, ...]) -> Plan[dict[str, Any]]:
        if row[7] == "full":
            return _codec.apply_row_of(row[1], row[2], {}, "full", row[8])
        chain = yield self._q(q.SELECT_STATE_CHAIN), (row[1], row[9], row[2])
        return _codec.replay_state(chain.rows, row[1])

    def _head_plan(self, execution_id: str) -> Plan[_codec.Head | None]:
        head = self._heads.get(execution_id)
        if head is not None:
            return head
        row = (yield self._q(q.SELECT_LAST), (execution_id,)).one()
        if row is None:
            return None
        raw = yield from self._raw_state_plan(row)
        return _codec.head_from_raw(row[2], row[9], raw, row[2] - row[9])

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
        """Insert ``cp`` (setting the run's status in the same statement when ``run_status``
        is given, and giving ``release_lease_of``'s lease back with it); ``final`` when it is
        the plan's last statement (see :func:`last`)."""
        head = yield from self._head_plan(cp.execution_id)
        params, new_head = _codec.checkpoint_params(
            cp, head, force_full=force_full, compress_min_bytes=self.compress_state_min_bytes
        )
        try:
            stmt = self._insert_statement(cp, params, run_status, error, release_lease_of)
            if final and run_status is None:
                # The usual step: it may share a statement with other runs' steps.
                fence = stmt[1][18:20] if len(stmt[1]) > 18 else (None, None)  # (run, owner)
                step = StepInsert(last(*stmt), self._q("{schema}"), (*params, *fence))
                res: Result = yield step  # type: ignore[misc]
            else:
                res = yield last(*stmt) if final else stmt
        except pg_errors.UniqueViolation as exc:
            if postgres_constraint(exc) != q.STEP_KEY:
                raise  # a constraint of the operator's: rejected, by the rule
            self._heads.drop(cp.execution_id)
            raise step_taken(cp) from exc
        self._check_fenced(cp, res)
        cp.created_at = _codec.ts_to_dt(res.rows[0][0])
        return new_head

    def _release_plan(self, execution_id: str, owner: str) -> Plan[None]:
        if (yield self._q(q.DELETE_PENDING_OF), (execution_id, owner)).rowcount != 1:
            self._heads.drop(execution_id)
            raise claim_taken_over(execution_id)

    def _put_plan(
        self,
        cp: Checkpoint,
        run_status: RunStatus | None,
        error: str | None,
        release_claim_of: str | None,
        force_full: bool,
        release_lease_of: str | None = None,
    ) -> Plan[_codec.Head]:
        # Usually the insert is the whole plan, so the step commits in one round trip.
        if release_claim_of is not None:
            yield from self._release_plan(cp.execution_id, release_claim_of)
        if run_status is None:
            release_lease_of = None  # only the status update carries the release
        head = yield from self._insert_plan(
            cp,
            force_full=force_full,
            run_status=run_status,
            error=error,
            final=True,
            release_lease_of=release_lease_of,
        )
        if release_lease_of is not None:
            self._fences.drop(cp.execution_id, release_lease_of)
        return head

    def put(
        self,
        checkpoint: Checkpoint,
        *,
        run_status: RunStatus | None = None,
        error: str | None = None,
        release_claim_of: str | None = None,
        force_full: bool = False,
        release_lease_of: str | None = None,
    ) -> Checkpoint:
        """Append a checkpoint in one transaction, assigning ``seq``, ``checkpoint_id`` and
        ``created_at`` (see :meth:`tether.store.base.Checkpointer.put`).

        Args:
            checkpoint: the record; its ``state_snapshot`` is the full state.
            run_status: also set the run's status (``completed``/``failed`` stamp
                ``finished_at``).
            error: the run's error text, with ``run_status="failed"``.
            release_claim_of: the claimer whose pending interrupt this step answers; its
                pending row is deleted in the same transaction.
            force_full: store a full snapshot rather than a delta.
            release_lease_of: with ``run_status``, the holder of the run's lease, which this
                commit gives back (it ends the drive).

        Raises:
            ConcurrentWriteError: another writer appended this step first, or the claim was
                taken over.
            SerializationError: the state holds a value JSON cannot store (nothing written).
        """
        plan = self._put_plan(
            checkpoint, run_status, error, release_claim_of, force_full, release_lease_of
        )
        eid = checkpoint.execution_id
        self._heads.set(eid, self._db.run("put", plan, write=True, execution_id=eid))
        return checkpoint

    async def aput(
        self,
        checkpoint: Checkpoint,
        *,
        run_status: RunStatus | None = None,
        error: str | None = None,
        release_claim_of: str | None = None,
        force_full: bool = False,
        release_lease_of: str | None = None,
    ) -> Checkpoint:
        plan = self._put_plan(
            checkpoint, run_status, error, release_claim_of, force_full, release_lease_of
        )
        eid = checkpoint.execution_id
        self._heads.set(eid, await self._db.arun("put", plan, write=True, execution_id=eid))
        return checkpoint

    def _interrupt_plan(
        self, cp: Checkpoint, release_claim_of: str | None, release_lease_of: str | None = None
    ) -> Plan[tuple[PendingInterrupt, _codec.Head]]:
        pending_context = _codec.dump_json(cp.interrupt_context, "interrupt_context")
        if release_claim_of is not None:
            yield from self._release_plan(cp.execution_id, release_claim_of)
        else:
            yield self._q(q.DELETE_PENDING), (cp.execution_id,)
        head = yield from self._insert_plan(cp)
        params = (
            cp.execution_id,
            cp.checkpoint_id,
            cp.node_id,
            cp.agent_path,
            cp.interrupt_reason or "",
            pending_context,
            _codec.pending_due_seconds(cp),
        )
        created = (yield self._q(q.INSERT_PENDING), params).rows[0][0]
        rel = release_lease_of
        yield (
            self._q(q.UPDATE_RUN_STATUS_GIVE_BACK),
            ("paused", None, "paused", rel, rel, rel, cp.execution_id),
        )
        if rel is not None:
            self._fences.drop(cp.execution_id, rel)
        pending = PendingInterrupt(
            execution_id=cp.execution_id,
            checkpoint_id=cp.checkpoint_id,
            node_id=cp.node_id,
            reason=cp.interrupt_reason or "",
            context=cp.interrupt_context,
            agent_path=cp.agent_path,
            created_at=_codec.ts_to_dt(created),
            due_at=_codec.due_at(created, params[-1]),
        )
        return pending, head

    def record_interrupt(
        self,
        checkpoint: Checkpoint,
        *,
        release_claim_of: str | None = None,
        release_lease_of: str | None = None,
    ) -> PendingInterrupt:
        """Write an ``interrupted`` checkpoint and its pending-interrupt row in one
        transaction and mark the run ``paused``.

        Raises:
            ConcurrentWriteError: as :meth:`put`.
        """
        eid = checkpoint.execution_id
        plan = self._interrupt_plan(checkpoint, release_claim_of, release_lease_of)
        pending, head = self._db.run("record_interrupt", plan, write=True, execution_id=eid)
        self._heads.set(eid, head)
        return pending

    async def arecord_interrupt(
        self,
        checkpoint: Checkpoint,
        *,
        release_claim_of: str | None = None,
        release_lease_of: str | None = None,
    ) -> PendingInterrupt:
        eid = checkpoint.execution_id
        plan = self._interrupt_plan(checkpoint, release_claim_of, release_lease_of)
        pending, head = await self._db.arun("record_interrupt", plan, write=True, execution_id=eid)
        self._heads.set(eid, head)
        return pending

    def _last_plan(
        self, execution_id: str, before_seq: int | None, agent_path_prefix: str | None
    ) -> Plan[tuple[Checkpoint | None, _codec.Head | None]]:
        if agent_path_prefix is not None:
            path = agent_path_prefix.rstrip("/")
            seq = before_seq if before_seq is not None else _NO_SEQ
            row = yield from self._one(q.SELECT_LAST_PATH, (execution_id, seq, path, path + "/"))
        elif before_seq is not None:
            row = yield from self._one(q.SELECT_LAST_BEFORE, (execution_id, before_seq))
        else:
            row = yield from self._one(q.SELECT_LAST, (execution_id,))
        if row is None:
            return None, None
        raw = yield from self._raw_state_plan(row)
        cp = _codec.checkpoint_from_row(row, _codec.decode_state(raw))
        if agent_path_prefix is not None or before_seq is not None:
            return cp, None
        # Whoever reads a run's newest row is about to continue it: refresh the writer's
        # head, which another process may have moved on.
        return cp, _codec.head_from_raw(row[2], row[9], raw, row[2] - row[9])

    def get_last(
        self,
        execution_id: str,
        *,
        before_seq: int | None = None,
        agent_path_prefix: str | None = None,
    ) -> Checkpoint | None:
        """The highest-seq checkpoint (below ``before_seq``, under ``agent_path_prefix``, if
        given) with its full state; ``None`` if there is none."""
        cp, head = self._db.run(
            "get_last", self._last_plan(execution_id, before_seq, agent_path_prefix)
        )
        if head is not None:
            self._heads.set(execution_id, head)
        return cp

    async def aget_last(
        self,
        execution_id: str,
        *,
        before_seq: int | None = None,
        agent_path_prefix: str | None = None,
    ) -> Checkpoint | None:
        cp, head = await self._db.arun(
            "get_last", self._last_plan(execution_id, before_seq, agent_path_prefix)
        )
        if head is not None:
            self._heads.set(execution_id, head)
        return cp

    def _resumable_plan(
        self, execution_id: str
    ) -> Plan[tuple[Checkpoint | None, str | None, _codec.Head | None]]:
        rows = (yield self._q(q.SELECT_NEWEST_TWO), (execution_id,)).rows
        if not rows:
            return None, None, None
        if _codec.resumable_lies_further_back(rows):
            older = (execution_id, min(r[2] for r in rows))
            rows += (yield self._q(q.SELECT_RESUMABLE_BEFORE), older).rows
        bounds = _codec.state_chain_bounds(rows)
        chain = (yield self._q(q.SELECT_STATE_CHAIN), (execution_id, *bounds)).rows
        return _codec.resume_point(rows, chain)

    def get_resumable(self, execution_id: str) -> tuple[Checkpoint | None, str | None]:
        """The row a resume re-enters: the run's newest row that is not a run-end marker,
        with its full state, in two round trips: the two newest rows, then the state chain
        from the snapshot under them up to the newest, as ``(seq, state_kind, state)`` only
        (one more first when both are run-end markers). Also refreshes the writer's head, as
        :meth:`get_last` does.

        Returns:
            ``(checkpoint, ended)``: the checkpoint (``None`` when the run has no row but
            run-end markers, or no row at all), and the newest row's status when that row is a
            run-end marker (``"completed"`` or ``"failed"``), else ``None``.

        Raises:
            CorruptRecordError: the run's stored state chain is broken.
            StoreUnavailableError: the database cannot be reached.
        """
        cp, ended, head = self._db.run("get_resumable", self._resumable_plan(execution_id))
        if head is not None:
            self._heads.set(execution_id, head)
        return cp, ended

    async def aget_resumable(self, execution_id: str) -> tuple[Checkpoint | None, str | None]:
        cp, ended, head = await self._db.arun("get_resumable", self._resumable_plan(execution_id))
        if head is not None:
            self._heads.set(execution_id, head)
        return cp, ended

    def _checkpoint_plan(self, execution_id: str, checkpoint_id: str) -> Plan[Checkpoint | None]:
        row = yield from self._one(q.SELECT_BY_ID, (execution_id, checkpoint_id))
        if row is None:
            return None
        raw = yield from self._raw_state_plan(row)
        return _codec.checkpoint_from_row(row, _codec.decode_state(raw))

    def get_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One checkpoint of the run by id, with its full state; ``None`` if absent."""
        return self._db.run("get_checkpoint", self._checkpoint_plan(execution_id, checkpoint_id))

    async def aget_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        return await self._db.arun(
            "get_checkpoint", self._checkpoint_plan(execution_id, checkpoint_id)
        )

    def list(
        self, execution_id: str, *, agent_path_prefix: str | None = None
    ) -> builtins.list[Checkpoint]:
        """Every checkpoint of the run in seq order, each with its full state, optionally
        only those written under ``agent_path_prefix``."""
        rows = self._db.run("list", self._all(q.SELECT_ALL, (execution_id,)))
        return _codec.checkpoints_from_rows(rows, agent_path_prefix)

    # --- pending interrupts ---------------------------------------------------------------
    def get_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        """The run's pending interrupt, claimed or not; ``None`` if it has none."""
        row = self._db.run("get_pending_interrupt", self._one(q.SELECT_PENDING, (execution_id,)))
        return None if row is None else _codec.pending_from_row(row)

    async def aget_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        row = await self._db.arun(
            "get_pending_interrupt", self._one(q.SELECT_PENDING, (execution_id,))
        )
        return None if row is None else _codec.pending_from_row(row)

    def _claim_plan(
        self,
        execution_id: str,
        owner: str,
        resume_value: dict[str, Any] | None,
        lease_seconds: float,
        steal_from: str | None,
        checkpoint_id: str | None,
        audit: AuditEntry | None,
    ) -> Plan[PendingInterrupt | None]:
        params = {
            "owner": owner,
            "lease": float(lease_seconds),
            "value": _codec.dump_json(resume_value, "resume_value"),
            "eid": execution_id,
            "steal": steal_from,
            "cid": checkpoint_id,
        }
        statement = q.CLAIM_PENDING
        if audit is not None and resume_value is not None:
            statement = q.CLAIM_PENDING_AUDITED
            params.update(audit_named_params(audit))
        row = yield from self._one(statement, params)
        return None if row is None else _codec.pending_from_row(row)

    def claim_interrupt(
        self,
        execution_id: str,
        *,
        owner: str,
        resume_value: dict[str, Any] | None,
        lease_seconds: float,
        steal_from: str | None = None,
        checkpoint_id: str | None = None,
        audit: AuditEntry | None = None,
    ) -> PendingInterrupt | None:
        """Atomically claim the run's pending interrupt: one statement, exactly one of any
        number of concurrent callers (processes, machines) wins.

        Args:
            execution_id: the paused run.
            owner: the claimer's id (``host:pid:nonce``).
            resume_value: the answer to store; ``None`` to pick up an answer already stored
                whose claimer died (lease lapsed, or ``steal_from`` names it).
            lease_seconds: how long the claim holds without renewal (database clock).
            steal_from: a claimer known to be dead.
            checkpoint_id: claim only the question recorded at this interrupted checkpoint
                (``None``: whichever is pending).
            audit: the entry recording ``resume_value`` in the run's audit trail, appended
                by the same statement when the claim stores the answer.

        Returns:
            The claimed row with the stored answer, or ``None`` if the caller lost. The run is
            marked ``running`` in the same statement.
        """
        plan = self._claim_plan(
            execution_id, owner, resume_value, lease_seconds, steal_from, checkpoint_id, audit
        )
        return self._db.run("claim_interrupt", plan, execution_id=execution_id)

    async def aclaim_interrupt(
        self,
        execution_id: str,
        *,
        owner: str,
        resume_value: dict[str, Any] | None,
        lease_seconds: float,
        steal_from: str | None = None,
        checkpoint_id: str | None = None,
        audit: AuditEntry | None = None,
    ) -> PendingInterrupt | None:
        plan = self._claim_plan(
            execution_id, owner, resume_value, lease_seconds, steal_from, checkpoint_id, audit
        )
        return await self._db.arun("claim_interrupt", plan, execution_id=execution_id)

    delete_pending_interrupt_atomic = claim_interrupt
    """The contract's name for :meth:`claim_interrupt` (DESIGN section 7)."""

    def renew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        """Extend a claim this owner holds; ``False`` if it no longer holds it."""
        plan = self._count(q.RENEW_CLAIM, (float(lease_seconds), execution_id, owner))
        return self._db.run("renew_claim", plan, execution_id=execution_id) == 1

    async def arenew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        plan = self._count(q.RENEW_CLAIM, (float(lease_seconds), execution_id, owner))
        return await self._db.arun("renew_claim", plan, execution_id=execution_id) == 1

    def release_claim(self, execution_id: str, *, owner: str) -> bool:
        """Give a claim back, keeping the stored answer; the run turns ``paused`` again.
        ``False`` if this owner held no claim."""
        row = self._db.run(
            "release_claim",
            self._one(q.RELEASE_CLAIM, (execution_id, owner)),
            execution_id=execution_id,
        )
        return bool(row and row[0] == 1)

    async def arelease_claim(self, execution_id: str, *, owner: str) -> bool:
        row = await self._db.arun(
            "release_claim",
            self._one(q.RELEASE_CLAIM, (execution_id, owner)),
            execution_id=execution_id,
        )
        return bool(row and row[0] == 1)

    def answer_interrupt(
        self,
        execution_id: str,
        resume_value: dict[str, Any],
        *,
        checkpoint_id: str | None = None,
        audit: AuditEntry | None = None,
    ) -> bool:
        """Store an answer without claiming; ``False`` if the interrupt is gone, answered or
        claimed, or (given ``checkpoint_id``) is not the question recorded at it. ``audit``
        is appended to the run's audit trail by the same statement when the answer is
        stored."""
        params = {
            "value": _codec.dump_json(resume_value, "resume_value"),
            "eid": execution_id,
            "cid": checkpoint_id,
            **audit_named_params(audit),
        }
        row = self._db.run(
            "answer_interrupt", self._one(q.ANSWER_PENDING, params), execution_id=execution_id
        )
        return bool(row and row[0] == 1)

    # --- idempotency ----------------------------------------------------------------------
    def get_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        """``(True, value)`` on a hit (a cached ``None`` is a hit), else ``(False, None)``."""
        row = self._db.run("get_idempotent", self._one(q.SELECT_IDEMPOTENT, (execution_id, key)))
        return (False, None) if row is None else (True, _codec.load_json(row[0]))

    async def aget_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        row = await self._db.arun(
            "get_idempotent", self._one(q.SELECT_IDEMPOTENT, (execution_id, key))
        )
        return (False, None) if row is None else (True, _codec.load_json(row[0]))

    def _put_idempotent_plan(self, execution_id: str, key: str, value: Any) -> Plan[Any]:
        data = _codec.dump_json(value, "result")
        yield self._q(q.INSERT_IDEMPOTENT), (execution_id, key, data)
        # A second statement sees a row another writer committed first (READ COMMITTED).
        row = yield from self._one(q.SELECT_IDEMPOTENT, (execution_id, key))
        return None if row is None else _codec.load_json(row[0])

    def put_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        """Cache a result; if another writer cached this key first, keep and return theirs.

        Raises:
            SerializationError: the value cannot be stored as JSON.
        """
        plan = self._put_idempotent_plan(execution_id, key, value)
        return self._db.run("put_idempotent", plan, write=True, execution_id=execution_id)

    async def aput_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        plan = self._put_idempotent_plan(execution_id, key, value)
        return await self._db.arun("put_idempotent", plan, write=True, execution_id=execution_id)

    def list_idempotent(self, execution_id: str) -> dict[str, Any]:
        """The run's whole idempotency cache, ``{key: value}``."""
        rows = self._db.run("list_idempotent", self._all(q.SELECT_IDEMPOTENT_ALL, (execution_id,)))
        return {k: _codec.load_json(v) for k, v in rows}

    # --- maintenance ----------------------------------------------------------------------
    def _prune_plan(self, cutoff: _dt.datetime, dry_run: bool) -> Plan[PruneResult]:
        rows = yield from self._all(q.SELECT_PRUNABLE if dry_run else q.LOCK_PRUNABLE, (cutoff,))
        ids = [r[0] for r in rows]
        result = PruneResult(runs=len(ids), execution_ids=ids)
        if not ids:
            return result
        if dry_run:
            result.checkpoints = (yield self._q(q.COUNT_CHECKPOINTS_OF), (ids,)).rows[0][0]
            result.idempotency = (yield self._q(q.COUNT_IDEMPOTENT_OF), (ids,)).rows[0][0]
            return result
        result.checkpoints = yield from self._count(q.DELETE_CHECKPOINTS_OF, (ids,))
        result.idempotency = yield from self._count(q.DELETE_IDEMPOTENT_OF, (ids,))
        yield self._q(q.DELETE_PENDING_OF_RUNS), (ids,)
        for statement in POSTGRES_PRUNE_THREADS:  # a LangGraph run's thread
            yield self._q(statement), (ids,)
        yield self._q(q.DELETE_AUDIT_OF_RUNS), (ids,)
        yield self._q(q.DELETE_RUNS), (ids,)
        return result

    def prune(
        self, older_than: _dt.timedelta | _dt.datetime, *, dry_run: bool = False
    ) -> PruneResult:
        """Delete finished (completed or failed) runs whose end is older than the cutoff,
        whole: run row, checkpoints, idempotency cache. Never touches a paused or running
        run, nor a failed run resumed while pruning (its row is locked and re-checked).

        Args:
            older_than: an age (``timedelta``, from this machine's clock) or an absolute UTC
                cutoff (aware ``datetime``).
            dry_run: count what would go, delete nothing.

        Returns:
            Counts of runs, checkpoints and idempotency rows deleted, and the run ids.

        Raises:
            ConfigurationError: a naive datetime or another type of cutoff.
        """
        cutoff = _dt.datetime.fromtimestamp(_codec.prune_cutoff(older_than, time.time()), _dt.UTC)
        result = self._db.run("prune", self._prune_plan(cutoff, dry_run), write=True)
        if not dry_run:
            for eid in result.execution_ids:
                self._heads.drop(eid)
        return result
