"""The run lease a drive holds while it executes a run (``docs/workers.md``).

Every top-level verb (``arun``, ``aresume``, ``afork`` of every runner) runs under :func:`hold`:

- a **new run** (start, fork) is created with this process as its owner and its commits are
  fenced on that owner from the first one;
- a **resume** first takes the run's lease; a run whose owner is alive raises
  :class:`~tether.errors.LeaseHeldError`, one whose owner is a dead process on this machine
  (:func:`~tether.engine.owners.owner_is_dead`) or whose lease lapsed is taken over at once;
- a heartbeat thread renews the lease every third of its period while the drive works;
- the lease is given back when the drive ends cleanly (completed, paused, failed); when the
  drive raised (a store error, a bug) it is given back for a retry by
  :func:`give_back_after_raise`; when the process "crashes" (an escaping ``BaseException``) it
  is kept with no I/O, so a worker or a later ``resume`` takes the run over once it lapses.
  Either way nothing renews it once the drive is over.

A worker takes leases itself (``claim_runs``) and sets :data:`_current` before calling a verb;
:func:`hold` then leaves the lease to the worker, which renews and releases it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .. import _app_version
from ..checkpoint import new_id
from ..control import cancelled_error, leases_lost, stopping_on_cancel
from ..errors import (
    ConcurrentWriteError,
    ConfigurationError,
    LeaseHeldError,
    RunnerMismatchError,
    RunNotFoundError,
    StoreError,
    StoreUnavailableError,
    TetherError,
)
from ..store import LeaseStore
from ..store.base import Checkpointer, RunRecord
from .owners import activate, deactivate, new_owner, owner_is_dead

__all__ = [
    "DEFAULT_RUN_LEASE_SECONDS",
    "Lease",
    "give_back_after_raise",
    "hold",
    "load_run",
]

T = TypeVar("T")

DEFAULT_RUN_LEASE_SECONDS = 30.0


@dataclass(slots=True)
class Lease:
    """A run lease held by this process.

    Attributes:
        execution_id: the run.
        owner: ``host:pid:nonce``; the value of ``runs.owner`` while held.
        lease_seconds: the lease period.
        previous_owner: who held the run before this lease took it.
        by_worker: taken by a worker, which renews and releases it.
        queued: the run was claimed from the start queue (its row exists, status ``queued``).
        run: the run as the take left it, for the resume's first look at it (:func:`taken_run`).
    """

    execution_id: str
    owner: str
    lease_seconds: float
    previous_owner: str | None = None
    by_worker: bool = False
    queued: bool = False
    run: RunRecord | None = None


_current: ContextVar[Lease | None] = ContextVar("tether_lease", default=None)
# The version of the code starting a run (start, fork): the starting runner's, set by
# leased_start / fork.leased_fork and recorded by acreate_run (docs/design.md §13).
_starting_version: ContextVar[str | None] = ContextVar("tether_app_version", default=None)


def current() -> Lease | None:
    """The lease the current drive holds, if any."""
    return _current.get()


@contextlib.contextmanager
def adopted(lease: Lease) -> Iterator[Lease]:
    """Run the code inside under a lease a worker took (``claim_runs``): the verbs it calls
    for ``lease.execution_id`` use that lease instead of taking one."""
    token = _current.set(lease)
    try:
        yield lease
    finally:
        _current.reset(token)


async def mark_running(store: Checkpointer, execution_id: str, status: str | None) -> None:
    """Set a resumed run ``running`` as its drive is about to start (after every check that
    could refuse the resume, so a refused or crashed-before-here resume leaves a failed run
    failed). A run whose loaded ``status`` is already ``running`` (a crashed drive's, taken
    over) is left as it is: no commit.

    Args:
        status: the run's status as the resume loaded it, if known.
    """
    if status != "running":
        await store.aset_run_status(execution_id, "running")


def taken_run(execution_id: str) -> RunRecord | None:
    """The run as this drive's lease take read it (once; then ``None``): a resume's first
    look at its run needs no read of its own."""
    lease = _current.get()
    if lease is None or lease.execution_id != execution_id or lease.run is None:
        return None
    run, lease.run = lease.run, None
    return run


async def load_run(store: Checkpointer, execution_id: str, runner_name: str) -> RunRecord:
    """The run, checked to belong to this runner.

    Raises:
        RunNotFoundError, RunnerMismatchError.
    """
    if not isinstance(execution_id, str) or not execution_id:
        raise RunNotFoundError(f"execution_id must be a non-empty str, got {execution_id!r}")
    run = taken_run(execution_id) or await store.aget_run(execution_id)
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


def ending(execution_id: str) -> dict[str, str]:
    """Keyword arguments for the commit that ends a drive (the run-end row, or the paused
    row): ``{"release_lease_of": owner}`` when the drive holds the run's lease (its own, or
    the worker's that drives it), so that commit gives it back in its own transaction: a run
    that ended is never left leased for want of a second commit; ``{}`` without a lease."""
    lease = _current.get()
    if lease is None or lease.execution_id != execution_id:
        return {}
    return {"release_lease_of": lease.owner}


def lease_seconds_of(runner: Any) -> float:
    """A runner's ``lease_seconds`` attribute, or :data:`DEFAULT_RUN_LEASE_SECONDS`."""
    value = getattr(runner, "lease_seconds", None)
    return float(value) if isinstance(value, int | float) else DEFAULT_RUN_LEASE_SECONDS


@dataclass(slots=True)
class _Beat:
    """What one owner's heartbeat renews: its runs on one store, every third of the period."""

    store: LeaseStore
    lease_seconds: float
    due: float
    execution_ids: set[str]


class _Heartbeats:
    """One daemon thread renewing the leases of the runs this process drives, each owner's
    every third of its period.

    A thread, not an asyncio task: a synchronous node that blocks the event loop for longer
    than a lease must not lose its run. A frozen process (SIGSTOP, a long GC pause) freezes
    this thread too, which is the point: its leases lapse and another worker takes over.

    It renews the runs named to it (:meth:`add`), never every run its owner holds: a run whose
    drive gave up (it raised while the store was away, so the give-back failed too) is taken
    off here first, and its lease then lapses one period after the last renewal, however long
    the worker that owns it lives on.
    """

    def __init__(self) -> None:
        self._beats: dict[str, _Beat] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0
        # When the sleeping thread wakes on its own (monotonic s); -inf while it is awake.
        self.sleeps_until = -math.inf
        self.wakeups = 0  # times the thread woke (a diagnostic)

    def add(self, store: LeaseStore, owner: str, lease_seconds: float, execution_id: str) -> None:
        """Renew ``owner``'s lease on the run from a third of the period on."""
        with self._cond:
            beat = self._beats.get(owner)
            if beat is None:
                due = time.monotonic() + lease_seconds / 3
                self._beats[owner] = _Beat(store, lease_seconds, due, {execution_id})
            else:
                beat.execution_ids.add(execution_id)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._loop, name="tether-heartbeat", daemon=True
                )
                self._thread.start()
            elif beat is None and due < self.sleeps_until:
                # Only then: a wake-up (a GIL hand-over) costs a resume about its reads, and a
                # new beat is due long after the thread's next look (10 s against 1 s).
                self._cond.notify()

    def remove(self, owner: str, execution_id: str | None = None) -> None:
        """Stop renewing ``owner``'s lease on the run (on all its runs: ``None``). A renewal
        already in flight may still land, but only up to one period after it was decided
        (``renew_run_leases(since=...)``), however long it waited for the database."""
        with self._cond:
            beat = self._beats.get(owner)
            if beat is not None and execution_id is not None:
                beat.execution_ids.discard(execution_id)
            if beat is not None and (execution_id is None or not beat.execution_ids):
                del self._beats[owner]

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [
                    (owner, beat.store, beat.lease_seconds, sorted(beat.execution_ids))
                    for owner, beat in self._beats.items()
                    if beat.due <= now
                ]
                for owner, *_ in due:
                    beat = self._beats[owner]
                    beat.due = now + beat.lease_seconds / 3
                if not due:
                    wake = min((b.due for b in self._beats.values()), default=now + 1.0)
                    timeout = max(0.005, wake - now)
                    self.sleeps_until = now + timeout
                    self._cond.wait(timeout)
                    self.sleeps_until = -math.inf
                    self.wakeups += 1
                    continue
            for owner, store, period, execution_ids in due:
                with contextlib.suppress(Exception):
                    renewed = store.renew_run_leases(
                        owner, execution_ids, lease_seconds=period, since=now
                    )
                    if renewed < len(execution_ids):  # taken over, or cancelled
                        leases_lost(store, execution_ids)


heartbeats = _Heartbeats()


@functools.cache
def _has_leases(store_type: type) -> bool:
    """Whether stores of this type have the lease capability (an ``isinstance`` against a
    runtime-checkable protocol inspects every method each time: ~10 µs per verb)."""
    return all(callable(getattr(store_type, name, None)) for name in _LEASE_METHODS)


_LEASE_METHODS = tuple(
    name for name in LeaseStore.__dict__ if not name.startswith("_") and name != "register"
)


@contextlib.asynccontextmanager
async def hold(
    store: Checkpointer, execution_id: str, *, new_run: bool, lease_seconds: float
) -> AsyncIterator[Lease | None]:
    """Hold the run's lease around one drive (see the module docstring).

    Args:
        store: the run's store; a store without the lease capability runs unleased.
        execution_id: the run.
        new_run: the drive creates the run (start, fork): no lease to take, only to write.
        lease_seconds: the lease period.

    Raises:
        LeaseHeldError: resuming a run another live process holds.
    """
    cur = _current.get()
    if cur is not None and cur.execution_id == execution_id:
        async with stopping_on_cancel(store, execution_id):
            yield cur
        return
    if not (_has_leases(type(store)) or isinstance(store, LeaseStore)):
        yield None
        return
    if TYPE_CHECKING:  # narrowed for the type checker only: the check above is the cheap one
        assert isinstance(store, LeaseStore)
    owner = new_owner()
    lease = Lease(execution_id, owner, lease_seconds)
    # Active before the lease is taken: another thread of this process that reads this owner
    # from the row between the take and the add would otherwise judge it a crashed drive of
    # this process and steal the lease from a live one.
    activate(owner)
    if new_run:
        # A drive of this process may hold a run with this id already (a retried start with
        # the same execution_id): its fence stays; this drive's create_run is refused.
        store.fence(execution_id, owner, if_free=True)
    else:
        try:
            took = await store.aacquire_run_lease(
                execution_id, owner=owner, lease_seconds=lease_seconds, steal_from=None
            )
            if not took.won and took.exists and owner_is_dead(took.previous_owner):
                took = await store.aacquire_run_lease(
                    execution_id,
                    owner=owner,
                    lease_seconds=lease_seconds,
                    steal_from=took.previous_owner,
                )
        except BaseException:
            deactivate(owner)
            raise
        if not took.exists:  # the verb reports RunNotFoundError
            deactivate(owner)
            yield None
            return
        if not took.won:
            deactivate(owner)
            raise LeaseHeldError(
                f"run {execution_id!r} is being executed by {took.previous_owner} (it holds "
                "the run's lease); wait for it to finish or pause, or for its lease to lapse",
                owner=took.previous_owner,
                execution_id=execution_id,
            )
        lease.previous_owner = took.previous_owner
        lease.run = took.run
    token = _current.set(lease)
    heartbeats.add(store, owner, lease_seconds, execution_id)
    clean = False
    raised: Exception | None = None
    try:
        async with stopping_on_cancel(store, execution_id):
            yield lease
        clean = True
    except Exception as exc:
        clean = isinstance(exc, TetherError) and not isinstance(exc, StoreError)
        raised = None if clean else exc
        raise
    finally:
        heartbeats.remove(owner, execution_id)
        _current.reset(token)
        deactivate(owner)
        held = store.fenced_by(execution_id) == owner  # else given back by the last commit
        if held and clean:
            with contextlib.suppress(StoreError):
                await store.arelease_run_lease(execution_id, owner=owner)
        elif held and raised is not None:
            await give_back_after_raise(store, execution_id, owner, raised, retry_after_seconds=0)
        elif held:  # a crash: no I/O; the lease lapses
            store.unfence(execution_id, owner)


async def give_back_after_raise(
    store: LeaseStore,
    execution_id: str,
    owner: str,
    exc: Exception,
    *,
    retry_after_seconds: float,
) -> None:
    """Leave a run whose drive raised ``exc`` (it did not end) for a retry, and unfence it.
    Its heartbeat must already have stopped (``heartbeats.remove``).

    - Another owner took the run (``ConcurrentWriteError``, ``LeaseLost``): it is theirs.
    - The store went away (``StoreUnavailableError``): nothing is written, since the give-back
      would wait for that store up to its timeout. The lease lapses one period after its last
      renewal, and a worker takes the run then.
    - Otherwise the lease is given back now, the attempt count kept, and workers claim the run
      again after ``retry_after_seconds`` (``release_run_for_retry``).
    """
    if isinstance(exc, ConcurrentWriteError | StoreUnavailableError):
        store.unfence(execution_id, owner)
        return
    try:
        await store.arelease_run_for_retry(
            execution_id, owner=owner, retry_after_seconds=retry_after_seconds
        )
    except StoreError:  # it lapses instead
        store.unfence(execution_id, owner)


async def acreate_run(store: Checkpointer, run: RunRecord) -> RunRecord:
    """Create the run owned by the current lease, leased for its period from the creating
    commit, or start the queued run a worker claimed (leased by the claim). The run records
    the version of the code starting it, unless it names one already."""
    if run.app_version is None:
        run.app_version = _starting_version.get() or _app_version.from_env()
    lease = _current.get()
    if lease is None or lease.execution_id != run.execution_id:
        return await store.acreate_run(run)
    run.owner = lease.owner
    if lease.queued and isinstance(store, LeaseStore):
        started = await store.astart_queued_run(
            run.execution_id,
            owner=lease.owner,
            runner_kind=run.runner_kind,
            input=run.input,
            app_version=run.app_version,
        )
        if not started:
            row = await store.aget_run(run.execution_id)
            if row is not None and row.status == "cancelled":  # a queued run never starts
                raise await cancelled_error(store, run.execution_id)
        return run
    # A lease is only ever taken on a store with the capability (see acquire_lease).
    return await cast(LeaseStore, store).acreate_run(run, lease_seconds=lease.lease_seconds)


async def acreate_branch_run(
    store: Checkpointer, runner: Any, source: RunRecord, src_checkpoint_id: str, eid: str | None
) -> str:
    """Create a fork's run: the runner's name and kind, the source run's input, linked to the
    source run and checkpoint it branches from (docs/design.md §9). Returns its execution_id."""
    eid = eid or new_id()
    await acreate_run(
        store,
        RunRecord(
            eid,
            runner.name,
            runner.kind,
            status="running",
            input=source.input,
            parent_execution_id=source.execution_id,
            parent_checkpoint_id=src_checkpoint_id,
        ),
    )
    return eid


def id_to_create(given: Any, what: str = "execution_id") -> str:
    """The id of a run about to be created: ``given``, or a fresh one when it is ``None``.

    Raises:
        ConfigurationError: ``given`` is not a non-empty str (an empty id would otherwise
            start a run under a random id, so a retry with it starts another run).
    """
    if given is None:
        return new_id()
    if not isinstance(given, str) or not given:
        raise ConfigurationError(
            f"{what} must be a non-empty str (or None for a fresh id), got {given!r}"
        )
    return given


def leased_start(
    fn: Callable[[Any, Any, str], Awaitable[T]],
) -> Callable[[Any, Any, str | None], Awaitable[T]]:
    """Wrap an executor's ``start(runner, input, execution_id)`` in :func:`hold`."""

    @functools.wraps(fn)
    async def start(runner: Any, input: Any, execution_id: str | None) -> T:
        eid = id_to_create(execution_id, "execution_id")
        store = runner.checkpointer
        with recording_version(runner):
            async with hold(store, eid, new_run=True, lease_seconds=lease_seconds_of(runner)):
                return await fn(runner, input, eid)

    return start


def leased_resume(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Wrap an executor's ``resume(runner, execution_id, ...)`` in :func:`hold`."""

    @functools.wraps(fn)
    async def resume(runner: Any, execution_id: str, *args: Any) -> T:
        store = runner.checkpointer
        if not isinstance(execution_id, str) or not execution_id:
            return await fn(runner, execution_id, *args)  # the verb reports it
        async with hold(store, execution_id, new_run=False, lease_seconds=lease_seconds_of(runner)):
            return await fn(runner, execution_id, *args)

    return resume


@contextlib.contextmanager
def recording_version(runner: Any) -> Iterator[None]:
    """Record ``runner``'s version on the run created inside (see :func:`acreate_run`)."""
    token = _starting_version.set(_app_version.of_runner(runner))
    try:
        yield
    finally:
        _starting_version.reset(token)
