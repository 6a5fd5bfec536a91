"""Anthropic Messages adapter, on the official ``anthropic`` SDK.

Install with ``pip install 'tether[anthropic]'``. The SDK is imported when an
:class:`AnthropicMessages` is built, not when this module (or ``tether``) is imported.

The Messages API is stricter than Chat Completions about history shape, and this module is where
a tether history is made to fit it:

- system messages go to the top-level ``system`` parameter (joined by blank lines, in order);
- roles alternate ``user`` / ``assistant``: consecutive messages of one role are merged;
- an assistant turn's tool calls are ``tool_use`` blocks, and *all* their results travel in the
  single ``user`` message that follows, as ``tool_result`` blocks placed before any text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from tether.errors import ConfigurationError
from tether.llm.base import ProviderError, _ClientPerLoop
from tether.llm.messages import INVALID_JSON_KEY, LLMResponse, Message, ToolCall, ToolSpec, Usage

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message as AnthropicMessage

PROVIDER = "anthropic"

# Messages API stop reasons in the neutral vocabulary of tether.llm.messages.FinishReason.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}


def _import_sdk() -> Any:
    try:
        import anthropic
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "tether.llm.anthropic needs the anthropic SDK: pip install 'tether[anthropic]'"
        ) from exc
    return anthropic


class AnthropicMessages:
    """A Claude model served through the Anthropic Messages API.

    The adapter holds configuration only; it is never written to a checkpoint, and neither its
    ``repr`` nor anything it returns contains the API key.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-5"``.
        client: a ready ``anthropic.AsyncAnthropic`` to use as is; then ``api_key``,
            ``base_url``, ``timeout_seconds`` and ``max_retries`` are ignored.
        api_key: the key; defaults to the ``ANTHROPIC_API_KEY`` environment variable.
        base_url: the API root *without* ``/v1``, e.g. ``"http://localhost:8080"``; defaults to
            the SDK's (``ANTHROPIC_BASE_URL`` or api.anthropic.com).
        max_tokens: output token limit per call (the API requires one).
        temperature: sampling temperature; the server's default when ``None``.
        timeout_seconds: per-request timeout, in seconds.
        max_retries: how many times the SDK retries connection errors, 408, 409, 429 and 5xx
            (with backoff) before the adapter raises :class:`ProviderError`.

    Raises:
        ConfigurationError: no API key was given and the SDK finds no credentials in the
            environment, or the SDK refused the client configuration.
        ImportError: the ``anthropic`` package is not installed.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 1024,
        temperature: float | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        sdk = _import_sdk()
        self.model = model
        self.base_url = base_url
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        if client is not None:
            given = client
            self._clients = _ClientPerLoop(lambda: given, first=given)
            return
        secret = SecretStr(api_key) if api_key is not None else None

        def build() -> anthropic.AsyncAnthropic:
            client: anthropic.AsyncAnthropic = sdk.AsyncAnthropic(
                api_key=secret.get_secret_value() if secret is not None else None,
                base_url=base_url,
                timeout=timeout_seconds,
                max_retries=max_retries,
            )
            return client

        try:
            first = build()
        except (sdk.AnthropicError, ValueError) as exc:
            raise ConfigurationError(
                f"AnthropicMessages({model!r}) cannot build its client: pass api_key= or set "
                f"ANTHROPIC_API_KEY ({exc})"
            ) from exc
        # The SDK resolves credentials (key, token, profile) when the client is built, but only
        # complains when a request is sent, with a bare TypeError; fail here instead.
        if not any(getattr(first, attr, None) for attr in ("api_key", "auth_token", "credentials")):
            raise ConfigurationError(
                f"AnthropicMessages({model!r}) has no credentials: pass api_key= or set "
                "ANTHROPIC_API_KEY"
            )
        self._clients = _ClientPerLoop(build, first=first)

    def __repr__(self) -> str:
        return f"AnthropicMessages(model={self.model!r}, base_url={self.base_url!r})"

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> LLMResponse:
        """Send one Messages request and map the answer back.

        Args:
            messages: the history, oldest first (see the module docstring for how it is
                reshaped).
            tools: tools the model may call; sent as ``{"name", "description",
                "input_schema"}``.

        Returns:
            The concatenated text blocks, the ``tool_use`` blocks as tool calls, usage (input
            counts include cache reads and writes) and the mapped stop reason.

        Raises:
            ProviderError: HTTP error (``status_code`` set), timeout or connection failure after
                the SDK's retries.
        """
        import anthropic

        request = self.build_request(messages, tools)
        client = self._clients.get()
        try:
            reply: AnthropicMessage = await client.messages.create(**request)
        except anthropic.APIStatusError as exc:
            raise ProviderError(
                f"Anthropic message for model {self.model!r} failed with HTTP "
                f"{exc.status_code}: {exc.message}",
                provider=PROVIDER,
                status_code=exc.status_code,
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ProviderError(
                f"Anthropic message for model {self.model!r} timed out",
                provider=PROVIDER,
            ) from exc
        except anthropic.AnthropicError as exc:
            raise ProviderError(
                f"Anthropic message for model {self.model!r} failed: {exc}",
                provider=PROVIDER,
            ) from exc
        return _parse_message(reply)

    def build_request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """Return the keyword arguments of ``messages.create`` for this call.

        Shape: ``{"model", "max_tokens", "messages": [...], "system"?: str, "tools"?: [...],
        "extra_body"?: {"temperature": float}}``; JSON-able, and free of credentials.
        """
        system, converted = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": converted,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        if self.temperature is not None:
            # Recent SDKs dropped the typed ``temperature`` argument; the API still reads it.
            request["extra_body"] = {"temperature": self.temperature}
        return request

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built for the running event loop."""
        await self._clients.aclose()

    async def __aenter__(self) -> AnthropicMessages:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def to_anthropic_messages(
    messages: Sequence[Message],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Translate a tether history to a Messages API ``system`` and ``messages``.

    Returns:
        ``(system, messages)``: the system messages joined by blank lines (``None`` if there
        are none), and alternating ``{"role": "user" | "assistant", "content": [block, ...]}``
        entries. Tool results of one assistant turn end up in one user message, ahead of any
        user text that follows them. Empty text is dropped (the API rejects empty text blocks).
    """
    system_parts: list[str] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system_parts.append(message.content)
            continue
        role, blocks = _to_blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for entry in out:
        if entry["role"] == "user":
            # The API wants a turn's tool_result blocks first in the user message.
            entry["content"].sort(key=lambda block: block["type"] != "tool_result")
    return ("\n\n".join(system_parts) or None), out


def _to_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    text = message.content if message.content and message.content.strip() else None
    if message.role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if message.content:
            result["content"] = message.content
        return "user", [result]
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"type": "text", "text": text})
    if message.role == "assistant":
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
            for call in message.tool_calls
        )
        return "assistant", blocks
    return "user", blocks


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Translate tool specs to Messages API ``tools`` entries (``input_schema``)."""
    return [
        {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
        for spec in tools
    ]


def _parse_message(reply: AnthropicMessage) -> LLMResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in reply.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            arguments = block.input
            if not isinstance(arguments, dict):
                arguments = {INVALID_JSON_KEY: json.dumps(arguments)}
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
    usage = reply.usage
    input_tokens = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    reason = reply.stop_reason
    return LLMResponse(
        text="".join(texts) if texts else None,
        tool_calls=calls,
        usage=Usage(input_tokens=input_tokens, output_tokens=usage.output_tokens),
        finish_reason=_FINISH_REASONS.get(reason, reason) if reason is not None else None,
    )
