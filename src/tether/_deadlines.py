"""Approval deadlines, applied by workers (docs/design.md §12, "Approval deadlines").

``interrupt(reason, context, timeout_seconds=..., on_timeout=...)`` records the deadline on
the interrupted row (``node_input["deadline"]``) and, from it, when the question falls due on
the pending row (``pending_interrupts.due_at``). Every worker loop asks the store for due,
unanswered, unclaimed questions of the runners it serves and applies each one's
``on_timeout``:

- a ``Resume``: stored as the answer to that very question (``answer_interrupt`` bound to its
  ``checkpoint_id``), with an audit entry whose actor is ``deadline`` and via ``worker``; the
  worker's next claim then continues the run like any answered one;
- ``"fail"``: the run ends ``failed`` (``ApprovalTimeout: ...``), its question withdrawn;
- ``"cancel"``: the run is cancelled (its question withdrawn).

Each action is conditional on the question still being pending, unanswered and unclaimed, in
the statement that applies it, so an answer given at the last moment (or another worker
applying the same deadline) wins cleanly: a question is answered once.
"""

from __future__ import annotations

import logging
from typing import Any

from .audit import answer_entry
from .control import signal
from .interrupt import ANSWERED_BY, DEADLINE_KEY, NOTE, VIA, Resume
from .store import ControlStore
from .store.base import Checkpointer, PendingInterrupt

__all__ = ["DEADLINE_ACTOR", "apply_due"]

log = logging.getLogger("tether.worker")

DEADLINE_ACTOR = "deadline"
"""The actor the audit trail names for an answer or an end applied by a deadline."""

_WARNED: set[str] = set()  # runs whose damaged pending row was logged already


async def apply_due(store: Checkpointer, *, runner_names: list[str] | None, limit: int = 16) -> int:
    """Apply the deadlines that are due (see the module docstring).

    A due question whose pending row cannot be read whole (``damaged``) is left as it is,
    logged once: its deadline is not applied from a row tether cannot read.

    Returns:
        How many questions this call settled (others may have been settled meanwhile).
    """
    if not isinstance(store, ControlStore):
        return 0
    settled = 0
    for pending in await store.adue_interrupts(runner_names=runner_names, limit=limit):
        if pending.damaged:  # never act on a row not read whole; said once per process
            if pending.execution_id not in _WARNED:
                _WARNED.add(pending.execution_id)
                log.warning(
                    "run %s: its approval deadline is not applied: its pending row is damaged (%s)",
                    pending.execution_id,
                    pending.damaged,
                )
            continue
        try:
            settled += await _apply(store, pending)
        except Exception:  # one bad row never stops the others, nor the worker
            log.exception("run %s: applying its approval deadline failed", pending.execution_id)
    return settled


async def _apply(store: Any, pending: PendingInterrupt) -> int:
    eid, cid = pending.execution_id, pending.checkpoint_id
    cp = await store.aget_checkpoint(eid, cid)
    deadline = cp.node_input.get(DEADLINE_KEY) if cp is not None else None
    if cp is None or not isinstance(deadline, dict):
        return 0
    action = deadline.get("on_timeout", "fail")
    seconds = deadline.get("timeout_seconds")
    note = f"no answer to {pending.reason!r} within {seconds:g} s"
    if isinstance(action, dict) and isinstance(action.get("resume"), dict):
        given = Resume.from_dict(action["resume"])
        metadata = {**given.metadata, VIA: "worker", ANSWERED_BY: DEADLINE_ACTOR, NOTE: note}
        value = Resume(given.approved, given.data, metadata, checkpoint_id=cid)
        stored = store.answer_interrupt(
            eid, value.to_dict(), checkpoint_id=cid, audit=answer_entry(eid, value, cp)
        )
        if stored:
            log.info("run %s: %s; answered by its deadline", eid, note)
        return 1 if stored else 0
    end_as = "cancelled" if action == "cancel" else "failed"
    out = await store.acancel_run(
        eid,
        by=DEADLINE_ACTOR,
        reason=note,
        via="worker",
        end_as=end_as,
        only_if_pending=cid,
    )
    if out.cancelled:
        signal(eid)
        log.info("run %s: %s; %s by its deadline", eid, note, end_as)
    return 1 if out.cancelled else 0
