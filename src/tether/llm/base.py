"""The model protocol every runner talks to, and the error adapters raise.

A runner needs one thing from a model: given the history and the tools, answer. Anything with an
``acomplete`` coroutine of the right shape is an :class:`LLM` — the SDK adapters
(:class:`tether.llm.openai.OpenAIChat`, :class:`tether.llm.anthropic.AnthropicMessages`) and the
deterministic doubles in :mod:`tether.testing` alike.

Model objects hold clients and credentials; they are configuration, never state, so they are
never written to a checkpoint.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar, runtime_checkable

from tether.errors import TetherError
from tether.llm.messages import LLMResponse, Message, ToolSpec

_RETRYABLE_STATUS = frozenset({408, 409, 429})


@runtime_checkable
class LLM(Protocol):
    """A chat model that can call tools."""

    async def acomplete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> LLMResponse:
        """Answer the conversation.

        Args:
            messages: the history, oldest first; system messages included.
            tools: the tools the model may call this turn (may be empty).

        Returns:
            The model's text and/or tool calls, with token usage.

        Raises:
            ProviderError: the provider could not be reached or refused the request.
        """
        ...


class ProviderError(TetherError):
    """A model provider failed to answer: HTTP error, timeout, connection or bad response.

    The SDK's own exception is kept as ``__cause__``. Messages never include credentials.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, or another adapter's name.
        status_code: the HTTP status the provider returned; ``None`` when no response arrived
            (connection error, timeout) or the response could not be used.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.provider = provider
        self.status_code = status_code

    @property
    def retryable(self) -> bool:
        """Whether trying again later may succeed.

        True for no response at all (connection error, timeout), 408, 409, 429 and 5xx; false
        for other 4xx, which will fail the same way again.
        """
        if self.status_code is None:
            return True
        return self.status_code in _RETRYABLE_STATUS or self.status_code >= 500


class _Closeable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closeable)


class _ClientPerLoop(Generic[C]):
    """Hands out one SDK client per running event loop.

    An SDK's async client pools connections bound to the loop that opened them; the sync verbs
    (``run`` beside ``arun``) run on one loop per thread, and an application may call ``arun``
    from loops of its own; reusing a client across loops fails with "Event loop is closed". A
    client supplied by the caller is used as given.
    """

    def __init__(self, factory: Callable[[], C], *, first: C | None = None) -> None:
        self._factory = factory
        self._unbound = first
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, C] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> C:
        """Return the client for the running loop, building it on first use."""
        loop = asyncio.get_running_loop()
        client = self._by_loop.get(loop)
        if client is None:
            client, self._unbound = (self._unbound or self._factory()), None
            self._by_loop[loop] = client
        return client

    async def aclose(self) -> None:
        """Close the running loop's client (clients of finished loops are dropped)."""
        loop = asyncio.get_running_loop()
        client = self._by_loop.pop(loop, None)
        if client is not None:
            await client.close()
