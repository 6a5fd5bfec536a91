"""A graph compiled with ``interrupt_before`` / ``interrupt_after`` (LangGraph's static
breakpoints) pauses its tether run at ``langgraph.breakpoint``: never ``completed`` while the
thread has nodes next; an approval continues it (``ainvoke(None)``), a rejection leaves it
where it stopped. Both backends."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from tether import Resume
from tether.engine.claim import store_answer
from tether.integrations.langgraph import LangGraphResult, LangGraphRunner, TetherSaver
from tether.store.base import Checkpointer


class _S(TypedDict, total=False):
    items: Annotated[list[str], operator.add]


def _runner(store: Checkpointer, name: str, **compile_kw: Any) -> LangGraphRunner:
    builder = StateGraph(_S)
    for node in ("review", "pay", "ship"):
        builder.add_node(node, lambda s, node=node: {"items": [node]})
    builder.add_edge(START, "review")
    builder.add_edge("review", "pay")
    builder.add_edge("pay", "ship")
    builder.add_edge("ship", END)
    graph = builder.compile(checkpointer=TetherSaver(store), **compile_kw)
    return LangGraphRunner(graph, name=name)


def _asked(result: LangGraphResult) -> dict[str, Any]:
    """The question a paused result shows."""
    assert result.pending_interrupt is not None, result
    return result.pending_interrupt


def _cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def test_a_thread_stopped_before_a_breakpoint_is_paused_not_completed_and_approval_continues_it(
    store,
):
    runner = _runner(store, "bp", interrupt_before=["pay"])
    paused = runner.run({"items": []}, thread_id="b1")
    assert paused.status == "paused", paused
    shown = paused.pending_interrupt
    assert shown is not None
    assert shown["reason"] == "langgraph.breakpoint"
    assert shown["context"] == {"next": ["pay"]}
    assert shown["node_id"] == "pay"
    assert store.get_run("b1").status == "paused"
    assert [p.execution_id for p in store.list_pending_interrupts()] == ["b1"]
    assert runner.graph.get_state(_cfg("b1")).values["items"] == ["review"]

    done = runner.resume("b1", Resume(approved=True, checkpoint_id=shown["checkpoint_id"]))
    assert done.status == "completed", done
    assert done.output["items"] == ["review", "pay", "ship"]
    assert store.get_run("b1").status == "completed"
    assert store.list_pending_interrupts() == []


def test_a_stored_approval_at_an_interrupt_after_breakpoint_is_applied_by_a_plain_resume(store):
    runner = _runner(store, "bpa", interrupt_after=["review"])
    paused = runner.run({"items": []}, thread_id="b2")
    assert paused.status == "paused", paused
    assert _asked(paused)["context"] == {"next": ["pay"]}
    # what `tether approve` without --app does; a worker then resumes without a value
    store_answer(store, "b2", Resume(approved=True, checkpoint_id=_asked(paused)["checkpoint_id"]))
    done = runner.resume("b2")
    assert done.status == "completed", done
    assert done.output["items"] == ["review", "pay", "ship"]


def test_a_rejected_breakpoint_runs_nothing_and_stays_paused_at_the_same_stop(store):
    runner = _runner(store, "bpr", interrupt_before=["pay"])
    first = _asked(runner.run({"items": []}, thread_id="b3"))
    again = runner.resume(
        "b3", Resume(approved=False, data="not yet", checkpoint_id=first["checkpoint_id"])
    )
    assert again.status == "paused", again
    assert _asked(again)["reason"] == "langgraph.breakpoint"
    assert _asked(again)["context"] == {"next": ["pay"]}
    assert _asked(again)["checkpoint_id"] != first["checkpoint_id"]
    assert runner.graph.get_state(_cfg("b3")).values["items"] == ["review"]
    assert store.get_run("b3").status == "paused"
    # the rejection is in the audit trail; a later approval still continues
    assert [e.action for e in store.list_audit("b3")] == ["rejected"]
    done = runner.resume("b3", Resume(approved=True))
    assert done.status == "completed" and done.output["items"] == ["review", "pay", "ship"]


def test_an_approval_is_not_carried_past_a_breakpoint_the_thread_reached_the_langgraph_way(
    store,
):
    runner = _runner(store, "bpl", interrupt_before=["pay", "ship"])
    shown = _asked(runner.run({"items": []}, thread_id="b4"))
    assert shown["context"] == {"next": ["pay"]}
    runner.graph.invoke(None, _cfg("b4"))  # continued past 'pay' outside tether
    assert runner.graph.get_state(_cfg("b4")).next == ("ship",)

    late = runner.resume("b4", Resume(approved=True, checkpoint_id=shown["checkpoint_id"]))
    assert late.status == "paused", late
    assert _asked(late)["context"] == {"next": ["ship"]}
    assert runner.graph.get_state(_cfg("b4")).values["items"] == ["review", "pay"]
    done = runner.resume("b4", Resume(approved=True))
    assert done.status == "completed" and done.output["items"] == ["review", "pay", "ship"]


def test_every_breakpoint_of_a_thread_is_a_pause_of_its_own(store):
    runner = _runner(store, "bpm", interrupt_before=["pay", "ship"])
    first = runner.run({"items": []}, thread_id="b5")
    second = runner.resume("b5", Resume(approved=True))
    assert second.status == "paused" and _asked(second)["context"] == {"next": ["ship"]}
    assert runner.graph.get_state(_cfg("b5")).values["items"] == ["review", "pay"]
    assert _asked(first)["checkpoint_id"] != _asked(second)["checkpoint_id"]
    assert runner.resume("b5", Resume(approved=True)).status == "completed"


class _Killed(BaseException):
    """Stands for a SIGKILL between LangGraph's last commit and the run's pause row."""


def test_a_drive_cut_short_at_a_breakpoint_is_paused_there_by_the_next_resume_not_run_past(
    store, monkeypatch
):
    from tether.integrations.langgraph import runner as runner_module

    runner = _runner(store, "bpk", interrupt_before=["pay"])

    async def killed(self: Any, snapshot: Any) -> Any:
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr(runner_module._Drive, "_pause_at_breakpoint", killed)
        try:
            runner.run({"items": []}, thread_id="b6")
        except _Killed:
            pass
    assert store.get_run("b6").status == "running"
    assert runner.graph.get_state(_cfg("b6")).next == ("pay",)

    resumed = runner.resume("b6")  # what a worker does once the lease lapses
    assert resumed.status == "paused", resumed
    assert _asked(resumed)["context"] == {"next": ["pay"]}
    assert runner.graph.get_state(_cfg("b6")).values["items"] == ["review"]
    assert runner.resume("b6", Resume(approved=True)).status == "completed"
