"""The claim of a pending interrupt: exactly one resumer gets a given answer, and its claim is
a lease renewed while the re-entered step runs (docs/design.md §5)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..audit import answer_entry
from ..checkpoint import Checkpoint
from ..control import refuse_if_cancelled
from ..errors import AlreadyResumed, ChainResumeError, CorruptRecordError, InterruptChangedError
from ..interrupt import Answer, Resume, answers_with, pending_identity, stored_answers
from ..store.base import Checkpointer, PendingInterrupt
from .lease import current as current_lease
from .owners import new_owner, process_is_dead
from .sync import raise_if_cancel_requested

__all__ = [
    "DEFAULT_CLAIM_LEASE_SECONDS",
    "answerable_row",
    "claim",
    "claim_heartbeat",
    "question_changed",
]

DEFAULT_CLAIM_LEASE_SECONDS = 60.0


async def claim(
    store: Checkpointer,
    cp: Checkpoint,
    resume_value: Resume | None,
    *,
    lease_seconds: float,
) -> tuple[list[Answer], str]:
    """Claim the pending interrupt behind an ``interrupted`` checkpoint.

    Returns:
        ``(answers, owner)``: the answers the re-entered step holds (those the row kept, then
        the claimed one, bound to the row's question: ``tether.interrupt.answers_with``), and
        the owner id holding the claim.

    Raises:
        ChainResumeError: no answer was passed and none is stored; or the row's stored answers
            are malformed (nothing is claimed).
        InterruptChangedError: ``resume_value`` names a question (``checkpoint_id``) other
            than the row's, or the run moved on to another question before the claim.
        AlreadyResumed: another caller holds or answered the interrupt.
    """
    eid = cp.execution_id
    # Read what the row keeps first: an answer must not be claimed for a row it cannot join.
    stored_answers(cp.node_input)
    pending_identity(cp.node_input)
    shown = None if resume_value is None else resume_value.checkpoint_id
    if shown is not None and shown != cp.checkpoint_id:
        raise question_changed(eid, shown, await store.aget_pending_interrupt(eid))
    # Under a run lease the claim has the lease's owner, so whoever takes the run over from a
    # dead owner can take its claim over too, without waiting out the claim's own lease.
    lease = current_lease()
    owner = lease.owner if lease is not None and lease.execution_id == eid else new_owner()
    previous = lease.previous_owner if lease is not None and lease.execution_id == eid else None
    value = None if resume_value is None else resume_value.to_dict()
    # Bound to this row's question in the claim's own statement: the answers are bound to its
    # identity below, so a claim landing on a newer question would misapply them. A claim
    # that stores an answer records it in the run's audit trail in the same transaction.
    won = await store.aclaim_interrupt(
        eid,
        owner=owner,
        resume_value=value,
        lease_seconds=lease_seconds,
        checkpoint_id=cp.checkpoint_id,
        audit=None if resume_value is None else answer_entry(eid, resume_value, cp),
    )
    if won is None:
        pending = await store.aget_pending_interrupt(eid)
        if pending is not None and pending.checkpoint_id != cp.checkpoint_id:
            if resume_value is not None:
                raise question_changed(eid, cp.checkpoint_id, pending)
            raise AlreadyResumed(
                f"run {eid!r} moved on to another question while it was being resumed",
                execution_id=eid,
                node_id=cp.node_id,
            )
        if pending is None:
            raise AlreadyResumed(
                f"run {eid!r} has no pending interrupt: another resumer took it",
                execution_id=eid,
                node_id=cp.node_id,
            )
        if resume_value is None and pending.resume_value is None:
            raise ChainResumeError(
                f"run {eid!r} is paused at {cp.node_id!r} ({pending.reason}); pass "
                "resume_value=Resume(...) to answer it",
                execution_id=eid,
                node_id=cp.node_id,
            )
        if (
            resume_value is None
            and pending.claimed_by is not None
            and (process_is_dead(pending.claimed_by) or pending.claimed_by == previous)
        ):
            won = await store.aclaim_interrupt(
                eid,
                owner=owner,
                resume_value=None,
                lease_seconds=lease_seconds,
                steal_from=pending.claimed_by,
                checkpoint_id=cp.checkpoint_id,
            )
        if won is None:
            raise AlreadyResumed(
                f"the interrupt of run {eid!r} at {cp.node_id!r} was already answered"
                + (" and is being resumed by another process" if pending.claimed_by else ""),
                execution_id=eid,
                node_id=cp.node_id,
            )
    return _answers(cp, won), owner


def question_changed(
    execution_id: str, checkpoint_id: str, pending: PendingInterrupt | None
) -> InterruptChangedError:
    """The refusal of an answer given for the question recorded at ``checkpoint_id`` when the
    run waits on ``pending`` instead (or on nothing), naming the question now pending."""
    if pending is None:
        now = "it waits on no question now (it was answered and moved on)"
    else:
        where = pending.node_id + (f" in {pending.agent_path}" if pending.agent_path else "")
        state = "already answered" if pending.resume_value is not None else "unanswered"
        now = (
            f"it waits on another question now: {pending.reason!r} at {where} (checkpoint "
            f"{pending.checkpoint_id}, {state})"
        )
    return InterruptChangedError(
        f"the answer to the question of run {execution_id!r} at checkpoint {checkpoint_id} was "
        f"not stored: {now}; read the pending question and answer that one",
        checkpoint_id=checkpoint_id,
        pending_checkpoint_id=None if pending is None else pending.checkpoint_id,
        execution_id=execution_id,
        node_id=None if pending is None else pending.node_id,
    )


def _answers(cp: Checkpoint, won: PendingInterrupt) -> list[Answer]:
    return answers_with(cp.node_input, Resume.from_dict(won.resume_value))


@contextlib.asynccontextmanager
async def claim_heartbeat(
    store: Checkpointer, execution_id: str, owner: str | None, lease_seconds: float
) -> AsyncIterator[None]:
    """Renew a claim every third of its lease while the re-entered step runs."""
    if owner is None:
        yield
        return

    async def beat() -> None:
        while True:
            await asyncio.sleep(lease_seconds / 3)
            if not await store.arenew_claim(execution_id, owner=owner, lease_seconds=lease_seconds):
                return
            raise_if_cancel_requested()  # else a cancel the renewal swallowed hangs the drive

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def answerable_row(store: Checkpointer, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
    """The row of the question at ``checkpoint_id``, read as a resume reads it (its state
    replayed from its snapshot, its ``node_input``), before anything answers it: the check the
    CLI and the web make before they store an answer or take the run's lease to resume it.

    Raises:
        CorruptRecordError: the row (or a row its state replays through) cannot be decoded: a
            damaged run cannot be answered; names the run and the seq, and nothing was written.
    """
    try:
        return store.get_checkpoint(execution_id, checkpoint_id)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"run {execution_id!r} cannot be answered, nothing was stored: {exc.message}. "
            f"Repair the row, or end the run with `tether cancel {execution_id}`",
            execution_id=execution_id,
            node_id=exc.node_id,
            seq=exc.seq,
        ) from exc


def store_answer(store: Checkpointer, execution_id: str, value: Resume) -> None:
    """Store ``value`` for the question it is bound to, with its audit entry, or refuse it
    naming what happened: the answer of a surface (the CLI, the web page) that has no runner
    for the run; the run continues when a process with its code resumes it.

    Raises:
        InterruptChangedError: the run waits on another question than ``value``'s.
        AlreadyResumed: the question was answered or resumed meanwhile.
        CorruptRecordError: the question's row cannot be read (:func:`answerable_row`).
    """
    assert value.checkpoint_id is not None
    question: Checkpoint | PendingInterrupt | None = answerable_row(
        store, execution_id, value.checkpoint_id
    )
    if question is None:
        question = store.get_pending_interrupt(execution_id)
    audit = None if question is None else answer_entry(execution_id, value, question)
    if store.answer_interrupt(
        execution_id, value.to_dict(), checkpoint_id=value.checkpoint_id, audit=audit
    ):
        return
    now = store.get_pending_interrupt(execution_id)
    if now is None:  # cancelled while the answer was on its way: say so
        refuse_if_cancelled(store, store.get_run(execution_id))
    if now is None or now.checkpoint_id != value.checkpoint_id:
        raise question_changed(execution_id, value.checkpoint_id, now)
    raise AlreadyResumed(
        f"the interrupt of run {execution_id!r} was answered or resumed meanwhile",
        execution_id=execution_id,
    )
