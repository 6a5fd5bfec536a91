"""``node_input`` values stored once, in the row's state.

A top-level value of a dict ``node_input`` that is the very object (identity) found among the
newest items of the row's state (an agent's tool arguments, already in the assistant message
of its history) is stored once: in the state, with ``node_input`` holding a reference envelope
``{"__tether__": "ref", "v": ["messages", 7, "tool_calls", 0, "arguments"]}``, the path into the
row's materialized state. Readers resolve it (:func:`load_node_input`), so every API hands
back ``node_input`` exactly as written.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import orjson

from .. import serde
from ..errors import CorruptRecordError
from ._rows import CP

REF_TAG: Final = "ref"  # envelope tag of a node_input value stored in the row's state

REF_SCAN_ITEMS: Final = 8  # newest items of each state list searched for node_input values

REF_SCAN_VALUES: Final = 1024  # values looked at, at most, per row in that search

_REF_MARK: Final = b'{"' + serde.TAG.encode() + b'":"' + REF_TAG.encode() + b'"'


def _plain(value: Any) -> bytes | None:
    return None if value is None else serde.dumps(value, "node_input")


def _load_plain(data: bytes | None) -> Any:
    return None if data is None else serde.loads(data)


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
        return _plain(node_input)
    targets: dict[int, Any] = {}
    for k, v in node_input.items():
        if type(k) is not str:
            return _plain(node_input)  # raises, naming the key
        t = type(v)
        if v and (t is dict or t is list or t is serde.FrozenDict):
            targets[id(v)] = v
    paths = _find_in_state(state, targets) if targets else None
    if not paths:
        return _plain(node_input)
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
            return _plain(node_input)  # raises, naming the key
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
        return _load_plain(data)
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
                    f"checkpoint {row[CP.checkpoint_id]!r} (run {row[CP.execution_id]!r}, "
                    f"seq {row[CP.seq]}, node {row[CP.node_id]!r}): "
                    f'node_input["{k}"] refers to {v["v"]!r} in the row\'s state, which holds '
                    "nothing there",
                    execution_id=row[CP.execution_id],
                    node_id=row[CP.node_id],
                ) from None
        else:
            out[k] = serde.from_jsonable(v)
    return out
