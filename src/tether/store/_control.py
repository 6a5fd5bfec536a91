"""Run control in the store: cancelling a run and deleting one (``docs/design.md``, "Cancel
and delete"). What both SQL backends share; the plans are :mod:`._control_operations`, the
statements each backend's SQL module (``LOCK_RUN``, ``CANCEL_RUN``...).

A **cancel** is one transaction, whatever the run is doing:

- the run row is locked (Postgres ``FOR UPDATE``; SQLite's write lock), so a step commit in
  flight either lands before it or is refused after it;
- a ``run_end`` row with status ``cancelled`` is appended, holding the state of the last
  committed step and, in ``node_output``, who cancelled, when and why;
- the run turns ``cancelled`` (finished) and its lease is taken from whoever held it, so the
  owner's next commit is fenced out (``LeaseLost``): a running run stops at its next step
  boundary, in this process or any other;
- its pending interrupt, if any, is deleted: the question leaves the inbox and a late answer
  finds nothing to answer;
- a ``cancelled`` entry (who, why, via, the question withdrawn) is appended to the run's audit
  trail (:mod:`tether.audit`).

A **delete** removes every row of one run (checkpoints, pending interrupt, idempotency cache,
audit trail, the run row) in one transaction, whatever its status.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, Required, TypedDict, Unpack, runtime_checkable

from ..audit import AuditEntry
from ..checkpoint import Checkpoint
from ..errors import CorruptRecordError
from ._leases import Fences
from .base import PendingInterrupt

__all__ = [
    "CANCELLABLE",
    "CancelOptions",
    "CancelOutcome",
    "ControlStore",
    "DeleteOutcome",
    "cancel_audit",
    "cancel_checkpoint",
    "cancel_error_text",
    "unfenced",
]

CANCELLABLE: Final = ("queued", "running", "paused", "failed")
"""Run statuses a cancel ends. A ``completed`` run has nothing left to stop; a ``cancelled``
one is reported as it is (a repeated cancel changes nothing)."""


@dataclass(slots=True)
class CancelOutcome:
    """What :meth:`ControlStore.cancel_run` found and did.

    Attributes:
        found: the run exists.
        status_before: its status when the cancel took its row (``None`` when not found).
        cancelled: this call cancelled it (``False``: it was already finished).
        owner_before: who held its lease at that moment (a live drive there stops at its
            next commit).
        checkpoint: the ``cancelled`` run-end row written (or, when it was already cancelled,
            ``None``).
        withdrawn_checkpoint_id: the question withdrawn from the inbox, if it was paused.
        damaged: for a run whose stored state could not be read, the error naming the row
            (the run-end row then holds no state); else ``None``.
    """

    found: bool
    status_before: str | None = None
    cancelled: bool = False
    owner_before: str | None = None
    checkpoint: Checkpoint | None = None
    withdrawn_checkpoint_id: str | None = None
    damaged: str | None = None


@dataclass(slots=True)
class DeleteOutcome:
    """What :meth:`ControlStore.delete_run` removed.

    Attributes:
        found: the run existed.
        status: its status when it was deleted.
        checkpoints: checkpoint rows removed.
        idempotency: idempotency-cache rows removed.
        pending: pending interrupts removed (0 or 1).
    """

    found: bool
    status: str | None = None
    checkpoints: int = 0
    idempotency: int = 0
    pending: int = 0


def cancel_error_text(by: str | None, reason: str | None, end_as: str = "cancelled") -> str:
    """The run's ``error`` text once ended: ``"Cancelled by <by>: <reason>"``, or for a
    deadline that fails the run ``"ApprovalTimeout: <reason>"``."""
    if end_as == "failed":
        return f"ApprovalTimeout: {reason}"
    who = f" by {by}" if by else ""
    return f"Cancelled{who}: {reason}" if reason else f"Cancelled{who}"


def cancel_checkpoint(
    execution_id: str,
    state: dict[str, Any],
    *,
    by: str | None,
    reason: str | None,
    at: _dt.datetime,
    status_before: str,
    end_as: str = "cancelled",
    damage: CorruptRecordError | None = None,
) -> Checkpoint:
    """The ``cancelled`` run-end row: ``state``, the state of the run's newest row (``{}`` for
    a run that never committed a step), and who, when, why in ``node_output``; for a run whose
    stored state could not be read (``damage``), ``{}`` and ``node_output["damaged"]``, the
    error's message, so the row never passes for the run's state."""
    output: dict[str, Any] = {
        "cancelled_by": by,
        "reason": reason,
        "cancelled_at": at.isoformat(),
        "status_before": status_before,
    }
    if damage is not None:
        output["damaged"] = damage.message
    return Checkpoint(
        execution_id=execution_id,
        node_id="run_end",
        step_type="run_end",
        status=end_as,
        state_snapshot=state,
        node_output=output,
    )


def cancel_audit(
    execution_id: str,
    *,
    by: str | None,
    reason: str | None,
    via: str,
    status_before: str,
    withdrawn: str | None,
    end_as: str = "cancelled",
) -> AuditEntry:
    """The audit-trail entry of a cancel (``action="cancelled"``), written in the cancel's
    transaction: who (``actor``), why (``note``), through what (``via``), the status it ended
    (``data``) and the question it withdrew (``checkpoint_id``)."""
    return AuditEntry(
        execution_id=execution_id,
        action="cancelled" if end_as == "cancelled" else "failed_by_deadline",
        via=via,
        actor=by,
        note=reason,
        data={"status_before": status_before},
        checkpoint_id=withdrawn,
    )


@contextlib.contextmanager
def unfenced(fences: Fences, execution_id: str) -> Iterator[None]:
    """Write the cancel's row unfenced even when a drive of this store instance fences the
    run (the cancel takes the run from whoever holds it); the fence is kept for that drive,
    whose next commit is then refused."""
    owner = fences.get(execution_id)
    fences.drop(execution_id)
    try:
        yield
    finally:
        if owner is not None:
            fences.set(execution_id, owner)


class CancelOptions(TypedDict, total=False):
    """The keyword arguments of :meth:`ControlStore.cancel_run` and its async twin."""

    by: Required[str | None]
    """Who cancels (an operator's name, or ``None``)."""
    reason: Required[str | None]
    """Why, as they said it (or ``None``)."""
    via: str
    """How the cancel came: ``code`` (default), ``cli``, ``web``, ``deadline``..."""
    end_as: str
    """``cancelled`` (default), or ``failed`` for a question whose deadline passed with
    ``on_timeout="fail"`` (the run-end row and the run then say ``failed``)."""
    only_if_pending: str | None
    """Act only while the run waits, unanswered and unclaimed, on the question recorded at this
    checkpoint (a deadline applied by a worker); otherwise nothing is written and
    ``cancelled`` is ``False``."""


@runtime_checkable
class ControlStore(Protocol):
    """The run-control capability of the bundled stores (``SQLiteCheckpointer``,
    ``PostgresCheckpointer``)."""

    def cancel_run(self, execution_id: str, **options: Unpack[CancelOptions]) -> CancelOutcome:
        """Cancel the run in one transaction (see the module docstring), with the options of
        :class:`CancelOptions`.

        Raises:
            StoreError: the store failed (nothing written).
        """

    async def acancel_run(
        self, execution_id: str, **options: Unpack[CancelOptions]
    ) -> CancelOutcome: ...

    def due_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]:
        """Unanswered, unclaimed pending interrupts whose deadline has passed, oldest due
        first, of runs of these runner names (``None``: any). A row that cannot be read
        whole (a ``due_at`` that is no time, context that is not JSON) is returned with
        :attr:`~tether.store.base.PendingInterrupt.damaged` naming its fields, never raised,
        so it cannot stop the others' deadlines (docs/design.md §12, "A damaged run")."""

    async def adue_interrupts(
        self, *, runner_names: Sequence[str] | None, limit: int
    ) -> builtins.list[PendingInterrupt]: ...

    def delete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome:
        """Delete every row of the run in one transaction; with ``statuses``, only while its
        status is one of them (else nothing is deleted and ``found`` is ``True`` with the
        status it has)."""

    async def adelete_run(
        self, execution_id: str, *, statuses: Sequence[str] | None = None
    ) -> DeleteOutcome: ...
