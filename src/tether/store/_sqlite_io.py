"""How the SQLite checkpointer talks to its file: connections, plans and errors.

:class:`SQLiteDatabase` runs a plan (:mod:`tether.store._plans`) on the calling thread's
connection; its async twin runs it inline too, since a SQLite call is local I/O of tens of
microseconds, less than a thread hop. A write plan takes the write lock up front
(``BEGIN IMMEDIATE``), so concurrent processes on one file queue behind SQLite's busy timeout
instead of failing half-way; a write plan of one statement marked :func:`~._plans.last` runs
as that statement alone (SQLite makes it a transaction of its own, taking the write lock
before it reads): no ``BEGIN`` and ``COMMIT`` around it.

Parameters are named (``:execution_id``). SQLite binds no lists, so a list parameter is sent
as JSON text and read with ``json_each`` (Postgres's ``= ANY(%(ids)s)`` is SQLite's
``IN (SELECT value FROM json_each(:ids))``), and every statement may use ``:now``, this
machine's clock in seconds (SQLite's times are ``time.time()`` values), filled in per
statement.
"""

from __future__ import annotations

import builtins
import itertools
import operator
import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson

from ..errors import SerializationError, StoreUnavailableError, TetherError
from ._database_errors import (
    MISSING_TABLES,
    REJECTED_ADVICE,
    Kind,
    sqlite_code,
    sqlite_constraint,
    sqlite_kind,
    store_error,
)
from ._plans import PAST_LAST, Plan, Result, Statement, StepInsert, Write, is_last
from ._rows import STEP_FIELDS
from ._sqlite_readonly import connect_read_only, read_only_reason
from ._sqlite_wal import SAFETY_NET_FACTOR, WalCheckpointer

__all__ = ["SQLiteDatabase", "translate"]

T = TypeVar("T")

_NO_GATE: Final = nullcontext()


class SQLiteDatabase:
    """Per-thread connections to one SQLite file, and the driver of plans on them.

    Args:
        path: the database file (created if missing), or ``":memory:"``.
        synchronous: ``"NORMAL"`` or ``"FULL"`` (SQLite's pragma).
        busy_timeout_seconds: how long a writer waits for another process's write lock.
        wal_checkpoint: ``"background"`` (a :class:`~._sqlite_wal.WalCheckpointer` thread)
            or ``"inline"`` (SQLite's auto-checkpoint inside a COMMIT).
        wal_checkpoint_pages: the WAL growth, in pages, that triggers a checkpoint.
        read_only: open the file for reading only (:func:`~._sqlite_readonly.connect_read_only`)
            and refuse every write plan; no background checkpointer.
    """

    def __init__(
        self,
        path: str,
        *,
        synchronous: str,
        busy_timeout_seconds: float,
        wal_checkpoint: str,
        wal_checkpoint_pages: int,
        read_only: bool = False,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout_seconds = busy_timeout_seconds
        self.read_only = read_only
        # The background checkpointer, None inline, without a WAL (``:memory:``) or reading.
        self.wal: WalCheckpointer | None = None
        if wal_checkpoint == "background" and path != ":memory:" and not read_only:
            self.wal = WalCheckpointer(path, wal_checkpoint_pages, synchronous)
        self._autocheckpoint = wal_checkpoint_pages * (
            SAFETY_NET_FACTOR if self.wal is not None else 1
        )
        self._local = threading.local()
        _DATABASES.add(self)

    # --- connections ----------------------------------------------------------------------
    def connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None and self.read_only:
            conn = self._read_only_connection()
        if conn is None:
            if self.path != ":memory:":
                self._make_directories()
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout_seconds,
                    isolation_level=None,
                    check_same_thread=True,
                    cached_statements=256,
                )
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                conn.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")
            except sqlite3.Error as exc:
                raise translate(exc, self.path, opening=True) from exc
            if str(mode).lower() != "wal":  # e.g. ":memory:": nothing to checkpoint
                self.wal = None
            self._local.conn = conn
        return conn

    def _make_directories(self) -> None:
        try:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # not SQLite's error, but the same refusal to write
            why = read_only_reason(self.path) or exc.strerror
            raise StoreUnavailableError(
                f"SQLite database {self.path!r} cannot be written: {why} ({exc})"
            ) from exc

    def _read_only_connection(self) -> sqlite3.Connection:
        try:
            conn = connect_read_only(
                self.path,
                timeout=self.busy_timeout_seconds,
                isolation_level=None,
                check_same_thread=True,
                cached_statements=256,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
        except sqlite3.Error as exc:
            if sqlite_kind(exc) is Kind.UNAVAILABLE:  # not "cannot be written": it only reads
                text = f"cannot read SQLite database {self.path!r}: {exc}"
                raise StoreUnavailableError(text) from exc
            raise translate(exc, self.path) from exc
        self._local.conn = conn
        return conn

    def refuse_write(self) -> None:
        """Raise when this database was opened read-only.

        Raises:
            StoreUnavailableError: it was.
        """
        if self.read_only:
            raise StoreUnavailableError(
                f"SQLite database {self.path!r} was opened read-only (read_only=True, as "
                "tether's reading commands open it); this operation writes"
            )

    def close(self) -> None:
        """Close this thread's connection and stop the background checkpoint thread."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        if self.wal is not None:
            self.wal.stop()

    def _forget_after_fork(self) -> None:
        """In a forked child: never use, close or free the parent's connection (SQLite
        connections must not cross ``fork()``, and closing one may checkpoint the parent's
        WAL); the child opens its own on first use."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            _FORK_ORPHANS.append(conn)
            self._local.conn = None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on exit, rolled back on error;
        driver errors come out translated."""
        # The background checkpointer's gate is taken before SQLite's write lock, always in
        # that order (as in a one-statement write), so the two cannot deadlock.
        self.refuse_write()
        wal = self.wal
        with _NO_GATE if wal is None else wal.gate, self._write_locked() as conn:
            yield conn
        if wal is not None:
            wal.committed()

    @contextmanager
    def _write_locked(self) -> Iterator[sqlite3.Connection]:
        conn = self.connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc
        try:
            yield conn
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.Error | UnicodeEncodeError):
                raise translate(exc, self.path) from exc
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            _rollback(conn)
            raise translate(exc, self.path) from exc

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads; driver errors come out translated."""
        conn = self.connection()
        try:
            yield conn
        except (sqlite3.Error, UnicodeEncodeError) as exc:
            raise translate(exc, self.path) from exc

    # --- running plans --------------------------------------------------------------------
    def run(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """Run ``plan``: reads; with ``write=True`` one transaction (see the module docstring);
        with ``write="each"`` statements each atomic by itself, under the WAL gate.

        ``op`` and ``execution_id`` are accepted for the drivers' common signature; SQLite's
        messages name the file instead.

        Raises:
            StoreError: any driver error, translated (see :func:`translate`).
        """
        try:
            if write:
                self.refuse_write()
            try:
                first = next(plan)
            except StopIteration as stop:  # a plan that had nothing to send
                return stop.value  # type: ignore[no-any-return]
            if not write:
                with self.read() as conn:
                    return _drive(conn, plan, first)
            if write is True and not (isinstance(first, StepInsert) or is_last(first)):
                with self.write() as conn:
                    return _drive(conn, plan, first)
            wal = self.wal  # statements each a transaction of its own, under the gate
            try:
                with _NO_GATE if wal is None else wal.gate:
                    value = _drive(self.connection(), plan, first, alone=write is True)
            except (sqlite3.Error, UnicodeEncodeError) as exc:
                raise translate(exc, self.path) from exc
            if wal is not None:
                wal.committed()
            return value
        finally:
            plan.close()

    async def arun(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """:meth:`run`, inline on the event loop's thread."""
        return self.run(op, plan, write=write, execution_id=execution_id)

    def run_snapshot(self, op: str, plan: Plan[T]) -> T:
        """Run a read plan inside one read transaction, so its statements see one snapshot
        (:meth:`tether.store.drivers.SQLiteDriver.run_snapshot`)."""
        try:
            try:
                first = next(plan)
            except StopIteration as stop:  # a plan that had nothing to send
                return stop.value  # type: ignore[no-any-return]
            with self.read() as conn:
                conn.execute("BEGIN")
                try:
                    return _drive(conn, plan, first)
                finally:
                    conn.execute("COMMIT")
        finally:
            plan.close()

    @staticmethod
    def unique_key(exc: BaseException) -> str | None:
        """The unique key ``exc`` says was violated (as SQLite names it), else ``None``."""
        if isinstance(exc, sqlite3.IntegrityError):
            return sqlite_constraint(exc)
        return None


_NAMED: Final = re.compile(r":(\w+)")
_NULLS_INLINED: dict[tuple[str, tuple[str, ...]], str] = {}
_NULLS_INLINED_MAX: Final = 4096


def _bind(sql: str, params: Any) -> tuple[str, Any]:
    """``(statement, params)`` for :mod:`sqlite3`: ``:now`` filled in, a list as JSON text,
    ``bytes`` as ``bytearray`` and each ``None`` written into the statement as ``NULL``. The
    module binds ``str``, ``int``, ``float`` and ``bytearray`` as they are but sends ``None``
    and ``bytes`` through its adapter protocol, which raises and formats an internal error for
    each (about 2 µs a parameter; a step's insert has several)."""
    if not isinstance(params, dict):
        return sql, () if params is None else params
    values: dict[str, Any] = {} if "now" in params else {"now": time.time()}
    nulls: builtins.list[str] = []
    for key, value in params.items():
        kind = type(value)
        if value is None:
            nulls.append(key)
        elif kind is bytes:
            values[key] = bytearray(value)
        elif kind is builtins.list:
            values[key] = orjson.dumps(value).decode()
        else:
            values[key] = value
    if nulls:
        found = _NULLS_INLINED.get((sql, tuple(nulls)))
        if found is None:
            null = frozenset(nulls)
            found = _NAMED.sub(lambda m: "NULL" if m[1] in null else m[0], sql)
            if len(_NULLS_INLINED) >= _NULLS_INLINED_MAX:
                _NULLS_INLINED.clear()
            _NULLS_INLINED[sql, tuple(nulls)] = found
        sql = found
    return sql, values


_BLOBS: Final = frozenset(
    {"state", "node_input", "node_output", "iteration_counters", "interrupt_context"}
)
# The columns a step may leave NULL: the last eight (the ones before are NOT NULL, so a None
# there is bound as one and refused by the table, as through _bind).
_NULLABLE: Final = STEP_FIELDS.index("node_input")
_NONES: Final = (None,) * (len(STEP_FIELDS) - _NULLABLE)
_STEP_TEXTS: dict[tuple[str, tuple[bool, ...]], tuple[str, tuple[int, ...]]] = {}


def _step_row(step: StepInsert) -> tuple[str, builtins.list[Any]]:
    """``(statement, params)`` for a step's insert, bound by position: ``_bind``'s rules
    (``NULL`` in the statement for each ``None``, ``bytes`` as ``bytearray``) without a dict
    of named parameters, which :mod:`sqlite3` binds by looking each name up (about a quarter
    of the insert's own cost). One statement text per set of ``NULL`` columns."""
    row = step.row
    tail = row[_NULLABLE : len(STEP_FIELDS)]
    kept = tuple(map(operator.is_not, tail, _NONES))
    found = _STEP_TEXTS.get((step.query, kept))
    if found is None:
        found = _STEP_TEXTS[step.query, kept] = _positional(step.query, kept)
    sql, blobs = found
    params = [*row[:_NULLABLE], *itertools.compress(tail, kept), step.now, row[-1]]
    for i in blobs:
        if type(params[i]) is bytes:
            params[i] = bytearray(params[i])
    if params[-1] is None:  # unfenced: no :owner
        params.pop()
    return sql, params


def _positional(query: str, kept: tuple[bool, ...]) -> tuple[str, tuple[int, ...]]:
    """``query``'s text with ``?NNN`` for its named parameters: the columns numbered in
    order, ``NULL`` for the nullable ones not ``kept``, then ``:now`` and ``:owner``; and the
    positions of the blob columns among the parameters."""
    kept = (True,) * _NULLABLE + kept
    names = [n for n, k in zip(STEP_FIELDS, kept, strict=True) if k]
    number = {n: f"?{i}" for i, n in enumerate([*names, "now", "owner"], 1)}
    number.update((n, "NULL") for n, k in zip(STEP_FIELDS, kept, strict=True) if not k)
    return _NAMED.sub(lambda m: number[m[1]], query), tuple(
        i for i, n in enumerate(names) if n in _BLOBS
    )


def _drive(conn: sqlite3.Connection, plan: Plan[T], stmt: Statement, *, alone: bool = False) -> T:
    """Run ``plan`` from its first statement ``stmt``; ``alone``: that statement is its last."""
    done = False
    try:
        while True:
            if done:
                raise RuntimeError(PAST_LAST)
            done = alone
            try:
                if isinstance(stmt, StepInsert):  # an insert that returns no rows
                    result = Result([], conn.execute(*_step_row(stmt)).rowcount)
                else:
                    cur = conn.execute(*_bind(stmt[0], stmt[1]))
                    result = Result(cur.fetchall(), cur.rowcount)
            except sqlite3.Error as exc:
                done = False  # nothing committed: the plan may go on
                stmt = plan.throw(exc)
                continue
            stmt = plan.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


_DATABASES: weakref.WeakSet[SQLiteDatabase] = weakref.WeakSet()
_FORK_ORPHANS: builtins.list[sqlite3.Connection] = []  # a child's inherited connections, kept


def _forget_connections_after_fork() -> None:
    for db in builtins.list(_DATABASES):
        db._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_connections_after_fork)


def translate(
    exc: sqlite3.Error | UnicodeEncodeError, path: str, *, opening: bool = False
) -> TetherError:
    """The tether error for a :mod:`sqlite3` error, by the rule in
    :mod:`tether.store._database_errors`; a refused write, or (``opening``) a file that would
    not open, names why the file is read-only to this process when it is."""
    if isinstance(exc, UnicodeEncodeError):
        return SerializationError(
            f"a value sent to SQLite is not valid Unicode text ({exc.reason}); ids, names and "
            "text must not hold lone surrogates",
            type_name="str",
        )
    msg = str(exc)
    kind = sqlite_kind(exc)
    code = sqlite_code(exc)
    if (code or "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        text = f"SQLite database {path!r} stayed locked by another writer past the busy timeout"
    elif kind is Kind.UNAVAILABLE:
        read_only = (code or "").startswith("SQLITE_READONLY") or (
            opening and code == "SQLITE_CANTOPEN"
        )
        why = read_only_reason(path) if read_only and path != ":memory:" else None
        text = f"SQLite database {path!r} cannot be written: " + (f"{why} ({msg})" if why else msg)
    elif kind is Kind.CORRUPT:
        text = f"{path!r} is not a readable tether SQLite database: {msg}"
    elif kind is Kind.MISSING:
        text = f"SQLite database {path!r} {MISSING_TABLES}: {msg}"
    elif kind is Kind.REJECTED:
        text = f"SQLite database {path!r} rejected a value ({code}): {msg}; {REJECTED_ADVICE}"
    else:
        text = f"SQLite error on {path!r}: {msg}"
    return store_error(kind, text, code=code, constraint=sqlite_constraint(exc))
