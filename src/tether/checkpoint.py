"""The checkpoint record: one row per boundary of a run (docs/design.md §2).

Also the two helpers that pick which row to re-enter (:func:`latest_resumable`) or branch from
(:func:`latest_forkable`); both step over the ``run_end`` tombstone, which addresses no node.
"""

from __future__ import annotations

import datetime as _dt
import os
import random
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from .errors import AlreadyResumed, RunCancelledError, RunNotFoundError

if TYPE_CHECKING:
    from .store.base import Checkpointer, ResumableStore

__all__ = [
    "RUN_END",
    "Checkpoint",
    "Status",
    "StepType",
    "latest_forkable",
    "latest_resumable",
    "new_id",
]

StepType = Literal[
    "llm_call",
    "tool_call",
    "hitl_pause",
    "node",
    "handoff",
    "fork_origin",
    "state_patch",
    "run_end",
]
Status = Literal["completed", "interrupted", "failed", "cancelled"]

RUN_END: Final = "run_end"
STEP_TYPES: Final = frozenset(
    {"llm_call", "tool_call", "hitl_pause", "node", "handoff", "fork_origin", "state_patch"}
    | {"run_end"}
)
STATUSES: Final = frozenset({"completed", "interrupted", "failed", "cancelled"})


_LABELS: Final = {
    ("node", "completed"): "node completed",
    ("llm_call", "completed"): "before model call",
    ("tool_call", "completed"): "before tool call",
    ("hitl_pause", "interrupted"): "paused for a human",
    ("handoff", "completed"): "handoff",
    ("fork_origin", "completed"): "branch start",
    ("state_patch", "completed"): "state patched",
    ("run_end", "completed"): "run completed",
    ("run_end", "failed"): "run failed",
    ("run_end", "cancelled"): "run cancelled",
}

_JOURNAL_LABELS: Final = {
    ("llm_call", "completed"): "model answered",
    ("tool_call", "completed"): "tool returned",
}
"""Labels of the rows the pydantic-ai and OpenAI Agents integrations journal: written once the
call returned (they record its result), where tether's own agent writes its row before it."""

_JOURNAL_RUNNERS: Final = ("pydantic_ai:", "openai_agents:")
"""The ``agent_path`` prefixes of those integrations' runners."""


# Ids come from a generator seeded from os.urandom (reseeded in a forked child), not from a
# system call each: every step takes one. They name rows, they guard nothing (the web page
# has its own authentication), so they need to be unique, not unpredictable.
_IDS = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _IDS.seed(os.urandom(32)))


def new_id() -> str:
    """A fresh random id (32 hex characters, 128 random bits) for runs and checkpoints."""
    return f"{_IDS.getrandbits(128):032x}"


def utcnow() -> _dt.datetime:
    """The current time as an aware UTC datetime."""
    return _dt.datetime.now(_dt.UTC)


@dataclass(slots=True)
class Checkpoint:
    """One run at one boundary.

    Attributes:
        execution_id: the run's id, fixed for its life.
        node_id: the re-entry address: a chain node id, ``"turn:N"``, ``"turn:N/tool:<name>"``,
            or ``"run_end"`` for the terminal tombstone.
        step_type: one of ``llm_call``, ``tool_call``, ``hitl_pause``, ``node``, ``handoff``,
            ``fork_origin``, ``state_patch`` (a resume's ``state_updates``), ``run_end``.
        status: ``completed``, ``interrupted``, ``failed``, or ``cancelled`` (a run-end row
            only); drives resume (docs/design.md §4).
        state_snapshot: the full run state after this boundary (a dict; the store may keep only
            what changed, but always hands back the whole state).
        node_index: position in topological / turn order.
        node_input: the step's input, e.g. a tool's arguments; JSON-able.
        node_output: the step's result; JSON-able.
        iteration_counters: cycle counts, ``{"<source>-><target>": times_taken}``.
        interrupt_reason: for an interrupted row, the reason given to ``interrupt()``.
        interrupt_context: for an interrupted row, the frozen context the human approves.
        agent_path: where in a multi-agent topology the row was written (docs/design.md §8).
        parent_checkpoint_id: for a fork's first row, the checkpoint it branched from.
        next_node_id: the step the recorded routing chose to run next (``None`` when the run
            has nothing left to do); resume continues there, never at declaration order.
        checkpoint_id: unique id; assigned on write when empty.
        seq: strictly increasing per run, assigned by the store; "latest" means highest seq.
        created_at: UTC time of the write, assigned by the store.
    """

    execution_id: str
    node_id: str
    step_type: str
    status: str
    state_snapshot: dict[str, Any] = field(default_factory=dict)
    node_index: int = 0
    node_input: Any = None
    node_output: Any = None
    iteration_counters: dict[str, int] = field(default_factory=dict)
    interrupt_reason: str | None = None
    interrupt_context: Any = None
    agent_path: str | None = None
    parent_checkpoint_id: str | None = None
    next_node_id: str | None = None
    checkpoint_id: str = ""
    seq: int = 0
    created_at: _dt.datetime | None = None

    def __post_init__(self) -> None:
        # Resume branches on these: a row it cannot classify (a newer or broken writer's) must
        # be refused, never read as "completed" (the store maps this to CorruptRecordError).
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r} (known: {sorted(STATUSES)})")
        if self.step_type not in STEP_TYPES:
            raise ValueError(f"unknown step_type {self.step_type!r} (known: {sorted(STEP_TYPES)})")

    @property
    def is_run_end(self) -> bool:
        """True for the terminal tombstone, which addresses no node."""
        return self.step_type == RUN_END

    @property
    def label(self) -> str:
        """What the row records, in words for a timeline: ``"before model call"``, ``"before
        tool call"``, ``"node completed"``, ``"paused for a human"``, ``"handoff to
        <agent>"``, ``"branch start"``, ``"run completed"``, ``"run failed"``.

        tether's own agent rows are written *before* the call they address, so their
        ``completed`` status says only that the row committed, never that the model or tool
        call succeeded. The pydantic-ai and OpenAI Agents integrations journal a call once it
        returned: their rows read ``"model answered"`` and ``"tool returned"``.
        """
        key = (self.step_type, self.status)
        if key in _JOURNAL_LABELS and (self.agent_path or "").startswith(_JOURNAL_RUNNERS):
            return _JOURNAL_LABELS[key]
        if self.step_type == "handoff" and isinstance(self.node_input, dict):
            target = self.node_input.get("to")
            if isinstance(target, str):
                return f"handoff to {target}"
        return _LABELS.get(key, f"{self.step_type} {self.status}")


def _assert_run(store: Checkpointer, execution_id: str) -> None:
    if store.get_run(execution_id) is None:
        raise RunNotFoundError(
            f"no run with execution_id {execution_id!r}", execution_id=execution_id
        )


Reads = Generator[int | None, Any, "Checkpoint | None"]
"""A rule over a run's rows written once for the sync and the async reader (the drivers:
:func:`read_rows` here, ``tether.engine.rows.aread_rows``): it yields what it needs read and
is sent the answer. It yields :data:`RESUMABLE` for the store's one-read ``get_resumable``
(sent ``(row, run_end_status)``), or a ``before_seq`` (``None``: the newest) for ``get_last``
(sent the row or ``None``), and returns the row it picks."""

RESUMABLE: Final = -1


def resumable(store: object) -> ResumableStore | None:
    """``store`` as a :class:`~tether.store.base.ResumableStore` (it reads the row a resume
    re-enters in one read: both bundled backends), or ``None`` when it lacks the capability
    and is walked back with ``get_last``."""
    # Not ``isinstance``: a runtime-checkable protocol checks that the names exist, not that
    # they can be called.
    found = callable(getattr(store, "get_resumable", None)) and callable(
        getattr(store, "aget_resumable", None)
    )
    return cast("ResumableStore", store) if found else None


def one_read(store: object) -> ResumableStore:
    """``store`` as a :class:`~tether.store.base.ResumableStore`, which a rule asking for
    :data:`RESUMABLE` was promised (a bug otherwise: ``RuntimeError``)."""
    found = resumable(store)
    if found is None:  # pragma: no cover - a rule built with fast=True for such a store
        raise RuntimeError(f"{type(store).__name__} cannot read the resumable row in one read")
    return found


def cancelled_error_of(execution_id: str, last: Checkpoint | None) -> RunCancelledError:
    """The :class:`RunCancelledError` of a cancelled run, naming who, when and why from its
    ``cancelled`` run-end row ``last`` (docs/design.md §4)."""
    info: dict[str, Any] = {}
    if last is not None and last.is_run_end and isinstance(last.node_output, dict):
        info = last.node_output
    by, reason, at = info.get("cancelled_by"), info.get("reason"), info.get("cancelled_at")
    said = "".join(
        [f" by {by}" if by else "", f" at {at}" if at else "", f": {reason}" if reason else ""]
    )
    return RunCancelledError(
        f"run {execution_id!r} was cancelled{said}; it takes no resume or answer (fork it to "
        "continue from one of its checkpoints)",
        execution_id=execution_id,
        cancelled_by=by,
        reason=reason,
        cancelled_at=at,
    )


def past_run_ends(row: Checkpoint | None) -> Reads:
    """``row``, or the newest row before it when it is a run-end tombstone (which addresses no
    step): what resume and fork both step over."""
    while row is not None and row.is_run_end:
        row = yield row.seq
    return row


def resumable_rows(execution_id: str, *, fast: bool) -> Reads:
    """The rule of resume (docs/design.md §4): the newest row past a run end, refusing a run
    whose newest row is a ``completed`` or ``cancelled`` run end. ``fast``: the store has
    ``get_resumable``.

    Raises:
        AlreadyResumed: the run completed.
        RunCancelledError: the run was cancelled (who, when and why from its run end).
    """
    cp: Checkpoint | None
    ended: str | None
    if fast:
        cp, ended = yield RESUMABLE
    else:
        cp = yield None
        ended = cp.status if cp is not None and cp.is_run_end else None
        cp = yield from past_run_ends(cp)
    if ended == "cancelled":
        end: Checkpoint | None = yield None  # its run end says who cancelled it, when, why
        raise cancelled_error_of(execution_id, end)
    if ended == "completed":
        raise AlreadyResumed(
            f"run {execution_id!r} already completed; fork it to branch a new run",
            execution_id=execution_id,
        )
    return cp


def forkable_rows() -> Reads:
    """The rule of fork (docs/design.md §9): the newest row past a run end; a finished run is
    the ordinary case, never refused."""
    newest: Checkpoint | None = yield None
    return (yield from past_run_ends(newest))


def read_rows(
    rule: Reads, store: Checkpointer, execution_id: str, agent_path_prefix: str | None = None
) -> Checkpoint | None:
    """Run ``rule`` (:data:`Reads`) against a store's sync reads."""
    try:
        ask = next(rule)
        while True:
            if ask == RESUMABLE:
                got: Any = one_read(store).get_resumable(execution_id)
            else:
                got = store.get_last(
                    execution_id, before_seq=ask, agent_path_prefix=agent_path_prefix
                )
            ask = rule.send(got)
    except StopIteration as done:
        result: Checkpoint | None = done.value
        return result


def latest_resumable(
    store: Checkpointer, execution_id: str, *, agent_path_prefix: str | None = None
) -> Checkpoint | None:
    """The checkpoint resume re-enters from.

    Steps over a ``failed`` run-end marker (a run that raised stays resumable) and refuses a
    ``completed`` one (docs/design.md §4).

    Args:
        store: the checkpointer holding the run.
        execution_id: the run.
        agent_path_prefix: only consider rows written under this ``agent_path`` subtree.

    Returns:
        The newest non-tombstone checkpoint, or ``None`` when the run has none yet (it crashed
        before its first step committed).

    Raises:
        RunNotFoundError: no run has this id.
        AlreadyResumed: the run's newest row is a ``completed`` run-end marker.
        RunCancelledError: the run was cancelled.
    """
    # The bundled stores read the resumable row in one statement.
    fast = agent_path_prefix is None and resumable(store) is not None
    cp = read_rows(resumable_rows(execution_id, fast=fast), store, execution_id, agent_path_prefix)
    if cp is None:
        _assert_run(store, execution_id)
    return cp


def latest_forkable(
    store: Checkpointer, execution_id: str, *, agent_path_prefix: str | None = None
) -> Checkpoint | None:
    """The checkpoint fork branches from by default: the newest row that is not a tombstone.

    Unlike :func:`latest_resumable`, a finished run (completed or failed) is the ordinary case
    and is never refused (docs/design.md §9).

    Raises:
        RunNotFoundError: no run has this id.
    """
    cp = read_rows(forkable_rows(), store, execution_id, agent_path_prefix)
    if cp is None:
        _assert_run(store, execution_id)
    return cp


def run_result(rows: list[Checkpoint]) -> dict[str, Any] | None:
    """What a finished run ended with, read from its rows (seq order): ``None`` while its
    newest row is not a run-end marker (running, paused, or a failed run resumed since).

    The one home of what a run-end row means (docs/design.md §2):

    - ``completed``: ``{"status": "completed", "output": ...}``; an agent's run-end row keeps
      its final text in ``node_output["output"]``, a chain's output is its final state, the
      run-end row's ``state_snapshot`` (kept once, not copied into ``node_output``);
    - ``failed``: ``{"status": "failed", "error": "<Type>: <message>", "failed_node_id":
      ...}`` (``None`` when the failure came from outside any step).

    Both carry ``"checkpoint_id"``, the run-end row's.
    """
    if not rows or not rows[-1].is_run_end:
        return None
    end = rows[-1]
    kept = end.node_output if isinstance(end.node_output, dict) else {}
    if end.status == "failed":
        return {
            "status": "failed",
            "error": kept.get("error"),
            "failed_node_id": kept.get("node_id"),
            "checkpoint_id": end.checkpoint_id,
        }
    output = kept.get("output", end.state_snapshot)
    return {"status": "completed", "output": output, "checkpoint_id": end.checkpoint_id}
