"""How the Postgres checkpointer talks to the server: pools, plans, checks and errors.

:class:`Database` runs a plan (:mod:`tether.store._plans`) on a connection of its sync pool
(:meth:`Database.run`) or of the running event loop's async pool (:meth:`Database.arun`), so
the checkpointer's sync methods and their async twins share every line of logic and differ
only in how they wait. A driver error the plan does not handle becomes a
:class:`~tether.errors.StoreError` here, never a raw driver error.

Async pools are bound to the event loop that opened them (their locks, queues and workers
live there), so there is one per loop, opened on first use and closed when the loop shuts
down (a guard task that ``asyncio.run`` cancels with the rest closes it); a long-lived async
application keeps one. The sync verbs (``Chain.run``) never open one: they run on their
thread's kept loop and do their work on the sync pool (:meth:`Database.arun`).

Connections a server killed (restart, ``pg_terminate_backend``, an idle timeout) are found at
checkout and replaced, all of them at once, and a server back from an outage is connected to
at once: :mod:`tether.store._postgres_recovery`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .._context import sync_drive
from ..errors import StoreError
from ._database_errors import postgres_constraint
from ._plans import Plan, Result, Statement, StepInsert, Write, last
from ._postgres_batch import Batcher, finish
from ._postgres_drive import adrive, drive
from ._postgres_errors import first_line, translate
from ._postgres_recovery import AsyncRecovery, SyncRecovery

__all__ = ["Database", "Plan", "Result", "Statement", "last", "translate"]

T = TypeVar("T")


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
        schema: the rendered schema, for multi-row step statements (:mod:`._postgres_batch`).
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
        schema: bytes = b"tether",
    ) -> None:
        self.conninfo = conninfo
        self.schema = schema
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
                options = self._pool_options(recovery, "sync")
                self._sync = recovery.pool = ConnectionPool(self.conninfo, **options)
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

    def _pool_options(self, recovery: SyncRecovery | AsyncRecovery, kind: str) -> dict[str, Any]:
        """The options of a pool of ``kind`` (``sync``, ``async``), checked and reconnected by
        ``recovery`` without back-off (its ``reconnect_failed`` retries)."""
        return {
            "kwargs": self.kwargs,
            "min_size": self.min_size,
            "max_size": self.max_size,
            "timeout": self.timeout_seconds,
            "check": recovery.check,
            "configure": recovery.configure,
            "reconnect_timeout": 0,
            "reconnect_failed": recovery.reconnect_failed,
            "open": False,
            "name": f"{self.name}-{kind}",
        }

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
                    self.conninfo, **self._pool_options(recovery, "async")
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
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
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
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
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

    def _run(self, op: str, plan: Plan[T], *, write: Write, execution_id: str | None) -> T:
        pid: int | None = None
        usage = self.sync_usage
        try:
            with self._checkout() as conn:
                pid = self._pid(conn)
                with self._lock:
                    usage.in_use += 1
                    usage.max_in_use = max(usage.max_in_use, usage.in_use)
                try:
                    return drive(conn, plan, write is True)
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

    async def _arun(self, op: str, plan: Plan[T], *, write: Write, execution_id: str | None) -> T:
        pid: int | None = None
        usage = self.async_usage
        lp = self._loop_entry()
        first: Statement | None = None
        alone: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        try:
            pool = await self._open(lp)
            if write is True:
                try:
                    first = next(plan)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                if isinstance(first, StepInsert):
                    batcher = self._batcher(lp, pool)
                    if batcher.busy():
                        outcome = await batcher.submit(first)
                        try:
                            done, value = finish(plan, outcome)
                        except psycopg.Error as exc:
                            pid, lost = outcome.pid, outcome.lost
                            raise self._translate(exc, op, pid, lost, execution_id) from exc
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
                        return await adrive(conn, plan, write is True, first)
                    except psycopg.Error as exc:
                        raise self._translate(exc, op, pid, conn.closed, execution_id) from exc
                    finally:
                        usage.in_use -= 1
        except psycopg.Error as exc:
            reason = await self._adiagnose() if isinstance(exc, PoolTimeout) else None
            raise self._translate(exc, op, pid, False, execution_id, reason) from exc
        finally:
            plan.close()

    def _batcher(self, lp: _LoopPool, pool: AsyncConnectionPool[Any]) -> Batcher:
        if lp.batcher is None:
            checkout = lambda: lp.recovery.connection(pool)  # noqa: E731
            lp.batcher = Batcher(lp.loop, self.schema, checkout, self.max_size, self.async_usage)
        return lp.batcher

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
            return first_line(exc)
        return None

    async def _adiagnose(self) -> str | None:
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            await conn.close()
        except psycopg.Error as exc:
            return first_line(exc)
        return None

    @staticmethod
    def unique_key(exc: BaseException) -> str | None:
        """The unique key ``exc`` says was violated (as PostgreSQL names it), else ``None``."""
        if isinstance(exc, psycopg.errors.UniqueViolation):
            return postgres_constraint(exc)
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
