"""What the page and the API do, over a store and a registry, off the event loop.

Store calls are synchronous (a Postgres round trip, a SQLite read) and a resume runs the
user's steps, which may block: everything here runs in a worker thread, so one slow approval
never stalls the pages of other operators.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio.to_thread

from .. import _durations as durations
from ..audit import DATA_MAX_BYTES, NOTE_MAX_CHARS, answer_metadata, oversized_answer
from ..control import refuse_if_cancelled
from ..engine.claim import answerable_row, question_changed, store_answer
from ..errors import (
    AlreadyResumed,
    ChainResumeError,
    CheckpointNotFoundError,
    ConfigurationError,
    CorruptRecordError,
    InterruptChangedError,
    RunCancelledError,
    RunnerMismatchError,
    RunNotFoundError,
    TetherError,
)
from ..interrupt import Resume
from ..registry import Registry
from ..store.base import Checkpointer

# Shared with the CLI, so the API's JSON is identical to `tether ... --json`.
from ..views import readable_rows, run_detail
from ._inspect import conversation, inspect_checkpoint

T = TypeVar("T")

#: A request body (the API's JSON, a form): room for the largest note and data.
BODY_MAX_BYTES = DATA_MAX_BYTES + 4 * NOTE_MAX_CHARS + 4096


@contextlib.contextmanager
def _refusals(execution_id: str, conflict: str) -> Iterator[None]:
    """Map what a runner verb raises to the :class:`ActionError` the page and API answer."""
    try:
        yield
    except (InterruptChangedError, RunCancelledError) as exc:
        raise ActionError(409, exc.message) from None
    except AlreadyResumed as exc:
        raise ActionError(409, f"run {execution_id} was {conflict}: {exc}") from None
    except (CheckpointNotFoundError, RunNotFoundError) as exc:
        raise ActionError(404, str(exc)) from None
    except (ChainResumeError, ConfigurationError, RunnerMismatchError) as exc:
        raise ActionError(409, f"cannot do that to run {execution_id}: {exc}") from None
    except TetherError as exc:
        raise ActionError(500, f"run {execution_id}: {exc}") from None


@contextlib.contextmanager
def _unreadable() -> Iterator[None]:
    """A damaged run's refusal (:func:`tether.engine.claim.answerable_row`) as a 500 naming
    the run and the row, as reading a damaged record is."""
    try:
        yield
    except CorruptRecordError as exc:
        raise ActionError(500, exc.message) from None


def _outcome(action: str, result: Any) -> dict[str, Any]:
    error = result.error
    return {
        "action": action,
        "execution_id": result.execution_id,
        "status": result.status,
        "output": result.output,
        "pending_interrupt": result.pending_interrupt,
        "error": None if error is None else f"{type(error).__name__}: {error}",
    }


class ActionError(Exception):
    """A request the service refuses, with the HTTP status it maps to.

    Attributes:
        status_code: 400 bad input, 404 no such run, 409 already answered or not waiting.
        message: one line for the operator.
    """

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(frozen=True, slots=True)
class Answer:
    """An operator's verdict on a pending interrupt.

    Attributes:
        checkpoint_id: the question the operator was shown (the pending interrupt's
            ``checkpoint_id``); ``None``: the one pending when the server reads the run.
        via: ``web`` (the page's form) or ``api`` (the JSON API), as the audit trail
            records it.
        actor: the named user who answers; ``None`` under the shared token.
    """

    approved: bool
    note: str | None = None
    data: Any = None
    checkpoint_id: str | None = None
    via: str = "web"
    actor: str | None = None

    def check_size(self) -> None:
        """Refuse a note over :data:`NOTE_MAX_CHARS` (400) or data over
        :data:`DATA_MAX_BYTES` as JSON (413).

        Raises:
            ActionError: the note or the data is too large; nothing was stored.
        """
        problem = oversized_answer(self.note, self.data)
        if problem is not None:
            what, message = problem
            raise ActionError(400 if what == "note" else 413, message)

    def to_resume(self, checkpoint_id: str) -> Resume:
        metadata = answer_metadata(self.via, self.actor, self.note or None)
        return Resume(self.approved, self.data, metadata, checkpoint_id=checkpoint_id)


class Service:
    """The operations behind every page and API route.

    Args:
        store: the store the server reads and answers interrupts in.
        registry: the application's runners; an approved run whose runner is here resumes
            right away, any other run only has its answer stored.
    """

    def __init__(self, store: Checkpointer, registry: Registry | None) -> None:
        self.store = store
        self.registry = registry or Registry()
        # One answer at a time per run in this server: a second click waits for the first
        # resume to finish and then sees the interrupt answered (409), instead of racing it
        # through the store's claim.
        self._run_locks: weakref.WeakValueDictionary[str, threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._locks_guard = threading.Lock()

    async def _off_loop(self, fn: Callable[[], T]) -> T:
        return await anyio.to_thread.run_sync(fn)

    # --- reads ----------------------------------------------------------------------------
    async def run(self, execution_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
        """A run with its result, timeline, pending interrupt, idempotency cache and audit
        trail (the shape of ``tether runs show --json``: :func:`tether.views.run_detail`),
        plus ``runner_available``, ``conversation`` (an agent run's messages:
        :func:`tether.web._inspect.conversation`) and, given ``checkpoint_id``, ``inspected``
        (that checkpoint's state and value diff: :func:`tether.web._inspect.inspect_checkpoint`).
        A damaged run (a checkpoint row that cannot be decoded) is read as far as its rows
        decode, ``damaged`` naming the first row that cannot be read.

        Raises:
            ActionError: (404) no such run, or no such checkpoint in it.
        """

        def read() -> dict[str, Any]:
            run = self.store.get_run(execution_id)
            if run is None:
                raise ActionError(404, f"no run with execution_id {execution_id!r}")
            # As `tether runs show` reads it: a damaged run as far as its rows decode.
            rows, damage = readable_rows(self.store, execution_id)
            inspected = None
            if checkpoint_id is not None:
                inspected = inspect_checkpoint(rows, checkpoint_id, run.input)
                if inspected is None:
                    raise ActionError(
                        404, f"run {execution_id!r} has no checkpoint {checkpoint_id!r}"
                    )
            return {
                **run_detail(self.store, run, rows, damage),
                "runner_available": run.runner_name in self.registry,
                "conversation": conversation(rows),
                "inspected": inspected,
            }

        return await self._off_loop(read)

    async def audit(self, since: str, limit: int) -> list[dict[str, Any]]:
        """The audit trail of every run since ``since`` (an age such as ``7d`` or an ISO 8601
        time, as ``tether audit --since`` takes), newest first, at most ``limit`` entries.

        Raises:
            ActionError: (400) ``since`` is neither an age nor a time.
        """
        try:
            start = durations.parse_since(since, "since")
        except ValueError as exc:
            raise ActionError(400, str(exc)) from None

        def read() -> list[dict[str, Any]]:
            # Oldest first from the store; the newest ``limit`` of them, newest first, here.
            found = self.store.list_audit(since=start)
            return [e.as_dict() for e in reversed(found[-limit:])]

        return await self._off_loop(read)

    # --- the answer -----------------------------------------------------------------------
    async def answer(self, execution_id: str, answer: Answer) -> dict[str, Any]:
        """Approve or reject a run's pending interrupt.

        With the run's runner in the registry, the run resumes (in a worker thread) and the
        outcome is returned as ``{"action": "resumed", "status", "output", ...}``; without it,
        the answer is stored for a later ``resume`` (``{"action": "answer_stored", ...}``).

        The answer is bound to ``answer.checkpoint_id`` (else to the question pending when
        the run is read): it is refused, nothing changed, if the run waits on another
        question by the time it is stored or claimed.

        Raises:
            ActionError: 400 a note over :data:`NOTE_MAX_CHARS`; 413 data over
                :data:`DATA_MAX_BYTES`; 404 no such run, or ``answer.checkpoint_id`` names
                no checkpoint of the run; 409 the interrupt was already
                answered, the run is not waiting for an answer, waits on another question
                than the one answered, or another resumer won the race (nothing changed);
                500 a row of the question cannot be read (a damaged run: nothing changed).
        """
        answer.check_size()
        return await self._off_loop(lambda: self._answer_one_at_a_time(execution_id, answer))

    def _answer_one_at_a_time(self, execution_id: str, answer: Answer) -> dict[str, Any]:
        return self._one_at_a_time(execution_id, lambda: self._answer(execution_id, answer))

    def _one_at_a_time(self, execution_id: str, fn: Callable[[], T]) -> T:
        with self._locks_guard:
            lock = self._run_locks.get(execution_id)
            if lock is None:
                lock = self._run_locks[execution_id] = threading.Lock()
        with lock:
            return fn()

    def _answer(self, execution_id: str, answer: Answer) -> dict[str, Any]:
        run = self.store.get_run(execution_id)
        if run is None:
            raise ActionError(404, f"no run with execution_id {execution_id!r}")
        with _refusals(execution_id, "cancelled"):
            refuse_if_cancelled(self.store, run)
        pending = self.store.get_pending_interrupt(execution_id)
        shown = answer.checkpoint_id
        if shown is not None and (pending is None or pending.checkpoint_id != shown):
            # A question the run never asked is a wrong id (404, as `tether approve
            # --checkpoint` says); one it asked and moved on from is a stale answer (409).
            if self.store.get_checkpoint(execution_id, shown) is None:
                raise ActionError(
                    404,
                    f"run {execution_id!r} has no checkpoint {shown!r}; read the question it "
                    "waits on (its page, GET /api/runs/{id}) and answer that one",
                )
            raise ActionError(409, question_changed(execution_id, shown, pending).message)
        if pending is None:
            if any(cp.status == "interrupted" for cp in self.store.list(execution_id)):
                raise ActionError(409, f"run {execution_id} was already answered")
            raise ActionError(
                409, f"run {execution_id} is not waiting for an answer (status: {run.status})"
            )
        if pending.resume_value is not None:
            verdict = "approved" if pending.resume_value.get("approved") else "rejected"
            raise ActionError(409, f"run {execution_id} was already answered ({verdict})")
        value = answer.to_resume(pending.checkpoint_id)
        base = {
            "execution_id": execution_id,
            "node_id": pending.node_id,
            "checkpoint_id": pending.checkpoint_id,
        }
        if run.runner_name not in self.registry:
            try:
                with _unreadable():  # store_answer reads the question's row first
                    store_answer(self.store, execution_id, value)
            except (InterruptChangedError, RunCancelledError) as exc:
                raise ActionError(409, exc.message) from None
            except AlreadyResumed:
                raise ActionError(409, f"run {execution_id} was answered meanwhile") from None
            return {
                **base,
                "action": "answer_stored",
                "status": "paused",
                "resume_value": value.to_dict(),
                "message": (
                    f"answer stored; no runner named {run.runner_name!r} in this server's app, "
                    "so the run continues when a process with its code resumes it"
                ),
            }
        # Before the run's lease is taken: a damaged run cannot be answered (500, naming the
        # run and the damaged row; nothing written).
        with _unreadable():
            answerable_row(self.store, execution_id, pending.checkpoint_id)
        with _refusals(execution_id, "already answered"):
            runner = self.registry.for_run(self.store, execution_id)
            result = runner.resume(execution_id, value)
        return {
            **base,
            **_outcome("resumed", result),
            "resume_value": value.to_dict(),
            "message": f"run {result.status}",
        }

    # --- what an operator does next (the run inspector's buttons) ----------------------------
    async def resume(self, execution_id: str) -> dict[str, Any]:
        """Resume a failed or stranded run (or one whose answer was stored) through its
        runner, as ``tether resume`` does: ``{"action": "resumed", "execution_id",
        "status", "output", "pending_interrupt", "error"}``.

        Raises:
            ActionError: 404 no such run; 409 no runner of its name in this server's app, it
                waits for an answer, it already completed, or another process resumed it.
        """

        def call() -> dict[str, Any]:
            runner = self._runner_for(execution_id)
            pending = self.store.get_pending_interrupt(execution_id)
            if pending is not None and pending.resume_value is None:
                raise ActionError(
                    409, f"run {execution_id} waits for an answer: approve or reject it"
                )
            if pending is not None:  # its answer was stored: a damaged run is refused here
                with _unreadable():
                    answerable_row(self.store, execution_id, pending.checkpoint_id)
            with _refusals(execution_id, "already resumed or completed"):
                result = runner.resume(execution_id)
            return {"execution_id": execution_id, **_outcome("resumed", result)}

        return await self._off_loop(lambda: self._one_at_a_time(execution_id, call))

    async def fork(
        self,
        execution_id: str,
        checkpoint_id: str | None,
        state_updates: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Branch a new run from ``checkpoint_id`` with ``state_updates`` merged into its
        state, and run it, as ``tether fork`` does: ``{"action": "forked", "execution_id"
        (the new run's), "parent_execution_id", "status", ...}``.

        Raises:
            ActionError: 404 no such run or checkpoint; 409 no runner of its name in this
                server's app; 400 updates the runner cannot take.
        """

        def call() -> dict[str, Any]:
            runner = self._runner_for(execution_id)
            with _refusals(execution_id, "not forkable"):
                result = runner.fork(execution_id, checkpoint_id, state_updates=state_updates)
            return {"parent_execution_id": execution_id, **_outcome("forked", result)}

        return await self._off_loop(call)

    def _runner_for(self, execution_id: str) -> Any:
        run = self.store.get_run(execution_id)
        if run is None:
            raise ActionError(404, f"no run with execution_id {execution_id!r}")
        if run.runner_name not in self.registry:
            raise ActionError(
                409,
                f"this server's app has no runner named {run.runner_name!r}: serve with --app "
                "naming it, or use `tether resume` / `tether fork` with the app",
            )
        with _refusals(execution_id, "not runnable here"):
            return self.registry.for_run(self.store, execution_id)
