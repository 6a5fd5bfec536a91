"""An answer given through tether is applied only to the LangGraph interrupt it was given
for (the one the pause row recorded), never to another one pending beside it (docs/design.md
§5). Two parallel nodes interrupt at once; both backends."""

from __future__ import annotations

import logging
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tether import Resume
from tether.integrations.langgraph import LangGraphResult, LangGraphRunner, TetherSaver
from tether.store.base import Checkpointer


class _S(TypedDict, total=False):
    items: Annotated[list[Any], operator.add]


def _ask(name: str) -> Any:
    def node(s: _S) -> _S:
        return {"items": [[name, interrupt({"q": name})]]}

    return node


def _runner(store: Checkpointer, name: str) -> LangGraphRunner:
    builder = StateGraph(_S)
    for node in ("a", "c"):
        builder.add_node(node, _ask(node))
        builder.add_edge(START, node)
        builder.add_edge(node, END)
    return LangGraphRunner(builder.compile(checkpointer=TetherSaver(store)), name=name)


def _asked(result: LangGraphResult) -> dict[str, Any]:
    """The question a paused result shows."""
    assert result.pending_interrupt is not None, result
    return result.pending_interrupt


def _cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _answers(runner: LangGraphRunner, thread_id: str) -> dict[str, Any]:
    return dict(runner.graph.get_state(_cfg(thread_id)).values.get("items", []))


def _interrupt_ids(runner: LangGraphRunner, thread_id: str) -> dict[str, str]:
    return {i.value["q"]: i.id for i in runner.graph.get_state(_cfg(thread_id)).interrupts}


def test_each_tether_answer_goes_to_the_interrupt_shown_then_the_run_pauses_on_the_next(store):
    runner = _runner(store, "fan1")
    first = _asked(runner.run({"items": []}, thread_id="f1"))
    one = first["context"]["q"]
    other = "c" if one == "a" else "a"
    second = runner.resume("f1", Resume(approved=True, data=f"yes-{one}"))
    assert second.status == "paused", second
    assert _asked(second)["context"] == {"q": other}
    assert _answers(runner, "f1") == {one: {"approved": True, "data": f"yes-{one}", "metadata": {}}}
    done = runner.resume("f1", Resume(approved=False, data=f"no-{other}"))
    assert done.status == "completed", done
    assert dict(done.output["items"])[other]["data"] == f"no-{other}"


def test_an_answer_whose_interrupt_was_answered_the_langgraph_way_is_never_given_to_the_other(
    store, caplog
):
    runner = _runner(store, "fan2")
    shown = _asked(runner.run({"items": []}, thread_id="f2"))
    one = shown["context"]["q"]
    other = "c" if one == "a" else "a"
    runner.graph.invoke(Command(resume={_interrupt_ids(runner, "f2")[one]: "lg-yes"}), _cfg("f2"))

    with caplog.at_level(logging.WARNING, logger="tether.interrupt"):
        late = runner.resume(
            "f2", Resume(approved=True, data="for the first", checkpoint_id=shown["checkpoint_id"])
        )
    assert other not in _answers(runner, "f2"), "the answer went to the other interrupt"
    assert _answers(runner, "f2") == {one: "lg-yes"}
    assert late.status == "paused", late
    assert _asked(late)["context"] == {"q": other}
    assert _asked(late)["checkpoint_id"] != shown["checkpoint_id"]
    assert store.get_run("f2").status == "paused"
    assert "not applied" in caplog.text
    # the question still pending is now the one shown, and its answer goes to it
    done = runner.resume("f2", Resume(approved=True, data=f"yes-{other}"))
    assert done.status == "completed", done
    assert dict(done.output["items"])[other]["data"] == f"yes-{other}"


def test_an_answer_after_both_interrupts_were_answered_the_langgraph_way_only_records_the_end(
    store,
):
    runner = _runner(store, "fan3")
    shown = _asked(runner.run({"items": []}, thread_id="f3"))
    ids = _interrupt_ids(runner, "f3")
    runner.graph.invoke(Command(resume={ids["a"]: "lg-a", ids["c"]: "lg-c"}), _cfg("f3"))
    done = runner.resume("f3", Resume(approved=True, checkpoint_id=shown["checkpoint_id"]))
    assert done.status == "completed", done
    assert dict(done.output["items"]) == {"a": "lg-a", "c": "lg-c"}


def test_the_shown_interrupt_still_gets_its_answer_when_the_other_was_answered_the_langgraph_way(
    store,
):
    runner = _runner(store, "fan4")
    shown = _asked(runner.run({"items": []}, thread_id="f4"))
    one = shown["context"]["q"]
    other = "c" if one == "a" else "a"
    runner.graph.invoke(Command(resume={_interrupt_ids(runner, "f4")[other]: "lg"}), _cfg("f4"))
    done = runner.resume("f4", Resume(approved=True, data="shown"))
    assert done.status == "completed", done
    assert dict(done.output["items"]) == {
        one: {"approved": True, "data": "shown", "metadata": {}},
        other: "lg",
    }
