"""How runners nest inside one run (docs/design.md §8): outer frames, the re-entry handed down
level by level, and the signal a nested pause travels up by.

**Outer frames.** A composite runner (a chain node that is a runner, a swarm, a supervisor)
pushes a small JSON *frame* before it drives a child: what it needs to re-enter itself at that
point. Every row written inside the child carries the stack of frames in its state snapshot under
:data:`OUTER_KEY`, outermost first::

    {"messages": [...], "turn": 2, "usage": {...},
     "outer": [{"runner": "chain", "name": "support", "node_id": "triage", "state": {...},
                "counters": {}},
               {"runner": "swarm", "name": "desk", "active": "billing", "handoffs": 1}]}

So any row is self-describing: resume reads the newest row only, and each level of the topology
takes its own frame (``outer[depth]``) and hands the rest down as a :class:`ReEntry` one level
deeper, until the level whose depth equals ``len(outer)``: the writer of the row, which
re-enters it the way a lone agent would. Frames do not change while a child runs, so a
delta-storing backend stores them once per child, not once per row. A fork copies the row, its
frames included, so a branch needs nothing from the run it came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._context import _agent_path, current_agent_path
from .._faults import fault
from ..errors import AlreadyResumed, ChainResumeError, MissingStepError
from ..interrupt import Answer, Resume, dump_answers
from . import rows
from .claim import claim
from .lease import mark_running

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint
    from ..llm.messages import Message, Usage
    from ..result import AgentResult
    from ..store.base import Checkpointer

OUTER_KEY: Final = "outer"
"""The state-snapshot key holding the outer frames of a nested row."""

_frames: ContextVar[tuple[dict[str, Any], ...]] = ContextVar("tether_outer_frames", default=())


def outer_frames() -> list[dict[str, Any]]:
    """The frames of the runners the caller is nested in, outermost first (empty at the top)."""
    return list(_frames.get())


@contextmanager
def outer_frame(frame: dict[str, Any]) -> Iterator[None]:
    """Push ``frame`` for the rows written inside the block."""
    token = _frames.set((*_frames.get(), frame))
    try:
        yield
    finally:
        _frames.reset(token)


@contextmanager
def agent_path_at(path: str | None) -> Iterator[None]:
    """Set the agent path to ``path`` inside the block (a supervisor's worker runs beside the
    delegating tool, not under it)."""
    token = _agent_path.set(path)
    try:
        yield
    finally:
        _agent_path.reset(token)


def join_path(parent: str | None, segment: str) -> str:
    """``parent/segment``, or ``segment`` at the top."""
    return segment if not parent else f"{parent}/{segment}"


def is_under(path: str | None, prefix: str) -> bool:
    """True when ``path`` is ``prefix`` or lies in its subtree (``prefix/...``)."""
    prefix = prefix.rstrip("/")
    return path is not None and (path == prefix or path.startswith(prefix + "/"))


def check_in_subtree(
    execution_id: str,
    node_id: str,
    path: str | None,
    value: Resume | None,
    agent_path: str | None,
) -> None:
    """Refuse a resume scoped to ``agent_path`` (every runner's ``aresume`` guard) when the
    row it would re-enter, ``node_id`` at ``path``, lies outside that subtree.

    Raises:
        AlreadyResumed: an answer was given: no pending interrupt lies under ``agent_path``.
        ChainResumeError: no answer was given: the run continues outside ``agent_path``.
    """
    if agent_path is None or is_under(path, agent_path):
        return
    where = f"{node_id!r} at {path!r}"
    if value is not None:
        raise AlreadyResumed(
            f"run {execution_id!r} has no pending interrupt under {agent_path!r} (its latest "
            f"step is {where})",
            execution_id=execution_id,
            node_id=node_id,
        )
    raise ChainResumeError(
        f"run {execution_id!r} continues at {where}, outside {agent_path!r}",
        execution_id=execution_id,
        node_id=node_id,
    )


class ChildPaused(BaseException):
    """A nested runner paused; its pause is recorded already.

    Travels up through the enclosing runners (a supervisor's delegating tool, a chain node) so
    each returns ``paused`` without writing anything more. A ``BaseException`` so user code's
    ``except Exception:`` around a delegation cannot swallow it.

    Attributes:
        result: the paused child's :class:`~tether.result.AgentResult`.
    """

    def __init__(self, result: AgentResult) -> None:
        super().__init__("a nested runner paused")
        self.result = result


@dataclass(slots=True)
class ReEntry:
    """A row to re-enter inside nested runners, handed down one level at a time.

    Attributes:
        node_id / status / node_input: the row's address (a fork origin's source row).
        agent_path: who wrote the row.
        state: the row's state snapshot, outer frames included.
        answers: the answers in scope for the re-entered step's ``interrupt()`` calls.
        claim_owner: the claim on the pending interrupt, released by the writer's next row.
        depth: the level this re-entry is handed to (0: the outermost runner).
    """

    node_id: str
    status: str
    node_input: Any
    agent_path: str | None
    state: dict[str, Any]
    answers: list[Answer] = field(default_factory=list)
    claim_owner: str | None = None
    depth: int = 0

    @property
    def frames(self) -> list[dict[str, Any]]:
        return list(self.state.get(OUTER_KEY) or ())

    @property
    def source(self) -> dict[str, Any]:
        """The row's address as a fork's first row keeps it (see ``rows.source_of``)."""
        return {"node_id": self.node_id, "status": self.status, "node_input": self.node_input}

    @property
    def is_own_row(self) -> bool:
        """True at the level that wrote the row."""
        return self.depth >= len(self.frames)

    def frame(self, runner: str, name: str) -> dict[str, Any]:
        """This level's frame, checked to belong to ``runner`` ``name``.

        Raises:
            MissingStepError: the frame is another runner's (the topology was changed).
        """
        frame = self.frames[self.depth]
        if frame.get("runner") != runner or frame.get("name") != name:
            raise MissingStepError(
                f"cannot re-enter row {self.node_id!r} at {self.agent_path!r}: level "
                f"{self.depth} was written by {frame.get('runner')} {frame.get('name')!r}, "
                f"not {runner} {name!r} (was the topology changed?)",
                missing=f"{frame.get('runner')} {frame.get('name')!r}",
            )
        return frame

    def deeper(self) -> ReEntry:
        """The same re-entry, handed to the next level down."""
        return replace(self, depth=self.depth + 1)


def reentry_of(cp: Checkpoint) -> ReEntry:
    """The re-entry for a stored row; a fork's first row stands for the row it copied."""
    source = rows.source_of(cp)
    return ReEntry(
        source["node_id"], source["status"], source["node_input"], cp.agent_path, cp.state_snapshot
    )


def fork_source(src: Checkpoint, value: Resume | None) -> tuple[ReEntry, dict[str, Any]]:
    """The re-entry a branch from ``src`` starts at, and the ``source`` its ``fork_origin``
    row keeps (the copied row's address, with the answer given to the branch).

    Raises:
        ChainResumeError: a ``value`` for a row that is not an interrupt.
    """
    reentry = reentry_of(src)
    source = reentry.source
    reentry.answers = rows.branch_answers(src, source, value)
    if value is not None:
        # Kept on the branch's first row, so a branch that dies at once keeps the answer.
        source["node_input"] = {**source["node_input"], "answers": dump_answers(reentry.answers)}
    return reentry, source


class Reenterable(Protocol):
    """A runner that can tell whether it still has the step a row was written at: part of
    the runner interface every ``Chain``, ``Agent``, ``Swarm`` and ``Supervisor`` implements,
    and a new kind of nested runner must (docs/design.md §11). The engine calls it through
    :func:`check_reentry`, which builds ``missing`` and hands each level its ``parent``."""

    def check_reentry(self, reentry: ReEntry, missing: Missing, parent: str | None) -> None:
        """Check this runner's level of a re-entry (a composite hands the rest down).

        Args:
            reentry: the stored row, as seen from this level (:meth:`ReEntry.deeper` moves
                a level down).
            missing: builds the error to raise, naming what is missing and whose it was.
            parent: the ``agent_path`` this runner runs under (``None`` at the top).

        Raises:
            MissingStepError: ``missing(...)``, unless this runner still has the step
                ``reentry`` names at its level (and, for a composite, below it).
        """


@dataclass(frozen=True, slots=True)
class Missing:
    """Builds the :class:`MissingStepError` of one refused re-entry."""

    reentry: ReEntry
    execution_id: str

    def __call__(self, what: str, owner: str, found: str = "") -> MissingStepError:
        reentry = self.reentry
        pending = (
            "; nothing was claimed: the interrupt stays pending and can be answered once "
            "the code has it again"
            if reentry.status == "interrupted"
            else "; nothing was written"
        )
        return MissingStepError(
            f"run {self.execution_id!r} continues at {reentry.node_id!r} ({reentry.agent_path}) "
            f"in {what}, which {owner} no longer has (was it renamed or removed?{found})"
            f"{pending}",
            missing=what,
            execution_id=self.execution_id,
            node_id=reentry.node_id,
        )


def check_reentry(
    runner: Reenterable, reentry: ReEntry, execution_id: str, parent: str | None = None
) -> None:
    """Refuse a re-entry into a step this code no longer has, before an answer is claimed or
    anything is written (docs/design.md §4).

    Walks the row's frames down the topology (each runner checks its own level and hands the
    rest down): each chain node, swarm agent and supervisor worker they name must still exist,
    the agent that wrote the row must sit at the row's ``agent_path``, and an interrupted tool
    row's tool must still be one of that agent's tools (else resuming would claim the answer,
    tell the model the tool does not exist and go on without running anything). A tool missing
    from a row that is not interrupted is left to the loop, which tells the model, as it does
    for any unknown tool.

    Args:
        runner: the ``Agent``, ``Swarm``, ``Supervisor`` or ``Chain`` at this level.
        reentry: the row, handed to this level.
        execution_id: the run, for the error.
        parent: the ``agent_path`` this level runs under (default: the caller's).

    Raises:
        MissingStepError: naming what is missing (``node_id`` is the row's); the interrupt,
            if any, is left pending and answerable once the code has the step again.
    """
    parent = parent if parent is not None else current_agent_path()
    runner.check_reentry(reentry, Missing(reentry, execution_id), parent)


def check_agent(agent: Any, reentry: ReEntry, path: str, missing: Missing) -> None:
    """The agent-level part of :func:`check_reentry`: ``agent`` (an ``Agent``: its ``name``
    and ``tools``) wrote the row at ``path``."""
    if not reentry.is_own_row or not is_under(reentry.agent_path, path):
        written_by = "/".join((reentry.agent_path or "").split("/")[: path.count("/") + 1])
        raise missing(f"agent {written_by!r}", "this code", f" it runs {path!r} there")
    if reentry.status != "interrupted" or "/tool:" not in reentry.node_id:
        return
    node_input = reentry.node_input if isinstance(reentry.node_input, dict) else {}
    tool = node_input.get("name") or reentry.node_id.partition("/tool:")[2]
    if agent.tool_named(tool) is None:
        known = ", ".join(sorted(agent.tools)) or "none"
        raise missing(f"tool {tool!r}", f"agent {agent.name!r}", f" its tools: {known}")


async def claim_reentry(
    store: Checkpointer,
    cp: Checkpoint,
    value: Resume | None,
    agent_path: str | None,
    *,
    lease_seconds: float,
    runner: Reenterable,
) -> ReEntry:
    """The re-entry for the newest row of a run, claiming its interrupt if it is one.

    Args:
        cp: the newest resumable row (from :func:`tether.engine.rows.latest_resumable`).
        value: the caller's answer.
        agent_path: resume only if ``cp`` lies in this subtree.
        lease_seconds: the claim's lease.
        runner: the outermost runner (a ``Chain``, ``Swarm`` or ``Supervisor``), checked to
            still have the row's step before anything is claimed (:func:`check_reentry`).

    Raises:
        ChainResumeError, AlreadyResumed: as for every runner's ``aresume``.
        MissingStepError: the runner no longer has the row's step; nothing was claimed.
    """
    eid = cp.execution_id
    check_in_subtree(eid, cp.node_id, cp.agent_path, value, agent_path)
    reentry = reentry_of(cp)
    if cp.status != "interrupted" and value is not None:
        raise rows.not_paused(cp)
    check_reentry(runner, reentry, eid)
    if cp.status == "interrupted":
        answers, owner = await claim(store, cp, value, lease_seconds=lease_seconds)
        fault("agent.after_claim")
        reentry.answers, reentry.claim_owner = answers, owner
    else:
        reentry.answers = rows.branch_answers(cp, reentry.source, None)
        await mark_running(store, eid, None)
    return reentry


class Nestable(Protocol):
    """A runner that runs inside another runner's run (``Agent``, ``Swarm``, ``Supervisor``)."""

    async def nested(
        self, store: Checkpointer, eid: str, input: Any, reentry: ReEntry | None
    ) -> AgentResult:
        """Run inside the caller's run; a ``completed`` result, or raise :class:`ChildPaused`."""


@dataclass(frozen=True, slots=True)
class EndLoop:
    """A tool's return value that ends its agent's tool loop after this call (a swarm's
    handoff). ``text`` becomes the call's tool message; the turn's later calls are answered as
    not run, so the history stays valid for every provider."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolStep:
    """The pre-tool row of the tool call running now: what a supervisor records to re-enter
    its own loop at the delegation a worker runs inside.

    Attributes:
        node_id: ``turn:N/tool:<name>``.
        tool_input: ``{"tool_call_id", "name", "arguments"}``.
        messages / turn / usage: the loop's state at that row (not copied: read it before the
            loop goes on).
    """

    node_id: str
    tool_input: dict[str, Any]
    messages: list[Message]
    turn: int
    usage: Usage


_tool_step: ContextVar[ToolStep | None] = ContextVar("tether_tool_step", default=None)


def current_tool_step() -> ToolStep | None:
    """The tool call the caller runs inside, or ``None``."""
    return _tool_step.get()


@contextmanager
def tool_step_scope(step: ToolStep) -> Iterator[None]:
    token = _tool_step.set(step)
    try:
        yield
    finally:
        _tool_step.reset(token)
