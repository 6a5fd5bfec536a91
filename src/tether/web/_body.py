"""The JSON body of the API's write routes (docs/web.md, "JSON API"): read, and checked
against the keys the route takes before anything is done with it.

A key the route does not take is refused, never ignored: a misspelt ``"notes"`` or a
``"approved": false`` sent to ``/approve`` would otherwise resume the run with an answer
nobody meant to give.

Nor is a body that could be read two ways: a key given twice in one object (Python's parser
would keep the last one), or text that is not UTF-8 without a byte order mark (RFC 8259 §8.1;
Python's parser would silently read UTF-16 or UTF-32).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.requests import Request

from ..serde import parse_json_text
from ._http import capped_body
from ._service import ActionError

__all__ = ["ANSWER", "CANCEL", "DELETE", "BodyShape", "read_body"]

#: ``text``: a string or null; ``id``: a non-empty string or null; ``flag``: true or false
#: (the key may be left out); ``any``: any JSON value.
Kind = Literal["text", "id", "flag", "any"]

_SPELLED = {"text": "str?", "id": "str?", "flag": "bool?", "any": "any?"}
_EXPECTED = {
    "text": "a string or null",
    "id": "a non-empty string or null",
    "flag": "true or false",
}


@dataclass(frozen=True, slots=True)
class BodyShape:
    """The keys one route's body may hold.

    Attributes:
        fields: each key and the kind of value it takes (:data:`Kind`).
        hint: said after an unknown key is named.
    """

    fields: Mapping[str, Kind]
    hint: str = ""

    def describe(self) -> str:
        """The shape as the docs write it: ``{"note": str?, "data": any?}``."""
        return "{" + ", ".join(f'"{k}": {_SPELLED[v]}' for k, v in self.fields.items()) + "}"

    def problem(self, body: Any) -> str | None:
        """What is wrong with ``body`` (parsed JSON), or ``None`` when this route takes it."""
        if not isinstance(body, dict):
            return f"the body must be a JSON object, not {_json_kind(body)}"
        unknown = [k for k in body if k not in self.fields]
        if unknown:
            named = ", ".join(repr(k) + self._close_to(k) for k in unknown)
            plural = "s" if len(unknown) > 1 else ""
            hint = f"; {self.hint}" if self.hint else ""
            return f"unknown key{plural} {named} in the body{hint}"
        for key, kind in self.fields.items():
            if key in body and not _is(kind, body[key]):
                return f"{key!r} must be {_EXPECTED[kind]}, not {_json_kind(body[key])}"
        return None

    def _close_to(self, key: str) -> str:
        close = difflib.get_close_matches(key, list(self.fields), n=1)
        return f" (did you mean {close[0]!r}?)" if close else ""


ANSWER = BodyShape(
    {"checkpoint_id": "id", "note": "text", "data": "any"},
    hint="approve or reject by the address (/api/runs/{id}/approve or /reject), not a key",
)
CANCEL = BodyShape({"reason": "text", "by": "text"})
DELETE = BodyShape({"confirm": "flag"})


async def read_body(request: Request, shape: BodyShape) -> dict[str, Any]:
    """The request's JSON object body (``{}`` when empty), once ``shape`` takes it.

    Only ``application/json``: a cross-site form can post urlencoded bodies but never JSON
    without a CORS preflight, which this server does not answer; that closes CSRF under
    ``--no-auth``.

    Raises:
        ActionError: 415 not sent as JSON; 413 the body is too large; 400 it is not UTF-8
            without a byte order mark (the message names the BOM or the UTF-16/UTF-32 found,
            or the first byte that is not UTF-8), not JSON, holds a key twice in one object
            (named, with where) or a string that is no text (a lone surrogate escape), is
            not an object, or holds a key ``shape`` does not take or a value of the wrong
            type (the message names the key and the shape).
    """
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ActionError(415, "send the body as application/json")
    body = _parse(await capped_body(request) or b"{}")
    problem = shape.problem(body)
    if problem is not None or not isinstance(body, dict):
        raise ActionError(400, f"{problem}; the body is {shape.describe()}; nothing was changed")
    return body


#: What a body starts with when it is not UTF-8 without a BOM, as RFC 8259 §8.1 asks; the
#: 4-byte BOMs come before the 2-byte ones they begin with.
_BOMS = (
    (b"\xef\xbb\xbf", "a UTF-8 byte order mark"),
    (b"\xff\xfe\x00\x00", "UTF-32 LE (with a byte order mark)"),
    (b"\x00\x00\xfe\xff", "UTF-32 BE (with a byte order mark)"),
    (b"\xff\xfe", "UTF-16 LE (with a byte order mark)"),
    (b"\xfe\xff", "UTF-16 BE (with a byte order mark)"),
)


class _Duplicated:
    """Stands in for an object that gave ``key`` twice, so the walk can say where it was."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


def _parse(raw: bytes) -> Any:
    """``raw`` as JSON, read only one way: UTF-8 without a BOM, each key once per object.

    Raises:
        ActionError: 400 saying what was wrong and that nothing was changed.
    """
    found = _not_utf8(raw)
    if found is not None:
        raise ActionError(
            400,
            "the body must be UTF-8 JSON without a byte order mark (RFC 8259 §8.1); found "
            f"{found}; nothing was changed",
        )
    try:
        text = raw.decode("utf-8")  # strict: json.loads would let encoded surrogates through
    except UnicodeDecodeError as exc:
        raise ActionError(
            400,
            f"the body is not UTF-8 text (byte 0x{raw[exc.start]:02x} at position "
            f"{exc.start}); nothing was changed",
        ) from None
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
        body = parse_json_text(text, object_pairs_hook=once)
    except json.JSONDecodeError as exc:
        raise ActionError(
            400, f"the body is not valid JSON: {exc.msg}; nothing was changed"
        ) from None
    if duplicated or "\\u" in text:  # only then can the walk find something
        _refuse_ambiguous(body)
    return body


def _not_utf8(raw: bytes) -> str | None:
    """The BOM or the UTF-16/UTF-32 ``raw`` starts with (told by its NULs, as
    :func:`json.detect_encoding` tells them), or ``None``."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            return name
    if len(raw) >= 4:  # JSON text starts with an ASCII character, so its NULs say which
        if not raw[0]:
            return "UTF-16 BE" if raw[1] else "UTF-32 BE"
        if not raw[1]:
            return "UTF-16 LE" if raw[2] or raw[3] else "UTF-32 LE"
    elif len(raw) >= 2:
        if not raw[0]:
            return "UTF-16 BE"
        if not raw[1]:
            return "UTF-16 LE"
    return None


def _refuse_ambiguous(body: Any) -> None:
    """Refuse an object that gave a key twice (the outermost, the first in document order),
    or a string holding a lone surrogate (``"\\ud800"``: JSON syntax, but no text, so no store
    takes it).

    Raises:
        ActionError: 400 naming the key and where it is; nothing was changed.
    """
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        where = f" in {path}" if path else ""
        if isinstance(value, _Duplicated):
            raise ActionError(
                400,
                f"the body has the key {value.key!r} twice{where}; JSON keeps only one of "
                "them, so send each key once; nothing was changed",
            )
        if isinstance(value, str) and not _is_text(value):
            raise ActionError(
                400,
                "the body has a lone surrogate escape (\\ud800 to \\udfff, not a character) "
                f"in {path or 'its string'}; send text only; nothing was changed",
            )
        if isinstance(value, dict):
            for key in value:
                if not _is_text(key):
                    raise ActionError(
                        400,
                        "the body has a lone surrogate escape (\\ud800 to \\udfff, not a "
                        f"character) in a key{where}; send text only; nothing was changed",
                    )
            stack.extend((_step(path, k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(value))))


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


def _is(kind: Kind, value: Any) -> bool:
    if kind == "text":
        return value is None or isinstance(value, str)
    if kind == "id":
        return value is None or (isinstance(value, str) and value != "")
    if kind == "flag":
        return isinstance(value, bool)
    return True


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
