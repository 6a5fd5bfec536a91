"""A pydantic-ai agent made durable with TetherAgent, driven in this process against the
loopback model stub through the real OpenAI SDK, on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterable

import pytest
from pydantic_ai import RunContext
from pydantic_ai.capabilities import ProcessHistory

import tether
from tests.integrations.pydantic_ai.agents import Refund, durable, support_agent
from tests.integrations.pydantic_ai.conftest import Logs, call, tool_messages
from tests.llm.stub_server import StubServer
from tether import Registry, Resume
from tether.integrations.pydantic_ai import ReplayDivergedError, TetherAgent


def rows(store: tether.Checkpointer, eid: str) -> list[tuple[str, str, str]]:
    return [(cp.node_id, cp.step_type, cp.status) for cp in store.list(eid)]


def test_a_run_completes_with_its_typed_output_and_a_row_per_model_request_and_tool_call(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1"), call("pack", order_id="A-1")]},
            {"tool_calls": [call("final_result", order_id="A-1", refunded=100)]},
        ]
    )
    result = durable(stub.url, store, typed=True).run("Refund A-1", execution_id="r1")
    assert result.status == "completed", result.error
    assert result.output == Refund(order_id="A-1", refunded=100)
    assert isinstance(result.output, Refund)
    assert sum(m.kind == "response" for m in result.all_messages()) == 2
    found = rows(store, "r1")
    # The two tools of turn 0 run at once: their rows come in the order they finished.
    assert found[0] == ("turn:0", "llm_call", "completed")
    assert sorted(found[1:3]) == [
        ("turn:0/tool:lookup", "tool_call", "completed"),
        ("turn:0/tool:pack", "tool_call", "completed"),
    ]
    assert found[3:] == [("turn:1", "llm_call", "completed"), ("run_end", "run_end", "completed")]
    run = store.get_run("r1")
    assert run is not None and (run.runner_name, run.runner_kind, run.status) == (
        "support",
        "pydantic_ai",
        "completed",
    )
    tool_row = next(cp for cp in store.list("r1") if cp.node_id == "turn:0/tool:lookup")
    assert tool_row.node_input["arguments"] == {"order_id": "A-1"}
    assert tool_row.agent_path == "pydantic_ai:support/tool:lookup"
    # Journaled once the call returned, so the timeline says it happened (tether's own agent
    # writes its rows before the call: "before model call").
    labels = {cp.node_id: cp.label for cp in store.list("r1")}
    assert labels["turn:0"] == "model answered"
    assert labels["turn:0/tool:lookup"] == "tool returned"
    end = store.list("r1")[-1]
    assert end.node_output["output"] == {"order_id": "A-1", "refunded": 100}
    assert end.node_output["usage"]["requests"] == 2
    assert len(stub.requests) == 2 and len(logs.ran()) == 2


def test_a_tool_needing_approval_pauses_with_its_name_and_arguments_and_runs_once_approved(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    call("lookup", order_id="A-1"),
                    call("refund", order_id="A-1", amount=40),
                ]
            },
            {"text": "Refunded 40 on A-1."},
        ]
    )
    agent = durable(stub.url, store)
    paused = agent.run("Refund 40 on A-1", execution_id="a1")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["reason"] == "tool_approval"
    assert paused.pending_interrupt["context"] == {
        "tool_name": "refund",
        "args": {"order_id": "A-1", "amount": 40},
        "tool_call_id": paused.pending_interrupt["context"]["tool_call_id"],
    }
    pending = store.get_pending_interrupt("a1")
    assert pending is not None and pending.node_id == "turn:0/tool:refund"
    assert [r["tool"] for r in logs.ran()] == ["lookup"]

    done = agent.resume("a1", Resume(approved=True))
    assert done.status == "completed", done.error
    assert done.output == "Refunded 40 on A-1."
    # Each model request once; the looked-up order was not looked up again.
    assert len(stub.requests) == 2
    assert [r["tool"] for r in logs.ran()] == ["lookup", "refund"]
    assert logs.charges() == [{"order_id": "A-1", "amount": -40}]
    results = {m["content"] for m in tool_messages(stub.requests[1])}
    assert "charged -40 on A-1" in results
    with pytest.raises(tether.AlreadyResumed):
        agent.resume("a1", Resume(approved=True))


def test_a_denied_tool_does_not_run_and_the_model_is_told_the_note(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script([{"tool_calls": [call("refund", order_id="A-1", amount=900)]}, {"text": "Sorry."}])
    agent = durable(stub.url, store)
    assert agent.run("Refund 900", execution_id="d1").status == "paused"
    done = agent.resume("d1", Resume(approved=False, metadata={"note": "over the limit"}))
    assert done.status == "completed" and done.output == "Sorry."
    assert logs.ran("refund") == [] and logs.charges() == []
    assert [m["content"] for m in tool_messages(stub.requests[1])] == ["over the limit"]


def test_two_approvals_of_one_turn_are_asked_one_at_a_time_in_call_order(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {
                "tool_calls": [
                    call("refund", order_id="A-1", amount=10),
                    call("refund", order_id="B-2", amount=20),
                ]
            },
            {"text": "Done."},
        ]
    )
    agent = durable(stub.url, store)
    first = agent.run("Refund both", execution_id="t1")
    assert first.pending_interrupt is not None
    assert first.pending_interrupt["context"]["args"] == {"order_id": "A-1", "amount": 10}
    second = agent.resume("t1", Resume(approved=True))
    assert second.status == "paused" and second.pending_interrupt is not None
    assert second.pending_interrupt["context"]["args"] == {"order_id": "B-2", "amount": 20}
    assert logs.ran("refund") == []  # nothing runs until every call of the turn is answered
    done = agent.resume("t1", Resume(approved=False, data="not this one"))
    assert done.status == "completed"
    assert [r["order_id"] for r in logs.ran("refund")] == ["A-1"]
    contents = sorted(str(m["content"]) for m in tool_messages(stub.requests[1]))
    assert contents == ["charged -10 on A-1", "not this one"]
    assert len(stub.requests) == 2


def test_interrupt_inside_a_tool_pauses_and_the_tool_runs_again_with_the_answer(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1"), call("escalate", order_id="A-1")]},
            {"text": "The manager agreed."},
        ]
    )
    agent = durable(stub.url, store)
    paused = agent.run("Escalate A-1", execution_id="i1")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["reason"] == "manager_review"
    assert paused.pending_interrupt["context"] == {"order_id": "A-1"}
    assert paused.pending_interrupt["node_id"] == "turn:0/tool:escalate"
    # The call beside it finished and was journaled before the pause.
    assert [r["tool"] for r in logs.ran()] == ["lookup"]
    done = agent.resume("i1", Resume(approved=True, data="refund it"))
    assert done.status == "completed", done.error
    assert [r["tool"] for r in logs.ran()] == ["lookup", "escalate"]
    assert logs.ran("escalate")[0]["note"] == "refund it"
    assert "manager says: refund it" in {m["content"] for m in tool_messages(stub.requests[1])}


def test_an_external_tool_call_takes_its_result_from_the_answer(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script([{"tool_calls": [call("courier", order_id="A-1")]}, {"text": "Booked."}])
    agent = durable(stub.url, store)
    paused = agent.run("Book a courier", execution_id="x1")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["reason"] == "external_tool_call"
    assert paused.pending_interrupt["context"]["metadata"] == {"queue": "couriers"}
    done = agent.resume("x1", Resume(approved=True, data={"booking": "CR-7"}))
    assert done.status == "completed"
    assert [m["content"] for m in tool_messages(stub.requests[1])] == ['{"booking":"CR-7"}']


def test_a_failed_model_request_fails_the_run_and_resume_repeats_no_completed_step(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("pack", order_id="A-1"), call("flaky", order_id="retry-1")]},
            {"status": 400, "error": "context too long"},
        ]
    )
    agent = durable(stub.url, store)
    failed = agent.run("Pack A-1", execution_id="f1")
    assert failed.status == "failed"
    assert "context too long" in str(failed.error)
    run = store.get_run("f1")
    assert run is not None and run.status == "failed"
    stub.script([{"text": "Packed."}])
    done = agent.resume("f1")
    assert done.status == "completed", done.error
    # The first request, the packing, its charge and the tool's retry are not repeated.
    assert len(stub.requests) == 3
    assert [r["tool"] for r in logs.ran()].count("pack") == 1
    assert len(logs.ran("flaky")) == 1
    assert len(logs.charges()) == 1
    retried = [m for m in tool_messages(stub.requests[2]) if "retry-" in str(m["content"])]
    assert retried, "the journaled retry reached the model again on resume"


def test_fork_from_a_tool_row_keeps_the_steps_before_and_runs_the_rest_live(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1")]},
            {"tool_calls": [call("pack", order_id="A-1")]},
            {"text": "Packed."},
        ]
    )
    agent = durable(stub.url, store)
    assert agent.run("Pack A-1", execution_id="o1").status == "completed"
    original = rows(store, "o1")
    lookup_row = next(cp for cp in store.list("o1") if cp.node_id == "turn:0/tool:lookup")
    stub.script([{"text": "Not packing after all."}])
    branch = agent.fork("o1", lookup_row.checkpoint_id, new_execution_id="o1-b")
    assert branch.status == "completed" and branch.output == "Not packing after all."
    assert len(stub.requests) == 4  # only the request after the lookup, once
    assert len(logs.ran("lookup")) == 1 and len(logs.ran("pack")) == 1
    assert rows(store, "o1") == original
    first = store.list("o1-b")[0]
    assert first.step_type == "fork_origin"
    assert first.parent_checkpoint_id == lookup_row.checkpoint_id
    run = store.get_run("o1-b")
    assert run is not None and run.parent_execution_id == "o1"


def test_fork_of_a_paused_run_with_an_answer_approves_in_the_branch_only(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script([{"tool_calls": [call("refund", order_id="A-1", amount=5)]}, {"text": "Done."}])
    agent = durable(stub.url, store)
    assert agent.run("Refund", execution_id="p1").status == "paused"
    branch = agent.fork("p1", resume_value=Resume(approved=True), new_execution_id="p1-b")
    assert branch.status == "completed"
    assert logs.charges() == [{"order_id": "A-1", "amount": -5}]
    still = store.get_pending_interrupt("p1")
    assert still is not None and still.resume_value is None
    assert len(stub.requests) == 2


def test_resume_with_code_that_asks_for_other_steps_fails_with_replay_diverged_and_keeps_rows(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script(
        [
            {"tool_calls": [call("lookup", order_id="A-1")]},
            {"tool_calls": [call("pack", order_id="A-1")]},
            {"status": 400, "error": "rejected"},
        ]
    )
    assert durable(stub.url, store).run("Pack A-1", execution_id="v1").status == "failed"
    before = rows(store, "v1")
    # The same runner name, other code: a history processor now sends only the last message,
    # so the second request the journal recorded is not the one this code sends.
    changed = support_agent(stub.url, capabilities=[ProcessHistory(lambda m: m[-1:])])
    result = TetherAgent(changed, checkpointer=store).resume("v1")
    assert result.status == "failed"
    assert isinstance(result.error, ReplayDivergedError)
    assert result.error.key == "model:1"
    assert rows(store, "v1") == [*before, ("run_end", "run_end", "failed")]
    assert len(stub.requests) == 3  # nothing was sent for the diverged step
    assert len(logs.ran()) == 2


def test_a_tether_agent_is_a_runner_a_registry_resolves_for_its_runs(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script([{"tool_calls": [call("refund", order_id="A-1", amount=5)]}])
    agent = durable(stub.url, store)
    assert agent.run("Refund", execution_id="g1").status == "paused"
    app = Registry(agent)
    assert app.for_run(store, "g1") is agent
    with pytest.raises(tether.RunNotFoundError):
        agent.resume("nope")
    with pytest.raises(tether.ChainResumeError):
        agent.resume("g1")
    with pytest.raises(tether.ChainResumeError):
        agent.resume("g1", True)  # type: ignore[arg-type]
    with pytest.raises(tether.ConfigurationError):
        agent.fork("g1", state_updates={"x": 1})
    pending = store.get_pending_interrupt("g1")
    assert pending is not None and pending.resume_value is None


def test_streaming_verbs_are_refused_with_a_clear_error(store, stub: StubServer) -> None:
    agent = durable(stub.url, store)
    for verb in ("run_stream", "run_stream_events", "iter", "run_sync"):
        with pytest.raises(tether.ConfigurationError, match="TetherAgent"):
            getattr(agent, verb)("hello")
    assert stub.requests == []


def test_a_tether_agent_needs_a_name_and_a_pydantic_ai_agent(stub: StubServer) -> None:
    from pydantic_ai import Agent

    from tests.integrations.pydantic_ai.agents import model

    with pytest.raises(tether.ConfigurationError, match="name"):
        TetherAgent(Agent(model(stub.url)))
    with pytest.raises(tether.ConfigurationError, match=r"pydantic_ai\.Agent"):
        TetherAgent(object())  # type: ignore[arg-type]
    assert TetherAgent(Agent(model(stub.url)), name="named").name == "named"


def test_an_event_stream_handler_gets_each_live_model_stream_once_across_a_pause(
    store, stub: StubServer, logs: Logs
) -> None:
    from pydantic_ai.messages import (
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
        ToolCallPart,
    )

    events: list[object] = []

    async def handler(ctx: object, stream: AsyncIterable[object]) -> None:
        async for event in stream:
            events.append(event)

    def text_of(found: list[object]) -> str:
        out = ""
        for e in found:
            if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart):
                out += e.part.content
            elif isinstance(e, PartDeltaEvent) and isinstance(e.delta, TextPartDelta):
                out += e.delta.content_delta
        return out

    def tool_parts(found: list[object]) -> list[str]:
        return [
            e.part.tool_name
            for e in found
            if isinstance(e, PartStartEvent) and isinstance(e.part, ToolCallPart)
        ]

    stub.script(
        [
            {"tool_calls": [call("refund", order_id="A-1", amount=3)]},
            {"text": "Refunded A-1 today."},
        ]
    )
    agent = durable(stub.url, store)
    paused = agent.run("Refund A-1", execution_id="s1", event_stream_handler=handler)
    assert paused.status == "paused"
    assert tool_parts(events) == ["refund"]
    events.clear()
    done = agent.resume("s1", Resume(approved=True), event_stream_handler=handler)
    assert done.status == "completed" and done.output == "Refunded A-1 today."
    # The resumed drive streams what it ran: the answer, not turn 0 again.
    assert text_of(events) == "Refunded A-1 today."
    assert tool_parts(events) == []
    assert [bool(body.get("stream")) for body in stub.requests] == [True, True]
    assert len(logs.ran("refund")) == 1


def test_an_approval_with_override_args_runs_the_tool_with_those_arguments(
    store, stub: StubServer, logs: Logs
) -> None:
    stub.script([{"tool_calls": [call("refund", order_id="A-1", amount=900)]}, {"text": "Done."}])
    agent = durable(stub.url, store)
    assert agent.run("Refund 900", execution_id="ov1").status == "paused"
    answer = Resume(approved=True, data={"override_args": {"order_id": "A-1", "amount": 500}})
    assert agent.resume("ov1", answer).status == "completed"
    assert logs.charges() == [{"order_id": "A-1", "amount": -500}]


def test_interrupt_in_an_output_validator_pauses_the_run_and_the_answer_lets_it_finish(
    store, stub: StubServer, logs: Logs
) -> None:
    agent = support_agent(stub.url)

    @agent.output_validator
    def manager_signs(output: str) -> str:
        answer = tether.interrupt("sign_off", {"draft": output})
        return f"{output} (signed: {answer.data})"

    stub.script([{"tool_calls": [call("lookup", order_id="A-1")]}, {"text": "It shipped."}])
    durable_agent = TetherAgent(agent, checkpointer=store)
    paused = durable_agent.run("Where is A-1?", execution_id="ov2")
    assert paused.status == "paused" and paused.pending_interrupt is not None
    assert paused.pending_interrupt["reason"] == "sign_off"
    assert paused.pending_interrupt["context"] == {"draft": "It shipped."}
    assert paused.pending_interrupt["node_id"] == "turn:1"
    done = durable_agent.resume("ov2", Resume(approved=True, data="Ana"))
    assert done.status == "completed" and done.output == "It shipped. (signed: Ana)"
    assert len(stub.requests) == 2 and len(logs.ran("lookup")) == 1


def test_a_drive_given_no_deps_gets_them_from_deps_factory(store, stub: StubServer) -> None:
    from pydantic_ai import Agent

    from tests.integrations.pydantic_ai.agents import model

    agent = Agent(model(stub.url), name="desk", deps_type=dict)
    seen: list[str] = []

    @agent.tool
    def whoami(ctx: RunContext[dict[str, str]]) -> str:
        seen.append(ctx.deps["user"])
        return ctx.deps["user"]

    @agent.tool_plain(requires_approval=True)
    def act() -> str:
        return "acted"

    desk = TetherAgent(agent, checkpointer=store, deps_factory=lambda: {"user": "from-factory"})
    stub.script(
        [
            {"tool_calls": [{"name": "whoami", "arguments": {}}, {"name": "act", "arguments": {}}]},
            {"tool_calls": [{"name": "whoami", "arguments": {}}]},
            {"text": "ok"},
        ]
    )
    assert desk.run("go", execution_id="dp1", deps={"user": "given"}).status == "paused"
    assert desk.resume("dp1", Resume(approved=True)).status == "completed"
    # The first call is answered from the journal; the one after the resume saw the factory's.
    assert seen == ["given", "from-factory"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_provider_api_key_never_reaches_the_store(
    store, stub: StubServer, logs: Logs, tmp_path, backend: str
) -> None:
    from tests.integrations.pydantic_ai.agents import API_KEY

    stub.script([{"tool_calls": [call("refund", order_id="A-1", amount=5)]}, {"text": "Done."}])
    agent = durable(stub.url, store)
    assert agent.run("Refund", execution_id="key1").status == "paused"
    assert agent.resume("key1", Resume(approved=True)).status == "completed"
    assert stub.log[0].headers["authorization"] == f"Bearer {API_KEY}"
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("tether.db*"))
    assert b"tool_approval" in stored or b"refund" in stored  # the file holds the run
    assert API_KEY.encode() not in stored
    # Compressed states hold no plain text: look in every row as read back, too.
    rows_read = [
        (cp.state_snapshot, cp.node_input, cp.node_output, cp.interrupt_context)
        for cp in store.list("key1")
    ]
    run = store.get_run("key1")
    assert API_KEY not in repr((rows_read, run.input if run else None))
