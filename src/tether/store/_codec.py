"""Row <-> record mapping shared by the SQL backends.

How a row's state is stored lives beside this module: :mod:`._delta` (full snapshots and
deltas), :mod:`._compression` (Zstandard frames), :mod:`._node_input` (``node_input`` values
stored once, in the state) and :mod:`._heads` (the writer's head of each run). The names the
backends use from them are re-exported here.
"""

from __future__ import annotations

import bisect
import datetime as _dt
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from .. import serde
from ..checkpoint import Checkpoint, new_id
from ..errors import ConfigurationError, CorruptRecordError
from ._compression import COMPRESS_MIN_BYTES, check_compress_min_bytes, compress_state
from ._delta import (
    Head,
    apply_row_of,
    copy_raw,
    decode_state,
    empty_head,
    encode_next,
    head_from_raw,
    replay_in_place,
    replay_state,
)
from ._heads import HeadCache
from ._node_input import dump_node_input, load_node_input
from .base import RUN_STATUSES, PendingInterrupt, RunRecord

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
    "load_json",
    "optional_text",
    "pending_from_row",
    "prune_cutoff",
    "replay_state",
    "resumable_lies_further_back",
    "resume_point",
    "run_from_row",
    "shown_text",
    "state_chain_bounds",
    "ts_to_dt",
]

CHECKPOINT_COLUMNS: Final = (
    "checkpoint_id, execution_id, seq, node_id, node_index, step_type, status, state_kind, "
    "state, base_seq, node_input, node_output, iteration_counters, interrupt_reason, "
    "interrupt_context, agent_path, parent_checkpoint_id, next_node_id, created_at"
)

RUN_COLUMNS: Final = (
    "execution_id, runner_name, runner_kind, status, input, parent_execution_id, "
    "parent_checkpoint_id, owner, lease_expires_at, error, created_at, updated_at, finished_at, "
    "app_version"
)

PENDING_COLUMNS: Final = (
    "execution_id, checkpoint_id, node_id, agent_path, reason, context, created_at, "
    "claimed_by, claim_expires_at, resume_value, due_at"
)


def dump_json(value: Any, path: str) -> bytes | None:
    """A JSON column value (``None`` stays SQL NULL)."""
    return None if value is None else serde.dumps(value, path)


def load_json(data: Any) -> Any:
    """Decode a JSON column value (``None`` for SQL NULL)."""
    if data is None:
        return None
    if isinstance(data, memoryview):
        data = bytes(data)
    return serde.loads(data)


def ts_to_dt(value: Any) -> _dt.datetime | None:
    """A stored timestamp (unix seconds or an aware datetime) as an aware UTC datetime."""
    if value is None:
        return None
    if isinstance(value, _dt.datetime):
        return value.astimezone(_dt.UTC) if value.tzinfo else value.replace(tzinfo=_dt.UTC)
    return _dt.datetime.fromtimestamp(float(value), _dt.UTC)


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


def run_from_row(row: Any) -> RunRecord:
    """Build a :class:`RunRecord` from a row in :data:`RUN_COLUMNS` order.

    Raises:
        CorruptRecordError: a field cannot be read (JSON that does not parse, a timestamp
            holding text, a name stored as bytes), naming the run and each such field.
    """
    try:
        run = RunRecord(
            execution_id=row[0],
            runner_name=row[1],
            runner_kind=row[2],
            status=row[3],
            input=load_json(row[4]),
            parent_execution_id=row[5],
            parent_checkpoint_id=row[6],
            owner=row[7],
            lease_expires_at=ts_to_dt(row[8]),
            error=row[9],
            created_at=ts_to_dt(row[10]),
            updated_at=ts_to_dt(row[11]),
            finished_at=ts_to_dt(row[12]),
            app_version=row[13],
        )
    except Exception:  # which field: decoded again one at a time, below
        run = None
    if (
        run is None
        or not _all_text(row, _RUN_TEXT, _RUN_OPTIONAL_TEXT)
        or run.status not in RUN_STATUSES
    ):
        run = decode_run(row)
        raise CorruptRecordError(
            f"run {run.execution_id!r} is damaged: {run.damaged}", execution_id=run.execution_id
        )
    return run


def pending_from_row(row: Any) -> PendingInterrupt:
    """Build a :class:`PendingInterrupt` from a row in :data:`PENDING_COLUMNS` order.

    Raises:
        CorruptRecordError: a field cannot be read, naming the run and each such field.
    """
    try:
        pending = PendingInterrupt(
            execution_id=row[0],
            checkpoint_id=row[1],
            node_id=row[2],
            agent_path=row[3],
            reason=row[4],
            context=load_json(row[5]),
            created_at=ts_to_dt(row[6]),
            claimed_by=row[7],
            claim_expires_at=ts_to_dt(row[8]),
            resume_value=load_json(row[9]),
            due_at=ts_to_dt(row[10]),
        )
    except Exception:  # which field: decoded again one at a time, below
        pending = None
    if pending is None or not _all_text(row, _PENDING_TEXT, _PENDING_OPTIONAL_TEXT):
        pending = decode_pending(row)
        raise CorruptRecordError(
            f"the pending interrupt of run {pending.execution_id!r} is damaged: {pending.damaged}",
            execution_id=pending.execution_id,
        )
    return pending


# Which columns hold text (always, or when not NULL): a SQLite column holds whatever was
# written to it, and a name stored as bytes would reach the views as bytes.
_RUN_TEXT: Final = (0, 1, 2, 3)
_RUN_OPTIONAL_TEXT: Final = (5, 6, 7, 9, 13)
_PENDING_TEXT: Final = (0, 1, 2, 4)
_PENDING_OPTIONAL_TEXT: Final = (3, 7)


def _all_text(row: Any, required: tuple[int, ...], optional: tuple[int, ...]) -> bool:
    return all(type(row[i]) is str for i in required) and all(
        row[i] is None or type(row[i]) is str for i in optional
    )


# --- decoding one field at a time: what a listing shows of a damaged row --------------------
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


_RUN_FIELDS: Final[tuple[tuple[str, Callable[[Any], Any]], ...]] = (
    ("execution_id", _text),
    ("runner_name", _text),
    ("runner_kind", _text),
    ("status", _run_status),
    ("input", load_json),
    ("parent_execution_id", optional_text),
    ("parent_checkpoint_id", optional_text),
    ("owner", optional_text),
    ("lease_expires_at", ts_to_dt),
    ("error", optional_text),
    ("created_at", ts_to_dt),
    ("updated_at", ts_to_dt),
    ("finished_at", ts_to_dt),
    ("app_version", optional_text),
)
_PENDING_FIELDS: Final[tuple[tuple[str, Callable[[Any], Any]], ...]] = (
    ("execution_id", _text),
    ("checkpoint_id", _text),
    ("node_id", _text),
    ("agent_path", optional_text),
    ("reason", _text),
    ("context", load_json),
    ("created_at", ts_to_dt),
    ("claimed_by", optional_text),
    ("claim_expires_at", ts_to_dt),
    ("resume_value", load_json),
    ("due_at", ts_to_dt),
)
#: Columns of a pending row (:data:`PENDING_COLUMNS`).
PENDING_WIDTH: Final = len(_PENDING_FIELDS)
_TEXT_FIELDS: Final = frozenset(
    {"execution_id", "runner_name", "runner_kind", "status", "checkpoint_id", "node_id", "reason"}
)


def _decode(
    row: Any, fields: tuple[tuple[str, Callable[[Any], Any]], ...]
) -> tuple[dict[str, Any], str | None]:
    values: dict[str, Any] = {}
    problems: list[str] = []
    for (name, read), raw in zip(fields, row, strict=False):
        try:
            values[name] = read(raw)
        except Exception as exc:  # any undecodable value: this field of this row only
            reason = str(exc).split(":")[0] if isinstance(exc, CorruptRecordError) else ""
            problems.append(f"{name} unreadable ({reason or type(exc).__name__})")
            values[name] = shown_text(raw) if name in _TEXT_FIELDS else None
    return values, "; ".join(problems) or None


def decode_run(row: Any) -> RunRecord:
    """A runs row (:data:`RUN_COLUMNS` order) as a record, never raising: undecodable fields
    are left empty and named in ``damaged`` (a listing's entry)."""
    values, damaged = _decode(row, _RUN_FIELDS)
    return RunRecord(**values, damaged=damaged)


def decode_pending(row: Any) -> PendingInterrupt:
    """A pending row (:data:`PENDING_COLUMNS` order) as a record, as :func:`decode_run`."""
    values, damaged = _decode(row, _PENDING_FIELDS)
    return PendingInterrupt(**values, damaged=damaged)


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
    node_input = dump_node_input(cp.node_input, cp.state_snapshot)
    node_output = dump_json(cp.node_output, "node_output")
    counters = dump_json(cp.iteration_counters or None, "iteration_counters")
    context = dump_json(cp.interrupt_context, "interrupt_context")
    kind, payload, new_head = encode_next(head, cp.state_snapshot, force_full=force_full)
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
        compress_state(payload, compress_min_bytes, delta=kind == "delta"),
        new_head.base_seq,
        node_input,
        node_output,
        counters,
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
    out: list[Checkpoint] = []
    raw: dict[str, Any] = {}
    prefix = None if agent_path_prefix is None else agent_path_prefix.rstrip("/")
    for row in rows:
        raw = apply_row_of(row[1], row[2], raw, row[7], row[8])
        path = row[15]
        if prefix is not None and not (
            path == prefix or (path is not None and path.startswith(prefix + "/"))
        ):
            continue
        out.append(checkpoint_from_row(row, decode_state(raw)))
    return out


def resumable_lies_further_back(newest: Sequence[Sequence[Any]]) -> bool:
    """Whether the run's two newest rows (``newest``, in :data:`CHECKPOINT_COLUMNS` order) are
    both run-end markers, so that the row a resume re-enters lies further back and the caller
    reads it too before :func:`state_chain_bounds`."""
    return len(newest) == 2 and all(r[5] == "run_end" for r in newest)


def state_chain_bounds(rows: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """The seqs ``(first, last)`` of the state chain :func:`resume_point` needs for ``rows``:
    from the full snapshot under the oldest of them up to the newest. Read as ``(seq,
    state_kind, state)`` only: for a long run it is most of its rows, and the other columns
    would cost more to fetch than the states."""
    return min(r[9] for r in rows), max(r[2] for r in rows)


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
    newest = max(rows, key=lambda r: r[2])
    target = max((r for r in rows if r[5] != "run_end"), key=lambda r: r[2], default=None)
    if not chain or chain[0][1] != "full":
        raise CorruptRecordError("state chain does not start at a full snapshot")
    if chain[-1][0] != newest[2]:
        raise CorruptRecordError(f"state chain of run {newest[1]!r} has a gap")
    at_target: dict[str, Any] | None = None
    if target is None:
        raw = replay_in_place(newest[1], {}, chain)
    else:
        cut = bisect.bisect_right(chain, target[2], key=lambda r: r[0])  # rows up to target's
        if cut == 0 or chain[cut - 1][0] != target[2]:
            raise CorruptRecordError(f"state chain of run {newest[1]!r} has a gap")
        at_target = raw = replay_in_place(newest[1], {}, chain[:cut])
        if cut < len(chain):  # the target is not the newest row: replay on from a copy
            raw = replay_in_place(newest[1], copy_raw(at_target), chain[cut:])
    head = head_from_raw(newest[2], newest[9], raw, newest[2] - newest[9])
    ended = newest[6] if newest[5] == "run_end" else None
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
            checkpoint_id=row[0],
            execution_id=row[1],
            seq=row[2],
            node_id=row[3],
            node_index=row[4],
            step_type=row[5],
            status=row[6],
            state_snapshot=state,
            node_input=load_node_input(row[10], state, row),
            node_output=load_json(row[11]),
            iteration_counters=load_json(row[12]) or {},
            interrupt_reason=row[13],
            interrupt_context=load_json(row[14]),
            agent_path=row[15],
            parent_checkpoint_id=row[16],
            next_node_id=row[17],
            created_at=ts_to_dt(row[18]),
        )
    except (IndexError, TypeError, ValueError) as exc:
        raise CorruptRecordError(f"checkpoint row cannot be read: {exc}") from exc


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
