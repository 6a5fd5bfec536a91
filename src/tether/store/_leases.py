"""Run leases, fencing and the start queue: what the SQL backends share (``docs/workers.md``).

A running run has an **owner** (``host:pid:nonce``) and a **lease** (``runs.owner``,
``runs.lease_expires_at``). The process executing the run renews the lease while it works; a
worker may take over a run whose lease lapsed.

Every statement that sets an owner sets its expiry in the same statement, from the owner's
lease period (creating a run, taking its lease, a worker's claim), and a lease lapses at its
recorded expiry, for every reader: no reader puts its own lease period in the owner's place.
A row with no expiry is either unowned (free) or written by a tether that recorded none until
the first heartbeat; that one counts as leased for :data:`UNRECORDED_LEASE_SECONDS` after its
last update. An unowned row may carry an expiry too: a run given back for a retry
(:meth:`LeaseStore.arelease_run_for_retry`) is not claimed by workers before it.

Every checkpoint a leaseholder commits is
**fenced**: the insert carries ``WHERE EXISTS (run owned by me)`` in the same statement, so an
owner that lost its lease (paused by GC, partitioned, SIGSTOPped) cannot commit a step after a
new owner took the run; its commit raises :class:`~tether.errors.LeaseLost` and writes nothing.

Which runs a store instance writes under a lease is kept in memory (:class:`Fences`): the
engine registers a fence when it takes a lease and drops it when it gives the lease back, and
the backends' step path consults it without an extra round trip.

This module holds no SQL: each backend keeps its statements in its SQL module
(``_sqlite_sql``, ``_postgres_sql``), and :mod:`._lease_operations` runs them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    NamedTuple,
    Protocol,
    Required,
    TypedDict,
    Unpack,
    runtime_checkable,
)

from ..errors import ConfigurationError
from .base import PutOptions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..checkpoint import Checkpoint
    from .base import PendingInterrupt, RunRecord, RunStatus

__all__ = [
    "UNRECORDED_LEASE_SECONDS",
    "ClaimedRun",
    "Fences",
    "InterruptOptions",
    "LeasePutOptions",
    "LeaseStore",
    "Renewal",
    "creation_lease_seconds",
    "dead_letter_reason",
    "lease_left_seconds",
]

UNRECORDED_LEASE_SECONDS = 30.0
"""How long an owned run with no recorded lease expiry counts as leased after its last update.
Only older tethers wrote such rows (they recorded the expiry at the first heartbeat, a third of
the lease in); 30 s is the lease their in-process drives took by default."""


@dataclass(slots=True)
class ClaimedRun:
    """A run a worker claimed (:meth:`LeaseStore.claim_runs`).

    Attributes:
        execution_id: the run.
        runner_name: the runner that owns it (look it up in the worker's registry).
        status: the run's status before the claim: ``queued`` (start it), ``running`` (its
            owner's lease lapsed: resume it) or ``paused`` (an answer is waiting: resume it).
        input: the run's recorded input (what a queued run starts with).
        previous_owner: who held the run's lease before (``None`` for a queued run).
        attempts: how many times the run has been claimed without a clean finish, this claim
            included.
        dead_lettered: the run had used up its attempts; it was marked ``failed`` instead of
            being handed over, and the caller must not run it.
    """

    execution_id: str
    runner_name: str
    status: RunStatus
    input: Any = None
    previous_owner: str | None = None
    attempts: int = 1
    dead_lettered: bool = False


def creation_lease_seconds(run: RunRecord, lease_seconds: float | None) -> float | None:
    """The lease period a new run is created with: its owner's, ``None`` for an unowned run.

    Raises:
        ConfigurationError: an owner without a positive ``lease_seconds`` (a run must not
            exist owned and unexpiring, even until its first heartbeat).
    """
    if run.owner is None:
        return None
    if not isinstance(lease_seconds, int | float) or not lease_seconds > 0:
        raise ConfigurationError(
            f"run {run.execution_id!r} is created owned by {run.owner}: pass its lease period "
            f"as lease_seconds (a number > 0), got {lease_seconds!r}",
            execution_id=run.execution_id,
        )
    return float(lease_seconds)


def lease_left_seconds(lease_seconds: float, since: float | None) -> float:
    """What is left of a lease period counted from ``since`` (a ``time.monotonic()``
    reading; ``None``: now), read at the moment a renewal is about to be written."""
    return lease_seconds if since is None else lease_seconds - (time.monotonic() - since)


def dead_letter_reason(attempts: int, previous_owner: str | None) -> str:
    """The ``error`` text of a run failed for crashing its workers too often."""
    return (
        f"DeadLetter: the run was claimed {attempts} times without finishing (its workers "
        f"kept dying; last owner {previous_owner or 'unknown'}); resume it by hand once fixed"
    )


class Fences:
    """The runs this store instance writes under a lease: ``execution_id -> owner``.

    Thread-safe; one per store instance.
    """

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}
        self._lock = threading.Lock()
        # The dict's own get (atomic under the GIL, no Python frame): every step takes one.
        self.get: Callable[[str], str | None] = self._owners.get

    def set(self, execution_id: str, owner: str, *, if_free: bool = False) -> bool:
        """Fence the run on ``owner``; with ``if_free``, only if no owner fences it yet.
        Returns whether ``owner`` now fences it."""
        with self._lock:
            if if_free and self._owners.get(execution_id, owner) != owner:
                return False
            self._owners[execution_id] = owner
            return True

    def drop(self, execution_id: str, owner: str | None = None) -> None:
        """Forget the fence (only if ``owner`` still holds it, when given)."""
        with self._lock:
            if owner is None or self._owners.get(execution_id) == owner:
                self._owners.pop(execution_id, None)


class Fencing:
    """The fencing methods both backends share (their ``_fences`` is a :class:`Fences`)."""

    _fences: Fences

    def fence(self, execution_id: str, owner: str, *, if_free: bool = False) -> bool:
        """Fence later commits of the run on ``owner`` (no I/O); with ``if_free``, only if no
        drive of this instance fences it already. Returns whether ``owner`` fences it."""
        return self._fences.set(execution_id, owner, if_free=if_free)

    def unfence(self, execution_id: str, owner: str | None = None) -> None:
        """Stop fencing the run's commits (only ``owner``'s fence, when given)."""
        self._fences.drop(execution_id, owner)

    def fenced_by(self, execution_id: str) -> str | None:
        """The owner this instance fences the run's commits on, if any (no I/O)."""
        return self._fences.get(execution_id)


class LeaseTake(NamedTuple):
    """What :meth:`LeaseStore.aacquire_run_lease` did.

    Attributes:
        won: the caller holds the lease now.
        previous_owner: the run's owner before the take (``None``: free).
        exists: a run with this id exists.
        run: on success, the run as the take left it (read in the same statement, so a
            resume need not read it again).
    """

    won: bool
    previous_owner: str | None
    exists: bool
    run: RunRecord | None = None


class LeasePutOptions(PutOptions, total=False):
    """The keywords of a lease store's :meth:`LeaseStore.put` (and ``aput``):
    :class:`~tether.store.base.PutOptions` and

    Attributes:
        release_lease_of: with ``run_status``, the holder of the run's lease, which this
            commit gives back (it ends the drive) if that holder still has it.
    """

    release_lease_of: str | None


class InterruptOptions(TypedDict, total=False):
    """The keywords of a lease store's :meth:`LeaseStore.record_interrupt` (and
    ``arecord_interrupt``).

    Attributes:
        release_claim_of: the claimer whose pending row the new one replaces.
        release_lease_of: the holder of the run's lease, which the paused row gives back.
    """

    release_claim_of: str | None
    release_lease_of: str | None


class Renewal(TypedDict, total=False):
    """The keywords of :meth:`LeaseStore.renew_run_leases` (and ``arenew_run_leases``).

    Attributes:
        lease_seconds: the lease period, counted from ``since``; required.
        since: a ``time.monotonic()`` reading taken when the caller decided to renew
            (``None``: now).
    """

    lease_seconds: Required[float]
    since: float | None


@runtime_checkable
class LeaseStore(Protocol):
    """The optional capability of a store that supports run leases, workers and the queue.

    Both SQL backends implement it. On SQLite the claims take the database's write lock
    (``BEGIN IMMEDIATE``) instead of ``FOR UPDATE SKIP LOCKED``: correct for processes on one
    machine, not for many machines.

    Its ``put`` (with ``run_status``) and ``record_interrupt`` also take
    ``release_lease_of=owner``: the commit that ends a drive (the run-end row, or the paused
    row) gives the lease back in its own transaction, if ``owner`` holds it, and unfences the
    run, saving the release's round trip and commit.

    Its ``create_run`` (and ``acreate_run``) also takes ``lease_seconds``, required when the
    run has an ``owner``: the run is created leased to that owner until ``lease_seconds`` from
    the creating commit (the database's clock), so it is held from its first moment, before
    any heartbeat (a run created with an owner and no period raises ``ConfigurationError``).
    """

    def create_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        """:meth:`Checkpointer.create_run <tether.store.base.Checkpointer.create_run>`; a run
        with an ``owner`` is leased to it for ``lease_seconds`` by the same statement."""

    async def acreate_run(self, run: RunRecord, *, lease_seconds: float | None = None) -> RunRecord:
        """Async :meth:`create_run`."""

    def put(self, checkpoint: Checkpoint, **options: Unpack[LeasePutOptions]) -> Checkpoint:
        """:meth:`Checkpointer.put <tether.store.base.Checkpointer.put>`; with ``run_status``,
        gives back the lease ``release_lease_of`` holds in the same transaction."""

    async def aput(self, checkpoint: Checkpoint, **options: Unpack[LeasePutOptions]) -> Checkpoint:
        """Async :meth:`put`."""

    def record_interrupt(
        self, checkpoint: Checkpoint, **options: Unpack[InterruptOptions]
    ) -> PendingInterrupt:
        """:meth:`Checkpointer.record_interrupt
        <tether.store.base.Checkpointer.record_interrupt>`; gives back the lease
        ``release_lease_of`` holds in the same transaction."""

    async def arecord_interrupt(
        self, checkpoint: Checkpoint, **options: Unpack[InterruptOptions]
    ) -> PendingInterrupt:
        """Async :meth:`record_interrupt`."""

    def fence(self, execution_id: str, owner: str, *, if_free: bool = False) -> bool:
        """Fence this instance's later commits of the run on ``owner`` (no I/O); with
        ``if_free``, only if no drive of this instance fences it already."""

    def fenced_by(self, execution_id: str) -> str | None:
        """The owner this instance fences the run's commits on, if any (no I/O)."""

    def unfence(self, execution_id: str, owner: str | None = None) -> None:
        """Stop fencing the run's commits (no I/O)."""

    async def aacquire_run_lease(
        self, execution_id: str, *, owner: str, lease_seconds: float, steal_from: str | None
    ) -> LeaseTake:
        """Take the run's lease if nobody live holds it.

        Succeeds when the run has no owner, its lease lapsed, or its owner is ``steal_from``
        (a caller that knows that owner is dead). On success the run is fenced on ``owner``.
        """

    def renew_run_leases(
        self, owner: str, execution_ids: Sequence[str], **renewal: Unpack[Renewal]
    ) -> int:
        """Extend ``owner``'s lease on each of ``execution_ids`` (the runs it still drives) to
        ``lease_seconds`` after ``since`` (a ``time.monotonic()`` reading taken when the
        caller decided to renew; default: now); the number of those runs it still holds.
        Called from the heartbeat thread. Runs ``owner`` holds and does not name are left to
        lapse.

        The period counts from ``since``, not from when the statement reaches the database: a
        renewal held up (waiting for a connection while the server restarts, or for SQLite's
        write lock) never keeps a run leased more than one period past that decision, so a run
        whose drive gave up meanwhile lapses on time. Past the period, nothing is written."""

    async def arenew_run_leases(
        self, owner: str, execution_ids: Sequence[str], **renewal: Unpack[Renewal]
    ) -> int:
        """Async :meth:`renew_run_leases`."""

    async def arelease_run_lease(self, execution_id: str, *, owner: str) -> bool:
        """Give the lease back (a clean end: the attempt count resets); unfences the run."""

    async def arelease_run_for_retry(
        self, execution_id: str, *, owner: str, retry_after_seconds: float
    ) -> bool:
        """Give back the lease of a run whose drive raised (it did not end): the run is left
        unowned, keeps its attempt count (so ``max_attempts`` still stops a run that fails
        every time), and workers claim it again from ``retry_after_seconds`` on; a resume by
        hand may take it at once. Unfences the run. ``False`` if ``owner`` held no lease on
        it (taken over meanwhile: nothing changed)."""

    async def aclaim_runs(
        self,
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        max_attempts: int,
        runner_names: list[str] | None = None,
        runner_slots: dict[str, int] | None = None,
        exclude_execution_ids: Sequence[str] | None = None,
        app_versions: Sequence[str] | None = None,
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` runs for a worker: queued runs (higher priority first, then
        oldest), running runs whose lease lapsed, and paused runs whose interrupt was answered
        and is not claimed. A claimed run is leased to ``owner`` and fenced; one that used up
        ``max_attempts`` is failed (dead-lettered) and returned with ``dead_lettered=True``.

        Args:
            owner: the worker's owner id.
            limit: the most runs to claim.
            lease_seconds: the lease each claimed run gets.
            max_attempts: claims allowed without a clean finish before a run is dead-lettered.
            runner_names: only runs of these runners (those the worker can run).
            runner_slots: at most this many runs of a runner name (per-runner limits).
            exclude_execution_ids: runs not to claim (those this worker left to workers with
                other code: :class:`~tether.errors.MissingStepError`).
            app_versions: only runs started by these versions of the code, or with no
                version recorded (``None``: every run; docs/design.md §13).
        """

    async def aenqueue_run(
        self,
        execution_id: str,
        runner_name: str,
        input: Any,
        *,
        priority: int,
        app_version: str | None = None,
    ) -> bool:
        """Record a ``queued`` run (of ``app_version``, the enqueuing code's version, if it
        declares one); ``False`` (and nothing changed) if the id exists."""

    async def astart_queued_run(
        self,
        execution_id: str,
        *,
        owner: str,
        runner_kind: str,
        input: Any,
        app_version: str | None = None,
    ) -> bool:
        """Turn a queued run this owner claimed into a ``running`` run of ``runner_kind`` with
        the runner's normalised ``input``, recording ``app_version`` if it was enqueued with
        none; ``False`` if it is not queued or not ours."""
