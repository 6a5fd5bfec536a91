"""What the journal stores of a model response and of a tool's output, and how each comes back
as the very type the OpenAI Agents SDK handed over (docs/design.md §7: JSON only, no pickle)."""

from __future__ import annotations

import functools
from typing import Any

from agents import ModelResponse
from pydantic import TypeAdapter

from ... import serde
from ...errors import CorruptRecordError, SerializationError

__all__ = ["dump_output", "dump_response", "load_output", "load_response"]


@functools.cache
def _responses() -> TypeAdapter[ModelResponse]:
    return TypeAdapter(ModelResponse)


def dump_response(response: ModelResponse) -> Any:
    """A model response as JSON. By alias and without unset fields, so the items it rebuilds
    are equal to the SDK's own, down to which fields were set (the SDK sends them back to the
    model with ``exclude_unset``)."""
    return _responses().dump_python(response, mode="json", by_alias=True, exclude_unset=True)


def load_response(data: Any, *, key: str) -> ModelResponse:
    """Rebuild a response stored by :func:`dump_response`.

    Raises:
        CorruptRecordError: the stored value is not a model response of this SDK version.
    """
    try:
        return _responses().validate_python(data)
    except ValueError as exc:
        raise CorruptRecordError(
            f"journal entry {key!r} does not hold a model response this openai-agents can read: "
            f"{exc}"
        ) from None


def dump_output(value: Any, *, tool: str) -> dict[str, Any]:
    """A tool's return value as a journal payload: ``{"v": <serde JSON>}``, typed values
    (pydantic models such as ``ToolOutputText``, dataclasses, enums) included; a value JSON
    cannot hold is kept as the text the SDK sends the model for it, ``{"text": str(value)}``."""
    try:
        return {"v": serde.to_jsonable(value, f"output of tool {tool!r}")}
    except SerializationError:
        return {"text": str(value)}


def load_output(payload: Any, *, key: str) -> Any:
    """The tool output a :func:`dump_output` payload stands for.

    Raises:
        CorruptRecordError: the payload is neither form.
    """
    if isinstance(payload, dict):
        if "v" in payload:
            return serde.from_jsonable(payload["v"])
        if isinstance(payload.get("text"), str):
            return payload["text"]
    raise CorruptRecordError(f"journal entry {key!r} holds no tool output: {payload!r}")
