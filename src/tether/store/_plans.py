"""Plans: each store operation written once, as a generator of statements a driver runs.

A **plan** yields ``(query, params)`` and is sent each statement's :class:`Result`; it returns
the operation's value. A driver runs it on a connection: Postgres's
(:mod:`tether.store._postgres_io`) synchronously or on an event loop, SQLite's
(:mod:`tether.store._sqlite_io`) on the calling thread. So an operation's logic is one
generator for both backends and both ways of waiting (:mod:`tether.store._operations`); only
the SQL text differs, and each backend keeps it in one module of named statements with named
parameters (:mod:`tether.store._sqlite_sql`, :mod:`tether.store._postgres_sql`).

A driver error is thrown into the plan at the statement that caused it, so the plan can turn
it into the error that says what happened (a unique violation on ``(execution_id, seq)`` is
another writer's step). A write plan runs in one transaction, begun before its first
statement, unless that statement is marked as its last (:func:`last`): then it runs alone,
in autocommit, one round trip.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from ._rows import STEP_FIELDS

__all__ = [
    "Params",
    "Plan",
    "Query",
    "Result",
    "Statement",
    "StepInsert",
    "Write",
    "is_last",
    "last",
]

T = TypeVar("T")

Query: TypeAlias = "str | bytes"
"""A statement as its driver takes it: SQLite's text, Postgres's rendered bytes."""
Params: TypeAlias = "Mapping[str, Any] | Sequence[Any] | None"
Statement: TypeAlias = "tuple[Any, Any]"
"""``(query, params)``."""


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

Write: TypeAlias = "bool | Literal['each']"
"""How a driver runs a plan: ``False``, reads; ``True``, one transaction; ``"each"``, writes
each atomic by itself (a compare-and-set), run without a transaction around them."""


class _Last(tuple[Any, Any]):
    __slots__ = ()


def last(query: Any, params: Any) -> Statement:
    """Mark a write plan's final statement.

    A write plan whose first statement is also its last runs that statement on its own, in
    autocommit: one statement is atomic by itself, so the step is still one transaction, and
    it costs one round trip instead of three (``BEGIN``, the statement, ``COMMIT``). A plan
    that yields anything after a statement so marked is a bug (:class:`RuntimeError`).
    """
    return _Last((query, params))


def is_last(stmt: Statement) -> bool:
    """``stmt`` was marked with :func:`last`."""
    return isinstance(stmt, _Last)


@dataclass(slots=True)
class StepInsert:
    """The usual step's checkpoint insert, the last statement of its plan: a driver writes it
    alone (:attr:`single`; SQLite binds :attr:`row` by position instead) or in one statement
    with other runs' steps (Postgres on an event loop: :mod:`tether.store._postgres_batch`).

    Attributes:
        query: the backend's statement that writes it alone, with named parameters
            (``INSERT_CHECKPOINT``, or ``INSERT_CHECKPOINT_FENCED`` when the run is leased).
        row: the 18 checkpoint values in ``CHECKPOINT_COLUMNS`` order (``created_at`` comes
            from the clock), then the fence: the run's ``execution_id`` and the lease holder,
            or two ``None`` for an unfenced insert.
        now: this process's clock (unix seconds), the ``:now`` of a driver without one.
    """

    query: Any
    row: tuple[Any, ...]
    now: float

    @property
    def single(self) -> Statement:
        """The insert as one statement with named parameters, marked :func:`last`."""
        params = dict(zip(STEP_FIELDS, self.row, strict=False))
        params["now"], params["owner"] = self.now, self.row[-1]
        return last(self.query, params)


PAST_LAST = "a write plan yielded a statement after the one it marked last"
