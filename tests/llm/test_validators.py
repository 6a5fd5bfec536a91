"""The request validators can fail, and the adapters' translations always pass them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.llm.validators import assert_anthropic_request_valid, assert_openai_request_valid
from tether.llm import Message, ToolCall
from tether.llm.anthropic import to_anthropic_messages
from tether.llm.openai import to_openai_messages


def openai_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def openai_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


USER = {"role": "user", "content": "hi"}
TWO_CALLS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [openai_call("a"), openai_call("b")],
}


def answer(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def test_openai_validator_accepts_a_fully_answered_turn() -> None:
    assert_openai_request_valid(openai_body(USER, TWO_CALLS, answer("a"), answer("b"), USER))


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ((USER, TWO_CALLS, answer("a"), USER), "still unanswered"),
        ((USER, TWO_CALLS, answer("a")), "unanswered"),
        ((USER, TWO_CALLS, answer("b"), answer("a")), "expected 'a'"),
        ((USER, TWO_CALLS, answer("a"), answer("b"), answer("b")), "answers no pending"),
        ((USER, answer("a")), "answers no pending"),
        ((USER, TWO_CALLS, USER, answer("a"), answer("b")), "still unanswered"),
        ((USER, TWO_CALLS, answer("a"), answer("b"), TWO_CALLS, answer("a")), "used twice"),
        ((USER, {"role": "robot", "content": "x"}), "unknown role"),
        ((USER, {"role": "assistant"}), "neither content nor tool_calls"),
    ],
)
def test_openai_validator_rejects_broken_histories(
    messages: tuple[dict[str, Any], ...], problem: str
) -> None:
    with pytest.raises(AssertionError, match=problem):
        assert_openai_request_valid(openai_body(*messages))


def anthropic_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages)}


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "f", "input": {}}


def result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def test_anthropic_validator_accepts_results_merged_into_one_user_message() -> None:
    assert_anthropic_request_valid(
        anthropic_body(
            user(text("hi")),
            assistant(text("on it"), use("a"), use("b")),
            user(result("a"), result("b"), text("also this")),
            assistant(text("done")),
        )
    )


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ((assistant(text("hi")),), "must be a user message"),
        ((user(text("a")), user(text("b"))), "roles must alternate"),
        ((user(text("a")), assistant(use("a"), use("b"))), "unanswered"),
        (
            (user(text("a")), assistant(use("a"), use("b")), user(result("a"))),
            r"expected tool_result blocks for \['a', 'b'\]",
        ),
        (
            (
                user(text("a")),
                assistant(use("a"), use("b")),
                user(result("a")),
                assistant(text("x")),
                user(result("b")),
            ),
            "expected tool_result",
        ),
        (
            (user(text("a")), assistant(use("a")), user(text("first"), result("a"))),
            "must come before",
        ),
        (
            (user(text("a")), assistant(use("a"), use("b")), user(result("b"), result("a"))),
            "expected tool_result",
        ),
        ((user(result("zz")),), "answers no tool_use"),
        ((user(text("  ")),), "non-empty"),
        ((user(text("a")), assistant(use("a")), user(result("a")), assistant(use("a"))), "twice"),
        (({"role": "tool", "content": "x"},), "must be a user message"),
    ],
)
def test_anthropic_validator_rejects_broken_histories(
    messages: tuple[dict[str, Any], ...], problem: str
) -> None:
    with pytest.raises(AssertionError, match=problem):
        assert_anthropic_request_valid(anthropic_body(*messages))


@st.composite
def agent_histories(draw: st.DrawFn) -> list[Message]:
    """Histories an agent loop produces: user turns, assistant turns, all tools answered."""
    history = [Message.system("sys"), Message.user("start")]
    next_id = 0
    for _ in range(draw(st.integers(0, 5))):
        width = draw(st.integers(0, 3))
        calls = [
            ToolCall(f"id{next_id + i}", "f", {"n": i, "s": draw(st.text(max_size=5))})
            for i in range(width)
        ]
        next_id += width
        words = draw(st.sampled_from([None, "", "thinking", "  "]))
        history.append(Message.assistant(words if calls else (words or "answer"), calls))
        history += [Message.tool_result(c.id, draw(st.sampled_from(["", "r"]))) for c in calls]
        if not calls or draw(st.booleans()):
            history.append(Message.user(draw(st.sampled_from(["next", "more please"]))))
    if history[-1].role == "assistant":
        history.append(Message.user("bye"))
    return history


@settings(max_examples=150, deadline=None)
@given(agent_histories())
def test_translated_agent_histories_always_pass_both_validators(history: list[Message]) -> None:
    assert_openai_request_valid({"model": "m", "messages": to_openai_messages(history)})
    system, messages = to_anthropic_messages(history)
    assert system == "sys"
    assert_anthropic_request_valid({"model": "m", "max_tokens": 5, "messages": messages})
    json.dumps(messages)
