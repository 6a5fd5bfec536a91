"""The LangGraph graph the tests run: a support agent whose model is reached with the official
``openai`` SDK over HTTP (the stub server in ``tests/llm``), a tool-calling loop, and a refund
tool that asks a person with LangGraph's ``interrupt()`` before it pays.

Tools log to the file ``LEDGER`` names (one line per event) so tests count what ran; a tool
holds while the file ``TETHER_TEST_HOLD`` names exists, so a test can SIGKILL the process in
the middle of it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict, cast

import openai
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from openai.types.chat import ChatCompletionMessageFunctionToolCall, ChatCompletionMessageParam


class SupportState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def ledger(path: str | os.PathLike[str] | None = None) -> list[str]:
    """The ledger's lines."""
    where = Path(path or os.environ["LEDGER"])
    return where.read_text().splitlines() if where.exists() else []


def _log(line: str) -> None:
    with open(os.environ["LEDGER"], "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _hold() -> None:
    hold = os.environ.get("TETHER_TEST_HOLD")
    while hold and os.path.exists(hold):
        time.sleep(0.02)


def _to_openai(message: AnyMessage) -> dict[str, Any]:
    if isinstance(message, HumanMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, ToolMessage):
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    assert isinstance(message, AIMessage)
    calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
        }
        for c in message.tool_calls
    ]
    return {
        "role": "assistant",
        "content": message.content or None,
        **({"tool_calls": calls} if calls else {}),
    }


def agent(state: SupportState) -> dict[str, Any]:
    client = openai.OpenAI(base_url=os.environ["STUB_URL"] + "/v1", api_key="test", max_retries=0)
    # _to_openai builds the Chat Completions shapes (the stub server validates them).
    messages = cast(list[ChatCompletionMessageParam], [_to_openai(m) for m in state["messages"]])
    reply = client.chat.completions.create(model="gpt-test", messages=messages)
    msg = reply.choices[0].message
    calls = []
    for c in msg.tool_calls or []:
        assert isinstance(c, ChatCompletionMessageFunctionToolCall), c  # the stub's only kind
        calls.append(
            {"name": c.function.name, "args": json.loads(c.function.arguments), "id": c.id}
        )
    return {"messages": [AIMessage(content=msg.content or "", tool_calls=calls)]}


def lookup(order_id: str) -> str:
    _log(f"lookup-start:{order_id}")
    _log(f"lookup-held:{order_id}")
    _hold()
    _log(f"lookup-done:{order_id}")
    return f"order {order_id}: delivered, 40.00 EUR"


def refund(order_id: str, amount: str) -> str:
    answer = interrupt({"tool": "refund", "order_id": order_id, "amount": amount})
    if not answer.get("approved"):
        _log(f"refund-refused:{order_id}")
        return "refused by a manager"
    _log(f"refund-paid:{order_id}:{amount}")
    return f"refunded {amount} on {order_id}"


TOOLS: dict[str, Callable[..., str]] = {"lookup": lookup, "refund": refund}


def tools(state: SupportState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    out = [
        ToolMessage(content=TOOLS[c["name"]](**c["args"]), tool_call_id=c["id"])
        for c in last.tool_calls
    ]
    return {"messages": out}


def route(state: SupportState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def build() -> StateGraph[SupportState]:
    """The uncompiled graph: agent -> tools -> agent ... until the model answers in text."""
    builder = StateGraph(SupportState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


def saved(saver: BaseCheckpointSaver[Any], config: RunnableConfig) -> CheckpointTuple:
    """The checkpoint ``config`` names (the thread's newest without a checkpoint id); fails the
    test if the saver has none."""
    got = saver.get_tuple(config)
    assert got is not None, f"no checkpoint for {config}"
    return got
