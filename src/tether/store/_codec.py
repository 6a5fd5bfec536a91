"""Row <-> record mapping shared by the SQL backends.

How a row's state is stored lives beside this module: :mod:`._delta` (full snapshots and
deltas), :mod:`._replay` (reading them back), :mod:`._compression` (Zstandard frames),
:mod:`._node_input` (``node_input`` values stored once, in the state) and :mod:`._heads` (the
writer's head of each run). The names the backends use from them are re-exported here.
"""

from __future__ import annotations

import bisect
import datetime as _dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from .. import serde
from ..checkpoint import Checkpoint, new_id
from ..errors import ConfigurationError, CorruptRecordError
from ._compression import COMPRESS_MIN_BYTES, check_compress_min_bytes, compress_state
from ._delta import Head, empty_head, encode_next
from ._heads import HeadCache
from ._node_input import dump_node_input, load_node_input
from ._records import PENDING, RUNS, load_json, optional_text, shown_text, ts_to_dt
from ._replay import (
    Tracks,
    apply_row_of,
    check_state_chain,
    copy_raw,
    decode_state,
    head_from_raw,
    no_snapshot,
    replay_in_place,
    replay_state,
    rows_missing,
)
from ._rows import CHAIN, CHECKPOINT_COLUMNS, CP

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COMPRESS_MIN_BYTES",
    "PENDING_COLUMNS",
    "PENDING_WIDTH",
    "RUN_COLUMNS",
    "Head",
    "HeadCache",
    "apply_row_of",
    "check_compress_min_bytes",
    "check_state_chain",
    "checkpoint_from_row",
    "checkpoint_params",
    "checkpoints_from_rows",
    "compress_state",
    "decode_pending",
    "decode_run",
    "decode_state",
    "dump_json",
    "empty_head",
    "head_from_raw",
    "load_cached",
    "load_json",
    "optional_text",
    "pending_from_row",
    "prune_cutoff",
    "readable_checkpoints",
    "replay_state",
    "resumable_lies_further_back",
    "resume_point",
    "run_from_row",
    "shown_text",
    "state_chain_bounds",
    "ts_to_dt",
]

RUN_COLUMNS: Final = RUNS.sql
PENDING_COLUMNS: Final = PENDING.sql
PENDING_WIDTH: Final = len(PENDING)
"""Columns of a pending row (:data:`PENDING_COLUMNS`)."""
run_from_row = RUNS.strict
pending_from_row = PENDING.strict
decode_run = RUNS.lenient
decode_pending = PENDING.lenient


def dump_json(value: Any, path: str) -> bytes | None:
    """A JSON column value (``None`` stays SQL NULL)."""
    return None if value is None else serde.dumps(value, path)


def prune_cutoff(older_than: _dt.timedelta | _dt.datetime, now: float) -> float:
    """The unix time before which finished runs are pruned.

    Args:
        older_than: an age (``timedelta``, counted back from ``now``) or an absolute,
            timezone-aware cutoff (``datetime``).
        now: the current unix time in seconds.

    Raises:
        ConfigurationError: a naive datetime, or neither a timedelta nor a datetime.
    """
    if isinstance(older_than, _dt.timedelta):
        return now - older_than.total_seconds()
    if isinstance(older_than, _dt.datetime):
        if older_than.tzinfo is None:
            raise ConfigurationError("prune cutoff datetime must be timezone-aware (UTC)")
        return older_than.timestamp()
    raise ConfigurationError(f"older_than must be a timedelta or datetime, got {older_than!r}")


def checkpoint_params(
    cp: Checkpoint,
    head: Head | None,
    *,
    force_full: bool = False,
    compress_min_bytes: int | None = COMPRESS_MIN_BYTES,
) -> tuple[tuple[Any, ...], Head]:
    """The column values of ``cp`` in :data:`CHECKPOINT_COLUMNS` order, without ``created_at``
    (each backend stamps its own clock), and the writer head after it. The state payload is
    compressed per :func:`compress_state` with ``compress_min_bytes`` (a delta only from
    :data:`~._compression.DELTA_COMPRESS_MIN_BYTES`).

    Assigns ``cp.seq`` and, when empty, ``cp.checkpoint_id``. Encodes everything before the
    caller writes, so a value JSON cannot store fails with nothing written.

    Raises:
        SerializationError: naming the field or ``state["key"]`` path that cannot be stored.
    """
    # Most of a step's columns are NULL: each is tested here rather than in a call.
    node_input = (
        None if cp.node_input is None else dump_node_input(cp.node_input, cp.state_snapshot)
    )
    output = cp.node_output
    node_output = None if output is None else serde.dumps(output, "node_output")
    counters = cp.iteration_counters
    counters_json = serde.dumps(counters, "iteration_counters") if counters else None
    context = cp.interrupt_context
    context = None if context is None else serde.dumps(context, "interrupt_context")
    kind, payload, new_head = encode_next(head, cp.state_snapshot, force_full=force_full)
    if compress_min_bytes is not None and len(payload) >= compress_min_bytes:
        payload = compress_state(payload, compress_min_bytes, delta=kind == "delta")
    cp.seq = new_head.seq
    cp.checkpoint_id = cp.checkpoint_id or new_id()
    params = (
        cp.checkpoint_id,
        cp.execution_id,
        cp.seq,
        cp.node_id,
        cp.node_index,
        cp.step_type,
        cp.status,
        kind,
        payload,
        new_head.base_seq,
        node_input,
        node_output,
        counters_json,
        cp.interrupt_reason,
        context,
        cp.agent_path,
        cp.parent_checkpoint_id,
        cp.next_node_id,
    )
    return params, new_head


def checkpoints_from_rows(
    rows: Iterable[Sequence[Any]], agent_path_prefix: str | None = None
) -> list[Checkpoint]:
    """A run's rows, read in seq order from its first, as checkpoints with full states
    (each row's delta replayed onto the one before), keeping only rows written at
    ``agent_path_prefix`` or under it when given."""
    prefix = None if agent_path_prefix is None else agent_path_prefix.rstrip("/")
    out: list[Checkpoint] = []
    for row, raw in _replayed(rows):
        path = row[CP.agent_path]
        if prefix is not None and not (
            path == prefix or (path is not None and path.startswith(prefix + "/"))
        ):
            continue
        out.append(checkpoint_from_row(row, decode_state(raw)))
    return out


def readable_checkpoints(
    rows: Sequence[Sequence[Any]],
) -> tuple[list[Checkpoint], CorruptRecordError | None]:
    """A damaged run's rows as far as they can be read, for showing it: the checkpoints before
    the first row that cannot be decoded, and the error naming that row (``execution_id`` and
    ``seq`` set); ``None`` when every row reads. Rows after the damaged one are not returned:
    a delta's state needs every row back to its snapshot (``len(rows) - len(checkpoints)``
    rows are left out)."""
    out: list[Checkpoint] = []
    try:
        for row, raw in _replayed(rows):
            out.append(checkpoint_from_row(row, decode_state(raw)))
    except CorruptRecordError as exc:
        row = rows[len(out)]  # the row being read: every row before it was returned
        return out, _at_row(exc, row[CP.execution_id], row[CP.seq])
    return out, None


def _replayed(rows: Iterable[Sequence[Any]]) -> Iterator[tuple[Sequence[Any], dict[str, Any]]]:
    """Each of a run's rows (in seq order) with its raw state, replayed from its first row.

    Raises:
        CorruptRecordError: a row's state cannot be read, or rows of its chain are missing.
    """
    raw: dict[str, Any] = {}
    last = None
    for row in rows:
        eid, seq, kind = row[CP.execution_id], row[CP.seq], row[CP.state_kind]
        if kind != "full":
            if last is None:
                raise no_snapshot(eid, row[CP.base_seq], seq)
            if seq != last + 1:
                raise rows_missing(eid, last + 1, seq - 1)
        last = seq
        raw = apply_row_of(eid, seq, raw, kind, row[CP.state])
        yield row, raw


def _at_row(exc: CorruptRecordError, execution_id: str, seq: int) -> CorruptRecordError:
    """``exc`` with the run and the seq of the row it was raised for (in its message unless
    it names the run already: a gap in the chain names its own seqs)."""
    if exc.seq == seq and exc.execution_id == execution_id:
        return exc
    text = exc.message
    if exc.execution_id != execution_id:
        text = f"run {execution_id!r}, seq {seq}: {text}"
    named = CorruptRecordError(text, execution_id=execution_id, node_id=exc.node_id, seq=seq)
    named.__cause__ = exc
    return named


def resumable_lies_further_back(newest: Sequence[Sequence[Any]]) -> bool:
    """Whether the run's two newest rows (``newest``, in :data:`CHECKPOINT_COLUMNS` order) are
    both run-end markers, so that the row a resume re-enters lies further back and the caller
    reads it too before :func:`state_chain_bounds`."""
    return len(newest) == 2 and all(r[CP.step_type] == "run_end" for r in newest)


def state_chain_bounds(rows: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """The seqs ``(first, last)`` of the state chain :func:`resume_point` needs for ``rows``:
    from the full snapshot under the oldest of them up to the newest. Read as ``(seq,
    state_kind, state)`` only: for a long run it is most of its rows, and the other columns
    would cost more to fetch than the states."""
    return min(r[CP.base_seq] for r in rows), max(r[CP.seq] for r in rows)


def load_cached(execution_id: str, key: str, data: Any) -> Any:
    """A stored ``@idempotent`` result (a JSON column value), decoded.

    Raises:
        CorruptRecordError: naming the run and the key, when the stored value cannot be read.
    """
    try:
        return load_json(data)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"run {execution_id!r}: the stored result of @idempotent key {key!r} is damaged: "
            f"{exc.message}",
            execution_id=execution_id,
        ) from exc


def resume_point(
    rows: Sequence[Sequence[Any]], chain: Sequence[Sequence[Any]]
) -> tuple[Checkpoint | None, str | None, Head]:
    """The row a resume re-enters, read in one pass with the writer head that follows it.

    Args:
        rows: rows of one run in :data:`CHECKPOINT_COLUMNS` order, any order, holding its
            newest row and its newest row that is not a run-end marker (if it has one).
        chain: ``(seq, state_kind, payload)`` in seq order from the snapshot under the
            resumable row (or under the newest row when there is none) up to the newest row.

    Returns:
        ``(checkpoint, ended, head)``: the newest non-run-end row with its full state (``None``
        when the run has only run-end markers), the newest row's status when it is a run-end
        marker (``"completed"``/``"failed"``; else ``None``), and the head after the newest row.

    Raises:
        CorruptRecordError: the chain of rows is broken or a payload is not JSON.
    """
    seq, step_type, chain_seq = CP.seq, CP.step_type, CHAIN.seq
    newest = max(rows, key=lambda r: r[seq])
    target = max((r for r in rows if r[step_type] != "run_end"), key=lambda r: r[seq], default=None)
    eid = newest[CP.execution_id]
    check_state_chain(eid, chain, *state_chain_bounds(rows))
    at_target: dict[str, Any] | None = None
    tracks: Tracks = {}
    if target is None:
        raw = replay_in_place(eid, {}, chain, tracks)
    else:
        # The chain's rows up to the target's.
        cut = bisect.bisect_right(chain, target[seq], key=lambda r: r[chain_seq])
        if cut == 0 or chain[cut - 1][chain_seq] != target[seq]:
            raise CorruptRecordError(f"state chain of run {eid!r} has a gap")
        at_target = raw = replay_in_place(eid, {}, chain[:cut], tracks)
        if cut < len(chain):  # the target is not the newest row: replay on from a copy
            raw = replay_in_place(eid, copy_raw(at_target, tracks), chain[cut:], tracks)
    base_seq = newest[CP.base_seq]
    head = head_from_raw(newest[seq], base_seq, raw, newest[seq] - base_seq, tracks)
    ended = newest[CP.status] if newest[step_type] == "run_end" else None
    if target is None or at_target is None:
        return None, ended, head
    return checkpoint_from_row(target, decode_state(at_target)), ended, head


def checkpoint_from_row(row: Any, state: dict[str, Any]) -> Checkpoint:
    """Build a :class:`Checkpoint` from a row in :data:`CHECKPOINT_COLUMNS` order and the
    row's full decoded ``state`` (which resolves references in ``node_input``).

    Raises:
        CorruptRecordError: a column cannot be decoded.
    """
    try:
        return Checkpoint(
            checkpoint_id=row[CP.checkpoint_id],
            execution_id=row[CP.execution_id],
            seq=row[CP.seq],
            node_id=row[CP.node_id],
            node_index=row[CP.node_index],
            step_type=row[CP.step_type],
            status=row[CP.status],
            state_snapshot=state,
            node_input=load_node_input(row[CP.node_input], state, row),
            node_output=load_json(row[CP.node_output]),
            iteration_counters=load_json(row[CP.iteration_counters]) or {},
            interrupt_reason=row[CP.interrupt_reason],
            interrupt_context=load_json(row[CP.interrupt_context]),
            agent_path=row[CP.agent_path],
            parent_checkpoint_id=row[CP.parent_checkpoint_id],
            next_node_id=row[CP.next_node_id],
            created_at=_created_at(row[CP.created_at]),
        )
    except (IndexError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"checkpoint row cannot be read: {exc}") from exc
    except CorruptRecordError as exc:  # a column that cannot be decoded: name the run and row
        named = _at_row(exc, row[CP.execution_id], row[CP.seq])
        if named is exc:
            raise
        raise named from exc


def _created_at(value: Any) -> _dt.datetime | None:
    try:
        return ts_to_dt(value)
    except CorruptRecordError as exc:  # named by run and seq by the caller
        raise CorruptRecordError(f"created_at unreadable ({exc.message})") from None


def pending_due_seconds(cp: Checkpoint) -> float | None:
    """How long after it is recorded an ``interrupted`` row's question falls due: the
    ``timeout_seconds`` of ``interrupt(..., timeout_seconds=)``, which the row keeps in
    ``node_input["deadline"]`` (docs/design.md §12, "Approval deadlines"); ``None``: never."""
    node_input = cp.node_input
    deadline = node_input.get("deadline") if isinstance(node_input, dict) else None
    seconds = deadline.get("timeout_seconds") if isinstance(deadline, dict) else None
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return float(seconds)
    return None


def due_at(created_at: Any, due_seconds: float | None) -> _dt.datetime | None:
    """When a question recorded at ``created_at`` falls due (``None``: no deadline)."""
    created = ts_to_dt(created_at)
    if created is None or due_seconds is None:
        return None
    return created + _dt.timedelta(seconds=due_seconds)
