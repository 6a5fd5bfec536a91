"""JSON a person or a client typed (an answer's data, an API body), read one way: RFC 8259
only, no key twice in an object, no lone surrogate. Re-exported by :mod:`tether.serde`."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["AmbiguousJSONError", "parse_json_text"]


class AmbiguousJSONError(json.JSONDecodeError):
    """JSON syntax that does not read one way: an object giving a key twice (Python keeps the
    last, another parser the first) or a string holding a lone surrogate escape (``"\\ud800"``:
    no text, so no store takes it). ``msg`` names the key or string and where it is
    (``data[1].a``)."""


def parse_json_text(text: str | bytes) -> Any:
    """Parse JSON a person or a client typed (an answer's data, an API body): RFC 8259 only,
    read one way.

    Python's parser also takes ``NaN`` and ``Infinity``, and reads a number past the float
    range (``1e999``) as infinity, all of which :func:`dumps` refuses, and a deeply nested
    array exhausts its recursion; each is refused here as not JSON, as are bytes that are not
    text in the encoding :func:`json.loads` detects (UTF-8 unless a BOM or NULs say UTF-16 or
    UTF-32). A key given twice in one object, which Python's parser resolves silently to the
    last, and a lone surrogate (escaped, or in ``text`` itself) are refused as
    :class:`AmbiguousJSONError`.

    Raises:
        AmbiguousJSONError: a key twice in one object, or a lone surrogate; ``msg`` says which
            and where.
        json.JSONDecodeError: ``text`` is not JSON, holds ``NaN``/``Infinity`` or a number
            past the float range, nests deeper than can be parsed, or is bytes that do not
            decode; ``msg`` and ``pos`` say where.
    """
    doc = text.decode("utf-8", "replace") if isinstance(text, bytes) else text

    def refuse(name: str) -> Any:
        raise json.JSONDecodeError(f"{name} is not a JSON number", doc, max(doc.find(name), 0))

    def finite(number: str) -> float:
        value = float(number)
        if value - value != 0.0:  # 1e999 is JSON syntax, but a float reads it as infinity
            raise json.JSONDecodeError(
                f"{number} is too large for a number (past 1.8e308, it reads as infinity)",
                doc,
                max(doc.find(number), 0),
            )
        return value

    duplicated = False

    def once(pairs: list[tuple[str, Any]]) -> Any:
        nonlocal duplicated
        built = dict(pairs)
        if len(built) == len(pairs):
            return built
        duplicated = True
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                return _Duplicated(key)
            seen.add(key)
        raise AssertionError("unreachable: fewer keys than pairs means one came twice")

    try:
        value = json.loads(text, parse_constant=refuse, parse_float=finite, object_pairs_hook=once)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", doc, 0) from None
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start]
        raise json.JSONDecodeError(
            f"not {exc.encoding.upper()} text (byte 0x{byte:02x} at position {exc.start})",
            doc,
            exc.start,
        ) from None
    if duplicated or "\\u" in doc or not _is_text(doc):  # only then can the walk find one
        _refuse_ambiguous(value, doc)
    return value


class _Duplicated:
    """Stands in for an object that gave ``key`` twice, so the walk can say where it was."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def _refuse_ambiguous(value: Any, doc: str) -> None:
    """Raise :class:`AmbiguousJSONError` for the first (outermost, in document order) object
    that gave a key twice or string (or key) holding a lone surrogate in ``value``."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        where = f" in {path}" if path else ""
        if isinstance(item, _Duplicated):
            quoted = json.dumps(item.key, ensure_ascii=False)
            first = doc.find(quoted)
            raise AmbiguousJSONError(
                f"the key {item.key!r} appears twice{where}; JSON keeps only one of them, so "
                "send each key once",
                doc,
                max(doc.find(quoted, first + 1), 0),
            )
        if isinstance(item, str) and not _is_text(item):
            raise AmbiguousJSONError(
                "a lone surrogate escape (\\ud800 to \\udfff, not a character) is in "
                f"{path or 'the string'}; send text only",
                doc,
                0,
            )
        if isinstance(item, dict):
            for key in item:
                if not _is_text(key):
                    raise AmbiguousJSONError(
                        "a lone surrogate escape (\\ud800 to \\udfff, not a character) is in "
                        f"a key{where}; send text only",
                        doc,
                        0,
                    )
            stack.extend((_step(path, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(item))))


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _step(path: str, key: str) -> str:
    """``path`` one key further: ``data.amount``, ``data["a b"]``."""
    if key.isidentifier():
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
