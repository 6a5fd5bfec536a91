"""Group commit on an event loop: concurrent runs' steps share one Postgres statement.

Many runs on one event loop (``asyncio.gather`` of ``arun``, a worker's slots) each write one
checkpoint per step. Written one by one, each step costs a pool checkout, a statement and a
commit, on the client and on the server. Here a step's plain insert (no status change, no
interrupt: the usual step, fenced or not) is queued instead, and up to ``max_size`` flushes
(the async pool's size) each take up to :data:`MAX_ROWS` queued steps and write them as one
multi-row ``INSERT`` in autocommit: one checkout, one round trip and one commit for all of
them. A step that finds no other being written goes alone, as before, on its own checkout.

What a step's caller sees does not change (docs/design.md §7):

- **Durability.** ``aput`` returns only after the statement holding its row committed.
- **Fencing.** A row goes in only if its fence holds, checked per row exactly as the
  single-row fenced insert checks it (the run's ``owner`` is this writer, under a share lock
  on the run row).
- **Errors stay with their run.** Rows whose key is taken are skipped (``ON CONFLICT DO
  NOTHING``). A row that did not go in, and every row of a statement the server refused for
  any other reason (a value, an operator's constraint, a deadlock between two such
  statements), is written again alone by its own caller, so its own error
  (:class:`~tether.errors.ConcurrentWriteError`, the lease lost,
  :class:`~tether.errors.RecordRejectedError`) reaches its run and no other. A connection lost
  during the statement fails each of its steps as a lost single write does
  (:class:`~tether.errors.StoreUnavailableError`: it may have committed; read the run back).
- **Cancellation.** A step whose caller is cancelled before its flush takes it is never
  written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import psycopg

from . import _codec
from ._plans import PAST_LAST, Plan, Result, StepInsert
from ._postgres_drive import cursor

__all__ = ["MAX_ROWS", "Batcher", "Outcome", "finish"]

MAX_ROWS: Final = 8
"""The most steps one flush writes. Smaller batches let several flushes overlap (one commits
while the next is encoded); 8 measured best between 16 and 64 concurrent runs (W4)."""

_CASTS: Final = (
    "text", "text", "bigint", "text", "integer", "text", "text", "text", "bytea", "bigint",
    "bytea", "bytea", "bytea", "text", "bytea", "text", "text", "text",
)  # fmt: skip
_COLUMNS: Final = _codec.CHECKPOINT_COLUMNS.removesuffix(", created_at")
_ROW: Final = "(" + ", ".join(f"%s::{t}" for t in (*_CASTS, "text", "text")) + ")"


@dataclass(slots=True)
class Outcome:
    """What a flush did with one step: its ``rows`` (``[(created_at,)]`` as the single insert
    returns them; none when its fence did not hold), or ``error`` to throw into its plan, or
    neither: write it again alone. ``pid`` is the server backend that ran the statement."""

    rows: list[tuple[Any, ...]] | None = None
    error: BaseException | None = None
    pid: int | None = None
    lost: bool = False


_QUERIES: dict[tuple[bytes, int], bytes] = {}


def _query(schema: bytes, rows: int) -> bytes:
    query = _QUERIES.get((schema, rows))
    if query is None:
        s = schema.decode()
        query = (
            f"INSERT INTO {s}.checkpoints ({_COLUMNS}, created_at) "
            f"SELECT {_COLUMNS}, now() FROM (VALUES {', '.join([_ROW] * rows)}) "
            f"AS v ({_COLUMNS}, fence_run, fence_owner) "
            f"WHERE v.fence_owner IS NULL OR EXISTS (SELECT 1 FROM {s}.runs r "
            "WHERE r.execution_id = v.fence_run AND r.owner = v.fence_owner FOR SHARE) "
            "ON CONFLICT DO NOTHING RETURNING checkpoint_id, created_at"
        ).encode()
        _QUERIES[(schema, rows)] = query
    return query


def _ends_session(exc: BaseException, conn: psycopg.AsyncConnection[Any]) -> bool:
    if conn.closed:
        return True
    state = exc.sqlstate if isinstance(exc, psycopg.Error) else ""
    return state is None or state[:2] == "08" or state in ("57P01", "57P02")


class Batcher:
    """The step queue of one event loop's pool.

    Args:
        loop: the event loop the pool belongs to.
        schema: the rendered schema identifier (``b'"tether"'``).
        connection: ``() -> async context manager`` checking a connection out of that pool.
        flushes: the most flushes at once (the pool's ``max_size``).
        usage: the pool's checkout counts (``in_use``, ``max_in_use``), kept for flushes too.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        schema: bytes,
        connection: Any,
        flushes: int,
        usage: Any,
    ) -> None:
        self._loop = loop
        self._schema = schema
        self._connection = connection
        self._usage = usage
        self._flushes = max(1, flushes)
        self._queue: list[tuple[StepInsert, asyncio.Future[Outcome]]] = []
        self._running = 0
        self._alone = 0  # steps being written alone, as no other was waiting
        self._tasks: set[asyncio.Task[None]] = set()
        self.statements = 0  # multi-row statements written
        self.batched_steps = 0  # steps written by them

    def busy(self) -> bool:
        """Another step is being written or waits: a new one should join the queue. When
        none is, a step goes alone on the caller's checkout, at no cost over a plain write."""
        return bool(self._queue) or self._running + self._alone > 0

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Count a step written alone, so that steps arriving meanwhile queue up."""
        self._alone += 1
        try:
            yield
        finally:
            self._alone -= 1

    async def submit(self, step: StepInsert) -> Outcome:
        """Queue ``step`` and wait for the flush that writes it.

        Raises:
            psycopg.Error: no connection could be had (the pool's timeout, the pool closed).
        """
        fut: asyncio.Future[Outcome] = self._loop.create_future()
        self._queue.append((step, fut))
        if self._running < self._flushes:
            self._running += 1
            task = self._loop.create_task(self._flush())
            self._tasks.add(task)  # held until done: the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)
        return await fut

    def _take(self) -> list[tuple[StepInsert, asyncio.Future[Outcome]]]:
        taken: list[tuple[StepInsert, asyncio.Future[Outcome]]] = []
        while self._queue and len(taken) < MAX_ROWS:
            item = self._queue.pop(0)
            if not item[1].done():  # a cancelled caller's step is dropped, unwritten
                taken.append(item)
        return taken

    async def _flush(self) -> None:
        try:
            while self._queue:
                items = self._take()
                if not items:
                    continue
                try:
                    async with self._connection() as conn:
                        self._usage.in_use += 1
                        self._usage.max_in_use = max(self._usage.max_in_use, self._usage.in_use)
                        try:
                            outcomes = await self._write(conn, items)
                        finally:
                            self._usage.in_use -= 1
                except BaseException as exc:  # no connection, or cancelled with the loop
                    for _, fut in items:
                        if fut.done():
                            continue
                        if isinstance(exc, asyncio.CancelledError):
                            fut.cancel()
                        else:
                            fut.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, fut), outcome in zip(items, outcomes, strict=True):
                    if not fut.done():
                        fut.set_result(outcome)
        finally:
            self._running -= 1

    async def _write(
        self,
        conn: psycopg.AsyncConnection[Any],
        items: list[tuple[StepInsert, asyncio.Future[Outcome]]],
    ) -> list[Outcome]:
        pid = conn.pgconn.backend_pid
        cur = cursor(conn)
        if len(items) == 1:
            query, params = items[0][0].single
            try:
                await cur.execute(query, params)
                return [Outcome(await cur.fetchall(), pid=pid)]
            except psycopg.Error as exc:
                return [Outcome(error=exc, pid=pid, lost=conn.closed)]
        params = [value for step, _ in items for value in step.row]
        try:
            await cur.execute(_query(self._schema, len(items)), params)
            written = {row[0]: row[1] for row in await cur.fetchall()}
        except Exception as exc:
            if _ends_session(exc, conn):
                return [Outcome(error=exc, pid=pid, lost=True) for _ in items]
            return [Outcome(pid=pid) for _ in items]  # refused: each tries alone
        self.statements += 1
        self.batched_steps += len(written)
        out: list[Outcome] = []
        for step, _ in items:
            created = written.get(step.row[0])
            out.append(Outcome(pid=pid) if created is None else Outcome([(created,)], pid=pid))
        return out


T = TypeVar("T")


def finish(plan: Plan[T], outcome: Outcome) -> tuple[bool, T | None]:
    """Send ``plan`` its step's outcome: ``(True, the plan's value)``, or ``(False, None)``
    when the step is to be written again alone.

    Raises:
        psycopg.Error: the plan re-raised the step's error (the caller translates it).
    """
    try:
        if outcome.error is not None:
            plan.throw(outcome.error)
        elif outcome.rows is not None:
            plan.send(Result(outcome.rows, len(outcome.rows)))
        else:
            return False, None
    except StopIteration as stop:
        return True, stop.value
    raise RuntimeError(PAST_LAST)
