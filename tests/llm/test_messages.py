"""The neutral message model: compact dicts, lossless round trips, early rejection."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tether.llm import INVALID_JSON_KEY, LLMResponse, Message, ToolCall, ToolSpec, Usage


def test_to_dict_leaves_out_empty_fields_to_keep_checkpoints_small() -> None:
    assert Message.user("hi").to_dict() == {"role": "user", "content": "hi"}
    assert Message.assistant(None, [ToolCall("c1", "f", {"x": 1})]).to_dict() == {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": {"x": 1}}],
    }
    assert Message.tool_result("c1", "", name="f").to_dict() == {
        "role": "tool",
        "content": "",
        "tool_call_id": "c1",
        "name": "f",
    }


@pytest.mark.parametrize(
    "message",
    [
        Message.system("rules"),
        Message.user("hi", name="ana"),
        Message.assistant("text only"),
        Message.assistant(
            "both", [ToolCall("a", "f"), ToolCall("b", "g", {"k": [1, {"z": None}]})]
        ),
        Message.assistant(None, [ToolCall("bad", "f", {INVALID_JSON_KEY: "{oops"})]),
        Message.tool_result("a", "42"),
    ],
)
def test_messages_round_trip_through_json(message: Message) -> None:
    assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"role": "robot", "content": "x"}, "unknown message role"),
        ({"content": "x"}, "unknown message role"),
        ({"role": "tool", "content": "x"}, "tool_call_id"),
        ({"role": "user", "content": 3}, "string or None"),
        ({"role": "user", "tool_calls": [{"id": "a", "name": "f"}]}, "only assistant"),
        ({"role": "assistant", "tool_calls": [{"name": "f"}]}, "string 'id' and 'name'"),
        (
            {"role": "assistant", "tool_calls": [{"id": "a", "name": "f", "arguments": "{}"}]},
            "dict",
        ),
    ],
)
def test_from_dict_rejects_malformed_messages(data: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Message.from_dict(data)


def test_usage_adds_up() -> None:
    total = Usage(10, 2) + Usage(5, 1) + Usage()
    assert total == Usage(input_tokens=15, output_tokens=3)
    assert total.total_tokens == 18
    assert Usage.from_dict(total.to_dict()) == total


def test_response_becomes_the_assistant_message_and_round_trips() -> None:
    response = LLMResponse(
        text="calling",
        tool_calls=[ToolCall("c", "f", {"a": 1})],
        usage=Usage(3, 4),
        finish_reason="tool_calls",
    )
    assert response.to_message() == Message.assistant("calling", [ToolCall("c", "f", {"a": 1})])
    assert LLMResponse.from_dict(json.loads(json.dumps(response.to_dict()))) == response
    assert LLMResponse.from_dict({}) == LLMResponse()


def test_tool_spec_defaults_to_an_empty_object_schema() -> None:
    spec = ToolSpec("ping", "Ping.")
    assert spec.to_dict() == {
        "name": "ping",
        "description": "Ping.",
        "parameters": {"type": "object", "properties": {}},
    }


def test_importing_tether_does_not_import_provider_sdks() -> None:
    code = (
        "import sys, tether, tether.llm, tether.testing, tether.agent.tool\n"
        "import tether.llm.openai, tether.llm.anthropic\n"
        "loaded = sorted(m for m in ('openai', 'anthropic') if m in sys.modules)\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_adapters_are_reachable_lazily_from_tether_llm() -> None:
    import tether.llm
    from tether.llm.anthropic import AnthropicMessages
    from tether.llm.openai import OpenAIChat

    assert tether.llm.OpenAIChat is OpenAIChat
    assert tether.llm.AnthropicMessages is AnthropicMessages
    with pytest.raises(AttributeError):
        tether.llm.NoSuchThing
