"""Swarm rows, handoffs, pause/resume inside the second agent, fork, registry, scoped resume —
over every backend, in process, with the deterministic model doubles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.agents import add, approve, lookup, tool_log
from tests.multiagent.topologies import BILLING_PROMPT, make_swarm
from tests.support.results import question_of
from tether.agent import Agent
from tether.agent.swarm import Swarm
from tether.errors import AlreadyResumed, ChainResumeError, ConfigurationError
from tether.interrupt import Resume
from tether.registry import Registry
from tether.testing import ScriptedLLM

LOOKUP = {"name": "lookup", "arguments": {"order_id": "A-1"}}
TRANSFER = {"name": "transfer_to_billing", "arguments": {}}
APPROVE = {"name": "approve", "arguments": {"amount": 900}}


def rows(store: Any, eid: str) -> list[tuple[str, str, str, str | None]]:
    return [(c.node_id, c.step_type, c.status, c.agent_path) for c in store.list(eid)]


def llms(billing: list[Any]) -> dict[str, ScriptedLLM]:
    return {"triage": ScriptedLLM([[LOOKUP], [TRANSFER]]), "billing": ScriptedLLM(billing)}


async def test_handoff_rows_nest_agent_rows_under_the_swarm_and_one_run_end(store: Any) -> None:
    models = llms(["refunded"])
    swarm = make_swarm(models, store)
    result = await swarm.arun("refund A-1", execution_id="s1")
    assert result.status == "completed" and result.output == "refunded"
    assert rows(store, "s1") == [
        ("handoff:0", "handoff", "completed", "swarm:desk"),
        ("turn:0", "llm_call", "completed", "swarm:desk/agent:triage"),
        ("turn:0/tool:lookup", "tool_call", "completed", "swarm:desk/agent:triage/tool:lookup"),
        ("turn:1", "llm_call", "completed", "swarm:desk/agent:triage"),
        (
            "turn:1/tool:transfer_to_billing",
            "tool_call",
            "completed",
            "swarm:desk/agent:triage/tool:transfer_to_billing",
        ),
        ("handoff:1", "handoff", "completed", "swarm:desk"),
        ("turn:0", "llm_call", "completed", "swarm:desk/agent:billing"),
        ("run_end", "run_end", "completed", "swarm:desk"),
    ]
    handoff = store.list("s1")[5]
    assert handoff.node_input == {"from": "triage", "to": "billing"}
    assert handoff.state_snapshot["active"] == "billing"
    assert handoff.state_snapshot["handoffs"] == 1
    # The shared conversation carries no agent's system prompt; billing sees its own.
    assert [m["role"] for m in handoff.state_snapshot["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    asked = models["billing"].calls[0]
    assert asked[0] == {"role": "system", "content": BILLING_PROMPT}
    run = store.get_run("s1")
    assert (run.runner_name, run.runner_kind, run.status) == ("desk", "swarm", "completed")
    # The Agent objects given to the swarm are not changed.
    assert "transfer_to_billing" not in swarm.agents["triage"].tools


async def test_pause_in_second_agent_resumes_there_without_rerunning_the_first(
    store: Any, _tool_log: Path
) -> None:
    models = llms([[APPROVE], "approved and refunded"])
    swarm = make_swarm(models, store)
    paused = await swarm.arun("refund A-1", execution_id="s2")
    assert paused.status == "paused"
    assert paused.pending_interrupt == {
        "reason": "manager_approval",
        "context": {"amount": 900},
        "node_id": "turn:0/tool:approve",
        "agent_path": "swarm:desk/agent:billing/tool:approve",
        "checkpoint_id": store.get_pending_interrupt("s2").checkpoint_id,
    }
    assert store.get_run("s2").status == "paused"
    done = await swarm.aresume("s2", Resume(approved=True))
    assert done.status == "completed" and done.output == "approved and refunded"
    assert models["triage"].call_count == 2 and models["billing"].call_count == 2
    assert [c["tool"] for c in tool_log(str(_tool_log))] == ["lookup", "approve", "approve"]
    assert done.messages[-2].content == "approved"
    with pytest.raises(AlreadyResumed):
        await swarm.aresume("s2")
    assert [c.step_type for c in store.list("s2")].count("run_end") == 1


async def test_resume_scoped_to_a_subtree_refuses_a_pause_elsewhere(store: Any) -> None:
    swarm = make_swarm(llms([[APPROVE], "ok"]), store)
    await swarm.arun("refund A-1", execution_id="s3")
    with pytest.raises(AlreadyResumed):
        await swarm.aresume("s3", Resume(approved=True), agent_path="swarm:desk/agent:triage")
    with pytest.raises(ChainResumeError):
        await swarm.aresume("s3", agent_path="swarm:desk/agent:triage")
    done = await swarm.aresume("s3", Resume(approved=True), agent_path="swarm:desk/agent:billing")
    assert done.status == "completed"


async def test_finished_swarm_refuses_resume_and_forks_into_its_own_run(store: Any) -> None:
    models = llms(["refunded", "refunded again"])
    swarm = make_swarm(models, store)
    await swarm.arun("refund A-1", execution_id="s4")
    with pytest.raises(AlreadyResumed):
        await swarm.aresume("s4")
    branch = await swarm.afork("s4", new_execution_id="s4-b")
    assert branch.status == "completed" and branch.output == "refunded again"
    # Branched from billing's last model call: triage is not asked again.
    assert models["triage"].call_count == 2 and models["billing"].call_count == 2
    branch_rows = rows(store, "s4-b")
    assert branch_rows[0][1] == "fork_origin" and branch_rows[0][3] == "swarm:desk/agent:billing"
    assert branch_rows[-1] == ("run_end", "run_end", "completed", "swarm:desk")
    run = store.get_run("s4-b")
    assert (run.parent_execution_id, run.runner_kind, run.status) == ("s4", "swarm", "completed")
    assert rows(store, "s4")[-1][0] == "run_end" and len(store.list("s4")) == 8


async def test_fork_from_the_pause_with_an_answer_leaves_the_original_paused(store: Any) -> None:
    swarm = make_swarm(llms([[APPROVE], "ok", "ok"]), store)
    await swarm.arun("refund A-1", execution_id="s5")
    pause = store.list("s5")[-1]
    branch = await swarm.afork("s5", pause.checkpoint_id, resume_value=Resume(approved=False))
    assert branch.status == "completed"
    assert branch.messages[-2].content == "rejected"
    assert store.get_run("s5").status == "paused"
    assert (await swarm.aresume("s5", Resume(approved=True))).status == "completed"


def test_registry_resolves_a_paused_swarm_run_to_the_swarm(store: Any) -> None:
    swarm = make_swarm(llms([[APPROVE], "ok"]), store)
    assert swarm.run("refund A-1", execution_id="s6").status == "paused"
    inner = [a for a in swarm.agents.values()]
    registry = Registry(swarm, *inner)
    assert registry.for_run(store, "s6") is swarm
    run = store.get_run("s6")
    assert (run.runner_name, run.runner_kind) == ("desk", "swarm")
    assert registry.for_run(store, "s6").resume("s6", Resume(approved=True)).status == "completed"


async def test_handoff_budget_spent_answers_the_model_instead_of_transferring(store: Any) -> None:
    models = {
        "triage": ScriptedLLM([[TRANSFER], "I will answer myself"]),
        "billing": ScriptedLLM([]),
    }
    swarm = make_swarm(models, store, max_handoffs=0)
    result = await swarm.arun("refund", execution_id="s7")
    assert result.status == "completed" and result.output == "I will answer myself"
    refusal = result.messages[-2].content
    assert refusal is not None and "used all its handoffs" in refusal
    assert models["billing"].call_count == 0


async def test_calls_after_a_transfer_in_the_same_turn_are_answered_as_not_run(store: Any) -> None:
    models = {"triage": ScriptedLLM([[TRANSFER, LOOKUP]]), "billing": ScriptedLLM(["done"])}
    result = await make_swarm(models, store).arun("refund", execution_id="s8")
    assert result.status == "completed"
    tool_messages = [m for m in result.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["call_1", "call_2"]
    assert "did not run" in (tool_messages[1].content or "")


def test_swarm_configuration_errors(store: Any) -> None:
    a = Agent("a", llm=ScriptedLLM([]), checkpointer=store)
    b = Agent("b", llm=ScriptedLLM([]), checkpointer=store)
    with pytest.raises(ConfigurationError):
        Swarm("s", [a, b], entrypoint="c")
    with pytest.raises(ConfigurationError):
        Swarm("s", [a, a], entrypoint="a")
    with pytest.raises(ConfigurationError):
        Swarm("s", [a, b], entrypoint="a", handoffs={"a": ["a"]})
    with pytest.raises(ConfigurationError):
        Swarm("s", [a, Agent("b c", llm=ScriptedLLM([]))], entrypoint="a")
    assert Swarm("s", [a, b], entrypoint="a", handoffs={"a": ["b"]}).handoffs == {
        "a": ["b"],
        "b": ["a"],
    }


def test_fork_takes_the_cli_state_updates_argument_but_refuses_updates(store: Any) -> None:
    swarm = make_swarm(llms(["refunded", "again"]), store)
    swarm.run("refund A-1", execution_id="s9")
    assert swarm.fork("s9", state_updates=None).status == "completed"
    with pytest.raises(ConfigurationError):
        swarm.fork("s9", state_updates={"x": 1})


def resume_aware(billing: list[Any]) -> dict[str, ScriptedLLM]:
    return {
        "triage": ScriptedLLM([[LOOKUP], [TRANSFER]], resume_aware=True),
        "billing": ScriptedLLM(billing, resume_aware=True),
    }


async def test_resume_aware_scripts_count_only_their_own_agents_messages(
    store: Any, _tool_log: Path
) -> None:
    models = resume_aware([[APPROVE], "approved and refunded"])
    paused = await make_swarm(models, store).arun("refund A-1", execution_id="ra1")
    # billing's first answer is its tool call, although triage spoke twice before it.
    assert question_of(paused)["agent_path"] == "swarm:desk/agent:billing/tool:approve"
    # A fresh swarm with fresh scripts, as in a new process, carries on where the run stopped.
    fresh = resume_aware([[APPROVE], "approved and refunded"])
    done = await make_swarm(fresh, store).aresume("ra1", Resume(approved=True))
    assert done.status == "completed" and done.output == "approved and refunded"
    assert fresh["triage"].call_count == 0 and fresh["billing"].call_count == 1
    assert [c["tool"] for c in tool_log(str(_tool_log))] == ["lookup", "approve", "approve"]


async def test_a_swarm_signs_each_agents_messages_in_the_shared_conversation(store: Any) -> None:
    models = resume_aware(["refunded"])
    result = await make_swarm(models, store).arun("refund A-1", execution_id="ra2")
    assert result.status == "completed" and result.output == "refunded"
    handoff = next(c for c in store.list("ra2") if c.node_id == "handoff:1")
    authors = [(m["role"], m.get("name")) for m in handoff.state_snapshot["messages"]]
    assert authors == [
        ("user", None),
        ("assistant", "triage"),
        ("tool", "lookup"),
        ("assistant", "triage"),
        ("tool", "transfer_to_billing"),
    ]


async def test_an_agent_active_twice_continues_its_own_script_after_a_handoff_back(
    store: Any,
) -> None:
    back = {"name": "transfer_to_triage", "arguments": {}}
    add_call = {"name": "add", "arguments": {"a": 2, "b": 3}}

    def build() -> Swarm:
        triage = Agent(
            "triage",
            llm=ScriptedLLM([[LOOKUP], [TRANSFER], [APPROVE], "all done"], resume_aware=True),
            tools=[lookup, approve],
            checkpointer=store,
        )
        billing = Agent(
            "billing",
            llm=ScriptedLLM([[add_call], [back]], resume_aware=True),
            tools=[add],
            checkpointer=store,
        )
        return Swarm("desk", [triage, billing], entrypoint="triage", checkpointer=store)

    paused = await build().arun("refund A-1", execution_id="ra3")
    # triage -> billing -> triage: back in triage, its third answer (approve) comes next.
    assert question_of(paused)["agent_path"] == "swarm:desk/agent:triage/tool:approve"
    done = await build().aresume("ra3", Resume(approved=True))
    assert done.status == "completed" and done.output == "all done"
    handoffs = [c.node_input for c in store.list("ra3") if c.step_type == "handoff"]
    assert handoffs == [
        {"from": None, "to": "triage"},
        {"from": "triage", "to": "billing"},
        {"from": "billing", "to": "triage"},
    ]
