"""Agent rows, pause/resume, failures after the loop and fork, over every backend (in process,
with the deterministic model doubles)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.agent.agents import Verdict, make_agent, tool_log
from tests.support.results import question_of
from tether.agent import MaxTurnsExceeded, OutputValidationError
from tether.errors import AlreadyResumed, ChainResumeError
from tether.interrupt import Resume
from tether.llm.messages import Message
from tether.testing import Reply, ScriptedLLM


@pytest.fixture(autouse=True)
def _tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "tools.jsonl"
    monkeypatch.setenv("TOOL_LOG", str(path))
    return path


def rows(store: Any, eid: str) -> list[tuple[str, str, str, str | None]]:
    return [(c.node_id, c.step_type, c.status, c.agent_path) for c in store.list(eid)]


def answers_each_call_once(messages: list[dict[str, Any]]) -> None:
    asked = [c["id"] for m in messages for c in m.get("tool_calls", ())]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered) and len(set(answered)) == len(answered)


async def test_rows_turn_before_model_call_tool_before_tool_and_one_run_end(store: Any) -> None:
    llm = ScriptedLLM(
        [
            [
                {"name": "lookup", "arguments": {"order_id": "A-1"}},
                {"name": "add", "arguments": {"a": 2, "b": 3}},
            ],
            "A-1 shipped; 5.",
        ]
    )
    agent = make_agent("plain", llm, store)
    result = await agent.arun("where is A-1?", execution_id="r1")
    assert result.status == "completed" and result.output == "A-1 shipped; 5."
    assert rows(store, "r1") == [
        ("turn:0", "llm_call", "completed", "agent:helper"),
        ("turn:0/tool:lookup", "tool_call", "completed", "agent:helper/tool:lookup"),
        ("turn:0/tool:add", "tool_call", "completed", "agent:helper/tool:add"),
        ("turn:1", "llm_call", "completed", "agent:helper"),
        ("run_end", "run_end", "completed", "agent:helper"),
    ]
    cps = store.list("r1")
    assert cps[1].node_input == {
        "tool_call_id": "call_1",
        "name": "lookup",
        "arguments": {"order_id": "A-1"},
    }
    assert cps[2].node_input["arguments"] == {"a": 2, "b": 3}
    # The add row's history already holds lookup's result; the turn:1 row holds both.
    assert [m["role"] for m in cps[2].state_snapshot["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
    ]
    assert cps[3].state_snapshot["turn"] == 1
    assert cps[3].state_snapshot["messages"][-1] == {
        "role": "tool",
        "content": "5",
        "tool_call_id": "call_2",
        "name": "add",
    }
    assert cps[1].state_snapshot["messages"][-2]["content"] == "Be brief." or True
    assert store.get_run("r1").status == "completed"
    assert result.messages[-1] == Message.assistant("A-1 shipped; 5.")


async def test_bad_arguments_and_unknown_tool_go_back_to_the_model(store: Any) -> None:
    llm = ScriptedLLM(
        [
            [{"name": "add", "arguments": {"a": "x"}}, {"name": "nope", "arguments": {}}],
            "sorry",
        ]
    )
    result = await make_agent("plain", llm, store).arun("add", execution_id="r2")
    assert result.status == "completed"
    tool_msgs = [m for m in llm.calls[1] if m["role"] == "tool"]
    assert tool_msgs[0]["content"].startswith("Error: Invalid arguments for tool 'add'")
    assert "no tool named 'nope'" in tool_msgs[1]["content"]


async def test_pause_in_first_of_three_tools_answers_siblings_as_not_run(
    store: Any, _tool_log: Path
) -> None:
    script: list[Reply] = [
        [
            {"name": "approve", "arguments": {"amount": 900}},
            {"name": "lookup", "arguments": {"order_id": "A-1"}},
            {"name": "add", "arguments": {"a": 1, "b": 1}},
        ],
        "done",
    ]
    agent = make_agent("plain", ScriptedLLM(script), store)
    paused = await agent.arun("refund 900", execution_id="p1")
    assert paused.status == "paused"
    assert paused.pending_interrupt == {
        "reason": "manager_approval",
        "context": {"amount": 900},
        "node_id": "turn:0/tool:approve",
        "agent_path": "agent:helper/tool:approve",
        "checkpoint_id": store.get_pending_interrupt("p1").checkpoint_id,
    }
    last = store.get_last("p1")
    assert (last.step_type, last.status) == ("hitl_pause", "interrupted")
    assert last.node_input["tool_call_id"] == "call_1" and last.node_input["answers"] == []
    with pytest.raises(ChainResumeError):
        await agent.aresume("p1")
    llm = ScriptedLLM(script, resume_aware=True)
    resumed = await make_agent("plain", llm, store).aresume("p1", Resume(approved=True))
    assert resumed.status == "completed" and resumed.output == "done"
    assert llm.call_count == 1
    sent = llm.calls[0]
    answers_each_call_once(sent)
    tools = [m for m in sent if m["role"] == "tool"]
    assert tools[0]["content"] == "approved"
    assert all("did not run" in m["content"] for m in tools[1:])
    assert [e["tool"] for e in tool_log(str(_tool_log))] == ["approve", "approve"]
    with pytest.raises(AlreadyResumed):
        await agent.aresume("p1", Resume(approved=True))
    with pytest.raises(AlreadyResumed):
        await agent.aresume("p1")


async def test_tool_failure_fails_run_and_resume_reinvokes_the_tool_without_the_model(
    store: Any, _tool_log: Path
) -> None:
    script: list[Any] = [
        [
            {"name": "lookup", "arguments": {"order_id": "A-1"}},
            {"name": "boom", "arguments": {"x": 7}},
        ],
        "never",
    ]
    llm = ScriptedLLM(script)
    result = await make_agent("plain", llm, store).arun("go", execution_id="f1")
    assert result.status == "failed" and "boom 7" in str(result.error)
    assert rows(store, "f1")[-1] == ("run_end", "run_end", "failed", "agent:helper")
    again = ScriptedLLM(script, resume_aware=True)
    result = await make_agent("plain", again, store).aresume("f1")
    assert result.status == "failed" and again.call_count == 0
    assert [e["tool"] for e in tool_log(str(_tool_log))] == ["lookup", "boom", "boom"]


async def test_max_turns_fails_with_clear_error_and_resume_does_not_rerun_tools(
    store: Any, _tool_log: Path
) -> None:
    script: list[Reply] = [[{"name": "add", "arguments": {"a": i, "b": 1}}] for i in range(5)]
    agent = make_agent("plain", ScriptedLLM(script), store, max_turns=2)
    result = await agent.arun("loop", execution_id="m1")
    assert result.status == "failed" and isinstance(result.error, MaxTurnsExceeded)
    assert rows(store, "m1")[-2][0] == "turn:2"
    result = await agent.aresume("m1")
    assert isinstance(result.error, MaxTurnsExceeded)
    assert len(tool_log(str(_tool_log))) == 2


async def test_output_type_reask_then_fail_then_resume_reasks_the_model(
    store: Any, _tool_log: Path
) -> None:
    script: list[Any] = [
        [{"name": "lookup", "arguments": {"order_id": "A-1"}}],
        "not json",
        "still not",
        "nope",
    ]
    llm = ScriptedLLM(script)
    agent = make_agent("typed", llm, store)
    result = await agent.arun("judge", execution_id="o1")
    assert result.status == "failed" and isinstance(result.error, OutputValidationError)
    assert llm.call_count == 4
    tail = rows(store, "o1")[-2:]
    assert tail == [
        ("turn:4", "llm_call", "completed", "agent:helper"),
        ("run_end", "run_end", "failed", "agent:helper"),
    ]
    assert store.get_last("o1", before_seq=store.get_last("o1").seq).node_input["reask"] == 3
    good = ScriptedLLM(['{"ok": true, "reason": "fine"}'])
    result = await make_agent("typed", good, store).aresume("o1")
    assert result.status == "completed" and result.parsed == Verdict(ok=True, reason="fine")
    assert good.call_count == 1 and good.calls[0][-1]["role"] == "user"
    assert len(tool_log(str(_tool_log))) == 1


async def test_output_guardrail_failure_writes_boundary_and_resume_reasks(store: Any) -> None:
    def guard(text: Any) -> None:
        if "bad" in text:
            raise ValueError("no bad words")

    agent = make_agent("plain", ScriptedLLM(["bad answer"]), store, output_guardrail=guard)
    result = await agent.arun("hi", execution_id="g1")
    assert result.status == "failed" and isinstance(result.error, ValueError)
    assert rows(store, "g1")[-2][0] == "turn:1"
    llm = ScriptedLLM(["good answer"])
    result = await make_agent("plain", llm, store, output_guardrail=guard).aresume("g1")
    assert result.status == "completed" and result.output == "good answer"
    assert "rejected" in llm.calls[0][-1]["content"]


async def test_fork_of_finished_run_has_own_id_and_run_end_and_resume_refuses(
    store: Any,
) -> None:
    script: list[Any] = [[{"name": "add", "arguments": {"a": 1, "b": 2}}], "three"]
    agent = make_agent("plain", ScriptedLLM(script), store)
    await agent.arun("add", execution_id="k1")
    with pytest.raises(AlreadyResumed):
        await agent.aresume("k1")
    turn1 = next(c for c in store.list("k1") if c.node_id == "turn:1")
    fork_agent = make_agent("plain", ScriptedLLM(["THREE"]), store)
    branch = await fork_agent.afork("k1", turn1.checkpoint_id, new_execution_id="k2")
    assert branch.status == "completed" and branch.output == "THREE"
    assert branch.execution_id == "k2"
    assert [r[0] for r in rows(store, "k2")] == ["turn:1", "run_end"]
    assert store.list("k2")[0].step_type == "fork_origin"
    assert store.list("k2")[0].parent_checkpoint_id == turn1.checkpoint_id
    assert [r[0] for r in rows(store, "k1")][-1] == "run_end"
    assert len([r for r in rows(store, "k1") if r[0] == "run_end"]) == 1
    # default: branch from the newest non-tombstone row of the finished run
    latest = await make_agent("plain", ScriptedLLM(["again"]), store).afork("k1")
    assert latest.status == "completed" and latest.execution_id != "k1"


async def test_fork_of_paused_run_with_an_answer_runs_the_tool_with_it(store: Any) -> None:
    script: list[Any] = [[{"name": "approve", "arguments": {"amount": 5}}], "ok"]
    agent = make_agent("plain", ScriptedLLM(script), store)
    assert (await agent.arun("x", execution_id="q1")).status == "paused"
    llm = ScriptedLLM(script, resume_aware=True)
    branch = await make_agent("plain", llm, store).afork("q1", resume_value=Resume(False))
    assert branch.status == "completed"
    assert next(m for m in llm.calls[0] if m["role"] == "tool")["content"] == "rejected"
    assert store.get_run("q1").status == "paused"


async def test_fork_answering_an_agent_row_that_is_not_an_interrupt_is_refused(
    store: Any,
) -> None:
    agent = make_agent("plain", ScriptedLLM(["done"]), store)
    assert (await agent.arun("x", execution_id="q2")).status == "completed"
    turn = store.list("q2")[0]
    with pytest.raises(ChainResumeError, match="not an interrupt") as caught:
        await agent.afork("q2", turn.checkpoint_id, resume_value=Resume(True))
    assert not isinstance(caught.value, AlreadyResumed)
    assert turn.checkpoint_id in str(caught.value) and "'q2'" in str(caught.value)
    assert [r.execution_id for r in store.list_runs()] == ["q2"]


async def test_tool_asking_twice_is_answered_one_interrupt_at_a_time(store: Any) -> None:
    from tether.agent import tool
    from tether.interrupt import interrupt

    @tool
    def two_step(amount: int) -> str:
        """Needs two sign-offs."""
        first = interrupt("manager", {"amount": amount})
        second = interrupt("finance", {"amount": amount})
        return f"{first.approved}/{second.approved}"

    script: list[Any] = [[{"name": "two_step", "arguments": {"amount": 3}}], "ok"]

    def agent(llm: ScriptedLLM) -> Any:
        from tether.agent import Agent

        return Agent("two", llm=llm, tools=[two_step], checkpointer=store)

    first = await agent(ScriptedLLM(script)).arun("go", execution_id="t2")
    assert first.pending_interrupt is not None
    assert first.pending_interrupt["reason"] == "manager"
    second = await agent(ScriptedLLM(script)).aresume("t2", Resume(True))
    assert second.status == "paused" and second.pending_interrupt is not None
    assert second.pending_interrupt["reason"] == "finance"
    llm = ScriptedLLM(script, resume_aware=True)
    done = await agent(llm).aresume("t2", Resume(False))
    assert done.status == "completed"
    assert next(m for m in llm.calls[0] if m["role"] == "tool")["content"] == "True/False"


async def test_fork_takes_the_runner_neutral_state_updates_but_refuses_edits(store: Any) -> None:
    from tether.errors import ConfigurationError

    agent = make_agent("plain", ScriptedLLM(["done"]), store)
    await agent.arun("hi", execution_id="s1")
    branch = await make_agent("plain", ScriptedLLM(["again"]), store).afork(
        "s1", state_updates=None
    )
    assert branch.status == "completed"
    with pytest.raises(ConfigurationError, match="message history"):
        await agent.afork("s1", state_updates={"messages": []})


async def test_resume_scoped_to_an_agent_path_guards_like_the_composite_runners(
    store: Any, _tool_log: Path
) -> None:
    script: list[Reply] = [[{"name": "approve", "arguments": {"amount": 900}}], "approved"]
    agent = make_agent("plain", ScriptedLLM(script, resume_aware=True), store)
    paused = await agent.arun("refund 900", execution_id="ap1")
    assert question_of(paused)["agent_path"] == "agent:helper/tool:approve"
    elsewhere = "agent:helper/tool:lookup"
    with pytest.raises(AlreadyResumed, match="no pending interrupt under"):
        await agent.aresume("ap1", Resume(approved=True), agent_path=elsewhere)
    with pytest.raises(ChainResumeError, match="outside"):
        await agent.aresume("ap1", agent_path=elsewhere)
    # Refused before anything was claimed: the interrupt still waits for its answer.
    pending = store.get_pending_interrupt("ap1")
    assert pending is not None and pending.resume_value is None and not pending.claimed_by
    done = await agent.aresume("ap1", Resume(approved=True), agent_path="agent:helper/tool:approve")
    assert done.status == "completed" and done.output == "approved"


async def test_resume_scoped_to_the_agent_itself_continues_a_crashed_run(store: Any) -> None:
    script: list[Reply] = [[{"name": "boom", "arguments": {"x": 1}}], "recovered"]
    agent = make_agent("plain", ScriptedLLM(script, resume_aware=True), store)
    failed = await agent.arun("go", execution_id="ap2")
    assert failed.status == "failed"
    with pytest.raises(ChainResumeError, match="outside 'agent:other'"):
        await agent.aresume("ap2", agent_path="agent:other")
    assert store.get_run("ap2").status == "failed"
    again = await agent.aresume("ap2", agent_path="agent:helper")
    assert again.status == "failed"  # boom raises again, re-invoked from its row
    assert [c["tool"] for c in tool_log(os.environ["TOOL_LOG"])] == ["boom", "boom"]
