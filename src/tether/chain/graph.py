"""``Chain``: a directed graph of nodes over a dict state, with conditional edges and bounded
cycles, that checkpoints after every node (docs/design.md §1, §3, §4, §9)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._renames import check_renamed, current_name
from .._timeouts import Deadline, bounded, check_timeout
from ..checkpoint import RUN_END
from ..engine.claim import DEFAULT_CLAIM_LEASE_SECONDS
from ..engine.lease import DEFAULT_RUN_LEASE_SECONDS
from ..engine.sync import run_sync
from ..errors import ConfigurationError, UnreachableNodesError
from ..interrupt import Resume
from ..result import ChainResult
from ..store.base import Checkpointer
from ._routing import Condition, Edge, Routes

if TYPE_CHECKING:
    from ..engine.nesting import Missing, ReEntry

__all__ = ["Chain", "Edge"]

NodeFn = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]
RESERVED_NODE_IDS = frozenset({RUN_END, "fork_origin", "state_patch"})
RUNNER_KINDS = frozenset({"agent", "swarm", "supervisor"})
InputSelector = Callable[[dict[str, Any]], Any]


@dataclass(frozen=True, slots=True)
class RunnerNode:
    """A node that is an ``Agent``, ``Swarm`` or ``Supervisor``.

    Attributes:
        runner: the runner; it runs inside the chain's run (same ``execution_id``, its rows
            under its own ``agent_path``, no ``run_end`` of its own).
        input_key: the state key holding its input (a ``str`` or a list of messages), or a
            function ``state -> input``.
        output_key: the state key its final output is written to (the parsed model when the
            agent has an ``output_type``, else the text).
    """

    runner: Any
    input_key: str | InputSelector
    output_key: str


class Chain:
    """A durable graph of steps.

    Each node is ``fn(state) -> dict | None`` (sync or ``async def``); the dict it returns is
    merged into the state. After each node a ``completed`` checkpoint with the new state and
    the routing decision commits in one transaction; after the last node, one ``run_end`` row.

    Routing: a chain with no edges at all is a sequence and runs its nodes in the order they
    were added. Once it has an edge, only edges route, and every node must be reachable from
    the entry along them (whatever their conditions): ``run``, ``resume`` and ``fork`` refuse
    a chain with a node no edge leads to, naming it (docs/design.md §4).

    Args:
        name: the runner's name, recorded on each run; resume and fork refuse runs of another
            name.
        checkpointer: where runs are stored; default: ``tether.connect()``
            (``TETHER_DATABASE_URL``, else SQLite ``./tether.db``).
        claim_lease_seconds: how long a resumer's claim on a pending interrupt lasts without a
            heartbeat; after it lapses the run is resumable again with the answer given.
        deadline_seconds: the run's deadline, counted from its creation: a node starting
            after it, or running past it, fails the run with ``RunDeadlineExceeded``
            (docs/design.md §12). ``None``: no deadline.
        renamed: ``{old_node_id: new_node_id}`` for nodes a deploy renamed: a paused or
            crashed run that continues at an old name continues at the new node
            (docs/design.md §13, rule 5).

    Raises:
        ConfigurationError: an empty name, a bad deadline, or a bad rename map.

    Example::

        chain = Chain("refunds")
        chain.add_node("validate", validate)
        chain.add_node("review", review)
        chain.add_edge("validate", "review")
        result = chain.run({"amount": 900})
    """

    kind = "chain"
    # The run lease period: how long the process that drives a run holds it without a
    # heartbeat; once a crashed owner's lease lapses, a worker takes the run over (§10,
    # docs/workers.md).
    lease_seconds: float = DEFAULT_RUN_LEASE_SECONDS

    def __init__(
        self,
        name: str,
        checkpointer: Checkpointer | None = None,
        *,
        claim_lease_seconds: float = DEFAULT_CLAIM_LEASE_SECONDS,
        deadline_seconds: float | None = None,
        renamed: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError("a Chain needs a non-empty name")
        self.name = name
        self.renamed = check_renamed(renamed, f"chain {name!r}")
        self.deadline_seconds = check_timeout(deadline_seconds, f"chain {name!r}: deadline_seconds")
        self.timeouts: dict[str, float] = {}
        self._checkpointer = checkpointer
        self.claim_lease_seconds = claim_lease_seconds
        self.nodes: dict[str, NodeFn] = {}
        self.runners: dict[str, RunnerNode] = {}
        self.routes = Routes()
        self.entry: str | None = None
        self._checked_shape: tuple[int, int, str] | None = None

    def __repr__(self) -> str:
        return f"Chain({self.name!r}, nodes={list(self.nodes)})"

    @property
    def checkpointer(self) -> Checkpointer:
        """The store (opened on first use when none was given)."""
        if self._checkpointer is None:
            from ..connect import connect

            self._checkpointer = connect()
        return self._checkpointer

    def add_node(
        self,
        node_id: str,
        fn: NodeFn | Any,
        *,
        entry: bool = False,
        input_key: str | InputSelector = "input",
        output_key: str | None = None,
        timeout_seconds: float | None = None,
    ) -> Chain:
        """Add a step. The first node added is the entry unless another says ``entry=True``.

        Args:
            node_id: unique id; it is the checkpoint's re-entry address.
            fn: ``fn(state) -> dict | None``, sync or async; may call ``interrupt()``. Or an
                ``Agent``, ``Swarm`` or ``Supervisor``: it runs inside this chain's run, its
                rows nest under its ``agent_path`` and each carries the chain's frame (the
                node and the state it started from), so a crash or pause inside it resumes
                there and the chain then goes on to the next node (docs/design.md §8).
            input_key: for a runner node: the state key holding its input (a ``str`` or a
                list of messages), or a function ``state -> input``.
            output_key: for a runner node: the state key its output goes to (default: the
                node id).
            timeout_seconds: the node's limit: past it the run fails with
                ``StepTimeoutError`` (resumable). An ``async`` node is cancelled at its
                ``await``; a sync node with a limit runs in a thread of its own and is
                abandoned (its result never committed). Not for runner nodes (give their
                tools and model calls limits instead). docs/design.md §12.

        Raises:
            ConfigurationError: a duplicate or reserved id, or ``fn`` is not callable.
        """
        if not isinstance(node_id, str) or not node_id or node_id in RESERVED_NODE_IDS:
            raise ConfigurationError(f"invalid node id {node_id!r}")
        if node_id.startswith("turn:"):
            raise ConfigurationError(f"node id {node_id!r}: the 'turn:' prefix is for agents")
        if node_id in self.nodes:
            raise ConfigurationError(f"node {node_id!r} already exists in chain {self.name!r}")
        if getattr(fn, "kind", None) in RUNNER_KINDS and hasattr(fn, "name"):
            self.runners[node_id] = RunnerNode(fn, input_key, output_key or node_id)
            fn = _runner_placeholder
        if not callable(fn):
            raise ConfigurationError(f"node {node_id!r}: fn must be callable")
        limit = check_timeout(timeout_seconds, f"node {node_id!r}: timeout_seconds")
        if limit is not None and node_id in self.runners:
            raise ConfigurationError(
                f"node {node_id!r} is a runner node: give its tools timeout_seconds and its "
                "agent model_timeout_seconds instead"
            )
        if limit is not None:
            self.timeouts[node_id] = limit
        self.nodes[node_id] = fn
        self.routes.add_node(node_id)
        if entry or self.entry is None:
            self.entry = node_id
        return self

    def add_edge(
        self,
        source: str,
        target: str,
        *,
        condition: Condition | None = None,
        max_iterations: int | None = None,
    ) -> Chain:
        """Route from ``source`` to ``target``; edges of a source are tried in the order added.

        A chain's first edge turns off declaration-order routing: from then on only edges
        route, and every node needs one leading to it (see :class:`Chain`).

        Raises:
            ConfigurationError: unknown nodes, or a ``max_iterations`` below 1.
        """
        for n in (source, target):
            if n not in self.nodes:
                raise ConfigurationError(f"edge {source!r}->{target!r}: unknown node {n!r}")
        if max_iterations is not None and max_iterations < 1:
            raise ConfigurationError("max_iterations must be at least 1")
        self.routes.add_edge(Edge(source, target, condition, max_iterations))
        return self

    def node_index(self, node_id: str) -> int:
        return self.routes.node_index(node_id)

    def check_reentry(self, reentry: ReEntry, missing: Missing, parent: str | None) -> None:
        """The chain's level of ``tether.engine.nesting.check_reentry``: a row inside a runner
        node needs that node (the chain's own rows are checked by its executor)."""
        if reentry.is_own_row:
            return
        node_id = current_name(self.renamed, reentry.frame("chain", self.name).get("node_id"))
        node = self.runners.get(node_id) if isinstance(node_id, str) else None
        if node is None:
            raise missing(f"the agent node {node_id!r}", f"chain {self.name!r}")
        node.runner.check_reentry(reentry.deeper(), missing, parent)

    def check_routing(self) -> None:
        """Refuse a graph with nodes the entry can never reach.

        Raises:
            ConfigurationError: the chain has no nodes.
            UnreachableNodesError: some nodes can never run (named in the message and in
                ``unreachable``, in the order they were added): no edge leads to them from the
                entry, or, in a chain without edges, they were added before the entry.
        """
        if self.entry is None:
            raise ConfigurationError(f"chain {self.name!r} has no nodes")
        shape = (len(self.nodes), self.routes.edge_count, self.entry)
        if shape == self._checked_shape:  # the graph only grows: same counts, same graph
            return
        if self.routes.reaches_all(self.entry):  # built in order: no walk needed
            unreachable = []
        else:
            seen = self.routes.reachable_from(self.entry)
            unreachable = (
                [n for n in self.nodes if n not in seen] if len(seen) < len(self.nodes) else []
            )
        if unreachable:
            names = ", ".join(repr(n) for n in unreachable)
            why = (
                f"a chain without edges runs its nodes in the order they were added, starting "
                f"at the entry {self.entry!r}, and {names} come before it"
                if self.routes.is_sequence
                else f"no edge leads from the entry {self.entry!r} to {names}; add edges to "
                "them (add_edge(source, target)) or remove them (only a chain without any "
                "edge runs its nodes in the order they were added)"
            )
            raise UnreachableNodesError(
                f"chain {self.name!r} has nodes that can never run: {why}",
                unreachable=unreachable,
            )
        self._checked_shape = shape

    def route(self, node_id: str, state: dict[str, Any], counters: dict[str, int]) -> str | None:
        """The node to run after ``node_id``; counts the edge taken in ``counters``."""
        return self.routes.route(node_id, state, counters)

    async def call_node(
        self,
        node_id: str,
        state: dict[str, Any],
        *,
        execution_id: str = "",
        deadline: Deadline | None = None,
    ) -> dict[str, Any] | None:
        fn = self.nodes[node_id]
        limit = self.timeouts.get(node_id)
        if limit is not None or deadline is not None:
            out = await bounded(
                fn,
                (dict(state),),
                timeout_seconds=limit,
                step=f"node {node_id!r}",
                execution_id=execution_id,
                node_id=node_id,
                deadline=deadline,
            )
        else:
            out = fn(dict(state))
        if type(out) is dict:  # the common answer, checked before the slower awaitable test
            return out
        if inspect.isawaitable(out):
            out = await out
        if out is not None and not isinstance(out, dict):
            raise ConfigurationError(
                f"node {node_id!r} returned {type(out).__name__}; a node returns a dict of "
                "updates or None",
                node_id=node_id,
            )
        return out

    # --- verbs ----------------------------------------------------------------------------
    async def arun(
        self, input: dict[str, Any] | None = None, *, execution_id: str | None = None
    ) -> ChainResult:
        """Start a run from the entry node.

        Args:
            input: the initial state (a dict of JSON-able values, see :mod:`tether.serde`).
            execution_id: choose the run's id (default: a random 32-hex id).

        Returns:
            A :class:`ChainResult`: ``completed`` with ``output`` the final state, ``paused``
            with ``pending_interrupt``, or ``failed`` with ``error``.

        Raises:
            ConfigurationError: the chain has no nodes, the execution_id is not a non-empty
                str, or it exists already.
            UnreachableNodesError: the chain has edges and some node is reachable along none
                (nothing written).
            SerializationError: the input holds a value JSON cannot store (nothing written).
        """
        self.check_routing()
        from ._executor import start

        return await start(self, input, execution_id)

    async def aresume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> ChainResult:
        """Continue a run from its latest resumable checkpoint (the table in docs/design.md §4).

        A row written inside a runner node (an agent that paused, a swarm that crashed)
        re-enters that runner at the row; when it finishes, the chain goes on to the node its
        routing picks.

        Args:
            execution_id: the run.
            resume_value: the answer for a paused run's pending interrupt.
            agent_path: resume only if the row to re-enter lies in this ``agent_path`` subtree
                (a guard; without an answer a mismatch raises ``ChainResumeError``, with one
                ``AlreadyResumed``).
            state_updates: repair a failed or crashed run in place: these keys are merged
                into the state of its last committed step, recorded as a ``state_patch`` row
                of their own, and the run continues from there with its own execution_id
                (docs/design.md, "Repair: resume with state_updates"). Not with a
                ``resume_value``, nor for a paused run or one stopped inside a runner node
                (fork those with ``state_updates``).

        Raises:
            RunNotFoundError: no such run.
            RunnerMismatchError: the run belongs to another runner.
            ChainResumeError: a paused run was resumed without an answer, or the value is not
                a ``Resume``.
            AlreadyResumed: the run completed, or another caller claimed the interrupt, or a
                ``Resume`` was given where nothing is pending.
            ConfigurationError: the run continues at a node, or inside an agent, tool, swarm
                agent or supervisor worker, that this code no longer has; nothing was claimed
                (docs/design.md §5).
            UnreachableNodesError: as for :meth:`arun` (nothing claimed or written).
            RunCancelledError: the run was cancelled (fork it instead).
            SerializationError: ``state_updates`` holds a value JSON cannot store (nothing
                written).
        """
        self.check_routing()
        from ._executor import resume

        return await resume(self, execution_id, resume_value, agent_path, state_updates)

    async def afork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
    ) -> ChainResult:
        """Branch a new run from a saved checkpoint and run it; the original is untouched.

        Args:
            execution_id: the run to branch from (finished, failed, paused or running).
            checkpoint_id: the checkpoint to branch from; default: the newest non-tombstone.
            state_updates: merged into the branched state (a what-if).
            resume_value: when branching from an ``interrupted`` checkpoint, the answer the
                branch gives it; without one, the branch pauses at the same question.
            new_execution_id: the branch's id (default: random).

        Raises:
            RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
            ChainResumeError: ``resume_value`` is not a ``Resume``, names another checkpoint's
                question, or is given for a checkpoint that is not an interrupt (nothing
                written).
            ConfigurationError: the checkpoint lies at a step this code no longer has (as for
                :meth:`aresume`); no branch is created.
            UnreachableNodesError: as for :meth:`arun` (nothing written).
        """
        self.check_routing()
        from ._executor import fork

        return await fork(
            self,
            execution_id,
            checkpoint_id,
            resume_value,
            state_updates,
            new_execution_id=new_execution_id,
        )

    def run(
        self, input: dict[str, Any] | None = None, *, execution_id: str | None = None
    ) -> ChainResult:
        """Sync twin of :meth:`arun`."""
        return run_sync(self.arun(input, execution_id=execution_id))

    def resume(
        self,
        execution_id: str,
        resume_value: Resume | None = None,
        *,
        agent_path: str | None = None,
        state_updates: dict[str, Any] | None = None,
    ) -> ChainResult:
        """Sync twin of :meth:`aresume`."""
        return run_sync(
            self.aresume(
                execution_id, resume_value, agent_path=agent_path, state_updates=state_updates
            )
        )

    def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None = None,
        *,
        state_updates: dict[str, Any] | None = None,
        resume_value: Resume | None = None,
        new_execution_id: str | None = None,
    ) -> ChainResult:
        """Sync twin of :meth:`afork`."""
        return run_sync(
            self.afork(
                execution_id,
                checkpoint_id,
                state_updates=state_updates,
                resume_value=resume_value,
                new_execution_id=new_execution_id,
            )
        )


def _runner_placeholder(state: dict[str, Any]) -> None:
    raise ConfigurationError("a runner node is run by the chain executor, not called")
