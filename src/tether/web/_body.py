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

from ..serde import AmbiguousJSONError, parse_json_text
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


def _parse(raw: bytes) -> Any:
    """``raw`` as JSON, read only one way: UTF-8 without a BOM, each key once per object, no
    lone surrogate (see :func:`tether.serde.parse_json_text`).

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
    try:
        return parse_json_text(text)
    except AmbiguousJSONError as exc:
        raise ActionError(400, f"in the body, {exc.msg}; nothing was changed") from None
    except json.JSONDecodeError as exc:
        raise ActionError(
            400, f"the body is not valid JSON: {exc.msg}; nothing was changed"
        ) from None


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
