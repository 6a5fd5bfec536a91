"""How pydantic-ai values are stored in a run's rows and come back.

- Model responses and message histories go through pydantic-ai's own
  ``ModelMessagesTypeAdapter``, the documented way to store messages.
- Tool results, outputs and run arguments go through :mod:`tether.serde`, so a pydantic model,
  dataclass or ``ToolReturn`` comes back as the same type. A value serde has no encoding for is
  stored as the JSON pydantic would send the model, and comes back as that JSON: the model sees
  the same tool result either way.
- A tool call's outcome that is not a value (a retry, a failure, a deferral) is stored as data
  and raised again on replay, so pydantic-ai counts retries as it did the first time.
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    UserContent,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from ... import serde
from ...errors import CorruptRecordError, SerializationError

ToolOutcome = dict[str, Any]
"""A stored tool-call outcome: ``{"kind": "return" | "skip", "value": <value>}``,
``{"kind": "retry" | "failed", "message": str}`` or ``{"kind": "deferred", "approval": bool,
"question": bool, "metadata": <value>}``."""

CONTROL_FLOW = (ToolRetryError, ToolFailedError, CallDeferred, ApprovalRequired, SkipToolExecution)
"""What a tool call may raise that is an outcome to keep, not a failure of the step."""


def dump_messages(messages: list[ModelMessage]) -> list[Any]:
    """A message history as JSON."""
    return list(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def load_messages(data: Any) -> list[ModelMessage]:
    """A message history stored by :func:`dump_messages`.

    Raises:
        CorruptRecordError: ``data`` is not a stored history.
    """
    try:
        return list(ModelMessagesTypeAdapter.validate_python(data))
    except ValueError as exc:
        raise CorruptRecordError(
            f"a stored pydantic-ai message history does not load: {exc}"
        ) from None


def dump_response(response: ModelResponse) -> Any:
    """A model response as JSON."""
    return dump_messages([response])[0]


def load_response(data: Any) -> ModelResponse:
    """A model response stored by :func:`dump_response`.

    Raises:
        CorruptRecordError: ``data`` is not a stored model response.
    """
    (message,) = load_messages([data])
    if not isinstance(message, ModelResponse):
        raise CorruptRecordError(f"a stored model response is a {type(message).__name__}")
    return message


def dump_prompt(prompt: str | list[UserContent]) -> Any:
    """A user prompt (text or multimodal content) as JSON."""
    request = ModelRequest(parts=[UserPromptPart(content=prompt)])
    return dump_messages([request])[0]["parts"][0]["content"]


def load_prompt(data: Any) -> str | list[UserContent]:
    """A user prompt stored by :func:`dump_prompt`."""
    if isinstance(data, str):
        return data
    (request,) = load_messages(
        [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": data}]}]
    )
    assert isinstance(request, ModelRequest)
    part = request.parts[0]
    assert isinstance(part, UserPromptPart)
    content = part.content
    return content if isinstance(content, str) else list(content)


def dump_value(value: Any, what: str) -> Any:
    """A Python value as stored JSON: ``{"serde": ...}`` when :mod:`tether.serde` encodes it
    (the type comes back), else ``{"json": ...}``, what pydantic would send the model.

    Raises:
        SerializationError: neither can encode it (``what`` names it).
    """
    try:
        return {"serde": serde.to_jsonable(value, what)}
    except SerializationError:
        pass
    try:
        return {"json": to_jsonable_python(value)}
    except Exception as exc:
        raise SerializationError(
            f"{what} cannot be stored as JSON: {exc}", path=what, type_name=type(value).__name__
        ) from None


def load_value(stored: Any) -> Any:
    """The value :func:`dump_value` stored.

    Raises:
        CorruptRecordError: ``stored`` is not such a value.
    """
    if isinstance(stored, dict) and len(stored) == 1:
        if "serde" in stored:
            return serde.from_jsonable(stored["serde"])
        if "json" in stored:
            return stored["json"]
    raise CorruptRecordError(f"a stored value has an unknown shape: {stored!r:.200}")


def outcome_of_value(value: Any, tool_name: str) -> ToolOutcome:
    """The outcome of a tool call that returned ``value``."""
    return {"kind": "return", "value": dump_value(value, f"the result of tool {tool_name!r}")}


def outcome_of_signal(exc: BaseException, tool_name: str) -> ToolOutcome:
    """The outcome of a tool call that raised one of :data:`CONTROL_FLOW`."""
    if isinstance(exc, ToolRetryError):
        content = exc.tool_retry.content
        return {"kind": "retry", "message": content if isinstance(content, str) else str(exc)}
    if isinstance(exc, ToolFailedError):
        return {"kind": "failed", "message": str(exc)}
    if isinstance(exc, SkipToolExecution):
        return {
            "kind": "skip",
            "value": dump_value(exc.result, f"the result of tool {tool_name!r}"),
        }
    assert isinstance(exc, CallDeferred | ApprovalRequired)
    return {
        "kind": "deferred",
        "approval": isinstance(exc, ApprovalRequired),
        "question": getattr(exc, "kind", "external") == "question",
        "metadata": dump_value(exc.metadata, f"the deferral metadata of tool {tool_name!r}"),
    }


def replay_outcome(outcome: ToolOutcome) -> Any:
    """Return a stored tool result, or raise the stored retry, failure or deferral.

    A retry or a failure is raised as the exception the tool raised (``ModelRetry``,
    ``ToolFailed``), so pydantic-ai counts it against the tool's retries as it did live.

    Raises:
        CorruptRecordError: ``outcome`` is not a stored outcome.
    """
    kind = outcome.get("kind")
    if kind == "return":
        return load_value(outcome["value"])
    if kind == "retry":
        raise ModelRetry(str(outcome["message"]))
    if kind == "failed":
        raise ToolFailed(str(outcome["message"]))
    if kind == "skip":
        raise SkipToolExecution(load_value(outcome["value"]))
    if kind == "deferred":
        _raise_deferral(outcome)
    raise CorruptRecordError(f"a stored tool outcome has an unknown kind: {kind!r}")


def _raise_deferral(outcome: ToolOutcome) -> NoReturn:
    metadata = load_value(outcome["metadata"])
    if outcome.get("approval"):
        raise ApprovalRequired(metadata)
    if outcome.get("question"):
        raise CallDeferred(metadata, kind="question")
    raise CallDeferred(metadata)
