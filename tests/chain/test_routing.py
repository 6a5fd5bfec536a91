"""Which nodes a chain runs when it has no edges, and the refusal of nodes no edge reaches, on
every backend."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.results import question_of
from tether import Chain, Resume, interrupt
from tether.errors import UnreachableNodesError


def _set(key: str, value: int) -> Any:
    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {key: value, "log": [*state.get("log", []), key]}

    return node


def _nodes(store: Any, eid: str) -> list[str]:
    return [c.node_id for c in store.list(eid)]


def test_a_chain_without_edges_runs_every_node_in_the_order_added(store: Any) -> None:
    chain = Chain("seq", store)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        chain.add_node(key, _set(key, value))
    result = chain.run({}, execution_id="s1")
    assert result.status == "completed"
    assert result.output == {"a": 1, "b": 2, "c": 3, "log": ["a", "b", "c"]}
    assert _nodes(store, "s1") == ["a", "b", "c", "run_end"]
    assert [c.next_node_id for c in store.list("s1")] == ["b", "c", None, None]


def test_a_paused_sequence_resumes_at_the_paused_node_and_runs_the_rest(store: Any) -> None:
    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approve", {"a": state["a"]}).approved}

    def build() -> Chain:
        chain = Chain("seq", store)
        chain.add_node("a", _set("a", 1)).add_node("review", review).add_node("c", _set("c", 3))
        return chain

    paused = build().run({}, execution_id="s2")
    assert question_of(paused)["node_id"] == "review"
    done = build().resume("s2", Resume(approved=True))  # a fresh chain object, as a new process
    assert done.status == "completed"
    assert done.output["approved"] is True and done.output["log"] == ["a", "c"]
    assert _nodes(store, "s2") == ["a", "review", "review", "c", "run_end"]


def test_a_sequence_whose_entry_is_not_first_names_the_nodes_before_it(store: Any) -> None:
    chain = Chain("seq", store)
    chain.add_node("a", _set("a", 1)).add_node("b", _set("b", 2), entry=True)
    with pytest.raises(UnreachableNodesError, match="'a'") as info:
        chain.run({})
    assert info.value.unreachable == ["a"]
    assert store.list_runs() == []


def test_nodes_no_edge_reaches_are_refused_by_name_before_anything_is_written(
    store: Any,
) -> None:
    chain = Chain("partial", store)
    for key in ("a", "b", "c", "d"):
        chain.add_node(key, _set(key, 1))
    chain.add_edge("a", "b")
    chain.add_edge("c", "d")  # c and d reach each other, but nothing reaches c
    with pytest.raises(UnreachableNodesError) as info:
        chain.run({}, execution_id="p1")
    assert info.value.unreachable == ["c", "d"]
    assert "'c', 'd'" in str(info.value) and "'a'" in str(info.value)
    assert store.get_run("p1") is None


def test_nodes_behind_conditional_edges_count_as_reachable_whatever_the_condition(
    store: Any,
) -> None:
    chain = Chain("branches", store)
    for key in ("a", "big", "small", "done"):
        chain.add_node(key, _set(key, 1))
    chain.add_edge("a", "big", condition=lambda s: s.get("amount", 0) > 100)
    chain.add_edge("a", "small", condition=lambda s: s.get("amount", 0) <= 100)
    chain.add_edge("big", "done", condition=lambda s: False)
    chain.add_edge("small", "a", max_iterations=1)
    result = chain.run({"amount": 5}, execution_id="c1")
    assert result.status == "completed"
    assert _nodes(store, "c1") == ["a", "small", "a", "small", "run_end"]


def test_a_node_reached_only_through_an_unreachable_node_is_named_too(store: Any) -> None:
    chain = Chain("branches", store)
    for key in ("a", "b", "orphan", "after_orphan"):
        chain.add_node(key, _set(key, 1))
    chain.add_edge("a", "b", condition=lambda s: True)
    chain.add_edge("orphan", "after_orphan", condition=lambda s: True)
    with pytest.raises(UnreachableNodesError) as info:
        chain.run({})
    assert info.value.unreachable == ["orphan", "after_orphan"]


def test_resume_and_fork_refuse_a_graph_that_gained_an_unreachable_node(store: Any) -> None:
    def review(state: dict[str, Any]) -> dict[str, Any]:
        return {"approved": interrupt("approve").approved}

    chain = Chain("grown", store)
    chain.add_node("review", review).add_node("pay", _set("pay", 1))
    chain.add_edge("review", "pay")
    paused = chain.run({}, execution_id="g1")
    assert paused.status == "paused"
    chain.add_node("audit", _set("audit", 1))  # forgot its edge
    with pytest.raises(UnreachableNodesError, match="'audit'"):
        chain.resume("g1", Resume(approved=True))
    with pytest.raises(UnreachableNodesError, match="'audit'"):
        chain.fork("g1", resume_value=Resume(approved=True))
    # Nothing was claimed: the run still waits for its answer.
    pending = store.get_pending_interrupt("g1")
    assert pending is not None and pending.resume_value is None and not pending.claimed_by
    assert [r.execution_id for r in store.list_runs()] == ["g1"]


def test_edges_are_tried_in_the_order_added_whatever_comes_after_a_plain_one(
    store: Any,
) -> None:
    # A plain first edge is always taken; a conditional or bounded first edge is tried first.
    plain = Chain("plain-first", store)
    for key in ("a", "b", "c"):
        plain.add_node(key, _set(key, 1))
    plain.add_edge("a", "b").add_edge("a", "c", condition=lambda s: True)
    assert _nodes(store, plain.run({}, execution_id="p1").execution_id) == ["a", "b", "run_end"]
    cond = Chain("cond-first", store)
    for key in ("a", "b", "c"):
        cond.add_node(key, _set(key, 1))
    cond.add_edge("a", "c", condition=lambda s: s["a"] == 1).add_edge("a", "b")
    assert _nodes(store, cond.run({}, execution_id="c1").execution_id) == ["a", "c", "run_end"]
    loop = Chain("bounded-first", store)
    for key in ("a", "b"):
        loop.add_node(key, _set(key, 1))
    loop.add_edge("a", "a", max_iterations=2).add_edge("a", "b")
    loop.run({}, execution_id="l1")
    assert _nodes(store, "l1") == ["a", "a", "a", "b", "run_end"]


def test_the_known_whole_shortcut_agrees_with_walking_the_edges_on_random_graphs() -> None:
    """Routes.reaches_all answers without a walk for a graph built in order; wherever it says
    True the walk must reach every node (and it must say True for a chain built in order)."""
    import random

    from tether.chain._routing import Edge, Routes

    rng = random.Random(20261203)
    said_true = 0
    for _ in range(400):
        routes = Routes()
        n = rng.randint(1, 9)
        names = [f"n{i}" for i in range(n)]
        for name in names:
            routes.add_node(name)
        for _ in range(rng.randint(0, 2 * n)):
            routes.add_edge(Edge(rng.choice(names), rng.choice(names)))
        entry = rng.choice(names)
        walked_all = routes.reachable_from(entry) == set(names)
        if routes.reaches_all(entry):
            said_true += 1
            assert walked_all, (entry, routes.edges)
    assert said_true > 20  # the shortcut is taken, not only refused
    chain = Routes()
    for i in range(300):
        chain.add_node(f"n{i}")
        if i:
            chain.add_edge(Edge(f"n{i - 1}", f"n{i}"))
    assert chain.reaches_all("n0") and not chain.reaches_all("n1")
    back = Routes()  # edges only backwards: nothing known, the walk decides
    for name in ("a", "b", "c"):
        back.add_node(name)
    back.add_edge(Edge("c", "b"))
    back.add_edge(Edge("b", "a"))
    assert not back.reaches_all("a") and back.reachable_from("c") == {"a", "b", "c"}
