"""Run control: cancel a run wherever it is, delete one (docs/design.md, "Cancel and delete").

``cancel(execution_id, reason=...)`` ends a run for good:

- a **queued** run never starts (a worker that claimed it finds it cancelled before its first
  step);
- a **paused** run's question is withdrawn: it leaves the inbox, and an answer given later is
  refused with :class:`~tether.errors.RunCancelledError`;
- a **running** run stops at its next step boundary, in this process or in a worker on another
  machine: the cancel takes the run's lease, so the drive's next commit is refused and the
  drive raises :class:`~tether.errors.RunCancelledError`. An ``async`` step is cancelled
  cooperatively (``asyncio.CancelledError`` at its current ``await``): at once in this
  process, within a third of the lease period in another (its heartbeat finds the lease gone).
  A synchronous step cannot be interrupted: it runs to its end and its commit is refused;
- a **failed** or crashed run is closed: it will not be resumed.

The run ends with a ``run_end`` row of status ``cancelled`` (who, when, why in its
``node_output``) and a ``cancelled`` entry in its audit trail, is refused by resume and stays
forkable.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .audit import VIAS
from .checkpoint import cancelled_error_of
from .engine.sync import run_sync
from .errors import (
    ConcurrentWriteError,
    ConfigurationError,
    RunCancelledError,
    RunNotFoundError,
    RunStatusChangedError,
)
from .store import ControlStore

if TYPE_CHECKING:
    from .store.base import Checkpointer, RunRecord

__all__ = ["CancelResult", "DeleteResult", "acancel", "adelete", "cancel", "delete"]

CONFIRM_STATUSES = ("paused", "running")
"""Statuses whose run the CLI and the web page delete only after a confirmation: someone
waits on its question, or a process is executing it."""


@dataclass(slots=True)
class CancelResult:
    """What :func:`cancel` did.

    Attributes:
        execution_id: the run.
        cancelled: ``True`` when this call cancelled it; ``False`` when it had already ended
            (``status`` says how) and nothing changed.
        status: the run's status now: ``cancelled``, or ``completed`` for a run that had
            finished before the cancel.
        status_before: its status when the cancel reached it (``queued``, ``running``,
            ``paused``, ``failed``, ``completed`` or ``cancelled``).
        withdrawn_checkpoint_id: for a paused run, the question withdrawn from the inbox.
        stopping: a live drive held the run (``status_before == "running"`` with an owner): it
            stops at its next step boundary.
        cancelled_by / reason / cancelled_at: as recorded on the run-end row (for a run
            cancelled before, the first cancel's).
        damaged: for a run whose stored state cannot be read (a damaged row), the error
            naming the run and the row's seq: the run was cancelled all the same, its rows
            left as they are, and the run-end row holds no state (``None`` otherwise).
    """

    execution_id: str
    cancelled: bool
    status: str
    status_before: str | None = None
    withdrawn_checkpoint_id: str | None = None
    stopping: bool = False
    cancelled_by: str | None = None
    reason: str | None = None
    cancelled_at: str | None = None
    damaged: str | None = None


def _control(store: Checkpointer) -> ControlStore:
    if not isinstance(store, ControlStore):
        raise ConfigurationError(
            f"{store!r} cannot cancel or delete runs; use a SQLiteCheckpointer or "
            "PostgresCheckpointer"
        )
    return store


def _open(store: str | Checkpointer | None) -> Checkpointer:
    from .connect import connect

    if store is None or isinstance(store, str):
        return connect(store)
    return store


async def acancel(
    execution_id: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    store: str | Checkpointer | None = None,
    via: str = "code",
) -> CancelResult:
    """Async twin of :func:`cancel`."""
    if not isinstance(execution_id, str) or not execution_id:
        raise RunNotFoundError(f"execution_id must be a non-empty str, got {execution_id!r}")
    if via not in VIAS:
        raise ConfigurationError(f"via must be one of {', '.join(VIAS)}, got {via!r}")
    st = _open(store)
    control = _control(st)
    for attempt in range(3):
        try:
            out = await control.acancel_run(execution_id, by=by, reason=reason, via=via)
            break
        except ConcurrentWriteError:  # a writer of the run's next row came first: read again
            if attempt == 2:
                raise
    if not out.found:
        raise RunNotFoundError(
            f"no run with execution_id {execution_id!r} in {st!r}", execution_id=execution_id
        )
    if out.cancelled:
        signal(execution_id)
        info = out.checkpoint.node_output if out.checkpoint is not None else {}
        return CancelResult(
            execution_id,
            True,
            "cancelled",
            status_before=out.status_before,
            withdrawn_checkpoint_id=out.withdrawn_checkpoint_id,
            stopping=out.status_before == "running" and out.owner_before is not None,
            cancelled_by=info.get("cancelled_by"),
            reason=info.get("reason"),
            cancelled_at=info.get("cancelled_at"),
            damaged=out.damaged,
        )
    result = CancelResult(
        execution_id, False, str(out.status_before), status_before=out.status_before
    )
    if out.status_before == "cancelled":
        err = await cancelled_error(st, execution_id)
        result.cancelled_by, result.reason = err.cancelled_by, err.reason
        result.cancelled_at = err.cancelled_at
    return result


def cancel(
    execution_id: str,
    *,
    reason: str | None = None,
    by: str | None = None,
    store: str | Checkpointer | None = None,
    via: str = "code",
) -> CancelResult:
    """Cancel a run, whatever it is doing (see the module docstring).

    Args:
        execution_id: the run.
        reason: why, recorded on the run-end row and in the run's ``error``.
        by: who, recorded likewise (the CLI passes the OS user or ``--by``).
        store: the run's store, or its URL (default: ``TETHER_DATABASE_URL``).
        via: the surface it came through, for the audit trail: ``code`` (default), ``cli``,
            ``web``, ``api`` or ``worker`` (:data:`tether.audit.VIAS`).

    Returns:
        A :class:`CancelResult`. Cancelling a run that already ended changes nothing: a
        ``completed`` run is reported ``completed``; a ``cancelled`` one as it was cancelled.

    Raises:
        RunNotFoundError: no run has this id.
        ConfigurationError: the store cannot cancel runs.
        StoreError: the store failed (nothing changed).
    """
    return run_sync(acancel(execution_id, reason=reason, by=by, store=store, via=via))


@dataclass(slots=True)
class DeleteResult:
    """What :func:`delete` removed.

    Attributes:
        execution_id: the run.
        status: its status when it was deleted.
        checkpoints: checkpoint rows removed.
        idempotency: idempotency-cache rows removed.
        pending: pending interrupts removed (1 for a paused run).
    """

    execution_id: str
    status: str
    checkpoints: int = 0
    idempotency: int = 0
    pending: int = 0


async def adelete(
    execution_id: str,
    *,
    store: str | Checkpointer | None = None,
    only_if_status: str | None = None,
) -> DeleteResult:
    """Async twin of :func:`delete`."""
    if not isinstance(execution_id, str) or not execution_id:
        raise RunNotFoundError(f"execution_id must be a non-empty str, got {execution_id!r}")
    st = _open(store)
    statuses = None if only_if_status is None else (only_if_status,)
    out = await _control(st).adelete_run(execution_id, statuses=statuses)
    if not out.found:
        raise RunNotFoundError(
            f"no run with execution_id {execution_id!r} in {st!r}", execution_id=execution_id
        )
    if only_if_status is not None and out.status != only_if_status:
        raise RunStatusChangedError(
            f"run {execution_id!r} is {out.status} now, not {only_if_status}; nothing was "
            "deleted (look at it again before deleting it)",
            execution_id=execution_id,
        )
    signal(execution_id)  # a drive of this process stops now rather than at its next commit
    return DeleteResult(
        execution_id, str(out.status), out.checkpoints, out.idempotency, out.pending
    )


def delete(
    execution_id: str,
    *,
    store: str | Checkpointer | None = None,
    only_if_status: str | None = None,
) -> DeleteResult:
    """Delete every row of one run (checkpoints, pending interrupt, idempotency cache, the run
    row) in one transaction, whatever its status. ``prune`` stays the bulk tool for finished
    runs; this is for one run you mean to remove now. A paused run's question goes with it; a
    running run's drive finds its run gone at its next commit (``LeaseLost``) and stops.
    Forks of the run are kept (they show ``parent pruned``).

    Args:
        execution_id: the run.
        store: the run's store, or its URL (default: ``TETHER_DATABASE_URL``).
        only_if_status: delete only while the run has this status (what a confirmation was
            given for): the CLI and the web page pass the status they showed.

    Returns:
        A :class:`DeleteResult` with the counts removed.

    Raises:
        RunNotFoundError: no run has this id.
        RunStatusChangedError: ``only_if_status`` was given and the run has another status
            (nothing deleted).
        ConfigurationError: the store cannot delete runs.
        StoreError: the store failed (nothing deleted).
    """
    return run_sync(adelete(execution_id, store=store, only_if_status=only_if_status))


async def cancelled_error(store: Checkpointer, execution_id: str) -> RunCancelledError:
    """The :class:`RunCancelledError` for a cancelled run, naming who, when and why from its
    ``cancelled`` run-end row."""
    return cancelled_error_of(execution_id, await store.aget_last(execution_id))


def refuse_if_cancelled(store: Checkpointer, run: RunRecord | None) -> None:
    """Refuse an answer (or any other step forward) for a run that was cancelled.

    Raises:
        RunCancelledError: ``run`` is cancelled; says who, when and why.
    """
    if run is not None and run.status == "cancelled":
        raise cancelled_error_of(run.execution_id, store.get_last(run.execution_id))


async def _is_cancelled(store: Checkpointer, execution_id: str) -> bool:
    try:
        run = await store.aget_run(execution_id)
    except Exception:
        return False
    return run is not None and run.status == "cancelled"


# --- drives of this process ---------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Watch:
    loop: asyncio.AbstractEventLoop
    task: asyncio.Task[Any]
    cancelled: bool = False


_watches: dict[str, list[_Watch]] = {}
_watches_lock = threading.Lock()


def watched() -> set[str]:
    """The runs drives of this process are executing right now."""
    with _watches_lock:
        return set(_watches)


def _stop(watch: _Watch) -> None:
    if not watch.task.done():
        watch.cancelled = True
        watch.task.cancel(msg="tether: run cancelled")


def signal(execution_id: str) -> None:
    """Stop the drives of this process executing the run (it was cancelled): their task is
    cancelled at its current ``await``. Safe from any thread."""
    with _watches_lock:
        watches = list(_watches.get(execution_id, ()))
    for watch in watches:
        if not watch.loop.is_closed():
            watch.loop.call_soon_threadsafe(_stop, watch)


@asynccontextmanager
async def stopping_on_cancel(store: Checkpointer, execution_id: str) -> AsyncIterator[None]:
    """Run one drive of the run so that a cancel stops it: registered for :func:`signal`,
    and an error the cancel caused (the task cancelled by :func:`signal`, the next commit
    refused because the cancel took the lease) becomes :class:`RunCancelledError`."""
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - verbs always run in a task
        yield
        return
    watch = _Watch(asyncio.get_running_loop(), task)
    with _watches_lock:
        _watches.setdefault(execution_id, []).append(watch)
    try:
        yield
    except asyncio.CancelledError:
        if not watch.cancelled:
            raise
        task.uncancel()
        raise await cancelled_error(store, execution_id) from None
    except ConcurrentWriteError as exc:  # LeaseLost included: the cancel took the lease
        if not await _is_cancelled(store, execution_id):
            raise
        raise await cancelled_error(store, execution_id) from exc
    finally:
        with _watches_lock:
            left = [w for w in _watches.get(execution_id, ()) if w is not watch]
            if left:
                _watches[execution_id] = left
            else:
                _watches.pop(execution_id, None)


def leases_lost(store: Any, execution_ids: list[str]) -> None:
    """Called by the heartbeat when some of these runs' leases were not renewed: stop the
    drives of this process whose run was cancelled (another process cancelled it)."""
    here = watched()
    for eid in execution_ids:
        if eid not in here:
            continue
        try:
            run = store.get_run(eid)
        except Exception:  # the store is away: the drive's next commit finds out instead
            run = None
        if run is not None and run.status == "cancelled":
            signal(eid)
