"""A chain whose nodes are an Agent, a Swarm or a Supervisor: one run, nested rows, pause and
resume inside the node, then on to the next node — over every backend, in process."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.agents import approve, lookup
from tests.multiagent.topologies import make_supervisor, make_swarm
from tether.agent import Agent
from tether.chain import Chain
from tether.errors import AlreadyResumed
from tether.interrupt import Resume
from tether.registry import Registry
from tether.testing import ScriptedLLM

APPROVE = {"name": "approve", "arguments": {"amount": 900}}
LOOKUP = {"name": "lookup", "arguments": {"order_id": "A-1"}}


def make_chain(store: Any, node: Any, seen: list[dict[str, Any]]) -> Chain:
    def prepare(state: dict[str, Any]) -> dict[str, Any]:
        return {"input": f"refund {state['order']}"}

    def notify(state: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(state))
        return {"notified": True}

    chain = Chain("support", store)
    chain.add_node("prepare", prepare)
    chain.add_node("triage", node)
    chain.add_node("notify", notify)
    chain.add_edge("prepare", "triage")
    chain.add_edge("triage", "notify")
    return chain


async def test_agent_node_pauses_and_resume_answers_it_then_the_chain_goes_on(store: Any) -> None:
    llm = ScriptedLLM([[APPROVE], "refund approved"])
    agent = Agent("triager", llm=llm, tools=[approve, lookup], checkpointer=store)
    seen: list[dict[str, Any]] = []
    chain = make_chain(store, agent, seen)
    paused = await chain.arun({"order": "A-1"}, execution_id="c1")
    assert paused.status == "paused"
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["agent_path"] == "agent:triager/tool:approve"
    assert store.get_run("c1").status == "paused" and store.get_run("c1").runner_kind == "chain"
    assert Registry(chain, agent).for_run(store, "c1") is chain
    done = await chain.aresume("c1", Resume(approved=True))
    assert done.status == "completed"
    assert done.output["triage"] == "refund approved" and done.output["notified"] is True
    assert seen == [{"order": "A-1", "input": "refund A-1", "triage": "refund approved"}]
    assert llm.call_count == 2
    cps = store.list("c1")
    assert [(c.node_id, c.agent_path) for c in cps] == [
        ("prepare", None),
        ("turn:0", "agent:triager"),
        ("turn:0/tool:approve", "agent:triager/tool:approve"),
        ("turn:0/tool:approve", "agent:triager/tool:approve"),
        ("turn:1", "agent:triager"),
        ("triage", None),
        ("notify", None),
        ("run_end", None),
    ]
    assert [c.step_type for c in cps].count("run_end") == 1
    assert cps[1].state_snapshot["outer"][0]["node_id"] == "triage"
    with pytest.raises(AlreadyResumed):
        await chain.aresume("c1")


async def test_swarm_node_pauses_in_its_second_agent_and_the_chain_goes_on(store: Any) -> None:
    llms = {
        "triage": ScriptedLLM([[LOOKUP], [{"name": "transfer_to_billing", "arguments": {}}]]),
        "billing": ScriptedLLM([[APPROVE], "refunded"]),
    }
    seen: list[dict[str, Any]] = []
    chain = make_chain(store, make_swarm(llms, store), seen)
    paused = await chain.arun({"order": "A-1"}, execution_id="c2")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["agent_path"] == "swarm:desk/agent:billing/tool:approve"
    done = await chain.aresume("c2", Resume(approved=True), agent_path="swarm:desk/agent:billing")
    assert done.status == "completed" and seen[0]["triage"] == "refunded"
    assert llms["triage"].call_count == 2 and llms["billing"].call_count == 2
    frames = store.list("c2", agent_path_prefix="swarm:desk/agent:billing")[0].state_snapshot
    assert [f["runner"] for f in frames["outer"]] == ["chain", "swarm"]


async def test_supervisor_node_with_a_paused_worker_resumes_inside_the_worker(store: Any) -> None:
    llms = {
        "boss": ScriptedLLM(
            [[{"name": "delegate_to_approve", "arguments": {"task": "approve 900"}}], "done"]
        ),
        "research": ScriptedLLM([]),
        "approve": ScriptedLLM([[APPROVE], "approved"]),
        "audit": ScriptedLLM([]),
    }
    seen: list[dict[str, Any]] = []
    chain = make_chain(store, make_supervisor(llms, store), seen)
    paused = await chain.arun({"order": "A-1"}, execution_id="c3")
    assert paused.pending_interrupt is not None
    assert paused.pending_interrupt["agent_path"] == "supervisor:boss/worker:approve/tool:approve"
    done = await chain.aresume("c3", Resume(approved=True))
    assert done.status == "completed" and seen[0]["triage"] == "done"
    assert llms["boss"].call_count == 2 and llms["approve"].call_count == 2


async def test_chain_fork_from_a_row_inside_an_agent_node(store: Any) -> None:
    llm = ScriptedLLM([[APPROVE], "approved", "rejected"])
    agent = Agent("triager", llm=llm, tools=[approve], checkpointer=store)
    seen: list[dict[str, Any]] = []
    chain = make_chain(store, agent, seen)
    await chain.arun({"order": "A-1"}, execution_id="c4")
    pause = store.list("c4")[-1]
    branch = await chain.afork(
        "c4",
        pause.checkpoint_id,
        state_updates={"order": "B-2"},
        resume_value=Resume(approved=False),
    )
    assert branch.status == "completed"
    # state_updates apply to the state the node started from; the tool saw the branch's answer.
    assert seen == [{"order": "B-2", "input": "refund A-1", "triage": "approved"}]
    assert llm.calls[-1][-1]["content"] == "rejected"
    assert store.get_run("c4").status == "paused"
    first = store.list(branch.execution_id)[0]
    assert first.step_type == "fork_origin" and first.agent_path == "agent:triager/tool:approve"
    assert [c.step_type for c in store.list(branch.execution_id)].count("run_end") == 1
