"""An agent killed with SIGKILL at each named fault point, resumed from another process.

The children talk to the LLM stub through the real SDKs; the stub (in this process) counts
model calls, a JSON-lines file counts tool invocations, and every request body the stub saw
must be valid for its provider after every resume path.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.agents import tool_log
from tests.llm.stub_server import StubServer
from tests.llm.validators import assert_anthropic_request_valid, assert_openai_request_valid
from tests.support.proc import ROOT, child_env

LOOKUP = {"name": "lookup", "arguments": {"order_id": "A-1"}}
ADD = {"name": "add", "arguments": {"a": 2, "b": 3}}
APPROVE = {"name": "approve", "arguments": {"amount": 900}}


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer() as server:
        yield server


@pytest.fixture
def log(tmp_path: Path) -> str:
    return str(tmp_path / "tools.jsonl")


def child(
    db_url: str,
    stub: StubServer,
    log: str,
    *args: str,
    fault: str | None = None,
    provider: str = "openai",
    kind: str = "plain",
) -> tuple[int, dict[str, Any] | None]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.agent.child", db_url, stub.url, provider, *args],
        env=child_env(fault, TOOL_LOG=log, AGENT_KIND=kind),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, json.loads(lines[-1]) if lines else None


def assert_all_valid(stub: StubServer, provider: str = "openai") -> None:
    check = assert_openai_request_valid if provider == "openai" else assert_anthropic_request_valid
    for body in stub.requests:
        check(body)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("point", ["agent.before_llm", "agent.after_llm"])
def test_crash_around_model_call_reasks_the_model(
    point: str, db_url: str, stub: StubServer, log: str
) -> None:
    asked_before_crash = point == "agent.after_llm"
    # after_llm: the answer the crashed process received is lost, so the re-ask needs its own
    stub.script([{"tool_calls": [LOOKUP]}] * (1 + asked_before_crash) + [{"text": "shipped"}])
    code, _ = child(db_url, stub, log, "run", "c1", "where is A-1?", fault=point)
    assert code == -signal.SIGKILL
    before = len(stub.requests)
    assert before == int(asked_before_crash)
    code, out = child(db_url, stub, log, "resume", "c1")
    assert code == 0 and out is not None and out["status"] == "completed", out
    # the model was asked again at turn 0 with the saved history (system + user only)
    assert [m["role"] for m in stub.requests[before]["messages"]] == ["system", "user"]
    assert len(tool_log(log)) == 1
    assert_all_valid(stub)


@pytest.mark.parametrize("point", ["agent.before_tool", "agent.after_tool"])
def test_crash_around_tool_reinvokes_it_with_same_args_and_no_model_call(
    point: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script([{"tool_calls": [LOOKUP]}, {"text": "shipped"}])
    code, _ = child(db_url, stub, log, "run", "c2", "where is A-1?", fault=point)
    assert code == -signal.SIGKILL
    assert len(stub.requests) == 1
    ran_before = 0 if point == "agent.before_tool" else 1
    assert len(tool_log(log)) == ran_before
    code, out = child(db_url, stub, log, "resume", "c2")
    assert code == 0 and out is not None and out["status"] == "completed", out
    # exactly one more model call: the one after the tool, never a re-ask of turn 0
    assert len(stub.requests) == 2
    calls = tool_log(log)
    assert len(calls) == ran_before + 1
    assert all(c == {"tool": "lookup", "arguments": {"order_id": "A-1"}} for c in calls)
    assert len(tool_results(stub.requests[1])) == 1
    assert_all_valid(stub)


def test_crash_at_second_of_three_tools_keeps_first_result(
    db_url: str, stub: StubServer, log: str
) -> None:
    third = {"name": "add", "arguments": {"a": 10, "b": 1}}
    stub.script([{"tool_calls": [LOOKUP, ADD, third]}, {"text": "all done"}])
    code, _ = child(db_url, stub, log, "run", "c3", "do three", fault="agent.after_tool@2")
    assert code == -signal.SIGKILL
    code, out = child(db_url, stub, log, "resume", "c3")
    assert out is not None and out["status"] == "completed", out
    assert [c["arguments"] for c in tool_log(log)] == [
        {"order_id": "A-1"},
        {"a": 2, "b": 3},
        {"a": 2, "b": 3},
        {"a": 10, "b": 1},
    ]
    assert len(stub.requests) == 2
    assert [m["content"] for m in tool_results(stub.requests[1])][1:] == ["5", "11"]
    assert_all_valid(stub)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_pause_in_first_of_three_tools_then_resume_elsewhere_sends_valid_history(
    provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script([{"tool_calls": [APPROVE, LOOKUP, ADD]}, {"text": "refunded"}])
    _, out = child(db_url, stub, log, "run", "c4", "refund 900", provider=provider)
    assert out is not None and out["status"] == "paused", out
    _, out = child(db_url, stub, log, "resume", "c4", "approve", provider=provider)
    assert out is not None and out["status"] == "completed", out
    assert len(stub.requests) == 2
    assert [c["tool"] for c in tool_log(log)] == ["approve", "approve"]
    body = stub.requests[1]
    if provider == "openai":
        results = tool_results(body)
        asked = [c["id"] for c in body["messages"][2]["tool_calls"]]
        assert [m["tool_call_id"] for m in results] == asked
        assert results[0]["content"] == "approved"
        assert all("did not run" in m["content"] for m in results[1:])
    else:
        blocks = body["messages"][-1]["content"]
        assert [b["type"] for b in blocks] == ["tool_result"] * 3
    assert_all_valid(stub, provider)


def test_provider_error_fails_run_and_resume_reasks_model_without_rerunning_tools(
    db_url: str, stub: StubServer, log: str
) -> None:
    stub.script([{"tool_calls": [LOOKUP]}, {"status": 400, "error": "bad request"}])
    _, out = child(db_url, stub, log, "run", "c5", "where?")
    assert out is not None and out["status"] == "failed", out
    stub.script([{"text": "shipped"}])
    _, out = child(db_url, stub, log, "resume", "c5")
    assert out is not None and out["status"] == "completed", out
    assert len(stub.requests) == 3 and len(tool_log(log)) == 1
    assert_all_valid(stub)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_output_reask_exhausted_fails_and_resume_reasks_model_without_rerunning_tools(
    provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script([{"tool_calls": [LOOKUP]}] + [{"text": "not json"}] * 3)
    _, out = child(db_url, stub, log, "run", "c6", "judge", provider=provider, kind="typed")
    assert out is not None and out["status"] == "failed", out
    assert "OutputValidationError" in out["error"]
    assert len(stub.requests) == 4
    stub.script([{"text": '{"ok": true, "reason": "shipped"}'}])
    _, out = child(db_url, stub, log, "resume", "c6", provider=provider, kind="typed")
    assert out is not None and out["status"] == "completed", out
    assert len(stub.requests) == 5 and len(tool_log(log)) == 1
    assert_all_valid(stub, provider)
