"""Models: the provider-neutral message model, the :class:`LLM` protocol and SDK adapters.

The adapters are optional integrations: ``OpenAIChat`` and ``AnthropicMessages`` are loaded on
first access (``from tether.llm import OpenAIChat``), and their SDK only when one is built, so
``import tether.llm`` imports neither ``openai`` nor ``anthropic``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tether.llm.base import LLM, ProviderError
from tether.llm.messages import (
    INVALID_JSON_KEY,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from tether.llm.anthropic import AnthropicMessages
    from tether.llm.openai import OpenAIChat

__all__ = [
    "INVALID_JSON_KEY",
    "LLM",
    "AnthropicMessages",
    "LLMResponse",
    "Message",
    "OpenAIChat",
    "ProviderError",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

_LAZY = {
    "OpenAIChat": "tether.llm.openai",
    "AnthropicMessages": "tether.llm.anthropic",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
