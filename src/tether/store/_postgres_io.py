"""How the Postgres checkpointer talks to the server: pools, plans, checks and errors.

An operation is written once, as a **plan**: a generator that yields ``(query, params)`` and is
sent each statement's :class:`Result`. :class:`Database` runs a plan on a connection of its
sync pool (:meth:`Database.run`) or of the running event loop's async pool
(:meth:`Database.arun`), so the checkpointer's sync methods and their async twins share every
line of logic and differ only in how they wait. A driver error is thrown into the plan at the
statement that caused it, so the plan can turn it into the error that says what happened
(a unique violation on ``(execution_id, seq)`` is another writer's step); anything it does not
handle becomes a :class:`~tether.errors.StoreError` here, never a raw driver error. A write
plan runs in one transaction, begun before its first statement, unless that statement is
marked as its last (:func:`last`): then it runs alone in autocommit, one round trip.

Async pools are bound to the event loop that opened them (their locks, queues and workers
live there), so there is one per loop, opened on first use and closed when the loop shuts
down (a guard task that ``asyncio.run`` cancels with the rest closes it); a long-lived async
application keeps one. The sync verbs (``Chain.run``) never open one: they run on their
thread's kept loop and do their work on the sync pool (:meth:`Database.arun`).

Connections a server killed (restart, ``pg_terminate_backend``, an idle timeout) are found at
checkout and replaced, all of them at once, and a server back from an outage is connected to
at once: :mod:`tether.store._postgres_recovery`.

Strings: PostgreSQL ``text`` cannot hold NUL. Every ``str`` parameter is written with NUL as
``U+FFFE '0'`` and ``U+FFFE`` itself doubled, and read back the other way. The mapping is
per character and prefix-free, so equality and prefix tests in SQL still hold, and any string
without those two characters (every realistic one) is stored exactly as given.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar, overload

import psycopg
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap
from psycopg.types.string import (
    StrBinaryDumper,
    StrDumperUnknown,
    TextBinaryLoader,
    TextLoader,
)
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from .._context import sync_drive
from ..errors import SerializationError, StoreError
from ._database_errors import Kind, postgres_constraint, postgres_kind, store_error
from ._postgres_batch import Batcher, StepInsert
from ._postgres_recovery import AsyncRecovery, SyncRecovery

T = TypeVar("T")

Statement: TypeAlias = tuple[bytes, Sequence[Any] | None]


@dataclass(slots=True)
class Result:
    """What one statement returned: its rows (empty for commands) and its row count."""

    rows: list[tuple[Any, ...]]
    rowcount: int

    def one(self) -> tuple[Any, ...] | None:
        """The first row, or ``None``."""
        return self.rows[0] if self.rows else None


Plan: TypeAlias = Generator[Statement, Result, T]
"""An operation: yields statements, receives their results, returns its value."""


class _Last(tuple[bytes, Sequence[Any] | None]):
    __slots__ = ()


def last(query: bytes, params: Sequence[Any] | None) -> Statement:
    """Mark a write plan's final statement.

    A write plan whose first statement is also its last runs that statement on its own, in
    autocommit: one statement is atomic by itself, so the step is still one transaction, and
    it costs one round trip instead of three (``BEGIN``, the statement, ``COMMIT``). A plan
    that yields anything after a statement so marked is a bug (:class:`RuntimeError`).
    """
    return _Last((query, params))


# --- NUL-safe text --------------------------------------------------------------------------
_ESC = "\ufffe"
_TEXT_OID = 25
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
_UNESCAPE = re.compile(_ESC + "(.)", re.DOTALL)


def _escape(s: str) -> str:
    if "\x00" in s or _ESC in s:
        return s.replace(_ESC, _ESC + _ESC).replace("\x00", _ESC + "0")
    return s


def _unescape(s: str) -> str:
    if _ESC in s:
        return _UNESCAPE.sub(lambda m: "\x00" if m[1] == "0" else m[1], s)
    return s


def _encode(s: str, encoding: str) -> bytes:
    try:
        if "\x00" in s or _ESC in s:  # rare: checked here to spare most values a call
            return _escape(s).encode(encoding)
        return s.encode(encoding)
    except UnicodeEncodeError as exc:
        raise SerializationError(
            f"text {s[:40]!r} cannot be stored: {exc.reason} at position {exc.start}",
            type_name="str",
        ) from exc


class _TextDumper(StrDumperUnknown):
    def dump(self, obj: str) -> Buffer | None:
        return _encode(obj, self._encoding)


class _TextBinaryDumper(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        return _encode(obj, self._encoding)


class _TextLoader(TextLoader):
    def load(self, data: Buffer) -> bytes | str:
        value = super().load(data)
        return _unescape(value) if isinstance(value, str) else value


class _TextBinaryLoader(TextBinaryLoader):
    def load(self, data: Buffer) -> bytes | str:
        value = super().load(data)
        return _unescape(value) if isinstance(value, str) else value


def _use_text_adapters(adapters: AdaptersMap) -> None:
    # On the cursor's own (copy-on-write) map, so a connection from a pool the caller owns is
    # left as it was.
    adapters.register_dumper(str, _TextBinaryDumper)
    adapters.register_dumper(str, _TextDumper)  # registered last: the default for str
    adapters.register_loader(_TEXT_OID, _TextLoader)
    adapters.register_loader(_TEXT_OID, _TextBinaryLoader)


# --- errors ---------------------------------------------------------------------------------
def _first_line(exc: BaseException) -> str:
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
    msg = _first_line(exc)
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
            f"PostgreSQL {target} is missing tether tables or columns ({msg}) during {what}; "
            "the schema was dropped or altered outside tether"
        )
    elif kind is Kind.CONFLICT:
        text = f"a concurrent transaction on PostgreSQL {target} conflicted with {what}: {msg}"
    elif kind is Kind.REJECTED:
        hint = (exc.diag.message_hint or "").strip().split("\n")[0]
        text = (
            f"PostgreSQL {where} rejected {what}: {msg}{f' ({hint})' if hint else ''} "
            f"(SQLSTATE {exc.sqlstate}); the same call will fail the same way, so change the "
            "value or the constraint rather than retry"
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


# --- the database ---------------------------------------------------------------------------
@dataclass(slots=True, eq=False)
class _LoopPool:
    loop: asyncio.AbstractEventLoop
    pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
    recovery: AsyncRecovery
    guard: asyncio.Task[None] | None = None
    opening: asyncio.Task[None] | None = None
    opened: bool = False
    setup_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    batcher: Batcher | None = None


@dataclass(slots=True)
class _Usage:
    in_use: int = 0
    max_in_use: int = 0


def _close_idle_connections(pool: AsyncConnectionPool[Any]) -> None:
    # For a pool whose loop has closed (nothing can await its close() any more) or is shutting
    # down: PQfinish sends the server a Terminate message and frees the backend now rather
    # than at garbage collection.
    for conn in list(getattr(pool, "_pool", ())):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()


async def _guard(pool: AsyncConnectionPool[Any]) -> None:
    """Hold ``pool`` open for as long as its event loop lives, and close it when cancelled.

    ``asyncio.run`` cancels every task when its coroutine returns. The pool's workers survive a
    cancellation that lands while they run a maintenance task (they catch it to keep the pool
    consistent) and would then wait forever, hanging the loop's shutdown, unless the pool is
    closed: this task is cancelled in that same sweep and closes it.
    """
    try:
        await asyncio.get_running_loop().create_future()
    except asyncio.CancelledError:
        pass
    finally:
        _close_idle_connections(pool)
        with contextlib.suppress(BaseException):
            await pool.close()


_DATABASES: weakref.WeakSet[Database] = weakref.WeakSet()
_FORK_ORPHANS: list[Any] = []


def _forget_pools_after_fork() -> None:
    # A forked child shares its parent's sockets, and the pools' worker threads did not
    # survive the fork. The child must neither use nor close what it inherited: closing sends
    # the server a Terminate message, ending the parent's session. So the child points its
    # copies of the sockets at /dev/null (the parent's are untouched), keeps the objects
    # alive, and opens its own pools on first use.
    conns: list[Any] = []
    for db in list(_DATABASES):
        sync, loops = db._forget()
        _FORK_ORPHANS.append((sync, loops))
        pools = [lp.pool for lp in loops.values()] + ([sync] if sync is not None else [])
        for pool in pools:
            conns.extend(getattr(pool, "_pool", ()))
    if not conns:
        return
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for conn in conns:
            with contextlib.suppress(Exception):
                os.dup2(devnull, conn.pgconn.socket)
    finally:
        os.close(devnull)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_after_fork)


class Database:
    """A sync pool and per-event-loop async pools to one PostgreSQL database.

    Args:
        conninfo: a libpq connection string or URL.
        kwargs: connection keyword arguments (autocommit, connect_timeout...).
        sync_pool: a caller-owned sync pool to use instead of making one (never closed here).
        min_size / max_size: connections per pool.
        timeout_seconds: how long an operation waits for a free connection.
        target: the server as shown in messages (no password).
        name: pool name prefix for psycopg's logs.
        setup: a factory of the plan that creates the schema; it runs once, on first use.
    """

    def __init__(
        self,
        conninfo: str,
        kwargs: dict[str, Any],
        *,
        sync_pool: ConnectionPool[Any] | None,
        min_size: int,
        max_size: int,
        timeout_seconds: float,
        target: str,
        name: str,
        setup: Callable[[], Plan[None]],
    ) -> None:
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.min_size = min_size
        self.max_size = max_size
        self.timeout_seconds = timeout_seconds
        self.target = target
        self.name = name
        self.ready = False
        self._setup = setup
        self._own_sync = sync_pool is None
        self._sync: ConnectionPool[Any] | None = sync_pool
        self._sync_opened = sync_pool is not None
        self._sync_recovery: SyncRecovery | None = None  # None for a caller's pool
        self._loops: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        self._current: _LoopPool | None = None
        self._lock = threading.Lock()
        self._setup_lock = threading.Lock()
        self.sync_usage = _Usage()
        self.async_usage = _Usage()
        _DATABASES.add(self)

    def _forget(self) -> tuple[ConnectionPool[Any] | None, dict[Any, _LoopPool]]:
        """Drop the pools this object opened, without closing them (in a forked child)."""
        dropped = (self._sync if self._own_sync else None, self._loops)
        self._lock = threading.Lock()
        self._setup_lock = threading.Lock()
        self._sync = None if self._own_sync else self._sync
        self._sync_opened = not self._own_sync
        self._loops = {}
        self._current = None
        return dropped

    # --- pools ----------------------------------------------------------------------------
    def _sync_pool(self) -> ConnectionPool[Any]:
        with self._lock:
            if self._sync is None:
                recovery = self._sync_recovery = SyncRecovery()
                self._sync = recovery.pool = ConnectionPool(
                    self.conninfo,
                    kwargs=self.kwargs,
                    min_size=self.min_size,
                    max_size=self.max_size,
                    timeout=self.timeout_seconds,
                    check=recovery.check,
                    reconnect_timeout=0,  # no back-off: recovery.reconnect_failed retries
                    reconnect_failed=recovery.reconnect_failed,
                    open=False,
                    name=f"{self.name}-sync",
                )
            if not self._sync_opened:
                # Waiting for min_size connections keeps the first checkout from growing
                # the pool while they are still being made.
                try:
                    self._sync.open(wait=True, timeout=self.timeout_seconds)
                except PoolTimeout:
                    self._sync = None  # wait() closed it; the next call starts afresh
                    raise
                self._sync_opened = True
                if self._sync_recovery is not None:
                    self._sync_recovery.opening = False
            return self._sync

    def _loop_entry(self) -> _LoopPool:
        """This event loop's pool (made, not opened, on first use)."""
        loop = asyncio.get_running_loop()
        lp = self._current
        if lp is not None and lp.loop is loop:
            return lp
        with self._lock:
            for old in [p for p in self._loops.values() if p.loop.is_closed()]:
                del self._loops[old.loop]
                _close_idle_connections(old.pool)
            lp = self._loops.get(loop)
            if lp is None:
                recovery = AsyncRecovery()
                pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                    self.conninfo,
                    kwargs=self.kwargs,
                    min_size=self.min_size,
                    max_size=self.max_size,
                    timeout=self.timeout_seconds,
                    check=recovery.check,
                    reconnect_timeout=0,  # as the sync pool's
                    reconnect_failed=recovery.reconnect_failed,
                    open=False,
                    name=f"{self.name}-async",
                )
                recovery.pool = pool
                lp = self._loops[loop] = _LoopPool(loop, pool, recovery)
            self._current = lp
            return lp

    async def _open(self, lp: _LoopPool) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if lp.opened:
            return lp.pool
        if lp.opening is None:
            lp.guard = lp.loop.create_task(_guard(lp.pool), name=f"{self.name}-async-guard")
            lp.opening = lp.loop.create_task(
                lp.pool.open(wait=True, timeout=self.timeout_seconds),
                name=f"{self.name}-async-open",
            )
        try:
            await asyncio.shield(lp.opening)  # every first caller waits for the one opening
        except psycopg.Error:
            with self._lock:
                if self._loops.get(lp.loop) is lp:
                    del self._loops[lp.loop]
                if self._current is lp:
                    self._current = None
            if lp.guard is not None:
                lp.guard.cancel()
            raise
        lp.opened = True
        lp.recovery.opening = False
        return lp.pool

    def close(self) -> None:
        """Close every pool this object opened; the next operation opens them again."""
        with self._lock:
            sync, self._sync = self._sync, None
            loops, self._loops = list(self._loops.values()), {}
            self._current = None
            self._sync_opened = False
        if sync is not None:
            if self._own_sync:
                sync.close()
            else:
                self._sync, self._sync_opened = sync, True
        for lp in loops:
            self._close_loop_pool(lp)

    async def aclose(self) -> None:
        """As :meth:`close`, awaiting the running loop's pool."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.pop(loop, None)
            if self._current is mine:
                self._current = None
        if mine is not None and mine.guard is not None:
            mine.guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mine.guard
        self.close()

    def _close_loop_pool(self, lp: _LoopPool) -> None:
        loop, guard = lp.loop, lp.guard
        if loop.is_closed() or guard is None:
            _close_idle_connections(lp.pool)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            guard.cancel()  # close() called from a coroutine on that loop: the guard finishes
        elif loop.is_running():
            loop.call_soon_threadsafe(guard.cancel)
        else:
            guard.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(guard)

    # --- running plans --------------------------------------------------------------------
    @staticmethod
    def _pid(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> int:
        return conn.pgconn.backend_pid

    def setup(self) -> None:
        """Run the schema plan now (sync), whether or not it already ran."""
        with self._setup_lock:
            self._run("setup", self._setup(), write=True, execution_id=None)
            self.ready = True

    async def asetup(self) -> None:
        """Run the schema plan now (async), whether or not it already ran."""
        async with self._loop_entry().setup_lock:
            await self._arun("setup", self._setup(), write=True, execution_id=None)
            self.ready = True

    def run(
        self, op: str, plan: Plan[T], *, write: bool = False, execution_id: str | None = None
    ) -> T:
        """Run ``plan`` on a sync pool connection, in one transaction when ``write``.

        Raises:
            StoreError: any driver error, translated (see :func:`translate`).
        """
        if not self.ready:
            with self._setup_lock:
                if not self.ready:
                    self._run("setup", self._setup(), write=True, execution_id=None)
                    self.ready = True
        return self._run(op, plan, write=write, execution_id=execution_id)

    async def arun(
        self, op: str, plan: Plan[T], *, write: bool = False, execution_id: str | None = None
    ) -> T:
        """Run ``plan`` on a connection of this event loop's async pool (see :meth:`run`).

        Inside a sync verb (:data:`tether._context.sync_drive`) the loop lives for that one
        call: the plan runs on the sync pool instead, which threads and calls share, so a
        sync ``resume`` does not open a connection of its own.
        """
        if sync_drive.get():
            return self.run(op, plan, write=write, execution_id=execution_id)
        if not self.ready:
            async with self._loop_entry().setup_lock:
                if not self.ready:
                    await self._arun("setup", self._setup(), write=True, execution_id=None)
                    self.ready = True
        return await self._arun(op, plan, write=write, execution_id=execution_id)

    def _run(self, op: str, plan: Plan[T], *, write: bool, execution_id: str | None) -> T:
        pid: int | None = None
        usage = self.sync_usage
        try:
            with self._checkout() as conn:
                pid = self._pid(conn)
                with self._lock:
                    usage.in_use += 1
                    usage.max_in_use = max(usage.max_in_use, usage.in_use)
                try:
                    return _drive(conn, plan, write)
                except psycopg.Error as exc:
                    raise self._translate(exc, op, pid, conn.closed, execution_id) from exc
                finally:
                    with self._lock:
                        usage.in_use -= 1
        except psycopg.Error as exc:
            reason = self._diagnose() if isinstance(exc, PoolTimeout) else None
            raise self._translate(exc, op, pid, False, execution_id, reason) from exc
        finally:
            plan.close()

    async def _arun(self, op: str, plan: Plan[T], *, write: bool, execution_id: str | None) -> T:
        pid: int | None = None
        usage = self.async_usage
        lp = self._loop_entry()
        first: Statement | None = None
        alone: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        try:
            pool = await self._open(lp)
            if write:
                try:
                    first = next(plan)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                if isinstance(first, StepInsert):
                    batcher = self._batcher(lp, pool)
                    if batcher.busy():
                        done, value = await self._abatch(batcher, op, plan, first, execution_id)
                        if done:
                            return value
                    else:
                        alone = batcher.alone()
                    first = first.single  # written alone, below
            with alone:
                async with lp.recovery.connection(pool) as conn:
                    pid = self._pid(conn)
                    usage.in_use += 1
                    usage.max_in_use = max(usage.max_in_use, usage.in_use)
                    try:
                        return await _adrive(conn, plan, write, first)
                    except psycopg.Error as exc:
                        raise self._translate(exc, op, pid, conn.closed, execution_id) from exc
                    finally:
                        usage.in_use -= 1
        except psycopg.Error as exc:
            reason = await self._adiagnose() if isinstance(exc, PoolTimeout) else None
            raise self._translate(exc, op, pid, False, execution_id, reason) from exc
        finally:
            plan.close()

    @contextlib.asynccontextmanager
    async def _acounted(
        self, lp: _LoopPool, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of ``pool`` for a flush, counted in :meth:`stats` as any checkout."""
        usage = self.async_usage
        async with lp.recovery.connection(pool) as conn:
            usage.in_use += 1
            usage.max_in_use = max(usage.max_in_use, usage.in_use)
            try:
                yield conn
            finally:
                usage.in_use -= 1

    def _batcher(
        self, lp: _LoopPool, pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]]
    ) -> Batcher:
        if lp.batcher is None:
            lp.batcher = Batcher(lp.loop, lambda: self._acounted(lp, pool), _cursor, self.max_size)
        return lp.batcher

    async def _abatch(
        self,
        batcher: Batcher,
        op: str,
        plan: Plan[T],
        step: StepInsert,
        execution_id: str | None,
    ) -> tuple[bool, T | None]:
        """Write ``step`` with other runs' steps (:mod:`tether.store._postgres_batch`) and
        finish ``plan`` with its result: ``(True, the plan's value)``, or ``(False, None)``
        when the step is to be written again alone."""
        outcome = await batcher.submit(step)
        try:
            if outcome.error is not None:
                plan.throw(outcome.error)
            elif outcome.rows is not None:
                plan.send(Result(outcome.rows, len(outcome.rows)))
            else:
                return False, None
        except StopIteration as stop:
            return True, stop.value
        except psycopg.Error as exc:
            raise self._translate(exc, op, outcome.pid, outcome.lost, execution_id) from exc
        raise RuntimeError(_PAST_LAST)

    def _checkout(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        pool = self._sync_pool()
        recovery = self._sync_recovery
        if recovery is None or recovery.pool is not pool:  # a caller's pool: as they made it
            return pool.connection()
        return recovery.connection(pool)

    def _translate(
        self,
        exc: psycopg.Error,
        op: str,
        pid: int | None,
        lost: bool,
        execution_id: str | None,
        reason: str | None = None,
    ) -> StoreError:
        return translate(
            exc,
            op=op,
            target=self.target,
            pid=pid,
            lost=lost,
            execution_id=execution_id,
            timeout_seconds=self.timeout_seconds,
            reason=reason,
        )

    def _diagnose(self) -> str | None:
        """Why a fresh connection fails, if it does (the pool logs it but does not say)."""
        try:
            psycopg.Connection.connect(self.conninfo, **self.kwargs).close()
        except psycopg.Error as exc:
            return _first_line(exc)
        return None

    async def _adiagnose(self) -> str | None:
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            await conn.close()
        except psycopg.Error as exc:
            return _first_line(exc)
        return None

    def stats(self) -> dict[str, int]:
        """Checked-out connection counts: now and the most at once, per pool kind; the
        multi-row step statements written on event loops and the steps they held."""
        batchers = [lp.batcher for lp in list(self._loops.values()) if lp.batcher is not None]
        return {
            "sync_in_use": self.sync_usage.in_use,
            "sync_max_in_use": self.sync_usage.max_in_use,
            "async_in_use": self.async_usage.in_use,
            "async_max_in_use": self.async_usage.max_in_use,
            "async_pools": len(self._loops),
            "async_batches": sum(b.statements for b in batchers),
            "async_batched_steps": sum(b.batched_steps for b in batchers),
        }


_PAST_LAST = "a write plan yielded a statement after the one it marked last"


@overload
def _cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]: ...
@overload
def _cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]: ...
def _cursor(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
) -> psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]:
    """The connection's binary cursor with tether's text adapters, made once per connection
    and reused: a cursor and its adapter map per statement cost more than a step's encoding."""
    cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any] | None
    cur = getattr(conn, "_tether_cursor", None)
    if cur is None or cur.closed:
        cur = conn.cursor(binary=True)
        _use_text_adapters(cur.adapters)
        conn._tether_cursor = cur  # type: ignore[union-attr]
    return cur


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """The statement returned a result set (cheaper than building ``cur.description``)."""
    res = cur.pgresult
    return res is not None and res.status == _TUPLES_OK


def _drive(conn: psycopg.Connection[Any], plan: Plan[T], write: bool) -> T:
    """Run ``plan``; when ``write``, as one transaction, begun before its first statement
    unless that statement is its last (see :func:`last`)."""
    cur = _cursor(conn)
    with contextlib.ExitStack() as transaction:
        try:
            begun = done = False
            stmt = next(plan)
            while True:
                if done:
                    raise RuntimeError(_PAST_LAST)
                if isinstance(stmt, StepInsert):  # a step shares a statement only on a loop
                    stmt = stmt.single
                if write and not begun:
                    if isinstance(stmt, _Last):
                        done = True
                    else:
                        transaction.enter_context(conn.transaction())
                        begun = True
                try:
                    cur.execute(stmt[0], stmt[1])
                    result = Result(cur.fetchall() if _has_rows(cur) else [], cur.rowcount)
                except psycopg.Error as exc:
                    done = False  # nothing committed: the plan may go on (in a transaction)
                    stmt = plan.throw(exc)
                    continue
                stmt = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def _adrive(
    conn: psycopg.AsyncConnection[Any],
    plan: Plan[T],
    write: bool,
    first: Statement | None = None,
) -> T:
    """As :func:`_drive`, on an async connection; ``first``: the plan's first statement,
    when the caller already took it."""
    cur = _cursor(conn)
    async with contextlib.AsyncExitStack() as transaction:
        try:
            begun = done = False
            stmt = next(plan) if first is None else first
            while True:
                if done:
                    raise RuntimeError(_PAST_LAST)
                if isinstance(stmt, StepInsert):
                    stmt = stmt.single
                if write and not begun:
                    if isinstance(stmt, _Last):
                        done = True
                    else:
                        await transaction.enter_async_context(conn.transaction())
                        begun = True
                try:
                    await cur.execute(stmt[0], stmt[1])
                    rows = await cur.fetchall() if _has_rows(cur) else []
                    result = Result(rows, cur.rowcount)
                except psycopg.Error as exc:
                    done = False
                    stmt = plan.throw(exc)
                    continue
                stmt = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
