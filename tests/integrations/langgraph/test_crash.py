"""A real LangGraph ``StateGraph`` (tool-calling loop over the official openai SDK and HTTP,
``interrupt()`` in a tool) on ``TetherSaver``: SIGKILLed in the middle of a tool, continued in
a fresh process, paused for approval, answered with ``Command(resume=...)`` from another fresh
process (SQLite and Postgres)."""

from __future__ import annotations

import signal
from pathlib import Path

from langchain_core.messages import AIMessage, ToolMessage

from tests.integrations.langgraph.conftest import call, lg_env, run_child, spawn_child
from tests.integrations.langgraph.graphs import ledger
from tests.llm.stub_server import StubServer
from tests.support.waiting import wait_for
from tether.integrations.langgraph import TetherSaver


def test_a_graph_killed_mid_tool_resumes_in_a_fresh_process_and_its_interrupt_is_answered(
    store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path
):
    store.setup()
    hold = tmp_path / "hold"
    hold.touch()
    stub.script(
        [
            call("lookup", order_id="A-1"),
            call("refund", order_id="A-1", amount="40.00"),
            {"text": "Refunded 40.00 EUR on A-1."},
        ]
    )
    env = lg_env(db_url, stub, ledger_path, TETHER_TEST_HOLD=str(hold))
    child = spawn_child(env, "run", "thread-A1", "Refund A-1", log=tmp_path / "child.log")
    wait_for(lambda: "lookup-held:A-1" in ledger(ledger_path), "the lookup tool to hold")
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    hold.unlink()
    assert len(stub.requests) == 1

    paused = run_child(lg_env(db_url, stub, ledger_path), "resume", "thread-A1")

    assert paused["status"] == "paused"
    assert paused["interrupts"] == [{"tool": "refund", "order_id": "A-1", "amount": "40.00"}]
    assert len(stub.requests) == 2  # the first request committed before the kill: not resent
    assert "refund-paid:A-1:40.00" not in ledger(ledger_path)

    done = run_child(lg_env(db_url, stub, ledger_path), "answer", "thread-A1", '{"approved": true}')

    assert done["status"] == "completed"
    assert done["messages"][-1] == ["AIMessage", "Refunded 40.00 EUR on A-1."]
    assert len(stub.requests) == 3
    assert ledger(ledger_path).count("lookup-start:A-1") == 2  # in flight at the kill: re-run
    assert ledger(ledger_path).count("lookup-done:A-1") == 1
    assert ledger(ledger_path).count("refund-paid:A-1:40.00") == 1
    # The model saw the whole conversation on its last request, tool results included.
    assert [m["role"] for m in stub.requests[2]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]

    # The thread reads back in this process as LangGraph's own types, newest first.
    history = list(TetherSaver(store).list({"configurable": {"thread_id": "thread-A1"}}))
    final = history[0].checkpoint["channel_values"]["messages"]
    assert [type(m) for m in final] == [
        type(final[0]),
        AIMessage,
        ToolMessage,
        AIMessage,
        ToolMessage,
        AIMessage,
    ]
    assert final[1].tool_calls[0]["args"] == {"order_id": "A-1"}
