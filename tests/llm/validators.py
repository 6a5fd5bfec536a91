"""Checks that a request body would be accepted by the real OpenAI / Anthropic APIs.

The rules are the providers' documented history rules that a durable agent can break when it
resumes mid-turn: every tool call answered exactly once, in order, right after the turn that made
it; nothing answered that was never asked; for Anthropic, strict user/assistant alternation and
all of a turn's ``tool_result`` blocks at the head of the next user message.

Both raise :class:`AssertionError` naming the offending message index, and work under ``-O``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _fail(message: str) -> NoReturn:
    raise AssertionError(message)


def assert_openai_request_valid(body: Mapping[str, Any]) -> None:
    """Assert ``body`` is a well-formed Chat Completions request.

    Raises:
        AssertionError: a tool call is unanswered, answered twice, answered out of order or not
            right after its assistant message; a tool message answers nothing; a role, id or
            field is malformed; a tool definition is malformed.
    """
    if not isinstance(body.get("model"), str) or not body["model"]:
        _fail("request has no model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        _fail("request has no messages")
    assert isinstance(messages, list)
    pending: list[str] = []
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role")
        if role not in OPENAI_ROLES:
            _fail(f"{where}: unknown role {role!r}")
        if pending and role != "tool":
            _fail(f"{where}: {role} message while tool calls {pending} are still unanswered")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not pending:
                _fail(f"{where}: tool message {call_id!r} answers no pending tool call")
            if call_id != pending[0]:
                _fail(f"{where}: tool message answers {call_id!r}, expected {pending[0]!r}")
            pending.pop(0)
            if not isinstance(message.get("content"), str | list):
                _fail(f"{where}: tool message content must be a string")
            continue
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls and not isinstance(message.get("content"), str | list):
                _fail(f"{where}: assistant message has neither content nor tool_calls")
            for call in calls:
                call_id = call.get("id")
                if not isinstance(call_id, str) or not call_id:
                    _fail(f"{where}: tool call without an id")
                if call_id in seen_ids:
                    _fail(f"{where}: tool call id {call_id!r} is used twice")
                seen_ids.add(call_id)
                function = call.get("function") or {}
                if call.get("type") != "function" or not isinstance(function.get("name"), str):
                    _fail(f"{where}: tool call {call_id!r} is not a named function call")
                if not isinstance(function.get("arguments"), str):
                    _fail(f"{where}: tool call {call_id!r} arguments must be a JSON string")
            pending = [call["id"] for call in calls]
            continue
        if not isinstance(message.get("content"), str | list):
            _fail(f"{where}: {role} message content must be a string or a list of parts")
    if pending:
        _fail(f"tool calls {pending} of the last assistant message are unanswered")
    for position, spec in enumerate(body.get("tools") or []):
        function = spec.get("function") or {}
        if spec.get("type") != "function" or not isinstance(function.get("name"), str):
            _fail(f"tools[{position}] is not a named function")
        parameters = function.get("parameters")
        if parameters is not None and parameters.get("type") != "object":
            _fail(f"tools[{position}] parameters must be an object schema")


def assert_anthropic_request_valid(body: Mapping[str, Any]) -> None:
    """Assert ``body`` is a well-formed Messages API request.

    Raises:
        AssertionError: roles do not alternate or the first message is not ``user``; a
            ``tool_use`` is not answered by the very next user message (exactly its ids, in
            order, before any other block); a ``tool_result`` answers nothing; a text block is
            empty; a field is malformed.
    """
    if not isinstance(body.get("model"), str) or not body["model"]:
        _fail("request has no model")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] <= 0:
        _fail("request needs a positive integer max_tokens")
    system = body.get("system")
    text_blocks = isinstance(system, list) and all(b.get("type") == "text" for b in system)
    if system is not None and not isinstance(system, str) and not text_blocks:
        _fail("system must be a string or a list of text blocks")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        _fail("request has no messages")
    assert isinstance(messages, list)
    if messages[0].get("role") != "user":
        _fail("messages[0] must be a user message")
    previous_role: str | None = None
    pending: list[str] = []
    seen_ids: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role")
        if role not in ("user", "assistant"):
            _fail(f"{where}: role must be user or assistant, got {role!r}")
        if role == previous_role:
            _fail(f"{where}: two {role} messages in a row (roles must alternate)")
        previous_role = role
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            _fail(f"{where}: content must be a non-empty string or list of blocks")
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if pending:
            if results != pending:
                _fail(f"{where}: expected tool_result blocks for {pending}, got {results}")
            if [b.get("type") for b in blocks[: len(pending)]] != ["tool_result"] * len(pending):
                _fail(f"{where}: tool_result blocks must come before any other block")
        elif results:
            _fail(f"{where}: tool_result for {results} answers no tool_use")
        pending = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                if not isinstance(block.get("text"), str) or not block["text"].strip():
                    _fail(f"{where}: text blocks must be non-empty")
            elif kind == "tool_use":
                call_id = block.get("id")
                if role != "assistant":
                    _fail(f"{where}: tool_use in a {role} message")
                if not isinstance(call_id, str) or not call_id or call_id in seen_ids:
                    _fail(f"{where}: tool_use id {call_id!r} is missing or used twice")
                if not isinstance(block.get("name"), str) or not isinstance(
                    block.get("input"), dict
                ):
                    _fail(f"{where}: tool_use {call_id!r} needs a name and an input object")
                seen_ids.add(call_id)
                pending.append(call_id)
            elif kind == "tool_result":
                if role != "user":
                    _fail(f"{where}: tool_result in an {role} message")
                result = block.get("content")
                if result is not None and not isinstance(result, str | list):
                    _fail(f"{where}: tool_result content must be a string or blocks")
            else:
                _fail(f"{where}: unexpected block type {kind!r}")
    if pending:
        _fail(f"tool_use blocks {pending} of the last assistant message are unanswered")
    for position, spec in enumerate(body.get("tools") or []):
        if not isinstance(spec.get("name"), str):
            _fail(f"tools[{position}] has no name")
        if (spec.get("input_schema") or {}).get("type") != "object":
            _fail(f"tools[{position}] input_schema must be an object schema")
