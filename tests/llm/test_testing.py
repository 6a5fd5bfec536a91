"""ScriptedLLM and FunctionLLM: deterministic, recording, clear when misused."""

from __future__ import annotations

import pytest

from tether.llm import LLM, LLMResponse, Message, ToolCall, ToolSpec, Usage
from tether.testing import FunctionLLM, Reply, ScriptedLLM, ScriptExhaustedError

SPEC = ToolSpec("lookup", "Look up.", {"type": "object", "properties": {}})


async def test_scripted_llm_plays_answers_in_order_and_records_calls() -> None:
    custom = LLMResponse(text="custom", usage=Usage(1, 2), finish_reason="length")
    llm = ScriptedLLM(
        [
            [{"name": "lookup", "arguments": {"q": "a"}}, {"name": "lookup", "id": "mine"}],
            [ToolCall("given", "lookup", {})],
            [{"name": "lookup", "arguments": {"q": "b"}}],
            custom,
            "final",
        ]
    )
    assert isinstance(llm, LLM)
    history = [Message.user("go")]
    first = await llm.acomplete(history, [SPEC])
    assert first.tool_calls == [
        ToolCall("call_1", "lookup", {"q": "a"}),
        ToolCall("mine", "lookup", {}),
    ]
    assert first.finish_reason == "tool_calls"
    assert (await llm.acomplete(history, [])).tool_calls == [ToolCall("given", "lookup", {})]
    assert (await llm.acomplete(history, [])).tool_calls == [
        ToolCall("call_2", "lookup", {"q": "b"})
    ]
    assert await llm.acomplete(history, []) is custom
    final = await llm.acomplete(history, [])
    assert (final.text, final.tool_calls, final.finish_reason) == ("final", [], "stop")

    assert llm.call_count == 5
    assert llm.remaining == 0
    assert llm.calls[0] == [{"role": "user", "content": "go"}]
    assert llm.tools_offered[0] == ["lookup"]


async def test_scripted_llm_raises_a_clear_error_when_the_script_runs_out() -> None:
    llm = ScriptedLLM(["only"])
    await llm.acomplete([Message.user("a")], [])
    with pytest.raises(ScriptExhaustedError, match="answer #2 but its script holds 1") as caught:
        await llm.acomplete([Message.user("again")], [])
    assert (caught.value.call_index, caught.value.script_length) == (1, 1)
    assert "again" in str(caught.value)


async def test_scripted_ids_are_the_same_for_every_instance_of_a_script() -> None:
    script: list[Reply] = [[{"name": "a"}, {"name": "b"}], [{"name": "c"}], "done"]
    first, second = ScriptedLLM(script), ScriptedLLM(script)
    for _ in range(2):
        one = await first.acomplete([Message.user("x")], [])
        two = await second.acomplete([Message.user("y")], [])
        assert one.tool_calls == two.tool_calls
    assert [c.id for c in one.tool_calls] == ["call_3"]


async def test_resume_aware_script_continues_from_the_history() -> None:
    script: list[Reply] = [[{"name": "lookup"}], "the end"]
    history = [
        Message.user("go"),
        Message.assistant(None, [ToolCall("call_1", "lookup")]),
        Message.tool_result("call_1", "found"),
    ]
    fresh = ScriptedLLM(script, resume_aware=True)
    assert (await fresh.acomplete(history, [])).text == "the end"
    assert fresh.call_count == 1


@pytest.mark.parametrize(
    ("script", "error"),
    [
        (["ok", 42], TypeError),
        ([[]], ValueError),
        ([[{"arguments": {}}]], ValueError),
        ([[{"name": "f", "arguments": "{}"}]], TypeError),
        ([["not a call"]], TypeError),
        ("a str is not a script", TypeError),
    ],
)
def test_scripted_llm_rejects_malformed_scripts_up_front(script: object, error: type) -> None:
    with pytest.raises(error):
        ScriptedLLM(script)  # type: ignore[arg-type]


async def test_function_llm_computes_answers_from_history_sync_or_async() -> None:
    def sync_fn(messages: list[Message]) -> str | list[dict[str, object]]:
        if messages[-1].role == "tool":
            return f"got {messages[-1].content}"
        return [{"name": "lookup", "arguments": {"n": len(messages)}}]

    async def async_fn(messages: list[Message]) -> str:
        return "async " + (messages[-1].content or "")

    llm = FunctionLLM(sync_fn)
    assert isinstance(llm, LLM)
    first = await llm.acomplete([Message.user("hi")], [SPEC])
    assert first.tool_calls == [ToolCall("call_1", "lookup", {"n": 1})]
    history = [Message.user("hi"), first.to_message(), Message.tool_result("call_1", "42")]
    assert (await llm.acomplete(history, [])).text == "got 42"
    history += [Message.assistant("got 42"), Message.user("again")]
    again = await llm.acomplete(history, [])
    assert again.tool_calls[0].id == "call_2", "ids continue from the calls in the history"
    assert llm.call_count == 3
    assert llm.calls[1][-1] == {"role": "tool", "content": "42", "tool_call_id": "call_1"}

    assert (await FunctionLLM(async_fn).acomplete([Message.user("x")], [])).text == "async x"


async def test_function_llm_reports_unsupported_answers() -> None:
    llm = FunctionLLM(lambda messages: 3.5)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="unsupported scripted answer float"):
        await llm.acomplete([Message.user("x")], [])
