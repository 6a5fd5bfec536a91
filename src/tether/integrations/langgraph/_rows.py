"""Reading the saver's rows back, refusing what a lost row, a bad restore or a hand edit left.

Every value a row holds is checked for what its column stores before it is used: a damaged
one is a :class:`~tether.errors.CorruptRecordError` naming the thread, the checkpoint and the
column (``execution_id`` the thread), never a raw ``TypeError`` or ``ValueError`` from inside
LangGraph or a serializer, nor a value of another type handed on (SQLite keeps any type in
any column: a number stored where bytes belong would read as that many zero bytes).

A state is replayed only from a whole chain: every row from the full snapshot the row names
(``base_seq``) to the row itself. A delta applied after a missing row would hand back a state
without what the lost row changed, without a word. The check compares the seqs already read
(the first row, how many rows), so it costs nothing a whole chain would not. Rows only ever
lack a predecessor before a full snapshot: ``delete_for_runs`` stores the row after the rows it
deletes whole (:func:`~._plans.delete_for_runs`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from ... import serde as _tether_serde
from ...errors import CorruptRecordError
from ...store import encoding
from ._state import Encoder

__all__ = [
    "COMPRESSED_SUFFIX",
    "Loaded",
    "Row",
    "blob",
    "check_chain",
    "damaged",
    "metadata_of",
    "replay",
    "replayed",
    "row_of",
    "subject",
    "tuple_of",
]

COMPRESSED_SUFFIX = "+zstd"


@dataclass(slots=True)
class Row:
    """A checkpoint row without its state."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    seq: int
    base_seq: int
    parent_checkpoint_id: str | None
    metadata: bytes


@dataclass(slots=True)
class Loaded:
    """A row with the raw (JSON, envelopes closed) state it holds and its pending writes."""

    row: Row
    raw: dict[str, Any]
    writes: list[tuple[Any, ...]]  # (task_id, channel, type, value, task_path, idx)


def subject(thread_id: str, ns: str) -> str:
    """How errors name a thread namespace's rows."""
    return f"thread {thread_id!r}" + (f", namespace {ns!r}" if ns else "")


def damaged(
    thread_id: Any, ns: Any, checkpoint_id: Any, column: str, why: str
) -> CorruptRecordError:
    """The error for the value of ``column`` in the row of checkpoint ``checkpoint_id``."""
    thread = thread_id if type(thread_id) is str else repr(thread_id)
    name = subject(thread_id, ns) if type(thread_id) is str and type(ns) is str else thread
    return CorruptRecordError(
        f"{name}, checkpoint {checkpoint_id!r}, column {column}: {why}",
        execution_id=thread,
    )


def blob(value: Any) -> bytes | None:
    """A stored payload as bytes (text, as a hand edit in SQLite's shell stores it, as its
    UTF-8); ``None`` for anything else."""
    if type(value) is bytes:
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return None


def row_of(thread_id: Any, ns: Any, values: Sequence[Any]) -> Row:
    """A :class:`Row` from ``(checkpoint_id, seq, base_seq, parent_checkpoint_id, metadata)``.

    Raises:
        CorruptRecordError: a value is not of its column's type, naming the column.
    """
    checkpoint_id, seq, base_seq, parent, metadata = values
    if type(thread_id) is not str:
        column, why = "thread_id", f"{thread_id!r} is not text"
    elif type(ns) is not str:
        column, why = "checkpoint_ns", f"{ns!r} is not text"
    elif type(checkpoint_id) is not str:
        column, why = "checkpoint_id", f"{checkpoint_id!r} is not text"
    elif type(seq) is not int:
        column, why = "seq", f"{seq!r} is not an integer"
    elif type(base_seq) is not int:
        column, why = "base_seq", f"{base_seq!r} is not an integer"
    elif parent is not None and type(parent) is not str:
        column, why = "parent_checkpoint_id", f"{parent!r} is not text"
    else:
        meta = blob(metadata)
        if meta is not None:
            return Row(thread_id, ns, checkpoint_id, seq, base_seq, parent, meta)
        column, why = "metadata", f"stored metadata is {type(metadata).__name__}, not JSON"
    raise damaged(thread_id, ns, checkpoint_id, column, why)


def check_chain(row: Row, chain: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
    """``chain`` (``(seq, state_kind, state)`` from seq ``row.base_seq`` to ``row.seq``), if it
    is every row from ``row``'s full snapshot to it.

    Raises:
        CorruptRecordError: rows are missing (naming the thread, the checkpoint and the seqs).
    """
    name = f"{subject(row.thread_id, row.checkpoint_ns)}, checkpoint {row.checkpoint_id!r}"
    encoding.check_state_chain(row.thread_id, chain, row.base_seq, row.seq, subject=name)
    return chain


def replay(row: Row, chain: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The raw state of ``row`` from its checked ``chain``."""
    name = subject(row.thread_id, row.checkpoint_ns)
    return encoding.replay_state(check_chain(row, chain), row.thread_id, subject=name)  # type: ignore[arg-type]


def replayed(
    thread_id: str, ns: str, chain: Iterable[Sequence[Any]]
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """Each row of ``chain`` (``(seq, state_kind, state)`` in seq order, from a full snapshot)
    as ``(seq, the seq of the full snapshot it replays from, its raw state)``; each state is a
    new dict (the caller may keep them all).

    Raises:
        CorruptRecordError: a delta whose previous row is missing, or a state that cannot be
            read, naming the thread and the seq.
    """
    name = subject(thread_id, ns)
    cur: dict[str, Any] = {}
    base = prev = None
    for seq, kind, payload in chain:
        if kind == "full":
            base = seq
        elif prev is None:
            raise CorruptRecordError(
                f"{name}, seq {seq}: its state chain does not start at a full snapshot",
                execution_id=thread_id,
                seq=seq,
            )
        elif seq != prev + 1:
            span = f"seq {prev + 1}" if seq == prev + 2 else f"seq {prev + 1} to {seq - 1}"
            raise CorruptRecordError(
                f"{name}: rows are missing from its state chain at {span}",
                execution_id=thread_id,
                seq=prev + 1,
            )
        cur = encoding.apply_row_of(thread_id, seq, cur, kind, payload, subject=name)
        prev = seq
        yield seq, base, cur  # type: ignore[misc]


def metadata_of(row: Row) -> dict[str, Any]:
    """The row's metadata.

    Raises:
        CorruptRecordError: it is not a JSON object.
    """
    try:
        meta = _tether_serde.loads(row.metadata)
    except CorruptRecordError as exc:
        raise _at(row, "metadata", exc.message) from exc
    if type(meta) is not dict:
        raise _at(row, "metadata", f"stored metadata is a {type(meta).__name__}, not an object")
    return meta


def tuple_of(encoder: Encoder, loaded: Loaded) -> CheckpointTuple:
    """The LangGraph tuple of a loaded row, its writes in LangGraph's order.

    Raises:
        CorruptRecordError: a value cannot be read back, naming the thread, the checkpoint
            and the column.
    """
    row = loaded.row
    ids = {"thread_id": row.thread_id, "checkpoint_ns": row.checkpoint_ns}
    config: RunnableConfig = {"configurable": {**ids, "checkpoint_id": row.checkpoint_id}}
    parent: RunnableConfig | None = None
    if row.parent_checkpoint_id:
        parent = {"configurable": {**ids, "checkpoint_id": row.parent_checkpoint_id}}
    try:
        checkpoint = encoder.decode(loaded.raw, row.checkpoint_id)
    except CorruptRecordError as exc:
        raise _at(row, "state", exc.message) from exc
    writes = sorted((_write(row, w) for w in loaded.writes), key=lambda w: (w[4], w[0], w[5]))
    pending = [(w[0], w[1], _load_write(encoder, row, w)) for w in writes]
    metadata = metadata_of(row)
    return CheckpointTuple(config, checkpoint, metadata, parent, pending)  # type: ignore[arg-type]


_WRITE_TEXT = (("task_id", 0), ("channel", 1), ("type", 2), ("task_path", 4))


def _write(row: Row, w: Sequence[Any]) -> tuple[Any, ...]:
    """A write ``(task_id, channel, type, value, task_path, idx)`` whose columns are checked."""
    for column, at in _WRITE_TEXT:
        if type(w[at]) is not str:
            raise _at(row, column, f"{w[at]!r} is not text", w)
    if type(w[5]) is not int:
        raise _at(row, "idx", f"{w[5]!r} is not an integer", w)
    value = b"" if w[3] is None else blob(w[3])
    if value is None:
        raise _at(row, "value", f"stored value is {type(w[3]).__name__}, not bytes", w)
    return (w[0], w[1], w[2], value, w[4], w[5])


def _load_write(encoder: Encoder, row: Row, w: tuple[Any, ...]) -> Any:
    type_, payload = w[2], w[3]
    try:
        if type_.endswith(COMPRESSED_SUFFIX):
            type_ = type_[: -len(COMPRESSED_SUFFIX)]
            payload = encoding.decompress_state(payload)
        return encoder.load_typed(type_, payload)
    except CorruptRecordError as exc:
        raise _at(row, "value", exc.message, w) from exc


def _at(row: Row, column: str, why: str, write: Sequence[Any] | None = None) -> CorruptRecordError:
    if write is not None:
        column = f"{column} of the write (task {write[0]!r}, idx {write[5]!r})"
    return damaged(row.thread_id, row.checkpoint_ns, row.checkpoint_id, column, why)
