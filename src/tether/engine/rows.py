"""Every row the engine writes, built in one place, and the rules about rows (docs/design.md
§2-4, §9).

The chain and agent executors, the composite runners and the integrations build their rows
here: the step rows (:func:`step`), the paused row (:func:`pause`), the run end
(:func:`run_end`, committed with :func:`ends` or :func:`fail_run`) and a fork's first row
(:func:`fork_origin`). The rules that read rows back live beside them: what resume steps over
(:func:`latest_resumable`), what fork may branch from (:func:`fork_source_row`), what a fork's
first row stands for (:func:`source_of`), which answers a branch starts with
(:func:`branch_answers`), and the state a pause keeps (:func:`committed_state`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .. import serde
from ..audit import answer_entry
from ..checkpoint import (
    RESUMABLE,
    RUN_END,
    Checkpoint,
    Reads,
    StepType,
    forkable_rows,
    one_read,
    past_run_ends,
    resumable,
    resumable_rows,
)
from ..control import cancelled_error
from ..errors import AlreadyResumed, ChainResumeError, CheckpointNotFoundError
from ..hooks import arecord_pause
from ..interrupt import Answer, Resume, answers_with, check_resume_value, stored_answers
from .lease import ending, load_run, mark_running

if TYPE_CHECKING:
    from ..errors import InterruptSignal
    from ..store.base import Checkpointer, PendingInterrupt, RunRecord

__all__ = [
    "branch_answers",
    "committed_state",
    "ends",
    "error_text",
    "fail_run",
    "failure",
    "fork_origin",
    "fork_point",
    "fork_source_row",
    "latest_resumable",
    "no_pending_interrupt",
    "not_an_interrupt",
    "not_paused",
    "pause",
    "record_fork_answer",
    "record_pause",
    "restart_input",
    "resume_point",
    "run_end",
    "source_of",
    "step",
]


def error_text(exc: BaseException) -> str:
    """How an exception is recorded in a failed run-end row and the run's ``error``."""
    return f"{type(exc).__name__}: {exc}"


# -- rows a drive writes as it goes ---------------------------------------------------------


def step(
    execution_id: str,
    node_id: str,
    step_type: StepType,
    state: dict[str, Any],
    *,
    node_index: int,
    node_input: Any = None,
    node_output: Any = None,
    agent_path: str | None = None,
    counters: dict[str, int] | None = None,
    next_node_id: str | None = None,
) -> Checkpoint:
    """A ``completed`` step row: a chain node done (``node``), an agent about to call its model
    (``llm_call``) or a tool (``tool_call``), a handoff (docs/design.md §2, §3)."""
    # Positional, in Checkpoint's field order (tests/chain/test_step_rows.py pins it): one is
    # built per step, and binding keywords costs a dataclass about twice as much.
    return Checkpoint(
        execution_id,
        node_id,
        step_type,
        "completed",
        state,
        node_index,
        node_input,
        node_output,
        counters if counters is not None else {},
        None,  # interrupt_reason
        None,  # interrupt_context
        agent_path,
        None,  # parent_checkpoint_id
        next_node_id,
    )


def pause(
    execution_id: str,
    node_id: str,
    state: dict[str, Any],
    sig: InterruptSignal,
    node_input: Any,
    *,
    node_index: int,
    agent_path: str | None = None,
    counters: dict[str, int] | None = None,
) -> Checkpoint:
    """The ``interrupted`` row of a step that called ``interrupt()``: its context frozen as
    JSON now, never recomputed, and the step itself as the way back in (docs/design.md §5).

    Raises:
        SerializationError: the interrupt's context cannot be stored (naming its path).
    """
    context = serde.from_jsonable(serde.loads(serde.dumps(sig.context, "interrupt context")))
    return Checkpoint(
        execution_id=execution_id,
        node_id=node_id,
        step_type="hitl_pause",
        status="interrupted",
        state_snapshot=state,
        node_index=node_index,
        node_input=node_input,
        iteration_counters=counters if counters is not None else {},
        interrupt_reason=sig.reason,
        interrupt_context=context,
        agent_path=agent_path,
        next_node_id=node_id,
    )


async def record_pause(
    store: Checkpointer, row: Checkpoint, *, claim_owner: str | None
) -> PendingInterrupt:
    """Commit a paused row with its pending interrupt and the run's ``paused`` status in one
    transaction, releasing the claim the drive held and the run's lease (a pause ends the
    drive)."""
    return await arecord_pause(store, row, release_claim_of=claim_owner, **ending(row.execution_id))


# -- the run end ----------------------------------------------------------------------------


def failure(exc: BaseException, node_id: str | None = None) -> dict[str, Any]:
    """A failed run end's ``node_output``: the error, and the step it escaped from if known."""
    output: dict[str, Any] = {"error": error_text(exc)}
    if node_id is not None:
        output["node_id"] = node_id
    return output


def run_end(
    execution_id: str,
    status: Literal["completed", "failed"],
    *,
    state: dict[str, Any] | None = None,
    node_index: int = 0,
    node_output: Any = None,
    agent_path: str | None = None,
    counters: dict[str, int] | None = None,
) -> Checkpoint:
    """The one terminal row of a run (docs/design.md §3): a tombstone, not an address;
    written by the outermost runner only. A failed one's ``node_output`` is :func:`failure`'s.
    """
    return Checkpoint(
        execution_id=execution_id,
        node_id=RUN_END,
        step_type=RUN_END,
        status=status,
        state_snapshot=state if state is not None else {},
        node_index=node_index,
        node_output=node_output,
        iteration_counters=counters if counters is not None else {},
        agent_path=agent_path,
    )


def ends(row: Checkpoint) -> dict[str, Any]:
    """The keyword arguments of the ``aput`` that commits a run-end row: the run's status (and
    error) in the same transaction, and the run's lease given back by that commit."""
    kwargs: dict[str, Any] = {"run_status": row.status, **ending(row.execution_id)}
    if row.status == "failed" and isinstance(row.node_output, dict):
        kwargs["error"] = row.node_output.get("error")
    return kwargs


async def fail_run(store: Checkpointer, row: Checkpoint, *, claim_owner: str | None) -> None:
    """Commit a failed run end. A claim the drive still holds is released first, so the
    answer it carried stays for the resume that retries the step (docs/design.md §3)."""
    if claim_owner is not None:
        await store.arelease_claim(row.execution_id, owner=claim_owner)
    await store.aput(row, **ends(row))


# -- fork -----------------------------------------------------------------------------------


def source_of(row: Checkpoint) -> dict[str, Any]:
    """The row ``row`` stands for, as ``{"node_id", "status", "node_input"}``: itself, or for
    a fork's first row the row it copied (a fork of a fork copies the same source)."""
    if row.step_type == "fork_origin" and isinstance(row.node_input, dict):
        source = row.node_input.get("source")
        if isinstance(source, dict):
            return dict(source)
    return {"node_id": row.node_id, "status": row.status, "node_input": row.node_input}


def fork_origin(
    execution_id: str,
    src: Checkpoint,
    state: dict[str, Any],
    node_input: dict[str, Any],
    *,
    agent_path: str | None,
    counters: dict[str, int] | None = None,
    next_node_id: str | None = None,
) -> Checkpoint:
    """A branch's first row (docs/design.md §9): a full snapshot of the state it starts from,
    linked to the row ``src`` it branches from; ``node_input`` names the source run
    (``forked_from``) and what the branch re-enters."""
    return Checkpoint(
        execution_id=execution_id,
        node_id=src.node_id,
        step_type="fork_origin",
        status="completed",
        state_snapshot=state,
        node_index=src.node_index,
        node_input=node_input,
        iteration_counters=counters if counters is not None else {},
        agent_path=agent_path,
        parent_checkpoint_id=src.checkpoint_id,
        next_node_id=next_node_id,
    )


def branch_answers(src: Checkpoint, source: dict[str, Any], value: Resume | None) -> list[Answer]:
    """The answers a branch from ``src`` starts with: for an interrupted ``source``, those it
    kept, with ``value`` bound to its question (docs/design.md §5); none otherwise.

    Raises:
        ChainResumeError: ``value`` given for a row that is not an interrupt.
    """
    if source["status"] == "interrupted":
        node_input = source["node_input"]
        return stored_answers(node_input) if value is None else answers_with(node_input, value)
    if value is not None:
        raise not_an_interrupt(src)
    return []


def not_an_interrupt(src: Checkpoint) -> ChainResumeError:
    """The refusal of a fork's ``resume_value`` for a row ``src`` that is not an interrupt.

    Bad input, not a race: the row is stored and never becomes a question, so the same call
    fails again (a ``ChainResumeError``, not an ``AlreadyResumed``, which says another caller
    came first or the run ended). Raised before the branch is created: nothing is written.
    """
    source = source_of(src)
    what = f"step {source['node_id']!r}, {source['status']}"
    if src.step_type == "fork_origin":
        what = f"a fork's first row, copying {what}"
    return ChainResumeError(
        f"checkpoint {src.checkpoint_id} of run {src.execution_id!r} ({what}) is not an "
        "interrupt: it waits on no question, so the fork's resume_value has nothing to answer. "
        "Fork without resume_value, or from an interrupted checkpoint; nothing was written",
        execution_id=src.execution_id,
        node_id=src.node_id,
    )


async def record_fork_answer(
    store: Checkpointer, execution_id: str, value: Resume | None, src: Checkpoint
) -> None:
    """Record a fork's ``resume_value`` in the branch's audit trail: it answers ``src``'s
    question for the branch (docs/design.md §5, "The audit trail"). Written right after the
    branch's ``fork_origin`` row, before the answer is used."""
    if value is not None:
        await store.arecord_audit(answer_entry(execution_id, value, src))


# -- what resume reads ----------------------------------------------------------------------


async def resume_point(
    store: Checkpointer, execution_id: str, runner_name: str, resume_value: Any
) -> tuple[Resume | None, RunRecord, Checkpoint | None]:
    """What every resume reads first: the answer (checked to be a ``Resume``), the run
    (checked to be ``runner_name``'s) and the row it re-enters (:func:`latest_resumable`;
    ``None`` when no step committed).

    Raises:
        ChainResumeError: ``resume_value`` is not a ``Resume``.
        RunNotFoundError, RunnerMismatchError: see :func:`tether.engine.lease.load_run`.
        AlreadyResumed: the run completed.
        RunCancelledError: the run was cancelled.
    """
    value = check_resume_value(resume_value)
    run = await load_run(store, execution_id, runner_name)
    if run.status == "cancelled":
        # Refused from its run-end row alone: the rows it would re-enter are not read, so a
        # run cancelled because its stored state is damaged says so, not that it is damaged.
        raise await cancelled_error(store, execution_id)
    return value, run, await latest_resumable(store, execution_id)


async def restart_input(store: Checkpointer, run: RunRecord, value: Resume | None) -> Any:
    """The input a run with no committed step starts over from (it died before its first row),
    after setting it running; an answer is refused, since nothing can be pending.

    Raises:
        AlreadyResumed: ``value`` was given.
    """
    if value is not None:
        raise no_pending_interrupt(run.execution_id)
    await mark_running(store, run.execution_id, run.status)
    return run.input


async def fork_point(
    store: Checkpointer,
    execution_id: str,
    runner_name: str,
    checkpoint_id: str | None,
    resume_value: Any,
) -> tuple[Resume | None, RunRecord, Checkpoint]:
    """What every fork reads first: the answer for the branch, the source run (checked to be
    ``runner_name``'s) and the row it branches from (:func:`fork_source_row`).

    Raises:
        ChainResumeError: ``resume_value`` is not a ``Resume``, or it names another row.
        RunNotFoundError, RunnerMismatchError, CheckpointNotFoundError.
    """
    value = check_resume_value(resume_value)
    run = await load_run(store, execution_id, runner_name)
    return value, run, await fork_source_row(store, execution_id, checkpoint_id, value)


def no_pending_interrupt(execution_id: str) -> AlreadyResumed:
    """The refusal of an answer for a run with no step committed (nothing can be pending)."""
    return AlreadyResumed(
        f"run {execution_id!r} has no pending interrupt to answer", execution_id=execution_id
    )


def not_paused(cp: Checkpoint) -> AlreadyResumed:
    """The refusal of an answer for a run whose latest row ``cp`` is not an interrupt."""
    return AlreadyResumed(
        f"run {cp.execution_id!r} is not paused (latest step {cp.node_id!r} is {cp.status}); "
        "there is no interrupt to answer",
        execution_id=cp.execution_id,
        node_id=cp.node_id,
    )


async def committed_state(store: Checkpointer, execution_id: str) -> dict[str, Any]:
    """The state as of the run's last committed step, stepping over a run end (its input if
    no step committed yet)."""
    last = await aread_rows(forkable_rows(), store, execution_id)
    if last is not None:
        return last.state_snapshot
    run = await store.aget_run(execution_id)
    return dict(run.input or {}) if run is not None else {}


async def aread_rows(
    rule: Reads, store: Checkpointer, execution_id: str, agent_path_prefix: str | None = None
) -> Checkpoint | None:
    """Run ``rule`` (:data:`tether.checkpoint.Reads`) against a store's async reads."""
    try:
        ask = next(rule)
        while True:
            if ask == RESUMABLE:
                got: Any = await one_read(store).aget_resumable(execution_id)
            else:
                got = await store.aget_last(
                    execution_id, before_seq=ask, agent_path_prefix=agent_path_prefix
                )
            ask = rule.send(got)
    except StopIteration as done:
        result: Checkpoint | None = done.value
        return result


async def latest_resumable(store: Checkpointer, execution_id: str) -> Checkpoint | None:
    """The row resume re-enters: the newest row that is not a run-end marker (a failed run
    stays resumable), or ``None`` when no step committed (docs/design.md §4; the rule is
    :func:`tether.checkpoint.resumable_rows`). One read on the bundled stores
    (``aget_resumable``); any other store is walked back with ``aget_last``.

    Raises:
        AlreadyResumed: the run's newest row is a ``completed`` run-end marker.
    """
    fast = resumable(store) is not None
    return await aread_rows(resumable_rows(execution_id, fast=fast), store, execution_id)


async def fork_source_row(
    store: Checkpointer,
    execution_id: str,
    checkpoint_id: str | None,
    answer: Resume | None = None,
) -> Checkpoint:
    """The row a fork branches from: ``checkpoint_id``, or the newest row; a ``run_end``
    tombstone is stepped over either way (it addresses no node: docs/design.md §9).

    Args:
        answer: the fork's ``resume_value``; bound to a question (``answer.checkpoint_id``),
            it must be the row's.

    Raises:
        CheckpointNotFoundError: no such checkpoint in the run, or the run has none yet.
        ChainResumeError: ``answer`` was given for another row's question.
    """
    if checkpoint_id is None:
        src = await store.aget_last(execution_id)
    else:
        src = await store.aget_checkpoint(execution_id, checkpoint_id)
        if src is None:
            raise CheckpointNotFoundError(
                f"run {execution_id!r} has no checkpoint {checkpoint_id!r}",
                execution_id=execution_id,
            )
    src = await aread_rows(past_run_ends(src), store, execution_id)
    if src is None:
        raise CheckpointNotFoundError(
            f"run {execution_id!r} has no checkpoint to fork from yet", execution_id=execution_id
        )
    shown = None if answer is None else answer.checkpoint_id
    if shown is not None and shown != src.checkpoint_id:
        raise ChainResumeError(
            f"the fork's resume_value answers the question at checkpoint {shown}, but the fork "
            f"branches from checkpoint {src.checkpoint_id} of run {execution_id!r}; nothing "
            "was written",
            execution_id=execution_id,
        )
    return src
