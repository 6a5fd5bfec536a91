"""What runs a plan on a tether store, for an integration that keeps its own tables in the
store (the LangGraph saver, :mod:`tether.integrations.langgraph`).

A plan (:data:`Plan`) yields statements and is sent each one's :class:`Result`; :func:`last`
marks a write plan's final statement, which a driver runs alone. Each bundled checkpointer
exposes the driver of its own operations as ``store.driver`` (:class:`Driver`; SQLite's is a
:class:`SQLiteDriver`), so an integration's plans run with the store's connections, write
lock, WAL checkpointing, reconnects and error translation, never a driver of their own.
:func:`translate_sqlite_error` turns a :mod:`sqlite3` error into tether's error tree, as the
SQLite store does. Defined in the store's ``_plans`` and ``_sqlite_io`` modules; this module is
their public name (docs/design.md §11).
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from ._plans import Plan, Result, Statement, Write, is_last, last
from ._sqlite_io import translate as translate_sqlite_error

__all__ = [
    "Driver",
    "Plan",
    "Result",
    "SQLiteDriver",
    "Statement",
    "Write",
    "is_last",
    "last",
    "translate_sqlite_error",
]

T = TypeVar("T")


class Driver(Protocol):
    """Runs plans on a store's database (``SQLiteCheckpointer.driver``,
    ``PostgresCheckpointer.driver``).

    A write plan runs in one transaction, begun before its first statement, unless that
    statement is marked :func:`last` (then it runs alone, atomic by itself). A read plan's
    statements each run on their own. A driver error is thrown into the plan at the statement
    that caused it; one the plan does not handle comes out as a
    :class:`~tether.errors.StoreError` subclass.
    """

    def run(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """Run ``plan`` and return its value.

        Args:
            op: the operation's name, for error messages and traces (``"langgraph.put"``).
            plan: the plan.
            write: ``False``, reads; ``True``, one transaction; ``"each"``, writes each
                atomic by itself.
            execution_id: the run the plan writes, for error messages.

        Raises:
            StoreError: a driver error the plan did not handle, translated.
        """

    async def arun(
        self, op: str, plan: Plan[T], *, write: Write = False, execution_id: str | None = None
    ) -> T:
        """Async :meth:`run`."""


class SQLiteDriver(Driver, Protocol):
    """SQLite's :class:`Driver`, which can also hold a read plan to one snapshot."""

    def run_snapshot(self, op: str, plan: Plan[T]) -> T:
        """Run a read plan inside one read transaction (``BEGIN`` … ``COMMIT``), so all its
        statements see the file as it was at the first (a writer may commit meanwhile).

        Raises:
            StoreError: a driver error the plan did not handle, translated.
        """
