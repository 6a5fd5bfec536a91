"""Row <-> record mapping shared by the SQL backends, and delta storage of state.

A run's state is stored per top-level key as raw JSON. Each checkpoint row holds either

- a **full** snapshot ``{"<key>": <json>, ...}``, or
- a **delta** against the previous row: ``{"s": {key: json}, "d": [key], "a": {key: [items]}}``
  (set, delete, append). A list that only grew (a message history, a log) stores only its new
  items, found by comparing encoded bytes, so in-place mutation is caught too.

A full snapshot is written on a run's first row and then when replaying deltas would cost about
twice the snapshot itself (and at least every ``MAX_ROWS_BETWEEN_FULL`` rows), so loading the
latest state reads a bounded number of rows and bytes, while the bytes stored stay linear in
what changed (DESIGN section 2). Each row records ``base_seq``: the seq of the full snapshot its
replay starts from.

The writer keeps the run's head (last seq and per-key bytes) in memory, so the step path never
reads the database.

A top-level value of a dict ``node_input`` that is the very object (identity) found among the
newest items of the row's state (an agent's tool arguments, already in the assistant message
of its history) is stored once: in the state, with ``node_input`` holding a reference envelope
``{"__tether__": "ref", "v": ["messages", 7, "tool_calls", 0, "arguments"]}``, the path into the
row's materialized state. Readers resolve it (:func:`checkpoint_from_row`), so every API hands
back ``node_input`` exactly as written.

A row's state payload of at least ``compress_min_bytes`` (:data:`COMPRESS_MIN_BYTES` unless the
store says otherwise) is stored as a Zstandard frame (RFC 8878, level 1) when that saves at least
a tenth of it. Readers tell the two apart by the first byte: a JSON payload is an object (``{``),
a Zstandard frame starts with its magic number ``28 B5 2F FD`` (``(``).
"""

from __future__ import annotations

import copy
import datetime as _dt
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import is_
from typing import Any, Final

import orjson
import zstandard

from .. import serde
from ..checkpoint import Checkpoint, new_id
from ..errors import ConfigurationError, CorruptRecordError, SerializationError
from .base import PendingInterrupt, RunRecord

MIN_ROWS_BETWEEN_FULL: Final = 16
MAX_ROWS_BETWEEN_FULL: Final = 512
ROW_COST_BYTES: Final = 64  # what replaying one extra row costs, in equivalent bytes
REPLAY_FACTOR: Final = 2
HEAD_CACHE_RUNS: Final = 256  # each head holds its run's encoded state
REF_TAG: Final = "ref"  # envelope tag of a node_input value stored in the row's state
REF_SCAN_ITEMS: Final = 8  # newest items of each state list searched for node_input values
REF_SCAN_VALUES: Final = 1024  # values looked at, at most, per row in that search
COMPRESS_MIN_BYTES: Final = 512  # state payloads this long or longer are stored compressed
# Zstandard level 1: ~4 us a KB of messages to compress, ~2-5 us to read (zlib level 1: ~18 us,
# within 2% of the same size); level 3 gains under 1% on messages.
COMPRESS_LEVEL: Final = 1
ZSTD_MARK: Final = b"\x28"  # first byte of a Zstandard frame (magic number 0xFD2FB528, LE)
_ZSTD: Final = threading.local()  # a compressor and a decompressor per thread (not shareable)
_REF_MARK: Final = b'{"' + serde.TAG.encode() + b'":"' + REF_TAG.encode() + b'"'

CHECKPOINT_COLUMNS: Final = (
    "checkpoint_id, execution_id, seq, node_id, node_index, step_type, status, state_kind, "
    "state, base_seq, node_input, node_output, iteration_counters, interrupt_reason, "
    "interrupt_context, agent_path, parent_checkpoint_id, next_node_id, created_at"
)
RUN_COLUMNS: Final = (
    "execution_id, runner_name, runner_kind, status, input, parent_execution_id, "
    "parent_checkpoint_id, owner, lease_expires_at, error, created_at, updated_at, finished_at"
)
PENDING_COLUMNS: Final = (
    "execution_id, checkpoint_id, node_id, agent_path, reason, context, created_at, "
    "claimed_by, claim_expires_at, resume_value"
)


class Chunks:
    """A JSON list held as the encoded arrays it grew by, joined only when a full snapshot or
    a byte comparison needs it (so appending costs what was appended, not the history)."""

    __slots__ = ("nbytes", "parts")
    # Joining costs the whole history (and, on a VM, a page fault per 4 KB of the new bytes:
    # 0.2-0.8 ms for 250 KB), growing copies one pointer per part; a full snapshot joins anyway
    # at least every MAX_ROWS_BETWEEN_FULL rows, so a run's parts rarely reach this bound.
    MAX_PARTS: Final = MAX_ROWS_BETWEEN_FULL

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.nbytes = sum(len(p) for p in parts)

    def grow(self, items: bytes) -> Chunks:
        """A new value with ``items`` (a JSON array) appended; ``self`` is left as it was."""
        if len(self.parts) >= self.MAX_PARTS:
            return Chunks([self.join(), items])
        grown = Chunks.__new__(Chunks)
        grown.parts = [*self.parts, items]
        grown.nbytes = self.nbytes + len(items)
        return grown

    def join(self) -> bytes:
        """The whole JSON array, built in one allocation."""
        pieces: list[bytes | memoryview] = [b"["]
        for p in self.parts:
            if len(p) > 2:
                if len(pieces) > 1:
                    pieces.append(b",")
                pieces.append(memoryview(p)[1:-1])
        pieces.append(b"]")
        return b"".join(pieces)


Encoded = bytes | Chunks


def _as_bytes(value: Encoded) -> bytes:
    return value.join() if isinstance(value, Chunks) else value


def _nbytes(value: Encoded) -> int:
    return value.nbytes if isinstance(value, Chunks) else len(value)


@dataclass(slots=True)
class Head:
    """What the writer remembers of a run's newest row."""

    seq: int
    base_seq: int
    keys: dict[str, Encoded]
    rows_since_full: int
    delta_bytes_since_full: int
    # For list values made only of immutable scalars: a copy of the list as last encoded. When
    # the next state's list starts with the very same objects, only the new tail is encoded.
    sources: dict[str, list[Any]] = field(default_factory=dict)


def _is_append(prev: bytes, new: bytes) -> bytes | None:
    """If ``new`` is the JSON list ``prev`` with items appended, the appended items as a JSON
    list; else ``None``."""
    if len(new) <= len(prev) or prev[:1] != b"[" or new[:1] != b"[":
        return None
    if prev == b"[]":
        return new
    cut = len(prev) - 1
    if new[cut : cut + 1] == b"," and new.startswith(prev[:cut]):
        return b"[" + new[cut + 1 :]
    return None


def encode_keys(state: dict[str, Any]) -> dict[str, bytes]:
    """Encode each top-level key of ``state`` to JSON bytes.

    Raises:
        SerializationError: naming ``state["key"]...`` of the first value JSON cannot store.
    """
    if type(state) is not dict:
        raise SerializationError(f"state must be a dict, got {type(state).__name__}", path="state")
    out: dict[str, bytes] = {}
    for k, v in state.items():
        if type(k) is not str:
            raise SerializationError(
                f"state keys must be str, got {type(k).__name__} {k!r}", path=f"state[{k!r}]"
            )
        out[k] = serde.dumps(v, f'state["{k}"]')
    return out


_SCALAR_TYPES: Final = frozenset({str, float, bool, type(None)})
_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**63 - 1


def _scalars_only(items: list[Any]) -> bool:
    """True when every item is an immutable JSON scalar or a :class:`~tether.serde.FrozenDict`
    (so the same object always encodes to the same bytes)."""
    for x in items:
        t = type(x)
        if t in _SCALAR_TYPES or t is serde.FrozenDict:
            continue
        if t is int and _INT_MIN <= x <= _INT_MAX:
            continue
        return False
    return True


def encode_next(
    head: Head | None, state: dict[str, Any], *, force_full: bool = False
) -> tuple[str, bytes, Head]:
    """Encode ``state`` as the row after ``head``: :func:`encode_keys` then
    :func:`encode_state`, re-encoding only the new tail of lists that grew by appending
    immutable scalars (so a step's cost follows what it added, not the history).

    Raises:
        SerializationError: naming ``state["key"]...`` of the first value JSON cannot store.
    """
    if type(state) is not dict:
        raise SerializationError(f"state must be a dict, got {type(state).__name__}", path="state")
    prev_keys = head.keys if head is not None else {}
    prev_sources = head.sources if head is not None else {}
    keys: dict[str, Encoded] = {}
    hints: dict[str, bytes] = {}
    sources: dict[str, list[Any]] = {}
    for k, v in state.items():
        if type(k) is not str:
            raise SerializationError(
                f"state keys must be str, got {type(k).__name__} {k!r}", path=f"state[{k!r}]"
            )
        if type(v) is list:
            src = prev_sources.get(k)
            if src is not None:
                n = len(src)
                if len(v) >= n and (n == 0 or (v[n - 1] is src[n - 1] and all(map(is_, v, src)))):
                    tail = v[n:]
                    if not tail:
                        keys[k] = prev_keys[k]
                        sources[k] = src
                        continue
                    if _scalars_only(tail):
                        items = serde.dumps(tail, f'state["{k}"]')
                        prev = prev_keys[k]
                        base = prev if type(prev) is Chunks else Chunks([_as_bytes(prev)])
                        keys[k] = base.grow(items)
                        hints[k] = items
                        sources[k] = src + tail
                        continue
            keys[k] = serde.dumps(v, f'state["{k}"]')
            if _scalars_only(v):
                sources[k] = list(v)
        else:
            keys[k] = serde.dumps(v, f'state["{k}"]')
    return encode_state(head, keys, force_full=force_full, appended=hints, sources=sources)


def _dump_obj(items: dict[str, bytes] | dict[str, Encoded]) -> bytes:
    return b"{" + b",".join(orjson.dumps(k) + b":" + _as_bytes(v) for k, v in items.items()) + b"}"


def encode_state(
    head: Head | None,
    keys: dict[str, Encoded],
    *,
    force_full: bool = False,
    appended: dict[str, bytes] | None = None,
    sources: dict[str, list[Any]] | None = None,
) -> tuple[str, bytes, Head]:
    """Choose full or delta for the next row and encode it.

    Args:
        head: the run's newest row as the writer knows it, or ``None`` for a run with no rows.
        keys: the new state, encoded per key by :func:`encode_keys`.
        force_full: write a full snapshot regardless of the policy (a fork's first row).
        appended: keys already known to have grown by these JSON items (no compare needed).
        sources: list copies to remember for the next row's fast path.

    Returns:
        ``(state_kind, payload, new_head)`` where ``state_kind`` is ``"full"`` or ``"delta"``.
    """
    seq = 1 if head is None else head.seq + 1
    if head is not None and head.seq > 0 and not force_full:
        sets: dict[str, bytes] = {}
        appends: dict[str, bytes] = {}
        prev = head.keys
        known = appended or {}
        for k, b in keys.items():
            app_known = known.get(k)
            if app_known is not None:
                appends[k] = app_known
                continue
            p = prev.get(k)
            if p is None:
                sets[k] = _as_bytes(b)
            elif p is not b:
                pb = p if type(p) is bytes else _as_bytes(p)
                bb = b if type(b) is bytes else _as_bytes(b)
                if pb != bb:
                    app = _is_append(pb, bb)
                    if app is not None:
                        appends[k] = app
                    else:
                        sets[k] = bb
        deleted = [k for k in prev if k not in keys]
        parts = []
        if sets:
            parts.append(b'"s":' + _dump_obj(sets))
        if deleted:
            parts.append(b'"d":' + orjson.dumps(deleted))
        if appends:
            parts.append(b'"a":' + _dump_obj(appends))
        payload = b"{" + b",".join(parts) + b"}"
        rows = head.rows_since_full + 1
        delta_bytes = head.delta_bytes_since_full + len(payload)
        replay_cost = delta_bytes + ROW_COST_BYTES * rows
        # The snapshot's size is summed only once the minimum run of deltas is reached.
        if rows < MAX_ROWS_BETWEEN_FULL and (
            rows < MIN_ROWS_BETWEEN_FULL or replay_cost < REPLAY_FACTOR * _full_size(keys)
        ):
            return (
                "delta",
                payload,
                Head(seq, head.base_seq, keys, rows, delta_bytes, sources or {}),
            )
    flat: dict[str, Encoded] = {k: _as_bytes(b) for k, b in keys.items()}
    return "full", _dump_obj(flat), Head(seq, seq, flat, 0, 0, sources or {})


def _full_size(keys: dict[str, Encoded]) -> int:
    """About the bytes of a full snapshot of ``keys``."""
    return sum(_nbytes(b) for b in keys.values()) + 4 * len(keys)


def replay_state(
    rows: list[tuple[int, str, bytes]], execution_id: str | None = None
) -> dict[str, Any]:
    """Rebuild the raw JSON state (envelopes still closed) from a full row and its deltas.

    Args:
        rows: ``(seq, state_kind, payload)`` in seq order, the first being ``full``.
        execution_id: the run, named in errors.

    Raises:
        CorruptRecordError: the chain of rows is broken or a payload is not JSON (naming the
            run and the row's seq).
    """
    if not rows or rows[0][1] != "full":
        raise CorruptRecordError(
            "state chain does not start at a full snapshot", execution_id=execution_id
        )
    cur: dict[str, Any] = {}
    for seq, kind, payload in rows:
        cur = apply_row_of(execution_id, seq, cur, kind, payload)
    return cur


def apply_row_of(
    execution_id: str | None, seq: int, cur: dict[str, Any], kind: str, payload: bytes
) -> dict[str, Any]:
    """:func:`apply_row` for row ``seq`` of run ``execution_id``, named in its errors."""
    try:
        return apply_row(cur, kind, payload)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"run {execution_id!r}, seq {seq}: {exc.message}", execution_id=execution_id
        ) from exc


def compress_state(payload: bytes, min_bytes: int | None) -> bytes:
    """``payload`` as stored: a Zstandard frame when it is at least ``min_bytes`` long
    (``None``: never) and that saves at least a tenth of it, else as it is."""
    if min_bytes is None or len(payload) < min_bytes:
        return payload
    try:
        compressor = _ZSTD.compressor
    except AttributeError:
        compressor = _ZSTD.compressor = zstandard.ZstdCompressor(level=COMPRESS_LEVEL)
    packed: bytes = compressor.compress(payload)
    return packed if len(packed) * 10 <= len(payload) * 9 else payload


def _decompress_state(payload: bytes) -> bytes:
    try:
        decompressor = _ZSTD.decompressor
    except AttributeError:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    stream = decompressor.decompressobj()
    try:
        data: bytes = stream.decompress(payload)
    except zstandard.ZstdError as exc:
        raise CorruptRecordError(f"stored state is not a valid Zstandard frame: {exc}") from exc
    if not stream.eof or stream.unused_data:
        raise CorruptRecordError(
            "stored state is not a valid Zstandard frame: "
            + ("it is cut short" if not stream.eof else "bytes follow its end")
        )
    return data


def check_compress_min_bytes(value: Any) -> int | None:
    """Validate a store's ``compress_state_min_bytes`` option.

    Raises:
        ConfigurationError: not ``None`` nor a positive integer.
    """
    if value is None or (type(value) is int and value >= 1):
        return value
    raise ConfigurationError(
        f"compress_state_min_bytes must be a positive integer or None, got {value!r}"
    )


def apply_row(cur: dict[str, Any], kind: str, payload: bytes) -> dict[str, Any]:
    """Apply one stored row to a raw state; returns a new dict (lists are never mutated).

    Raises:
        CorruptRecordError: the payload is neither JSON nor a Zstandard frame of JSON, or does
            not fit the state it applies to.
    """
    if payload[:1] == ZSTD_MARK:
        payload = _decompress_state(payload)
    try:
        data = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecordError(f"stored state is not valid JSON: {exc}") from exc
    if type(data) is not dict:
        raise CorruptRecordError("stored state is not a JSON object")
    if kind == "full":
        return data
    if kind != "delta":
        raise CorruptRecordError(f"unknown state kind {kind!r}")
    out = dict(cur)
    out.update(data.get("s", {}))
    for k in data.get("d", ()):
        out.pop(k, None)
    for k, items in data.get("a", {}).items():
        base = out.get(k)
        if type(base) is not list:
            raise CorruptRecordError(f"append to state key {k!r}, which is not a list")
        out[k] = base + items
    return out


def decode_state(raw: dict[str, Any]) -> dict[str, Any]:
    """Open the envelopes of a raw state."""
    return {k: serde.from_jsonable(v) for k, v in raw.items()}


def empty_head() -> Head:
    """The head of a run known to have no rows yet (its run row was just created): the first
    put writes a full row at seq 1 without reading the run's newest row first."""
    return Head(0, 0, {}, 0, 0)


def head_from_raw(seq: int, base_seq: int, raw: dict[str, Any], rows_since_full: int) -> Head:
    """A writer head for a state read back from the store."""
    keys: dict[str, Encoded] = {k: orjson.dumps(v) for k, v in raw.items()}
    # Bytes since the full are unknown after a restart; assume the worst so a snapshot comes
    # no later than the policy would have written it.
    return Head(seq, base_seq, keys, rows_since_full, rows_since_full * ROW_COST_BYTES)


class HeadCache:
    """Bounded LRU of run heads, keyed by execution_id; safe to share between threads."""

    def __init__(self, size: int = HEAD_CACHE_RUNS) -> None:
        self._size = size
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, execution_id: str) -> Head | None:
        with self._lock:
            head = self._heads.get(execution_id)
            if head is not None:
                self._heads.move_to_end(execution_id)
            return head

    def set(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` unless a newer one is known: a reader that loaded an older row
        must not move the head back under a writer that has since appended (a run's rows
        only grow, so the higher seq is always the truth)."""
        with self._lock:
            known = self._heads.get(execution_id)
            if known is not None and known.seq > head.seq:
                return
            self._heads[execution_id] = head
            self._heads.move_to_end(execution_id)
            if len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def drop(self, execution_id: str) -> None:
        with self._lock:
            self._heads.pop(execution_id, None)

    def reset(self, execution_id: str, head: Head) -> None:
        """Remember ``head`` whatever was known (a run row created anew)."""
        with self._lock:
            self._heads[execution_id] = head
            self._heads.move_to_end(execution_id)
            if len(self._heads) > self._size:
                self._heads.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()


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
    """Build a :class:`RunRecord` from a row in :data:`RUN_COLUMNS` order."""
    return RunRecord(
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
    )


def pending_from_row(row: Any) -> PendingInterrupt:
    """Build a :class:`PendingInterrupt` from a row in :data:`PENDING_COLUMNS` order."""
    return PendingInterrupt(
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
    )


def _find_in_state(state: dict[str, Any], targets: dict[int, Any]) -> dict[int, list[Any]]:
    """Paths (keys and indexes) into ``state`` of the objects in ``targets`` (``id -> object``),
    matched by identity, depth first: the state's keys in order, each list from its newest item
    and only its newest :data:`REF_SCAN_ITEMS` items, at most :data:`REF_SCAN_VALUES` values in
    all (so a row's cost stays bounded whatever its state holds; what is not found is simply
    stored in full).

    Only plain dicts (and :class:`~tether.serde.FrozenDict`) with str keys and plain lists are
    entered: their positions are the same in the state read back, whatever the envelopes.
    """
    found: dict[int, list[Any]] = {}
    stack: list[tuple[Any, tuple[Any, ...]]] = [(state, ())]
    budget = REF_SCAN_VALUES
    containers = (dict, list, serde.FrozenDict)
    while stack:
        obj, path = stack.pop()
        if type(obj) is list:  # pushed oldest first, so the newest item is entered first
            start = max(0, len(obj) - REF_SCAN_ITEMS)
            children: Any = enumerate(obj[start:], start)
        else:  # pushed last key first, so the first key is entered first
            children = reversed(obj.items())
        for key, value in children:
            budget -= 1
            if budget < 0:
                return found
            if type(value) not in containers or (type(key) is not str and type(obj) is not list):
                continue
            if targets.get(id(value)) is value:
                found.setdefault(id(value), [*path, key])
                if len(found) == len(targets):
                    return found
            else:
                stack.append((value, (*path, key)))
    return found


def dump_node_input(node_input: Any, state: Any) -> bytes | None:
    """The ``node_input`` column: :func:`dump_json`, except that a top-level value that is the
    same object as one in ``state`` (see :func:`_find_in_state`) is written as a reference
    envelope holding its path, when that is shorter.

    Raises:
        SerializationError: naming the ``node_input`` path that cannot be stored.
    """
    if type(node_input) is not dict or serde.TAG in node_input or type(state) is not dict:
        return dump_json(node_input, "node_input")
    targets: dict[int, Any] = {}
    for k, v in node_input.items():
        if type(k) is not str:
            return dump_json(node_input, "node_input")  # raises, naming the key
        t = type(v)
        if v and (t is dict or t is list or t is serde.FrozenDict):
            targets[id(v)] = v
    paths = _find_in_state(state, targets) if targets else None
    if not paths:
        return dump_json(node_input, "node_input")
    parts = []
    for k, v in node_input.items():
        encoded = serde.dumps(v, f'node_input["{k}"]')
        path = paths.get(id(v))
        if path is not None:
            ref = orjson.dumps({serde.TAG: REF_TAG, "v": path})
            if len(ref) < len(encoded):
                encoded = ref
        try:
            parts.append(orjson.dumps(k) + b":" + encoded)
        except orjson.JSONEncodeError:
            return dump_json(node_input, "node_input")  # raises, naming the key
    return b"{" + b",".join(parts) + b"}"


def _resolve_ref(state: dict[str, Any], path: Any) -> Any:
    """A copy of the value at ``path`` in the decoded ``state``; ``KeyError`` if absent."""
    if type(path) is not list or not path:
        raise KeyError(path)
    cur: Any = state
    for step in path:
        in_dict = type(cur) is dict and type(step) is str and step in cur
        if not (in_dict or (type(cur) is list and type(step) is int and 0 <= step < len(cur))):
            raise KeyError(step)
        cur = cur[step]
    # A copy, so that changing the returned node_input never changes the returned state.
    return copy.deepcopy(cur)


def load_node_input(data: Any, state: dict[str, Any], row: Any) -> Any:
    """Decode the ``node_input`` column of ``row``, resolving references into its ``state``.

    Raises:
        CorruptRecordError: the column is not what :func:`dump_node_input` writes, or a
            reference names a path the row's state does not hold; the message names the row.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    elif isinstance(data, str):
        data = data.encode()
    if data is None or _REF_MARK not in data:
        return load_json(data)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecordError(f"stored data is not valid JSON: {exc}") from exc
    if type(raw) is not dict or raw.get(serde.TAG) is not None:
        return serde.from_jsonable(raw)
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if type(v) is dict and v.get(serde.TAG) == REF_TAG and len(v) == 2 and "v" in v:
            try:
                out[k] = _resolve_ref(state, v["v"])
            except KeyError:
                raise CorruptRecordError(
                    f"checkpoint {row[0]!r} (run {row[1]!r}, seq {row[2]}, node {row[3]!r}): "
                    f'node_input["{k}"] refers to {v["v"]!r} in the row\'s state, which holds '
                    "nothing there",
                    execution_id=row[1],
                    node_id=row[3],
                ) from None
        else:
            out[k] = serde.from_jsonable(v)
    return out


def checkpoint_params(
    cp: Checkpoint,
    head: Head | None,
    *,
    force_full: bool = False,
    compress_min_bytes: int | None = COMPRESS_MIN_BYTES,
) -> tuple[tuple[Any, ...], Head]:
    """The column values of ``cp`` in :data:`CHECKPOINT_COLUMNS` order, without ``created_at``
    (each backend stamps its own clock), and the writer head after it. The state payload is
    compressed per :func:`compress_state` with ``compress_min_bytes``.

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
        compress_state(payload, compress_min_bytes),
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


def resume_window(
    window: Sequence[Sequence[Any]],
) -> tuple[list[Sequence[Any]], list[tuple[int, str, bytes]] | None]:
    """Split the rows of ``SELECT_RESUME_WINDOW`` (a run's rows in seq order, from the full
    snapshot under its two newest rows up to its newest) into the arguments of
    :func:`resume_point`: ``(rows, chain)``, the two newest rows and the state chain. The chain
    is ``None`` when both rows are run-end markers: the row to resume lies further back, and
    the caller adds it to ``rows`` and reads the chain from under it."""
    rows = list(window[-2:])
    if len(rows) == 2 and rows[0][5] == "run_end" and rows[1][5] == "run_end":
        return rows, None
    return rows, [(r[2], r[7], r[8]) for r in window]


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
    raw: dict[str, Any] = {}
    at_target: dict[str, Any] | None = None
    for seq, kind, payload in chain:
        raw = apply_row_of(newest[1], seq, raw, kind, payload)
        if target is not None and seq == target[2]:
            at_target = raw
    if chain[-1][0] != newest[2] or (target is not None and at_target is None):
        raise CorruptRecordError(f"state chain of run {newest[1]!r} has a gap")
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
