"""Errors raised by tether.

Every error a user can catch derives from :class:`TetherError`. Control-flow signals that user
code must not swallow with ``except Exception:`` derive from ``BaseException`` instead, as
cancellation does in asyncio.

Tree::

    BaseException
    └── InterruptSignal                 a step asked for a human; caught by the executor
    TetherError (Exception)
    ├── ConfigurationError              bad arguments to a runner, store or decorator
    │   ├── MissingStepError            a resume into a step the deployed code no longer has
    │   ├── StoreMismatchError          a worker's runner writes to another database
    │   └── UnreachableNodesError       a chain has nodes no edge leads to
    ├── InterruptOutsideRunError        interrupt() called where no run executes (a unit test)
    ├── SerializationError              a value in state/args/results cannot be stored as JSON
    ├── StoreError                      the checkpoint store failed
    │   ├── StoreUnavailableError       the database cannot be reached / went away: retry later
    │   ├── RecordRejectedError         the database refused a value (constraint, too large,
    │   │                               invalid data): the same call fails again, never retry
    │   ├── SchemaVersionError          the database was written by a newer tether
    │   ├── CorruptRecordError          a stored row cannot be decoded, or tables are missing
    │   └── ConcurrentWriteError        another process wrote this run's next step first
    │       └── LeaseLost               this process's run lease was taken over (fencing)
    ├── RunNotFoundError                no run has this execution_id
    │   └── ListingCursorError          a listing page's ``after`` entry is gone (answered)
    ├── RunStatusChangedError           the run's status changed since it was shown (delete)
    ├── CheckpointNotFoundError         no checkpoint has this checkpoint_id in this run
    ├── RunnerMismatchError             the run belongs to another runner
    ├── ResumeError
    │   ├── ChainResumeError            the run cannot be resumed as asked (e.g. needs a Resume)
    │   └── AlreadyResumed              nothing to resume: finished, or another caller won
    │       ├── LeaseHeldError          a live process is executing the run (holds its lease)
    │       ├── InterruptChangedError   the answer was for a question no longer pending
    │       └── RunCancelledError       the run was cancelled: nothing to resume or answer
    ├── ExecutionError                  a runner's own rule failed (e.g. a cycle bound)
    │   ├── StepTimeoutError            a step ran past its ``timeout_seconds``
    │   │   └── RunDeadlineExceeded     the run ran past its ``deadline_seconds``
    │   ├── MaxIterationsExceeded       a bounded cycle hit its ``max_iterations``
    │   ├── MaxTurnsExceeded            an agent hit its ``max_turns`` (tether.agent)
    │   └── OutputValidationError       structured output failed after its re-asks (tether.agent)
    ├── ProviderError                   an LLM provider call failed (tether.llm.base)
    ├── ToolArgumentsError              a model sent arguments a tool rejects (tether.agent.tool)
    └── ScriptExhaustedError            a test double ran out of responses (tether.testing)

Errors carry structured fields (``execution_id``, ``node_id``, ``path``) besides their message.

Of the store errors only :class:`StoreUnavailableError` is worth retrying as it is (and
:class:`ConcurrentWriteError` after re-reading). Which database error becomes which class is
one rule for both backends, by the database's own error code: ``docs/storage.md`` ("Errors"),
:mod:`tether.store._database_errors`.
"""

from __future__ import annotations

from typing import Any


class TetherError(Exception):
    """Root of every error tether raises for a caller to handle.

    Attributes:
        execution_id: the run concerned, when there is one.
        node_id: the step concerned, when there is one.
    """

    def __init__(
        self, message: str, *, execution_id: str | None = None, node_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.execution_id = execution_id
        self.node_id = node_id


class ConfigurationError(TetherError):
    """A runner, store or decorator was given arguments it cannot work with."""


class MissingStepError(ConfigurationError):
    """A resume (or fork) would re-enter a step the deployed code no longer has: a chain node,
    a tool, a swarm agent, a supervisor worker or an agent node that was renamed or removed.

    Nothing was claimed or written: a paused run stays paused with its answer, if one was
    stored, and continues once code that has the step resumes it (docs/design.md §4). A worker
    leaves such a run to workers that have the step (docs/workers.md, "When the code lacks a step").

    Attributes:
        missing: what is missing, e.g. ``tool 'refund'`` or ``node 'ship'``.
    """

    def __init__(
        self,
        message: str,
        *,
        missing: str,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.missing = missing


class StoreMismatchError(ConfigurationError):
    """A worker's runner has a checkpointer that is another database than the worker's (an
    app that opens ``SQLiteCheckpointer("a.db")`` run by ``tether worker --db b.db``): the
    runner would write its run where the worker's lease does not hold. Found at the first run
    the worker claims for that checkpointer; the run is given back as it was (status, attempts)
    and the worker stops (docs/workers.md, "Running workers").
    """


class UnreachableNodesError(ConfigurationError):
    """A chain has nodes that no edge leads to from its entry, so they could never run.

    Attributes:
        unreachable: the node ids, in the order they were added.
    """

    def __init__(self, message: str, *, unreachable: list[str]) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class InterruptOutsideRunError(TetherError):
    """:func:`tether.interrupt` was called where no run executes: a node or tool called
    directly, e.g. from a unit test. Nothing can pause there; run the node through its runner,
    or through :func:`tether.testing.run_node` with the answers to give it.

    Attributes:
        reason: the ``reason`` the call passed.
    """

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class SerializationError(TetherError):
    """A value cannot be stored as JSON.

    Attributes:
        path: where the value sits, e.g. ``state["order"]["when"]``.
        type_name: the offending value's type, e.g. ``socket.socket``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str = "",
        type_name: str = "",
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.path = path
        self.type_name = type_name


class StoreError(TetherError):
    """The checkpoint store failed; stored runs are left as they were."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached, the connection was lost mid-operation, or it is out of
    room or locked past its wait: the same call may work later.

    Nothing of the operation committed, unless the connection was lost as it committed (the
    message says so); read the run back to know. The only store error to retry as it is.
    """


class RecordRejectedError(StoreError):
    """The database refused a value tether sent it: a constraint (one an operator added, too),
    a value too large (for an index, or for the database), data its column cannot hold (a
    character the database's encoding lacks).

    Retrying the same call fails the same way; nothing of the operation was stored. Fix the
    value, or the constraint.

    Attributes:
        code: the database's code for the refusal: a PostgreSQL SQLSTATE (``"54000"`` for an
            index row too large, ``"23514"`` for a check constraint) or a SQLite extended
            result code name (``"SQLITE_CONSTRAINT_CHECK"``, ``"SQLITE_TOOBIG"``).
        constraint: the constraint or index the database named, if it named one.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        constraint: str | None = None,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.code = code
        self.constraint = constraint


class SchemaVersionError(StoreError):
    """The database holds a schema newer than this tether understands.

    Attributes:
        found: the version recorded in the database.
        supported: the newest version this tether can migrate to.
    """

    def __init__(self, message: str, *, found: int, supported: int) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class CorruptRecordError(StoreError):
    """A stored row cannot be decoded (bad JSON, a foreign envelope), or tether's tables or
    columns are missing or not a database's at all.

    Attributes:
        seq: the damaged checkpoint row's seq, when one row is named (else ``None``).
    """

    def __init__(
        self,
        message: str,
        *,
        execution_id: str | None = None,
        node_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.seq = seq


class ConcurrentWriteError(StoreError):
    """Another process committed this run's next step first; this writer must stop."""


class LeaseLost(ConcurrentWriteError):
    """This process no longer holds the run's lease: another worker took the run over.

    Raised by the checkpoint commit that found another owner on the run (the check is in the
    commit's own transaction, so nothing of the refused step was written). The process must do
    nothing further with the run; its new owner continues it (``docs/workers.md``).

    Attributes:
        owner: the lease owner this process held.
    """

    def __init__(
        self,
        message: str,
        *,
        owner: str | None = None,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.owner = owner


class RunNotFoundError(TetherError):
    """No run with this ``execution_id`` exists in the store."""


class ListingCursorError(RunNotFoundError):
    """A listing page was asked for after an entry that is no longer listed (a pending
    interrupt answered, a run deleted or pruned since the previous page): its place in the
    order is unknown, so the page is refused rather than read as empty. List again from the
    first page (docs/cli.md, ``runs list``)."""


class RunStatusChangedError(TetherError):
    """An operation confirmed for a run in one status found it in another (``delete`` with
    ``only_if_status``): nothing was changed; look at the run again."""


class CheckpointNotFoundError(TetherError):
    """No checkpoint with this id belongs to the run."""


class RunnerMismatchError(TetherError):
    """The run was started by another runner (its recorded name differs).

    Attributes:
        expected: this runner's name.
        found: the name recorded on the run.
    """

    def __init__(
        self, message: str, *, expected: str, found: str, execution_id: str | None = None
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.expected = expected
        self.found = found


class ResumeError(TetherError):
    """A resume was asked for that cannot happen."""


class ChainResumeError(ResumeError):
    """The run cannot be resumed as asked, e.g. a paused run resumed without a ``Resume``."""


class AlreadyResumed(ResumeError):
    """Nothing is left to resume: the run finished, or another caller claimed the interrupt.

    Exactly one caller ever gets a given interrupt (docs/design.md §5); every other caller gets
    this error, never a raw driver error.
    """


class LeaseHeldError(AlreadyResumed):
    """The run is being executed by another live process (it holds the run's lease).

    Raised by ``resume`` called by hand on a run a worker or another process is running: of
    concurrent resumers exactly one proceeds, the others get this (an :class:`AlreadyResumed`).
    Wait for it to finish or pause, or for its lease to lapse.

    Attributes:
        owner: the process holding the lease (``host:pid:nonce``).
    """

    def __init__(
        self, message: str, *, owner: str | None = None, execution_id: str | None = None
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.owner = owner


class RunCancelledError(AlreadyResumed):
    """The run was cancelled (``tether.cancel``, ``tether cancel``, the web page): it is not
    resumed, its question takes no answer, and a drive of it that was in flight stops at its
    next step boundary with this error. A fork still branches from any of its checkpoints
    (docs/design.md, "Cancel and delete").

    Attributes:
        cancelled_by: who cancelled it, when recorded.
        reason: why, when given.
        cancelled_at: when (ISO 8601, UTC), when known.
    """

    def __init__(
        self,
        message: str,
        *,
        execution_id: str | None = None,
        cancelled_by: str | None = None,
        reason: str | None = None,
        cancelled_at: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id)
        self.cancelled_by = cancelled_by
        self.reason = reason
        self.cancelled_at = cancelled_at


class InterruptChangedError(AlreadyResumed):
    """An answer was given for a question (the interrupt recorded at ``checkpoint_id``) that
    is no longer the one the run waits on: the run was answered and moved on, and is now
    paused on another question, or on none. Nothing was stored or claimed; read the question
    now pending and answer that one (docs/design.md §5).

    Attributes:
        checkpoint_id: the interrupted checkpoint the answer was given for.
        pending_checkpoint_id: the interrupted checkpoint of the question the run waits on
            now, or ``None`` when it waits on none.
    """

    def __init__(
        self,
        message: str,
        *,
        checkpoint_id: str,
        pending_checkpoint_id: str | None,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.checkpoint_id = checkpoint_id
        self.pending_checkpoint_id = pending_checkpoint_id


class ExecutionError(TetherError):
    """A runner's own rule failed while executing."""


class StepTimeoutError(ExecutionError):
    """A step (a chain node, an agent's tool, a model call) ran past its ``timeout_seconds``.

    The run ends ``failed`` and stays resumable like any failed run: an ``async`` step was
    cancelled at its ``await``; a synchronous one runs on in its own thread, abandoned, and
    its result is never committed (docs/design.md §12, "Step timeouts").

    Attributes:
        step: what overran: ``node 'charge'``, ``tool 'search'``, ``model call``.
        timeout_seconds: the limit it had, in seconds.
    """

    def __init__(
        self,
        message: str,
        *,
        step: str,
        timeout_seconds: float,
        execution_id: str | None = None,
        node_id: str | None = None,
    ) -> None:
        super().__init__(message, execution_id=execution_id, node_id=node_id)
        self.step = step
        self.timeout_seconds = timeout_seconds


class RunDeadlineExceeded(StepTimeoutError):
    """The run ran past its runner's ``deadline_seconds``, counted from the run's creation:
    at a step boundary, or mid-step (the step's limit is capped by what is left). The run
    ends ``failed``; a resume fails again at once, since the deadline has passed: fork it to
    run again with a deadline of its own."""


class MaxIterationsExceeded(ExecutionError):
    """A cycle edge was taken more times than its ``max_iterations`` allows."""


class InterruptSignal(BaseException):
    """Raised by :func:`tether.interrupt` on first pass to suspend the step for a human.

    Derives from ``BaseException`` so that ``except Exception:`` in user code does not swallow
    it (docs/design.md §5). The executor catches it, records the pending interrupt and returns a
    paused result.

    Attributes:
        reason: short machine-readable reason, e.g. ``"manager_approval"``.
        context: the JSON-able snapshot the human is asked to approve.
        index: which ``interrupt()`` call within the step raised (0 for the first).
        key: the ``key=`` given to ``interrupt()``, if any.
        occurrence: how many calls with this reason and key the step made before this one;
            with ``reason`` and ``key`` it is the question's identity (``tether.interrupt``).
        deadline: ``{"timeout_seconds": float, "on_timeout": {"resume": {...}} | "fail" |
            "cancel"}`` when the question has an approval deadline, else ``None``.
    """

    def __init__(
        self,
        reason: str,
        context: Any = None,
        *,
        index: int = 0,
        key: str | None = None,
        occurrence: int = 0,
        deadline: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.context = context
        self.index = index
        self.key = key
        self.occurrence = occurrence
        self.deadline = deadline
