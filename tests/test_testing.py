"""``interrupt()`` outside a run names the problem, and ``tether.testing.run_node`` runs one
node with the answers to give it, as a resumed run would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether import (
    Chain,
    ChainResumeError,
    ConfigurationError,
    InterruptOutsideRunError,
    Resume,
    SerializationError,
    TetherError,
    interrupt,
    tool,
)
from tether.testing import NodeRun, Question, arun_node, run_node


def review(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt("manager_approval", {"amount": state["amount"]})
    return {"approved": answer.approved}


def two_questions(state: dict[str, Any]) -> dict[str, Any]:
    first = interrupt("manager", {"amount": state["amount"]})
    second = interrupt("finance", {"manager_said": first.approved, "note": first.data})
    return {"manager": first.approved, "finance": second.approved, "asked": state["asked"] + 2}


async def async_review(state: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    answer = interrupt("async_approval", {"amount": state["amount"]})
    return {"approved": answer.approved}


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order."""
    if amount > 500 and not interrupt("approve_refund", {"order_id": order_id}).approved:
        return "declined"
    return f"refunded {amount}"


def test_interrupt_called_outside_a_run_names_the_call_and_the_way_to_test_it() -> None:
    with pytest.raises(InterruptOutsideRunError) as caught:
        review({"amount": 900})
    error = caught.value
    assert isinstance(error, TetherError) and isinstance(error, Exception)
    assert error.reason == "manager_approval"
    message = str(error)
    assert "interrupt('manager_approval')" in message and "outside a tether run" in message
    assert "tether.testing.run_node" in message


def test_a_tool_called_directly_that_asks_raises_the_same_error() -> None:
    with pytest.raises(InterruptOutsideRunError, match="approve_refund"):
        refund("A-1", 900)
    assert refund("A-1", 100) == "refunded 100"  # a call that does not ask still works


def test_run_node_without_answers_reports_the_question_where_a_run_would_pause() -> None:
    asked = run_node(review, {"amount": 900})
    assert asked == NodeRun(
        "paused",
        None,
        {"amount": 900},
        Question("manager_approval", {"amount": 900}, 0),
        answers_used=0,
    )


def test_run_node_with_an_answer_completes_with_the_updates_and_the_merged_state() -> None:
    state = {"amount": 900}
    done = run_node(review, state, answers=Resume(approved=True))
    assert done.status == "completed" and done.question is None
    assert done.updates == {"approved": True}
    assert done.state == {"amount": 900, "approved": True}
    assert done.answers_used == 1
    assert state == {"amount": 900}  # the caller's dict is not touched


def test_run_node_answers_several_questions_in_order_and_pauses_at_the_first_unanswered() -> None:
    state = {"amount": 900, "asked": 0}
    first = run_node(two_questions, state, answers=[Resume(approved=True, data="ok")])
    assert first.status == "paused" and first.answers_used == 1
    assert first.question == Question("finance", {"manager_said": True, "note": "ok"}, 1)
    done = run_node(two_questions, state, answers=[Resume(approved=True), Resume(approved=False)])
    assert done.status == "completed" and done.answers_used == 2
    assert done.updates == {"manager": True, "finance": False, "asked": 2}


def test_run_node_gives_the_answers_a_resumed_run_gives(store: Any) -> None:
    chain = Chain("asks_twice", store)
    chain.add_node("decide", two_questions)
    answers = [Resume(approved=True, data="ok"), Resume(approved=False)]
    run = chain.run({"amount": 900, "asked": 0}, execution_id="twice")
    for answer in answers:
        assert run.status == "paused"
        run = chain.resume("twice", answer)
    assert run.status == "completed"
    alone = run_node(two_questions, {"amount": 900, "asked": 0}, answers=answers)
    assert alone.state == run.output


def test_run_node_runs_an_async_node_from_sync_code() -> None:
    assert run_node(async_review, {"amount": 1}).question == Question(
        "async_approval", {"amount": 1}, 0
    )
    assert run_node(async_review, {"amount": 1}, answers=[Resume(approved=False)]).updates == {
        "approved": False
    }


async def test_arun_node_runs_sync_and_async_nodes_inside_an_event_loop() -> None:
    assert (await arun_node(async_review, {"amount": 2})).status == "paused"
    done = await arun_node(review, {"amount": 2}, answers=[Resume(approved=True)])
    assert done.updates == {"approved": True}
    with pytest.raises(ConfigurationError, match="inside a running event loop"):
        run_node(review, {"amount": 2})


def test_run_node_tests_a_tool_that_asks_through_a_node() -> None:
    asked = run_node(lambda s: {"out": refund("A-1", 900)}, {})
    assert asked.question == Question("approve_refund", {"order_id": "A-1"}, 0)
    done = run_node(lambda s: {"out": refund("A-1", 900)}, {}, answers=[Resume(approved=True)])
    assert done.updates == {"out": "refunded 900"}


def test_run_node_refuses_what_a_run_would_refuse() -> None:
    with pytest.raises(ConfigurationError, match="returned str"):
        run_node(lambda s: "not a dict", {})
    with pytest.raises(ChainResumeError, match=r"must be a tether\.Resume"):
        run_node(review, {"amount": 1}, answers=[True])  # type: ignore[list-item]
    with pytest.raises(SerializationError):
        run_node(lambda s: {"x": interrupt("bad", {"sock": object()})}, {})


def per_item(state: dict[str, Any]) -> dict[str, Any]:
    verdicts = {}
    for item in state["items"]:
        verdicts[item] = interrupt("approve_item", {"item": item}, key=item).approved
    return {"verdicts": verdicts}


def test_run_node_binds_each_answer_to_the_question_it_paused_on_like_a_run(store: Any) -> None:
    state = {"items": ["b", "a"]}
    asked = run_node(per_item, state, answers=[Resume(approved=True)])
    assert asked.status == "paused"
    assert asked.question == Question("approve_item", {"item": "a"}, 1, key="a")
    answers = [Resume(approved=True), Resume(approved=False)]
    alone = run_node(per_item, state, answers=answers)
    assert alone.updates == {"verdicts": {"b": True, "a": False}}

    chain = Chain("items", store)
    chain.add_node("per_item", per_item)
    run = chain.run(state, execution_id="items")
    for answer in answers:
        run = chain.resume("items", answer)
    assert run.status == "completed" and run.output == alone.state
