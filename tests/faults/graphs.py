"""Random chain graphs for the property tests, built from a JSON-able spec so a child process
can build the same chain.

Spec: ``{"nodes": [{"id", "k", "ask", "effect"}], "edges": [[source, target, cond, max]]}``.
Each node mixes its ``k`` into ``state["x"]``, appends its id to ``state["log"]`` and counts
its visits; an ``ask`` node calls ``interrupt()`` and mixes the answer in; an ``effect`` node
calls an ``@idempotent`` charge keyed by the node and its visit number. ``cond`` is ``None``
(always) or ``[m, r]`` (taken when ``x % m == r``); ``max`` bounds an edge that closes a cycle.
Node and effect executions are appended to ``$TETHER_TEST_STEPS`` / ``$TETHER_TEST_LEDGER``.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import strategies as st

from tether import Chain, interrupt
from tether._context import current_execution_id
from tether.idempotent import current_idempotency_key, idempotent
from tether.store.base import Checkpointer

GRAPH_ENV = "TETHER_TEST_GRAPH"


def _append(env: str, line: str) -> None:
    path = os.environ.get(env)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@idempotent
def pay(node_id: str, visit: int) -> int:
    _append("TETHER_TEST_LEDGER", f"{current_execution_id()} {current_idempotency_key()}")
    return visit * 10


def _node_fn(node: dict[str, Any]) -> Any:
    node_id, k = node["id"], node["k"]

    def run(state: dict[str, Any]) -> dict[str, Any]:
        _append("TETHER_TEST_STEPS", f"node:{node_id}")
        visits = dict(state.get("visits", {}))
        visits[node_id] = visits.get(node_id, 0) + 1
        x = (state.get("x", 1) * 31 + k) % 997
        if node["ask"]:
            answer = interrupt("check", {"node": node_id, "x": x})
            x = (x + (7 if answer.approved else 3)) % 997
        paid = state.get("paid", 0)
        if node["effect"]:
            paid += pay(node_id, visits[node_id])
        return {"x": x, "log": [*state.get("log", []), node_id], "visits": visits, "paid": paid}

    return run


def build_chain(spec: dict[str, Any], store: Checkpointer) -> Chain:
    chain = Chain("random", store, claim_lease_seconds=30)
    for node in spec["nodes"]:
        chain.add_node(node["id"], _node_fn(node))
    for source, target, cond, bound in spec["edges"]:
        condition = None if cond is None else (lambda s, m=cond[0], r=cond[1]: s["x"] % m == r)
        chain.add_edge(source, target, condition=condition, max_iterations=bound)
    return chain


@st.composite
def graph_specs(draw: Any, max_nodes: int = 6) -> dict[str, Any]:
    """Connected-from-entry graphs with conditional branches and bounded cycles."""
    n = draw(st.integers(2, max_nodes))
    nodes = [
        {
            "id": f"n{i}",
            "k": draw(st.integers(0, 50)),
            "ask": draw(st.booleans()) if i else False,
            "effect": draw(st.booleans()),
        }
        for i in range(n)
    ]
    edges: list[list[Any]] = []
    for i in range(n):
        # a conditional branch forward, then (maybe) a cycle, then the default
        if i + 1 < n and draw(st.booleans()):
            j = draw(st.integers(i + 1, n - 1))
            edges.append([f"n{i}", f"n{j}", [draw(st.integers(2, 3)), 0], None])
        if draw(st.integers(0, 2)) == 0:
            j = draw(st.integers(0, i))
            cond = [2, draw(st.integers(0, 1))] if draw(st.booleans()) else None
            edges.append([f"n{i}", f"n{j}", cond, draw(st.integers(1, 2))])
        if i + 1 < n:
            edges.append([f"n{i}", f"n{i + 1}", None, None])
    return {"nodes": nodes, "edges": edges}
