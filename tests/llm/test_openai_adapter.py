"""OpenAIChat against the real openai SDK, talking HTTP to the loopback stub."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from typing import Any

import openai
import pytest

from tests.llm.stub_server import StubServer
from tests.llm.validators import assert_openai_request_valid
from tether.errors import ConfigurationError
from tether.llm import INVALID_JSON_KEY, LLM, Message, ProviderError, ToolCall, ToolSpec, Usage
from tether.llm.openai import OpenAIChat

API_KEY = "sk-test-openai-0123456789"

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


def make_llm(stub: StubServer, **kwargs: Any) -> OpenAIChat:
    options: dict[str, Any] = {
        "base_url": stub.url + "/v1",
        "api_key": API_KEY,
        "max_retries": 0,
    }
    options.update(kwargs)
    return OpenAIChat("gpt-test", **options)


async def test_text_answer_round_trips_through_the_sdk(stub: StubServer) -> None:
    stub.script([{"text": "Hello there.", "usage": {"input_tokens": 11, "output_tokens": 3}}])
    async with make_llm(stub) as llm:
        response = await llm.acomplete([Message.system("Be brief."), Message.user("Hi")], [])

    assert response.text == "Hello there."
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.usage == Usage(input_tokens=11, output_tokens=3)
    (body,) = stub.requests
    assert_openai_request_valid(body)
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert "tools" not in body
    assert stub.log[0].headers["authorization"] == f"Bearer {API_KEY}"


async def test_several_tool_calls_in_one_turn_are_decoded_in_order(stub: StubServer) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    {"id": "call_a", "name": "get_weather", "arguments": {"city": "Oslo"}},
                    {"id": "call_b", "name": "get_weather", "arguments": {"city": "Lima"}},
                ]
            }
        ]
    )
    async with make_llm(stub) as llm:
        response = await llm.acomplete([Message.user("Weather in Oslo and Lima?")], [WEATHER])

    assert response.finish_reason == "tool_calls"
    assert response.text is None
    assert response.tool_calls == [
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(id="call_b", name="get_weather", arguments={"city": "Lima"}),
    ]
    (body,) = stub.requests
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        }
    ]


async def test_tool_results_are_sent_back_after_their_assistant_message(stub: StubServer) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    {"name": "get_weather", "arguments": {"city": "Oslo"}},
                    {"name": "get_weather", "arguments": {"city": "Lima"}},
                ]
            },
            {"text": "Oslo 3°C, Lima 19°C."},
        ]
    )
    history = [Message.system("You are a weather bot."), Message.user("Oslo and Lima?")]
    async with make_llm(stub) as llm:
        first = await llm.acomplete(history, [WEATHER])
        history.append(first.to_message())
        for call, result in zip(first.tool_calls, ["3°C", "19°C"], strict=True):
            history.append(Message.tool_result(call.id, result, name=call.name))
        second = await llm.acomplete(history, [WEATHER])

    assert second.text == "Oslo 3°C, Lima 19°C."
    body = stub.requests[1]
    assert_openai_request_valid(body)
    assistant, *results = body["messages"][2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] is None
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        {"city": "Oslo"},
        {"city": "Lima"},
    ]
    assert results == [
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "3°C"},
        {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": "19°C"},
    ]


async def test_invalid_json_arguments_are_kept_raw_and_sent_back_verbatim(
    stub: StubServer,
) -> None:
    stub.script(
        [
            {"tool_calls": [{"id": "call_x", "name": "get_weather", "arguments": "{city: Oslo"}]},
            {"tool_calls": [{"id": "call_y", "name": "get_weather", "arguments": "[1, 2]"}]},
            {"tool_calls": [{"id": "call_z", "name": "get_weather", "arguments": ""}]},
            {"text": "ok"},
        ]
    )
    async with make_llm(stub) as llm:
        broken = await llm.acomplete([Message.user("Weather?")], [WEATHER])
        not_object = await llm.acomplete([Message.user("Weather?")], [WEATHER])
        empty = await llm.acomplete([Message.user("Weather?")], [WEATHER])
        history = [
            Message.user("Weather?"),
            broken.to_message(),
            Message.tool_result("call_x", "error: arguments are not JSON"),
        ]
        await llm.acomplete(history, [WEATHER])

    assert broken.tool_calls[0].arguments == {INVALID_JSON_KEY: "{city: Oslo"}
    assert not_object.tool_calls[0].arguments == {INVALID_JSON_KEY: "[1, 2]"}
    assert empty.tool_calls[0].arguments == {}
    sent = stub.requests[3]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert sent == "{city: Oslo"


async def test_http_500_becomes_provider_error_with_status_and_cause(stub: StubServer) -> None:
    stub.script([{"status": 500, "error": "upstream exploded"}])
    async with make_llm(stub) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.acomplete([Message.user("Hi")], [])

    error = caught.value
    assert error.provider == "openai"
    assert error.status_code == 500
    assert error.retryable
    assert isinstance(error.__cause__, openai.InternalServerError)
    assert "upstream exploded" in str(error)
    assert API_KEY not in str(error)
    assert len(stub.requests) == 1, "max_retries=0 must not retry"


async def test_http_400_is_a_provider_error_that_is_not_retryable(stub: StubServer) -> None:
    stub.script([{"status": 400, "error": "messages: bad"}])
    async with make_llm(stub) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert caught.value.status_code == 400
    assert not caught.value.retryable


async def test_sdk_retries_are_used_before_provider_error(stub: StubServer) -> None:
    stub.script([{"status": 503}, {"text": "recovered"}])
    # The SDK backs off between attempts; its first delay is well under a second.
    async with make_llm(stub, max_retries=1) as llm:
        response = await llm.acomplete([Message.user("Hi")], [])
    assert response.text == "recovered"
    assert len(stub.requests) == 2


async def test_unreachable_server_is_a_provider_error_without_status() -> None:
    with StubServer() as gone:
        url = gone.url
    async with OpenAIChat("gpt-test", base_url=url + "/v1", api_key=API_KEY, max_retries=0) as llm:
        with pytest.raises(ProviderError) as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert caught.value.status_code is None
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, openai.APIConnectionError)


async def test_slow_server_times_out_as_provider_error(stub: StubServer) -> None:
    stub.script([{"text": "late", "delay_seconds": 1.0}])
    async with make_llm(stub, timeout_seconds=0.2) as llm:
        with pytest.raises(ProviderError, match="timed out") as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)


async def test_generation_options_are_sent_and_finish_reason_is_mapped(stub: StubServer) -> None:
    stub.script([{"text": "trunc", "finish_reason": "length"}])
    async with make_llm(stub, temperature=0.2, max_tokens=77) as llm:
        response = await llm.acomplete([Message.user("Hi")], [])
    assert response.finish_reason == "length"
    assert stub.requests[0]["temperature"] == 0.2
    assert stub.requests[0]["max_tokens"] == 77


async def test_a_given_client_is_used_as_is(stub: StubServer) -> None:
    stub.script([{"text": "via client"}])
    client = openai.AsyncOpenAI(api_key=API_KEY, base_url=stub.url + "/v1", max_retries=0)
    async with client:
        llm = OpenAIChat("gpt-test", client=client)
        response = await llm.acomplete([Message.user("Hi")], [])
    assert response.text == "via client"


def test_adapter_works_across_event_loops_of_sync_calls(stub: StubServer) -> None:
    stub.script([{"text": "one"}, {"text": "two"}])
    llm = make_llm(stub)

    async def ask() -> str | None:
        response = await llm.acomplete([Message.user("Hi")], [])
        await llm.aclose()
        return response.text

    assert asyncio.run(ask()) == "one"
    assert asyncio.run(ask()) == "two"


def test_repr_and_attributes_never_show_the_api_key(stub: StubServer) -> None:
    llm = make_llm(stub)
    assert isinstance(llm, LLM)
    assert API_KEY not in repr(llm)
    assert API_KEY not in repr(vars(llm))
    assert API_KEY not in json.dumps(llm.build_request([Message.user("Hi")], [WEATHER]))


def test_missing_api_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        OpenAIChat("gpt-test")


def test_sdk_in_a_child_process_talks_to_the_parent_stub(stub: StubServer) -> None:
    stub.script([{"tool_calls": [{"id": "call_c", "name": "get_weather", "arguments": {}}]}])
    child = textwrap.dedent(
        """
        import asyncio, json, sys
        from tether.llm import Message
        from tether.llm.openai import OpenAIChat

        async def main():
            llm = OpenAIChat("gpt-test", base_url=sys.argv[1] + "/v1", api_key="sk-test-child",
                             max_retries=0)
            response = await llm.acomplete([Message.user("from child")], [])
            await llm.aclose()
            print(json.dumps(response.to_dict()))

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, stub.url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tool_calls"] == [
        {"id": "call_c", "name": "get_weather", "arguments": {}}
    ]
    assert stub.requests[0]["messages"] == [{"role": "user", "content": "from child"}]


async def test_a_response_without_choices_is_a_provider_error(stub: StubServer) -> None:
    stub.script(
        [
            {
                "body": {
                    "id": "x",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [],
                }
            }
        ]
    )
    async with make_llm(stub) as llm:
        with pytest.raises(ProviderError, match="no choices") as caught:
            await llm.acomplete([Message.user("Hi")], [])
    assert caught.value.status_code is None
