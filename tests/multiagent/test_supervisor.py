"""Supervisor rows, delegations, workers that pause one after another, fork and registry —
over every backend, in process, with the deterministic model doubles."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.agent.agents import tool_log
from tests.multiagent.topologies import make_supervisor
from tether.agent import Agent
from tether.agent.supervisor import Supervisor, Worker
from tether.errors import AlreadyResumed, ChainResumeError, ConfigurationError
from tether.interrupt import Resume
from tether.registry import Registry
from tether.testing import ScriptedLLM


def delegate(role: str, task: str) -> dict[str, Any]:
    return {"name": f"delegate_to_{role}", "arguments": {"task": task}}


LOOKUP = {"name": "lookup", "arguments": {"order_id": "A-1"}}
APPROVE = {"name": "approve", "arguments": {"amount": 900}}
SIGN_OFF = {"name": "sign_off", "arguments": {"item": "refund A-1"}}


def rows(store: Any, eid: str) -> list[tuple[str, str, str | None]]:
    return [(c.node_id, c.status, c.agent_path) for c in store.list(eid)]


def models(
    boss: list[Any],
    research: Sequence[Any] = (),
    approve: Sequence[Any] = (),
    audit: Sequence[Any] = (),
) -> dict[str, ScriptedLLM]:
    return {
        "boss": ScriptedLLM(boss),
        "research": ScriptedLLM(list(research)),
        "approve": ScriptedLLM(list(approve)),
        "audit": ScriptedLLM(list(audit)),
    }


async def test_worker_rows_nest_under_the_supervisor_and_one_run_end(store: Any) -> None:
    llms = models([[delegate("research", "find A-1")], "A-1 shipped"], [[LOOKUP], "shipped"])
    result = await make_supervisor(llms, store).arun("where is A-1?", execution_id="p1")
    assert result.status == "completed" and result.output == "A-1 shipped"
    assert rows(store, "p1") == [
        ("turn:0", "completed", "supervisor:boss"),
        (
            "turn:0/tool:delegate_to_research",
            "completed",
            "supervisor:boss/tool:delegate_to_research",
        ),
        ("turn:0", "completed", "supervisor:boss/worker:research"),
        ("turn:0/tool:lookup", "completed", "supervisor:boss/worker:research/tool:lookup"),
        ("turn:1", "completed", "supervisor:boss/worker:research"),
        ("turn:1", "completed", "supervisor:boss"),
        ("run_end", "completed", "supervisor:boss"),
    ]
    # The worker saw its own prompt and the task only; its answer is the delegation's result.
    assert [m["role"] for m in llms["research"].calls[0]] == ["system", "user"]
    assert llms["research"].calls[0][1]["content"] == "find A-1"
    assert llms["boss"].calls[1][-1]["content"] == "shipped"
    run = store.get_run("p1")
    assert (run.runner_name, run.runner_kind, run.status) == ("boss", "supervisor", "completed")


async def test_worker_a_done_worker_b_paused_resume_answers_b_without_rerunning_a(
    store: Any, _tool_log: Path
) -> None:
    llms = models(
        [[delegate("research", "find A-1")], [delegate("approve", "approve 900")], "refunded"],
        research=[[LOOKUP], "shipped"],
        approve=[[APPROVE], "approved"],
    )
    boss = make_supervisor(llms, store)
    paused = await boss.arun("refund A-1", execution_id="p2")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["agent_path"] == "supervisor:boss/worker:approve/tool:approve"
    with pytest.raises(ChainResumeError):
        await boss.aresume("p2")
    done = await boss.aresume("p2", Resume(approved=True))
    assert done.status == "completed" and done.output == "refunded"
    # A ran once, the supervisor was asked 3 times in all (never again for a delegation made).
    assert llms["research"].call_count == 2 and llms["boss"].call_count == 3
    assert llms["approve"].call_count == 2
    assert [c["tool"] for c in tool_log(str(_tool_log))] == ["lookup", "approve", "approve"]
    assert llms["approve"].calls[1][-1]["content"] == "approved"
    assert llms["boss"].calls[2][-1]["content"] == "approved"
    with pytest.raises(AlreadyResumed):
        await boss.aresume("p2", Resume(approved=True))


async def test_answer_for_b_does_not_answer_c_which_pauses_again(store: Any) -> None:
    # One turn delegates to both: B (approve) pauses first; C (audit) asks after B is answered.
    llms = models(
        [[delegate("approve", "approve 900"), delegate("audit", "sign off A-1")], "all done"],
        approve=[[APPROVE], "approved"],
        audit=[[SIGN_OFF], "signed off"],
    )
    boss = make_supervisor(llms, store)
    first = await boss.arun("refund A-1", execution_id="p3")
    assert first.pending_interrupt is not None
    assert first.pending_interrupt["reason"] == "manager_approval"
    second = await boss.aresume("p3", Resume(approved=True, data="for B"))
    assert second.status == "paused"
    assert second.pending_interrupt == {
        "reason": "audit_sign_off",
        "context": {"item": "refund A-1"},
        "node_id": "turn:0/tool:sign_off",
        "agent_path": "supervisor:boss/worker:audit/tool:sign_off",
        "checkpoint_id": store.get_pending_interrupt("p3").checkpoint_id,
    }
    assert store.get_pending_interrupt("p3").reason == "audit_sign_off"
    # The approver's answer was B's only; a scoped resume for B finds nothing pending now.
    with pytest.raises(AlreadyResumed):
        await boss.aresume("p3", Resume(approved=True), agent_path="supervisor:boss/worker:approve")
    done = await boss.aresume(
        "p3", Resume(approved=False), agent_path="supervisor:boss/worker:audit"
    )
    assert done.status == "completed" and done.output == "all done"
    assert llms["boss"].call_count == 2 and llms["approve"].call_count == 2
    tool_messages = [m for m in llms["boss"].calls[1] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["approved", "signed off"]
    assert llms["audit"].calls[1][-1]["content"] == "refused"


async def test_finished_supervisor_refuses_resume_and_forks_with_its_own_run_end(
    store: Any,
) -> None:
    llms = models(
        [[delegate("research", "find A-1")], "A-1 shipped", "A-1 shipped (branch)"],
        research=[[LOOKUP], "shipped"],
    )
    boss = make_supervisor(llms, store)
    await boss.arun("where is A-1?", execution_id="p4")
    with pytest.raises(AlreadyResumed):
        await boss.aresume("p4")
    branch = await boss.afork("p4")
    assert branch.status == "completed" and branch.output == "A-1 shipped (branch)"
    assert branch.execution_id != "p4"
    assert llms["research"].call_count == 2
    ends = [c for c in store.list(branch.execution_id) if c.step_type == "run_end"]
    assert len(ends) == 1 and ends[0].status == "completed"
    assert store.get_run(branch.execution_id).parent_execution_id == "p4"
    assert [c.step_type for c in store.list("p4")].count("run_end") == 1


async def test_fork_from_a_worker_pause_branches_inside_the_worker(store: Any) -> None:
    llms = models(
        [[delegate("approve", "approve 900")], "refused", "approved"],
        approve=[[APPROVE], "no", "yes"],
    )
    boss = make_supervisor(llms, store)
    await boss.arun("refund", execution_id="p5")
    pause = store.list("p5")[-1]
    branch = await boss.afork("p5", pause.checkpoint_id, resume_value=Resume(approved=False))
    assert branch.status == "completed"
    assert store.get_run("p5").status == "paused"
    assert llms["approve"].calls[-1][-1]["content"] == "rejected"
    assert llms["boss"].call_count == 2


def test_registry_resolves_a_paused_supervisor_run_to_the_supervisor(store: Any) -> None:
    llms = models([[delegate("approve", "approve 900")], "ok"], approve=[[APPROVE], "ok"])
    boss = make_supervisor(llms, store)
    assert boss.run("refund", execution_id="p6").status == "paused"
    workers = [w.agent for w in boss.workers.values()]
    registry = Registry(boss, *workers)
    assert registry.for_run(store, "p6") is boss
    assert registry.for_run(store, "p6").resume("p6", Resume(approved=True)).status == "completed"


async def test_a_failing_worker_fails_the_run_and_resume_reenters_its_tool_not_a_model(
    store: Any, _tool_log: Path
) -> None:
    boom = {"name": "boom", "arguments": {"x": 1}}
    from tests.agent.agents import boom as boom_tool

    worker_llm = ScriptedLLM([[boom]])
    boss_llm = ScriptedLLM([[delegate("w", "do it")]])
    boss = Supervisor(
        "boss2",
        llm=boss_llm,
        workers=[Worker(Agent("w", llm=worker_llm, tools=[boom_tool]), "w", "works")],
        checkpointer=store,
    )
    failed = await boss.arun("go", execution_id="p7")
    assert failed.status == "failed" and "boom 1" in str(failed.error)
    end = store.list("p7")[-1]
    assert (end.step_type, end.status, end.agent_path) == ("run_end", "failed", "supervisor:boss2")
    assert store.get_run("p7").status == "failed"
    again = await boss.aresume("p7")
    assert again.status == "failed"
    # Re-entered at the worker's pre-tool row: the tool again, no model asked again.
    assert worker_llm.call_count == 1 and boss_llm.call_count == 1
    assert [c["arguments"] for c in tool_log(str(_tool_log))] == [{"x": 1}, {"x": 1}]


def test_supervisor_configuration_errors(store: Any) -> None:
    a = Agent("a", llm=ScriptedLLM([]))
    with pytest.raises(ConfigurationError):
        Supervisor("s", llm=ScriptedLLM([]), workers=[])
    with pytest.raises(ConfigurationError):
        Supervisor("s", llm=ScriptedLLM([]), workers=[Worker(a, "x", ""), Worker(a, "x", "")])
    with pytest.raises(ConfigurationError):
        Supervisor("s", llm=ScriptedLLM([]), workers=[Worker(a, "bad role", "")])
    with pytest.raises(ConfigurationError):
        Supervisor("s/t", llm=ScriptedLLM([]), workers=[Worker(a, "x", "")])
