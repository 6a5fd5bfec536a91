"""Workers: processes that continue crashed runs, start queued runs and pick up approvals
(docs/design.md §10; ``docs/workers.md``). Named ``worker_process`` (it was ``tether.worker``)
so as not to share a name with :class:`tether.Worker`, a supervisor's worker agent.

Run as many workers as you like against one Postgres database (or, on one machine, one SQLite
file). Each worker loops:

1. **claim** up to ``concurrency`` runs it can run (its registry's runner names): queued runs
   (higher ``priority`` first, then oldest), running runs whose owner's lease lapsed (the owner
   died, froze or lost the network), and paused runs whose interrupt was answered from
   anywhere (``tether approve``, the web page) and not claimed. On Postgres the claim is
   ``FOR UPDATE SKIP LOCKED``; on SQLite it holds the write lock (one machine only);
2. **run** each through the registry's runner (``arun`` for a queued run, ``aresume`` for the
   others) under the worker's lease, which the process's heartbeat renews while it drives;
3. **give back** the lease when the drive ends (completed, paused, failed). A worker whose
   lease was taken over meanwhile gets :class:`~tether.errors.LeaseLost` at its next commit
   and drops the run. A drive that raised (a store error) is given back for a retry, after a
   back-off that doubles with each attempt (from the poll interval up to the lease period),
   or, when the store went away, left to lapse one lease period after its last renewal: the
   heartbeat renews only the runs the worker still drives.

A run claimed ``max_attempts`` times without a clean finish (it keeps killing its workers) is
marked ``failed`` with a ``DeadLetter: ...`` error instead of being run again.

A run this worker's code cannot re-enter (:class:`~tether.errors.MissingStepError`: a tool,
agent or node was renamed or removed by a deploy) is not a crash: nothing was claimed, so the
run stays as it was (paused with its answer, or crashed), its lease is given back as after a
clean end, the reason is recorded in its ``error``, one line goes to the log, and this worker
never claims it again; a worker whose code has the step continues it.

A paused run whose answer was stored but whose rows cannot be read (a damaged run: the
resume's :class:`~tether.errors.CorruptRecordError` names the seq, raised before the claim) is
left the same way, paused with its answer, without writing its ``error``: one line goes to the
log and this worker never claims it again. Repair the row, or cancel the run.

Each loop also applies the approval deadlines that fell due on questions of the runners it
serves (``interrupt(..., timeout_seconds=, on_timeout=)``; :mod:`tether._deadlines`): a
default answer is stored (and claimed by the loop's next claim), or the run ends failed or
cancelled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from . import _app_version
from ._deadlines import apply_due
from ._queue import aenqueue, enqueue, lease_store
from .engine.lease import Lease, adopted, give_back_after_raise, heartbeats
from .engine.owners import activate, deactivate, new_owner
from .engine.sync import raise_if_cancel_requested, run_sync
from .errors import (
    ConfigurationError,
    CorruptRecordError,
    LeaseLost,
    MissingStepError,
    ResumeError,
    SerializationError,
    StoreError,
    StoreMismatchError,
)
from .registry import Registry
from .store import ClaimedRun, LeaseStore
from .store.base import Checkpointer

__all__ = ["WorkerStats", "aenqueue", "arun_worker", "enqueue", "run_worker"]

log = logging.getLogger("tether.worker")

Stop = threading.Event | asyncio.Event | Callable[[], bool]


@dataclass(slots=True)
class WorkerStats:
    """What a worker did before it stopped.

    Attributes:
        owner: the worker's lease owner id (``host:pid:nonce``).
        claimed: runs claimed and handed to their runner.
        finished: runs whose drive ended cleanly (completed, paused or failed).
        lease_lost: runs dropped because another worker took them over.
        dead_lettered: runs this worker marked failed for using up their attempts.
        errors: runs whose drive raised (given back for a retry, or left to lapse).
        missing_step: runs this worker's code cannot re-enter (a step it no longer has),
            left to workers whose code has it.
        refused: queued runs their runner refused to start (``ConfigurationError`` or
            ``SerializationError``: an input it does not take), marked ``failed``.
    """

    owner: str
    claimed: int = 0
    finished: int = 0
    lease_lost: int = 0
    dead_lettered: int = 0
    errors: int = 0
    missing_step: int = 0
    refused: int = 0


def _stopped(stop: Stop | None) -> bool:
    if stop is None:
        return False
    if isinstance(stop, threading.Event | asyncio.Event):
        return stop.is_set()
    return bool(stop())


class _Worker:
    def __init__(
        self,
        registry: Registry,
        store: LeaseStore,
        *,
        concurrency: int,
        lease_seconds: float,
        poll_interval_seconds: float,
        max_attempts: int,
        per_runner_limit: dict[str, int],
        versions: list[str] | None,
    ) -> None:
        self.registry = registry
        self.versions = versions
        self.store = store
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval_seconds = poll_interval_seconds
        self.max_attempts = max_attempts
        self.limits = per_runner_limit
        self.stats = WorkerStats(new_owner())
        self.active: dict[str, asyncio.Task[None]] = {}
        self.per_name: collections.Counter[str] = collections.Counter()
        # Runs this worker's code cannot re-enter: never claimed again by this process (its
        # code cannot change without a restart), so workers with the step get them.
        self.left: set[str] = set()
        # Runner checkpointers (by id) seen to reach this worker's database; the first that
        # does not stops the worker (see check_same_database).
        self.same_database: set[int] = set()
        self.misbound: StoreMismatchError | None = None

    @property
    def owner(self) -> str:
        return self.stats.owner

    async def claim(self) -> int:
        free = self.concurrency - len(self.active)
        if free <= 0:
            return 0
        slots = {name: max(0, n - self.per_name[name]) for name, n in self.limits.items()}
        claimed = await self.store.aclaim_runs(
            owner=self.owner,
            limit=free,
            lease_seconds=self.lease_seconds,
            max_attempts=self.max_attempts,
            runner_names=self.registry.names(),
            runner_slots=slots or None,
            exclude_execution_ids=sorted(self.left) or None,
            app_versions=self.versions,
        )
        for run in claimed:
            if run.execution_id in self.active:  # already ours (a renewed claim)
                continue
            if run.dead_lettered:
                self.stats.dead_lettered += 1
                log.warning(
                    "run %s dead-lettered after %d attempts", run.execution_id, run.attempts
                )
                continue
            self.stats.claimed += 1
            self.per_name[run.runner_name] += 1
            task = asyncio.create_task(self.run_one(run))
            self.active[run.execution_id] = task
            task.add_done_callback(functools.partial(self._done, run))
        return len(claimed)

    def _done(self, run: ClaimedRun, _task: asyncio.Task[None]) -> None:
        self.active.pop(run.execution_id, None)
        self.per_name[run.runner_name] -= 1

    async def leave(self, run: ClaimedRun, exc: MissingStepError) -> None:
        """Leave a run this worker's code cannot re-enter to workers whose code can: never
        claim it again, say why in one log line and in the run's ``error`` (its status is
        kept: ``tether runs show`` and ``pending list`` show the reason)."""
        self.left.add(run.execution_id)
        self.stats.missing_step += 1
        log.warning(
            "run %s left %s for workers whose code has %s (this worker will not claim it "
            "again): %s. Deploy code that has it and a worker with it continues the run",
            run.execution_id,
            run.status,
            exc.missing,
            exc,
        )
        with contextlib.suppress(StoreError):
            await cast(Checkpointer, self.store).aset_run_status(
                run.execution_id, run.status, error=f"{type(exc).__name__}: {exc}"
            )

    async def refuse_start(
        self, run: ClaimedRun, exc: ConfigurationError | SerializationError
    ) -> None:
        """End a queued run its runner refused to start (an input it does not take, a value
        it cannot store): ``failed`` with the reason as its ``error``, in one log line. The
        same input would be refused on every claim, so it is not retried as a crash."""
        self.stats.refused += 1
        log.warning("run %s failed: its runner refused to start it: %s", run.execution_id, exc)
        with contextlib.suppress(StoreError):
            await cast(Checkpointer, self.store).aset_run_status(
                run.execution_id, "failed", error=f"{type(exc).__name__}: {exc}"
            )

    async def check_same_database(self, runner: Any, runner_store: Any, eid: str) -> None:
        """Refuse a runner whose checkpointer is another database than this worker's: it
        would write the run somewhere the worker's lease does not hold (each claim "lost",
        the run dead-lettered). Judged once a checkpointer, by whether it sees the lease this
        worker just took on ``eid``.

        Raises:
            StoreMismatchError: it does not (the run is given back untouched by the caller).
        """
        if runner_store is self.store or id(runner_store) in self.same_database:
            return
        seen = await runner_store.aget_run(eid)
        if seen is not None and seen.owner == self.owner:
            self.same_database.add(id(runner_store))
            return
        raise StoreMismatchError(
            f"runner {runner.name!r} writes to {runner_store!r}, not to this worker's "
            f"{self.store!r}: give the worker the runner's database (--db) or open the "
            "runner's store with tether.connect() (docs/workers.md)"
        )

    def retry_after_seconds(self, attempts: int) -> float:
        """The back-off before a run whose drive raised on its ``attempts``-th claim is
        claimed again: one poll interval, doubling with each attempt, at most a lease."""
        doubled = self.poll_interval_seconds * 2.0 ** max(0, attempts - 1)
        return min(self.lease_seconds, doubled)

    async def run_one(self, run: ClaimedRun) -> None:
        eid = run.execution_id
        # Renewed while this drive runs, and no longer once it is over, whatever became of it.
        heartbeats.add(self.store, self.owner, self.lease_seconds, eid)
        lease = Lease(
            eid,
            self.owner,
            self.lease_seconds,
            previous_owner=run.previous_owner,
            by_worker=True,
            queued=run.status == "queued",
        )
        runner_store: Any = None
        release = False
        raised: Exception | None = None
        try:
            runner: Any = (
                self.registry.get(run.runner_name)
                if lease.queued  # not started yet: no runner kind recorded to check
                else await self.registry.afor_run(cast(Checkpointer, self.store), eid)
            )
            runner_store = runner.checkpointer
            await self.check_same_database(runner, runner_store, eid)
            if runner_store is not self.store and isinstance(runner_store, LeaseStore):
                runner_store.fence(eid, self.owner)
            with adopted(lease):
                if lease.queued:
                    result = await runner.arun(run.input, execution_id=eid)
                else:
                    result = await runner.aresume(eid)
            log.info("run %s: %s", eid, getattr(result, "status", result))
            self.stats.finished += 1
            release = True
        except StoreMismatchError as exc:  # nothing written: the run goes back as it was
            log.error("run %s given back, worker stopping: %s", eid, exc)
            self.misbound = exc
            runner_store = None
            release = True
        except LeaseLost:
            self.stats.lease_lost += 1
            log.warning("run %s: lease lost to another worker; dropped", eid)
        except ResumeError as exc:  # nothing to continue (finished, or claimed elsewhere)
            log.info("run %s: not resumed: %s", eid, exc)
            release = True
        except MissingStepError as exc:  # nothing claimed or written: not a crash, no retry
            await self.leave(run, exc)
            release = True
        except Exception as exc:
            if lease.queued and isinstance(exc, ConfigurationError | SerializationError):
                await self.refuse_start(run, exc)  # bad input: no crash, no retry
                release = True
            elif run.status == "paused" and _damaged_row(exc):
                # A damaged row under a stored answer, refused before the claim: the run stays
                # paused with its answer, as it was (a retry would only read it again).
                self.left.add(eid)
                self.stats.errors += 1
                log.error("run %s left paused, its answer unclaimed: %s", eid, exc)
                release = True
            else:  # retried (attempts kept), until dead-lettered
                self.stats.errors += 1
                raised = exc
                log.exception("run %s: drive raised %s", eid, exc)
        finally:
            heartbeats.remove(self.owner, eid)
            # The drive's last commit gave the lease back (and unfenced its store) if it ended.
            given_back = isinstance(runner_store, LeaseStore) and (
                runner_store.fenced_by(eid) != self.owner
            )
            if isinstance(runner_store, LeaseStore) and runner_store is not self.store:
                runner_store.unfence(eid, self.owner)
            if release and not given_back:
                with contextlib.suppress(StoreError):
                    await self.store.arelease_run_lease(eid, owner=self.owner)
            elif raised is not None:
                await give_back_after_raise(
                    self.store,
                    eid,
                    self.owner,
                    raised,
                    retry_after_seconds=self.retry_after_seconds(run.attempts),
                )
            else:  # lost, or cancelled: a step may still be in flight; the lease lapses
                self.store.unfence(eid, self.owner)


def _damaged_row(exc: Exception) -> bool:
    """Whether ``exc`` names a run's checkpoint row that cannot be decoded (a damaged run)."""
    return isinstance(exc, CorruptRecordError) and exc.seq is not None


async def arun_worker(
    registry: Registry,
    url_or_store: str | Checkpointer,
    *,
    concurrency: int = 4,
    lease_seconds: float = 30.0,
    poll_interval_seconds: float = 0.5,
    max_attempts: int = 5,
    stop: Stop | None = None,
    per_runner_limit: dict[str, int] | None = None,
    versions: Iterable[str] | None = None,
) -> WorkerStats:
    """Run a worker until ``stop`` is set (see the module docstring).

    The runners in ``registry`` must write to the same database as ``url_or_store`` (the CLI
    points them at it through ``TETHER_DATABASE_URL``).

    Args:
        registry: the application's runners; only runs of these runner names are claimed.
        url_or_store: the store, or its URL (``postgresql://...``, ``sqlite:///...``).
        concurrency: runs driven at once by this worker.
        lease_seconds: the lease period: a run whose worker stops renewing is taken over
            about this long after its last renewal.
        poll_interval_seconds: how long to wait between claims when nothing was claimable.
        max_attempts: claims of one run without a clean finish before it is dead-lettered.
        stop: when set (a ``threading.Event``, ``asyncio.Event`` or a callable returning
            ``True``), the worker claims nothing more, lets its runs finish and returns.
        per_runner_limit: at most this many runs of a runner name at once in this worker.
        versions: the versions of the code whose runs this worker serves (runs with no
            version recorded are served too); default: ``registry.served_versions()``, its
            own version and its compatible ones, or every run when it declares no version.
            Runs of other versions are never claimed (docs/design.md §13).

    Returns:
        What the worker did.

    Raises:
        ConfigurationError: bad arguments, a store without run leases, or a runner whose
            checkpointer is another database (found at its first claimed run, which is given
            back as it was; the worker stops after its other drives end).
    """
    if concurrency < 1 or lease_seconds <= 0 or poll_interval_seconds < 0 or max_attempts < 1:
        raise ConfigurationError(
            "need concurrency >= 1, lease_seconds > 0, poll_interval_seconds >= 0 and "
            f"max_attempts >= 1; got {concurrency}, {lease_seconds}, "
            f"{poll_interval_seconds}, {max_attempts}"
        )
    store = lease_store(url_or_store)
    worker = _Worker(
        registry,
        store,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        poll_interval_seconds=poll_interval_seconds,
        max_attempts=max_attempts,
        per_runner_limit=dict(per_runner_limit or {}),
        versions=served_versions(registry, versions),
    )
    activate(worker.owner)
    log.info(
        "worker %s started (concurrency %d, versions %s)",
        worker.owner,
        concurrency,
        "all" if worker.versions is None else ", ".join(worker.versions) or "unversioned only",
    )
    try:
        while not _stopped(stop) and worker.misbound is None:
            try:
                # Deadlines first: a default answer stored now is claimed just below.
                await apply_due(worker.store, runner_names=registry.names())  # type: ignore[arg-type]
                got = await worker.claim()
            except StoreError as exc:
                log.warning("claim failed: %s", exc)
                got = 0
            raise_if_cancel_requested()  # a cancel a store call's await swallowed still stops it
            if got and len(worker.active) < concurrency:
                continue
            if worker.active:
                await asyncio.wait(
                    list(worker.active.values()),
                    timeout=poll_interval_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            else:
                await asyncio.sleep(poll_interval_seconds)
            raise_if_cancel_requested()
        if worker.active:
            await asyncio.wait(list(worker.active.values()))
        if worker.misbound is not None:
            raise worker.misbound
    finally:
        # Left early (cancelled, or an error): its drives stop with it, and their leases lapse
        # (not given back: a synchronous step may still be running in a thread).
        for task in worker.active.values():
            task.cancel()
        if worker.active:
            await asyncio.wait(list(worker.active.values()))
        heartbeats.remove(worker.owner)
        deactivate(worker.owner)
    return worker.stats


def run_worker(
    registry: Registry,
    url_or_store: str | Checkpointer,
    *,
    concurrency: int = 4,
    lease_seconds: float = 30.0,
    poll_interval_seconds: float = 0.5,
    max_attempts: int = 5,
    stop: Stop | None = None,
    per_runner_limit: dict[str, int] | None = None,
    versions: Iterable[str] | None = None,
) -> WorkerStats:
    """Sync twin of :func:`arun_worker` (blocks until ``stop`` is set)."""
    return run_sync(
        arun_worker(
            registry,
            url_or_store,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            poll_interval_seconds=poll_interval_seconds,
            max_attempts=max_attempts,
            stop=stop,
            per_runner_limit=per_runner_limit,
            versions=versions,
        ),
        blocking_store=False,
    )


def served_versions(registry: Registry, versions: Iterable[str] | None) -> list[str] | None:
    """The versions a worker of ``registry`` serves: ``versions`` (with the registry's own
    version) when given, else :meth:`Registry.served_versions`; ``None``: every run.

    Raises:
        ConfigurationError: a version that is not a non-empty string, or has a comma.
    """
    if versions is None:
        return registry.served_versions()
    if isinstance(versions, str):
        raise ConfigurationError(
            f"versions must be a list of versions, got the string {versions!r}"
        )
    served = [_app_version.check_version(v, "served version") for v in versions]
    own = [registry.version] if registry.version is not None else []
    return list(dict.fromkeys((*own, *served)))
