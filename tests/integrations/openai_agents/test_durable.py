"""A durable OpenAI Agents SDK run in one process: journaled rows, approvals, interrupts,
failures, forks and typed outputs, on SQLite and Postgres (the SDK unmodified, over HTTP to the
stub's Responses API)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from pydantic import BaseModel

from tests.integrations.openai_agents.app import ledger, run_config, support, triage
from tests.integrations.openai_agents.conftest import HANDOFF, call, counts, text
from tests.llm.stub_server import StubServer
from tests.support.results import question_of
from tether import AlreadyResumed, Registry, Resume
from tether.integrations.openai_agents import (
    APPROVAL_REASON,
    JournalMismatchError,
    TetherAgent,
)


def rows(store: Any, eid: str) -> list[tuple[str, str, str, str | None]]:
    return [(c.node_id, c.step_type, c.status, c.agent_path) for c in store.list(eid)]


def last_output(request: dict[str, Any]) -> str:
    """The newest tool output a Responses request carries back to the model."""
    return [i["output"] for i in request["input"] if i.get("type") == "function_call_output"][-1]


def test_a_run_journals_each_model_and_tool_call_and_a_handoff_stays_in_one_run(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("lookup", order_id="A-1"), text("It is paid.")])
    result = support(store, stub.url).run("Where is order A-1?")

    assert result.status == "completed" and result.output == "It is paid."
    assert result.run_result is not None and result.run_result.last_agent.name == "billing"
    base = "openai_agents:support"
    assert rows(store, result.execution_id) == [
        ("turn:0", "llm_call", "completed", f"{base}/agent:triage"),
        ("turn:1", "llm_call", "completed", f"{base}/agent:billing"),
        ("turn:1/tool:lookup", "tool_call", "completed", f"{base}/agent:billing/tool:lookup"),
        ("turn:2", "llm_call", "completed", f"{base}/agent:billing"),
        ("run_end", "run_end", "completed", f"{base}/agent:billing"),
    ]
    assert [c.label for c in store.list(result.execution_id)] == [
        "model answered",
        "model answered",
        "tool returned",
        "model answered",
        "run completed",
    ]
    assert len(stub.requests) == 3
    assert ledger(ledger_path) == ["lookup:A-1"]
    run = store.get_run(result.execution_id)
    assert (run.runner_name, run.runner_kind, run.status) == (
        "support",
        "openai_agents",
        "completed",
    )
    assert store.list(result.execution_id)[-1].node_output["output"] == "It is paid."


def test_a_needs_approval_tool_pauses_as_a_tether_interrupt_and_runs_once_when_approved(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900), text("Refunded.")])
    durable = support(store, stub.url)
    paused = durable.run("Refund A-1")

    assert paused.status == "paused"
    assert paused.pending_interrupt == {
        "reason": APPROVAL_REASON,
        "context": {
            "tool": "refund",
            "arguments": {"order_id": "A-1", "amount": 900},
            "agent": "billing",
            "call_id": question_of(paused)["context"]["call_id"],
        },
        "node_id": "turn:1/tool:refund",
        "agent_path": "openai_agents:support/agent:billing/tool:refund",
        "checkpoint_id": question_of(paused)["checkpoint_id"],
    }
    pending = store.get_pending_interrupt(paused.execution_id)
    assert pending is not None and pending.reason == APPROVAL_REASON
    assert store.get_run(paused.execution_id).status == "paused"
    assert ledger(ledger_path) == [] and len(stub.requests) == 2

    done = durable.resume(paused.execution_id, Resume(approved=True))

    assert done.status == "completed" and done.output == "Refunded."
    assert ledger(ledger_path) == ["refund:A-1:900"]
    assert len(stub.requests) == 3  # the two answered before the pause were not asked again
    assert last_output(stub.requests[2]) == "refunded 900 on A-1"
    assert store.get_pending_interrupt(paused.execution_id) is None
    with pytest.raises(AlreadyResumed):
        durable.resume(paused.execution_id, Resume(approved=True))
    assert ledger(ledger_path) == ["refund:A-1:900"]


def test_a_rejected_approval_never_runs_the_tool_and_the_model_is_told_why(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900), text("Declined.")])
    durable = support(store, stub.url)
    paused = durable.run("Refund A-1")
    done = durable.resume(paused.execution_id, Resume(approved=False, data="over budget"))

    assert done.status == "completed" and done.output == "Declined."
    assert ledger(ledger_path) == []
    assert last_output(stub.requests[-1]) == "over budget"


def test_interrupt_inside_a_function_tool_pauses_and_its_answer_reaches_the_tool(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("escalate", order_id="A-1"), text("Supervisor agreed.")])
    durable = support(store, stub.url)
    paused = durable.run("Escalate A-1")

    assert paused.status == "paused"
    assert question_of(paused)["reason"] == "supervisor"
    assert question_of(paused)["context"] == {"order_id": "A-1"}
    assert question_of(paused)["agent_path"] == (
        "openai_agents:support/agent:billing/tool:escalate"
    )
    done = durable.resume(paused.execution_id, Resume(approved=True, data="go ahead"))

    assert done.status == "completed"
    assert ledger(ledger_path) == ["escalate:A-1:True"]
    assert last_output(stub.requests[-1]) == "supervisor says go ahead"
    assert len(stub.requests) == 3


def test_a_failed_model_call_fails_the_run_and_resume_asks_only_that_call_again(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("lookup", order_id="A-1"), {"status": 500, "error": "down"}])
    durable = support(store, stub.url)
    failed = durable.run("Where is A-1?")

    assert failed.status == "failed"
    assert store.get_run(failed.execution_id).status == "failed"
    stub.script([text("Paid.")])
    done = durable.resume(failed.execution_id)

    assert done.status == "completed" and done.output == "Paid."
    assert len(stub.requests) == 4  # 3 before the failure, then only the failed one again
    assert stub.requests[3]["input"] == stub.requests[2]["input"]
    assert ledger(ledger_path) == ["lookup:A-1"]


def test_a_fork_from_a_tool_row_replays_up_to_it_and_goes_on_live_leaving_the_original(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("lookup", order_id="A-1"), text("Paid.")])
    durable = support(store, stub.url)
    first = durable.run("Where is A-1?")
    original = rows(store, first.execution_id)
    tool_row = next(c for c in store.list(first.execution_id) if c.node_id == "turn:1/tool:lookup")

    stub.script([text("Paid, and shipped soon.")])
    branch = durable.fork(first.execution_id, tool_row.checkpoint_id)

    assert branch.status == "completed" and branch.output == "Paid, and shipped soon."
    assert branch.execution_id != first.execution_id
    assert len(stub.requests) == 4  # the branch asked only the call after the tool row
    assert stub.requests[3]["input"] == stub.requests[2]["input"]
    assert ledger(ledger_path) == ["lookup:A-1"]  # the tool did not run again in the branch
    assert rows(store, first.execution_id) == original
    run = store.get_run(branch.execution_id)
    assert run.parent_execution_id == first.execution_id
    assert run.parent_checkpoint_id == tool_row.checkpoint_id
    assert [c.step_type for c in store.list(branch.execution_id)] == [
        "fork_origin",
        "llm_call",
        "run_end",
    ]


def test_a_fork_from_the_approval_row_with_an_answer_runs_the_branch_to_its_end(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900)])
    durable = support(store, stub.url)
    paused = durable.run("Refund A-1")
    pause_row = store.list(paused.execution_id)[-1]
    assert pause_row.status == "interrupted"

    stub.script([text("Refunded in the branch.")])
    branch = durable.fork(paused.execution_id, pause_row.checkpoint_id, resume_value=Resume(True))

    assert branch.status == "completed" and branch.output == "Refunded in the branch."
    assert ledger(ledger_path) == ["refund:A-1:900"]
    assert store.get_run(paused.execution_id).status == "paused"  # the original still waits
    assert store.get_pending_interrupt(paused.execution_id) is not None


class Verdict(BaseModel):
    order_id: str
    refundable: bool


def test_a_typed_final_output_comes_back_as_its_type_after_a_resume(store, stub: StubServer):
    judge = Agent(name="judge", instructions="Judge.", output_type=Verdict)
    durable = TetherAgent(judge, checkpointer=store, run_config=run_config(stub.url))
    stub.script([{"status": 500, "error": "down"}])
    failed = durable.run("Is A-1 refundable?")
    assert failed.status == "failed"

    stub.script([text(json.dumps({"order_id": "A-1", "refundable": True}))])
    done = durable.resume(failed.execution_id)

    assert done.output == Verdict(order_id="A-1", refundable=True)
    assert store.list(done.execution_id)[-1].node_output["output"] == done.output


def test_a_replay_that_meets_another_agent_than_its_journal_fails_clearly(
    store, stub: StubServer, ledger_path: Path
):
    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900)])
    paused = support(store, stub.url).run("Refund A-1")
    changed = TetherAgent(
        Agent(name="billing-v2", instructions="x"),
        name="support",
        checkpointer=store,
        run_config=run_config(stub.url),
    )

    result = changed.resume(paused.execution_id, Resume(approved=True))

    assert result.status == "failed" and isinstance(result.error, JournalMismatchError)
    assert "triage" in str(result.error) and "billing-v2" in str(result.error)
    assert ledger(ledger_path) == [] and len(stub.requests) == 2


def test_a_registry_holds_a_tether_agent_and_finds_it_for_its_runs(store, stub: StubServer):
    durable = support(store, stub.url)
    stub.script([text("Hi.")])
    result = durable.run("Hello")
    registry = Registry(durable)
    assert registry.for_run(store, result.execution_id) is durable
    assert TetherAgent(triage).name == "triage"


def test_importing_tether_does_not_import_the_agents_sdk():
    code = (
        "import sys, tether, tether.integrations; "
        "assert 'agents' not in sys.modules, 'agents was imported'; "
        "assert 'tether.integrations.openai_agents' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_integration_exports_exactly_its_public_names():
    import tether.integrations.openai_agents as module

    assert sorted(module.__all__) == [
        "APPROVAL_REASON",
        "JournalMismatchError",
        "TetherAgent",
        "TetherRunResult",
    ]


def test_ledger_counts_helper_counts_repeats():
    assert counts(["a", "b", "a"]) == {"a": 2, "b": 1}


def test_parallel_tool_calls_of_one_answer_are_journaled_apart_and_neither_runs_again(
    store, stub: StubServer, ledger_path: Path
):
    both = {
        "tool_calls": [
            {"name": "lookup", "arguments": {"order_id": "A-1"}},
            {"name": "lookup", "arguments": {"order_id": "B-2"}},
        ]
    }
    stub.script([HANDOFF, both, {"status": 500, "error": "down"}])
    durable = support(store, stub.url)
    failed = durable.run("Where are A-1 and B-2?")
    assert failed.status == "failed"
    tool_rows = [c for c in store.list(failed.execution_id) if c.step_type == "tool_call"]
    assert sorted(c.node_input["arguments"]["order_id"] for c in tool_rows) == ["A-1", "B-2"]

    stub.script([text("Both paid.")])
    done = durable.resume(failed.execution_id)

    assert done.status == "completed" and done.output == "Both paid."
    assert counts(ledger(ledger_path)) == {"lookup:A-1": 1, "lookup:B-2": 1}
    assert len(stub.requests) == 4


def test_tether_spans_cover_the_run_each_model_call_and_each_tool_with_trace_ids_on_rows(
    store, stub: StubServer, ledger_path: Path
):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import format_trace_id

    import tether.otel

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tether.otel.instrument(provider)
    try:
        stub.script([HANDOFF, call("lookup", order_id="A-1"), text("Paid.")])
        result = support(store, stub.url).run("Where is A-1?")
    finally:
        tether.otel.uninstrument()
        provider.shutdown()

    names = [s.name for s in exporter.get_finished_spans()]
    assert sorted(names) == [
        "tether.llm support",
        "tether.llm support",
        "tether.llm support",
        "tether.run support",
        "tether.tool lookup",
    ]
    (run,) = [s for s in exporter.get_finished_spans() if s.name == "tether.run support"]
    assert run.attributes is not None
    assert run.attributes["tether.execution_id"] == result.execution_id
    assert run.attributes["tether.status"] == "completed"
    trace_id = format_trace_id(run.context.trace_id)
    assert {c.node_output["trace_id"] for c in store.list(result.execution_id)} == {trace_id}


def test_two_approvals_in_one_answer_are_asked_one_at_a_time_and_both_tools_run_once(
    store, stub: StubServer, ledger_path: Path
):
    both = {
        "tool_calls": [
            {"name": "refund", "arguments": {"order_id": "A-1", "amount": 900}},
            {"name": "refund", "arguments": {"order_id": "B-2", "amount": 300}},
        ]
    }
    stub.script([HANDOFF, both, text("One refunded, one declined.")])
    durable = support(store, stub.url)
    first = durable.run("Refund A-1 and B-2")
    assert question_of(first)["context"]["arguments"]["order_id"] == "A-1"

    second = durable.resume(first.execution_id, Resume(approved=True))
    assert second.status == "paused"
    assert question_of(second)["context"]["arguments"]["order_id"] == "B-2"
    assert ledger(ledger_path) == []  # nothing runs before every approval is answered

    done = durable.resume(first.execution_id, Resume(approved=False, data="too late"))
    assert done.status == "completed" and done.output == "One refunded, one declined."
    assert ledger(ledger_path) == ["refund:A-1:900"]
    assert len(stub.requests) == 3
    outputs = [
        i["output"] for i in stub.requests[-1]["input"] if i.get("type") == "function_call_output"
    ]
    assert outputs[-2:] == ["refunded 900 on A-1", "too late"]


def test_the_run_context_is_stored_with_the_run_and_handed_back_to_a_resume(
    store, stub: StubServer, ledger_path: Path
):
    from tests.integrations.openai_agents.app import Customer

    stub.script([HANDOFF, call("whoami"), {"status": 500, "error": "down"}])
    durable = support(store, stub.url)
    # The form a run row keeps, which tether.enqueue can pass to a worker too.
    failed = durable.run({"input": "Who am I?", "context": Customer("Ada", "gold")})
    assert failed.status == "failed"
    assert ledger(ledger_path) == ["whoami:Ada"]

    stub.script([call("whoami"), text("You are Ada.")])
    done = support(store, stub.url).resume(failed.execution_id)  # a fresh runner object

    assert done.status == "completed"
    assert ledger(ledger_path) == ["whoami:Ada", "whoami:Ada"]
    assert last_output(stub.requests[-1]) == "Ada (gold)"


def test_a_model_call_the_sdk_retried_keeps_its_journal_key_so_a_replay_finds_it(
    store, stub: StubServer, ledger_path: Path
):
    import agents

    from tests.integrations.openai_agents.app import lookup

    if not hasattr(agents, "retry_policies"):
        pytest.skip("this openai-agents has no runner-managed model retries")
    retry = agents.ModelRetrySettings(
        max_retries=2, policy=agents.retry_policies.http_status([500]), backoff={"initial_delay": 0}
    )
    solo = Agent(name="solo", tools=[lookup], model_settings=agents.ModelSettings(retry=retry))
    durable = TetherAgent(solo, checkpointer=store, run_config=run_config(stub.url))
    stub.script([{"status": 500, "error": "blip"}, call("lookup", order_id="A-1"), text("Paid.")])
    done = durable.run("Where is A-1?")
    assert done.status == "completed" and len(stub.requests) == 3
    keys = [c.node_input["key"] for c in store.list(done.execution_id) if c.step_type == "llm_call"]
    assert keys == ["m0", "m1"]

    tool_row = next(c for c in store.list(done.execution_id) if c.step_type == "tool_call")
    stub.script([text("Paid (branch).")])
    branch = durable.fork(done.execution_id, tool_row.checkpoint_id)

    assert branch.output == "Paid (branch)."
    assert len(stub.requests) == 4  # the replay found the retried call's answer
    assert ledger(ledger_path) == ["lookup:A-1"]


def test_bad_ids_values_and_arguments_get_clear_errors_and_change_nothing(store, stub: StubServer):
    from tether import ChainResumeError, ConfigurationError, RunNotFoundError

    stub.script([HANDOFF, call("refund", order_id="A-1", amount=900)])
    durable = support(store, stub.url)
    paused = durable.run("Refund A-1")
    before = rows(store, paused.execution_id)

    with pytest.raises(RunNotFoundError):
        durable.resume("no-such-run", Resume(approved=True))
    with pytest.raises(RunNotFoundError):
        durable.fork("no-such-run")
    with pytest.raises(ChainResumeError):
        durable.resume(paused.execution_id, True)  # type: ignore[arg-type]
    with pytest.raises(ChainResumeError):
        durable.resume(paused.execution_id)  # paused: needs an answer
    with pytest.raises(ConfigurationError):
        durable.fork(paused.execution_id, state_updates={"x": 1})
    with pytest.raises(ConfigurationError):
        TetherAgent("not an agent")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        TetherAgent(triage, name="a/b")

    assert rows(store, paused.execution_id) == before
    pending = store.get_pending_interrupt(paused.execution_id)
    assert pending is not None and pending.resume_value is None
    assert [r.execution_id for r in store.list_runs()] == [paused.execution_id]
