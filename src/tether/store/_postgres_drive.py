"""Running a plan (:mod:`tether.store._plans`) on one Postgres connection, sync or async.

Strings: PostgreSQL ``text`` cannot hold NUL. Every ``str`` parameter is written with NUL as
``U+FFFE '0'`` and ``U+FFFE`` itself doubled, and read back the other way. The mapping is
per character and prefix-free, so equality and prefix tests in SQL still hold, and any string
without those two characters (every realistic one) is stored exactly as given.

Times: a ``timestamptz`` holds ``infinity``, ``-infinity`` and years past 9999, which psycopg
refuses to load (a ``DataError`` raised on the client while it converts the row, which would
fail the whole statement: every run of a listing for one bad row). Its loaders are wrapped so
that such a value is read as an :class:`~._times.UnreadableTime`, which the row's decoding
turns into that row's damage, naming the column (:func:`~._times.ts_to_dt`). A readable time
costs one Python call around psycopg's own C loader.
"""

from __future__ import annotations

import contextlib
import re
import struct
from typing import Any, ClassVar, Final, TypeVar, overload

import psycopg
from psycopg import abc
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.pq import Format
from psycopg.types.string import (
    StrBinaryDumper,
    StrDumperUnknown,
    TextBinaryLoader,
    TextLoader,
)

from ..errors import SerializationError
from ._plans import PAST_LAST, Plan, Result, Statement, StepInsert, is_last
from ._times import UnreadableTime

__all__ = ["adrive", "cursor", "drive"]

T = TypeVar("T")

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


# --- times that are no Python datetime ------------------------------------------------------
_TIMESTAMPTZ_OID: Final = 1184
_MICROS: Final = struct.Struct("!q")  # binary timestamptz: microseconds since 2000-01-01
_INFINITY: Final = {2**63 - 1: "infinity", -(2**63): "-infinity"}
_UNLOADABLE: Final = (psycopg.DataError, OverflowError, ValueError)


class _TimeLoader(Loader):
    """psycopg's loader of ``timestamptz`` (its C one when installed), with a value it cannot
    load read as an :class:`UnreadableTime` instead of raised."""

    _psycopg_loader: ClassVar[type[abc.Loader]]

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._load = self._psycopg_loader(oid, context).load

    def load(self, data: Buffer) -> Any:
        try:
            return self._load(data)
        except _UNLOADABLE:
            return self.unreadable(bytes(data))

    @staticmethod
    def unreadable(data: bytes) -> UnreadableTime:
        return UnreadableTime(repr(data.decode("utf-8", "replace")))


class _TimeBinaryLoader(_TimeLoader):
    format = Format.BINARY

    @staticmethod
    def unreadable(data: bytes) -> UnreadableTime:
        (micros,) = _MICROS.unpack(data)
        if micros in _INFINITY:
            return UnreadableTime(repr(_INFINITY[micros]))
        return UnreadableTime("a time after year 9999" if micros > 0 else "a time before year 1")


def _psycopg_loader(fmt: Format) -> type[abc.Loader]:
    found = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, fmt)
    assert found is not None  # psycopg loads timestamptz in both formats
    return found


_TimeLoader._psycopg_loader = _psycopg_loader(Format.TEXT)
_TimeBinaryLoader._psycopg_loader = _psycopg_loader(Format.BINARY)


def _use_text_adapters(adapters: AdaptersMap) -> None:
    # On the cursor's own (copy-on-write) map, so a connection from a pool the caller owns is
    # left as it was.
    adapters.register_dumper(str, _TextBinaryDumper)
    adapters.register_dumper(str, _TextDumper)  # registered last: the default for str
    adapters.register_loader(_TEXT_OID, _TextLoader)
    adapters.register_loader(_TEXT_OID, _TextBinaryLoader)
    adapters.register_loader(_TIMESTAMPTZ_OID, _TimeLoader)
    adapters.register_loader(_TIMESTAMPTZ_OID, _TimeBinaryLoader)


@overload
def cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]: ...
@overload
def cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]: ...
def cursor(
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


def drive(conn: psycopg.Connection[Any], plan: Plan[T], write: bool) -> T:
    """Run ``plan``; when ``write``, as one transaction, begun before its first statement
    unless that statement is its last (see :func:`last`)."""
    cur = cursor(conn)
    with contextlib.ExitStack() as transaction:
        try:
            begun = done = False
            stmt = next(plan)
            while True:
                if done:
                    raise RuntimeError(PAST_LAST)
                if isinstance(stmt, StepInsert):  # a step shares a statement only on a loop
                    stmt = stmt.single
                if write and not begun:
                    if is_last(stmt):
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


async def adrive(
    conn: psycopg.AsyncConnection[Any],
    plan: Plan[T],
    write: bool,
    first: Statement | None = None,
) -> T:
    """As :func:`drive`, on an async connection; ``first``: the plan's first statement,
    when the caller already took it."""
    cur = cursor(conn)
    async with contextlib.AsyncExitStack() as transaction:
        try:
            begun = done = False
            stmt = next(plan) if first is None else first
            while True:
                if done:
                    raise RuntimeError(PAST_LAST)
                if isinstance(stmt, StepInsert):
                    stmt = stmt.single
                if write and not begun:
                    if is_last(stmt):
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
