"""A LangGraph checkpoint as a tether state, so it is stored as what changed since the last one.

The checkpoint is flattened into top-level keys of JSON, each stored by tether's delta codec
(``store/encoding.py``) as set, deleted or appended since the thread's previous row:

========================  ==================================================================
key                       value
========================  ==================================================================
``m``                     ``{"v", "ts", "u"}``: format version, timestamp, updated channels
``V:<channel>``           the channel's version (``channel_versions``)
``S:<node>``              the versions that node has seen (``versions_seen[node]``)
``c:<channel>``           the channel's value as tether JSON (a list: only appended items)
``t:<channel>``           ``{"t": type, "b": base64}``: a value only the serializer holds
``x:<field>``             any other field of the checkpoint (``pending_sends``), as a value
========================  ==================================================================

So a step that appends a message stores the message, its channel's new version, the versions
its node saw and the timestamp; never the history, nor the versions that did not change.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from ... import serde as _tether_serde
from ...errors import CorruptRecordError, SerializationError
from ...store import encoding
from .serde import JSON_TYPE, TetherSerializer, refuse_executable

_KNOWN: Final = frozenset(
    {"v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels"}
)


@dataclass(slots=True)
class ThreadHead:
    """What the writer remembers of a thread namespace's newest row (by ``seq``)."""

    codec: encoding.Head
    values: dict[str, Any] = field(default_factory=dict)  # channel -> object last encoded
    versions: dict[str, Any] = field(default_factory=dict)  # channel -> its version then
    seen: dict[str, Any] = field(default_factory=dict)  # node -> versions it had seen then


class Encoder:
    """Encodes checkpoints for one saver (its serializer decides how values are held)."""

    def __init__(self, serde: Any) -> None:
        self.serde = serde
        self.json_first = isinstance(serde, TetherSerializer)

    def _value(self, value: Any, path: str) -> tuple[str, bytes]:
        """``(key prefix, JSON)`` for a stored value."""
        if self.json_first:
            try:
                return "c:", _tether_serde.dumps(value, path)
            except SerializationError:
                pass
        type_, payload = self.serde.dumps_typed(value)
        if type_ == JSON_TYPE and self.json_first:  # pragma: no cover - handled above
            return "c:", payload
        return "t:", orjson.dumps({"t": type_, "b": base64.b64encode(payload).decode()})

    def encode(
        self, checkpoint: dict[str, Any], head: ThreadHead | None
    ) -> tuple[str, bytes, ThreadHead]:
        """``(state_kind, payload, new_head)`` for ``checkpoint`` as the row after ``head``.

        Raises:
            SerializationError: a value neither tether's JSON nor the serializer can hold.
        """
        prev = head.codec if head is not None and head.codec.seq > 0 else None
        prev_keys = prev.keys if prev is not None else {}
        prev_sources = prev.sources if prev is not None else {}
        versions = checkpoint.get("channel_versions") or {}
        keys: dict[str, encoding.Encoded] = {
            "m": orjson.dumps(
                {
                    "v": checkpoint.get("v"),
                    "ts": checkpoint.get("ts"),
                    "u": checkpoint.get("updated_channels"),
                }
            )
        }
        # Versions that did not change keep the very bytes the head holds, which the codec
        # skips without comparing: a step costs the versions it moved, not every node's.
        prev_versions = head.versions if prev is not None and head is not None else {}
        prev_seen = head.seen if prev is not None and head is not None else {}
        for ch, ver in versions.items():
            old = prev_keys.get("V:" + ch)
            same = old is not None and ch in prev_versions and prev_versions[ch] == ver
            keys["V:" + ch] = old if same else orjson.dumps(ver)  # type: ignore[assignment]
        all_seen = checkpoint.get("versions_seen") or {}
        for node, seen in all_seen.items():
            old = prev_keys.get("S:" + node)
            same = old is not None and prev_seen.get(node) == seen
            keys["S:" + node] = old if same else orjson.dumps(seen)  # type: ignore[assignment]
        hints: dict[str, bytes] = {}
        sources: dict[str, encoding.ListMark] = {}
        values = checkpoint.get("channel_values") or {}
        for ch, value in values.items():
            reused = self._reuse(head, ch, value, versions.get(ch), prev_keys, prev_sources)
            if reused is not None:
                key, enc, src = reused
                keys[key] = enc
                if src is not None:
                    sources[key] = src
                continue
            if self.json_first and type(value) is list:
                grown = _grown(value, "c:" + ch, prev_keys, prev_sources, ch)
                if grown is not None:
                    keys["c:" + ch], hints["c:" + ch], sources["c:" + ch] = grown
                    continue
            prefix, enc_value = self._value(value, f'channel_values["{ch}"]')
            keys[prefix + ch] = enc_value
            if prefix == "c:" and type(value) is list and encoding.scalars_only(value):
                sources["c:" + ch] = encoding.ListMark.of(value)
        for name, value in checkpoint.items():
            if name not in _KNOWN:
                prefix, enc_value = self._value(value, name)
                keys["x:" + name] = orjson.dumps({"p": prefix, "j": orjson.Fragment(enc_value)})
        kind, payload, codec_head = encoding.encode_state(
            prev, keys, appended=hints, sources=sources
        )
        if prev is None and head is not None:  # the thread's first row after others
            codec_head.seq = head.codec.seq + 1
            codec_head.base_seq = codec_head.seq
        # Copies: a caller may change its dicts in place after put() returns.
        seen_copy = {node: dict(seen) for node, seen in all_seen.items()}
        return kind, payload, ThreadHead(codec_head, dict(values), dict(versions), seen_copy)

    @staticmethod
    def _reuse(
        head: ThreadHead | None,
        ch: str,
        value: Any,
        version: Any,
        prev_keys: dict[str, encoding.Encoded],
        prev_sources: dict[str, encoding.ListMark],
    ) -> tuple[str, encoding.Encoded, encoding.ListMark | None] | None:
        # An unchanged channel (the very object, at the same version) keeps its encoding: a
        # step pays for the channels it wrote, as LangGraph's own savers write blobs only for
        # new versions.
        if head is None or ch not in head.values or head.values[ch] is not value:
            return None
        if version is None or head.versions.get(ch) != version:
            return None
        for prefix in ("c:", "t:"):
            enc = prev_keys.get(prefix + ch)
            if enc is not None:
                return prefix + ch, enc, prev_sources.get(prefix + ch)
        return None

    def decode(self, raw: dict[str, Any], checkpoint_id: str) -> dict[str, Any]:
        """The checkpoint whose flattened state is ``raw``.

        Raises:
            CorruptRecordError: a value that cannot be read back (saying which key of the
                state holds it), or a ``pickle`` payload.
        """
        meta = raw.get("m") or {}
        if type(meta) is not dict:
            raise CorruptRecordError(f"key 'm' holds {_kind(meta)}, not an object")
        checkpoint: dict[str, Any] = {
            "v": meta.get("v"),
            "id": checkpoint_id,
            "ts": meta.get("ts"),
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
            "updated_channels": meta.get("u"),
        }
        for key, value in raw.items():
            tag, _, name = key.partition(":")
            try:
                if tag == "V":
                    checkpoint["channel_versions"][name] = value
                elif tag == "S":
                    if type(value) is not dict:
                        raise CorruptRecordError(f"{_kind(value)}, not an object")
                    checkpoint["versions_seen"][name] = value
                elif tag in ("c", "t"):
                    checkpoint["channel_values"][name] = self._open(tag, value)
                elif tag == "x":
                    if type(value) is not dict or type(value.get("p")) is not str:
                        raise CorruptRecordError(f"{_kind(value)}, not a stored field")
                    checkpoint[name] = self._open(value["p"][:1], value.get("j"))
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"key {key!r}: {exc.message}") from exc
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise CorruptRecordError(f"key {key!r}: {type(exc).__name__}: {exc}") from exc
        return checkpoint

    def _open(self, tag: str, value: Any) -> Any:
        if tag == "c":
            return _tether_serde.from_jsonable(value)
        if type(value) is not dict or type(value.get("t")) is not str:
            raise CorruptRecordError(f"{_kind(value)}, not a typed value")
        encoded = value.get("b")
        if type(encoded) is not str:
            raise CorruptRecordError(f"its payload is {_kind(encoded)}, not base64")
        try:
            payload = base64.b64decode(encoded, validate=True)
        except (TypeError, ValueError) as exc:  # binascii.Error is a ValueError
            raise CorruptRecordError(f"its payload is not base64 ({exc})") from exc
        return self.load_typed(value["t"], payload)

    def load_typed(self, type_: str, payload: bytes) -> Any:
        """A value the serializer stored as ``(type_, payload)``.

        Raises:
            CorruptRecordError: a ``pickle`` payload, or one the serializer cannot load.
        """
        refuse_executable(type_)
        try:
            return self.serde.loads_typed((type_, payload))
        except CorruptRecordError:
            raise
        # Whatever a serializer raises on the stored bytes (msgpack's ValueError for a byte
        # it does not know, say), the value cannot be read back: the row is damaged.
        except Exception as exc:
            raise CorruptRecordError(
                f"the serializer cannot load this {type_!r} value: {type(exc).__name__}: {exc}"
            ) from exc


def _kind(value: Any) -> str:
    """What a JSON value is, for an error: ``a list``, ``a number``."""
    if value is None:
        return "null"
    name = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "a " + name.get(type(value), type(value).__name__)


def _grown(
    value: list[Any],
    key: str,
    prev_keys: dict[str, encoding.Encoded],
    prev_sources: dict[str, encoding.ListMark],
    ch: str,
) -> tuple[encoding.Encoded, bytes, encoding.ListMark] | None:
    """A list channel that grew by appending immutable scalars to the very items last stored:
    only the new items are encoded (a step's cost follows what it appended)."""
    grown = encoding.grow_list(
        value, prev_sources.get(key), prev_keys.get(key), f'channel_values["{ch}"]'
    )
    if grown is None or grown[1] == b"[]":  # unchanged lists keep the general path
        return None
    return grown
