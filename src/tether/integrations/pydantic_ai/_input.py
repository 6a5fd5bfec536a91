"""What a pydantic-ai run was started with, stored on its run row so that any process can run
the agent again from its start (a resume replays it, docs/pydantic_ai.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.usage import UsageLimits

from ... import serde
from ...errors import ConfigurationError, CorruptRecordError
from . import _codec


@dataclass(frozen=True, slots=True)
class RunInput:
    """The arguments of ``Agent.run`` a durable run keeps (all JSON-able once stored).

    ``deps``, toolsets and the event handler are not stored: they are code and connections,
    given again to each drive (``TetherAgent(deps_factory=...)``).
    """

    user_prompt: str | list[UserContent] | None = None
    message_history: list[ModelMessage] | None = None
    instructions: str | None = None
    model_settings: dict[str, Any] | None = None
    usage_limits: UsageLimits | None = None
    metadata: dict[str, Any] | None = None

    @classmethod
    def of(
        cls,
        user_prompt: str | Sequence[UserContent] | None,
        message_history: Sequence[ModelMessage] | None,
        instructions: str | None,
        model_settings: dict[str, Any] | None,
        usage_limits: UsageLimits | None,
        metadata: dict[str, Any] | None,
    ) -> RunInput:
        """Check a start's arguments.

        Raises:
            ConfigurationError: no prompt and no history, or an argument of the wrong type.
        """
        if user_prompt is not None and not isinstance(user_prompt, str | Sequence):
            raise ConfigurationError(
                f"user_prompt must be a str or a sequence of pydantic-ai user content, got "
                f"{type(user_prompt).__name__}"
            )
        if user_prompt is None and not message_history:
            raise ConfigurationError("a run needs a user_prompt or a message_history")
        if instructions is not None and not isinstance(instructions, str):
            raise ConfigurationError(
                "a durable run's instructions must be a str (functions belong on the Agent)"
            )
        prompt = user_prompt if isinstance(user_prompt, str | None) else list(user_prompt)
        return cls(
            prompt,
            None if message_history is None else list(message_history),
            instructions,
            None if model_settings is None else dict(model_settings),
            usage_limits,
            None if metadata is None else dict(metadata),
        )

    def to_json(self) -> dict[str, Any]:
        """The run row's ``input``.

        Raises:
            SerializationError: a model setting, limit or metadata value JSON cannot hold.
        """
        out: dict[str, Any] = {}
        if self.user_prompt is not None:
            out["user_prompt"] = _codec.dump_prompt(self.user_prompt)
        if self.message_history is not None:
            out["message_history"] = _codec.dump_messages(self.message_history)
        if self.instructions is not None:
            out["instructions"] = self.instructions
        for name in ("model_settings", "usage_limits", "metadata"):
            value = getattr(self, name)
            if value is not None:
                out[name] = serde.to_jsonable(value, name)
        return out

    @classmethod
    def from_json(cls, data: Any) -> RunInput:
        """The input :meth:`to_json` stored, or a bare prompt (``tether enqueue NAME '"..."'``).

        Raises:
            CorruptRecordError: ``data`` is neither.
        """
        if isinstance(data, str):
            return cls(user_prompt=data)
        if not isinstance(data, dict) or not ({"user_prompt", "message_history"} & data.keys()):
            raise CorruptRecordError(
                f"a pydantic-ai run's input must be a prompt or a stored input, got {data!r:.200}"
            )
        history = data.get("message_history")
        limits = serde.from_jsonable(data.get("usage_limits"))
        if limits is not None and not isinstance(limits, UsageLimits):
            raise CorruptRecordError(f"stored usage_limits are a {type(limits).__name__}")
        return cls(
            None if data.get("user_prompt") is None else _codec.load_prompt(data["user_prompt"]),
            None if history is None else _codec.load_messages(history),
            data.get("instructions"),
            serde.from_jsonable(data.get("model_settings")),
            limits,
            serde.from_jsonable(data.get("metadata")),
        )

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``Agent.run``."""
        kwargs: dict[str, Any] = {"user_prompt": self.user_prompt}
        for name in (
            "message_history",
            "instructions",
            "model_settings",
            "usage_limits",
            "metadata",
        ):
            value = getattr(self, name)
            if value is not None:
                kwargs[name] = value
        return kwargs
