"""What every runner shares: the claim of a pending interrupt, its lease, the sync twins."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import socket
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from ._context import sync_drive
from .audit import answer_entry
from .checkpoint import Checkpoint
from .errors import (
    AlreadyResumed,
    ChainResumeError,
    CheckpointNotFoundError,
    ConfigurationError,
    InterruptChangedError,
    RunnerMismatchError,
    RunNotFoundError,
)
from .interrupt import Answer, Resume, answers_with, pending_identity, stored_answers
from .store.base import Checkpointer, PendingInterrupt, RunRecord, resumable

T = TypeVar("T")

HOSTNAME = socket.gethostname()
DEFAULT_CLAIM_LEASE_SECONDS = 60.0


def new_owner() -> str:
    """An owner id for one claim: ``host:pid:nonce``."""
    return f"{HOSTNAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _owner_is_dead(owner: str | None) -> bool:
    """True when ``owner`` is a process on this host that no longer exists.

    A claim whose process died need not wait out its lease: a SIGKILLed resumer on the same
    machine is detected at once. Owners on other hosts are trusted until the lease lapses.
    """
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_s = rest.partition(":")[0]
    if host != HOSTNAME or not pid_s.isdigit():
        return False
    pid = int(pid_s)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _finish_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a verb left on its thread's loop (a node's fire-and-forget task) and
    let them finish, as ``asyncio.run`` does when it returns: none outlives its verb."""
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class _LoopHolder:
    """Owns one thread's sync loop and closes it when the thread's locals go, that is when
    the thread ends (not when its ``Thread`` object is collected, which a caller keeping the
    object would delay indefinitely, holding the loop's file descriptors)."""

    __slots__ = ("loop", "pid")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pid = os.getpid()

    def close(self) -> None:
        loop = self.loop
        if not loop.is_closed() and not loop.is_running():
            loop.close()

    def __del__(self) -> None:
        if not sys.is_finalizing():
            with contextlib.suppress(Exception):
                self.close()


class _ThreadLoop(threading.local):
    holder: _LoopHolder | None = None


_thread_loop = _ThreadLoop()


def _close_main_loop() -> None:
    """At exit: close the main thread's sync loop while the interpreter is whole."""
    holder = _thread_loop.holder
    if holder is not None and holder.pid == os.getpid():
        holder.close()


atexit.register(_close_main_loop)


def _sync_loop() -> asyncio.AbstractEventLoop:
    """This thread's loop for sync verbs. One loop per thread and process, kept between calls:
    making and closing a loop per call (``asyncio.run``) costs ~0.25 ms, more than a step.
    A forked child leaves its parent's loop alone and makes its own."""
    holder = _thread_loop.holder
    if holder is None or holder.pid != os.getpid() or holder.loop.is_closed():
        holder = _thread_loop.holder = _LoopHolder()
    return holder.loop


def run_sync(coro: Coroutine[Any, Any, T], *, blocking_store: bool = True) -> T:
    """Run an async runner verb from sync code, on this thread's sync loop.

    Args:
        coro: the verb's coroutine.
        blocking_store: let the store serve the verb with blocking calls (see
            :data:`tether._context.sync_drive`) on this thread's kept loop; a worker, which
            overlaps many runs on the loop, passes ``False`` and gets a loop of its own.

    Raises:
        ConfigurationError: called from inside a running event loop (use the ``a`` verb).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise ConfigurationError(
            "the sync verbs (run/resume/fork) cannot be called inside a running event loop "
            "(a synchronous node runs on it too): await arun/aresume/afork instead, from an "
            "async def node if need be"
        )
    box: list[T] = []

    async def main() -> None:
        # A result that holds a long run's state is never repr'd by the loop's debug hooks.
        sync_drive.set(blocking_store)
        box.append(await coro)

    if not blocking_store:
        # A worker's loop holds async pools and tasks for its whole life: its own loop,
        # closed with everything on it when the worker returns.
        asyncio.run(main())
        return box[0]
    loop = _sync_loop()
    task = loop.create_task(main())
    try:
        loop.run_until_complete(task)
    except BaseException:
        if not task.done():  # a KeyboardInterrupt between two steps of the loop
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        with contextlib.suppress(BaseException):
            _finish_leftovers(loop)
        raise
    _finish_leftovers(loop)
    return box[0]


async def load_run(store: Checkpointer, execution_id: str, runner_name: str) -> RunRecord:
    """The run, checked to belong to this runner.

    Raises:
        RunNotFoundError, RunnerMismatchError.
    """
    from . import _lease

    if not isinstance(execution_id, str) or not execution_id:
        raise RunNotFoundError(f"execution_id must be a non-empty str, got {execution_id!r}")
    run = _lease.taken_run(execution_id) or await store.aget_run(execution_id)
    if run is None:
        raise RunNotFoundError(
            f"no run with execution_id {execution_id!r} in {store!r}", execution_id=execution_id
        )
    if run.runner_name != runner_name:
        raise RunnerMismatchError(
            f"run {execution_id!r} belongs to runner {run.runner_name!r}, not {runner_name!r}",
            expected=runner_name,
            found=run.runner_name,
            execution_id=execution_id,
        )
    return run


async def alatest_resumable(
    store: Checkpointer, execution_id: str, agent_path_prefix: str | None = None
) -> Checkpoint | None:
    """The row resume re-enters: the newest row that is not a run-end marker (a failed run
    stays resumable), or ``None`` when no step committed (docs/design.md §4). One read on the
    bundled stores (``aget_resumable``); any other store is walked back with ``aget_last``.

    Raises:
        AlreadyResumed: the run's newest row is a ``completed`` run-end marker.
        RunCancelledError: the run was cancelled (docs/design.md, "Cancel and delete").
    """
    cp: Checkpoint | None
    last_status: str | None
    fast = resumable(store) if agent_path_prefix is None else None
    if fast is not None:
        cp, last_status = await fast.aget_resumable(execution_id)
    else:
        cp = await store.aget_last(execution_id, agent_path_prefix=agent_path_prefix)
        last_status = cp.status if cp is not None and cp.is_run_end else None
        while cp is not None and cp.is_run_end:
            cp = await store.aget_last(
                execution_id, before_seq=cp.seq, agent_path_prefix=agent_path_prefix
            )
    if last_status == "cancelled":
        from .control import cancelled_error

        raise await cancelled_error(store, execution_id)
    if last_status == "completed":
        raise AlreadyResumed(
            f"run {execution_id!r} already completed; fork it to branch a new run",
            execution_id=execution_id,
        )
    return cp


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
    from . import _lease

    eid = cp.execution_id
    # Read what the row keeps first: an answer must not be claimed for a row it cannot join.
    stored_answers(cp.node_input)
    pending_identity(cp.node_input)
    shown = None if resume_value is None else resume_value.checkpoint_id
    if shown is not None and shown != cp.checkpoint_id:
        raise question_changed(eid, shown, await store.aget_pending_interrupt(eid))
    # Under a run lease the claim has the lease's owner, so whoever takes the run over from a
    # dead owner can take its claim over too, without waiting out the claim's own lease.
    lease = _lease.current()
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
            and (_owner_is_dead(pending.claimed_by) or pending.claimed_by == previous)
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


async def record_fork_answer(
    store: Checkpointer, execution_id: str, value: Resume | None, src: Checkpoint
) -> None:
    """Record a fork's ``resume_value`` in the branch's audit trail: it answers ``src``'s
    question for the branch (docs/design.md §5, "The audit trail"). Written right after the
    branch's ``fork_origin`` row, before the answer is used."""
    if value is not None:
        await store.arecord_audit(answer_entry(execution_id, value, src))


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

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def afork_checkpoint(
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
    while src is not None and src.is_run_end:
        src = await store.aget_last(execution_id, before_seq=src.seq)
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
