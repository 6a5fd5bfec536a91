"""The storage protocol every backend implements (docs/design.md §7).

Five concerns, each a table in the SQL backends:

- **runs**: one row per run (runner name and kind, status, owner, timestamps), so listing runs
  and finding unfinished ones never scans checkpoints;
- **checkpoints**: the boundary records of :mod:`tether.checkpoint`;
- **pending interrupts**: at most one per run, claimed atomically by exactly one resumer;
- **idempotency cache**: ``(execution_id, key) -> JSON result``;
- **audit trail**: who answered each interrupt, when, how and with what
  (:class:`~tether.audit.AuditEntry`), written with the answer and pruned with the run.

Backends know the record and this protocol only, never the engine. The engine calls the async
twins (``a``-prefixed); a backend whose I/O is fast and local may implement them by calling the
sync methods inline (:class:`SyncAsyncMixin`).
"""

from __future__ import annotations

import builtins
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Required, TypedDict, Unpack, get_args, runtime_checkable

from ..audit import AuditEntry
from ..checkpoint import Checkpoint, resumable

__all__ = [
    "RUN_STATUSES",
    "AnswerOptions",
    "AuditQuery",
    "Checkpointer",
    "ClaimOptions",
    "EndedStatus",
    "LastOptions",
    "PendingInterrupt",
    "PruneResult",
    "PutOptions",
    "ResumableStore",
    "RunRecord",
    "RunStatus",
    "SyncAsyncMixin",
    "resumable",
]

RunStatus = Literal["queued", "running", "paused", "completed", "failed", "cancelled"]
"""A run's status: ``queued`` (waiting for a worker to start it), ``running``, ``paused`` (an
interrupt waits for its answer), ``completed``, ``failed``, ``cancelled`` (docs/workers.md,
docs/storage.md; docs/design.md, "Cancel and delete")."""
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
EndedStatus = Literal["completed", "failed", "cancelled"]
"""The status a run-end row records: how the run ended."""
FINISHED_STATUSES: tuple[EndedStatus, ...] = get_args(EndedStatus)


@dataclass(slots=True)
class RunRecord:
    """One run, as the runs table holds it.

    Attributes:
        execution_id: the run's id.
        runner_name: the name of the runner that started it (``Chain("refunds")`` -> ``refunds``).
        runner_kind: ``chain``, ``agent``, ``swarm`` or ``supervisor``.
        status: ``queued``, ``running``, ``paused``, ``completed``, ``failed`` or
            ``cancelled`` (docs/design.md, "Cancel and delete").
        input: the input the run was started with (JSON-able), so any process can restart it.
        parent_execution_id: for a fork, the run it branched from.
        parent_checkpoint_id: for a fork, the checkpoint it branched from.
        owner: the process that holds the run's lease, when one does.
        lease_expires_at: when that lease lapses (UTC).
        error: for a failed run, ``"<ExceptionType>: <message>"``.
        created_at / updated_at / finished_at: UTC timestamps.
        app_version: the version of the code that started the run (``Registry(version=...)``
            or ``TETHER_APP_VERSION``), ``None`` if none was declared (docs/design.md §13).
        damaged: set only on a listing's entry whose row could not be fully decoded: which
            fields are unreadable (they are ``None``, names shown with bad bytes replaced);
            see :mod:`tether.store._listing`.
    """

    execution_id: str
    runner_name: str
    runner_kind: str
    status: RunStatus = "running"
    input: Any = None
    parent_execution_id: str | None = None
    parent_checkpoint_id: str | None = None
    owner: str | None = None
    lease_expires_at: _dt.datetime | None = None
    error: str | None = None
    created_at: _dt.datetime | None = None
    updated_at: _dt.datetime | None = None
    finished_at: _dt.datetime | None = None
    app_version: str | None = None
    damaged: str | None = None


@dataclass(slots=True)
class PendingInterrupt:
    """A suspended run waiting for an answer.

    Attributes:
        execution_id: the paused run.
        checkpoint_id: the ``interrupted`` checkpoint written with it.
        node_id: the step that called ``interrupt()``.
        agent_path: who wrote it in a multi-agent run (``None`` for chains).
        reason: the reason passed to ``interrupt()``.
        context: the JSON-frozen context the human approves; never recomputed.
        created_at: when the run paused (UTC).
        claimed_by: the resumer holding the claim, if any.
        claim_expires_at: when that claim lapses; after it, the run is resumable again.
        due_at: when its approval deadline passes (``interrupt(..., timeout_seconds=)``), after
            which a worker applies its ``on_timeout``; ``None``: no deadline.
        resume_value: the answer given, as a JSON-able dict (kept so a claimer that dies does
            not lose it), or ``None`` while unanswered.
        damaged: as :attr:`RunRecord.damaged`, for a listed interrupt whose row could not be
            fully decoded.
    """

    execution_id: str
    checkpoint_id: str
    node_id: str
    reason: str
    context: Any = None
    agent_path: str | None = None
    created_at: _dt.datetime | None = None
    claimed_by: str | None = None
    claim_expires_at: _dt.datetime | None = None
    resume_value: dict[str, Any] | None = None
    damaged: str | None = None
    due_at: _dt.datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``pending_interrupt`` shape of a paused result: reason, context, node_id,
        agent_path, and checkpoint_id (the question's id: pass it as
        ``Resume(checkpoint_id=...)`` to bind the answer to this question)."""
        return {
            "reason": self.reason,
            "context": self.context,
            "node_id": self.node_id,
            "agent_path": self.agent_path,
            "checkpoint_id": self.checkpoint_id,
        }


@dataclass(slots=True)
class PruneResult:
    """What :meth:`Checkpointer.prune` deleted (or would delete, on a dry run)."""

    runs: int = 0
    checkpoints: int = 0
    idempotency: int = 0
    execution_ids: list[str] = field(default_factory=list)


class PutOptions(TypedDict, total=False):
    """The keywords of :meth:`Checkpointer.put` (and ``aput``).

    Attributes:
        run_status: also set the run's status in the same transaction (``completed`` and
            ``failed`` stamp ``finished_at``).
        error: the run's error text, with ``run_status="failed"``.
        release_claim_of: the claimer of the run's pending interrupt whose answer this step
            consumed: that pending row is deleted in the same transaction.
    """

    run_status: RunStatus | None
    error: str | None
    release_claim_of: str | None


class LastOptions(TypedDict, total=False):
    """The keywords of :meth:`Checkpointer.get_last` (and ``aget_last``).

    Attributes:
        before_seq: only rows with a lower ``seq``.
        agent_path_prefix: only rows written at this ``agent_path`` or under it.
    """

    before_seq: int | None
    agent_path_prefix: str | None


class ClaimOptions(TypedDict, total=False):
    """The keywords of :meth:`Checkpointer.claim_interrupt` (and ``aclaim_interrupt``).

    Attributes:
        owner: the claimer's id (``host:pid:nonce``); required.
        resume_value: the answer to store, or ``None`` to pick up an answer already stored
            whose claimer died; required.
        lease_seconds: how long the claim holds without renewal; required.
        steal_from: a claimer known to be dead, whose claim may be taken at once.
        checkpoint_id: claim only the question recorded at this ``interrupted`` checkpoint.
        audit: the entry recording ``resume_value`` in the run's audit trail.
    """

    owner: Required[str]
    resume_value: Required[dict[str, Any] | None]
    lease_seconds: Required[float]
    steal_from: str | None
    checkpoint_id: str | None
    audit: AuditEntry | None


class AnswerOptions(TypedDict, total=False):
    """The keywords of :meth:`Checkpointer.answer_interrupt`.

    Attributes:
        checkpoint_id: the question the person was shown (its ``interrupted`` checkpoint).
        audit: the entry recording the answer in the run's audit trail.
    """

    checkpoint_id: str | None
    audit: AuditEntry | None


class AuditQuery(TypedDict, total=False):
    """The keywords of :meth:`Checkpointer.list_audit`.

    Attributes:
        since: with ``execution_id=None``, only entries recorded at or after it (UTC; naive
            is taken as UTC).
        limit: at most this many entries (``None``: all).
    """

    since: _dt.datetime | None
    limit: int | None


@runtime_checkable
class Checkpointer(Protocol):
    """Storage for runs, checkpoints, pending interrupts and the idempotency cache.

    Every write that belongs to one step happens in one transaction. All methods raise
    :class:`~tether.errors.StoreError` subclasses, never raw driver errors.
    """

    def setup(self) -> None:
        """Create or migrate the schema (forward only). Safe to call concurrently."""

    def close(self) -> None:
        """Release connections."""

    # --- runs -----------------------------------------------------------------------------
    def create_run(self, run: RunRecord) -> RunRecord:
        """Insert a new run. Raises ConfigurationError if the execution_id already exists."""

    def get_run(self, execution_id: str) -> RunRecord | None:
        """The run, or ``None``."""

    def list_runs(
        self, *, status: str | None = None, runner_name: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs, newest first, optionally filtered."""

    def set_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        """Record a status change that comes with no checkpoint."""

    # --- checkpoints ----------------------------------------------------------------------
    def put(self, checkpoint: Checkpoint, **options: Unpack[PutOptions]) -> Checkpoint:
        """Append a checkpoint (assigning ``seq``, ``checkpoint_id``, ``created_at``).

        In the same transaction: update the run's status when ``run_status`` is given, and,
        when ``release_claim_of`` names the claimer of the run's pending interrupt, delete that
        pending row (the re-entered step committed). The keywords: :class:`PutOptions`.

        Raises:
            ConcurrentWriteError: another writer appended to this run first, or the claim named
                by ``release_claim_of`` was taken over.
            SerializationError: the state holds a value JSON cannot store (nothing written).
        """

    def record_interrupt(
        self, checkpoint: Checkpoint, *, release_claim_of: str | None = None
    ) -> PendingInterrupt:
        """Write an ``interrupted`` checkpoint and its pending-interrupt row in one transaction,
        and mark the run ``paused``. Replaces a pending row claimed by ``release_claim_of``."""

    def get_last(self, execution_id: str, **options: Unpack[LastOptions]) -> Checkpoint | None:
        """The highest-seq checkpoint (below ``before_seq``, under ``agent_path_prefix``, if
        given: :class:`LastOptions`) with its full state; ``None`` if there is none."""

    def get_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One checkpoint of the run by id, with its full state."""

    def list(
        self, execution_id: str, *, agent_path_prefix: str | None = None
    ) -> builtins.list[Checkpoint]:
        """Every checkpoint of the run in seq order, each with its full state."""

    # --- pending interrupts ---------------------------------------------------------------
    def get_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        """The run's pending interrupt, claimed or not."""

    def list_pending_interrupts(self, *, limit: int = 100) -> builtins.list[PendingInterrupt]:
        """Pending interrupts, oldest first."""

    def claim_interrupt(
        self, execution_id: str, **claim: Unpack[ClaimOptions]
    ) -> PendingInterrupt | None:
        """Atomically claim the run's pending interrupt; exactly one concurrent caller wins
        (the keywords: :class:`ClaimOptions`).

        With ``resume_value``: succeeds only if the interrupt is unanswered and unclaimed, and
        stores the answer. Without: succeeds only if an answer is stored and no live claim holds
        it (its claimer died: the lease lapsed, or ``steal_from`` names the dead claimer).
        With ``checkpoint_id``: only if the pending interrupt is the one recorded at that
        checkpoint, checked in the same statement (an answer is bound to the question shown).
        With ``audit`` and ``resume_value``: the entry is appended to the run's audit trail
        in the same transaction, only when the answer is stored.

        Returns:
            The claimed row (with the stored answer), or ``None`` if the caller lost.
        """

    def renew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        """Extend a claim this owner holds; ``False`` if it no longer holds it."""

    def release_claim(self, execution_id: str, *, owner: str) -> bool:
        """Give a claim back, keeping the stored answer (the re-entered step failed), so a
        later resume without a value picks the answer up again."""

    def answer_interrupt(
        self, execution_id: str, resume_value: dict[str, Any], **options: Unpack[AnswerOptions]
    ) -> bool:
        """Store an answer without claiming (approve from anywhere); ``False`` if the interrupt
        is gone or already answered, or, given ``checkpoint_id`` (the question the person was
        shown), if the run waits on another question by then: checked in the same statement,
        so an answer never lands on a question nobody saw (docs/design.md, "Interrupts and the
        claim"). ``audit`` is appended to the run's audit trail in the same transaction, only
        when the answer is stored (docs/design.md §5, "The audit trail")."""

    # --- audit trail ----------------------------------------------------------------------
    def record_audit(self, entry: AuditEntry) -> None:
        """Append an entry that comes with no answer (a cancel, a state patch) to its run's
        audit trail, in its own transaction; the store sets ``at`` and ``entry_id``.

        Raises:
            SerializationError: ``entry.data`` cannot be stored as JSON (nothing written).
        """

    def list_audit(
        self, execution_id: str | None = None, **query: Unpack[AuditQuery]
    ) -> builtins.list[AuditEntry]:
        """One run's audit trail in the order recorded; or, with ``execution_id=None``,
        every run's entries recorded at or after ``since`` (UTC; naive is taken as UTC),
        oldest first, at most ``limit`` (``None``: all): :class:`AuditQuery`."""

    # --- idempotency ----------------------------------------------------------------------
    def get_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        """``(True, value)`` on a hit (a cached ``None`` is a hit), else ``(False, None)``."""

    def put_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        """Cache a result; if another writer cached this key first, keep and return theirs."""

    def list_idempotent(self, execution_id: str) -> dict[str, Any]:
        """The run's whole idempotency cache."""

    # --- maintenance ----------------------------------------------------------------------
    def prune(
        self, older_than: _dt.timedelta | _dt.datetime, *, dry_run: bool = False
    ) -> PruneResult:
        """Delete finished runs that ended before the cutoff, with their checkpoints and cache.

        Never touches a paused or unfinished run (docs/design.md §7).
        """

    # --- async twins used by the engine ---------------------------------------------------
    # Each takes what its sync method takes. A store with the lease capability
    # (:class:`tether.store._leases.LeaseStore`) takes more in both: ``lease_seconds`` when
    # creating a run owned, ``release_lease_of`` in the commit that ends a drive.
    async def acreate_run(self, run: RunRecord) -> RunRecord: ...
    async def aget_run(self, execution_id: str) -> RunRecord | None: ...
    async def aset_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None: ...
    async def aput(self, checkpoint: Checkpoint, **options: Unpack[PutOptions]) -> Checkpoint: ...
    async def arecord_interrupt(
        self, checkpoint: Checkpoint, *, release_claim_of: str | None = None
    ) -> PendingInterrupt: ...
    async def aget_last(
        self, execution_id: str, **options: Unpack[LastOptions]
    ) -> Checkpoint | None: ...
    async def aget_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None: ...
    async def aget_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None: ...
    async def aclaim_interrupt(
        self, execution_id: str, **claim: Unpack[ClaimOptions]
    ) -> PendingInterrupt | None: ...
    async def arenew_claim(
        self, execution_id: str, *, owner: str, lease_seconds: float
    ) -> bool: ...
    async def arelease_claim(self, execution_id: str, *, owner: str) -> bool: ...
    async def aget_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]: ...
    async def aput_idempotent(self, execution_id: str, key: str, value: Any) -> Any: ...
    async def arecord_audit(self, entry: AuditEntry) -> None: ...


@runtime_checkable
class ResumableStore(Protocol):
    """The optional capability of a store that finds the row a resume re-enters in one read
    (both bundled backends). Without it the engine walks back with ``get_last``."""

    def get_resumable(self, execution_id: str) -> tuple[Checkpoint | None, EndedStatus | None]:
        """The run's newest row that is not a run-end marker, with its full state.

        Returns:
            ``(checkpoint, ended)``: the checkpoint (``None`` when the run has no row but
            run-end markers, or no row at all), and the newest row's status when that row is a
            run-end marker, else ``None``.

        Raises:
            CorruptRecordError: the run's stored state chain is broken.
        """

    async def aget_resumable(
        self, execution_id: str
    ) -> tuple[Checkpoint | None, EndedStatus | None]:
        """Async :meth:`get_resumable`."""


class SyncAsyncMixin:
    """Async twins that call the sync methods inline.

    For backends whose calls are short local I/O (SQLite: tens of microseconds per commit), a
    thread hop would cost more than the call; the event loop runs them directly. Each twin
    takes what its sync method takes in :class:`Checkpointer`; a backend whose sync methods
    take more (the lease capability's arguments) defines those twins itself.
    """

    async def aclose(self: Checkpointer) -> None:
        """Async :meth:`close` (releases this thread's connection; no I/O wait)."""
        self.close()

    async def acreate_run(self: Checkpointer, run: RunRecord) -> RunRecord:
        return self.create_run(run)

    async def aget_run(self: Checkpointer, execution_id: str) -> RunRecord | None:
        return self.get_run(execution_id)

    async def aset_run_status(
        self: Checkpointer, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        self.set_run_status(execution_id, status, error=error)

    async def aput(
        self: Checkpointer, checkpoint: Checkpoint, **options: Unpack[PutOptions]
    ) -> Checkpoint:
        return self.put(checkpoint, **options)

    async def arecord_interrupt(
        self: Checkpointer, checkpoint: Checkpoint, *, release_claim_of: str | None = None
    ) -> PendingInterrupt:
        return self.record_interrupt(checkpoint, release_claim_of=release_claim_of)

    async def aget_last(
        self: Checkpointer, execution_id: str, **options: Unpack[LastOptions]
    ) -> Checkpoint | None:
        return self.get_last(execution_id, **options)

    async def aget_checkpoint(
        self: Checkpointer, execution_id: str, checkpoint_id: str
    ) -> Checkpoint | None:
        return self.get_checkpoint(execution_id, checkpoint_id)

    async def aget_pending_interrupt(
        self: Checkpointer, execution_id: str
    ) -> PendingInterrupt | None:
        return self.get_pending_interrupt(execution_id)

    async def aclaim_interrupt(
        self: Checkpointer, execution_id: str, **claim: Unpack[ClaimOptions]
    ) -> PendingInterrupt | None:
        return self.claim_interrupt(execution_id, **claim)

    async def arenew_claim(
        self: Checkpointer, execution_id: str, *, owner: str, lease_seconds: float
    ) -> bool:
        return self.renew_claim(execution_id, owner=owner, lease_seconds=lease_seconds)

    async def arelease_claim(self: Checkpointer, execution_id: str, *, owner: str) -> bool:
        return self.release_claim(execution_id, owner=owner)

    async def aget_idempotent(self: Checkpointer, execution_id: str, key: str) -> tuple[bool, Any]:
        return self.get_idempotent(execution_id, key)

    async def aput_idempotent(self: Checkpointer, execution_id: str, key: str, value: Any) -> Any:
        return self.put_idempotent(execution_id, key, value)
