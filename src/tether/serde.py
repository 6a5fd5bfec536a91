"""JSON serialization of run state, with typed envelopes for common non-JSON values.

Everything tether stores is JSON (orjson). Values JSON has no type for are wrapped in an
envelope ``{"__tether__": <tag>, "v": <payload>}`` and come back as the same type:

=================  ==========================================  =============================
type               payload                                     tag
=================  ==========================================  =============================
datetime / date    ISO 8601 string                             ``datetime`` / ``date``
time               ISO 8601 string                             ``time``
UUID               canonical string                            ``uuid``
Decimal            string (exact)                              ``decimal``
bytes              base64 string                               ``bytes``
bytearray          base64 string                               ``bytearray``
tuple / set        list                                        ``tuple`` / ``set``
frozenset          list                                        ``frozenset``
enum member        ``{"cls": "mod:Qual", "value": ...}``       ``enum``
dataclass          ``{"cls": "mod:Qual", "fields": {...}}``    ``dataclass``
pydantic model     ``{"cls": "mod:Qual", "data": {...}}``      ``pydantic``
=================  ==========================================  =============================

A user dict that itself has a ``"__tether__"`` key is wrapped as tag ``dict`` so it cannot be
mistaken for an envelope. Anything else raises :class:`~tether.errors.SerializationError` naming
the path of the value, e.g. ``state["order"]["when"]``; so does an enum, dataclass or pydantic
model whose class the decoder could not find by ``module:qualname`` (defined inside a function,
or not what its module holds under that name): an encoded value is always one the decoder
reads back (docs/design.md §7, "Stored values").

Decoding never imports code: an envelope naming a class resolves it only from modules already
imported in this process, and only to an Enum, dataclass or pydantic model. There is no pickle
or eval anywhere (docs/design.md §7, "Stored values").
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import sys
import uuid
from decimal import Decimal
from typing import Any, Final

import orjson

from ._typed_json import AmbiguousJSONError, parse_json_text
from .errors import CorruptRecordError, SerializationError

__all__ = [
    "AmbiguousJSONError",
    "FrozenDict",
    "canonical_dumps",
    "dumps",
    "from_jsonable",
    "loads",
    "parse_json_text",
    "to_jsonable",
]


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict its owner promises never to mutate once it is part of a run's state.

    Stored and read back as a plain dict. The delta encoder may then treat the same object
    reappearing in a grown list as already stored (an agent's message history), instead of
    encoding the whole history again on every row.
    """

    __slots__ = ()


TAG = "__tether__"
_PLAIN = (str, bool, type(None))
_PLAIN_TYPES = frozenset(_PLAIN)
_MAX_INT = 2**63 - 1
_MIN_INT = -(2**63)

try:  # pydantic is a hard dependency, but keep the import cost in one place
    from pydantic import BaseModel as _BaseModel
except ImportError:  # pragma: no cover
    _BaseModel = None  # type: ignore[assignment,misc]


def _key_path(path: str, key: Any) -> str:
    return f"{path}[{key!r}]" if not isinstance(key, str) else f'{path}["{key}"]'


_REFS: dict[type, str] = {}
"""Class references already checked to resolve back to their class (one check per type)."""


def _class_ref(cls: type, path: str) -> str:
    """``module:qualname`` of ``cls``, checked to name ``cls`` in the decoder's eyes.

    An envelope the decoder cannot resolve would commit fine and then leave the run unable to
    read its own state back, so it is refused here, before anything is stored.

    Raises:
        SerializationError: ``cls`` is defined inside a function, or is not reachable under
            its module and qualified name.
    """
    ref = _REFS.get(cls)
    if ref is not None:
        return ref
    module_name, qualname = cls.__module__, cls.__qualname__
    if "<locals>" in qualname:
        why = "is defined inside a function (its qualified name holds <locals>)"
    else:
        obj: Any = sys.modules.get(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is cls:
            ref = _REFS[cls] = f"{module_name}:{qualname}"
            return ref
        why = f"is not what {module_name}:{qualname} names (was it created or renamed at run time?)"
    tname = f"{module_name}.{qualname}"
    raise SerializationError(
        f"{path} holds a {tname}, which tether could store but never read back: the class "
        f"{why}, and stored values name their class by module and qualified name; define it "
        "at the top level of a module",
        path=path,
        type_name=tname,
    )


def to_jsonable(value: Any, path: str = "value") -> Any:
    """Convert ``value`` into plain JSON types, wrapping known non-JSON types in envelopes.

    Containers holding only JSON-native values are returned as they are (no copy), so plain
    state costs one pass of type checks.

    Args:
        value: any value made of dicts (str keys), lists and the types in the module table.
        path: the name used for ``value`` in error messages, e.g. ``state``.

    Returns:
        A structure of dict/list/str/int/float/bool/None.

    Raises:
        SerializationError: a value of an unsupported type, a non-str dict key, an int out of
            the 64-bit range or a float that is nan or infinite; the error's ``path`` names
            where it sits. A value nested deeper than Python's recursion limit, or holding
            itself, is refused naming ``path`` (docs/design.md §7, "Stored values").
    """
    try:
        return _to_jsonable(value, path)
    except RecursionError:  # the traceback would be a thousand frames of this function
        raise _too_deep(path) from None


def _too_deep(path: str) -> SerializationError:
    return SerializationError(
        f"{path} is nested too deeply to store as JSON (orjson stores 254 levels), or holds "
        "itself (a cycle); store a flatter value",
        path=path,
    )


def _to_jsonable(value: Any, path: str) -> Any:
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is float:
        if value - value == 0.0:  # false for nan and +-inf, which JSON has no number for
            return value
        raise SerializationError(
            f"{path} is the float {value!r}, which JSON cannot hold (it would read back as "
            "None); store None, a str or a Decimal instead",
            path=path,
            type_name="float",
        )
    if t is int:
        if not _MIN_INT <= value <= _MAX_INT:
            raise SerializationError(
                f"{path} is an int outside the 64-bit range JSON stores; store it as a str",
                path=path,
                type_name="int",
            )
        return value
    if t is dict:
        out: dict[str, Any] | None = None
        for k, v in value.items():
            if type(k) is not str:
                raise SerializationError(
                    f"{_key_path(path, k)}: dict keys must be str to be stored as JSON, "
                    f"got {type(k).__name__}",
                    path=_key_path(path, k),
                    type_name=type(k).__name__,
                )
            tv = type(v)
            if tv in _PLAIN or (tv is float and v - v == 0.0):
                continue
            if tv is list and _PLAIN_TYPES.issuperset(map(type, v)):
                continue  # a list of str/bool/None, as a step's "updated_keys": checked in C
            c = _to_jsonable(v, _key_path(path, k))
            if c is not v:
                if out is None:
                    out = dict(value)
                out[k] = c
        result = value if out is None else out
        if TAG in value:
            return {TAG: "dict", "v": result}
        return result
    if t is list:
        lout: list[Any] | None = None
        for i, v in enumerate(value):
            tv = type(v)
            if tv in _PLAIN or (tv is float and v - v == 0.0):
                continue
            c = _to_jsonable(v, f"{path}[{i}]")
            if c is not v:
                if lout is None:
                    lout = list(value)
                lout[i] = c
        return value if lout is None else lout
    return _envelope(value, path)


def _envelope(value: Any, path: str) -> Any:
    if isinstance(value, enum.Enum):
        return {
            TAG: "enum",
            "v": {"cls": _class_ref(type(value), path), "value": _to_jsonable(value.value, path)},
        }
    if isinstance(value, _dt.datetime):
        return {TAG: "datetime", "v": value.isoformat()}
    if isinstance(value, _dt.date):
        return {TAG: "date", "v": value.isoformat()}
    if isinstance(value, _dt.time):
        return {TAG: "time", "v": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {TAG: "uuid", "v": str(value)}
    if isinstance(value, Decimal):
        return {TAG: "decimal", "v": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        tag = "bytearray" if isinstance(value, bytearray) else "bytes"
        return {TAG: tag, "v": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {TAG: "tuple", "v": [_to_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, set | frozenset):
        items = [_to_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
        try:
            items.sort(key=orjson.dumps)
        except TypeError:  # pragma: no cover - every item is JSON by now
            pass
        return {TAG: "frozenset" if isinstance(value, frozenset) else "set", "v": items}
    if _BaseModel is not None and isinstance(value, _BaseModel):
        data = {
            name: getattr(value, name) for name in type(value).model_fields if hasattr(value, name)
        }
        return {
            TAG: "pydantic",
            "v": {"cls": _class_ref(type(value), path), "data": _to_jsonable(data, path)},
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
        return {
            TAG: "dataclass",
            "v": {"cls": _class_ref(type(value), path), "fields": _to_jsonable(fields, path)},
        }
    if isinstance(value, dict):  # dict subclasses: keep the data, not the subclass
        return _to_jsonable(dict(value), path)
    if isinstance(value, list):
        return _to_jsonable(list(value), path)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return _to_jsonable(int(value), path)
    if isinstance(value, float):
        return _to_jsonable(float(value), path)
    tname = f"{type(value).__module__}.{type(value).__qualname__}"
    raise SerializationError(
        f"{path} holds a {tname}, which tether cannot store as JSON; store plain data "
        "(dict/list/str/int/float/bool/None, datetime, date, UUID, Decimal, bytes, enums, "
        "dataclasses or pydantic models) instead",
        path=path,
        type_name=tname,
    )


def _resolve(ref: Any, kind: str) -> type:
    if not isinstance(ref, str) or ":" not in ref:
        raise CorruptRecordError(f"envelope {kind!r} has no valid class reference: {ref!r}")
    module_name, qualname = ref.split(":", 1)
    module = sys.modules.get(module_name)
    if module is None:
        raise CorruptRecordError(
            f"stored {kind} of class {ref} cannot be decoded: module {module_name!r} is not "
            "imported in this process (tether never imports code named by stored data; import "
            "it before resuming)"
        )
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            hint = (
                " (a class of a script's __main__ reads back only in a process running that "
                "script; define it in an importable module)"
                if module_name == "__main__"
                else ""
            )
            raise CorruptRecordError(f"stored {kind} names {ref}, which does not exist{hint}")
    if not isinstance(obj, type):
        raise CorruptRecordError(f"stored {kind} names {ref}, which is not a class")
    ok = (
        (kind == "enum" and issubclass(obj, enum.Enum))
        or (kind == "dataclass" and dataclasses.is_dataclass(obj))
        or (kind == "pydantic" and _BaseModel is not None and issubclass(obj, _BaseModel))
    )
    if not ok:
        raise CorruptRecordError(f"stored {kind} names {ref}, which is not a {kind} class")
    return obj


def from_jsonable(obj: Any) -> Any:
    """Rebuild values from the output of :func:`to_jsonable` (after a JSON round trip).

    Raises:
        CorruptRecordError: an envelope is malformed or names a class that is not loaded.
    """
    t = type(obj)
    if t is dict:
        tag = obj.get(TAG)
        if tag is not None and len(obj) == 2 and "v" in obj:
            return _open(tag, obj["v"])
        out: dict[str, Any] | None = None
        for k, v in obj.items():
            if type(v) is dict or type(v) is list:
                c = from_jsonable(v)
                if c is not v:
                    if out is None:
                        out = dict(obj)
                    out[k] = c
        return obj if out is None else out
    if t is list:
        lout: list[Any] | None = None
        for i, v in enumerate(obj):
            if type(v) is dict or type(v) is list:
                c = from_jsonable(v)
                if c is not v:
                    if lout is None:
                        lout = list(obj)
                    lout[i] = c
        return obj if lout is None else lout
    return obj


def _open(tag: Any, v: Any) -> Any:
    try:
        if tag == "datetime":
            return _dt.datetime.fromisoformat(v)
        if tag == "date":
            return _dt.date.fromisoformat(v)
        if tag == "time":
            return _dt.time.fromisoformat(v)
        if tag == "uuid":
            return uuid.UUID(v)
        if tag == "decimal":
            return Decimal(v)
        if tag == "bytes":
            return base64.b64decode(v, validate=True)
        if tag == "bytearray":
            return bytearray(base64.b64decode(v, validate=True))
        if tag == "tuple":
            return tuple(from_jsonable(x) for x in v)
        if tag == "set":
            return {from_jsonable(x) for x in v}
        if tag == "frozenset":
            return frozenset(from_jsonable(x) for x in v)
        if tag == "dict":
            return {k: from_jsonable(x) for k, x in v.items()}
        if tag == "enum":
            return _resolve(v["cls"], "enum")(from_jsonable(v["value"]))
        if tag == "dataclass":
            return _resolve(v["cls"], "dataclass")(**from_jsonable(v["fields"]))
        if tag == "pydantic":
            cls = _resolve(v["cls"], "pydantic")
            return cls.model_validate(from_jsonable(v["data"]))  # type: ignore[attr-defined]
    except CorruptRecordError:
        raise
    except Exception as exc:
        raise CorruptRecordError(f"stored {tag!r} value cannot be decoded: {exc}") from exc
    raise CorruptRecordError(f"unknown envelope tag {tag!r} in stored data")


def dumps(value: Any, path: str = "value") -> bytes:
    """Encode ``value`` to JSON bytes (envelopes included).

    Raises:
        SerializationError: naming the path of the first value that cannot be stored.
    """
    try:  # _to_jsonable, not to_jsonable: one frame less on every step's encoding
        return orjson.dumps(_to_jsonable(value, path))
    except orjson.JSONEncodeError as exc:  # e.g. a str with a lone surrogate
        if "Recursion limit" in str(exc):
            raise _too_deep(path) from exc
        raise SerializationError(f"{path} cannot be encoded as JSON: {exc}", path=path) from exc
    except RecursionError:  # as to_jsonable does
        raise _too_deep(path) from None


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode JSON produced by :func:`dumps`.

    Raises:
        CorruptRecordError: the bytes are not JSON or hold a malformed envelope.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise CorruptRecordError(f"stored data is not valid JSON: {exc}") from exc
    return from_jsonable(raw)


def canonical_dumps(value: Any, path: str = "arguments") -> bytes:
    """Encode ``value`` canonically (sorted keys), for hashing into idempotency keys.

    Equal values give equal bytes across processes; a value whose only representation would
    be a ``repr`` (with a memory address in it) is refused instead of hashed.

    Raises:
        SerializationError: naming the path of the value that has no canonical encoding.
    """
    try:
        out = orjson.dumps(to_jsonable(value, path), option=orjson.OPT_SORT_KEYS)
        if b'"frozenset"' in out or b'"bytearray"' in out:  # rare: one more pass, only then
            out = orjson.dumps(_as_equal(to_jsonable(value, path)), option=orjson.OPT_SORT_KEYS)
        return out
    except orjson.JSONEncodeError as exc:
        if "Recursion limit" in str(exc):
            raise _too_deep(path) from exc
        raise SerializationError(f"{path} cannot be encoded as JSON: {exc}", path=path) from exc


# The envelope tags of types equal to another's values (frozenset({1}) == {1},
# bytearray(b"x") == b"x"): canonical bytes follow equality, so they hash as that type.
_EQUAL_TAGS: Final = {"frozenset": "set", "bytearray": "bytes"}


def _as_equal(obj: Any) -> Any:
    """``obj`` (JSON types) with the tags of :data:`_EQUAL_TAGS` replaced."""
    if type(obj) is list:
        return [_as_equal(x) for x in obj]
    if type(obj) is dict:
        tag = obj.get(TAG)
        if tag == "dict" and len(obj) == 2 and type(obj.get("v")) is dict:  # a user's dict
            return {TAG: "dict", "v": {k: _as_equal(v) for k, v in obj["v"].items()}}
        out = {k: _as_equal(v) for k, v in obj.items()}
        if len(out) == 2 and "v" in out and tag in _EQUAL_TAGS:
            out[TAG] = _EQUAL_TAGS[tag]
        return out
    return obj
