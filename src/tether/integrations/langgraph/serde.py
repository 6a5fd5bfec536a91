"""``TetherSerializer``: LangGraph's serializer protocol, JSON first, never pickle.

LangGraph's savers default to ``JsonPlusSerializer``: msgpack whose extension types name a
module and a constructor that loading imports and calls, with pickle as an opt-in fallback.
This serializer stores what tether's own JSON (:mod:`tether.serde`) can hold as JSON: plain
values, dataclasses, enums and pydantic models (LangChain's messages among them), resolved
only from modules already imported, never by importing one. Anything else goes to
LangGraph's msgpack restricted to its allowlist of safe types (``allowed_msgpack_modules``,
``None`` by default: LangGraph's strict list). A ``pickle`` payload is refused, whoever
wrote it (docs/langgraph.md, "Stored values").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from ... import serde as _tether_serde
from ...errors import CorruptRecordError, SerializationError

__all__ = ["JSON_TYPE", "TetherSerializer", "refuse_executable"]

JSON_TYPE: Final = "json"
"""The type tag of a value stored as tether JSON."""
_EXECUTABLE: Final = frozenset({"pickle"})


def refuse_executable(type_: str) -> None:
    """Raise when ``type_`` names a payload that loading would execute (pickle).

    Raises:
        CorruptRecordError: always for ``"pickle"``: tether never loads one.
    """
    if type_ in _EXECUTABLE:
        raise CorruptRecordError(
            f"refusing to load a stored {type_!r} payload: loading it could run code; tether "
            "stores LangGraph values as JSON (docs/langgraph.md, 'Stored values')"
        )


class TetherSerializer:
    """JSON-first implementation of LangGraph's ``SerializerProtocol``.

    ``dumps_typed(obj)`` returns ``("json", bytes)`` for values tether's JSON holds, else
    LangGraph's ``("msgpack", bytes)`` (``"null"``/``"bytes"`` for those); ``loads_typed``
    reads both and refuses ``"pickle"``.

    Args:
        allowed_msgpack_modules: passed to LangGraph's ``JsonPlusSerializer`` for the msgpack
            fallback; ``None`` (default) keeps LangGraph's strict allowlist of safe types.

    Raises:
        SerializationError: (from ``dumps_typed``) a value neither JSON nor msgpack holds, or
            one msgpack would read back as another class (an unlisted class under the strict
            allowlist) or changed, naming where it sits (docs/langgraph.md, "Stored values").
    """

    def __init__(self, *, allowed_msgpack_modules: Iterable[tuple[str, ...]] | None = None):
        self._fallback = JsonPlusSerializer(
            pickle_fallback=False,
            allowed_msgpack_modules=None
            if allowed_msgpack_modules is None
            else list(allowed_msgpack_modules),
        )

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """``(type, payload)`` for ``obj``: tether JSON when it can hold it, else LangGraph's
        msgpack when it reads back as the same classes and values.

        Raises:
            SerializationError: neither can store it faithfully (see the class docstring).
        """
        try:
            return JSON_TYPE, _tether_serde.dumps(obj)
        except SerializationError as exc:
            if obj is None or isinstance(obj, bytes | bytearray):  # pragma: no cover
                raise
            try:
                stored = self._fallback.dumps_typed(obj)
            except Exception as fallback_exc:
                raise SerializationError(
                    f"{exc.message}; LangGraph's msgpack cannot hold it either ({fallback_exc})",
                    path=exc.path,
                ) from exc
            self._refuse_lost_classes(obj, stored, exc)
            return stored

    def _refuse_lost_classes(
        self, obj: Any, stored: tuple[str, bytes], exc: SerializationError
    ) -> None:
        """Raise when reading ``stored`` back would give an object of another class than
        ``obj``'s somewhere (LangGraph's allowlist reads an unlisted class as a plain dict, with
        a log line only): refused at write time, not found out at resume."""
        lost = _lost_class(obj, self._fallback.loads_typed(stored), "value")
        if lost is None:
            return
        path, cls, back = lost
        if type(back) is cls:  # same class, another value (a lone surrogate turned into '?')
            how = f"would read {path} back changed ({back!r:.60}); make the value JSON-able"
        else:
            how = (
                f"would read the {cls.__qualname__} at {path} back as {type(back).__name__}: "
                "allow it with TetherSerializer(allowed_msgpack_modules="
                f"[({cls.__module__!r}, {cls.__name__!r})]), or make the value JSON-able"
            )
        raise SerializationError(
            f"{exc.message}, and LangGraph's msgpack {how} (the first reason) so tether stores "
            "it as JSON",
            path=path,
            type_name=f"{cls.__module__}.{cls.__qualname__}",
        ) from exc

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """The value ``dumps_typed`` stored.

        Raises:
            CorruptRecordError: a ``pickle`` payload, or an unknown type.
        """
        type_, payload = data
        if type_ == JSON_TYPE:
            return _tether_serde.loads(payload)
        refuse_executable(type_)
        try:
            return self._fallback.loads_typed((type_, payload))
        except NotImplementedError as exc:
            raise CorruptRecordError(f"unknown stored value type {type_!r}") from exc

    # The untyped half of LangGraph's protocol (used by a few of its helpers).
    def dumps(self, obj: Any) -> bytes:
        """Tether JSON of ``obj``.

        Raises:
            SerializationError: a value tether's JSON cannot hold.
        """
        return _tether_serde.dumps(obj)

    def loads(self, data: bytes) -> Any:
        """The value :meth:`dumps` stored."""
        return _tether_serde.loads(data)


_PLAIN: Final = (str, int, float, bool, bytes, type(None))


def _lost_class(original: Any, loaded: Any, path: str) -> tuple[str, type, Any] | None:
    """Where ``loaded`` (``original`` after a msgpack round trip) holds an object of another
    class than the original's, or a plain value changed: ``(path, original class, what came
    back)``, or ``None``. Containers are walked; a tuple read back as a list is msgpack's way,
    not a loss."""
    if isinstance(original, _PLAIN):
        if type(loaded) is type(original) and (loaded == original or original != original):
            return None  # (a NaN is never equal to itself)
        return path, type(original), loaded
    if isinstance(original, dict):
        if not isinstance(loaded, dict):
            return path, type(original), loaded
        for key, value in original.items():
            if key in loaded:
                found = _lost_class(value, loaded[key], f"{path}[{key!r}]")
                if found is not None:
                    return found
        return None
    if isinstance(original, list | tuple):
        if not isinstance(loaded, list | tuple) or len(loaded) != len(original):
            return path, type(original), loaded
        for i, (value, back) in enumerate(zip(original, loaded, strict=True)):
            found = _lost_class(value, back, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(original, set | frozenset):
        return None if isinstance(loaded, set | frozenset) else (path, type(original), loaded)
    return None if type(loaded) is type(original) else (path, type(original), loaded)
