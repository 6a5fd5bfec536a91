"""Swarms and supervisors killed with SIGKILL inside an inner agent, resumed from another
process; the children talk to the LLM stub through the real SDKs. The stub counts model calls
(and shows whose they were, by system prompt), a JSON-lines file counts tool invocations, and
every request body must be valid for its provider after every resume path."""

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
from tests.multiagent.topologies import (
    APPROVER_PROMPT,
    AUDITOR_PROMPT,
    BILLING_PROMPT,
    BOSS_PROMPT,
    RESEARCH_PROMPT,
    TRIAGE_PROMPT,
    system_prompt_of,
)
from tests.support.proc import ROOT, child_env

LOOKUP = {"name": "lookup", "arguments": {"order_id": "A-1"}}
ADD = {"name": "add", "arguments": {"a": 2, "b": 3}}
APPROVE = {"name": "approve", "arguments": {"amount": 900}}
SIGN_OFF = {"name": "sign_off", "arguments": {"item": "refund A-1"}}
TRANSFER = {"name": "transfer_to_billing", "arguments": {}}

PROVIDERS = ["openai", "anthropic"]


def delegate(role: str, task: str) -> dict[str, Any]:
    return {"name": f"delegate_to_{role}", "arguments": {"task": task}}


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
    provider: str,
    topology: str,
    *args: str,
    fault: str | None = None,
) -> tuple[int, dict[str, Any] | None]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.multiagent.child",
            db_url,
            stub.url,
            provider,
            topology,
            *args,
        ],
        env=child_env(fault, TOOL_LOG=log),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, json.loads(lines[-1]) if lines else None


def asked(stub: StubServer) -> list[str | None]:
    """Whose model each request was, by system prompt, oldest first."""
    return [system_prompt_of(body) for body in stub.requests]


def assert_all_valid(stub: StubServer, provider: str) -> None:
    check = assert_openai_request_valid if provider == "openai" else assert_anthropic_request_valid
    for body in stub.requests:
        check(body)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("point", ["agent.before_tool@3", "agent.after_llm@3"])
def test_swarm_crash_in_second_agent_resumes_there_without_repeating_the_first(
    point: str, provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    lost = point.startswith("agent.after_llm")  # the crashed process's answer is lost
    stub.script(
        [{"tool_calls": [LOOKUP]}, {"tool_calls": [TRANSFER]}]
        + [{"tool_calls": [ADD]}] * (1 + lost)
        + [{"text": "refunded 5"}]
    )
    code, _ = child(db_url, stub, log, provider, "swarm", "run", "w1", "refund A-1", fault=point)
    assert code == -signal.SIGKILL
    assert asked(stub) == [TRIAGE_PROMPT, TRIAGE_PROMPT, BILLING_PROMPT]
    code, out = child(db_url, stub, log, provider, "swarm", "resume", "w1")
    assert code == 0 and out is not None and out["status"] == "completed", out
    assert out["output"] == "refunded 5"
    # triage's two model calls and its lookup are not repeated; billing goes on in its turn
    assert asked(stub) == [TRIAGE_PROMPT, TRIAGE_PROMPT] + [BILLING_PROMPT] * (2 + lost)
    assert [c["tool"] for c in tool_log(log)] == ["lookup", "add"]
    assert_all_valid(stub, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("point", ["agent.before_tool@2", "agent.after_tool@1"])
def test_crash_in_a_workers_tool_reinvokes_it_with_saved_args_and_no_model_call(
    point: str, provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script(
        [
            {"tool_calls": [delegate("research", "find A-1")]},
            {"tool_calls": [LOOKUP]},
            {"text": "A-1 shipped"},
            {"text": "Your order shipped."},
        ]
    )
    code, _ = child(db_url, stub, log, provider, "supervisor", "run", "w2", "where?", fault=point)
    assert code == -signal.SIGKILL
    assert asked(stub) == [BOSS_PROMPT, RESEARCH_PROMPT]
    ran_before = 1 if point.startswith("agent.after_tool") else 0
    assert len(tool_log(log)) == ran_before
    code, out = child(db_url, stub, log, provider, "supervisor", "resume", "w2")
    assert code == 0 and out is not None and out["status"] == "completed", out
    # the tool ran again with its saved arguments; the next request is the worker's next turn
    assert asked(stub) == [BOSS_PROMPT, RESEARCH_PROMPT, RESEARCH_PROMPT, BOSS_PROMPT]
    calls = tool_log(log)
    assert len(calls) == ran_before + 1
    assert all(c == {"tool": "lookup", "arguments": {"order_id": "A-1"}} for c in calls)
    assert_all_valid(stub, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_supervisor_workers_pause_in_turn_across_processes_and_requests_stay_valid(
    provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script(
        [
            {"tool_calls": [delegate("research", "find A-1")]},
            {"tool_calls": [LOOKUP]},
            {"text": "shipped"},
            {"tool_calls": [delegate("approve", "approve 900"), delegate("audit", "sign off")]},
            {"tool_calls": [APPROVE]},
        ]
    )
    _, out = child(db_url, stub, log, provider, "supervisor", "run", "w3", "refund A-1")
    assert out is not None and out["status"] == "paused"
    assert out["pending"]["agent_path"] == "supervisor:boss/worker:approve/tool:approve"
    stub.script([{"text": "approved"}, {"tool_calls": [SIGN_OFF]}])
    _, out = child(db_url, stub, log, provider, "supervisor", "resume", "w3", "approve")
    assert out is not None and out["status"] == "paused", out
    assert out["pending"]["agent_path"] == "supervisor:boss/worker:audit/tool:sign_off"
    stub.script([{"text": "signed"}, {"text": "Refunded and audited."}])
    _, out = child(db_url, stub, log, provider, "supervisor", "resume", "w3", "approve")
    assert out is not None and out["status"] == "completed", out
    assert asked(stub) == [
        BOSS_PROMPT,
        RESEARCH_PROMPT,
        RESEARCH_PROMPT,
        BOSS_PROMPT,
        APPROVER_PROMPT,
        APPROVER_PROMPT,
        AUDITOR_PROMPT,
        AUDITOR_PROMPT,
        BOSS_PROMPT,
    ]
    assert [c["tool"] for c in tool_log(log)] == [
        "lookup",
        "approve",
        "approve",
        "sign_off",
        "sign_off",
    ]
    assert_all_valid(stub, provider)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_swarm_pause_after_a_handoff_resumes_in_another_process_with_valid_requests(
    provider: str, db_url: str, stub: StubServer, log: str
) -> None:
    stub.script(
        [
            {"tool_calls": [LOOKUP]},
            {"tool_calls": [TRANSFER, LOOKUP]},  # the lookup after the transfer does not run
            {"tool_calls": [APPROVE, ADD]},  # approve pauses; add is answered as not run
        ]
    )
    _, out = child(db_url, stub, log, provider, "swarm", "run", "w4", "refund A-1")
    assert out is not None and out["status"] == "paused", out
    stub.script([{"text": "refund approved"}])
    _, out = child(db_url, stub, log, provider, "swarm", "resume", "w4", "approve")
    assert out is not None and out["status"] == "completed", out
    assert asked(stub) == [TRIAGE_PROMPT, TRIAGE_PROMPT, BILLING_PROMPT, BILLING_PROMPT]
    assert [c["tool"] for c in tool_log(log)] == ["lookup", "approve", "approve"]
    assert_all_valid(stub, provider)
