"""OpenAI Chat Completions adapter, on the official ``openai`` SDK.

Install with ``pip install 'tether[openai]'``. The SDK is imported when an :class:`OpenAIChat` is
built, not when this module (or ``tether``) is imported.

``base_url`` points the adapter at any OpenAI-compatible server (vLLM, Ollama, LiteLLM, Azure
gateways, a local test stub).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from tether.errors import ConfigurationError
from tether.llm.base import ProviderError, _ClientPerLoop
from tether.llm.messages import (
    INVALID_JSON_KEY,
    LLMResponse,
    Message,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion

PROVIDER = "openai"

# Chat Completions finish reasons in the neutral vocabulary of tether.llm.messages.FinishReason.
_FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def _import_sdk() -> Any:
    try:
        import openai
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "tether.llm.openai needs the openai SDK: pip install 'tether[openai]'"
        ) from exc
    return openai


class OpenAIChat:
    """A chat model served through the OpenAI Chat Completions API.

    The adapter holds configuration only; it is never written to a checkpoint, and neither its
    ``repr`` nor anything it returns contains the API key.

    Args:
        model: the model name, e.g. ``"gpt-4o-mini"``.
        client: a ready ``openai.AsyncOpenAI`` to use as is; then ``api_key``, ``base_url``,
            ``timeout_seconds`` and ``max_retries`` are ignored.
        api_key: the key; defaults to the ``OPENAI_API_KEY`` environment variable.
        base_url: the API root including ``/v1``, e.g. ``"http://localhost:8000/v1"``; defaults
            to the SDK's (``OPENAI_BASE_URL`` or api.openai.com).
        temperature: sampling temperature; the server's default when ``None``.
        max_tokens: output token limit, sent as ``max_tokens`` (the field every
            OpenAI-compatible server understands); the server's default when ``None``.
        timeout_seconds: per-request timeout, in seconds.
        max_retries: how many times the SDK retries connection errors, 408, 409, 429 and 5xx
            (with backoff) before the adapter raises :class:`ProviderError`.

    Raises:
        ConfigurationError: no API key was given and none is set in the environment.
        ImportError: the ``openai`` package is not installed.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        sdk = _import_sdk()
        self.model = model
        self.base_url = base_url
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        if client is not None:
            given = client
            self._clients = _ClientPerLoop(lambda: given, first=given)
            return
        secret = SecretStr(api_key) if api_key is not None else None

        def build() -> openai.AsyncOpenAI:
            client: openai.AsyncOpenAI = sdk.AsyncOpenAI(
                api_key=secret.get_secret_value() if secret is not None else None,
                base_url=base_url,
                timeout=timeout_seconds,
                max_retries=max_retries,
            )
            return client

        try:
            first = build()
        except sdk.OpenAIError as exc:
            raise ConfigurationError(
                f"OpenAIChat({model!r}) cannot build its client: pass api_key= or set "
                f"OPENAI_API_KEY ({exc})"
            ) from exc
        self._clients = _ClientPerLoop(build, first=first)

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> LLMResponse:
        """Send one Chat Completions request and map the first choice back.

        Args:
            messages: the history, oldest first.
            tools: tools the model may call; sent as ``{"type": "function", ...}`` entries.

        Returns:
            The choice's text and tool calls (arguments decoded from JSON; text that is not a
            JSON object is kept as ``{INVALID_JSON_KEY: raw}``), token usage and finish reason.

        Raises:
            ProviderError: HTTP error (``status_code`` set), timeout or connection failure after
                the SDK's retries, or a response without choices.
        """
        import openai

        request = self.build_request(messages, tools)
        client = self._clients.get()
        try:
            completion: ChatCompletion = await client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise ProviderError(
                f"OpenAI chat completion for model {self.model!r} failed with HTTP "
                f"{exc.status_code}: {exc.message}",
                provider=PROVIDER,
                status_code=exc.status_code,
            ) from exc
        except openai.APITimeoutError as exc:
            raise ProviderError(
                f"OpenAI chat completion for model {self.model!r} timed out",
                provider=PROVIDER,
            ) from exc
        except openai.OpenAIError as exc:
            raise ProviderError(
                f"OpenAI chat completion for model {self.model!r} failed: {exc}",
                provider=PROVIDER,
            ) from exc
        return _parse_completion(completion, self.model)

    def build_request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """Return the keyword arguments of ``chat.completions.create`` for this call.

        Shape: ``{"model", "messages": [...], "tools"?: [...], "temperature"?,
        "max_tokens"?}``; JSON-able, and free of credentials.
        """
        request: dict[str, Any] = {"model": self.model, "messages": to_openai_messages(messages)}
        if tools:
            request["tools"] = to_openai_tools(tools)
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_tokens is not None:
            request["max_tokens"] = self.max_tokens
        return request

    async def aclose(self) -> None:
        """Close the HTTP client this adapter built for the running event loop."""
        await self._clients.aclose()

    async def __aenter__(self) -> OpenAIChat:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Translate a tether history to Chat Completions ``messages``.

    Assistant tool calls become ``{"id", "type": "function", "function": {"name",
    "arguments": <JSON string>}}``; tool results become ``{"role": "tool", "tool_call_id",
    "content"}``. Arguments kept as ``{INVALID_JSON_KEY: raw}`` are sent back as the raw text the
    model produced.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id,
                    "content": message.content or "",
                }
            )
            continue
        entry: dict[str, Any] = {"role": message.role}
        if message.role == "assistant" and message.tool_calls:
            entry["content"] = message.content or None
            entry["tool_calls"] = [_encode_tool_call(call) for call in message.tool_calls]
        else:
            entry["content"] = message.content or ""
        if message.name is not None:
            entry["name"] = message.name
        out.append(entry)
    return out


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Translate tool specs to Chat Completions ``tools`` entries of type ``"function"``."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in tools
    ]


def _encode_tool_call(call: ToolCall) -> dict[str, Any]:
    if set(call.arguments) == {INVALID_JSON_KEY}:
        arguments = str(call.arguments[INVALID_JSON_KEY])
    else:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def decode_arguments(raw: str | None) -> dict[str, Any]:
    """Decode a tool call's JSON ``arguments`` string.

    Returns:
        The decoded object; ``{}`` for an empty string; ``{INVALID_JSON_KEY: raw}`` when the text
        does not parse or is not a JSON object.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError:
        return {INVALID_JSON_KEY: raw}
    if not isinstance(decoded, dict):
        return {INVALID_JSON_KEY: raw}
    return decoded


def _parse_completion(completion: ChatCompletion, model: str) -> LLMResponse:
    if not completion.choices:
        raise ProviderError(
            f"OpenAI chat completion for model {model!r} returned no choices",
            provider=PROVIDER,
        )
    choice = completion.choices[0]
    message = choice.message
    calls: list[ToolCall] = []
    for raw_call in message.tool_calls or []:
        function = getattr(raw_call, "function", None)
        if function is None:
            raise ProviderError(
                f"OpenAI returned a tool call of unsupported type {raw_call.type!r}",
                provider=PROVIDER,
            )
        calls.append(
            ToolCall(
                id=raw_call.id, name=function.name, arguments=decode_arguments(function.arguments)
            )
        )
    usage = Usage()
    if completion.usage is not None:
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
        )
    text = message.content if message.content is not None else message.refusal
    reason = choice.finish_reason
    return LLMResponse(
        text=text,
        tool_calls=calls,
        usage=usage,
        finish_reason=_FINISH_REASONS.get(reason, reason) if reason is not None else None,
    )
