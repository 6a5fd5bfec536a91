"""Rows <-> records for the runs, pending-interrupts and audit tables, each read by name.

A table's columns are listed once, as a :class:`Layout`: each column's name (the SQL modules
select ``layout.sql``, the names in that order) and how its value is read. A record is built
from a row by those names, never by ``row[9]``, and a damaged row is decoded by the same list
one field at a time (what a listing shows of it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, NamedTuple, TypeVar

from .. import serde
from ..audit import AuditEntry
from ..errors import CorruptRecordError
from ._times import ts_to_dt
from .base import RUN_STATUSES, PendingInterrupt, RunRecord

__all__ = [
    "AUDIT",
    "PENDING",
    "RUNS",
    "Layout",
    "load_json",
    "optional_text",
    "shown_text",
    "ts_to_dt",
]

R = TypeVar("R")


def load_json(data: Any) -> Any:
    """Decode a JSON column value (``None`` for SQL NULL)."""
    if data is None:
        return None
    if isinstance(data, memoryview):
        data = bytes(data)
    return serde.loads(data)


def _text(value: Any) -> str:
    if isinstance(value, bytes | memoryview):
        raise ValueError("not text")
    text = str(value)
    text.encode("utf-8")  # a name read past a decode error holds surrogates: refuse it
    return text


def shown_text(value: Any) -> str:
    """Unreadable text, readable: bad bytes as U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def optional_text(value: Any) -> str | None:
    """A nullable text column's value; ``ValueError`` (or ``UnicodeEncodeError``) if it is
    not text."""
    return None if value is None else _text(value)


def _run_status(value: Any) -> str:
    # A status a newer (or broken) writer left is not guessed at, as a checkpoint row's is not.
    status = _text(value)
    if status not in RUN_STATUSES:
        raise CorruptRecordError(f"status {status!r} is not one this tether knows")
    return status


def _is_text(value: Any) -> bool:
    # A SQLite column holds whatever was written to it: a name stored as bytes would reach
    # the views as bytes.
    return type(value) is str


def _is_optional_text(value: Any) -> bool:
    return value is None or type(value) is str


class Column(NamedTuple):
    """One column: its name (the record's field) and how its stored value is read.

    Attributes:
        name: the column's and the field's name.
        read: the value as the record holds it (``None``: as stored).
        careful: the reading of one field of a damaged row (raises on a bad value).
        valid: for text, whether a stored value is one (checked on every row read whole).
        shown: a damaged value is shown as text (a name), not left empty.
    """

    name: str
    read: Callable[[Any], Any] | None
    careful: Callable[[Any], Any]
    valid: Callable[[Any], bool] | None = None
    shown: bool = False


def _text_column(name: str) -> Column:
    return Column(name, None, _text, _is_text, shown=True)


def _optional_text_column(name: str) -> Column:
    return Column(name, None, optional_text, _is_optional_text)


def _json_column(name: str) -> Column:
    return Column(name, load_json, load_json)


def _time_column(name: str) -> Column:
    return Column(name, ts_to_dt, ts_to_dt)


@dataclass(frozen=True)
class Layout(Generic[R]):
    """A table's columns, in the order its statements select them, and its record.

    Attributes:
        record: builds the record from the columns' values, by name.
        columns: the columns.
        damaged: the message of :class:`CorruptRecordError` for a row that cannot be read
            whole (``{execution_id}`` and ``{damaged}`` filled in).
        sql: the column names as a select list (``"execution_id, runner_name, ..."``).
    """

    record: Callable[..., R]
    columns: tuple[Column, ...]
    damaged: str = ""
    sql: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sql", ", ".join(c.name for c in self.columns))

    def __len__(self) -> int:
        return len(self.columns)

    def qualified(self, alias: str) -> str:
        """:attr:`sql` with each name qualified by a table alias (``p.execution_id, ...``)."""
        return ", ".join(f"{alias}.{c.name}" for c in self.columns)

    def build(self, row: Any) -> R:
        """The record of a row read whole, each column as its ``read`` gives it."""
        return self.record(
            **{
                c.name: raw if c.read is None else c.read(raw)
                for c, raw in zip(self.columns, row, strict=True)
            }
        )

    def strict(self, row: Any) -> R:
        """The record of ``row``.

        Raises:
            CorruptRecordError: a field cannot be read (JSON that does not parse, a timestamp
                holding text, a name stored as bytes), naming the run and each such field.
        """
        try:
            record = self.build(row)
            pairs = zip(self.columns, row, strict=True)
            whole = all(c.valid is None or c.valid(raw) for c, raw in pairs)
        except Exception:  # which field: decoded again one at a time, below
            whole = False
        if not whole:
            record = self.lenient(row)
            eid = getattr(record, "execution_id", None)
            text = self.damaged.format(execution_id=eid, damaged=getattr(record, "damaged", None))
            raise CorruptRecordError(text, execution_id=eid)
        return record

    def tolerant(self, row: Any) -> R:
        """The record of ``row`` as :meth:`build` reads it, or when a field cannot be read
        at all (a time that is no time) as :meth:`lenient` does: never raising."""
        try:
            return self.build(row)
        except Exception:  # which field: decoded again one at a time
            return self.lenient(row)

    def lenient(self, row: Any) -> R:
        """The record of ``row``, never raising: undecodable fields are left empty (a name is
        shown with bad bytes replaced) and named in the record's ``damaged``."""
        values: dict[str, Any] = {}
        problems: list[str] = []
        for c, raw in zip(self.columns, row, strict=False):
            try:
                values[c.name] = c.careful(raw)
            except Exception as exc:  # any undecodable value: this field of this row only
                # A reason's first clause: a time's own words hold no ": " (see _times).
                reason = exc.message.split(": ")[0] if isinstance(exc, CorruptRecordError) else ""
                problems.append(f"{c.name} unreadable ({reason or type(exc).__name__})")
                values[c.name] = shown_text(raw) if c.shown else None
        return self.record(**values, damaged="; ".join(problems) or None)


RUNS: Final = Layout(
    RunRecord,
    (
        _text_column("execution_id"),
        _text_column("runner_name"),
        _text_column("runner_kind"),
        Column("status", None, _run_status, lambda v: _is_text(v) and v in RUN_STATUSES, True),
        _json_column("input"),
        _optional_text_column("parent_execution_id"),
        _optional_text_column("parent_checkpoint_id"),
        _optional_text_column("owner"),
        _time_column("lease_expires_at"),
        _optional_text_column("error"),
        _time_column("created_at"),
        _time_column("updated_at"),
        _time_column("finished_at"),
        _optional_text_column("app_version"),
    ),
    "run {execution_id!r} is damaged: {damaged}",
)
"""The runs table."""

PENDING: Final = Layout(
    PendingInterrupt,
    (
        _text_column("execution_id"),
        _text_column("checkpoint_id"),
        _text_column("node_id"),
        _optional_text_column("agent_path"),
        _text_column("reason"),
        _json_column("context"),
        _time_column("created_at"),
        _optional_text_column("claimed_by"),
        _time_column("claim_expires_at"),
        _json_column("resume_value"),
        _time_column("due_at"),
    ),
    "the pending interrupt of run {execution_id!r} is damaged: {damaged}",
)
"""The pending-interrupts table."""


def _json_or_damage(column: str, *, only_dict: bool = False) -> Callable[[Any], Any]:
    def read(data: Any) -> Any:
        try:
            value = load_json(data)
        except Exception as exc:  # one damaged row is named, never fatal to the listing
            value = {"unreadable": f"the stored {column} cannot be read: {exc}"}
        return None if only_dict and not isinstance(value, dict) else value

    return read


def _audit_column(name: str, read: Callable[[Any], Any] | None = None) -> Column:
    return Column(name, read, read or (lambda raw: raw))


AUDIT: Final = Layout(
    AuditEntry,
    (
        _audit_column("execution_id"),
        _audit_column("action"),
        _audit_column("via"),
        _audit_column("actor"),
        _audit_column("note"),
        _audit_column("data", _json_or_damage("data")),
        _audit_column("checkpoint_id"),
        _audit_column("interrupt", _json_or_damage("interrupt", only_dict=True)),
        _audit_column("at", ts_to_dt),
        _audit_column("entry_id", int),
    ),
)
"""The audit trail: a row whose JSON cannot be read is still listed, the damage named in its
``data``, and a row whose ``at`` is no time is listed with ``at`` empty and
:attr:`~tether.audit.AuditEntry.damaged` naming it (:meth:`Layout.tolerant`: one bad row
never hides the rest of a run's trail)."""
