"""Delta storage of state.

A run's state is stored per top-level key as raw JSON. Each checkpoint row holds either

- a **full** snapshot ``{"<key>": <json>, ...}``, or
- a **delta** against the previous row: ``{"s": {key: json}, "d": [key], "a": {key: [items]}}``
  (set, delete, append). A list that only grew (a message history, a log) stores only its new
  items.

How a grown list is found: a list of immutable items (JSON scalars and
:class:`~tether.serde.FrozenDict`) is compared with the one the previous row encoded, item by
item (in C: the same object or an equal one), against a private copy that grows by the
appended items only (:class:`ListMark`), so a step encodes and copies what it added, not the
history. When they match, only what follows is encoded. Any other list is encoded whole and
compared by bytes with the previous row's, so an in-place change is caught (an append is
still stored as one).

A full snapshot is written on a run's first row and then only when replaying the deltas since
the last one would cost about twice the snapshot itself (counting :data:`ROW_COST_BYTES` per
row), so loading the latest state reads at most about twice the state's bytes while the bytes
stored stay linear in what changed (docs/design.md §2). A history that only grows is therefore
never written again: each message is stored once. Each row records ``base_seq``: the seq of
the full snapshot its replay starts from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from .. import serde
from ..errors import SerializationError

MIN_ROWS_BETWEEN_FULL: Final = 16

ROW_COST_BYTES: Final = 64  # what replaying one extra row costs, in equivalent bytes

REPLAY_FACTOR: Final = 2


class Chunks:
    """A JSON list held as the encoded arrays it grew by, joined only when a full snapshot or
    a byte comparison needs it (so appending costs what was appended, not the history).

    Values grown from one another share one list of parts, each seeing its first ``count``: a
    head kept for a retry stays valid while its successor appends (growing from an older
    value copies its parts once).

    A value rebuilt by a replay holds, after its first part, ``framed`` stored rows as they were
    read, each an append row whose array is ``row[frame:-2]`` (``{"a":{"<key>":[...]}}``): kept
    whole, not sliced, a resume copies none of the history it read (see :mod:`._replay`)."""

    __slots__ = ("count", "frame", "framed", "nbytes", "parts")

    def __init__(self, parts: list[bytes], *, framed: int = 0, frame: int = 0) -> None:
        self.parts = parts
        self.count = len(parts)
        self.framed = framed
        self.frame = frame
        self.nbytes = sum(map(len, parts)) - framed * (frame + 2)

    def grow(self, items: bytes) -> Chunks:
        """A new value with ``items`` (a JSON array) appended; ``self`` is left as it was."""
        parts = self.parts
        if len(parts) != self.count:  # a newer value grew from this one: branch off
            parts = parts[: self.count]
        # orjson's bytes keep its whole output buffer (4-16 KB for a 1 KB array); a part is
        # kept for the run's life, so it is copied to its own size.
        part = bytes(memoryview(items))
        parts.append(part)
        if parts[self.count] is not part:  # another thread appended first: branch off
            parts = [*parts[: self.count], part]
        grown = Chunks.__new__(Chunks)
        grown.parts = parts
        grown.count = self.count + 1
        grown.framed = self.framed  # the framed rows come first: an appended part never is
        grown.frame = self.frame
        grown.nbytes = self.nbytes + len(items)
        return grown

    def join(self) -> bytes:
        """The whole JSON array, built in one allocation."""
        parts = self.parts[: self.count]
        end = 1 + self.framed
        frame = self.frame + 1  # a framed row's opening and its array's "["
        arrays = itertools.chain(
            (memoryview(p)[1:-1] for p in parts[:1]),
            (memoryview(row)[frame:-3] for row in parts[1:end]),  # less "]}}"
            (memoryview(p)[1:-1] for p in parts[end:]),
        )
        pieces: list[bytes | memoryview] = [b"["]
        for items in arrays:
            if len(items):  # an empty array adds nothing
                if len(pieces) > 1:
                    pieces.append(b",")
                pieces.append(items)
        pieces.append(b"]")
        return b"".join(pieces)


Encoded = bytes | Chunks


def _as_bytes(value: Encoded) -> bytes:
    return value.join() if isinstance(value, Chunks) else value


def _nbytes(value: Encoded) -> int:
    return value.nbytes if isinstance(value, Chunks) else len(value)


@dataclass(slots=True)
class ListMark:
    """What the writer remembers of a list of immutable items it encoded, to tell next time
    whether the list only grew (see the module docstring): a private copy of it.

    Every item is compared, whatever the list's length, so a replaced item is never missed;
    only the two arrays of item pointers are read (in C, the same object is equal unlooked
    at), never a slice, whose reference counting costs 20x the comparison at 100,000 items.
    The copy is the writer's own (a caller may change its list in place) and is handed on to
    the mark of the grown list, so a step copies what it added. A mark whose copy was handed
    on matches nothing (its length and its copy's differ): an older head kept for a retry
    falls back to the byte comparison.
    """

    length: int
    whole: list[Any]

    @staticmethod
    def of(items: list[Any]) -> ListMark:
        return ListMark(len(items), items[:])

    def grown_to(self, items: list[Any]) -> tuple[list[Any], ListMark] | None:
        """If ``items`` is the marked list with immutable items appended (or none), those items
        and the mark of ``items`` (``self`` when none: the mark stays valid); else ``None``,
        leaving ``self`` as it was."""
        n = self.length
        whole = self.whole
        size = len(items)
        if size < n or len(whole) != n:
            return None
        if size == n:
            # In C: the same object, or an equal one (encoded alike: no numbers, see _scalars_only)
            return ([], self) if items == whole else None
        tail = items[n:]
        if not _scalars_only(tail):
            return None
        # Against the copy grown by the tail (no slice); cut back to the mark on a mismatch.
        whole.extend(tail)
        if items == whole:
            return tail, ListMark(size, whole)
        del whole[n:]
        return None


@dataclass(slots=True)
class Head:
    """What the writer remembers of a run's newest row."""

    seq: int
    base_seq: int
    keys: dict[str, Encoded]
    rows_since_full: int
    delta_bytes_since_full: int
    # For list values made only of immutable items: a mark of the list as last encoded, so the
    # next state's list, grown from it, costs only its new tail.
    sources: dict[str, ListMark] = field(default_factory=dict)


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


# Items whose equality means equal JSON: never numbers, since 1 == 1.0 == True and 0.0 == -0.0
# would let an item replaced in place by an equal number of another kind pass unstored.
_SCALAR_TYPES: Final = frozenset({str, type(None)})

# Encoded by orjson as serde.dumps does (an int only in the signed 64-bit range; a lone
# surrogate makes orjson raise and serde name the key). Not float: orjson writes nan as null.
_ATOMS: Final = frozenset({str, bool, type(None)})

_INT_MIN: Final = -(2**63)

_INT_MAX: Final = 2**63 - 1


_ITEM_TYPES: Final = _SCALAR_TYPES | {serde.FrozenDict}


def _scalars_only(items: list[Any]) -> bool:
    """True when every item is a str, ``None`` or a :class:`~tether.serde.FrozenDict` (so an
    equal item encodes to the same bytes)."""
    if len(items) > 16:  # a resumed history: its items' types gathered in C, not one by one
        return set(map(type, items)) <= _ITEM_TYPES
    for x in items:
        t = type(x)
        if t in _SCALAR_TYPES or t is serde.FrozenDict:
            continue
        return False
    return True


def grow_list(
    items: list[Any], mark: ListMark | None, prev: Encoded | None, path: str
) -> tuple[Encoded, bytes, ListMark] | None:
    """If ``items`` is the list ``mark`` describes grown by immutable items, its encoding
    (``prev`` grown by the new items), the new items as a JSON array (``b"[]"`` when none) and
    its new mark, encoding only the new items; else ``None``.

    Raises:
        SerializationError: naming ``path`` when the new items cannot be stored.
    """
    if mark is None or prev is None:
        return None
    found = mark.grown_to(items)
    if found is None:
        return None
    tail, grown = found
    if not tail:
        return prev, b"[]", grown
    try:
        added = serde.dumps(tail, path)
    except BaseException:
        del mark.whole[mark.length :]  # nothing is stored: the mark stays as it was
        raise
    base = prev if type(prev) is Chunks else Chunks([_as_bytes(prev)])
    return base.grow(added), added, grown


def encode_next(
    head: Head | None, state: dict[str, Any], *, force_full: bool = False
) -> tuple[str, bytes, Head]:
    """Encode ``state`` as the row after ``head``: :func:`encode_keys` then
    :func:`encode_state`, re-encoding only the new tail of lists that grew by appending
    immutable items (so a step's cost follows what it added, not the history).

    Raises:
        SerializationError: naming ``state["key"]...`` of the first value JSON cannot store.
    """
    if type(state) is not dict:
        raise SerializationError(f"state must be a dict, got {type(state).__name__}", path="state")
    prev_keys = head.keys if head is not None else {}
    prev_sources = head.sources if head is not None else {}
    keys: dict[str, Encoded] = {}
    hints: dict[str, bytes] = {}
    sources: dict[str, ListMark] = {}
    for k, v in state.items():
        if type(k) is not str:
            raise SerializationError(
                f"state keys must be str, got {type(k).__name__} {k!r}", path=f"state[{k!r}]"
            )
        if type(v) is list:
            grown = grow_list(v, prev_sources.get(k), prev_keys.get(k), f'state["{k}"]')
            if grown is not None:
                keys[k], added, sources[k] = grown
                if added != b"[]":
                    hints[k] = added
                continue
            keys[k] = serde.dumps(v, f'state["{k}"]')
            if _scalars_only(v):
                sources[k] = ListMark.of(v)
        elif type(v) in _ATOMS or (type(v) is int and _INT_MIN <= v <= _INT_MAX):
            try:
                keys[k] = orjson.dumps(v)
            except orjson.JSONEncodeError:
                keys[k] = serde.dumps(v, f'state["{k}"]')  # raises, naming the key
        else:
            keys[k] = serde.dumps(v, f'state["{k}"]')
    return encode_state(head, keys, force_full=force_full, appended=hints, sources=sources)


def _dump_obj(items: dict[str, bytes] | dict[str, Encoded]) -> bytes:
    if len(items) == 1:  # the common delta: one key changed (its value inline: a call less)
        for k, v in items.items():
            return b"{" + orjson.dumps(k) + b":" + (v.join() if isinstance(v, Chunks) else v) + b"}"
    return b"{" + b",".join(orjson.dumps(k) + b":" + _as_bytes(v) for k, v in items.items()) + b"}"


def encode_state(
    head: Head | None,
    keys: dict[str, Encoded],
    *,
    force_full: bool = False,
    appended: dict[str, bytes] | None = None,
    sources: dict[str, ListMark] | None = None,
) -> tuple[str, bytes, Head]:
    """Choose full or delta for the next row and encode it.

    Args:
        head: the run's newest row as the writer knows it, or ``None`` for a run with no rows.
        keys: the new state, encoded per key by :func:`encode_keys`.
        force_full: write a full snapshot regardless of the policy (a fork's first row).
        appended: keys already known to have grown by these JSON items (no compare needed).
        sources: list marks to remember for the next row's fast path.

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
                    app = _is_append(pb, bb) if bb[:1] == b"[" else None
                    if app is not None:
                        appends[k] = app
                    else:
                        sets[k] = bb
        deleted = [] if prev.keys() <= keys.keys() else [k for k in prev if k not in keys]
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
        if rows < MIN_ROWS_BETWEEN_FULL or replay_cost < REPLAY_FACTOR * _full_size(keys):
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


def empty_head() -> Head:
    """The head of a run known to have no rows yet (its run row was just created): the first
    put writes a full row at seq 1 without reading the run's newest row first."""
    return Head(0, 0, {}, 0, 0)
