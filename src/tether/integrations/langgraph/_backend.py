"""Runs the saver's plans on a tether store: its SQLite file or its Postgres pools.

A plan is a generator that yields ``(query, params)`` and is sent each statement's result
(rows, rowcount), as the store's own are (:mod:`tether.store.drivers`): each saver operation
is written once and driven synchronously or asynchronously, by the store's own driver
(``store.driver``: connections, the write lock, WAL checkpointing, reconnects, error
translation). On SQLite a write plan runs in the store's write transaction (``BEGIN
IMMEDIATE``) and a read plan in one read transaction, so a plan's reads see one snapshot.
"""

from __future__ import annotations

import datetime as _dt
import os
import sqlite3
import threading
import time
from collections.abc import Generator, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

from ...errors import ConfigurationError
from ...store import langgraph_sql as q
from ...store.base import Checkpointer
from ...store.drivers import last
from ...store.sqlite import SQLiteCheckpointer

T = TypeVar("T")


Statement: TypeAlias = tuple[Any, Sequence[Any] | None]
Plan: TypeAlias = Generator[Statement, Any, T]


class Backend(Protocol):
    """How a plan reaches the store."""

    @property
    def store(self) -> Checkpointer:
        """The tether store the plans run on."""

    def q(self, template: str) -> Any:
        """The statement ``template`` (from :mod:`tether.store.langgraph_sql`) for this store."""

    def last(self, template: str, params: Sequence[Any]) -> Statement:
        """A statement that is its plan's last (run alone, atomic by itself)."""

    def now(self) -> Any:
        """A ``created_at`` value for this store."""

    def is_unique_violation(self, exc: BaseException) -> bool:
        """``exc`` is the database refusing a duplicate key."""

    def run(self, op: str, plan: Plan[T], *, write: bool) -> T:
        """Run ``plan`` (in one transaction when ``write``)."""

    async def arun(self, op: str, plan: Plan[T], *, write: bool) -> T:
        """Async :meth:`run`."""


_WRITE_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


class SQLiteBackend:
    """Plans on a :class:`~tether.SQLiteCheckpointer`'s file, on the calling thread.

    The async twin runs inline, as the store's own async methods do: a SQLite call is local
    I/O of tens of microseconds, less than a thread hop.
    """

    def __init__(self, store: SQLiteCheckpointer) -> None:
        self._store = store
        self._driver = store.driver
        self._rendered: dict[str, str] = {}
        # LangGraph writes from two threads at once (put_writes on the loop, put from its
        # background saver under the default "async" durability); on separate connections
        # the second would wait in SQLite's busy handler, which sleeps in steps of
        # milliseconds. Writers of this process queue on a lock instead.
        with _LOCKS_GUARD:
            self._write_lock = _WRITE_LOCKS.setdefault(
                os.path.abspath(store.path), threading.Lock()
            )

    @property
    def store(self) -> SQLiteCheckpointer:
        return self._store

    def q(self, template: str) -> str:
        sql = self._rendered.get(template)
        if sql is None:
            sql = self._rendered[template] = q.for_sqlite(template)
        return sql

    def last(self, template: str, params: Sequence[Any]) -> Statement:
        return last(self.q(template), params)

    def now(self) -> float:
        return time.time()

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    def run(self, op: str, plan: Plan[T], *, write: bool) -> T:
        op = f"langgraph.{op}"
        if not write:
            return self._driver.run_snapshot(op, plan)
        with self._write_lock:
            return self._driver.run(op, plan, write=True)

    async def arun(self, op: str, plan: Plan[T], *, write: bool) -> T:
        return self.run(op, plan, write=write)


class PostgresBackend:
    """Plans on a :class:`~tether.PostgresCheckpointer`'s pools (its ``Database`` drives)."""

    def __init__(self, store: Any) -> None:
        import psycopg

        self._store = store
        self._unique = psycopg.errors.UniqueViolation

    @property
    def store(self) -> Any:
        return self._store

    def q(self, template: str) -> bytes:
        return self._store.render_sql(template)  # type: ignore[no-any-return]

    def last(self, template: str, params: Sequence[Any]) -> Statement:
        return last(self.q(template), params)

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC)

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, self._unique)

    def run(self, op: str, plan: Plan[T], *, write: bool) -> T:
        return self._store.driver.run(f"langgraph.{op}", plan, write=write)  # type: ignore[no-any-return]

    async def arun(self, op: str, plan: Plan[T], *, write: bool) -> T:
        return await self._store.driver.arun(f"langgraph.{op}", plan, write=write)  # type: ignore[no-any-return]


def backend_for(store: Checkpointer) -> Backend:
    """The driver for ``store``.

    Raises:
        ConfigurationError: ``store`` is neither tether's SQLite nor its Postgres store.
    """
    if isinstance(store, SQLiteCheckpointer):
        return SQLiteBackend(store)
    if type(store).__name__ == "PostgresCheckpointer":
        return PostgresBackend(store)
    raise ConfigurationError(
        f"TetherSaver needs tether's SQLiteCheckpointer or PostgresCheckpointer, got "
        f"{type(store).__name__}"
    )
