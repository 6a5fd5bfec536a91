"""The provider-neutral conversation model.

An agent's history is a list of :class:`Message`; a model's answer is an :class:`LLMResponse`.
Adapters in :mod:`tether.llm.openai` and :mod:`tether.llm.anthropic` translate both ways, so the
engine and the checkpoints never see a provider's wire format.

Everything here is plain data. ``to_dict`` gives a small JSON-able dict (``None`` fields and
empty lists are left out, because an agent's history is written to a checkpoint at every turn);
``from_dict`` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

Role = Literal["system", "user", "assistant", "tool"]
"""Who wrote a message: the operator, the user, the model, or a tool's result."""

ROLES: frozenset[str] = frozenset(get_args(Role))

INVALID_JSON_KEY = "__invalid_json__"
"""Key under which an adapter keeps tool-call arguments that were not a JSON object.

A model sometimes emits arguments that do not parse. Rather than fail the turn, adapters store
``{INVALID_JSON_KEY: raw_text}`` so that the tool layer can answer the call with an error the
model can read and correct.
"""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation requested by the model.

    Attributes:
        id: the provider's call id; the matching tool result must carry it back.
        name: the tool's name as given in its :class:`ToolSpec`.
        arguments: the decoded JSON arguments; ``{INVALID_JSON_KEY: raw}`` when the model sent
            text that is not a JSON object.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"id": str, "name": str, "arguments": dict}``."""
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        """Build a call from :meth:`to_dict` output.

        Raises:
            ValueError: ``id`` or ``name`` is missing, or ``arguments`` is not a dict.
        """
        call_id, name = data.get("id"), data.get("name")
        arguments = data.get("arguments", {})
        if not isinstance(call_id, str) or not isinstance(name, str):
            raise ValueError(f"a tool call needs string 'id' and 'name', got {dict(data)!r}")
        if not isinstance(arguments, dict):
            raise ValueError(f"tool call {call_id!r}: 'arguments' must be a dict")
        return cls(id=call_id, name=name, arguments=arguments)


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of a conversation.

    Attributes:
        role: ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"``.
        content: the text; ``None`` for an assistant turn that only calls tools.
        tool_calls: calls requested by an assistant turn (empty for other roles).
        tool_call_id: for a ``"tool"`` message, the id of the call it answers.
        name: for a ``"tool"`` message, the tool's name; for others an optional author name.

    Raises:
        ValueError: on construction, if the role is unknown, a tool message has no
            ``tool_call_id``, or a non-assistant message carries tool calls.
    """

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"unknown message role {self.role!r}; expected one of {sorted(ROLES)}")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message must carry the tool_call_id it answers")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role!r}")

    @classmethod
    def system(cls, content: str) -> Message:
        """Return a system (operator instructions) message."""
        return cls(role="system", content=content)

    @classmethod
    def user(cls, content: str, *, name: str | None = None) -> Message:
        """Return a user message."""
        return cls(role="user", content=content, name=name)

    @classmethod
    def assistant(
        cls, content: str | None = None, tool_calls: list[ToolCall] | None = None
    ) -> Message:
        """Return an assistant message with optional text and tool calls."""
        return cls(role="assistant", content=content, tool_calls=list(tool_calls or []))

    @classmethod
    def tool_result(cls, tool_call_id: str, content: str, *, name: str | None = None) -> Message:
        """Return the answer to one tool call.

        Args:
            tool_call_id: the :attr:`ToolCall.id` being answered.
            content: the result as text (the tool layer serialises structured results).
            name: the tool's name; kept for readability of stored histories.
        """
        return cls(role="tool", content=content, tool_call_id=tool_call_id, name=name)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict, leaving out ``None`` fields and empty ``tool_calls``.

        Shape: ``{"role": str, "content"?: str, "tool_calls"?: [ToolCall.to_dict()],
        "tool_call_id"?: str, "name"?: str}``. An empty string ``content`` is kept: it differs
        from "no content" for a tool result.
        """
        out: dict[str, Any] = {"role": self.role}
        if self.content is not None:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        """Build a message from :meth:`to_dict` output.

        Raises:
            ValueError: the dict is not a valid message (unknown role, bad field types, a tool
                message without ``tool_call_id``).
        """
        role = data.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise ValueError(f"unknown message role {role!r}; expected one of {sorted(ROLES)}")
        content = data.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"message content must be a string or None, got {type(content)}")
        raw_calls = data.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ValueError("message 'tool_calls' must be a list")
        return cls(
            role=cast(Role, role),
            content=content,
            tool_calls=[ToolCall.from_dict(call) for call in raw_calls],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one or more model calls; ``a + b`` sums them.

    Attributes:
        input_tokens: tokens the provider read (prompt, including cached prompt tokens).
        output_tokens: tokens the provider generated.
    """

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """Return ``{"input_tokens": int, "output_tokens": int}``."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        """Build usage from :meth:`to_dict` output; missing counts are 0."""
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
        )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about a tool.

    Attributes:
        name: the tool's name; providers accept ``[A-Za-z0-9_-]{1,64}``.
        description: what the tool does, for the model.
        parameters: a JSON schema of ``"type": "object"`` describing the arguments.
    """

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": str, "description": str, "parameters": dict}``."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


FinishReason = str
"""Why the model stopped, in a provider-neutral vocabulary.

Adapters map to ``"stop"`` (natural end or a stop sequence), ``"tool_calls"``, ``"length"``
(output token limit) and ``"content_filter"``; anything else is passed through as the provider
spelled it.
"""


@dataclass(frozen=True, slots=True)
class LLMResponse:
    """A model's answer to one call.

    Attributes:
        text: the answer's text, ``None`` when the model only called tools.
        tool_calls: tools the model asks to run, in the order it asked.
        usage: token counts of this call.
        finish_reason: why the model stopped (see :data:`FinishReason`), ``None`` if unknown.
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: FinishReason | None = None

    def to_message(self) -> Message:
        """Return the assistant message to append to the history."""
        return Message.assistant(self.text, list(self.tool_calls))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-able dict; ``tool_calls`` and ``None`` fields are left out if empty."""
        out: dict[str, Any] = {"usage": self.usage.to_dict()}
        if self.text is not None:
            out["text"] = self.text
        if self.tool_calls:
            out["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LLMResponse:
        """Build a response from :meth:`to_dict` output.

        Raises:
            ValueError: a field has the wrong type.
        """
        text = data.get("text")
        if text is not None and not isinstance(text, str):
            raise ValueError("response 'text' must be a string or None")
        return cls(
            text=text,
            tool_calls=[ToolCall.from_dict(call) for call in data.get("tool_calls") or []],
            usage=Usage.from_dict(data.get("usage") or {}),
            finish_reason=data.get("finish_reason"),
        )
