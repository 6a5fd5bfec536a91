"""The JSON body of the API's write routes (docs/web.md, "JSON API"): read, and checked
against the keys the route takes before anything is done with it.

A key the route does not take is refused, never ignored: a misspelt ``"notes"`` or a
``"approved": false`` sent to ``/approve`` would otherwise resume the run with an answer
nobody meant to give.
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
        ActionError: 415 not sent as JSON; 413 the body is too large; 400 it is not JSON,
            not an object, holds a key ``shape`` does not take or a value of the wrong type
            (the message names the key and the shape).
    """
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ActionError(415, "send the body as application/json")
    try:
        body = parse_json_text(await capped_body(request) or b"{}")
    except json.JSONDecodeError as exc:
        raise ActionError(400, f"the body is not valid JSON: {exc.msg}") from None
    problem = shape.problem(body)
    if problem is not None or not isinstance(body, dict):
        raise ActionError(400, f"{problem}; the body is {shape.describe()}; nothing was changed")
    return body


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
