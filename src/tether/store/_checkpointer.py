"""The public methods of both SQL checkpointers, each a plan of :mod:`._operations` run by the
backend's driver: the sync method waits for it, the async twin awaits it.

:class:`PlanCheckpointer` implements :class:`~tether.store.base.Checkpointer`, the
:class:`~tether.store.base.ResumableStore` capability and the lease arguments of
:class:`~tether.store._leases.LeaseStore` (``lease_seconds``, ``release_lease_of``). A backend
subclasses it with its schema, connections and SQL module (``SQLiteCheckpointer``,
``PostgresCheckpointer``).
"""

from __future__ import annotations

import builtins
import datetime as _dt
import time
from typing import Any, Unpack

from ..checkpoint import Checkpoint
from ..errors import CorruptRecordError
from . import _codec
from ._leases import InterruptOptions, LeasePutOptions
from ._listing import Listings
from ._operations import StoreOperations
from ._plans import Plan
from .base import (
    AnswerOptions,
    ClaimOptions,
    EndedStatus,
    LastOptions,
    PendingInterrupt,
    PruneResult,
    RunRecord,
    RunStatus,
)

__all__ = ["PlanCheckpointer"]


class _PutOptions(LeasePutOptions, total=False):
    force_full: bool


class PlanCheckpointer(Listings, StoreOperations):
    """Runs, checkpoints, pending interrupts and the idempotency cache on a SQL database
    (docs/storage.md). Every method raises :class:`~tether.errors.StoreError` subclasses, never
    driver errors."""

    # --- runs -----------------------------------------------------------------------------
    def create_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        """Insert a new run; one with an ``owner`` is leased to it for ``lease_seconds`` (the
        database's clock) by the same statement.

        Raises:
            ConfigurationError: a run with this execution_id already exists, or an owner was
                given without ``lease_seconds``.
        """
        plan = self._create_run_plan(run, lease_seconds)
        eid = run.execution_id
        return self._created(self._db.run("create_run", plan, write=True, execution_id=eid))

    async def acreate_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        plan = self._create_run_plan(run, lease_seconds)
        eid = run.execution_id
        return self._created(await self._db.arun("create_run", plan, write=True, execution_id=eid))

    def _created(self, run: RunRecord) -> RunRecord:
        self._heads.reset(run.execution_id, _codec.empty_head())
        return run

    def get_run(self, execution_id: str) -> RunRecord | None:
        """The run, or ``None``."""
        return self._db.run("get_run", self._get_run_plan(execution_id))

    async def aget_run(self, execution_id: str) -> RunRecord | None:
        return await self._db.arun("get_run", self._get_run_plan(execution_id))

    def set_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        """Record a status change that comes with no checkpoint."""
        plan = self._status_plan(execution_id, status, error)
        self._db.run("set_run_status", plan, write=True, execution_id=execution_id)

    async def aset_run_status(
        self, execution_id: str, status: RunStatus, *, error: str | None = None
    ) -> None:
        plan = self._status_plan(execution_id, status, error)
        await self._db.arun("set_run_status", plan, write=True, execution_id=execution_id)

    # --- checkpoints ----------------------------------------------------------------------
    def put(self, checkpoint: Checkpoint, **options: Unpack[_PutOptions]) -> Checkpoint:
        """Append a checkpoint in one transaction, assigning ``seq``, ``checkpoint_id`` and
        ``created_at`` (see :meth:`tether.store.base.Checkpointer.put`).

        Args:
            checkpoint: the record; its ``state_snapshot`` is the full state.
            run_status: also set the run's status (``completed``/``failed`` stamp
                ``finished_at``).
            error: the run's error text, with ``run_status="failed"``.
            release_claim_of: the claimer whose pending interrupt this step answers; its
                pending row is deleted in the same transaction.
            force_full: store a full snapshot rather than a delta.
            release_lease_of: with ``run_status``, the holder of the run's lease, which this
                commit gives back (it ends the drive).

        Raises:
            ConcurrentWriteError: another writer appended this step first, or the claim was
                taken over.
            LeaseLost: this instance fences the run on an owner whose lease was taken over.
            SerializationError: the state holds a value JSON cannot store (nothing written).
        """
        eid = checkpoint.execution_id
        head = self._db.run("put", self._put(checkpoint, options), write=True, execution_id=eid)
        self._heads.set(eid, head)
        return checkpoint

    async def aput(self, checkpoint: Checkpoint, **options: Unpack[_PutOptions]) -> Checkpoint:
        eid = checkpoint.execution_id
        plan = self._put(checkpoint, options)
        self._heads.set(eid, await self._db.arun("put", plan, write=True, execution_id=eid))
        return checkpoint

    def _put(self, checkpoint: Checkpoint, options: _PutOptions) -> Plan[_codec.Head]:
        run_status, claim = options.get("run_status"), options.get("release_claim_of")
        force_full = options.get("force_full", False)
        if run_status is None and claim is None and not force_full:
            return self._insert_plan(checkpoint, final=True)  # the usual step: no sub-plan
        return self._put_plan(
            checkpoint,
            run_status,
            options.get("error"),
            claim,
            force_full,
            options.get("release_lease_of"),
        )

    def record_interrupt(
        self, checkpoint: Checkpoint, **options: Unpack[InterruptOptions]
    ) -> PendingInterrupt:
        """Write an ``interrupted`` checkpoint and its pending-interrupt row in one
        transaction and mark the run ``paused`` (giving back ``release_lease_of``'s lease;
        the keywords: :class:`~tether.store.InterruptOptions`).

        Raises:
            ConcurrentWriteError: as :meth:`put`.
        """
        eid = checkpoint.execution_id
        plan = self._interrupt(checkpoint, options)
        return self._paused(
            eid, self._db.run("record_interrupt", plan, write=True, execution_id=eid)
        )

    async def arecord_interrupt(
        self, checkpoint: Checkpoint, **options: Unpack[InterruptOptions]
    ) -> PendingInterrupt:
        eid = checkpoint.execution_id
        plan = self._interrupt(checkpoint, options)
        return self._paused(
            eid, await self._db.arun("record_interrupt", plan, write=True, execution_id=eid)
        )

    def _interrupt(
        self, checkpoint: Checkpoint, options: InterruptOptions
    ) -> Plan[tuple[PendingInterrupt, _codec.Head]]:
        release_claim_of, release_lease_of = (
            options.get("release_claim_of"),
            options.get("release_lease_of"),
        )
        return self._interrupt_plan(checkpoint, release_claim_of, release_lease_of)

    def _paused(
        self, execution_id: str, written: tuple[PendingInterrupt, _codec.Head]
    ) -> PendingInterrupt:
        pending, head = written
        self._heads.set(execution_id, head)
        return pending

    def get_last(self, execution_id: str, **options: Unpack[LastOptions]) -> Checkpoint | None:
        """The highest-seq checkpoint (below ``before_seq``, under ``agent_path_prefix``, if
        given: :class:`~tether.store.base.LastOptions`) with its full state; ``None`` if there
        is none."""
        plan = self._last(execution_id, options)
        return self._with_head(execution_id, *self._db.run("get_last", plan))

    async def aget_last(
        self, execution_id: str, **options: Unpack[LastOptions]
    ) -> Checkpoint | None:
        plan = self._last(execution_id, options)
        return self._with_head(execution_id, *await self._db.arun("get_last", plan))

    def _last(
        self, execution_id: str, options: LastOptions
    ) -> Plan[tuple[Checkpoint | None, _codec.Head | None]]:
        before_seq, prefix = options.get("before_seq"), options.get("agent_path_prefix")
        return self._last_plan(execution_id, before_seq, prefix)

    def _with_head(
        self, execution_id: str, cp: Checkpoint | None, head: _codec.Head | None
    ) -> Checkpoint | None:
        if head is not None:
            self._heads.set(execution_id, head)
        return cp

    def get_resumable(self, execution_id: str) -> tuple[Checkpoint | None, EndedStatus | None]:
        """The row a resume re-enters: the run's newest row that is not a run-end marker,
        with its full state, read with the newest row in one statement (the rows from the
        snapshot under the two newest up to the newest; two more when both are run-end
        markers). Also refreshes the writer's head, as :meth:`get_last` does.

        Returns:
            ``(checkpoint, ended)``: the checkpoint (``None`` when the run has no row but
            run-end markers, or no row at all), and the newest row's status when that row is a
            run-end marker (``"completed"`` or ``"failed"``), else ``None``.

        Raises:
            CorruptRecordError: the run's stored state chain is broken.
        """
        found = self._db.run("get_resumable", self._resumable_plan(execution_id))
        return self._resumed(execution_id, *found)

    async def aget_resumable(
        self, execution_id: str
    ) -> tuple[Checkpoint | None, EndedStatus | None]:
        found = await self._db.arun("get_resumable", self._resumable_plan(execution_id))
        return self._resumed(execution_id, *found)

    def _resumed(
        self, execution_id: str, cp: Checkpoint | None, ended: Any, head: _codec.Head | None
    ) -> tuple[Checkpoint | None, EndedStatus | None]:
        return self._with_head(execution_id, cp, head), ended

    def get_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        """One checkpoint of the run by id, with its full state; ``None`` if absent."""
        return self._db.run("get_checkpoint", self._checkpoint_plan(execution_id, checkpoint_id))

    async def aget_checkpoint(self, execution_id: str, checkpoint_id: str) -> Checkpoint | None:
        plan = self._checkpoint_plan(execution_id, checkpoint_id)
        return await self._db.arun("get_checkpoint", plan)

    def list(
        self, execution_id: str, *, agent_path_prefix: str | None = None
    ) -> builtins.list[Checkpoint]:
        """Every checkpoint of the run in seq order, each with its full state, optionally
        only those written under ``agent_path_prefix``."""
        return self._db.run("list", self._list_plan(execution_id, agent_path_prefix))

    def list_readable(
        self, execution_id: str
    ) -> tuple[builtins.list[Checkpoint], CorruptRecordError | None]:
        """See :meth:`tether.store.ReadableStore.list_readable`."""
        return self._db.run("list", self._readable_plan(execution_id))

    # --- pending interrupts ---------------------------------------------------------------
    def get_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        """The run's pending interrupt, claimed or not; ``None`` if it has none."""
        return self._db.run("get_pending_interrupt", self._pending_plan(execution_id))

    async def aget_pending_interrupt(self, execution_id: str) -> PendingInterrupt | None:
        return await self._db.arun("get_pending_interrupt", self._pending_plan(execution_id))

    def claim_interrupt(
        self, execution_id: str, **claim: Unpack[ClaimOptions]
    ) -> PendingInterrupt | None:
        """Atomically claim the run's pending interrupt: exactly one of any number of
        concurrent callers (threads, processes, machines on Postgres) wins.

        Args:
            execution_id: the paused run.
            owner: the claimer's id (``host:pid:nonce``).
            resume_value: the answer to store; ``None`` to pick up an answer already stored
                whose claimer died (lease lapsed, or ``steal_from`` names it).
            lease_seconds: how long the claim holds without renewal.
            steal_from: a claimer known to be dead.
            checkpoint_id: claim only the question recorded at this interrupted checkpoint
                (``None``: whichever is pending).
            audit: the entry recording ``resume_value`` in the run's audit trail, appended
                in the same transaction when the claim stores the answer.

        Returns:
            The claimed row with the stored answer, or ``None`` if the caller lost. The run is
            marked ``running`` in the same transaction.
        """
        plan = self._claim(execution_id, claim)
        return self._db.run("claim_interrupt", plan, write=True, execution_id=execution_id)

    async def aclaim_interrupt(
        self, execution_id: str, **claim: Unpack[ClaimOptions]
    ) -> PendingInterrupt | None:
        plan = self._claim(execution_id, claim)
        return await self._db.arun("claim_interrupt", plan, write=True, execution_id=execution_id)

    def _claim(self, execution_id: str, claim: ClaimOptions) -> Plan[PendingInterrupt | None]:
        return self._claim_plan(
            execution_id,
            claim["owner"],
            claim["resume_value"],
            claim["lease_seconds"],
            claim.get("steal_from"),
            claim.get("checkpoint_id"),
            claim.get("audit"),
        )

    delete_pending_interrupt_atomic = claim_interrupt
    """The contract's name for :meth:`claim_interrupt` (docs/storage.md)."""

    def renew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        """Extend a claim this owner holds; ``False`` if it no longer holds it."""
        plan = self._renew_claim_plan(execution_id, owner, lease_seconds)
        return self._db.run("renew_claim", plan, write=True, execution_id=execution_id)

    async def arenew_claim(self, execution_id: str, *, owner: str, lease_seconds: float) -> bool:
        plan = self._renew_claim_plan(execution_id, owner, lease_seconds)
        return await self._db.arun("renew_claim", plan, write=True, execution_id=execution_id)

    def release_claim(self, execution_id: str, *, owner: str) -> bool:
        """Give a claim back, keeping the stored answer; the run turns ``paused`` again.
        ``False`` if this owner held no claim."""
        plan = self._release_claim_plan(execution_id, owner)
        return self._db.run("release_claim", plan, write=True, execution_id=execution_id)

    async def arelease_claim(self, execution_id: str, *, owner: str) -> bool:
        plan = self._release_claim_plan(execution_id, owner)
        return await self._db.arun("release_claim", plan, write=True, execution_id=execution_id)

    def answer_interrupt(
        self, execution_id: str, resume_value: dict[str, Any], **options: Unpack[AnswerOptions]
    ) -> bool:
        """Store an answer without claiming; ``False`` if the interrupt is gone, answered or
        claimed, or (given ``checkpoint_id``) is not the question recorded at it. ``audit`` is
        appended to the run's audit trail in the same transaction when the answer is
        stored (the keywords: :class:`~tether.store.base.AnswerOptions`)."""
        checkpoint_id, audit = options.get("checkpoint_id"), options.get("audit")
        plan = self._answer_plan(execution_id, resume_value, checkpoint_id, audit)
        return self._db.run("answer_interrupt", plan, write=True, execution_id=execution_id)

    # --- idempotency ----------------------------------------------------------------------
    def get_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        """``(True, value)`` on a hit (a cached ``None`` is a hit), else ``(False, None)``."""
        return self._db.run("get_idempotent", self._get_idempotent_plan(execution_id, key))

    async def aget_idempotent(self, execution_id: str, key: str) -> tuple[bool, Any]:
        return await self._db.arun("get_idempotent", self._get_idempotent_plan(execution_id, key))

    def put_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        """Cache a result; if another writer cached this key first, keep and return theirs.

        Raises:
            SerializationError: the value cannot be stored as JSON.
        """
        plan = self._put_idempotent_plan(execution_id, key, value)
        return self._db.run("put_idempotent", plan, write=True, execution_id=execution_id)

    async def aput_idempotent(self, execution_id: str, key: str, value: Any) -> Any:
        plan = self._put_idempotent_plan(execution_id, key, value)
        return await self._db.arun("put_idempotent", plan, write=True, execution_id=execution_id)

    def list_idempotent(self, execution_id: str) -> dict[str, Any]:
        """The run's whole idempotency cache, ``{key: value}``."""
        return self._db.run("list_idempotent", self._list_idempotent_plan(execution_id))

    # --- maintenance ----------------------------------------------------------------------
    def prune(
        self, older_than: _dt.timedelta | _dt.datetime, *, dry_run: bool = False
    ) -> PruneResult:
        """Delete finished (completed or failed) runs whose end is older than the cutoff,
        whole: run row, checkpoints, pending row, idempotency cache, in one transaction and
        one statement per table. Never touches a paused or running run, nor a failed run
        resumed while pruning (Postgres locks and re-checks its row; SQLite holds the write
        lock).

        Args:
            older_than: an age (``timedelta``, from this machine's clock) or an absolute UTC
                cutoff (aware ``datetime``).
            dry_run: count what would go, delete nothing.

        Returns:
            Counts of runs, checkpoints and idempotency rows deleted, and the run ids.

        Raises:
            ConfigurationError: a naive datetime or another type of cutoff.
        """
        cutoff = _codec.prune_cutoff(older_than, time.time())
        result = self._db.run("prune", self._prune_plan(cutoff, dry_run), write=True)
        if not dry_run:
            for eid in result.execution_ids:
                self._heads.drop(eid)
        return result
