"""Answers bound to their question inside agent tools, alone and nested (a supervisor's worker,
a swarm's agent, an agent as a chain node), and through a fork of an agent row: a tool whose
questions come in another order on re-execution pauses on the unanswered one and never hands
it another question's approval. Both backends."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.results import question_of
from tether import Agent, Chain, Resume, Supervisor, Swarm, Worker, interrupt
from tether.agent import Tool
from tether.testing import ScriptedLLM

PAY = {"name": "pay", "arguments": {"order_id": "A-1"}}


def _pay_tool(order: list[str], paid: list[str]) -> Tool[Any, Any]:
    def pay(order_id: str) -> str:
        """Pay out an order: a refund to the customer and a wire to the carrier.

        Args:
            order_id: the order.
        """
        answers = {reason: interrupt(reason, {"order_id": order_id}) for reason in order}
        done = [reason for reason in ("refund", "wire") if answers[reason].approved]
        paid.extend(done)
        return f"paid {done}"

    return Tool(pay)


def _agent(store: Any, order: list[str], paid: list[str]) -> Agent:
    return Agent(
        "payer",
        llm=ScriptedLLM([[PAY], "done"], resume_aware=True),
        tools=[_pay_tool(order, paid)],
        checkpointer=store,
    )


def _supervisor(store: Any, order: list[str], paid: list[str]) -> Supervisor:
    boss = ScriptedLLM(
        [[{"name": "delegate_to_pay", "arguments": {"task": "pay A-1"}}], "all paid"],
        resume_aware=True,
    )
    return Supervisor(
        "boss",
        llm=boss,
        workers=[Worker(_agent(store, order, paid), "pay", "pays orders")],
        checkpointer=store,
    )


def _swarm(store: Any, order: list[str], paid: list[str]) -> Swarm:
    triage = Agent(
        "triage",
        llm=ScriptedLLM([[{"name": "transfer_to_payer", "arguments": {}}]], resume_aware=True),
        checkpointer=store,
    )
    payer = _agent(store, order, paid)
    return Swarm("desk", [triage, payer], entrypoint="triage", checkpointer=store)


def _chain(store: Any, order: list[str], paid: list[str]) -> Chain:
    chain = Chain("flow", store)
    chain.add_node("pay", _agent(store, order, paid), input_key="request")
    return chain


RUNNERS: dict[str, Callable[[Any, list[str], list[str]], Agent | Supervisor | Swarm | Chain]] = {
    "agent": _agent,
    "supervisor": _supervisor,
    "swarm": _swarm,
    "chain_node": _chain,
}
INPUT: dict[str, Any] = {"chain_node": {"request": "pay A-1"}}


@pytest.mark.parametrize("kind", sorted(RUNNERS))
def test_a_tool_asking_in_another_order_pauses_on_the_unanswered_question(
    store: Any, kind: str
) -> None:
    order, paid = ["refund", "wire"], list[str]()
    runner = RUNNERS[kind](store, order, paid)
    paused = runner.run(INPUT.get(kind, "pay A-1"))
    assert question_of(paused)["reason"] == "refund"

    order.reverse()  # a redeploy asks about the wire first
    again = runner.resume(paused.execution_id, Resume(True))
    assert again.status == "paused"
    assert question_of(again)["reason"] == "wire"
    assert paid == []
    done = runner.resume(paused.execution_id, Resume(False))
    assert done.status == "completed", done.error
    assert paid == ["refund"]


def test_a_fork_of_an_agent_row_answers_that_rows_question(store: Any) -> None:
    order, paid = ["refund", "wire"], list[str]()
    agent = _agent(store, order, paid)
    eid = agent.run("pay A-1").execution_id
    order.reverse()
    branch = agent.fork(eid, resume_value=Resume(True))  # the refund: the row's question
    assert question_of(branch)["reason"] == "wire"
    # A fork of the branch's own first row with another answer replaces it, not adds one.
    origin = store.list(branch.execution_id)[0]
    again = agent.fork(branch.execution_id, origin.checkpoint_id, resume_value=Resume(False))
    assert question_of(again)["reason"] == "wire"
    done = agent.resume(again.execution_id, Resume(True))
    assert done.status == "completed" and paid == ["wire"]


def test_an_unused_answer_in_a_tool_is_kept_on_the_row_that_commits_it(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    order, paid = ["refund", "wire"], list[str]()
    agent = _agent(store, order, paid)
    eid = agent.run("pay A-1").execution_id
    order.remove("refund")  # the re-executed tool no longer asks about the refund

    def pay_wire_only(order_id: str) -> str:
        """Pay out an order.

        Args:
            order_id: the order.
        """
        answers = {reason: interrupt(reason, {"order_id": order_id}) for reason in order}
        return f"wire {answers['wire'].approved}"

    agent.tools["pay"] = Tool(pay_wire_only, name="pay")
    assert question_of(agent.resume(eid, Resume(True)))["reason"] == "wire"
    with caplog.at_level(logging.WARNING, logger="tether.interrupt"):
        done = agent.resume(eid, Resume(False))
    assert done.status == "completed"
    committing = [
        cp for cp in store.list(eid) if cp.node_output and "unused_answers" in cp.node_output
    ]
    assert len(committing) == 1 and committing[0].node_id == "turn:1"
    (unused,) = committing[0].node_output["unused_answers"]
    assert unused["interrupt"]["reason"] == "refund" and unused["approved"] is True
    assert "refund" in caplog.text
