"""SIGKILL a process in the middle of a tool call and in the middle of a model request, resume
the run in a fresh process, and count what the model server saw and which tool bodies ran
(SQLite and Postgres; the SDK unmodified, over HTTP)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.integrations.openai_agents.app import ledger
from tests.integrations.openai_agents.conftest import (
    HANDOFF,
    call,
    counts,
    oa_env,
    run_child,
    spawn_child,
    text,
)
from tests.llm.stub_server import StubServer
from tests.support.waiting import wait_for


def kill(proc) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def test_killed_mid_tool_resumes_elsewhere_without_repeating_a_completed_call(
    store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path
):
    store.setup()
    hold = tmp_path / "hold"
    hold.touch()
    stub.script(
        [HANDOFF, call("lookup", order_id="A-1"), call("ship", order_id="A-1"), text("Shipped.")]
    )
    env = oa_env(db_url, stub, ledger_path, TETHER_TEST_HOLD=str(hold))
    child = spawn_child(env, "run", "run-mid-tool", "Ship A-1", log=tmp_path / "child.log")
    wait_for(lambda: "ship-held:A-1" in ledger(ledger_path), "the ship tool to hold")
    kill(child)
    hold.unlink()
    assert len(stub.requests) == 3

    out = run_child(oa_env(db_url, stub, ledger_path), "resume", "run-mid-tool")

    assert out["status"] == "completed" and out["output"] == "Shipped."
    assert len(stub.requests) == 4  # each completed model request was sent once
    assert counts(ledger(ledger_path)) == {
        "lookup:A-1": 1,  # completed before the crash: not run again
        "ship-start:A-1": 2,  # in flight at the crash: run again, once
        "ship-held:A-1": 1,
        "charge:A-1": 1,  # @idempotent inside it: once per run
        "ship-done:A-1": 1,
    }
    assert [c.node_id for c in store.list("run-mid-tool")] == [
        "turn:0",
        "turn:1",
        "turn:1/tool:lookup",
        "turn:2",
        "turn:2/tool:ship",
        "turn:3",
        "run_end",
    ]


def test_killed_mid_model_request_resumes_elsewhere_and_asks_only_that_request_again(
    store, db_url: str, stub: StubServer, ledger_path: Path, tmp_path: Path
):
    store.setup()
    stub.script(
        [HANDOFF, call("lookup", order_id="A-1"), {"text": "never sent", "delay_seconds": 30}]
    )
    env = oa_env(db_url, stub, ledger_path)
    child = spawn_child(env, "run", "run-mid-model", "Where is A-1?", log=tmp_path / "child.log")
    wait_for(lambda: len(stub.requests) == 3, "the third model request to reach the server")
    kill(child)
    stub.script([call("ship", order_id="A-1"), text("Shipped.")])

    out = run_child(env, "resume", "run-mid-model")

    assert out["status"] == "completed" and out["output"] == "Shipped."
    requests = stub.requests
    assert len(requests) == 5  # 3 before the kill; the killed one again; the last one
    assert requests[3]["input"] == requests[2]["input"]
    assert counts(ledger(ledger_path)) == {
        "lookup:A-1": 1,
        "ship-start:A-1": 1,
        "charge:A-1": 1,
        "ship-done:A-1": 1,
    }
