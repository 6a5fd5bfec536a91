"""A completed LangGraph thread refuses another resume with a hint this runner can follow
(tether's fork is refused for LangGraph threads). Both backends."""

from __future__ import annotations

from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from tether import Resume
from tether.errors import AlreadyResumed
from tether.integrations.langgraph import LangGraphRunner, TetherSaver


class _S(TypedDict, total=False):
    n: int


def test_resuming_a_completed_thread_names_langgraphs_way_to_branch_not_fork(store):
    builder = StateGraph(_S)
    builder.add_node("one", lambda s: {"n": s.get("n", 0) + 1})
    builder.add_edge(START, "one")
    builder.add_edge("one", END)
    runner = LangGraphRunner(builder.compile(checkpointer=TetherSaver(store)), name="hint")
    assert runner.run({"n": 0}, thread_id="h1").status == "completed"
    for value in (None, Resume(approved=True)):
        with pytest.raises(AlreadyResumed) as info:
            runner.resume("h1", value)
        assert "already completed" in str(info.value) and "update_state" in str(info.value)
        assert "fork it" not in str(info.value)
        assert info.value.execution_id == "h1"
    assert store.get_run("h1").status == "completed"


class _Opaque:
    pass


def test_an_interrupt_value_tether_cannot_store_names_the_channel(store):
    from langgraph.types import interrupt

    builder = StateGraph(_S)
    builder.add_node("ask", lambda s: {"n": interrupt(_Opaque())})
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    runner = LangGraphRunner(builder.compile(checkpointer=TetherSaver(store)), name="opaque")
    failed = runner.run({"n": 0}, thread_id="o1")
    assert failed.status == "failed"
    assert "channel '__interrupt__'" in str(failed.error), failed.error
    assert "_Opaque" in str(failed.error)
