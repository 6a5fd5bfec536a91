"""How a chain picks its next node: the order nodes were added, for a chain without edges;
else its edges, tried in the order added, each with an optional condition and an optional
bound on how often it is taken in one run (docs/design.md §4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Condition", "Edge", "Routes"]

Condition = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Edge:
    """A route from ``source`` to ``target``.

    Attributes:
        condition: taken only when ``condition(state)`` is true; ``None`` means always.
        max_iterations: for an edge that closes a cycle: how many times it may be taken in one
            run. Once spent, the edge counts as false and routing falls through to the next
            edge of the source (or ends the run if there is none). The count is checkpointed,
            so the bound holds across crashes and resumes.
    """

    source: str
    target: str
    condition: Condition | None = None
    max_iterations: int | None = None

    @property
    def counter_key(self) -> str:
        return f"{self.source}->{self.target}"


class Routes:
    """The nodes of one chain in the order they were added, and its edges by source."""

    def __init__(self) -> None:
        self.edges: dict[str, list[Edge]] = {}
        self.edge_count = 0
        self._order: dict[str, int] = {}
        self._sequence: list[str] = []
        # source -> target for a node whose first edge has no condition and no bound: it is
        # always taken (edges are tried in the order added), so the usual step routes with
        # one lookup.
        self._only: dict[str, str] = {}
        # The targets of forward edges (from a node added before the target). When every
        # node but the first is one, the first reaches them all: each is fed by an earlier
        # node, which the first reaches by the same argument. A chain built in order is
        # known whole this way without walking it (see reaches_all).
        self._fed: set[str] = set()

    def add_node(self, node_id: str) -> None:
        self._order[node_id] = len(self._order)
        self._sequence.append(node_id)
        self.edges.setdefault(node_id, [])

    def add_edge(self, edge: Edge) -> None:
        edges = self.edges[edge.source]
        edges.append(edge)
        self.edge_count += 1
        if len(edges) == 1 and edge.condition is None and edge.max_iterations is None:
            self._only[edge.source] = edge.target
        if self._order[edge.source] < self._order[edge.target]:
            self._fed.add(edge.target)

    def node_index(self, node_id: str) -> int:
        """The position ``node_id`` was added at (from 0); ``-1`` for an unknown id."""
        return self._order.get(node_id, -1)

    @property
    def is_sequence(self) -> bool:
        """True for a chain without edges: it runs its nodes in the order they were added."""
        return self.edge_count == 0

    def successors(self, node_id: str) -> list[str]:
        """The nodes ``node_id`` may route to: its edges' targets, or for a chain without
        edges the next node added."""
        if self.is_sequence:
            at = self._order[node_id]
            return self._sequence[at + 1 : at + 2]
        return [edge.target for edge in self.edges.get(node_id, ())]

    def reaches_all(self, entry: str) -> bool:
        """True when ``entry`` is known to reach every node without walking the edges: it
        is the first node added, and (with edges) every other node is the target of an edge
        from a node added before it. False means only "not known": walk ``reachable_from``."""
        if self._order.get(entry) != 0:
            return False
        return self.is_sequence or len(self._fed) == len(self._order) - 1

    def reachable_from(self, entry: str) -> set[str]:
        """The nodes some route leads to from ``entry`` (whatever the edges' conditions),
        ``entry`` included."""
        if self.is_sequence:  # the entry and every node added after it
            return set(self._sequence[self._order[entry] :])
        # Edges walked inline rather than through successors(): a resume of a fresh chain
        # pays this walk first, and it visits every node (10,001 in W6's linear chain).
        seen = {entry}
        todo = [entry]
        edges = self.edges
        while todo:
            for edge in edges.get(todo.pop(), ()):
                target = edge.target
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    def route(self, node_id: str, state: dict[str, Any], counters: dict[str, int]) -> str | None:
        """The node to run after ``node_id``; counts the edge taken in ``counters``.

        Args:
            node_id: the node that just ran.
            state: the state it left, which conditions read.
            counters: how often each bounded edge was taken in this run, keyed
                ``source->target``; updated in place for the edge taken.

        Returns:
            The next node's id, or ``None`` when no edge is taken (the run ends).
        """
        only = self._only.get(node_id)
        if only is not None:
            return only
        if self.is_sequence:
            following = self.successors(node_id)
            return following[0] if following else None
        for edge in self.edges.get(node_id, ()):
            if edge.max_iterations is not None and counters.get(edge.counter_key, 0) >= (
                edge.max_iterations
            ):
                continue
            if edge.condition is not None and not edge.condition(state):
                continue
            if edge.max_iterations is not None:
                counters[edge.counter_key] = counters.get(edge.counter_key, 0) + 1
            return edge.target
        return None
