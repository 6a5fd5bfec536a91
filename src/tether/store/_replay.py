"""Replaying stored state: a run's raw JSON state rebuilt from a full snapshot and the deltas
after it (the row formats are in :mod:`._delta`), and the writer head that follows it.

A resume replays every delta since the last full snapshot, which for a history that only
grows is one row per step since the run began (10,000 rows after 10,000 appended messages), so
a row costs here about what the plain database pays to read the same message back:

- the common row, a plain delta that appends to one list and does nothing else
  (``{"a":{"<key>":[...]}}``), is told by its bytes and only its array is parsed: no dict per
  row, no call per row (any other row is applied by :func:`apply_row_of`);
- each such row is kept as it was read, whole (its array is a slice of it, never copied out), so
  the head's encoding of the grown list is those rows (:class:`~._delta.Chunks`, framed), not
  the whole history encoded again, and a resume allocates nothing per row it keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import orjson

from .. import serde
from ..errors import CorruptRecordError
from ._compression import ZSTD_MARK, decompress_state
from ._delta import ROW_COST_BYTES, Chunks, Encoded, Head, ListMark, _scalars_only

_APPEND_OPEN: Final = b'{"a":{'  # how a delta that only appends starts (``_delta._dump_obj``)
_APPEND_CLOSE: Final = b"]}}"  # and ends, when it appends to one key


class Track:
    """How a list of a replayed state grew from ``start`` items: by the append rows ``rows``,
    as stored (each ``{"a":{"<key>":[...]}}``, its array from byte ``frame`` on), which left it
    ``length`` long. Valid while the state still holds ``items`` at that length: any other row
    that changes the list replaces it or changes its length (a replay in place only extends
    lists), and then the list is encoded whole."""

    __slots__ = ("frame", "items", "length", "rows", "start")

    def __init__(self, items: list[Any], frame: int) -> None:
        self.items = items
        self.start = self.length = len(items)
        self.frame = frame
        self.rows: list[bytes] = []

    def encoding_of(self, value: Any) -> Chunks | None:
        """``value`` encoded from the rows, if it is still the list they describe."""
        if value is not self.items or len(value) != self.length:
            return None
        head = orjson.dumps(value[: self.start]) if self.start else b"[]"
        return Chunks([head, *self.rows], framed=len(self.rows), frame=self.frame)


Tracks = dict[str, Track]
"""Per list key of a replayed state, how it grew (see :class:`Track`)."""


def replay_state(
    rows: list[tuple[int, str, bytes]],
    execution_id: str | None = None,
    *,
    subject: str | None = None,
) -> dict[str, Any]:
    """Rebuild the raw JSON state (envelopes still closed) from a full row and its deltas.

    Args:
        rows: ``(seq, state_kind, payload)`` in seq order, the first being ``full``.
        execution_id: the run, named in errors.
        subject: how errors name the rows' owner (default ``run '<execution_id>'``; the
            LangGraph saver's are a thread's).

    Raises:
        CorruptRecordError: the chain of rows is broken or a payload is not JSON (naming the
            run and the row's seq).
    """
    if not rows or rows[0][1] != "full":
        raise CorruptRecordError(
            f"{_subject(execution_id, subject)}: state chain does not start at a full snapshot",
            execution_id=execution_id,
            seq=rows[0][0] if rows else None,
        )
    return replay_in_place(execution_id, {}, rows, subject=subject)


def replay_in_place(
    execution_id: str | None,
    cur: dict[str, Any],
    rows: Iterable[Sequence[Any]],
    tracks: Tracks | None = None,
    *,
    subject: str | None = None,
) -> dict[str, Any]:
    """Apply ``rows`` (``(seq, state_kind, payload)`` in seq order) to the raw state ``cur``
    in place, as :func:`apply_row_of` with ``in_place`` does, and return the result.

    Args:
        execution_id: the run, named in errors.
        cur: the raw state before the rows (``{}`` when the first row is a full snapshot).
        rows: the rows to apply.
        tracks: when given, updated with how the rows appended to lists, for
            :func:`head_from_raw` (pass the same dict to a replay that continues this one).
        subject: how errors name the rows' owner, as for :func:`replay_state`.

    Raises:
        CorruptRecordError: as :func:`apply_row_of`, naming the run and the row's seq.
    """
    loads = orjson.loads
    # The list the previous row appended to: its key, the opening of its row, the list, and
    # how it grew (its length brought up to date when the run of such rows ends).
    key: str | None = None
    opening = b""
    start = 0
    into: list[Any] = []
    track: Track | None = None
    keep: Callable[[bytes], None] = _ignore
    for seq, kind, payload in rows:
        if type(payload) is not bytes:
            payload = _payload_bytes(execution_id, seq, payload, subject)
        if kind == "delta":
            if payload.endswith(_APPEND_CLOSE):
                if key is None or not payload.startswith(opening):
                    if track is not None:
                        track.length = len(into)
                    key, opening = _appended_key(cur, payload)
                    start = len(opening)
                    if key is not None:
                        into = cur[key]
                        track = None if tracks is None else _track(tracks, key, into, start)
                        keep = _ignore if track is None else track.rows.append
                # Parsed alone, so that a middle that is not one JSON array (another key
                # follows, say) goes the long way: the row is exactly ``{"a": {key: part}}``.
                if key is not None and payload[start] == 91:  # "["
                    part = payload[start:-2]
                    try:
                        items = loads(part)
                    except orjson.JSONDecodeError:
                        items = None
                    if type(items) is list:
                        if items:  # an empty one, ``[ ]`` as much as ``[]``, is not kept
                            keep(payload)
                            into.extend(items)
                        continue
            elif payload == b"{}":  # a row that changed nothing (a run's end, an interrupt)
                continue
        if track is not None:
            track.length = len(into)
            track = None
        key = None
        cur = apply_row_of(execution_id, seq, cur, kind, payload, in_place=True, subject=subject)
    if track is not None:
        track.length = len(into)
    return cur


def _ignore(part: bytes) -> None:
    pass


def _subject(execution_id: str | None, subject: str | None) -> str:
    return f"run {execution_id!r}" if subject is None else subject


def _payload_bytes(
    execution_id: str | None, seq: int, payload: object, subject: str | None = None
) -> bytes:
    """A row's state as bytes: text (a row edited by hand in SQLite's shell is stored as TEXT)
    as its UTF-8, a buffer copied.

    Raises:
        CorruptRecordError: the state is neither (a number, NULL), naming the run and the seq.
    """
    if isinstance(payload, str):
        return payload.encode("utf-8", "surrogatepass")
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise CorruptRecordError(
        f"{_subject(execution_id, subject)}, seq {seq}: stored state is "
        f"{type(payload).__name__}, not JSON",
        execution_id=execution_id,
        seq=seq,
    )


def _track(tracks: Tracks, key: str, into: list[Any], frame: int) -> Track:
    """The track of ``into``, the list at ``key`` (whose append rows hold their array from
    byte ``frame`` on), continued if it still describes it."""
    track = tracks.get(key)
    if track is None or track.items is not into or track.length != len(into):
        tracks[key] = track = Track(into, frame)
    return track


def _appended_key(cur: dict[str, Any], payload: bytes) -> tuple[str | None, bytes]:
    """The list key of ``cur`` whose one-key append row ``payload`` may be (by its opening
    bytes only), with that opening; ``(None, b"")`` when none."""
    if payload.startswith(_APPEND_OPEN):
        for k, v in cur.items():
            if type(v) is list:
                opening = _APPEND_OPEN + orjson.dumps(k) + b":"
                if payload.startswith(opening):
                    return k, opening
    return None, b""


def apply_row_of(
    execution_id: str | None,
    seq: int,
    cur: dict[str, Any],
    kind: str,
    payload: bytes,
    *,
    in_place: bool = False,
    subject: str | None = None,
) -> dict[str, Any]:
    """:func:`apply_row` for row ``seq`` of run ``execution_id``, named in its errors (as
    ``subject`` names it, when given)."""
    if type(payload) is not bytes:
        payload = _payload_bytes(execution_id, seq, payload, subject)
    try:
        return apply_row(cur, kind, payload, in_place=in_place)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"{_subject(execution_id, subject)}, seq {seq}: {exc.message}",
            execution_id=execution_id,
            seq=seq,
        ) from exc


def apply_row(
    cur: dict[str, Any], kind: str, payload: bytes, *, in_place: bool = False
) -> dict[str, Any]:
    """Apply one stored row to a raw state. Returns a new dict and never mutates ``cur`` nor
    its lists, unless ``in_place``: then ``cur`` itself is updated and its lists extended (for
    a caller that owns them: a replay whose every value came from earlier rows), so replaying
    a growing history costs its bytes, not a copy per row.

    Raises:
        CorruptRecordError: the payload is neither JSON nor a Zstandard frame of JSON, or does
            not fit the state it applies to.
    """
    if payload[:1] == ZSTD_MARK:
        payload = decompress_state(payload)
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
    out = cur if in_place else dict(cur)
    if "s" in data:
        out.update(data["s"])
    for k in data.get("d", ()):
        out.pop(k, None)
    for k, items in data.get("a", {}).items():
        base = out.get(k)
        if type(base) is not list:
            raise CorruptRecordError(f"append to state key {k!r}, which is not a list")
        if type(items) is not list:
            raise CorruptRecordError(f"append to state key {k!r} of {type(items).__name__}")
        if in_place:
            base.extend(items)
        else:
            out[k] = base + items
    return out


def copy_raw(raw: dict[str, Any], tracks: Tracks | None = None) -> dict[str, Any]:
    """A copy of a replayed raw state that replaying further rows in place leaves as it is
    (in place, only top-level lists are extended); ``tracks`` of ``raw``'s lists are moved to
    the copies (which hold the same items)."""
    copy = {k: v[:] if type(v) is list else v for k, v in raw.items()}
    for k, track in (tracks or {}).items():
        if raw.get(k) is track.items:
            track.items = copy[k]
    return copy


def decode_state(raw: dict[str, Any]) -> dict[str, Any]:
    """Open the envelopes of a raw state (a list holding no dict nor list has none: told in C,
    without walking a long history item by item)."""
    return {
        k: v if type(v) is list and _flat(v) else serde.from_jsonable(v) for k, v in raw.items()
    }


def _flat(items: list[Any]) -> bool:
    kinds = set(map(type, items))
    return dict not in kinds and list not in kinds


def head_from_raw(
    seq: int,
    base_seq: int,
    raw: dict[str, Any],
    rows_since_full: int,
    tracks: Tracks | None = None,
) -> Head:
    """A writer head for a state read back from the store. Its lists of scalars are marked
    (:class:`~._delta.ListMark`): the state handed back holds the very same items (the
    envelopes of scalars are never opened into new objects), so the next row of a resumed run
    that only appended costs its new items too.

    Args:
        tracks: from :func:`replay_in_place` of ``raw``: a list that grew by appends is not
            encoded again (its stored arrays are joined only when a full snapshot needs them).
    """
    keys: dict[str, Encoded] = {}
    for k, v in raw.items():
        track = tracks.get(k) if tracks else None
        grown = None if track is None else track.encoding_of(v)
        keys[k] = orjson.dumps(v) if grown is None else grown
    sources = {k: ListMark.of(v) for k, v in raw.items() if type(v) is list and _scalars_only(v)}
    # Bytes since the full are unknown after a restart; assume the worst so a snapshot comes
    # no later than the policy would have written it.
    return Head(seq, base_seq, keys, rows_since_full, rows_since_full * ROW_COST_BYTES, sources)


def check_state_chain(
    eid: str, chain: Sequence[Sequence[Any]], low: int, high: int, *, subject: str | None = None
) -> None:
    """Refuse a state chain (``(seq, state_kind, payload)`` in seq order) that is not every
    row from the full snapshot at seq ``low`` to seq ``high``: replaying past a deleted or a
    foreign row would hand back a wrong state without a word. It compares what was read
    (the first row, the number of rows), so a whole chain costs nothing more to accept.

    Args:
        subject: how errors name the rows' owner, as for :func:`replay_state`.

    Raises:
        CorruptRecordError: naming the run and the seqs missing (or the row that is not the
            full snapshot its successors replay from).
    """
    if not chain or chain[0][0] != low:
        raise no_snapshot(eid, low, high, subject)
    if chain[0][1] != "full":
        raise CorruptRecordError(
            f"{_subject(eid, subject)}, seq {low}: the rows after it replay from it as a full "
            f"snapshot, but it is stored as {chain[0][1]!r}",
            execution_id=eid,
            seq=low,
        )
    if len(chain) != high - low + 1:
        have = {r[0] for r in chain}
        missing = [s for s in range(low, high + 1) if s not in have]
        if not missing:  # more rows than seqs: one is numbered by no integer
            raise CorruptRecordError(
                f"{_subject(eid, subject)}: rows of its state chain from seq {low} to {high} "
                f"are not numbered one by one ({len(chain)} rows)",
                execution_id=eid,
            )
        raise rows_missing(eid, missing[0], missing[-1], len(missing), subject)


def no_snapshot(
    eid: str, base_seq: int, seq: int, subject: str | None = None
) -> CorruptRecordError:
    """The full snapshot at ``base_seq`` that rows up to ``seq`` replay from is missing."""
    return CorruptRecordError(
        f"{_subject(eid, subject)}: the full snapshot at seq {base_seq} that its rows up to "
        f"seq {seq} replay from is missing",
        execution_id=eid,
        seq=base_seq,
    )


def rows_missing(
    eid: str, first: int, last: int, count: int | None = None, subject: str | None = None
) -> CorruptRecordError:
    """Rows ``first`` to ``last`` (``count`` of them, when not all) of a state chain are
    missing."""
    span = f"seq {first}" if first == last else f"seq {first} to {last}"
    if count is not None and count != last - first + 1:
        span += f" ({count} rows)"
    return CorruptRecordError(
        f"{_subject(eid, subject)}: rows are missing from its state chain at {span}",
        execution_id=eid,
        seq=first,
    )
