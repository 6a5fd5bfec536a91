"""A durable pydantic-ai run SIGKILLed in the middle of a tool call and in the middle of a model
request, then resumed by a fresh process: each completed model request and tool call is made
once, and the ``@idempotent`` charge inside the interrupted tool lands once (SQLite, Postgres).

The children run the real pydantic-ai and OpenAI SDK against the loopback stub in this process,
which counts the requests; the tools append to a log file, which counts the bodies that ran.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integrations.pydantic_ai.conftest import Logs, call, tool_messages
from tests.llm.stub_server import StubServer
from tests.support.proc import ROOT, child_env
from tests.support.waiting import wait_for


def start_child(
    db_url: str, stub: StubServer, logs: Logs, *args: str, **env: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integrations.pydantic_ai.child", db_url, stub.url, *args],
        env=child_env(**logs.env(), **env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads([line for line in out.splitlines() if line.startswith("{")][-1]))


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_killed_in_a_tool_call_resumes_elsewhere_without_repeating_a_completed_step(
    store, db_url: str, stub: StubServer, logs: Logs, tmp_path: Path
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1")]},
            {"tool_calls": [call("pack", order_id="A-1")]},
            {"text": "Packed A-1."},
        ]
    )
    gate = tmp_path / "gate"
    proc = start_child(db_url, stub, logs, "run", "k1", "Pack A-1", PACK_GATE=str(gate))
    # The packing tool has charged (and cached the charge: a kill between the two is the
    # documented at-least-once window of @idempotent) and waits at its gate: it dies inside.
    wait_for(lambda: store.list_idempotent("k1"), "the pack tool's charge to be cached", 60)
    kill(proc)
    assert len(stub.requests) == 2 and len(logs.ran("lookup")) == 1

    gate.touch()
    out = finish(start_child(db_url, stub, logs, "resume", "k1", PACK_GATE=str(gate)))
    assert out["status"] == "completed" and out["output"] == "Packed A-1.", out
    # Every model request once: the two before the crash were answered from the store.
    assert len(stub.requests) == 3
    assert len(logs.ran("lookup")) == 1
    # The tool in flight ran again (it never completed), its @idempotent charge did not.
    assert len(logs.ran("pack")) == 2
    assert logs.charges() == [{"order_id": "A-1", "amount": 100}]
    packed = tool_messages(stub.requests[2])[-1]["content"]
    assert isinstance(packed, str) and packed.startswith("packed A-1")


def test_killed_in_a_model_request_resumes_elsewhere_and_sends_only_that_request_again(
    db_url: str, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1")]},
            {"tool_calls": [call("pack", order_id="A-1")]},
            # The third request hangs; the process is killed while it waits for the answer.
            {"text": "never delivered", "delay_seconds": 30},
            {"text": "Packed A-1."},
        ]
    )
    proc = start_child(db_url, stub, logs, "run", "k2", "Pack A-1")
    wait_for(lambda: len(stub.requests) == 3, "the third model request to be sent", 60)
    kill(proc)
    assert len(logs.ran()) == 2 and len(logs.charges()) == 1

    out = finish(start_child(db_url, stub, logs, "resume", "k2"))
    assert out["status"] == "completed" and out["output"] == "Packed A-1.", out
    # The two answered requests were not sent again; the one in flight was, once.
    assert len(stub.requests) == 4
    assert stub.requests[3]["messages"] == stub.requests[2]["messages"]
    assert [r["tool"] for r in logs.ran()] == ["lookup", "pack"]
    assert len(logs.charges()) == 1


def test_a_paused_run_is_approved_from_another_process_with_no_process_alive_between(
    db_url: str, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    call("lookup", order_id="A-1"),
                    call("refund", order_id="A-1", amount=30),
                ]
            },
            {"text": "Refunded."},
        ]
    )
    out = finish(start_child(db_url, stub, logs, "run", "k3", "Refund A-1"))
    assert out["status"] == "paused" and out["pending"]["context"]["tool_name"] == "refund"
    out = finish(start_child(db_url, stub, logs, "resume", "k3", "approve"))
    assert out["status"] == "completed", out
    assert len(stub.requests) == 2
    assert [r["tool"] for r in logs.ran()] == ["lookup", "refund"]
    assert logs.charges() == [{"order_id": "A-1", "amount": -30}]
