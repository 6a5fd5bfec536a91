"""Listings of runs and pending interrupts, written once for both backends: filters, keyset
pages, counts, and rows read one by one so that a damaged row spoils only its own entry.

**Keyset pages.** A page ends with the ``execution_id`` of its last entry; the next page is
the entries past that one in the listing's order, found by comparing the sort key as a row
value against that entry's own (read in a subquery): no ``OFFSET``, so page 50 costs what
page 1 costs, and an entry added meanwhile never shifts one into the next page twice.

**Damaged rows.** A row tether cannot decode (JSON that does not parse in one run's input,
a timestamp that holds text or no time a datetime holds, such as Postgres ``infinity``: see
:mod:`._times`; a name that is not UTF-8) is listed with what could be read, its
unreadable fields empty, and :attr:`~tether.store.base.RunRecord.damaged` naming them; the
listing itself never fails on it. Reading that one run by id still raises
:class:`~tether.errors.CorruptRecordError` naming the field. A run's checkpoints are read
as far as they decode by :class:`ReadableStore` (``tether runs show`` of a damaged run).

The SQL uses ``?`` placeholders and ``{schema}.`` before table names; each backend renders
it (SQLite drops the prefix, Postgres formats the schema and uses ``%s``).
"""

from __future__ import annotations

import builtins
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from ..checkpoint import Checkpoint
from ..errors import CorruptRecordError, ListingCursorError
from . import _codec
from ._records import PENDING, RUNS
from .base import PendingInterrupt, RunRecord

__all__ = [
    "PENDING_SORTS",
    "Listings",
    "PendingEntry",
    "PendingPage",
    "PendingQuery",
    "ReadableStore",
    "RunsPage",
    "RunsQuery",
    "decode_run",
]

#: How a pending listing may be sorted: the sort key's columns before ``execution_id``.
PENDING_SORTS: Final[dict[str, tuple[str, ...]]] = {
    "since": ("p.created_at",),
    "runner": ("COALESCE(r.runner_name, '')", "p.created_at"),
    "step": ("p.node_id", "p.created_at"),
    "reason": ("p.reason", "p.created_at"),
}
PAGE_MAX: Final = 1000
#: Schema v7: the runs listing's order as an index, so a page (the first or the 500th) reads
#: ``limit`` rows instead of sorting the table (110 ms -> ~1 ms at 200k runs on SQLite).
#: ``created_at`` never changes, so the index costs one insert per run and nothing after.
RUNS_ORDER_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS runs_created_idx ON {schema}.runs (created_at, execution_id)"
)


@dataclass(frozen=True, slots=True)
class RunsQuery:
    """Which runs to list, newest first (``oldest_first`` for the other way).

    Attributes:
        status: only runs in this status (``queued``, ``running``, ...), or in any of a
            tuple of them.
        runner_name: only runs of this runner.
        app_version: only runs started by this version of the code (docs/design.md §13).
        search: only runs whose execution_id contains this text.
        after: the execution_id the previous page ended with.
        limit: entries per page, 1 to 1000.
        count: also count every run the filters match (one more query).
    """

    status: str | tuple[str, ...] | None = None
    runner_name: str | None = None
    app_version: str | None = None
    search: str | None = None
    after: str | None = None
    limit: int = 100
    oldest_first: bool = False
    count: bool = False


@dataclass(frozen=True, slots=True)
class PendingQuery:
    """Which pending interrupts to list.

    Attributes:
        runner_name: only interrupts of runs of this runner.
        reason: only interrupts with this reason.
        waiting_seconds: only interrupts waiting at least this long.
        search: only runs whose execution_id contains this text.
        sort: a key of :data:`PENDING_SORTS` (default ``since``: oldest first).
        descending: reverse the order.
        after: the execution_id the previous page ended with.
        limit: entries per page, 1 to 1000.
        count: also count every interrupt the filters match.
    """

    runner_name: str | None = None
    reason: str | None = None
    waiting_seconds: float | None = None
    search: str | None = None
    sort: str = "since"
    descending: bool = False
    after: str | None = None
    limit: int = 100
    count: bool = False


@dataclass(slots=True)
class PendingEntry:
    """A pending interrupt with what the inbox shows of its run.

    Attributes:
        pending: the interrupt (``pending.damaged`` names what could not be read).
        runner_name / runner_kind: its run's runner (``None`` if the run row is gone).
        run_error: its run's recorded error (a worker that left it for other code).
    """

    pending: PendingInterrupt
    runner_name: str | None
    runner_kind: str | None
    run_error: str | None


@dataclass(slots=True)
class RunsPage:
    """A page of runs: ``next_after`` continues it (``None``: the last page); ``total`` is
    the number of runs the filters match (``None`` unless counted)."""

    items: list[RunRecord] = field(default_factory=list)
    next_after: str | None = None
    total: int | None = None


@dataclass(slots=True)
class PendingPage:
    """A page of pending interrupts, as :class:`RunsPage`."""

    items: list[PendingEntry] = field(default_factory=list)
    next_after: str | None = None
    total: int | None = None


def decode_run(row: Any) -> RunRecord:
    """A runs row as a listing's entry: undecodable fields empty and named in ``damaged``."""
    return _codec.decode_run(row)


def read_run(row: Any) -> RunRecord:
    """A runs row as a record (``get_run``), or :class:`CorruptRecordError` naming the run
    and its unreadable fields."""
    return _codec.run_from_row(row)


# --- SQL -----------------------------------------------------------------------------------
def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _where(*filters: tuple[str, Any]) -> tuple[str, list[Any]]:
    """A ``WHERE`` clause ANDing each ``(condition, value)`` whose value is not ``None``;
    ``value`` is the condition's ``?`` argument (a tuple: one ``?`` per item, as in ``IN``)."""
    sql, args = " WHERE 1 = 1", list[Any]()
    for condition, value in filters:
        if value is not None:
            sql += f" AND {condition}"
            args.extend(value if isinstance(value, tuple) else (value,))
    return sql, args


def _runs_where(q: RunsQuery) -> tuple[str, list[Any]]:
    status = q.status
    if isinstance(status, tuple):
        is_status = f"r.status IN ({', '.join('?' * len(status)) or 'NULL'})"
    else:
        is_status = "r.status = ?"
    return _where(
        (is_status, status),
        ("r.runner_name = ?", q.runner_name),
        ("r.app_version = ?", q.app_version),
        ("r.execution_id LIKE ? ESCAPE '\\'", _like(q.search) if q.search else None),
    )


def runs_sql(q: RunsQuery) -> tuple[str, list[Any]]:
    """The page query of ``q``: ``limit + 1`` rows, to know whether another page follows."""
    columns = RUNS.qualified("r")
    where, args = _runs_where(q)
    order = "ASC" if q.oldest_first else "DESC"
    if q.after is not None:
        cmp = ">" if q.oldest_first else "<"
        where += (
            f" AND (r.created_at, r.execution_id) {cmp} "
            "(SELECT a.created_at, a.execution_id FROM {schema}.runs a WHERE a.execution_id = ?)"
        )
        args.append(q.after)
    sql = (
        f"SELECT {columns} FROM {{schema}}.runs r{where} "
        f"ORDER BY r.created_at {order}, r.execution_id {order} LIMIT ?"
    )
    return sql, [*args, _page_size(q.limit) + 1]


def runs_count_sql(q: RunsQuery) -> tuple[str, list[Any]]:
    where, args = _runs_where(q)
    return f"SELECT COUNT(*) FROM {{schema}}.runs r{where}", args


def _pending_where(q: PendingQuery, cutoff: Any) -> tuple[str, list[Any]]:
    return _where(
        ("r.runner_name = ?", q.runner_name),
        ("p.reason = ?", q.reason),
        ("p.created_at <= ?", cutoff),
        ("p.execution_id LIKE ? ESCAPE '\\'", _like(q.search) if q.search else None),
    )


_PENDING_FROM: Final = (
    " FROM {schema}.pending_interrupts p LEFT JOIN {schema}.runs r"
    " ON r.execution_id = p.execution_id"
)


def pending_sql(q: PendingQuery, cutoff: Any) -> tuple[str, list[Any]]:
    """The page query of ``q`` (``cutoff``: the backend's timestamp for ``waiting_seconds``)."""
    if q.sort not in PENDING_SORTS:
        raise ValueError(f"sort must be one of {', '.join(PENDING_SORTS)}, got {q.sort!r}")
    keys = (*PENDING_SORTS[q.sort], "p.execution_id")
    columns = PENDING.qualified("p")
    where, args = _pending_where(q, cutoff)
    order = "DESC" if q.descending else "ASC"
    if q.after is not None:
        cmp = "<" if q.descending else ">"
        # The same key expressions over the entry the page ended with (aliases p and r again).
        mine = ", ".join(keys)
        where += f" AND ({mine}) {cmp} (SELECT {mine}{_PENDING_FROM} WHERE p.execution_id = ?)"
        args.append(q.after)
    sql = (
        f"SELECT {columns}, r.runner_name, r.runner_kind, r.error{_PENDING_FROM}{where} "
        f"ORDER BY {', '.join(f'{k} {order}' for k in keys)} LIMIT ?"
    )
    return sql, [*args, _page_size(q.limit) + 1]


def pending_count_sql(q: PendingQuery, cutoff: Any) -> tuple[str, list[Any]]:
    where, args = _pending_where(q, cutoff)
    return f"SELECT COUNT(*){_PENDING_FROM}{where}", args


def _page_size(limit: int) -> int:
    return max(1, min(PAGE_MAX, int(limit)))


# --- the operations, once for both backends ------------------------------------------------
class Listings:
    """The listing operations of a checkpointer, over two hooks its backend provides:
    ``_listing_rows(sql, args)`` (run one query of this module, return its rows) and
    ``_listing_time(datetime)`` (a timestamp as the backend stores it)."""

    def _listing_rows(self, sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _listing_time(self, when: _dt.datetime) -> Any:
        raise NotImplementedError

    def list_runs_page(self, query: RunsQuery) -> RunsPage:
        """A page of runs (see :class:`RunsQuery`); damaged rows are listed, not raised."""
        rows = self._listing_rows(*runs_sql(query))
        if not rows and query.after is not None:
            self._check_after(_RUN_EXISTS, query.after, "run")
        page = RunsPage([decode_run(r) for r in rows[: _page_size(query.limit)]])
        if len(rows) > _page_size(query.limit):
            page.next_after = page.items[-1].execution_id
        if query.count:
            page.total = int(self._listing_rows(*runs_count_sql(query))[0][0])
        return page

    def list_pending_page(self, query: PendingQuery) -> PendingPage:
        """A page of pending interrupts with their runs' runner names (see
        :class:`PendingQuery`); damaged rows are listed, not raised."""
        cutoff = None
        if query.waiting_seconds is not None:
            now = _dt.datetime.now(_dt.UTC)
            cutoff = self._listing_time(now - _dt.timedelta(seconds=query.waiting_seconds))
        rows = self._listing_rows(*pending_sql(query, cutoff))
        if not rows and query.after is not None:
            self._check_after(_PENDING_EXISTS, query.after, "pending interrupt")
        page = PendingPage()
        width = _codec.PENDING_WIDTH
        for row in rows[: _page_size(query.limit)]:
            runner = _optional_text_or_none(row[width])
            page.items.append(
                PendingEntry(
                    _codec.decode_pending(row[:width]),
                    runner,
                    _optional_text_or_none(row[width + 1]),
                    _optional_text_or_none(row[width + 2]),
                )
            )
        if len(rows) > _page_size(query.limit):
            page.next_after = page.items[-1].pending.execution_id
        if query.count:
            page.total = int(self._listing_rows(*pending_count_sql(query, cutoff))[0][0])
        return page

    def _check_after(self, sql: str, after: str, entry: str) -> None:
        # The page after an entry is read against that entry's own sort key; an entry gone
        # since (answered, deleted, pruned) has none, and the page would read as the last.
        if not self._listing_rows(sql, [after]):
            raise ListingCursorError(
                f"no {entry} {after!r} to continue after: it was answered or deleted since "
                "the previous page was listed; list again from the first page",
                execution_id=after,
            )

    def list_runs(
        self, *, status: str | None = None, runner_name: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered by status and runner name (damaged rows
        listed with :attr:`~tether.store.base.RunRecord.damaged` set)."""
        query = RunsQuery(status=status, runner_name=runner_name, limit=limit)
        return self.list_runs_page(query).items

    def list_pending_interrupts(self, *, limit: int = 100) -> list[PendingInterrupt]:
        """Pending interrupts, oldest first (damaged rows listed with ``damaged`` set)."""
        return [e.pending for e in self.list_pending_page(PendingQuery(limit=limit)).items]


_RUN_EXISTS: Final = "SELECT 1 FROM {schema}.runs WHERE execution_id = ?"
_PENDING_EXISTS: Final = "SELECT 1 FROM {schema}.pending_interrupts WHERE execution_id = ?"


def _optional_text_or_none(value: Any) -> str | None:
    try:
        return _codec.optional_text(value)
    except Exception:  # a damaged name: shown with its bad bytes replaced
        return _codec.shown_text(value)


@runtime_checkable
class ReadableStore(Protocol):
    """The optional capability of a store that reads a damaged run as far as it can (both
    bundled backends), so an operator can see what it did (``tether runs show``)."""

    def list_readable(
        self, execution_id: str
    ) -> tuple[builtins.list[Checkpoint], CorruptRecordError | None]:
        """The run's checkpoints in seq order, as
        :meth:`~tether.store.base.Checkpointer.list` returns them, up to the first row that
        cannot be decoded.

        Returns:
            ``(checkpoints, damage)``: the rows before the damaged one, and the
            :class:`~tether.errors.CorruptRecordError` naming it (its ``execution_id`` and
            ``seq``), or ``None`` when every row reads (then ``checkpoints`` is every row).
            Rows after the damaged one are left out: a state stored as a delta needs every
            row back to its snapshot.
        """
