"""Answers are bound to the question they answer, not to the position of an ``interrupt()``
call (docs/design.md §5), on both backends.

A re-executed node that reaches another question first pauses on it; the answers it holds stay
bound to their own questions through further pauses, crashes, fresh processes and forks.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest

from tests.support.answers_app import effects
from tests.support.proc import run_module
from tests.support.results import question_of
from tether import Chain, ChainResult, ChainResumeError, Checkpoint, Resume, RunRecord, interrupt

APP = "tests.support.answers_app"


def _gather_chain(store, order, executed):
    """One node asking two questions at once; ``order[0]`` names the one asked first."""

    async def ask(reason):
        if reason != order[0]:
            await asyncio.sleep(0.05)  # the other question comes first
        return interrupt(reason, {"what": reason})

    async def approve(state):
        refund, wire = await asyncio.gather(ask("refund"), ask("wire"))
        for reason, answer in (("refund", refund), ("wire", wire)):
            if answer.approved:
                executed.append(reason)
        return {"refund": refund.approved, "wire": wire.approved}

    chain = Chain("gather", store)
    chain.add_node("approve", approve)
    return chain


def test_a_question_asked_first_on_re_execution_pauses_and_never_takes_another_answer(store):
    order, executed = ["refund"], list[str]()
    chain = _gather_chain(store, order, executed)
    paused = chain.run({})
    assert paused.pending_interrupt["reason"] == "refund"

    order[0] = "wire"  # the re-execution asks about the wire first
    again = chain.resume(paused.execution_id, Resume(True, metadata={"for": "refund"}))
    assert again.status == "paused"
    assert again.pending_interrupt["reason"] == "wire"  # asked, not answered with the refund's
    assert executed == []
    row = store.get_last(paused.execution_id)
    assert row.node_input["interrupt"] == {"reason": "wire", "key": None, "occurrence": 0}
    kept = row.node_input["answers"]
    assert [(a["interrupt"]["reason"], a["approved"]) for a in kept] == [("refund", True)]

    done = chain.resume(paused.execution_id, Resume(False))
    assert done.status == "completed"
    assert done.output == {"refund": True, "wire": False}
    assert executed == ["refund"]


def test_questions_sharing_a_reason_are_told_apart_by_key_and_repeats_answered_in_order(store):
    """Items asked in a data-dependent order are told apart by ``key=``; one question asked
    twice (same reason, no key) is answered round by round, the first answer first."""
    items = {"order": ["A-1", "B-2", "C-3"]}
    approved_items: list[str] = []

    def approve_items(state):
        answers = {}
        for item in items["order"]:
            answers[item] = interrupt("approve_item", {"item": item}, key=item)
        rounds = [interrupt("confirm", {"round": n}).approved for n in range(2)]
        approved_items.extend(item for item, a in sorted(answers.items()) if a.approved)
        return {"approved": sorted(i for i, a in answers.items() if a.approved), "rounds": rounds}

    chain = Chain("items", store)
    chain.add_node("approve", approve_items)
    eid = chain.run({}).execution_id
    asked = []
    verdicts = {"A-1": True, "B-2": False, "C-3": True, 0: False, 1: True}
    orders = [["C-3", "A-1", "B-2"], ["B-2", "C-3", "A-1"], ["A-1", "B-2", "C-3"]] * 2
    result: ChainResult | None = None
    for order in orders[:5]:
        context = store.get_pending_interrupt(eid).context
        question = context.get("item", context.get("round"))
        asked.append(question)
        items["order"] = order  # the data comes back in another order on every execution
        result = chain.resume(eid, Resume(verdicts[question]))
    assert result is not None and result.status == "completed"
    assert asked == ["A-1", "C-3", "B-2", 0, 1]  # each pause asks the first unanswered one
    assert result.output == {"approved": ["A-1", "C-3"], "rounds": [False, True]}
    assert approved_items == ["A-1", "C-3"]


def test_an_answer_to_a_question_no_longer_asked_is_recorded_unused_and_never_reused(store, caplog):
    asks = {"refund": True}
    seen = []

    def node(state):
        if asks["refund"]:
            seen.append(("refund", interrupt("refund", {}).approved))
        seen.append(("wire", interrupt("wire", {}).approved))
        return {"done": True}

    chain = Chain("path", store)
    chain.add_node("ask", node)
    eid = chain.run({}).execution_id
    asks["refund"] = False  # the re-executed node takes another path
    again = chain.resume(eid, Resume(True))
    assert question_of(again)["reason"] == "wire" and seen == []
    with caplog.at_level(logging.WARNING, logger="tether.interrupt"):
        done = chain.resume(eid, Resume(False))
    assert done.status == "completed" and seen == [("wire", False)]
    row = next(cp for cp in store.list(eid) if cp.node_id == "ask" and cp.status == "completed")
    (unused,) = row.node_output["unused_answers"]
    assert unused["approved"] is True and unused["interrupt"]["reason"] == "refund"
    assert "refund" in caplog.text and eid in caplog.text


def test_a_fork_with_a_resume_value_answers_the_question_of_the_row_it_branches_from(store):
    order, executed = ["refund"], list[str]()
    chain = _gather_chain(store, order, executed)
    eid = chain.run({}).execution_id
    order[0] = "wire"
    branch = chain.fork(eid, resume_value=Resume(True))  # answers "refund", the row's question
    assert branch.status == "paused" and branch.pending_interrupt["reason"] == "wire"
    assert executed == []
    done = chain.resume(branch.execution_id, Resume(True))
    assert done.output == {"refund": True, "wire": True}
    # the source run is untouched: still paused at its own question
    assert store.get_pending_interrupt(eid).reason == "refund"


def test_rows_of_an_older_tether_keep_their_positional_answers(store):
    """An interrupted row without identities (as tether wrote them before) is answered by
    position, as before: its stored answer goes to the first call, the new one to the next; a
    question reached after them pauses with its identity recorded and the old answers kept."""
    calls = []

    def node(state):
        first = interrupt("first", None)
        second = interrupt("second", None)
        third = interrupt("third", None)
        calls.append((first.approved, second.approved, third.approved))
        return {"answers": [first.approved, second.approved, third.approved]}

    chain = Chain("legacy", store)
    chain.add_node("ask", node)
    eid = "legacy-row"
    store.create_run(RunRecord(eid, "legacy", "chain", status="paused", input={}))
    store.record_interrupt(
        Checkpoint(
            execution_id=eid,
            node_id="ask",
            step_type="hitl_pause",
            status="interrupted",
            node_input={
                "answers": [{"approved": False, "data": None, "metadata": {}}],
                "interrupt_index": 1,
            },
            interrupt_reason="second",
            next_node_id="ask",
        )
    )
    again = chain.resume(eid, Resume(True))
    assert question_of(again)["reason"] == "third"
    row = store.get_last(eid).node_input
    assert row["interrupt"] == {"reason": "third", "key": None, "occurrence": 0}
    kept = [("interrupt" in a, a["approved"]) for a in row["answers"]]
    assert kept == [(False, False), (False, True)]  # still positional
    done = chain.resume(eid, Resume(False))
    assert done.status == "completed"
    assert calls == [(False, True, False)]


def test_an_answer_claimed_by_a_resumer_that_died_answers_only_its_own_question(
    store, db_url, tmp_path
):
    """Fresh processes: the run pauses at the refund; a resumer approves it and is SIGKILLed
    right after the claim; a redeploy asks the wire first. Picking up the stored answer must
    pause at the wire, not approve it."""
    steps = str(tmp_path / "steps.txt")
    env = {"TETHER_DATABASE_URL": db_url, "TETHER_TEST_STEPS": steps}
    _, out, _ = run_module(APP, ["approvals", "run", "e1"], env=env)
    assert out is not None and out["status"] == "paused" and out["pending"]["reason"] == "refund"
    code, _, _ = run_module(
        APP, ["approvals", "resume", "e1", "approve"], fault="chain.after_claim", env=env
    )
    assert code == -signal.SIGKILL
    assert store.get_pending_interrupt("e1").resume_value["approved"] is True

    env["TETHER_TEST_ASK_ORDER"] = "wire,refund"
    _, out, _ = run_module(APP, ["approvals", "resume", "e1"], env=env)
    assert out is not None and out["status"] == "paused", out
    assert out["pending"]["reason"] == "wire", out
    assert effects(steps) == []
    _, out, _ = run_module(APP, ["approvals", "resume", "e1", "reject"], env=env)
    assert out is not None and out["status"] == "completed", out
    assert out["output"] == {"order_id": "A-1", "refund": True, "wire": False}
    assert effects(steps) == ["refund A-1"]


@pytest.mark.parametrize("bad_key", [3, b"k", ["k"]])
def test_a_key_that_is_not_a_str_fails_the_node_clearly(store, bad_key):
    chain = Chain("badkey", store)
    chain.add_node("ask", lambda s: {"a": interrupt("approve", None, key=bad_key).approved})
    result = chain.run({})
    assert result.status == "failed"
    assert "key=" in str(result.error) and store.get_pending_interrupt(result.execution_id) is None


@pytest.mark.parametrize(
    "node_input",
    [
        {"answers": [{"approved": "yes"}], "interrupt_index": 1},
        {"answers": [], "interrupt": {"reason": 7}},
        {"answers": [{"approved": True, "interrupt": "first"}]},
    ],
)
def test_a_row_whose_answers_cannot_be_read_is_refused_before_the_claim(store, node_input):
    chain = Chain("broken", store)
    chain.add_node("ask", lambda s: {"a": interrupt("first", None).approved})
    store.create_run(RunRecord("broken-row", "broken", "chain", status="paused", input={}))
    store.record_interrupt(
        Checkpoint(
            execution_id="broken-row",
            node_id="ask",
            step_type="hitl_pause",
            status="interrupted",
            node_input=node_input,
            interrupt_reason="first",
            next_node_id="ask",
        )
    )
    with pytest.raises(ChainResumeError, match="malformed"):
        chain.resume("broken-row", Resume(True))
    pending = store.get_pending_interrupt("broken-row")
    assert pending.claimed_by is None and pending.resume_value is None
