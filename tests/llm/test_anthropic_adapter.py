"""AnthropicMessages against the real anthropic SDK, talking HTTP to the loopback stub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.llm.stub_server import StubServer
from tests.llm.validators import assert_anthropic_request_valid
from tether.errors import ConfigurationError
from tether.llm import LLM, Message, ProviderError, ToolCall, ToolSpec, Usage
from tether.llm.anthropic import AnthropicMessages, to_anthropic_messages

API_KEY = "sk-ant-test-0123456789"

LOOKUP = ToolSpec(
    name="lookup_order",
    description="Find an order by id.",
    parameters={
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
)


def make_llm(stub: StubServer, **kwargs: Any) -> AnthropicMessages:
    options: dict[str, Any] = {"base_url": stub.url, "api_key": API_KEY, "max_retries": 0}
    options.update(kwargs)
    return AnthropicMessages("claude-test", **options)


async def test_text_answer_round_trips_with_system_prompt_lifted(stub: StubServer) -> None:
    stub.script([{"text": "Hi!", "usage": {"input_tokens": 20, "output_tokens": 2}}])
    async with make_llm(stub) as llm:
        response = await llm.acomplete(
            [Message.system("Be kind."), Message.system("Be brief."), Message.user("Hello")], []
        )

    assert response.text == "Hi!"
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=20, output_tokens=2)
    (body,) = stub.requests
    assert_anthropic_request_valid(body)
    assert body["system"] == "Be kind.\n\nBe brief."
    assert body["max_tokens"] == 1024
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]
    assert "tools" not in body
    headers = stub.log[0].headers
    # SDK versions differ in which header carries the key.
    assert API_KEY in (headers.get("x-api-key"), headers.get("authorization", "")[7:])


async def test_tool_use_blocks_become_tool_calls(stub: StubServer) -> None:
    stub.script(
        [
            {
                "text": "Let me look both up.",
                "tool_calls": [
                    {"id": "toolu_1", "name": "lookup_order", "arguments": {"order_id": "A-1"}},
                    {"id": "toolu_2", "name": "lookup_order", "arguments": {"order_id": "B-2"}},
                ],
            }
        ]
    )
    async with make_llm(stub) as llm:
        response = await llm.acomplete([Message.user("Where are A-1 and B-2?")], [LOOKUP])

    assert response.text == "Let me look both up."
    assert response.finish_reason == "tool_calls"
    assert response.tool_calls == [
        ToolCall(id="toolu_1", name="lookup_order", arguments={"order_id": "A-1"}),
        ToolCall(id="toolu_2", name="lookup_order", arguments={"order_id": "B-2"}),
    ]
    assert stub.requests[0]["tools"] == [
        {
            "name": "lookup_order",
            "description": "Find an order by id.",
            "input_schema": LOOKUP.parameters,
        }
    ]


async def test_tool_results_of_one_turn_are_merged_into_one_user_message(
    stub: StubServer,
) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    {"name": "lookup_order", "arguments": {"order_id": "A-1"}},
                    {"name": "lookup_order", "arguments": {"order_id": "B-2"}},
                ]
            },
            {"text": "A-1 shipped; B-2 is pending."},
        ]
    )
    history = [Message.system("You track orders."), Message.user("A-1 and B-2?")]
    async with make_llm(stub) as llm:
        first = await llm.acomplete(history, [LOOKUP])
        history.append(first.to_message())
        history += [
            Message.tool_result(first.tool_calls[0].id, "shipped", name="lookup_order"),
            Message.tool_result(first.tool_calls[1].id, "pending", name="lookup_order"),
        ]
        second = await llm.acomplete(history, [LOOKUP])

    assert second.text == "A-1 shipped; B-2 is pending."
    body = stub.requests[1]
    assert_anthropic_request_valid(body)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": call.id, "name": "lookup_order", "input": call.arguments}
        for call in first.tool_calls
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": first.tool_calls[0].id, "content": "shipped"},
        {"type": "tool_result", "tool_use_id": first.tool_calls[1].id, "content": "pending"},
    ]


async def test_usage_counts_cache_reads_and_writes_as_input(stub: StubServer) -> None:
    stub.script(
        [
            {
                "text": "cached",
                "usage": {
                    "input_tokens": 5,
                    "output_tokens": 7,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 10,
                },
            }
        ]
    )
    async with make_llm(stub) as llm:
        response = await llm.acomplete([Message.user("Hi")], [])
    assert response.usage == Usage(input_tokens=115, output_tokens=7)


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [("max_tokens", "length"), ("stop_sequence", "stop"), ("pause_turn", "pause_turn")],
)
async def test_stop_reason_is_mapped_to_the_neutral_vocabulary(
    stub: StubServer, stop_reason: str, expected: str
) -> None:
    stub.script([{"text": "x", "finish_reason": stop_reason}])
    async with make_llm(stub) as llm:
        response = await llm.acomplete([Message.user("Hi")], [])
    assert response.finish_reason == expected


async def test_generation_options_are_sent(stub: StubServer) -> None:
    stub.script([{"text": "x"}])
    async with make_llm(stub, max_tokens=99, temperature=0.5) as llm:
        await llm.acomplete([Message.user("Hi")], [])
    assert stub.requests[0]["max_tokens"] == 99
    assert stub.requests[0]["temperature"] == 0.5


async def test_http_500_becomes_provider_error_with_status_and_cause(stub: StubServer) -> None:
    stub.script([{"status": 500, "error": "overloaded upstream"}])
    async with make_llm(stub) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.acomplete([Message.user("Hi")], [])

    error = caught.value
    assert error.provider == "anthropic"
    assert error.status_code == 500
    assert error.retryable
    assert isinstance(error.__cause__, anthropic.InternalServerError)
    assert "overloaded upstream" in str(error)
    assert API_KEY not in str(error)
    assert len(stub.requests) == 1


async def test_unreachable_server_is_a_provider_error_without_status() -> None:
    with StubServer() as gone:
        url = gone.url
    async with AnthropicMessages(
        "claude-test", base_url=url, api_key=API_KEY, max_retries=0
    ) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert caught.value.status_code is None
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


def test_repr_and_request_never_show_the_api_key(stub: StubServer) -> None:
    llm = make_llm(stub)
    assert isinstance(llm, LLM)
    assert API_KEY not in repr(llm)
    assert API_KEY not in repr(vars(llm))
    assert API_KEY not in json.dumps(llm.build_request([Message.user("Hi")], [LOOKUP]))


def test_history_is_reshaped_to_alternate_with_results_first() -> None:
    calls = [ToolCall("t1", "lookup_order", {"order_id": "A"}), ToolCall("t2", "lookup_order")]
    history = [
        Message.user("first"),
        Message.user("second"),
        Message.assistant("checking", calls),
        Message.user("(the user typed while tools ran)"),
        Message.tool_result("t1", "ok"),
        Message.tool_result("t2", ""),
        Message.assistant("   "),
        Message.assistant("done"),
        Message.system("late system note"),
        Message.user("thanks"),
    ]
    system, messages = to_anthropic_messages(history)

    assert system == "late system note"
    assert_anthropic_request_valid({"model": "m", "max_tokens": 1, "messages": messages})
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "first"},
        {"type": "text", "text": "second"},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "t2"},
        {"type": "text", "text": "(the user typed while tools ran)"},
    ]
    assert messages[3]["content"] == [{"type": "text", "text": "done"}]


def test_missing_credentials_are_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicMessages("claude-test")
    # A config directory without a profile is refused by the SDK itself; same error.
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicMessages("claude-test")


async def test_slow_server_times_out_as_provider_error(stub: StubServer) -> None:
    stub.script([{"text": "late", "delay_seconds": 1.0}])
    async with make_llm(stub, timeout_seconds=0.2) as llm:
        with pytest.raises(ProviderError, match="timed out") as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert isinstance(caught.value.__cause__, anthropic.APITimeoutError)
